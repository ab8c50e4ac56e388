"""The ``compile`` job: build each class the way its capture did, then compile its ``forward``
with TorchDynamo and report its graph breaks.

The job carries the capture's result of each class (``CompileJob.modules``): how it was built
(``Construction``: the expression that rebuilds it, ``Parent(...).get_submodule('path')`` for
a block built by its parent, the recipe that filled in a configuration, a block's path in a
parent built by a recipe) and the sizes it ran with (``inputs``, ``input_sizes``). The
document is executed once and each class built from that; nothing is traced and no shapes are
propagated again. A job with a class that result cannot rebuild (an input that is neither a
tensor nor a plain value, a block of a parent that is not among the classes) captures the
document once first, as the capture job does.

A class of at most ``CompileJob.max_params`` parameters (counting the parent it is built in)
is built on the CPU (:mod:`fxls.worker.rewrite.verify`) and runs on small random inputs of its
captured sizes, as the verification of a fix does; a block of a larger parent runs alone on
the CPU when it makes its own tensors; else the class is built on the meta device, and the
check stops (FX607) at the first point that needs a value.
"""

from __future__ import annotations

import ast
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.utils._pytree import tree_map

from fxls.protocol import catalogue
from fxls.protocol.model import (
    CaptureJob,
    CaptureResult,
    CompileCheck,
    CompileJob,
    Construction,
    Diagnostic,
    GraphBreak,
    ModuleResult,
    Phase,
    Span,
    Value,
)
from fxls.worker.capture.document import ExecutedDocument, execute, prepare
from fxls.worker.capture.pipeline import capture_document
from fxls.worker.capture.reporting import class_span, one_line, user_span
from fxls.worker.capture.shapes.propagation import ExampleInput
from fxls.worker.compile import kinds
from fxls.worker.compile.dynamo import Break, compile_run
from fxls.worker.rewrite.base import Original
from fxls.worker.rewrite.verify import (
    INT_HIGH,
    Rebuild,
    make_inputs,
    randomize,
    rebuild_of,
)

PhaseReporter = Callable[[Phase, "str | None"], None]

MAX_BREAKS = 50
"""Breaks reported per class (each is one diagnostic)."""

Made = tuple[nn.Module, list[list[Any]], str]
"""A class built for the check: the module, its calls' arguments, the kind of tensors."""


def run_compile(job: CaptureJob, settings: CompileJob, report: PhaseReporter) -> CaptureResult:
    """Compile check of the classes of ``settings.modules`` (the capture's results; without
    them, of every class of ``job`` its capture built): one ``ModuleResult`` per class with
    ``compile`` set and its FX6xx diagnostics (nothing else of the capture)."""
    modules = settings.modules
    by_name = {m.name: m for m in modules}
    if modules and all(_rebuildable(m, by_name) for m in modules):
        return _from_results(job, settings, report, modules)
    return _from_capture(job, settings, report)


def _from_capture(job: CaptureJob, settings: CompileJob, report: PhaseReporter) -> CaptureResult:
    """The check after capturing the document once (the same builds and inputs)."""
    doc, captured = capture_document(job, report)
    result = CaptureResult(torch_version=torch.__version__)
    if captured.error is not None:
        what = captured.error.type
        reason = f"a cell raised {what}" if job.notebook else f"the file does not run: {what}"
        result.modules = [_skipped(m, reason) for m in captured.modules]
        return result
    original = Original(doc, captured)
    for mod in captured.modules:
        if not built(doc.captures.get(mod.name)):
            result.modules.append(
                _skipped(mod, "the class was not built or its inputs are unknown")
            )
            continue
        report("trace", mod.name)
        result.modules.append(_timed(mod, _captured_check(original, mod, settings)))
    return result


def _captured_check(
    original: Original, mod: ModuleResult, settings: CompileJob
) -> Callable[[], ModuleResult]:
    return lambda: check_class(original, mod, settings)


def _rebuilt_check(
    original: Original, mod: ModuleResult, settings: CompileJob
) -> Callable[[], ModuleResult]:
    return lambda: _check_rebuilt(original, mod, settings)


