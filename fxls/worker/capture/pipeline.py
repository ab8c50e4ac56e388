"""Capture: execute a document, build its nn.Module classes, trace them, report what was found.

Entry point for the sandboxed child: ``run_capture(job, report_phase) -> CaptureResult``.

For each requested class (:class:`~fxls.worker.capture.classcapture.ClassCapture`): build it on
the meta device (CPU when ``__init__`` needs real values), plan example inputs (declared,
evaluated, or inferred from the first layer), capture it with the strategies of
:mod:`fxls.worker.capture.trace.strategies` in order (``fx`` with einops auto-wrapped; FX with
automatic repairs ``fx+leaf``/``fx+wrap``/``fx+concrete``; the ``fake-run`` recording of
:mod:`fxls.worker.capture.trace.fakerun` when no FX graph can be had), propagate shapes, name every
call's arguments, lint the graph, find unused computations, warn about checks baked in while
tracing (FX108) and compare the traced graph with eager execution on fake inputs (FX109). The
first FX failure stays visible as its FX1xx diagnostic whatever strategy succeeds. Every
failure is caught per class, so one class never hides the others.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import os
import re
import sys

import torch
from torch import nn

from fxls.protocol import catalogue
from fxls.protocol.copies import expand_copies
from fxls.protocol.labels import strategy_label
from fxls.protocol.model import (
    CaptureJob,
    CaptureResult,
    ClassRequest,
    Diagnostic,
    ErrorInfo,
    ModuleResult,
    Related,
    Span,
)
from fxls.protocol.positions import SourceText
from fxls.worker.capture import cpulimit, rules
from fxls.worker.capture.build import construct, parents
from fxls.worker.capture.build import instances as build
from fxls.worker.capture.classcapture import ClassCapture, PhaseReporter, capture_class, runs
from fxls.worker.capture.document import (
    ExecutedDocument,
    broken_install,
    execute,
    module_name,
    prepare,
    unimportable,
)
from fxls.worker.capture.records import nodes
from fxls.worker.capture.reporting import (
    class_span,
    error_info,
    line_span,
    one_line,
    outer_span,
    raised_in,
    user_span,
)
from fxls.worker.capture.shapes import kernels, reads
from fxls.worker.capture.shapes import propagation as shapes
from fxls.worker.capture.trace import reuse


def run_capture(job: CaptureJob, report_phase: PhaseReporter) -> CaptureResult:
    """Execute ``job.source`` and capture each requested class (see :func:`capture_document`),
    then run the user passes of the classes that have ``# fxls: pass`` functions."""
    return _capture_and_passes(job, report_phase)[1]


def run_capture_for_wire(job: CaptureJob, report_phase: PhaseReporter) -> CaptureResult:
    """:func:`run_capture` for a result that is sent: the records of copied sub-blocks travel
    as copies of their template's (:func:`fxls.worker.capture.trace.reuse.compact`), expanded again
    when the result is decoded."""
    doc, result = _capture_and_passes(job, report_phase, keep_copies=True)
    reuse.compact(result.modules, doc.copied_nodes)
    return result


def _capture_and_passes(
    job: CaptureJob, report_phase: PhaseReporter, *, keep_copies: bool = False
) -> tuple[ExecutedDocument, CaptureResult]:
    with shapes.dispatch_cache(job.fake_cache), shapes.quiet_loggers(), kernels.cpu_rules():
        doc, result = capture_document(job, report_phase, keep_copies=keep_copies)
        if result.error is None and any(req.passes for req in job.classes):
            from fxls.worker.capture.passes import run_passes

            run_passes(doc, job.classes, result.modules, report_phase)
    return doc, result


