"""The analysis engine shared by ``fxls check`` and the language server.

``analyze()`` turns one document version into a ``FileAnalysis``: it parses the text (AST,
directives), sends one capture job to the worker, and turns sandbox failures into FX5xx
diagnostics. When a job with several classes dies (timeout, crash, memory), the class that
was running gets the diagnostic and every other class is captured again in a job of its own,
so one bad class never hides the results of the others. With a cache (the language server's),
only the classes whose unit changed are captured (:mod:`fxls.engine.incremental`). No torch, no LSP
types here.
"""

from __future__ import annotations

import ast
import asyncio
import dataclasses
import hashlib
import json
import os
import re
import signal
import time
from dataclasses import dataclass, field
from typing import Literal, Protocol

from fxls import __version__
from fxls.analysis import ClassInfo, ParseResult, packages, parse, workspace
from fxls.analysis.notebook import percent_module
from fxls.engine import incremental
from fxls.protocol import catalogue
from fxls.protocol.codec import to_dict
from fxls.protocol.copies import expanded
from fxls.protocol.files import Refused, read_source
from fxls.protocol.model import (
    CaptureJob,
    CaptureResult,
    ClassRequest,
    CompileJob,
    Diagnostic,
    InputSpec,
    Isolation,
    JobResult,
    KnownCall,
    Limits,
    ModuleResult,
    RewriteJob,
    RulesFile,
    Span,
)

Provenance = Literal["worker", "stored", "preliminary"]
"""Where a :class:`FileAnalysis` comes from (``FileAnalysis.provenance``)."""


class Runner(Protocol):
    """What the engine needs from ``fxls.engine.workerclient.WorkerClient``."""

    async def run(self, job: CaptureJob, limits: Limits, isolation: Isolation) -> JobResult: ...


class JobRunner(Protocol):
    """What rewrite and compile jobs need from ``fxls.engine.workerclient.WorkerClient``: a
    job of any kind, with its rewrite request."""

    async def run(
        self,
        job: CaptureJob,
        limits: Limits | None = None,
        isolation: Isolation | None = None,
        *,
        rewrite: RewriteJob | None = None,
        compile: CompileJob | None = None,
    ) -> JobResult: ...


class Previewer(Protocol):
    """What :func:`preview` needs from ``fxls.engine.workerclient.WorkerClient``."""

    async def preview(
        self, job: CaptureJob, limits: Limits | None = None, isolation: Isolation | None = None
    ) -> JobResult: ...


@dataclass
class EngineOptions:
    limits: Limits = field(default_factory=Limits)
    isolation: Isolation = field(default_factory=Isolation)
    meta_init: bool = True
    symbolic: bool = True
    reuse_blocks: bool = True
    """Trace identical sub-blocks once and copy their nodes and shapes (the same results,
    in time independent of depth); off only to compare."""
    fake_cache: bool = False
    """torch's fake-tensor dispatch cache in symbolic shape runs; on only to compare (a job
    child starts with it empty, and filling it costs more than it saves)."""
    children_from_trace: bool = True
    """Record the instances and inputs of sub-blocks from the parent's FX trace (the same
    records as a second run of the parent's ``forward``); off only to compare."""
    eager_on_meta: bool = True
    """Run ``forward`` on meta tensors to compare it with the traced graph (FX109), on fake
    tensors only when that raises (the same findings); off only to compare."""
    parallel_retries: int = 1
    """How many single-class re-runs of one file may run at once after a job failed (one: the
    worker runs at most two jobs, so the other slot stays free for other files)."""
    max_failed_retries: int = 2
    """Single-class re-runs of one file that may hit a sandbox limit (time, memory, a crash)
    before the file's remaining classes are given up (FX510): a file full of classes that hang
    holds one worker slot for at most ``1 + max_failed_retries`` time-outs."""
    capture_budget: float = 3.0
    """Time limits of wall time that one analysis of a file may spend in the worker, all its
    jobs together (the first job and the single-class re-runs, failed or not). A re-run still
    going when it is spent is stopped, and the classes not captured by then get FX510: a file
    of classes that each take just under the limit and succeed would otherwise hold a worker
    slot for one time limit per class on every edit."""
    rules: RulesFile | None = None
    """The workspace's user rules (read as text; only the worker executes them)."""
    compile_check: bool = False
    """Run the compile check (FX6xx, :mod:`fxls.engine.compilecheck`) after the capture
    (``fxls.compileCheck.enabled``)."""
    compile_max_params: int = 20_000_000
    """Classes of more parameters are compile-checked on meta tensors, not built on the CPU
    (``fxls.codeActions.maxParams``)."""


