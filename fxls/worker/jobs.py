"""One runner per job kind (``JobRequest.kind``: ``capture``, ``rewrite``, ``compile``,
``preview``); the job child calls ``run_job``."""

from __future__ import annotations

from collections.abc import Callable

from fxls.protocol.model import CaptureResult, CompileJob, JobRequest, Phase, RewriteJob

PhaseReporter = Callable[[Phase, "str | None"], None]


def run_job(request: JobRequest, report: PhaseReporter) -> CaptureResult:
    """Run ``request`` in this (already sandboxed) process and return its result (to be sent:
    records of copied sub-blocks are sent as copies, see ``reuse.compact``). Each kind imports
    its runner here: a ``preview`` child, forked before the zygote imported the capture
    package, imports only what it uses."""
    if request.kind == "capture":
        from fxls.worker.capture.pipeline import run_capture_for_wire

        return run_capture_for_wire(request.capture, report)
    if request.kind == "preview":
        from fxls.worker.capture.preview import run_preview

        return run_preview(request.capture, report)
    if request.kind == "rewrite":
        from fxls.worker.rewrite.run import run_rewrite

        return run_rewrite(request.capture, request.rewrite or RewriteJob(), report)
    if request.kind == "compile":
        from fxls.worker.compile.run import run_compile

        return run_compile(request.capture, request.compile or CompileJob(), report)
    raise ValueError(f"unknown job kind {request.kind!r}")