def capture_document(
    job: CaptureJob, report_phase: PhaseReporter, *, keep_copies: bool = False
) -> tuple[ExecutedDocument, CaptureResult]:
    """Execute ``job.source`` and capture each requested class.

    Args:
        job: the document and the classes the server's AST pass found.
        report_phase: called with ``("import", None)``, ``("init", cls)`` and ``("trace", cls)``
            before each step, so a parent can tell where a crash or timeout happened.
        keep_copies: leave the records of copied sub-blocks as ``node_copies`` (the form
            :func:`reuse.compact` sends); by default every record is in ``nodes``.

    Returns:
        The executed document (its ``captures`` hold each class's built module, inputs and
        graph) and a ``CaptureResult`` with one ``ModuleResult`` per requested class;
        ``error`` is set (with an FX404 diagnostic) when the file itself failed to execute.
    """
    result = CaptureResult(torch_version=torch.__version__)
    doc = prepare(job)
    nodes.DOCUMENT_MODULES.add(module_name(doc))
    report_phase("import", None)
    try:
        execute(doc)
    except BaseException as exc:
        result.error = error_info("import", exc)
        if job.rules is not None and os.path.abspath(job.rules.path) == os.path.abspath(job.path):
            _rules(doc, result)  # the rules file itself: FX361 at its line
            return doc, result
        found = _import_diagnostic(exc, job.path, doc.source, job.module, notebook=job.notebook)
        result.diagnostics.extend(_with_calling_cell(exc, job, doc.source, found))
        if not _exited_after_classes(doc, job, exc):
            return doc, result

    if doc.package_skipped is not None and job.module:
        result.diagnostics.append(_package_skipped(doc.package_skipped, doc.source, job.module))

    results: dict[int, ModuleResult] = {}
    with reads.bounded():
        with cpulimit.stop_at_cpu_limit() as watch:
            try:
                _capture_classes(doc, job, (report_phase, watch), results, result.error)
            except cpulimit.OutOfCpu:
                watch.stopped = True
                result.unfinished = _unfinished(doc, job, results)
        _adopt_parents(doc, job, results, report_phase)
    result.modules = [results[i] for i in range(len(job.classes)) if i in results]
    _reported_where_it_happens(result.modules)
    if not keep_copies:
        for mod in result.modules:
            _expand(doc, mod)
    if job.rules is not None:
        _rules(doc, result)
    return doc, result


def _unfinished(
    doc: ExecutedDocument, job: CaptureJob, results: dict[int, ModuleResult]
) -> list[str]:
    """The classes a job out of CPU time leaves to another job: those it did not capture, and
    the ones it did that use them (their capture recorded the instances the others are
    captured from: the next job captures them together again, as this one would have). Ends
    the process as the limit does when none is left done (``results`` keeps the rest)."""
    names = [r.name for r in job.classes]
    left = {r.name for i, r in enumerate(job.classes) if i not in results}
    left |= parents.users_of(left, names, doc.tree)
    for index in [i for i in results if names[i] in left]:
        del results[index]
    if not any(not job.classes[i].skip for i in results):
        cpulimit.die_of_cpu_limit()  # nothing captured: as without the handler
    return [name for name in names if name in left]


def _capture_classes(
    doc: ExecutedDocument,
    job: CaptureJob,
    reporting: tuple[PhaseReporter, cpulimit.Watch],
    results: dict[int, ModuleResult],
    import_error: ErrorInfo | None,
) -> None:
    """Capture the classes of ``job`` into ``results`` (by index), parents first: a class
    built and called by a parent is captured from that instance. A class during which the
    CPU limit was reached is not kept (``watch``)."""
    report_phase, watch = reporting
    names = list(dict.fromkeys(req.name for req in job.classes))
    rank = {name: i for i, name in enumerate(parents.parent_first(names, doc.tree))}
    order = sorted(range(len(job.classes)), key=lambda i: (rank[job.classes[i].name], i))
    done: dict[str, ModuleResult] = {}
    for index in order:
        req = job.classes[index]
        if req.skip:
            mod = ModuleResult(
                name=req.name, line=req.line, status="skipped", notes=["skipped by directive"]
            )
        elif import_error is not None and not isinstance(doc.namespace.get(req.name), type):
            note = "not defined: the file exited at import before its `class` statement ran"
            mod = ModuleResult(name=req.name, line=req.line, status="skipped", notes=[note])
        else:
            try:
                wanted = _wanted(doc, job, done, req.name)
                mod = capture_class(doc, req, report_phase, wanted=wanted)
            except cpulimit.OutOfCpu:
                raise
            except BaseException as exc:
                mod = _stopped(doc, req, exc)
            _soften_worked_around(mod)
        watch.check()
        done.setdefault(req.name, mod)
        results[index] = mod


MAX_ERROR_CHARS = 300
"""An unexpected error's message is cut to this many characters in its diagnostic."""