@dataclass
class FileAnalysis:
    path: str
    version: int | None
    modules: list[ModuleResult] = field(default_factory=list)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    """All diagnostics (file level and per module), deduplicated and sorted by position."""
    syntax_error: Diagnostic | None = None
    isolation: list[str] = field(default_factory=list)
    duration_s: float = 0.0
    outcome: str = "ok"
    """``ok`` or the first non-ok sandbox result kind (``timeout``, ``oom``...)."""
    classes: list[ClassInfo] = field(default_factory=list)
    """The AST view of the document, for features that need class and forward ranges."""
    torch_version: str | None = None
    rules_too_slow: bool = False
    """A job's rules file took longer than its time to load (``CaptureResult.rules_too_slow``)."""
    provenance: Provenance = "worker"
    """Where it comes from: the worker's capture (``worker``), the store of an earlier session
    (``stored``, :mod:`fxls.engine.store`) or a ``preview`` job (``preliminary``,
    :func:`preview`: shapes at example sizes from one run on meta tensors, no diagnostics).
    The last two are shown until the worker's capture of the same text replaces them, and are
    never stored."""
    evidence_complete: bool = True
    """Every file of the workspace was read for calls of the classes (False while the first
    scan of a large workspace runs: the analysis is worth repeating when it is done)."""

    @property
    def stored(self) -> bool:
        """Read from the store of an earlier session."""
        return self.provenance == "stored"

    @property
    def provisional(self) -> bool:
        """Shown only until the worker's capture of the same text replaces it."""
        return self.provenance != "worker"

    def module(self, name: str) -> ModuleResult | None:
        return next((m for m in self.modules if m.name == name), None)

    def expand(self) -> None:
        """Expand the records of copied sub-blocks (``fxls.protocol.copies.expanded``) that
        ``analyze`` kept as copies for an ``AnalysisRequest`` with ``copies_kept``; nothing
        to do for one without. Features read whole records only."""
        self.modules = [expanded(m) for m in self.modules]

    @property
    def has_errors(self) -> bool:
        return any(d.severity == "error" for d in self.diagnostics)


_RETRYABLE = frozenset(
    {
        "timeout",
        "oom",
        "cpu_limit",
        "file_size_limit",
        "killed",
        "signal",
        "exit",
        "system_exit",
        "exception",
        "recursion",
        "protocol_error",
        "result_too_large",
    }
)
"""Job outcomes after which the other classes of the file are worth capturing one by one."""

_EXPENSIVE = frozenset({"timeout", "oom", "cpu_limit", "file_size_limit", "killed", "signal"})
"""Outcomes that cost a whole limit (or a crash) each; re-runs that end so are capped."""


def _signal_name(num: int | None) -> str:
    if num is None:
        return "a signal"
    try:
        return f"signal {num} ({signal.Signals(num).name})"
    except ValueError:
        return f"signal {num}"


def _seconds(value: float) -> str:
    return f"{value:g} s"


def failure_diagnostic(
    result: JobResult, limits: Limits, cls: str, span: Span, *, notebook: bool = False
) -> Diagnostic:
    """A non-ok JobResult -> the FX5xx diagnostic on ``span`` (``cls`` names the culprit;
    ``notebook``: in a notebook's words)."""
    kind = result.kind
    detail = result.message.strip()
    data = {"kind": kind, "phase": result.phase, "class": result.current_class}
    msg: catalogue.Message
    if kind == "timeout":
        wall = result.wall_limit_s or limits.timeout_s
        limit = f"{_seconds(wall)} of wall-clock time"
        msg = catalogue.FX501(span, cls=cls, limit=limit, why=_why_slow(result))
    elif kind == "oom":
        msg = catalogue.FX502(span, cls=cls, limit=f"{limits.memory_mb} MB")
    elif kind == "cpu_limit":
        msg = catalogue.FX506(span, cls=cls, limit=_seconds(result.cpu_limit_s or limits.cpu_s))
    elif kind == "file_size_limit":
        msg = catalogue.FX507(span, cls=cls, limit=f"{limits.file_size_mb} MB")
    elif kind in ("exit", "system_exit"):
        code = f"exit code {result.exit_code}" if result.exit_code is not None else "exit"
        msg = catalogue.FX504(span, cls=cls, reason=detail or code)
    elif kind == "result_too_large":
        msg = catalogue.FX505(span, cls=cls, reason=detail or "over the size limit")
    elif kind == "protocol_error":
        msg = catalogue.FX509(span, cls=cls, reason=detail or "unreadable result")
    elif kind in ("signal", "killed"):
        msg = catalogue.FX503(
            span, cls=cls, reason=detail or f"killed by {_signal_name(result.signal)}"
        )
    elif kind in ("exception", "recursion") and result.phase == "trace":
        msg = catalogue.FX199(span, cls=cls, error=detail or kind)
    elif kind in ("exception", "recursion") and result.phase == "init":
        msg = catalogue.FX401(span, cls=cls, error=detail or kind, example="...")
    elif kind in ("exception", "recursion") and result.phase == "import":
        msg = catalogue.FX404(span, error=detail or kind)
    elif kind in ("exception", "recursion"):
        msg = catalogue.FX503(span, cls=cls, reason=detail or kind)
    else:  # worker_died, sandbox_setup and anything new
        msg = catalogue.FX508(span, reason=detail or kind.replace("_", " "))
    return msg.diagnostic(data, notebook=notebook)


def _why_slow(result: JobResult) -> str:
    """What the CPU time says about a wall-clock time-out (FX501's ``why``)."""
    cpu, wall = result.cpu_s, result.duration_s
    if wall <= 0:
        return ""
    if cpu < COMPUTING_SHARE * wall:
        return (
            f" and used only {cpu:.1f} s of CPU: it was waiting (a `sleep`, `input()`, a lock "
            "or a slow file system?)"
        )
    return f" (tried twice; it used {cpu:.1f} s of CPU): the machine is too busy"


def _file_span(text: str) -> Span:
    first = text.split("\n", 1)[0].rstrip("\r")
    return Span(1, 0, 1, len(first))


def diagnostic_key(d: Diagnostic) -> tuple[object, ...]:
    """What makes two diagnostics the same one (code, span, message), for :func:`dedupe`."""
    s = d.span
    return (d.code, s.line, s.col, s.end_line, s.end_col, d.message)


def dedupe(diagnostics: list[Diagnostic]) -> list[Diagnostic]:
    """Drop exact duplicates and sort by position, then code."""
    seen: set[tuple[object, ...]] = set()
    out: list[Diagnostic] = []
    for d in diagnostics:
        key = diagnostic_key(d)
        if key not in seen:
            seen.add(key)
            out.append(d)
    out.sort(key=lambda d: (d.span.line, d.span.col, d.code))
    return out