def _timed(mod: ModuleResult, check: Callable[[], ModuleResult]) -> ModuleResult:
    """``check()`` with its duration; fxls's own failure for one class never hides the
    others."""
    started = time.monotonic()
    try:
        out = check()
    except Exception as exc:
        out = _skipped(mod, f"fxls failed: {one_line(exc)}", status="failed")
    if out.compile is not None:
        out.compile.duration_s = time.monotonic() - started
    return out


# ---------------------------------------------------------------------------------------
# Classes built from their capture's result, without capturing again
# ---------------------------------------------------------------------------------------


def _from_results(
    job: CaptureJob, settings: CompileJob, report: PhaseReporter, modules: list[ModuleResult]
) -> CaptureResult:
    """Execute the document once and check each class of ``modules`` as its result says it
    was built and fed."""
    result = CaptureResult(torch_version=torch.__version__)
    doc = prepare(job)
    report("import", None)
    try:
        execute(doc)
    except BaseException as exc:
        # a script that exits at import, a notebook cell that raises: the classes defined
        # before it are checked, as they were captured
        if job.module or not (isinstance(exc, SystemExit) or job.notebook):
            reason = f"the file does not run: {type(exc).__name__}"
            result.modules = [_skipped(m, reason) for m in modules]
            return result
    original = Original(doc, CaptureResult(modules=[root_result(m) for m in modules]))
    for mod in modules:
        if not isinstance(doc.namespace.get(mod.name), type):
            result.modules.append(_skipped(mod, "the class is not defined when the file runs"))
            continue
        report("trace", mod.name)
        result.modules.append(_timed(mod, _rebuilt_check(original, mod, settings)))
    return result


def _rebuildable(mod: ModuleResult, by_name: dict[str, ModuleResult]) -> bool:
    """Whether ``mod``'s result says enough to build it and its inputs again: how it was built
    (:func:`origin`) and every input a tensor of known sizes or a plain value."""
    return origin(mod, by_name) is not None and _feeds(mod) is not None


def origin(
    mod: ModuleResult, by_name: dict[str, ModuleResult], depth: int = 0
) -> tuple[str, str] | None:
    """(the class whose construction builds ``mod``'s root, the path of ``mod`` inside it):
    its own expression or recipe (``Net()``, a configuration fxls filled in); for a block
    built by its parent, the expression ``Parent(...).get_submodule('path')``, or, when the
    parent has none (a recipe), the parent's origin and the path of the block in it
    (``Parent.blocks.0``). None when nothing of ``by_name`` builds it."""
    how = mod.constructed
    if how is None or depth > len(by_name):
        return None
    if how.expr is not None:
        return mod.name, split_submodule(how.expr)[1]
    if how.source != "parent":
        return mod.name, ""
    parent_name, _, path = how.text.partition(".")
    parent = by_name.get(parent_name)
    found = origin(parent, by_name, depth + 1) if parent is not None and path else None
    if found is None:
        return None
    root, inside = found
    return root, f"{inside}.{path}" if inside else path


def _feeds(mod: ModuleResult) -> list[ExampleInput] | None:
    """``forward``'s inputs as the capture ran it, from its result; None when one cannot be
    made from it (a tuple of tensors, an object)."""
    out = []
    for given in mod.inputs:
        feed = _feed(given.name, given.value, mod.input_sizes)
        if feed is None:
            return None
        out.append(feed)
    return out


_PLAIN: dict[str, Callable[[str], Any]] = {
    "none": lambda text: None,
    "bool": lambda text: text == "True",
    "float": float,
}