def _stopped(doc: ExecutedDocument, req: ClassRequest, exc: BaseException) -> ModuleResult:
    """The result of a class whose capture raised past every strategy (fxls's own code, as a
    rule): failed, with FX511 saying what was raised where, and the traceback in ``error``."""
    mod = ModuleResult(name=req.name, line=req.line, status="failed")
    mod.error = error_info("trace", exc)
    text = one_line(exc)
    if len(text) > MAX_ERROR_CHARS:
        text = text[: MAX_ERROR_CHARS - 1] + "…"
    span = class_span(doc.source, req.line, req.name)
    found = catalogue.FX511(span, cls=req.name, error=text, where=raised_in(exc))
    mod.diagnostics.append(found.diagnostic())
    return mod


def _reported_where_it_happens(modules: list[ModuleResult]) -> None:
    """One shape error once, where it happens: a parent's FX201 at its call of a block kept
    whole, when that block's class reports the same error inside its own code (LocalViT's
    ``FeedForward`` breaking its LayerNorm was reported at each ``Residual`` call too)."""
    own: dict[str, set[str]] = {}
    for mod in modules:
        for d in mod.diagnostics:
            if d.code == "FX201":
                own.setdefault(mod.name, set()).add(str(d.data.get("cause", "")))
    for mod in modules:
        by_name = {n.name: n for n in mod.nodes}
        kept = []
        for d in mod.diagnostics:
            node = by_name.get(str(d.data.get("node", ""))) if d.code == "FX201" else None
            owner = (node.module_type or "").split("(", 1)[0] if node is not None else ""
            cause = str(d.data.get("cause", ""))
            if owner and owner != mod.name and cause and cause in own.get(owner, set()):
                continue
            kept.append(d)
        mod.diagnostics = kept


def _expand(doc: ExecutedDocument, mod: ModuleResult) -> None:
    """Every record of ``mod`` in ``nodes`` (its copies expanded in place)."""
    if mod.node_copies or mod.block_copies:
        mod.nodes = expand_copies(mod.nodes, mod.node_copies, mod.block_copies)
        mod.node_copies, mod.block_copies = [], []
        doc.copied_nodes.pop(id(mod), None)


def _rules(doc: ExecutedDocument, result: CaptureResult) -> None:
    rules.report(doc, result)


MAX_FACTORY_PRODUCTS = 3
"""Factory products of the file captured per job to find instances no parent called."""


def _adopt_parents(
    doc: ExecutedDocument,
    job: CaptureJob,
    results: dict[int, ModuleResult],
    report_phase: PhaseReporter,
) -> None:
    """Re-capture, from an instance a parent called (or built, for a class whose own build was
    guessed or did not run through), the classes captured without one.

    The parent may be a class of this job that the file's order did not reveal (``block``
    passed as a parameter), or the product of a factory of the file (``resnet50()`` builds the
    ``Bottleneck`` that ``resnet18()`` does not); factory products are tried only for classes
    that were built with assumed arguments or did not run through, at most
    ``MAX_FACTORY_PRODUCTS`` per job, each captured once for all of them.
    """
    pending: dict[str, list[int]] = {}
    for index, mod in sorted(results.items()):  # none for a class the job had no time for
        req = job.classes[index]
        how = mod.constructed.source if mod.constructed is not None else None
        if req.skip or req.init or how == "parent":
            continue
        pending.setdefault(req.name, []).append(index)
    classes = {
        name: cls
        for name in pending
        if isinstance(cls := doc.namespace.get(name), type) and issubclass(cls, nn.Module)
    }
    for name, cls in classes.items():
        _record_from(doc, cls, name, exclude=name)
    weak = {
        name: cls
        for name, cls in classes.items()
        if name not in doc.records and any(_weak(results[i]) for i in pending[name])
    }
    products = 0
    for other in job.classes:
        if not weak or products >= MAX_FACTORY_PRODUCTS:
            break
        parent_cls = doc.namespace.get(other.name)
        if not (isinstance(parent_cls, type) and issubclass(parent_cls, nn.Module)):
            continue
        for recipe in construct.factories(doc, parent_cls):
            if not weak or products >= MAX_FACTORY_PRODUCTS:
                break
            built = build.from_recipe(doc, parent_cls, recipe)
            if built is None:
                continue
            kinds = {type(m) for m in built.module.modules()}
            inside = {c: n for n, c in weak.items() if n != other.name and c in kinds}
            if not inside:
                continue
            products += 1
            scratch = ModuleResult(name=other.name, line=other.line, status="failed")
            build.record(scratch, built, Span(other.line, 0, other.line, 0))
            capture = ClassCapture(doc, ClassRequest(other.name, other.line), scratch)
            try:
                capture.run(built.module, report_phase, built.arguments)
                capture.record_children(inside)
            except Exception:
                continue
            for found in [n for n in weak if n in doc.records]:
                del weak[found]
    for name, indices in pending.items():
        held = name in doc.built_by_parents and any(_weak(results[i]) for i in indices)
        if name not in doc.records and not held:
            continue
        for index in indices:
            req = job.classes[index]
            kept = doc.captures.get(req.name)
            try:
                retry = capture_class(doc, req, report_phase)
            except Exception:
                continue
            if runs(retry) or not runs(results[index]):
                _soften_worked_around(retry)
                results[index] = retry
            elif kept is not None:
                doc.captures[req.name] = kept  # the capture whose result is kept