def merge_per_class(loose: list[Diagnostic], modules: list[ModuleResult]) -> list[Diagnostic]:
    """``loose`` and the modules' diagnostics, where the ones several classes report the same
    way at one place are one diagnostic naming the classes (each head model of a library file
    runs its base model, and a plain trace of each stops at the same line of it). The same
    means: code, severity and span, the message with the class's name, and the fix but for
    which capture worked around the failure (:func:`catalogue.worked_around`). The modules
    keep their own (hovers, code lenses and code actions read those)."""
    out = list(loose)
    groups: dict[tuple[object, ...], list[tuple[str, Diagnostic]]] = {}
    for m in modules:
        for d in m.diagnostics:
            named = f"`{m.name}`"
            if d.message.count(named) != 1:
                out.append(d)
                continue
            key = (d.code, d.severity, *_where(d.span), d.message.replace(named, "\0"))
            groups.setdefault((*key, _fix_but_capture(d)), []).append((m.name, d))
    for members in groups.values():
        found = list(dict.fromkeys(name for name, _ in members))
        out.append(members[0][1] if len(found) < 2 else _merged(members, found))
    return out


def _fix_but_capture(d: Diagnostic) -> str | None:
    used = d.data.get("worked_around")
    note = catalogue.worked_around(str(used)) if used is not None else None
    if d.fix is None or note is None or not d.fix.startswith(note):
        return d.fix
    return d.fix[len(note) :]


def _merged(members: list[tuple[str, Diagnostic]], found: list[str]) -> Diagnostic:
    name, first = members[0]
    fix = first.fix
    used: dict[str, list[str]] = {}
    for cls, d in members:
        used.setdefault(str(d.data.get("worked_around")), []).append(cls)
    if len(used) > 1 and fix is not None:
        fix = catalogue.worked_around_each(used) + (_fix_but_capture(first) or "")
    related = {(*_where(r.span), r.message): r for _, d in members for r in d.related}
    data = {**first.data, "classes": found}
    if len(used) > 1:
        data.pop("worked_around", None)
    return dataclasses.replace(
        first,
        message=first.message.replace(f"`{name}`", catalogue.names(found)),
        fix=fix,
        related=list(related.values()),
        data=data,
    )


def _where(span: Span) -> tuple[int, int, int, int]:
    return (span.line, span.col, span.end_line, span.end_col)


_TB_LINE = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+)')


_ENVIRONMENT_CODES = frozenset({"FX409", "FX410", "FX411", "FX413"})
"""Import failures the worker reports as the environment's, not the model's (warnings)."""


def _import_error_diagnostic(capture: CaptureResult, path: str, text: str) -> Diagnostic | None:
    """FX404 for a file that failed to execute, unless the worker already reported why (an
    error, or a warning that the environment stopped it: FX409 a module the interpreter lacks,
    FX410 a script that exits, FX411 a native library, FX413 an installed package that raised)."""
    error = capture.error
    if error is None or any(
        d.severity == "error" or d.code in _ENVIRONMENT_CODES for d in capture.diagnostics
    ):
        return None
    line = 0
    for m in _TB_LINE.finditer(error.traceback):
        if m.group("file") == path:
            line = int(m.group("line"))
    lines = text.split("\n")
    if 1 <= line <= len(lines):
        raw = lines[line - 1].rstrip("\r")
        start = len(raw) - len(raw.lstrip())
        span = Span(line, start, line, len(raw.rstrip()))
    else:
        span = _file_span(text)
    failed = catalogue.FX404(span, error=f"{error.type}: {error.message}")
    return failed.diagnostic(notebook=path.endswith(".ipynb"))


def _failed_module(info: ClassInfo, diagnostic: Diagnostic) -> ModuleResult:
    return ModuleResult(
        name=info.name,
        line=info.line,
        status="failed",
        diagnostics=[diagnostic],
    )


def build_requests(
    classes: list[ClassInfo],
    extra_inputs: dict[str, list[InputSpec]] | None = None,
    init_override: dict[str, str] | None = None,
) -> list[ClassRequest]:
    """ClassRequests for ``classes``; CLI inputs/init override directives and annotations."""
    requests = []
    for info in classes:
        req = info.request()
        for spec in (extra_inputs or {}).get(info.name, []):
            req.inputs = [s for s in req.inputs if s.name != spec.name] + [spec]
        if init_override and info.name in init_override:
            req.init = init_override[info.name]
            req.init_line = None
        requests.append(req)
    return requests


def percent_cells(job: CaptureJob) -> CaptureJob:
    """A ``.py`` file in percent format (``# %%`` cells) is captured as a notebook: the same
    lines, with the top-level statements that are not model code left out
    (:func:`fxls.analysis.notebook.percent_module`), and the classes before a cell that raises
    still captured. Fixes are computed on the same run; an edit of a line left out is refused
    (:func:`fxls.engine.fixes.kept_lines_only`)."""
    if not job.path.endswith(".py"):
        return job
    module = percent_module(job.source)
    if module is None:
        return job
    return dataclasses.replace(job, source=module.text, notebook=True)