def _feed(name: str, value: Value, sizes: dict[str, int]) -> ExampleInput | None:
    if value.kind == "tensor":
        dtype = getattr(torch, value.dtype or "float32", None)
        if not isinstance(dtype, torch.dtype) or value.shape is None:
            return None
        dims: list[tuple[str | None, int]] = []
        for dim in value.shape:
            if isinstance(dim, int):
                dims.append((None, dim))
            elif dim in sizes:
                dims.append((dim, sizes[dim]))
            else:
                return None  # a size the result does not give
        return ExampleInput(name, "tensor", dims, dtype)
    text = value.text or ""
    if value.kind == "int":
        number = sizes.get(text) if text in sizes else _int(text)
        return None if number is None else ExampleInput(name, "value", value=number)
    plain = _PLAIN.get(value.kind)
    if plain is None or (value.kind == "bool" and text not in ("True", "False")):
        return None
    try:
        return ExampleInput(name, "value", value=plain(text))
    except ValueError:
        return None


def _int(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def root_result(mod: ModuleResult) -> ModuleResult:
    """What :class:`~fxls.worker.rewrite.verify.Rebuild` reads of ``mod``: how its root was
    built (a block built by its parent: the parent's expression)."""
    how = mod.constructed
    assert how is not None  # _rebuildable
    root, _ = split_submodule(how.expr) if how.expr is not None else (None, "")
    rooted = Construction(how.source, how.text, dict(how.assumed), expr=root)
    return ModuleResult(name=mod.name, line=mod.line, status=mod.status, constructed=rooted)


def split_submodule(expr: str) -> tuple[str, str]:
    """``Parent(...).get_submodule('a').get_submodule('b')`` → (``Parent(...)``, ``a.b``);
    an expression without ``get_submodule`` is its own root (path ``""``)."""
    try:
        node = ast.parse(expr, mode="eval").body
    except SyntaxError:
        return expr, ""
    parts: list[str] = []
    while (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "get_submodule"
        and len(node.args) == 1
        and not node.keywords
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    ):
        parts.insert(0, node.args[0].value)
        node = node.func.value
    if not parts:
        return expr, ""
    return ast.unparse(node), ".".join(p for p in parts if p)


def _check_rebuilt(original: Original, mod: ModuleResult, settings: CompileJob) -> ModuleResult:
    feeds = _feeds(mod)
    found = origin(mod, {m.name: m for m in original.result.modules})
    assert feeds is not None and found is not None  # _rebuildable
    root, path = found
    rebuild = Rebuild(original, mod.name, root, path, mod.params, mod.params)
    made = rebuilt_instance(original.doc, rebuild, mod, feeds, settings)
    span = class_span(original.doc.source, mod.line, mod.name)
    return checked_run(original.doc, mod, span, made)


def rebuilt_instance(
    doc: ExecutedDocument,
    rebuild: Rebuild,
    mod: ModuleResult,
    feeds: list[ExampleInput],
    settings: CompileJob,
) -> Made:
    """The module, the calls' arguments and the kind of tensors: on the CPU when it (with the
    parent it is built in) has at most ``max_params`` parameters; a block of a larger parent
    on the CPU alone, the parent on the meta device (as the verification of a fix builds it);
    else on the meta device."""
    if rebuild.path:  # built inside its parent: the parent's size decides
        with torch.device("meta"):
            root = rebuild.make_root(doc)()
        rebuild.root_params = sum(p.numel() for p in root.parameters())
    builds: list[Callable[[], nn.Module]] = []
    if (rebuild.root_params or 0) <= settings.max_params:
        builds.append(lambda: rebuild.build(doc, "cpu"))
    elif rebuild.path and (mod.params or 0) <= settings.max_params:
        builds.append(lambda: rebuild.build_alone(doc))
    for build in builds:
        try:
            module = _on_cpu(build, settings.seed)
            return module, _calls(feeds, module, settings.seed), "cpu"
        except Exception:  # not buildable on the CPU: on the meta device, as captured
            if mod.build == "cpu":
                raise
    module = rebuild.build(doc, "meta")
    module.eval()  # not its value: a ``train`` override may return None
    calls = [[tree_map(_to_meta, a) for a in args] for args in _calls(feeds, None, settings.seed)]
    return module, calls, "meta"


def _on_cpu(build: Callable[[], nn.Module], seed: int) -> nn.Module:
    """A CPU build with the verification's seed and randomized statistics, in eval mode."""
    torch.manual_seed(seed)
    module = build()
    with torch.no_grad():
        randomize(module, seed)
    module.eval()
    return module


# ---------------------------------------------------------------------------------------
# One class
# ---------------------------------------------------------------------------------------


def built(capture: Any) -> bool:
    """Whether a class's capture built an instance and knows its inputs (a class torch.fx
    cannot trace is checked too: TorchDynamo may compile it)."""
    return (
        capture is not None
        and getattr(capture, "module", None) is not None
        and getattr(capture, "feeds", None) is not None
    )


def _skipped(mod: ModuleResult, message: str, status: str = "skipped") -> ModuleResult:
    if len(message) > kinds.MAX_REASON:
        message = message[: kinds.MAX_REASON - 1] + "…"
    check = CompileCheck("failed" if status == "failed" else "skipped", message=message)
    return ModuleResult(name=mod.name, line=mod.line, status=mod.status, compile=check)


def check_class(original: Original, mod: ModuleResult, settings: CompileJob) -> ModuleResult:
    """The compile check of one captured class."""
    made = instance(original, mod.name, settings)
    return checked_run(original.doc, mod, original.capture(mod.name).span, made)


def checked_run(
    doc: ExecutedDocument, mod: ModuleResult, class_span: Span, made: Made
) -> ModuleResult:
    """Compile the module of ``made`` and call it (all three calls on the CPU, the first on
    meta): the class's ``CompileCheck`` and its FX6xx diagnostics."""
    module, calls, tensors = made
    run = compile_run(module, calls if tensors == "cpu" else calls[:1])
    source, path = doc.source, doc.path
    check = CompileCheck("ok", graphs=run.graphs, recompiles=run.recompiles, tensors=tensors)
    out = ModuleResult(name=mod.name, line=mod.line, status=mod.status, compile=check)
    breaks = run.breaks
    if run.error is not None:  # the call raised: TorchDynamo's report of that is no break
        breaks = [b for b in breaks if not kinds.is_raise(b.reason)]
    check.breaks = _located(breaks, path, source, class_span)
    check.breaks.sort(key=lambda b: (b.span.line, b.span.col))
    out.diagnostics.extend(_break_diagnostic(found) for found in check.breaks)
    if run.error is not None:
        _stopped(out, check, run.error, (path, source, class_span))
    if run.recompiles:
        frame = run.recompile_frame
        at = source.line_span(frame.line) if frame and frame.filename == path else class_span
        reason = kinds.short_reason(run.recompile_reason or "a guard on a size failed")
        out.diagnostics.append(catalogue.FX608(at, cls=mod.name, reason=reason).diagnostic())
    return out


def _stopped(
    out: ModuleResult, check: CompileCheck, error: BaseException, where: tuple[str, Any, Span]
) -> None:
    """The first call raised: at a point that needs a value the tensors do not have, the
    check ``stopped`` there (FX607); any other error is the module's own (the capture reports
    it), so the check ``failed`` without a diagnostic. Breaks found before it stay."""
    path, source, class_span = where
    text = one_line(error)
    if len(text) > kinds.MAX_REASON:
        text = text[: kinds.MAX_REASON - 1] + "…"
    check.message = f"running `forward` on {check.tensors} tensors raised {text}"
    if not kinds.needs_values(text):
        check.status = "failed"
        return
    check.status = "stopped"
    at = user_span(error, path, source) or class_span
    stopped = catalogue.FX607(at, cls=out.name, reason=check.message, tensors=check.tensors)
    out.diagnostics.append(stopped.diagnostic())


def _located(breaks: list[Break], path: str, source: Any, class_span: Span) -> list[GraphBreak]:
    """One break per line (the first record of it says most), at most ``MAX_BREAKS``; a break
    with no frame in the document (inside torch's own modules, seen again through a resume
    function) goes on the class line only when no break of its kind has a line of its own."""
    out: list[GraphBreak] = []
    homeless: list[GraphBreak] = []
    seen: set[int] = set()
    for brk in breaks:
        found = _graph_break(brk, path, source, class_span)
        if found.span is class_span:
            homeless.append(found)
        elif found.span.line not in seen:
            seen.add(found.span.line)
            out.append(found)
    kinds_seen = {b.code for b in out}
    for found in homeless:
        if found.code not in kinds_seen:
            kinds_seen.add(found.code)
            out.append(found)
    return out[:MAX_BREAKS]


def _graph_break(brk: Break, path: str, source: Any, class_span: Span) -> GraphBreak:
    """The break at the innermost frame of the document (class line when it has none)."""
    mine = [f for f in brk.frames if f.filename == path and f.line >= 1]
    reason = kinds.short_reason(brk.reason)
    code = kinds.code_of(brk.reason)
    if not mine:
        return GraphBreak(code, reason, class_span)
    frame = mine[-1]
    function = frame.function
    if function.startswith("torch_dynamo_resume_in_"):
        function = function.removeprefix("torch_dynamo_resume_in_").rsplit("_at_", 1)[0]
    return GraphBreak(code, reason, source.line_span(frame.line), function)


_MESSAGES: dict[str, Callable[[Span, str], catalogue.Message]] = {
    "FX601": lambda span, reason: catalogue.FX601(span, reason=reason),
    "FX602": lambda span, reason: catalogue.FX602(span, reason=reason),
    "FX603": lambda span, reason: catalogue.FX603(span, reason=reason),
    "FX604": lambda span, reason: catalogue.FX604(span, reason=reason),
    "FX605": lambda span, reason: catalogue.FX605(span, reason=reason),
    "FX606": lambda span, reason: catalogue.FX606(span, reason=reason),
    "FX699": lambda span, reason: catalogue.FX699(span, reason=reason),
}
"""The message of each kind of break (:func:`fxls.worker.compile.kinds.code_of`)."""


def _break_diagnostic(found: GraphBreak) -> Diagnostic:
    make = _MESSAGES.get(found.code, _MESSAGES["FX699"])
    return make(found.span, found.reason).diagnostic({"function": found.function})


def instance(
    original: Original, name: str, settings: CompileJob
) -> tuple[nn.Module, list[list[Any]], str]:
    """The module, three calls' arguments (the captured sizes, then two other batch sizes)
    and the kind of tensors: a CPU build when it is small enough, else the captured one."""
    capture = original.capture(name)
    feeds = capture.feeds or []
    rebuild = rebuild_of(original, name)
    small = not isinstance(rebuild, str) and (rebuild.root_params or 0) <= settings.max_params
    if small and not isinstance(rebuild, str):
        try:
            torch.manual_seed(settings.seed)
            module = rebuild.build(original.doc, "cpu")
            with torch.no_grad():
                randomize(module, settings.seed)
            module.eval()
            return module, _calls(feeds, module, settings.seed), "cpu"
        except Exception:  # not buildable on the CPU: run it as captured
            pass
    captured: nn.Module | None = capture.module
    if captured is None:
        raise ValueError(f"`{name}` has no built instance")
    calls = [[tree_map(_to_meta, a) for a in args] for args in _calls(feeds, None, settings.seed)]
    return captured, calls, "meta"


def _to_meta(value: Any) -> Any:
    return value.to("meta") if isinstance(value, torch.Tensor) else value


def _calls(feeds: list[Any], module: nn.Module | None, seed: int) -> list[list[Any]]:
    high = _int_high(module) if module is not None else INT_HIGH
    first = next((f for f in feeds if f.kind == "tensor" and f.dims), None)
    batch = first.dims[0][1] if first is not None else None
    out = [make_inputs(feeds, None, seed, high)]
    if batch is not None:
        out += [make_inputs(feeds, batch + k, seed + k, high) for k in (1, 2)]
    return out


def _int_high(module: nn.Module) -> int:
    sizes = [m.num_embeddings for m in module.modules() if isinstance(m, nn.Embedding)]
    return min(sizes) if sizes else INT_HIGH