def _weak(mod: ModuleResult) -> bool:
    """Built only with assumed arguments, or not run through ``forward``."""
    how = mod.constructed.source if mod.constructed is not None else None
    return how == "assumed" or not runs(mod)


def _record_from(doc: ExecutedDocument, cls: type, name: str, exclude: str) -> None:
    """Record an instance of ``cls`` from a module captured earlier in this job."""
    if name in doc.records:
        return
    for other, capture in doc.captures.items():
        module = capture.module
        if other == exclude or module is None:
            continue
        if any(type(m) is cls for m in module.modules()):
            capture.record_children({cls: name})
            if name in doc.records:
                return


def _wanted(
    doc: ExecutedDocument, job: CaptureJob, done: dict[str, ModuleResult], current: str
) -> dict[type, str]:
    """Classes still to capture whose instances a parent may record (no ``init`` directive).
    A class recorded already is asked again of a parent that was not itself built by one (a
    second top-level model may call it with more dimension names: ``parents.may_name_more``);
    ``ClassCapture.record_children`` keeps the more general record."""
    wanted: dict[type, str] = {}
    top_level = current not in doc.records  # not built by a parent itself
    for req in job.classes:
        if req.name in done or req.name == current or req.skip or req.init:
            continue
        recorded = doc.records.get(req.name)
        if recorded is not None and not (top_level and parents.may_name_more(recorded)):
            continue
        cls = doc.namespace.get(req.name)
        if isinstance(cls, type):
            wanted[cls] = req.name
    return wanted


_TRACE_FAILURE_CODES = frozenset(
    {"FX101", "FX102", "FX103", "FX104", "FX105", "FX106", "FX107", "FX199"}
)


_REPAIRS = {
    "leaf": "kept `{}` as a leaf",
    "wrap": "wrapped `{}`",
    "concrete": "fixed `{}` to the defaults",
    "decided": "decided {} from the inputs' ranks and dtypes",
}
"""What a trace failure's data names when fxls repaired it and traced again, in words (a
key for each of ``strategies.REPAIR_KINDS``)."""


def _soften_worked_around(mod: ModuleResult) -> None:
    """Trace failures are about torch.fx, not about the program: never errors.

    A failure that a fallback capture worked around (the module still has shapes) is
    information with what fxls used instead; one it could not work around is a warning. The
    code is still not traceable by torch.fx, which matters to FX-based tools, so it is said.
    A failure a repair got past (a leaf, a wrapped helper, a default fixed) when the trace
    failed later on something else is information too: the later stop is what to act on. So
    is a check or unpacking decided while tracing when the capture stopped later without
    outputs: the graph holds it exactly (a leaf or a wrapped call hides what it covers, and
    stays a warning then).
    """
    worked_around = mod.status in ("traced", "partial") and bool(mod.outputs)
    for diag in mod.diagnostics:
        if diag.code not in _TRACE_FAILURE_CODES or diag.severity not in ("error", "warning"):
            continue
        repaired = next((k for k in _REPAIRS if diag.data.get(k)), None)
        stopped_later = mod.status == "failed" or (repaired == "decided" and not worked_around)
        if repaired is not None and stopped_later:
            diag.severity = "information"
            note = f"fxls got past this ({_repair_words(diag, repaired)}); the capture stopped later, on another line."
            diag.fix = f"{note} {diag.fix}" if diag.fix else note
        elif worked_around:
            diag.severity = "information"
            used = strategy_label(mod.strategy)
            diag.data["worked_around"] = used
            note = catalogue.worked_around(used)
            rest = _done_already(diag, repaired)
            diag.fix = f"{note} {rest}" if rest else note
        else:
            diag.severity = "warning"