def capture_job(
    path: str,
    text: str,
    requests: list[ClassRequest],
    options: EngineOptions,
    root: str | None = None,
) -> CaptureJob:
    """The job that captures ``requests`` of one document version: it runs as the module
    Python would import the file as (``packages.locate``), with that module's root and the
    workspace root on ``sys.path``. The job names the file by its absolute path: the worker
    runs in another folder, and what it may read is decided from that path."""
    path = os.path.abspath(path)
    where = packages.locate(path, text, root)
    sys_path = [where.root] + ([root] if root and root != where.root else [])
    return CaptureJob(
        path=path,
        source=text,
        classes=requests,
        sys_path=sys_path,
        module=where.name,
        module_is_package=where.is_package,
        meta_init=options.meta_init,
        symbolic=options.symbolic,
        reuse_blocks=options.reuse_blocks,
        fake_cache=options.fake_cache,
        children_from_trace=options.children_from_trace,
        eager_on_meta=options.eager_on_meta,
        rules=_rules_for(path, options),
        notebook=path.endswith(".ipynb"),
    )


def _rules_for(path: str, options: EngineOptions) -> RulesFile | None:
    """The rules the job carries; named as the job's own path when the document is the
    rules file (the worker then reports why it does not load)."""
    rules = options.rules
    if rules is not None and is_rules_file(path, options):
        return RulesFile(path=path, source=rules.source)
    return rules


RULES_MAX_BYTES = 1024 * 1024
"""A larger rules file is not read."""


def rules_path(root: str | None, name: str) -> str | None:
    """The rules file ``name`` (relative to the workspace ``root``), None when there is no
    root or name, or when ``name`` leads out of the workspace."""
    if not root or not name.strip():
        return None
    base = os.path.abspath(root)
    path = os.path.normpath(os.path.join(base, name.strip()))
    try:
        inside = os.path.commonpath([base, path]) == base
    except ValueError:
        return None
    return path if inside else None


def read_rules(path: str | None, text: str | None = None) -> RulesFile | Refused | None:
    """The rules file at ``path`` as text (``text`` when the editor has it open); None when
    there is no rules file, :class:`~fxls.protocol.files.Refused` when it cannot be used (not a
    regular file, a link, over RULES_MAX_BYTES), for the caller to say so. The text is only
    read here: the worker executes it. Reads the disk: never call it on the event loop."""
    if path is None:
        return None
    if text is None:
        found = read_source(path, cap=RULES_MAX_BYTES, errors="replace")
        if isinstance(found, Refused):
            return None if found.kind == "missing" else found
        text = found
    return RulesFile(path=path, source=text)


def is_rules_file(path: str, options: EngineOptions) -> bool:
    """Whether ``path`` is the rules file of ``options``."""
    rules = options.rules
    return rules is not None and os.path.abspath(rules.path) == os.path.abspath(path)


class SlowRules:
    """Rules file texts that took longer than their time to load (``FileAnalysis.rules_too_slow``):
    left out of the jobs of other files until the text changes (each job would wait for them
    again); the rules file's own job keeps them (its FX361)."""

    def __init__(self) -> None:
        self._texts: set[str] = set()

    def add(self, rules: RulesFile | None) -> bool:
        """Remember ``rules`` as too slow; True the first time for its text."""
        if rules is None:
            return False
        digest = _digest(rules.source)
        if digest in self._texts:
            return False
        self._texts.add(digest)
        return True

    def options_for(self, options: EngineOptions, path: str | None) -> EngineOptions:
        """``options`` for the job of ``path``: without rules known to be too slow."""
        rules = options.rules
        if (
            rules is None
            or not self._texts
            or (path is not None and is_rules_file(path, options))
            or _digest(rules.source) not in self._texts
        ):
            return options
        return dataclasses.replace(options, rules=None)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def class_requests(
    parsed: ParseResult,
    path: str,
    root: str | None = None,
    extra_inputs: dict[str, list[InputSpec]] | None = None,
    init_override: dict[str, str] | None = None,
) -> list[ClassRequest]:
    """The requests :func:`analyze` sends for every class of ``parsed``: directives, CLI
    overrides and the calls found in the workspace (for jobs that must capture the same)."""
    requests = build_requests(parsed.classes, extra_inputs, init_override)
    _add_call_sites(requests, root, path, parsed.defined)
    return requests


def _add_call_sites(
    requests: list[ClassRequest],
    root: str | None,
    path: str,
    defined: set[str],
    stats: workspace.Stats | None = None,
) -> bool:
    """Calls of the classes without an ``init`` directive in other files of the workspace, as
    far as the workspace has been read (never waiting for a scan of it). Returns whether every
    file was read: when not, the result is refined once the scan is done."""
    names = [r.name for r in requests if not r.init and not r.skip]
    if not names:
        return True
    try:
        found, complete = workspace.known_call_sites(root, path, names, defined, stats)
    except Exception:  # evidence is a bonus: an unreadable workspace changes nothing
        return True
    for req in requests:
        for site in found.get(req.name, []):
            where = os.path.relpath(site.path, root) if root else site.path
            req.call_sites.append(KnownCall(site.init, f"{where}:{site.line}"))
    return complete


@dataclass(frozen=True)
class AnalysisRequest:
    """One document version to analyse, and what the caller pins for it."""

    path: str
    text: str
    version: int | None = None
    root: str | None = None
    """The workspace root: on the job's ``sys.path``, scanned for call sites and cache keys."""
    import_root: str | None = None
    """On the job's ``sys.path`` when there is no workspace ``root`` (``fxls check``: the
    project's folder), without the workspace scan a root brings."""
    only: list[str] | None = None
    """Capture only these classes (``fxls graph``, ``fxls check --class``)."""
    extra_inputs: dict[str, list[InputSpec]] | None = None
    """Inputs given on the command line, over directives."""
    init_override: dict[str, str] | None = None
    """Constructor arguments given on the command line, over directives."""
    copies_kept: bool = False
    """Leave the records of copied sub-blocks as the copies the worker sent them as, for
    :meth:`FileAnalysis.expand` to expand later: a server publishes the diagnostics, which
    read no node record, before it spends that time (14 ms for a 48-block GPT)."""


