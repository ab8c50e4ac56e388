"""The compile check of an analysed file: one ``compile`` job after its capture, merged into it.

The job (``fxls.worker.compile``) gets each class's capture result (how it was built, the
sizes it ran with: :func:`as_built`), builds it again that way without capturing the document
again, and compiles its ``forward`` with TorchDynamo and an eager backend; each module of the analysis
gets ``ModuleResult.compile`` and its FX6xx diagnostics. It runs after the capture, so shapes
never wait for it, with the limits of a capture job of as many classes (once more with a
longer wall-clock limit when a busy machine stopped it, as captures are); a job that does not
end ``ok`` leaves each class a ``limit`` or ``failed`` check and an FX609 (information) saying
the check did not finish. No torch, no LSP.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import pickle
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from fxls.analysis import parse
from fxls.engine.analyze import (
    BUSY_RETRY_FACTOR,
    AnalysisRequest,
    EngineOptions,
    FileAnalysis,
    JobRunner,
    capture_job,
    class_requests,
    dedupe,
    job_context,
    job_limits,
    slowed_by_machine,
)
from fxls.protocol import catalogue
from fxls.protocol.codec import to_dict
from fxls.protocol.model import (
    CaptureJob,
    CaptureResult,
    CompileCheck,
    CompileJob,
    Diagnostic,
    Isolation,
    JobResult,
    Limits,
    ModuleResult,
    ResultKind,
    Span,
)

COMPILE_CODES = "FX6"
"""The prefix of the compile check's codes."""


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
    client: JobRunner,
    analysis: FileAnalysis,
    request: AnalysisRequest,
    options: EngineOptions,
    cache: CompileCache | None = None,
) -> None:
    """Run the compile check of ``analysis`` (made from ``request``) and merge it in:
    ``compile`` on each module, FX6xx in its and the file's diagnostics. Classes larger than
    ``max_params`` run on meta tensors (the check stops where a value is needed). With a
    ``cache``, a check of the same job (same text, workspace files, settings, worker and
    captured classes) is taken from it instead of sent again.
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
    key = None
    if cache is not None:
        context = await asyncio.to_thread(job_context, job, options, request.root, cache.worker)
        key = compile_key(context, job, settings, limits)
        kept = cache.get(key)
        if kept is not None:
            merge(analysis, kept)
            return
    result = await _send(client, job, limits, options.isolation, settings)
    if slowed_by_machine(result):  # a busy machine, not the class: once more, for longer
        longer = dataclasses.replace(limits, timeout_s=limits.timeout_s * BUSY_RETRY_FACTOR)
        result = await _send(client, job, longer, options.isolation, settings)
    if cache is not None and key is not None:
        cache.put(key, result)
    merge(analysis, result)


async def _send(
    client: JobRunner, job: CaptureJob, limits: Limits, isolation: Isolation, settings: CompileJob
) -> JobResult:
    """One compile job; a worker that fails to run it gives a ``worker_died`` result."""
    try:
        return await client.run(job, limits, isolation, compile=settings)
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        return JobResult(id=-1, kind="worker_died", message=f"{type(exc).__name__}: {exc}")


def compile_key(context: str, job: CaptureJob, settings: CompileJob, limits: Limits) -> str:
    """Everything a compile job's result depends on: the capture's context (fxls and worker
    versions, settings, the workspace's Python files by size and modification time), the
    job itself (the document's text, its classes), the classes as captured, the limits."""
    payload = json.dumps(
        [context, to_dict(job), to_dict(settings), to_dict(limits)],
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(payload.encode("utf-8", "surrogatepass")).hexdigest()


KEPT_KINDS: frozenset[ResultKind] = frozenset({"ok", "cpu_limit"})
"""Job outcomes a cache keeps: the same for the same job on any machine (the CPU limit is CPU
time, not wall clock). A wall-clock timeout or a worker that died may not happen again."""


@dataclass
class _Kept:
    kind: ResultKind
    message: str
    current_class: str | None
    modules: bytes
    """A pickle of the job's ``ModuleResult`` objects as the server decoded them (made and
    read in this process only); each hit gets its own copies."""


class CompileCache:
    """Compile jobs' results by :func:`compile_key`, least recently used first out, bounded in
    entries and bytes. ``worker`` names the worker (interpreter, torch version) for the key."""

    MAX_ENTRIES = 256
    MAX_BYTES = 4 * 1024 * 1024

    def __init__(self, worker: str = "") -> None:
        self.worker = worker
        self._entries: OrderedDict[str, _Kept] = OrderedDict()
        self._bytes = 0
        self.hits = 0
        """Checks taken from the cache (no job sent)."""
        self.jobs = 0
        """Compile jobs whose result was new to the cache."""

    def get(self, key: str) -> JobResult | None:
        kept = self._entries.get(key)
        if kept is None:
            return None
        self._entries.move_to_end(key)
        self.hits += 1
        modules = pickle.loads(kept.modules)
        payload = CaptureResult(modules=modules)
        found = JobResult(-1, kept.kind, message=kept.message, payload=payload)
        found.current_class = kept.current_class
        return found

    def put(self, key: str, result: JobResult) -> None:
        self.jobs += 1
        if result.kind not in KEPT_KINDS:
            return
        modules = result.payload.modules if result.payload is not None else []
        data = pickle.dumps(modules, protocol=pickle.HIGHEST_PROTOCOL)
        if len(data) > self.MAX_BYTES:
            return
        old = self._entries.pop(key, None)
        self._bytes -= len(old.modules) if old is not None else 0
        self._entries[key] = _Kept(result.kind, result.message, result.current_class, data)
        self._bytes += len(data)
        while self._entries and (
            self._bytes > self.MAX_BYTES or len(self._entries) > self.MAX_ENTRIES
        ):
            _, dropped = self._entries.popitem(last=False)
            self._bytes -= len(dropped.modules)

    def summary(self) -> dict[str, Any]:
        """What ``fxls/stats`` shows under ``compileCache``."""
        entries = len(self._entries)
        return {"hits": self.hits, "jobs": self.jobs, "entries": entries, "bytes": self._bytes}


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
        input_sizes=dict(module.input_sizes),
    )


LIMITS: dict[str, str] = {
    "timeout": "time limit",
    "cpu_limit": "time limit",
    "oom": "memory limit",
    "file_size_limit": "file size limit",
}
"""The limit a job that did not end ``ok`` hit, by its result kind."""


def merge(analysis: FileAnalysis, result: JobResult) -> None:
    """Put a compile job's result into ``analysis``. A job that hit one of its limits leaves
    each class a ``limit`` check naming it (the lens says ``compile check stopped: time
    limit``); any other failed job a ``failed`` check saying why. Either way each such class
    gets an FX609 (information) at its name: a check that did not finish is never silent."""
    if result.kind == "cancelled":
        return
    found: dict[str, ModuleResult] = {}
    if result.kind == "ok" and result.payload is not None:
        found = {m.name: m for m in result.payload.modules if m.compile is not None}
    added = []
    for module in analysis.modules:
        if not checked(module):
            continue
        got = found.get(module.name)
        if got is None:
            module.compile = _unfinished(result)
            extra = [_not_finished(analysis, module, result)]
        else:
            module.compile = got.compile
            extra = [d for d in got.diagnostics if d.code.startswith(COMPILE_CODES)]
        module.diagnostics = [
            d for d in module.diagnostics if not d.code.startswith(COMPILE_CODES)
        ] + extra
        added.extend(extra)
    kept = [d for d in analysis.diagnostics if not d.code.startswith(COMPILE_CODES)]
    analysis.diagnostics = dedupe(kept + added)


def _why(result: JobResult) -> str:
    if result.kind == "ok":
        return "the job returned no result for it"
    return result.message.strip() or result.kind.replace("_", " ")


def _unfinished(result: JobResult) -> CompileCheck:
    limit = LIMITS.get(result.kind)
    if limit is not None:
        return CompileCheck("limit", message=limit)
    return CompileCheck("failed", message=f"the check did not finish: {_why(result)}")


def _not_finished(analysis: FileAnalysis, module: ModuleResult, result: JobResult) -> Diagnostic:
    """FX609 at the name of ``module``'s class: its compile check ended without a result."""
    info = next((c for c in analysis.classes if c.name == module.name), None)
    span = info.name_span if info is not None else Span(module.line, 0, module.line, 0)
    limit = LIMITS.get(result.kind)
    reason = f"it hit its {limit}" if limit is not None else _why(result)
    message = catalogue.FX609(span, cls=module.name, reason=reason)
    return message.diagnostic(notebook=analysis.path.endswith(".ipynb"))
