"""What a forked job child runs: isolate itself, capture, send one result frame, ``_exit``.

Frames on fd 3 (child -> zygote), all length-prefixed JSON:
``{"type": "isolation", "layers": [...]}`` first, then any number of
``{"type": "phase", "phase": ..., "class": ...}``, then exactly one of
``{"type": "result", "payload": CaptureResult}`` or ``{"type": "result_too_large", "bytes": n}``.
A failed set-up sends ``{"type": "setup_error", "message": ...}`` instead of everything else.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
import traceback
from typing import NoReturn

from fxls.protocol.codec import to_dict
from fxls.protocol.frames import MAX_RESULT_BYTES, frame_bytes, write_all, write_frame
from fxls.protocol.model import CaptureResult, ErrorInfo, JobRequest, Phase
from fxls.worker.process import sandbox

EXIT_SETUP_FAILED = 70
EXIT_INTERNAL = 71


def _flush_all() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # user code may have replaced or broken it
            pass
    try:
        ctypes.CDLL(None).fflush(None)
    except BaseException:
        pass


def _report_phase(phase: Phase, class_name: str | None) -> None:
    write_frame(sandbox.RESULT_FD, {"type": "phase", "phase": phase, "class": class_name})


def _encode_result(result: CaptureResult) -> bytes:
    try:
        return json.dumps(
            {"type": "result", "payload": to_dict(result)},
            separators=(",", ":"),
            ensure_ascii=False,
        ).encode()
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
        return json.dumps({"type": "result", "payload": to_dict(failed)}).encode()


def _send_body(body: bytes) -> None:
    write_all(sandbox.RESULT_FD, frame_bytes(body))


def run_child(request: JobRequest, plan: sandbox.ChildPlan) -> NoReturn:
    """Entry point in the forked child; never returns."""
    code = 0
    try:
        try:
            layers = sandbox.setup_child(plan)
        except BaseException as exc:
            try:
                fd = sandbox.RESULT_FD if sandbox.fds_moved() else plan.result_w
                write_frame(fd, {"type": "setup_error", "message": repr(exc)})
            finally:
                os._exit(EXIT_SETUP_FAILED)
        write_frame(sandbox.RESULT_FD, {"type": "isolation", "layers": layers})

        from fxls.worker.capture.jobs import run_job

        result = run_job(request, _report_phase)
        _flush_all()
        _report_phase("serialize", None)
        body = _encode_result(result)
        if len(body) > MAX_RESULT_BYTES:
            body = json.dumps({"type": "result_too_large", "bytes": len(body)}).encode()
        _send_body(body)
    except BaseException:  # never fall back into the zygote's code
        code = EXIT_INTERNAL
        try:
            traceback.print_exc()
        except BaseException:
            pass
    _flush_all()
    os._exit(code)