async def analyze(
    client: Runner,
    request: AnalysisRequest,
    options: EngineOptions | None = None,
    cache: incremental.CaptureCache | None = None,
    worker: str = "",
) -> FileAnalysis:
    """Analyze one document version through the worker. Never raises for user code problems
    (those become diagnostics); ``asyncio.CancelledError`` propagates.

    With a ``cache``, only the classes whose unit changed (:mod:`fxls.engine.incremental`) are
    captured; the others come from the cache, moved to their current lines. ``worker`` names
    the worker (interpreter, torch version) for the cache keys."""
    options = options or EngineOptions()
    path, text, version, root, only = (
        request.path,
        request.text,
        request.version,
        request.root,
        request.only,
    )
    started = time.monotonic()
    parsed = parse(text)
    result = FileAnalysis(path=path, version=version, classes=parsed.classes)
    if parsed.syntax_error is not None:
        err = parsed.syntax_error
        invalid = catalogue.FX404(err.span, error=f"SyntaxError: {err.message}")
        result.syntax_error = invalid.diagnostic(notebook=path.endswith(".ipynb"))
        result.diagnostics = [result.syntax_error]
        result.outcome = "syntax_error"
        result.duration_s = time.monotonic() - started
        return result

    classes = _with_their_users(text, parsed.classes, only)
    diagnostics = list(parsed.diagnostics)
    if classes or is_rules_file(path, options):
        requests = build_requests(classes, request.extra_inputs, request.init_override)
        stats = workspace.Stats()  # each workspace file looked at once per analysis
        # reading the workspace's files blocks: in a thread, so the server keeps answering
        result.evidence_complete = await asyncio.to_thread(
            _add_call_sites, requests, root, path, parsed.defined, stats
        )
        job = percent_cells(capture_job(path, text, requests, options, root or request.import_root))
        active = sum(1 for r in job.classes if not r.skip)
        budget = Budget(options, active)
        run = _Run(client, job, classes, text, options, result, diagnostics, budget, parsed.tree)
        if cache is not None and only is None and not is_rules_file(path, options):
            context = await asyncio.to_thread(job_context, job, options, root, worker, stats)
            await _incremental(run, cache, context)
        else:
            await _capture(run)
    if only is not None:
        result.modules = [m for m in result.modules if m.name in only]
    result.diagnostics = dedupe(merge_per_class(diagnostics, result.modules))
    if not request.copies_kept:
        result.expand()
    result.duration_s = time.monotonic() - started
    return result


def _with_their_users(
    text: str, classes: list[ClassInfo], only: list[str] | None
) -> list[ClassInfo]:
    """The classes to capture for the ``only`` ones: with the classes captured together with
    them (their unit, :func:`fxls.engine.incremental.units_of`), so that a block its parents
    build is captured from their instance, as in a capture of the whole file (alone, it gets
    a guessed configuration). All classes when ``only`` is None or the units cannot be read."""
    if only is None:
        return classes
    units = incremental.units_of(text, build_requests(classes), "")
    if units is None:
        return classes
    mates = {name for unit in units if set(unit.classes) & set(only) for name in unit.classes}
    return [c for c in classes if c.name in mates or c.name in only]


PREVIEW_LIMIT_S = 5.0
"""A preview job's wall-clock and CPU limit (at most the capture's): later than that, the
capture it stands in for is near."""


async def preview(
    client: Previewer, request: AnalysisRequest, options: EngineOptions | None = None
) -> FileAnalysis | None:
    """A first answer for a worker that is still importing what captures need: one ``preview``
    job (``fxls.worker.capture.preview``: each class built on meta, ``forward`` run once on
    meta tensors at the example sizes, the calls the document makes recorded), marked
    ``preliminary``, with no diagnostics. None when it has no shapes to show (a syntax error,
    no classes, a failed job, or no class that ran): the capture says why."""
    options = options or EngineOptions()
    parsed = parse(request.text)
    classes = [c for c in parsed.classes if request.only is None or c.name in request.only]
    if parsed.syntax_error is not None or not classes:
        return None
    requests = build_requests(classes, request.extra_inputs, request.init_override)
    job = percent_cells(
        capture_job(
            request.path, request.text, requests, options, request.root or request.import_root
        )
    )
    limits = dataclasses.replace(
        options.limits,
        timeout_s=min(options.limits.timeout_s, PREVIEW_LIMIT_S),
        cpu_s=min(options.limits.cpu_s, PREVIEW_LIMIT_S),
    )
    result = await client.preview(job, limits, options.isolation)
    capture = result.payload
    if result.kind != "ok" or capture is None or not any(m.nodes for m in capture.modules):
        return None
    return FileAnalysis(
        path=request.path,
        version=request.version,
        modules=[expanded(m) for m in capture.modules],
        classes=parsed.classes,
        isolation=list(result.isolation),
        duration_s=result.duration_s,
        torch_version=capture.torch_version,
        provenance="preliminary",
    )


@dataclass
class _Run:
    """One analysis in progress: what each of its steps reads, and the result they fill."""

    client: Runner
    job: CaptureJob
    classes: list[ClassInfo]
    text: str
    options: EngineOptions
    result: FileAnalysis
    diagnostics: list[Diagnostic]
    budget: Budget
    tree: ast.Module | None = None
    """The text's syntax tree (from :func:`parse`)."""
    sized_as: int = 0
    """The first job of the run gets the limits of at least this many classes: the classes a
    job out of CPU time left get the limits of that job (its import and the classes it kept
    used part of them; smaller limits would run out sooner)."""


