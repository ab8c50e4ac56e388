"""The compile check of an analysed file: one ``compile`` job after its capture, merged into it.

The job (``fxls.worker.compile``) gets each class's capture result (how it was built, the
sizes it ran with: :func:`as_built`), builds it again that way without capturing the document
again, and compiles its ``forward`` with TorchDynamo and an eager backend; each module of the analysis
gets ``ModuleResult.compile`` and its FX6xx diagnostics. It runs after the capture, so shapes
never wait for it, with the limits of a capture job of as many classes; a job that does not
end ``ok`` leaves each class a ``failed`` check and no diagnostic. No torch, no LSP.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from fxls.analysis import parse
from fxls.engine.analyze import (
    AnalysisRequest,
    EngineOptions,
    FileAnalysis,
    capture_job,
    class_requests,
    dedupe,
    job_limits,
)
from fxls.protocol.model import (
    CaptureJob,
    CompileCheck,
    CompileJob,
    Isolation,
    JobResult,
    Limits,
    ModuleResult,
    RewriteJob,
)

COMPILE_CODES = "FX6"
"""The prefix of the compile check's codes."""


class CompileRunner(Protocol):
    """What :func:`check_compile` needs from ``fxls.engine.workerclient.WorkerClient``."""

    async def run(
        self,
        job: CaptureJob,
        limits: Limits | None = None,
        isolation: Isolation | None = None,
        *,
        rewrite: RewriteJob | None = None,
        compile: CompileJob | None = None,
    ) -> JobResult: ...


def checked(module: ModuleResult) -> bool:
    """Whether the compile check runs on ``module``: its capture built it and knows its
    inputs (a class torch.fx could not trace included: TorchDynamo may compile it)."""
    return module.status != "skipped" and module.build is not None and bool(module.inputs)


def compilable(analysis: FileAnalysis) -> list[str]:
    """The classes of ``analysis`` a compile check can run on."""
    if analysis.syntax_error is not None or analysis.outcome == "cancelled":
        return []
    return [m.name for m in analysis.modules if checked(m)]


async def check_compile(
    client: CompileRunner,
    analysis: FileAnalysis,
    request: AnalysisRequest,
    options: EngineOptions,
) -> None:
    """Run the compile check of ``analysis`` (made from ``request``) and merge it in:
    ``compile`` on each module, FX6xx in its and the file's diagnostics. Classes larger than
    ``max_params`` run on meta tensors (the check stops where a value is needed).
    ``asyncio.CancelledError`` propagates (a newer document version cancels it)."""
    names = compilable(analysis)
    if not names:
        return
    parsed = parse(request.text)
    requests = await asyncio.to_thread(
        class_requests,
        parsed,
        request.path,
        request.root,
        request.extra_inputs,
        request.init_override,
    )
    requests = [r for r in requests if r.name in names]
    if not requests:
        return
    job = capture_job(
        request.path, request.text, requests, options, request.root or request.import_root
    )
    job.rules = None  # user rules change no build: the check leaves them out
    limits = job_limits(options.limits, len(requests))
    built = [as_built(m) for m in analysis.modules if m.name in names]
    settings = CompileJob(built, max_params=options.compile_max_params)
    try:
        result = await client.run(job, limits, options.isolation, compile=settings)
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        result = JobResult(id=-1, kind="worker_died", message=f"{type(exc).__name__}: {exc}")
    merge(analysis, result)


def as_built(module: ModuleResult) -> ModuleResult:
    """What the compile job needs of a class's capture: how it was built and fed (no nodes,
    diagnostics or notes), so the job builds it again without capturing it."""
    return ModuleResult(
        name=module.name,
        line=module.line,
        status=module.status,
        build=module.build,
        constructed=module.constructed,
        params=module.params,
        inputs=list(module.inputs),
        input_names=list(module.input_names),
        input_sizes=dict(module.input_sizes),
    )


def merge(analysis: FileAnalysis, result: JobResult) -> None:
    """Put a compile job's result into ``analysis`` (a failed job: each class a ``failed``
    check saying why, no diagnostic)."""
    if result.kind == "cancelled":
        return
    found: dict[str, ModuleResult] = {}
    if result.kind == "ok" and result.payload is not None:
        found = {m.name: m for m in result.payload.modules if m.compile is not None}
    why = result.message.strip() or result.kind.replace("_", " ")
    added = []
    for module in analysis.modules:
        if not checked(module):
            continue
        got = found.get(module.name)
        if got is None:
            module.compile = CompileCheck("failed", message=f"the check did not finish: {why}")
            continue
        module.compile = got.compile
        extra = [d for d in got.diagnostics if d.code.startswith(COMPILE_CODES)]
        module.diagnostics = [
            d for d in module.diagnostics if not d.code.startswith(COMPILE_CODES)
        ] + extra
        added.extend(extra)
    kept = [d for d in analysis.diagnostics if not d.code.startswith(COMPILE_CODES)]
    analysis.diagnostics = dedupe(kept + added)