def _repair_words(diag: Diagnostic, repaired: str) -> str:
    """What the repair ``repaired`` named in ``diag``'s data did, in words (``_REPAIRS``)."""
    target = str(diag.data[repaired])
    return _REPAIRS[repaired].format(target if len(target) <= 80 else target[:79] + "…")


def _done_already(diag: Diagnostic, repaired: str | None) -> str | None:
    """The fix of a trace failure fxls got past, after what it used: with what it did to get
    past it when a repair did (FX199's own advice is to mark a leaf, which it did: Llama's
    heads kept `LlamaModel` whole, and is replaced); else the code's own fix."""
    if repaired is None:
        return diag.fix
    how = _repair_words(diag, repaired)
    if diag.code == "FX199" and diag.fix == catalogue.FX199.fix:
        return f"Here fxls {how}; a torch.fx trace of your own can do the same."
    return f"{diag.fix} Here fxls {how}." if diag.fix else f"Here fxls {how}."


def _first_import_span(source: SourceText) -> Span | None:
    """The first ``import``/``from`` statement of the document (where running it first reaches
    another module: for a file of a package, its package runs before any of its lines)."""
    try:
        tree = ast.parse(source.source)
    except (SyntaxError, ValueError):
        return None
    for stmt in tree.body:
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            return line_span(source, stmt.lineno)
    return None


def _failed_import_span(source: SourceText, module: str | None) -> Span | None:
    """The first top-level import of the document whose module did not get imported: where
    its run stopped when the failure came from another module's code (a package's
    ``__init__.py`` that needs what the interpreter lacks; timm's ``from timm.layers import``
    needs torchvision). None when every imported module is there or the text does not
    parse."""
    try:
        tree = ast.parse(source.source)
    except (SyntaxError, ValueError):
        return None
    package = module.rpartition(".")[0] if module else ""
    for stmt in tree.body:
        if isinstance(stmt, ast.Import):
            names = [alias.name for alias in stmt.names]
        elif isinstance(stmt, ast.ImportFrom):
            relative = "." * stmt.level + (stmt.module or "")
            try:
                names = [importlib.util.resolve_name(relative, package)]
            except (ImportError, ValueError):
                continue
        else:
            continue
        if any(name not in sys.modules for name in names):
            return line_span(source, stmt.lineno)
    return None


def _package_skipped(exc: BaseException, source: SourceText, module: str) -> Diagnostic:
    """FX412: the document ran without its packages' ``__init__.py``, which import ``exc``'s
    module (one the interpreter lacks, or an installed one that raised)."""
    missing = unimportable(exc) or "a module"
    why = (
        "the interpreter fxls runs does not have"
        if isinstance(exc, ModuleNotFoundError)
        else f"raised while importing there ({one_line(exc)})"
    )
    at = _first_import_span(source) or line_span(source, 1)
    skipped = catalogue.FX412(at, package=module.split(".")[0], module=missing, why=why)
    return skipped.diagnostic({"module": missing})


def _torch_wanted(package: str) -> str:
    """`` (torchvision 0.29.1 asks for torch>=2.14.0; the interpreter has torch 2.13.0)``:
    the installed distribution of ``package`` and the torch its metadata requires, when it
    names one; empty when the metadata cannot be read."""
    try:
        from importlib import metadata

        dist = (metadata.packages_distributions().get(package) or [package])[0]
        version = metadata.version(dist)
        requires = metadata.requires(dist) or []
    except Exception:
        return ""
    wanted = [
        r.partition(";")[0].translate(_SPEC_NOISE)
        for r in requires
        if _TORCH_REQUIREMENT.match(r) and "extra" not in r.partition(";")[2]
    ]
    asks = f" asks for {', '.join(wanted)};" if wanted else ";"
    return f" ({dist} {version}{asks} the interpreter has torch {torch.__version__})"


_SPEC_NOISE = str.maketrans("", "", " ()")
_TORCH_REQUIREMENT = re.compile(r"torch\s*(?:[<>=!~;\[(]|$)")