class Budget:
    """What one analysis of a file may still spend in the worker: ``capture_budget`` CPU
    limits of CPU time, all its jobs together (counted from what each job reports, so the
    same on a busy machine as on an idle one), with a wall-clock backstop of as many wall
    limits from when it is made."""

    GRACE_S = 0.5
    """How long a re-run may go past the wall-clock backstop before it is stopped: time enough
    for a job that hits its own limit right at the end to be reported as such."""

    def __init__(self, options: EngineOptions, classes: int = 1) -> None:
        limits = job_limits(options.limits, classes)  # the first job's, for many classes
        self.seconds = options.capture_budget * limits.cpu_s
        self.limit = limits.cpu_s
        self.used = 0.0
        self.wall = options.capture_budget * limits.timeout_s
        self.wall_limit = limits.timeout_s
        self.deadline = time.monotonic() + self.wall

    def spend(self, result: JobResult) -> None:
        """Count the CPU time a finished job used."""
        self.used += max(0.0, result.cpu_s)

    def left(self) -> float:
        """CPU seconds left (none once the wall-clock backstop has passed)."""
        if time.monotonic() >= self.deadline:
            return 0.0
        return self.seconds - self.used

    def wall_left(self) -> float:
        """Seconds a running re-run may still take before it is stopped."""
        return self.deadline + self.GRACE_S - time.monotonic()

    def spent(self) -> str:
        """Why the classes left get FX510 once the budget is spent."""
        if self.used < self.seconds:  # the wall-clock backstop (captures that mostly waited)
            return (
                f"the captures of this file already took {_seconds(self.wall)} "
                f"({self.wall / self.wall_limit:g} × the time limit of {_seconds(self.wall_limit)})"
            )
        return (
            f"the captures of this file already used {_seconds(self.seconds)} of CPU time "
            f"({self.seconds / self.limit:g} × the CPU limit of {_seconds(self.limit)})"
        )


BUSY_RETRY_FACTOR = 2.0
"""A job stopped by the wall clock while it was computing runs once more with this many times
its wall-clock limit (its CPU limit unchanged)."""

COMPUTING_SHARE = 0.1
"""A job whose CPU time is at least this share of its wall time was computing, not waiting."""


def slowed_by_machine(result: JobResult) -> bool:
    """A wall-clock time-out of a job that computed without reaching its CPU limit: the machine
    was busy (a wait — ``sleep``, ``input()``, a lock — uses no CPU and is not retried)."""
    return (
        result.kind == "timeout"
        and result.duration_s > 0
        and result.cpu_s >= COMPUTING_SHARE * result.duration_s
    )


CLASSES_PER_LIMIT = 8
"""A job of more classes than this gets one more CPU (and wall-clock) limit per as many, at
most ``MAX_LIMITS_PER_JOB``: a library file of 27 blocks takes ~9.5 s of CPU in one job, which
sat on the edge of one limit (a single class re-run always gets one)."""
MAX_LIMITS_PER_JOB = 3


