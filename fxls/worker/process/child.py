"""What a forked job child runs: isolate itself, capture, send one result frame, ``_exit``.

Frames on fd 3 (child -> zygote): a 4-byte big-endian length, UTF-8 JSON, then a 32-byte MAC.
``{"type": "isolation", "layers": [...]}`` first, then any number of
``{"type": "phase", "phase": ..., "class": ...}``, then exactly one of
``{"type": "result", "payload": CaptureResult}`` or ``{"type": "result_too_large", "bytes": n}``.
A failed set-up sends ``{"type": "setup_error", "message": ...}`` instead of everything else.

The MAC is keyed BLAKE2b over the frame's sequence number and its JSON, with a random key the
zygote made for this job only (``frame_mac``). The zygote drops a job whose frames do not
verify (``protocol_error``): user code that writes a frame to fd 3 and exits, or a library
that scribbles on fd 3, cannot pass a result off as the capture's. The key is in this
process's memory while user code runs in the same process, so code that looks for it (``gc``,
frames, ``ctypes``) can still forge frames for its own job: the MAC stops forgeries, not a
determined attacker, and everything in a frame is still checked as hostile by the zygote.
"""

from __future__ import annotations

import ctypes
import gc
import hashlib
import json
import os
import sys
import traceback
from typing import NoReturn

from fxls.protocol.codec import to_dict
from fxls.protocol.frames import MAX_RESULT_BYTES, frame_bytes, write_all
from fxls.protocol.model import CaptureResult, ErrorInfo, JobRequest, Phase
from fxls.worker.process import preload, sandbox

MAC_LEN = 32
JOB_GC_THRESHOLDS = (10_000, 10, 10)
"""The job child's collector thresholds (Python's are 700, 10, 10): a job lives for a fraction
of a second, and a capture allocates young objects by the hundred thousand; collected a tenth
as often, a ResNet-50 file's capture took 1-2 ms less (of ~55, alternating in forked
children), the Llama-7B-width job's peak memory the same (271 MiB)."""
EXIT_SETUP_FAILED = 70
EXIT_INTERNAL = 71


def frame_mac(key: bytes, seq: int, body: bytes) -> bytes:
    """The MAC of the ``seq``-th frame (0-based) of a job with JSON ``body``."""
    return hashlib.blake2b(seq.to_bytes(8, "big") + body, key=key, digest_size=MAC_LEN).digest()


def _json_bytes(message: object) -> bytes:
    """Compact UTF-8 JSON; lone surrogates (valid in a str, not in UTF-8) become ``?``."""
    text = json.dumps(message, separators=(",", ":"), ensure_ascii=False)
    return text.encode("utf-8", "replace")


class _FrameWriter:
    """Writes this job's MAC'd frames to one fd, numbering them."""

    def __init__(self, fd: int, key: bytes) -> None:
        self.fd = fd
        self._key = key
        self._seq = 0

    def send_body(self, body: bytes) -> None:
        mac = frame_mac(self._key, self._seq, body)
        self._seq += 1
        write_all(self.fd, frame_bytes(body + mac))

    def send(self, message: object) -> None:
        self.send_body(_json_bytes(message))


def _flush_all() -> None:
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            if stream is not None:
                stream.flush()
        except BaseException:  # user code may have replaced or broken it
            pass
    try:
        ctypes.CDLL(None).fflush(None)
    except BaseException:
        pass


def _encode_result(result: CaptureResult) -> bytes:
    try:
        return _json_bytes({"type": "result", "payload": to_dict(result)})
    except BaseException as exc:  # a capture bug must not lose the job
        failed = CaptureResult(
            torch_version=result.torch_version,
            error=ErrorInfo(
                kind="exception",
                phase="serialize",
                type=type(exc).__name__,
                message=str(exc)[:2000],
                traceback="".join(traceback.format_exception(exc))[-20000:],
            ),
        )
        return _json_bytes({"type": "result", "payload": to_dict(failed)})


def _imported(request: JobRequest, newest: str | None) -> list[str]:
    """What the job imported that the zygote may keep imported (``preload``); nothing when
    the job's code broke what that looks at (``sys.modules``, ``os.path``)."""
    try:
        return preload.imported_since(newest, request.isolation.preload, request.capture.module)
    except Exception:
        return []


def run_child(request: JobRequest, setup: sandbox.ChildSetup) -> NoReturn:
    """Entry point in the forked child; never returns."""
    code = 0
    writer = _FrameWriter(setup.result_w, setup.frame_key)
    setup.frame_key = b""
    if preload.LOADED:
        preload.drop_unusable(request.capture.sys_path)
    newest = preload.newest_module()
    try:
        try:
            layers = sandbox.setup_child(setup)
        except BaseException as exc:
            try:
                if sandbox.fds_moved():
                    writer.fd = sandbox.RESULT_FD
                writer.send({"type": "setup_error", "message": repr(exc)})
            finally:
                os._exit(EXIT_SETUP_FAILED)
        writer.fd = sandbox.RESULT_FD
        writer.send({"type": "isolation", "layers": layers})

        gc.set_threshold(*JOB_GC_THRESHOLDS)
        from fxls.worker.jobs import run_job

        def report_phase(phase: Phase, class_name: str | None) -> None:
            writer.send({"type": "phase", "phase": phase, "class": class_name})

        result = run_job(request, report_phase)
        if request.kind == "capture":
            result.imported = _imported(request, newest)
        _flush_all()
        report_phase("serialize", None)
        body = _encode_result(result)
        if len(body) > MAX_RESULT_BYTES:
            body = _json_bytes({"type": "result_too_large", "bytes": len(body)})
        writer.send_body(body)
    except BaseException:  # never fall back into the zygote's code
        code = EXIT_INTERNAL
        try:
            traceback.print_exc()
        except BaseException:
            pass
    _flush_all()
    os._exit(code)
