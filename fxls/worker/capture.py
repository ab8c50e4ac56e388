"""Capture: execute a document, build its nn.Module classes, trace them, report what was found.

Entry point for the sandboxed child: ``run_capture(job, report_phase) -> CaptureResult``.
(Initial minimal version: executes the file and traces each requested class with defaults.)
"""

from __future__ import annotations

import linecache
import sys
import traceback
from collections.abc import Callable

from fxls.worker.protocol import CaptureJob, CaptureResult, ErrorInfo, ModuleResult, NodeInfo, Phase

PhaseReporter = Callable[[Phase, "str | None"], None]


def _error(kind: str, phase: Phase, exc: BaseException) -> ErrorInfo:
    return ErrorInfo(kind=kind, phase=phase, type=type(exc).__name__, message=str(exc),
                     traceback="".join(traceback.format_exception(exc)))


def _kind(exc: BaseException) -> str:
    if isinstance(exc, SystemExit):
        return "system_exit"
    if isinstance(exc, RecursionError):
        return "recursion"
    return "exception"


def run_capture(job: CaptureJob, report_phase: PhaseReporter) -> CaptureResult:
    import torch
    import torch.fx

    result = CaptureResult(torch_version=torch.__version__)
    sys.path[:0] = job.sys_path
    lines = job.source.splitlines(keepends=True)
    linecache.cache[job.path] = (len(job.source), None, lines, job.path)
    namespace: dict[str, object] = {"__name__": "__fxls__", "__file__": job.path}
    report_phase("import", None)
    try:
        exec(compile(job.source, job.path, "exec"), namespace)
    except BaseException as exc:  # noqa: BLE001 - user code may raise anything
        result.error = _error(_kind(exc), "import", exc)
        return result
    for req in job.classes:
        cls = namespace.get(req.name)
        if not (isinstance(cls, type) and issubclass(cls, torch.nn.Module)) or req.skip:
            continue
        mod = ModuleResult(name=req.name, line=req.line, status="failed")
        result.modules.append(mod)
        report_phase("init", req.name)
        try:
            module = cls()
        except BaseException as exc:  # noqa: BLE001
            mod.error = _error(_kind(exc), "init", exc)
            continue
        report_phase("trace", req.name)
        try:
            gm = torch.fx.symbolic_trace(module)
        except BaseException as exc:  # noqa: BLE001
            mod.error = _error(_kind(exc), "trace", exc)
            continue
        mod.status = "traced"
        mod.capture = "fx"
        mod.nodes = [NodeInfo(name=n.name, op=n.op, target=str(n.target)) for n in gm.graph.nodes]
    return result