def _import_diagnostic(
    exc: BaseException,
    path: str,
    source: SourceText,
    module: str | None = None,
    *,
    notebook: bool = False,
) -> Diagnostic:
    """Why the document stopped running (FX404, or the environment: FX409, FX410, FX411);
    in a notebook's words for a notebook, naming the cell whose statement ran."""
    if isinstance(exc, ModuleNotFoundError) and exc.name:
        at = (
            user_span(exc, path, source)
            or _failed_import_span(source, module)
            or _first_import_span(source)
            or line_span(source, 1)
        )
        missing = catalogue.FX409(
            at, module=exc.name, package=exc.name.partition(".")[0], error=one_line(exc)
        )
        return missing.diagnostic({"type": type(exc).__name__}, notebook=notebook)
    span: Span | None = None
    if isinstance(exc, SyntaxError) and exc.filename == path and exc.lineno:
        col = max((exc.offset or 1) - 1, 0)
        end_line = exc.end_lineno or exc.lineno
        end_col = (
            max((exc.end_offset or 0) - 1, col + 1)
            if end_line == exc.lineno
            else (exc.end_offset or 1) - 1
        )
        span = Span(exc.lineno, col, end_line, end_col)
    if span is None:
        span = user_span(exc, path, source)
    if span is None:
        span = line_span(source, 1)
    data = {"type": type(exc).__name__}
    outer = outer_span(exc, path, source) if notebook else None
    line = str((outer or span).line)  # in a notebook: the statement of the cell that ran
    if isinstance(exc, SystemExit):
        exits = catalogue.FX410(span, what=_exit_cause(exc), line=line)
        return exits.diagnostic(data, notebook=notebook)
    if isinstance(exc, OSError | ImportError) and any(m in str(exc) for m in _NATIVE_MARKERS):
        return catalogue.FX411(span, error=one_line(exc)).diagnostic(data)
    broken = broken_install(exc, path)
    if broken:
        versions = _torch_wanted(broken)
        found = catalogue.FX413(span, package=broken, error=one_line(exc), versions=versions)
        return found.diagnostic({**data, "package": broken}, notebook=notebook)
    return catalogue.FX404(span, error=one_line(exc), line=line).diagnostic(data, notebook=notebook)


def _with_calling_cell(
    exc: BaseException, job: CaptureJob, source: SourceText, found: Diagnostic
) -> list[Diagnostic]:
    """``found``; in a notebook, when a cell's call raised in code of another place (a
    class's ``forward`` in an earlier cell), also the same error at the cell's statement,
    pointing to where it was raised (the cell that raised is the one to report it on), and
    ``found`` points to that statement."""
    outer = outer_span(exc, job.path, source) if job.notebook else None
    if outer is None or outer.line == found.span.line:
        return [found]
    related = [Related(found.span, "raised here"), *found.related]
    ran = dataclasses.replace(found, related=[*found.related, Related(outer, "run from here")])
    return [ran, dataclasses.replace(found, span=outer, related=related)]


def _exited_after_classes(doc: ExecutedDocument, job: CaptureJob, exc: BaseException) -> bool:
    """A script that exits at import (FX410), or a notebook that raises in a cell, after
    defining some of the requested classes: those are captured from what ran (a file of a
    package is not: its module is gone)."""
    stopped = isinstance(exc, SystemExit) or (job.notebook and isinstance(exc, Exception))
    if not stopped or job.module:
        return False
    if not any(isinstance(doc.namespace.get(r.name), type) for r in job.classes):
        return False
    try:
        doc.tree = ast.parse(job.source)
    except (SyntaxError, ValueError):
        return False
    return True


_NATIVE_MARKERS = ("cannot open shared object file", "undefined symbol", "image not found")
"""What the dynamic loader says when a compiled library is missing or built for another torch."""


def _exit_cause(exc: SystemExit) -> str:
    """What made a file exit at import, in the user's words (FX410's ``what``)."""
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename.endswith(f"{os.sep}argparse.py"):
            return f"parsing command-line arguments (`parse_args()` exited with status {exc.code})"
        tb = tb.tb_next
    if exc.code is None:
        return "`sys.exit()`"
    if isinstance(exc.code, int):
        return f"`sys.exit({exc.code})`"
    try:
        lines = str(exc.code).strip().splitlines()
    except Exception:  # the file's own object: its __str__ may raise
        lines = [type(exc.code).__name__]
    return f"`sys.exit({(lines[0] if lines else '')[:80]!r})`"