def job_limits(limits: Limits, classes: int) -> Limits:
    """The limits of a job that captures ``classes`` classes."""
    factor = min(MAX_LIMITS_PER_JOB, max(1, -(-classes // CLASSES_PER_LIMIT)))
    if factor == 1:
        return limits
    return dataclasses.replace(
        limits, cpu_s=limits.cpu_s * factor, timeout_s=limits.timeout_s * factor
    )


async def _run(
    client: Runner,
    job: CaptureJob,
    options: EngineOptions,
    budget: Budget | None = None,
    sized_as: int = 0,
) -> JobResult:
    """Run ``job`` with the limits of its classes (of ``sized_as`` classes when more); once
    more with a longer wall-clock limit when a busy machine stopped it, so the CPU limit, which
    does not depend on the load, decides. Each run's CPU time is spent from ``budget``."""
    active = max(sized_as, sum(1 for r in job.classes if not r.skip))
    limits = job_limits(options.limits, active)
    result = await _run_once(client, job, limits, options)
    if budget is not None:
        budget.spend(result)
    if slowed_by_machine(result):
        longer = dataclasses.replace(limits, timeout_s=limits.timeout_s * BUSY_RETRY_FACTOR)
        result = await _run_once(client, job, longer, options)
        if budget is not None:
            budget.spend(result)
    return result


async def _run_once(
    client: Runner, job: CaptureJob, limits: Limits, options: EngineOptions
) -> JobResult:
    try:
        return await client.run(job, limits, options.isolation)
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        return JobResult(id=-1, kind="worker_died", message=f"{type(exc).__name__}: {exc}")


def _absorb(
    job_result: JobResult,
    requests: list[ClassRequest],
    path: str,
    text: str,
    result: FileAnalysis,
    diagnostics: list[Diagnostic],
) -> None:
    """Merge an ok JobResult's payload into ``result``, its copied records as sent (skipped
    classes get a stub)."""
    for layer in job_result.isolation:
        if layer not in result.isolation:
            result.isolation.append(layer)
    capture = job_result.payload or CaptureResult()
    result.torch_version = result.torch_version or capture.torch_version
    result.rules_too_slow = result.rules_too_slow or capture.rules_too_slow
    diagnostics.extend(capture.diagnostics)
    import_error = _import_error_diagnostic(capture, path, text)
    if import_error is not None:
        diagnostics.append(import_error)
    returned = {m.name for m in capture.modules}
    result.modules.extend(capture.modules)
    for req in requests:
        if req.skip and req.name not in returned:
            result.modules.append(ModuleResult(name=req.name, line=req.line, status="skipped"))


def workspace_digest(root: str | None, document: str, stats: workspace.Stats | None = None) -> str:
    """A hash of the Python files of the workspace ``root`` and of the document's folder (path,
    size, modification time) that the document may import, the document's own file excepted
    (the editor's text is what runs). ``stats``: the analysis's, when it has looked already."""
    here = os.path.abspath(document)
    stats = stats or workspace.Stats()
    files = []
    for folder in dict.fromkeys(p for p in (root, os.path.dirname(here)) if p):
        for path, (size, mtime_ns) in stats.files(folder):
            if path != here:
                files.append((path, size, mtime_ns))
    files.sort()
    return hashlib.sha256(json.dumps(files).encode("utf-8", "surrogatepass")).hexdigest()


def job_context(
    job: CaptureJob,
    options: EngineOptions,
    root: str | None,
    worker: str,
    stats: workspace.Stats | None = None,
) -> str:
    """Everything a capture job depends on beyond its document text and class requests: the
    fxls and worker versions, the settings, every other field of the job (the document's path,
    ``sys.path``, the user rules...), and the Python files of the workspace (path, size,
    modification time) that the document may import (the document's own file on disk
    excepted: the job runs the editor's text)."""
    digest = workspace_digest(root, job.path, stats)
    # every field of the job but the text and the classes (path, sys.path, settings, rules...)
    fields = {k: v for k, v in to_dict(job).items() if k not in ("source", "classes")}
    return json.dumps(
        [__version__, worker, to_dict(options.limits), to_dict(options.isolation), fields, digest],
        sort_keys=True,
    )


async def _incremental(run: _Run, cache: incremental.CaptureCache, context: str) -> None:
    """Capture the units of ``run.job`` whose key is new, take the others from ``cache``.

    The result equals that of the whole job: a job of some units that does not end ``ok``
    is run again as the whole job (what the file gets without a cache), and a file that
    fails to execute does so whatever classes the job asks for."""
    job, text, result, diagnostics = run.job, run.text, run.result, run.diagnostics
    stats = cache.stats
    units = incremental.units_of(text, job.classes, context, run.tree)
    if units is None:
        stats.jobs += 1
        stats.misses += len(job.classes)
        stats.last_captured = [r.name for r in job.classes]
        await _capture(run)
        return
    kept: dict[str, tuple[incremental.Entry, list[ModuleResult]]] = {}
    todo: list[incremental.Unit] = []
    for unit in units:
        entry = cache.get(unit.key)
        moved = incremental.relocate(entry, unit) if entry is not None else None
        if entry is not None and moved is not None and len(moved) == len(unit.classes):
            kept[unit.key] = (entry, moved)
        else:
            todo.append(unit)
    wanted = {name for unit in todo for name in unit.classes}
    requests = [r for r in job.classes if r.name in wanted]
    stats.last_captured = [r.name for r in requests]
    fresh: list[ModuleResult] = []
    if requests:
        stats.jobs += 1
        stats.misses += len(requests)
        part = dataclasses.replace(job, classes=requests)
        first = await _run(run.client, part, run.options, run.budget)
        capture = first.payload
        if first.kind == "ok" and capture is not None and capture.error is not None:
            # the file did not execute: the same for every set of classes
            _absorb(first, job.classes, job.path, text, result, diagnostics)
            return
        whole = len(requests) == len(job.classes)
        if (
            first.kind != "ok"
            or capture is None
            or capture.diagnostics
            or len(capture.modules) != len(requests)
            or [m.name for m in capture.modules] != [r.name for r in requests]
        ):
            if not whole:
                stats.jobs += 1
                stats.misses += len(job.classes) - len(requests)
                stats.last_captured = [r.name for r in job.classes]
            known = first if whole else None
            await _capture(run, known)
            return
        for layer in first.isolation:
            if layer not in result.isolation:
                result.isolation.append(layer)
        result.torch_version = capture.torch_version
        result.rules_too_slow = result.rules_too_slow or capture.rules_too_slow
        for unit in todo:  # cached as sent: copied records stay copies
            mods = [m for m in capture.modules if m.name in unit.classes]
            cache.put(
                unit.key, incremental.store(mods, unit, first.isolation, capture.torch_version)
            )
        fresh = list(capture.modules)
    stats.hits += len(job.classes) - len(requests)
    queues: dict[str, list[ModuleResult]] = {}
    for entry, moved in kept.values():
        for module in moved:
            queues.setdefault(module.name, []).append(module)
        if not requests:
            for layer in entry.isolation:
                if layer not in result.isolation:
                    result.isolation.append(layer)
            result.torch_version = result.torch_version or entry.torch_version
    for module in fresh:
        queues.setdefault(module.name, []).append(module)
    for req in job.classes:
        result.modules.append(queues[req.name].pop(0))


def _culprit(first: JobResult, job: CaptureJob, by_name: dict[str, ClassInfo]) -> ClassInfo | None:
    """The class a failed job is blamed on: the one it was capturing (the only one it had).
    None when it ran out of CPU time among several: the time of the classes captured before
    it counts too, so where the limit falls varies from run to run; each class captured
    alone then does the same on every run."""
    active = [r for r in job.classes if not r.skip]
    if first.kind == "cpu_limit" and len(active) > 1:
        return None
    culprit = by_name.get(first.current_class or "")
    if culprit is None and len(active) == 1 and first.phase not in ("setup", "import"):
        culprit = by_name.get(active[0].name)
    return culprit


def _give_up(run: _Run, req: ClassRequest, reason: str) -> None:
    """FX510 for a class not captured (``reason`` says why); a skipped class is reported as
    skipped."""
    job = run.job
    if req.skip:
        ok = JobResult(id=-1, kind="ok")
        _absorb(ok, [req], job.path, run.text, run.result, run.diagnostics)
        return
    info = next(c for c in run.classes if c.name == req.name)
    gave_up = catalogue.FX510(info.name_span, cls=info.name, reason=reason)
    run.result.modules.append(_failed_module(info, gave_up.diagnostic(notebook=job.notebook)))


def _left_by(first: JobResult, requests: list[ClassRequest]) -> list[ClassRequest]:
    """The classes a job reached its CPU limit before (``CaptureResult.unfinished``), of those
    it was given and returned no result for."""
    capture = first.payload
    if capture is None or not capture.unfinished:
        return []
    named, returned = set(capture.unfinished), {m.name for m in capture.modules}
    return [r for r in requests if r.name in named and r.name not in returned]


async def _done_and_the_rest(run: _Run, first: JobResult) -> None:
    """Take the classes an ok job captured, then capture those it had no CPU time left for in
    another job with this job's limits, while the file's budget lasts."""
    job = run.job
    left = _left_by(first, job.classes)
    done = [r for r in job.classes if r not in left]
    _absorb(first, done, job.path, run.text, run.result, run.diagnostics)
    if left:
        await _capture_part(run, left, max(run.sized_as, sum(1 for r in job.classes if not r.skip)))
        run.result.modules.sort(key=lambda m: m.line)


async def _halves(run: _Run, rest: list[ClassRequest]) -> None:
    """Capture ``rest`` in two jobs of half as many classes, after a job of them all ran out of
    CPU time: each half gets the limits of its size, so a file that needs a little more than
    its job's limit (a slower machine) is captured in two jobs instead of one job per class,
    each of which imports the file again. A half that runs out too is split again, down to
    ``CLASSES_PER_LIMIT`` classes, which are re-run one by one."""
    middle = len(rest) // 2
    for half in (rest[:middle], rest[middle:]):
        if run.result.outcome == "cancelled":
            return
        await _capture_part(run, half, run.sized_as)
    run.result.modules.sort(key=lambda m: m.line)


async def _capture_part(run: _Run, classes: list[ClassRequest], sized_as: int) -> None:
    """Capture ``classes`` of the run's file as a run of their own (its first job with the
    limits of at least ``sized_as`` classes), or give them up when the budget is spent."""
    if run.budget.left() <= 0 or run.budget.wall_left() <= 0:
        for req in classes:
            _give_up(run, req, run.budget.spent())
        return
    part = dataclasses.replace(run.job, classes=classes)
    await _capture(dataclasses.replace(run, job=part, sized_as=sized_as))


async def _capture(run: _Run, first: JobResult | None = None) -> None:
    """Run ``run.job`` (unless ``first`` is its result already); when it fails, blame the class
    it was capturing and capture the others one by one."""
    client, job, classes, text = run.client, run.job, run.classes, run.text
    options, result, diagnostics, budget = run.options, run.result, run.diagnostics, run.budget
    by_name = {c.name: c for c in classes}
    if first is None:
        first = await _run(client, job, options, budget, run.sized_as)
    if first.kind == "cancelled":
        result.outcome = "cancelled"
        return
    if first.kind == "ok":
        await _done_and_the_rest(run, first)
        return

    result.outcome = first.kind
    for layer in first.isolation:
        if layer not in result.isolation:
            result.isolation.append(layer)
    culprit = _culprit(first, job, by_name)
    if first.kind not in _RETRYABLE or (culprit is None and first.phase in ("setup", "import")):
        # The file as a whole could not be captured: retrying class by class cannot help.
        name = os.path.basename(job.path)
        whole = failure_diagnostic(
            first, options.limits, name, _file_span(text), notebook=job.notebook
        )
        diagnostics.append(whole)
        return
    if culprit is not None:
        diag = failure_diagnostic(
            first, options.limits, culprit.name, culprit.name_span, notebook=job.notebook
        )
        result.modules.append(_failed_module(culprit, diag))
    rest = [r for r in job.classes if culprit is None or r.name != culprit.name]
    if not rest:
        return
    if culprit is None and first.kind == "cpu_limit" and len(rest) > CLASSES_PER_LIMIT:
        await _halves(run, rest)
        return
    semaphore = asyncio.Semaphore(max(1, options.parallel_retries))
    failed = 0

    async def one(req: ClassRequest) -> tuple[ClassRequest, JobResult | str]:
        """The re-run's result, or why the class was given up (FX510)."""
        nonlocal failed
        async with semaphore:
            if failed >= options.max_failed_retries:
                return req, f"{failed} other classes of this file already hit a sandbox limit"
            if budget.left() <= 0:
                return req, budget.spent()
            single = dataclasses.replace(job, classes=[req])
            try:
                res = await asyncio.wait_for(
                    _run(client, single, options, budget), budget.wall_left()
                )
            except asyncio.TimeoutError:  # the budget ran out during this re-run
                return req, budget.spent()
            if res.kind in _EXPENSIVE:
                failed += 1
            return req, res

    for req, res in await asyncio.gather(*(one(r) for r in rest)):
        info = by_name[req.name]
        if isinstance(res, str):
            _give_up(run, req, res)
        elif res.kind == "ok":
            _absorb(res, [req], job.path, text, result, diagnostics)
        elif res.kind != "cancelled":
            diag = failure_diagnostic(
                res, options.limits, info.name, info.name_span, notebook=job.notebook
            )
            result.modules.append(_failed_module(info, diag))
    result.modules.sort(key=lambda m: m.line)
