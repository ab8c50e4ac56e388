"""Capturing one ``nn.Module`` class of the document: build, inputs, trace, shapes, checks.

:class:`ClassCapture` holds everything known about the class as the steps go (the request,
its result, the built module, ``forward``'s AST, the input plan, the trace), so each step is a
method that reads and writes that state instead of a function with ten parameters. Shapes stay
where torch.fx passes keep them until ``_record`` turns the graph into wire data once.
"""

from __future__ import annotations

import ast
import copy
import inspect
import os
import re
import textwrap
import time
import types
import typing
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch
import torch.fx
from torch import nn

from fxls.protocol import catalogue
from fxls.protocol.model import (
    ClassRequest,
    Construction,
    Diagnostic,
    InputValue,
    ModuleResult,
    NodeCopy,
    NodeInfo,
    Phase,
    Related,
    Span,
    Strategy,
    Value,
)
from fxls.protocol.positions import SourceText
from fxls.worker.capture import cpulimit, failures
from fxls.worker.capture.build import axes, inputs, parents
from fxls.worker.capture.build import instances as build
from fxls.worker.capture.document import ExecutedDocument
from fxls.worker.capture.records import blocks
from fxls.worker.capture.records.nodes import (
    containers,
    node_info,
    output_values,
)
from fxls.worker.capture.reporting import (
    class_span,
    error_info,
    line_span,
    once_per_span,
    one_line,
    safe_str,
)
from fxls.worker.capture.shapes import elementwise, keptruns, sizes, state
from fxls.worker.capture.shapes import propagation as shapes
from fxls.worker.capture.shapes.values import Namer, values_of
from fxls.worker.capture.spans import (
    CALL_SITE_KEY,
    SPAN_KEY,
    assign_ast_spans,
    find_function,
    short_source,
)
from fxls.worker.capture.trace import branches, decided, fakerun, graphcheck, reuse, strategies
from fxls.worker.capture.trace.tracer import SpanTracer, as_called, graph_module

PhaseReporter = Callable[[Phase, "str | None"], None]

MAX_AUTO_LEAVES = 8
"""Submodule classes fxls keeps as leaves on its own when tracing through them fails."""

COMPARE_MAX_NODES = 60
"""Graphs up to this size are always compared with eager execution (FX109); larger ones only
when a check was specialized or a repair was applied (the comparison runs `forward` twice on
fake tensors, which costs several times the shape propagation)."""

_PLAIN_FX = Strategy("fx")
"""A plain FX trace: no leaf, wrap or concrete repair (compared with, never changed)."""

_SEEN_THROUGH = {"leaf", "decided", "concrete"}
"""Repairs after which a trace's calls and shapes are those of a run of ``forward`` (outside
the submodules kept whole; arguments fixed to the values the run passes,
:func:`_runs_as_traced`): a parent's children may be read off such a trace."""

ForwardDef = ast.FunctionDef | ast.AsyncFunctionDef


@dataclass
class InputPlan:
    """What is known about ``forward``'s inputs before tracing."""

    params: list[inspect.Parameter]
    symbols: inputs.Symbols
    planned: dict[str, inputs.PlannedInput] = field(default_factory=dict)
    """Declared inputs and plain-value defaults, by parameter name."""
    pending: list[str] = field(default_factory=list)
    """Parameters to infer from the traced graph."""
    declared: set[str] = field(default_factory=set)
    """Parameters given by a directive, an annotation or the CLI."""
    laid_out: dict[tuple[Any, ...], tuple[str, axes.Unpacking]] = field(default_factory=dict)
    """Assumed inputs laid out as the code unpacks their size (:func:`axes.laid_out`), by the
    dimensions assumed before: an input assumed alike is laid out alike."""

    def concrete(self) -> dict[str, Any]:
        """Declared plain values (``# fxls: flag = True``): always passed as concrete_args."""
        return {
            name: as_called(p.value)
            for name, p in self.planned.items()
            if p.kind == "value" and name in self.declared and not _has_tensor(p.value)
        }

    def defaults(self) -> dict[str, Any]:
        """Plain-value defaults not declared: placeholders unless a repair fixes them."""
        return {
            name: as_called(p.value)
            for name, p in self.planned.items()
            if p.kind == "value" and name not in self.declared
        }

    def traced_names(self) -> list[str]:
        return self.pending + [n for n, p in self.planned.items() if p.kind == "tensor"]

    def positional(self) -> list[inspect.Parameter]:
        """Parameters other than ``*args`` / ``**kwargs``."""
        return [p for p in self.params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def _has_tensor(value: Any, depth: int = 0) -> bool:
    """Tensors cannot be ``concrete_args`` (FX flattens them into broken code)."""
    if isinstance(value, torch.Tensor):
        return True
    if depth < 4 and isinstance(value, (tuple, list)):
        return any(_has_tensor(v, depth + 1) for v in value)
    if depth < 4 and isinstance(value, dict):
        return any(_has_tensor(v, depth + 1) for v in value.values())
    return False


@dataclass
class Traced:
    """What the FX strategies produced."""

    gm: torch.fx.GraphModule | None
    partial: torch.fx.Graph
    """The graph recorded so far (the full graph on success)."""
    leaves: list[str]
    """Every leaf class used (declared, library and automatic)."""
    traced_params: dict[types.CodeType, set[str]] = field(default_factory=dict)
    """Per document function the last trace went through: parameters that held a Proxy."""
    segments: list[reuse.Segment] = field(default_factory=list)
    """Calls of identical sub-blocks whose nodes were copied from the first one's."""
    calls: parents.Calls = field(default_factory=dict)
    """The submodule calls the trace saw, by class (``SpanTracer.module_calls``)."""
    concrete: dict[str, Any] = field(default_factory=dict)
    """The ``concrete_args`` of the trace (declared plain values, parameters fixed to their
    defaults)."""


def _runs_as_traced(concrete: Mapping[str, Any], feeds: Sequence[shapes.ExampleInput]) -> bool:
    """Whether a run of ``forward`` with ``feeds`` passes each argument the trace fixed
    (``concrete``) as it was fixed: not at all (it keeps its default, the value a repair
    fixes it to), or as that very value (a declared one)."""
    fed = {feed.name: feed for feed in feeds}
    for name, value in concrete.items():
        feed = fed.get(name)
        if feed is not None and not (feed.kind == "value" and feed.value is value):
            return False
    return True


def _unused_in_run(
    gm: torch.fx.GraphModule,
    run: fakerun.FakeRun,
    source: SourceText,
    path: str,
    asked: Sequence[Any] = (),
) -> list[catalogue.Message]:
    """FX302 hints of a fake run that recorded everything up to its result; a node whose
    tensor a Python condition asked the truth of (``asked``) is used."""
    output = next((n for n in gm.graph.nodes if n.op == "output"), None)
    if output is None or not _recorded_to_the_end(output):
        return []
    used = _passed_on(gm, run.examples)
    if asked:
        ids = {id(t) for t in asked}
        used |= {name for name, value in run.examples.items() if id(value) in ids}
    return graphcheck.unused(gm.graph, source, path, used)


def _recorded_to_the_end(output: torch.fx.Node) -> bool:
    """Whether a fake run's result comes from recorded operations: a result the recording
    holds only as a constant was computed by operations it did not see, which may use any
    node (no FX302 is reported then)."""
    return not any(
        n.op == "get_attr" and str(n.target).startswith("_fxls_constant")
        for n in output.all_input_nodes
    )


def _passed_on(gm: torch.fx.GraphModule, examples: Mapping[str, Any]) -> set[str]:
    """Nodes of a fake run whose tensor a later node gives again: a submodule's call returns
    the tensor its last operation made, and what uses it is recorded as using the call. Such
    nodes are used, although no edge of the recorded graph says so."""
    owner: dict[int, str] = {}
    passed: set[str] = set()
    for node in gm.graph.nodes:
        tensors: list[torch.Tensor] = []
        shapes.map_tensors(examples.get(node.name), tensors.append)
        for value in tensors:
            if id(value) in owner and owner[id(value)] != node.name:
                passed.add(owner[id(value)])
            owner[id(value)] = node.name
    return passed


def _shape_failure(exc: BaseException) -> bool:
    """Whether a fake run stopped because a torch operation refused its inputs' shapes
    (not a decision on tensor values, nor a limit of fake tensors)."""
    if "DataDependent" in type(exc).__name__ or "Unsupported" in type(exc).__name__:
        return False
    text = str(exc)
    return (
        type(exc) in (RuntimeError, ValueError, IndexError)
        and "meta" not in text
        and ("shape" in text or "size" in text or "dimension" in text)
    )


def _frames(planned: list[inputs.PlannedInput]) -> int | None:
    """The frames of an assumed video input ``[B, C, F, H, W]`` (a ``Conv3d``'s), which the
    features of another input may be given per frame (``temb`` ``[B, F, D]``)."""
    return next((p.dims[2][1] for p in planned if p.assumed and len(p.dims) == 5), None)


def _unused_size(planned: list[inputs.PlannedInput]) -> int:
    """An example size for a new dimension that no input's dimension has (3, 5, 7...)."""
    used = {size for p in planned for _, size in p.dims}
    return next(n for n in (3, 5, 7, 11, 13, 17, 19, 23) if n not in used)


def _why_not_captured(cls: type[nn.Module], name: str) -> str | None:
    """Why a module class has nothing to capture, or None: a base or mixin with neither a
    ``forward`` nor a constructor of its own (``LlamaPreTrainedModel``), an abstract base
    whose ``forward`` only raises ``NotImplementedError``, a module called through its own
    ``__call__`` (diffusers' attention processors)."""
    if cls.forward is nn.Module.forward and "__init__" not in vars(cls):
        return f"`{name}` has no `forward` of its own: a base class"
    if cls.forward is nn.Module.forward and any(
        "__call__" in vars(k) for k in cls.__mro__ if k is not nn.Module and k is not object
    ):
        return f"`{name}` is called through its own `__call__`, not `forward`, which fxls captures"
    if cls.forward is not nn.Module.forward and _only_raises_not_implemented(cls.forward):
        return f"`{name}.forward` raises `NotImplementedError`: an abstract base"
    return None


def _only_raises_not_implemented(forward: Any) -> bool:
    """Whether a ``forward``'s body (after its docstring) is one ``raise NotImplementedError``."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(inspect.unwrap(forward))))
    except (OSError, TypeError, SyntaxError, ValueError):
        return False
    fn = tree.body[0] if tree.body else None
    if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    body = [
        stmt
        for stmt in fn.body
        if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant))
    ]
    if len(body) != 1 or not isinstance(body[0], ast.Raise) or body[0].exc is None:
        return False
    raised = body[0].exc.func if isinstance(body[0].exc, ast.Call) else body[0].exc
    return isinstance(raised, ast.Name) and raised.id == "NotImplementedError"


MAX_ASSUMED_BUILDS = 3
"""Builds with assumed arguments tried before fxls keeps the first one's result."""


def capture_class(
    doc: ExecutedDocument,
    req: ClassRequest,
    report_phase: PhaseReporter,
    wanted: dict[type, str] | None = None,
    from_parent: bool = True,
) -> ModuleResult:
    """Build ``req``'s class and capture it (:func:`_capture_once`). When that does not run
    through ``forward``, it is captured again, kept if that runs through: a model of several
    modalities given the inputs of the others (an image) with its main input alone, and one
    with a parameter left at its default ``None`` that is data ``forward`` uses without
    asking whether it was given (diffusers' ``timestep``, handed on to the blocks) with such
    parameters as inputs (:func:`inputs.needed_unasked`)."""
    mod = _capture_once(doc, req, report_phase, wanted, _Way(from_parent))
    capture = doc.captures.get(req.name)
    if runs(mod) or capture is None:
        return mod
    if capture.other_inputs:
        # the path through an assumed image stopped (a vision tower needing its grid's
        # values): what the first capture recorded of the towers it called stays their
        # evidence
        others = ", ".join(f"`{name}`" for name in capture.other_inputs)
        way = _Way(from_parent, one_modality=True)
        alone = _captured_again(doc, req, report_phase, wanted, way)
        if runs(alone):
            alone.notes.append(
                f"captured with its main input alone: with {others} as well (assumed) it did "
                "not run through"
            )
            return alone
    if capture.unasked_defaults():
        way = _Way(from_parent, defaults_needed=True)
        found = _captured_again(doc, req, report_phase, wanted, way)
        if runs(found):
            return found
        said = _given_and_stopped(mod, found)
        if said is not None:
            mod.notes.append(said)
    doc.captures[req.name] = capture
    return mod


def _given_and_stopped(mod: ModuleResult, again: ModuleResult) -> str | None:
    """What the capture made again with the parameters left at ``None`` given as inputs
    (``again``) says of them: which it gave and where it stopped too. Declaring the one the
    first capture's FX402 names is then not enough, and the note says so."""
    first = {i.name for i in mod.inputs if i.value.kind != "none"}
    given = [i.name for i in again.inputs if i.value.kind != "none" and i.name not in first]
    if not given:
        return None
    stop = next((d.message for d in again.diagnostics if d.code in ("FX402", "FX201")), None)
    stopped = next((n for n in again.notes if " stopped at " in n), None)
    if stop is None and stopped is not None:
        stop = stopped[stopped.index(" stopped at ") + 1 :]
    if stop is None and again.error is not None:
        stop = f"{again.error.type}: {again.error.message}"
    names = ", ".join(f"`{name}`" for name in given)
    said = f"captured again with {names} given as well (shapes assumed), it did not run through"
    return f"{said} either: {' '.join(stop.split())[:300]}" if stop else said


def _captured_again(
    doc: ExecutedDocument,
    req: ClassRequest,
    report_phase: PhaseReporter,
    wanted: dict[type, str] | None,
    way: _Way,
) -> ModuleResult:
    """The class captured again the ``way`` given; when that does not run through
    ``forward``, what it recorded of its children is discarded (it is not evidence
    either)."""
    report_phase("init", req.name)
    records, built = dict(doc.records), dict(doc.built_by_parents)
    again = _capture_once(doc, req, report_phase, wanted, way)
    if runs(again):
        return again
    doc.records.clear()
    doc.records.update(records)
    doc.built_by_parents.clear()
    doc.built_by_parents.update(built)
    return again


@dataclass(frozen=True)
class _Way:
    """How one capture of a class goes."""

    from_parent: bool = True
    """The instance and inputs a parent called it with come first."""
    defaults_needed: bool = False
    """Parameters defaulting to ``None`` that ``forward`` uses unasked are planned as inputs."""
    one_modality: bool = False
    """A model of several modalities gets its main input only (``inputs.other_modalities``
    are left at their defaults)."""


def _capture_once(
    doc: ExecutedDocument,
    req: ClassRequest,
    report_phase: PhaseReporter,
    wanted: dict[type, str] | None,
    way: _Way,
) -> ModuleResult:
    """Build ``req``'s class and capture it; builds with assumed arguments that do not run
    through ``forward`` give way to the next candidate. Instances of ``wanted`` classes that
    this class builds and calls are recorded into ``doc.records`` for their own capture.
    The instance and inputs a parent called it with come first (unless ``way.from_parent`` is
    False); when they do not run and the parent passed ``None`` where ``forward`` requires
    a value (``CLIPVisionEmbeddings(pixel_values=None)`` under a parent that had no image),
    or passed inputs that follow from a guess (its own inputs fxls assumed), the class is
    captured on its own instead if that runs."""
    failed = ModuleResult(name=req.name, line=req.line, status="failed")
    cls = doc.namespace.get(req.name)
    skipped = _why_skipped(cls, req.name)
    if skipped is not None:
        failed.status = "skipped"
        failed.notes.append(skipped)
        return failed
    assert isinstance(cls, type)
    span = class_span(doc.source, req.line, req.name)
    report_phase("init", req.name)
    started = time.perf_counter()
    first: ModuleResult | None = None
    recorded = doc.records.get(req.name) if not req.init and way.from_parent else None
    kept_records = {n: doc.records.get(n) for n in (wanted or {}).values()}
    options = (
        [_from_parent(recorded)]
        if recorded is not None
        else build.candidates(doc, req, cls, failed, span)
    )

    def attempt(built: build.Built, started: float) -> tuple[ModuleResult, ClassCapture]:
        mod = ModuleResult(name=req.name, line=req.line, status="failed")
        mod.timings["build"] = time.perf_counter() - started
        build.record(mod, built, span)
        given = recorded.inputs if recorded is not None else {}
        capture = ClassCapture(doc, req, mod, given)
        capture.defaults_needed = way.defaults_needed
        capture.one_modality = way.one_modality
        capture.within = _parent_run(recorded)
        capture.watching = frozenset(wanted or ())
        if recorded is not None and recorded.left_out:
            capture.note(
                f"`{recorded.parent}` also passes {', '.join(recorded.left_out)}; captured "
                "without them (their defaults)"
            )
        capture.run(built.module, report_phase, built.arguments)
        _parent_fixed_sizes(doc, mod, recorded)
        capture.default_module = build.at_default_depth(doc, built)  # the build taken only
        default = _default_params(doc, capture, recorded)
        mod.default_params = default if default != mod.params else None
        if wanted:
            # what the parent called before any failure is evidence for the children even if
            # the parent itself does not run through
            # (once per class: not again by a later candidate build of this one)
            capture.record_children(
                {c: n for c, n in wanted.items() if doc.records.get(n) is kept_records.get(n)}
            )
        doc.captures.setdefault(req.name, capture)
        return mod, capture

    first_capture: ClassCapture | None = None
    held = doc.built_by_parents.get(req.name) if recorded is None and not req.init else None
    for built in _in_order(options, held):
        mod, capture = attempt(built, started)
        if runs(mod) or built.construction.source not in ("assumed", "parent"):
            doc.captures[req.name] = capture
            return mod
        if first is None:
            first, first_capture = mod, capture
        report_phase("init", req.name)
        started = time.perf_counter()
    if first is not None:
        if recorded is not None and (
            _none_where_required(cls, recorded) or parents.guessed(recorded)
        ):
            return _own_if_it_runs(doc, req, report_phase, wanted, (first, first_capture))
        doc.captures[req.name] = first_capture
        return first
    failed.timings["build"] = time.perf_counter() - started
    return failed


def _own_if_it_runs(
    doc: ExecutedDocument,
    req: ClassRequest,
    report_phase: PhaseReporter,
    wanted: dict[type, str] | None,
    from_parent: tuple[ModuleResult, ClassCapture | None],
) -> ModuleResult:
    """The class captured on its own when that runs through ``forward``, else the capture
    with its parent's instance and inputs (``from_parent``)."""
    own = capture_class(doc, req, report_phase, wanted, from_parent=False)
    if runs(own):
        return own
    mod, capture = from_parent
    doc.captures[req.name] = capture
    return mod


def _inside_kept(
    module: nn.Module, gm: torch.fx.GraphModule, watched: dict[type, str]
) -> dict[type, str]:
    """The watched classes with an instance inside a submodule the trace keeps whole (a
    library leaf; both keep torch's own modules whole): called where the trace does not
    look, but where a run of ``forward`` goes."""
    leaves = strategies.kept_whole(gm)
    inside: dict[type, str] = {}
    for path, sub in module.named_modules():
        if type(sub) in watched:
            parts = path.split(".")
            if any(".".join(parts[:i]) in leaves for i in range(1, len(parts))):
                inside[type(sub)] = watched[type(sub)]
    return inside


def _why_skipped(cls: Any, name: str) -> str | None:
    """Why the document's ``name`` is not captured (not a module class, a base class...)."""
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        what = "not defined" if cls is None else "not an nn.Module subclass"
        return f"`{name}` is {what} when the file runs"
    return _why_not_captured(cls, name)


def _needed_defaults(plan: InputPlan, module: nn.Module) -> None:
    """Inputs left at their default ``None`` that ``forward`` hands to a torch layer without
    asking (``self.silu(emb)``): inferred instead (:func:`inputs.fed_to_a_layer`). After the
    main input of a ``forward`` whose inputs all default is chosen, which this does not
    change."""
    if not plan.pending:
        return  # every input defaults and none was chosen: the forward runs with its defaults
    for param in plan.positional():
        planned = plan.planned.get(param.name)
        if planned is None or planned.origin != "default" or param.name in plan.declared:
            continue
        if inputs.fed_to_a_layer(param, module):
            del plan.planned[param.name]
            plan.pending.append(param.name)


def _parent_fixed_sizes(
    doc: ExecutedDocument, mod: ModuleResult, recorded: parents.Recorded | None
) -> None:
    """A class run with what its parent passed it holds the parent's dimension names of size
    0 or 1 (``B=1``) in ``input_sizes``: torch made them numbers in the parent's run, so a 1 in
    this class's shapes may be one of them (the server says so, as for the parent)."""
    parent = doc.captures.get(recorded.parent) if recorded and recorded.called else None
    if parent is None:
        return
    for name, size in parent.mod.input_sizes.items():
        if size in (0, 1):
            mod.input_sizes.setdefault(name, size)


def _none_where_required(cls: type[nn.Module], recorded: parents.Recorded) -> bool:
    """Whether the parent passed ``None`` for a parameter of ``forward`` without a default."""
    try:
        params = list(inspect.signature(cls.forward).parameters.values())[1:]
    except (TypeError, ValueError):
        return False
    for param in params:
        given = recorded.inputs.get(param.name)
        required = param.default is inspect.Parameter.empty
        if required and given is not None and given.kind == "value" and given.value is None:
            return True
    return False


def _in_order(
    options: Iterable[build.Built], held: parents.Recorded | None
) -> Iterator[build.Built]:
    """The builds to try: the class's own, except that an instance a parent built (``held``)
    goes before the first build with values fxls chose (it is the code's own construction),
    or after them all when there is none (``TransformerEncoder(encoder_layer, n)`` takes a layer
    object fxls cannot guess); at most ``MAX_ASSUMED_BUILDS`` builds with chosen values."""
    assumed = 0
    for built in options:
        if built.construction.source == "assumed":
            if held is not None:
                yield _from_parent(held)
                held = None
            assumed += 1
        yield built
        if assumed >= MAX_ASSUMED_BUILDS:
            break
    if held is not None:
        yield _from_parent(held)


def _parent_run(
    recorded: parents.Recorded | None,
) -> tuple[shapes.Propagation, dict[str, Any]] | None:
    """The parent's propagation and its examples of the arguments, when ``recorded`` was read
    off the parent's trace (``ClassCapture.within``)."""
    if recorded is None or recorded.within is None:
        return None
    return recorded.within, recorded.examples


def _failing_text(
    doc: ExecutedDocument, failure: failures.Failure, exc: BaseException, module: nn.Module
) -> str:
    """The code a trace failed at: its span in the document, or for a ``forward`` inherited
    from a library, the call that ``forward`` failed in."""
    if failure.span is not None:
        return doc.source.text(failure.span)
    return failures.inherited_call(exc, module)


def _default_params(
    doc: ExecutedDocument, capture: ClassCapture, recorded: parents.Recorded | None
) -> int | None:
    """The parameters at the default configuration's depth of an instance built with fewer
    layers than it, or taken from a parent that was (the same submodule of the parent's
    instance at that depth); None otherwise."""
    if capture.default_module is not None:
        return build.parameters(capture.default_module)
    if recorded is None or capture.mod.constructed is None:
        return None
    if capture.mod.constructed.source != "parent":
        return None
    parent = doc.captures.get(recorded.parent)
    default = parent.default_module if parent is not None else None
    return build.parameters(default, recorded.path)


def _from_parent(recorded: parents.Recorded) -> build.Built:
    device = "meta"
    for tensor in recorded.instance.parameters():
        device = tensor.device.type
        break
    how = Construction(
        "parent",
        recorded.text,
        expr=recorded.expr,
        inputs_from=recorded.parent if recorded.called else None,
    )
    return build.Built(recorded.instance, "cpu" if device == "cpu" else "meta", how)


_POSITION = re.compile(r"^(start_pos|pos|offset|step|start|position|past_length|seqlen_offset)$")
_STATE = re.compile(r"^(hidden|hiddens|hx|h0|h|state|states|memory|mems|carry)$")


def _annotation(name: str, plan: InputPlan) -> Any:
    """The annotation of ``forward``'s parameter ``name`` (``inspect.Parameter.empty``)."""
    param = next((p for p in plan.params if p.name == name), None)
    return param.annotation if param is not None else inspect.Parameter.empty


def _a_dtype(name: str, plan: InputPlan) -> inputs.PlannedInput | None:
    """``torch.float32`` for a parameter that names a dtype (``dtype``, diffusers'
    ``hidden_dtype``, or annotated ``torch.dtype``): a value, never a tensor to infer."""
    dtype_named = name == "dtype" or name.endswith("_dtype")
    if not dtype_named and _annotation(name, plan) is not torch.dtype:
        return None
    return inputs.PlannedInput(
        name, "value", value=torch.float32, assumed=True, reason="its name, a dtype"
    )


def _image_like(name: str) -> bool:
    return name.lower() in ("x", "img", "image", "images", "imgs", "pixel_values", "input", "inp")


def _video_like(name: str, hints: dict[str, int]) -> bool:
    """A clip of frames: named so, or an image-like name where the build names frames."""
    lowered = name.lower()
    if "frames" not in hints:
        return False
    return lowered in ("video", "videos", "clip", "clips", "pixel_values_videos") or _image_like(
        name
    )


def runs(mod: ModuleResult) -> bool:
    """Whether a capture went all the way through ``forward`` with shapes."""
    if not mod.outputs or mod.status == "failed":
        return False
    return not any(d.code in ("FX201", "FX202") for d in mod.diagnostics)


class ClassCapture:
    """One built class of the document, captured step by step into ``self.mod``."""

    def __init__(
        self,
        doc: ExecutedDocument,
        req: ClassRequest,
        mod: ModuleResult,
        given: dict[str, inputs.PlannedInput] | None = None,
    ) -> None:
        self.doc = doc
        self.req = req
        self.mod = mod
        self.given = given or {}
        """Inputs recorded in a parent's forward, by parameter name (directives still win)."""
        self.within: tuple[shapes.Propagation, dict[str, Any]] | None = None
        """When ``given`` was read off the parent's trace: the parent's propagation and its
        examples of the arguments, by parameter name (:func:`shapes.propagate_within`)."""
        self.feeds: list[shapes.ExampleInput] | None = None
        """The inputs the capture ran with, once known."""
        self.feeds_planned: list[inputs.PlannedInput] = []
        self.prop: shapes.Propagation | None = None
        """The traced graph's shapes with the inputs the capture ran with."""
        self.assumed_inputs: list[tuple[inputs.PlannedInput, Span]] = []
        """Inputs fxls inferred, with where to report them (FX405)."""
        self.checks_decided = False
        """The trace used decided checks from ranks and dtypes (``fx+decided``)."""
        self.decided_inputs: set[str] = set()
        """Inputs whose rank or dtype a check decided while tracing read: other forms of
        them are not tried (the graph holds their branch)."""
        self.unknown_for_checks: list[str] = []
        """Inputs (placeholder names) fxls could not infer that the last trace attempt's
        undecided rank or dtype check read: what its diagnostic says to declare."""
        self.called_with: dict[str, inputs.PlannedInput] | None = None
        """Inputs found in the file's own calls of the class (computed once)."""
        self.hints: dict[str, int] = {}
        """Sizes the build names (image size, channels), for inferred inputs."""
        self.arguments: dict[str, Any] = {}
        """The constructor arguments, when known (configurations for inferred inputs)."""
        self.span: Span = class_span(doc.source, req.line, req.name)
        """The class name on its ``class`` line: where class-wide diagnostics go."""
        self.module: nn.Module | None = None
        self.forward_def: ForwardDef | None = None
        self.plan: InputPlan | None = None
        self.traced: Traced | None = None
        self.specialized: list[Diagnostic] = []
        self.defaults_needed = False
        """Plan parameters defaulting to ``None`` that ``forward`` uses unasked as inputs
        (:func:`inputs.needed_unasked`)."""
        self.met_none = False
        """Whether a run of ``forward`` with other forms of the inputs stopped on a ``None``."""
        self.one_modality = False
        """Leave the inputs of a model's other modalities at their defaults."""
        self.other_inputs: list[str] = []
        """The inputs of other modalities the plan added beside the main one."""
        self.watching: frozenset[type] = frozenset()
        """Classes whose first call inside a submodule kept whole the propagation records
        (``Propagation.inner_calls``): the children this capture records after it."""
        self.children_ran: tuple[parents.FirstCalls, dict[str, int]] | None = None
        """When ``forward`` ran on fake tensors for its shapes (strategy ``fake-run``): the
        watched classes' first calls in the run that was kept, and the named dimensions it
        fixed; :meth:`record_children` takes them instead of running ``forward`` again."""
        self.default_module: nn.Module | None = None
        """The instance at the default configuration's depth, when it was built with fewer
        layers (``instances.at_default_depth``)."""

    def unasked_defaults(self) -> bool:
        """Whether a parameter left at its default ``None`` is data that ``forward`` uses
        without asking whether it was given (a capture that did not run through is worth
        running again with it as an input)."""
        plan, module, mod = self.plan, self.module, self.mod
        if self.defaults_needed or plan is None or module is None:
            return False
        said = [d.message for d in mod.diagnostics] + mod.notes
        if not (self.met_none or any(_NONE in text for text in said)):
            return False  # it stopped on something else: a second capture would cost as much
        return any(
            inputs.needed_unasked(param, module)
            for param in plan.positional()
            if param.name not in plan.declared and param.name in plan.planned
        )

    def note(self, text: str) -> None:
        self.mod.notes.append(text)

    def diagnose(self, diagnostic: Diagnostic) -> None:
        self.mod.diagnostics.append(diagnostic)

    def timed(self, step: str, started: float) -> None:
        self.mod.timings[step] = time.perf_counter() - started

    # -- the steps -------------------------------------------------------------------------

    def run(
        self,
        module: nn.Module,
        report_phase: PhaseReporter,
        arguments: dict[str, Any] | None = None,
    ) -> None:
        """Every step after the build: inputs, trace, shapes, checks, records."""
        doc, req, mod = self.doc, self.req, self.mod
        self.module = module
        self.arguments = arguments or {}
        self.hints = inputs.size_hints(module, self.arguments)
        mod.params = sum(p.numel() for p in module.parameters())
        mod.buffers = sum(b.numel() for b in module.buffers())
        plan = self.plan = self._plan_inputs(module)

        report_phase("trace", req.name)
        started = time.perf_counter()
        self.forward_def = self._find_forward(module)
        traced = self.traced = self._trace(module, plan)
        self.timed("trace", started)
        self._specialized_checks(module, plan, traced)
        if traced.gm is None:
            assign_ast_spans(traced.partial, self.forward_def, doc.source)
            started = time.perf_counter()
            self._fake_run(module, plan, traced)
            self.timed("shapes", started)
            return
        self._graph(module, plan, traced, traced.gm)

    def record_children(self, wanted: dict[type, str]) -> None:
        """Record the instances of ``wanted`` classes this module builds and calls (only
        the instances it builds when its own inputs are unknown)."""
        module, feeds = self.module, self.feeds
        if module is None or not wanted:
            return
        if feeds is None:
            self._record_built(module, wanted)
            return
        inside = {type(m) for m in module.modules()} & set(wanted)
        if not inside:
            return
        started = time.perf_counter()
        constructed = self.mod.constructed
        parent_expr = constructed.expr if constructed is not None else None
        watched = {cls: wanted[cls] for cls in inside}
        found = self._recorded_in_trace(module, watched, parent_expr)
        if found is None:
            job = self.doc.job
            how = parents.RunSettings(self.doc.path, job.source, job.symbolic, parent_expr)
            found = parents.record(module, feeds, watched, how, self._children_ran(watched))
        if any(p.assumed or p.upstream for p in self.feeds_planned):
            # a child's inputs follow from inputs fxls assumed for this module: a shape error
            # in the child may be that guess, not the code (a hint there, as here)
            for rec in found.values():
                for planned in rec.inputs.values():
                    planned.upstream = planned.upstream or self.mod.name
        records = self.doc.records
        for name, rec in found.items():
            kept = records.get(name)
            if kept is None or parents.generality(rec) > parents.generality(kept):
                records[name] = rec
        self.timed("record", started)

    def _record_built(self, module: nn.Module, wanted: dict[type, str]) -> None:
        """The first instance of each ``wanted`` class ``module`` holds, without inputs."""
        constructed = self.mod.constructed
        parent_expr = constructed.expr if constructed is not None else None
        built = self.doc.built_by_parents
        for path, sub in module.named_modules():
            name = wanted.get(type(sub))
            if name is not None and path and name not in built:
                built[name] = parents.Recorded(sub, path, self.mod.name, parent_expr, called=False)

    def _recorded_in_trace(
        self, module: nn.Module, watched: dict[type, str], parent_expr: str | None
    ) -> dict[str, parents.Recorded] | None:
        """The children's calls as the trace saw them, when it saw all of them and the
        traced graph's shapes are what running ``forward`` gives: an FX trace without a wrap
        repair (a submodule kept whole runs its ``forward`` in the propagation; a decided
        check takes the branch a run takes; the arguments ``concrete_args`` fixed are those
        a run passes) whose propagation ran through symbolically as asked without fixing a
        dimension. A watched class with instances inside a submodule kept whole is read off
        the propagation's run of that submodule (``Propagation.inner_calls``) when the trace
        does not call it too. Else None (the parent's ``forward`` is run again for them)."""
        traced, prop, mod = self.traced, self.prop, self.mod
        if not self.doc.job.children_from_trace:
            return None
        if traced is None or traced.gm is None or prop is None:
            return None
        if mod.strategy.method != "fx" or not set(mod.strategy.repairs) <= _SEEN_THROUGH:
            return None
        if not _runs_as_traced(traced.concrete, self.feeds or []):
            return None
        expected = "symbolic" if self.doc.job.symbolic else "fake"
        if prop.error is not None or prop.notes or prop.namer is None or prop.mode != expected:
            return None
        inside = _inside_kept(module, traced.gm, watched)
        # a class the trace saw no call of (its instances are the parent's, none inside a
        # submodule kept whole) is not called by a run of forward either: nothing to record
        seen = {cls: name for cls, name in watched.items() if cls in traced.calls}
        found = parents.from_trace(module, traced.calls, prop, seen, parent_expr=parent_expr)
        if not inside or found is None:
            return found
        # the propagation ran those submodules' forward and recorded the calls there (the
        # first of each class), unless the trace calls the class too (which call is first)
        if any(cls in seen for cls in inside):
            return None
        ran = parents.from_calls(module, prop, inside, parent_expr=parent_expr)
        return None if ran is None else found | ran

    def _find_forward(self, module: nn.Module) -> ForwardDef | None:
        tree = self.doc.tree
        if tree is None:
            return None
        fn = inspect.unwrap(getattr(type(module), "forward", None))  # type: ignore[arg-type]
        code = getattr(fn, "__code__", None)
        if code is None or code.co_filename != self.doc.path:
            return None
        return find_function(tree, code)

    def _specialized_checks(self, module: nn.Module, plan: InputPlan, traced: Traced) -> None:
        """FX108: checks in ``forward`` and traced-through helpers decided once while tracing."""
        doc = self.doc
        checks = failures.specialized_checks(self.forward_def, plan.traced_names(), doc.source)
        root_code = getattr(inspect.unwrap(type(module).forward), "__code__", None)
        checks += strategies.traced_through_checks(
            traced.traced_params, doc.tree, doc.source, skip=[root_code] if root_code else []
        )
        self.specialized = once_per_span([w.diagnostic() for w in checks])
        self.mod.diagnostics.extend(self.specialized)

    def _graph(
        self, module: nn.Module, plan: InputPlan, traced: Traced, gm: torch.fx.GraphModule
    ) -> None:
        """An FX graph was had: inputs, shapes, the eager comparison, checks, node records."""
        doc, mod = self.doc, self.mod
        assign_ast_spans(gm.graph, self.forward_def, doc.source)
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        ordered = self._complete_inputs(gm, placeholders, plan)
        values: dict[str, list[Value]] = {}
        examples: dict[str, Any] = {}
        if ordered is None:
            mod.status = "partial"
            self._report_assumed([])
            self.note("shapes unavailable: some inputs are unknown")
        else:
            started = time.perf_counter()
            ordered, prop = self._settle_sizes(gm, placeholders, ordered)
            self.prop = prop if isinstance(prop, shapes.Propagation) else None
            self.feeds_planned = ordered
            self._set_inputs(ordered)
            self._report_assumed(ordered)
            feeds: list[shapes.ExampleInput] = [
                replace(p, name=str(n.target)) for p, n in zip(ordered, placeholders)
            ]
            self.feeds = [replace(p) for p in ordered]
            values, examples = self._shapes(gm, prop)
            self.timed("shapes", started)
            suspicious = bool(self.specialized) or mod.strategy != _PLAIN_FX
            cheap = len(gm.graph.nodes) <= COMPARE_MAX_NODES
            if (suspicious or cheap) and not any(d.code == "FX201" for d in mod.diagnostics):
                started = time.perf_counter()
                self._compare_with_eager(module, gm, feeds, traced)
                self.timed("compare", started)
        mod.diagnostics.extend(d.diagnostic() for d in graphcheck.lint(gm.graph, self.span))
        mod.diagnostics.extend(
            d.diagnostic() for d in graphcheck.unused(gm.graph, doc.source, doc.path)
        )
        self._record(gm, values, examples)

    def _record(
        self,
        gm: torch.fx.GraphModule,
        values: dict[str, list[Value]],
        examples: dict[str, Any],
        rename: Callable[[str], str] | None = None,
    ) -> None:
        """The graph's nodes and outputs as wire data. The nodes one replayed call of an
        identical sub-block made become one ``BlockCopy`` of its template's records in
        ``block_copies`` where that expands to their records (:func:`blocks.block_copy`);
        another copied node becomes a ``NodeCopy`` of its template's record in
        ``node_copies`` when that expands to its record (:func:`node_copy`), else a record
        made from the template's named arguments (noted in ``doc.copied_nodes`` for
        :func:`reuse.compact`); ``capture_document`` expands the copies unless the result is
        sent."""
        segments = self.traced.segments if self.traced and rename is None else []
        book = blocks.NodeRecords(gm, values, examples, rename)
        book.record(list(gm.graph.nodes), segments)
        self.mod.nodes = [r for r in book.records if isinstance(r, NodeInfo)]
        self.mod.node_copies = [r for r in book.records if isinstance(r, NodeCopy)]
        self.mod.block_copies = book.blocks
        self.mod.containers = containers(gm, self.doc.path, self.module or gm)
        if book.copied_from:
            self.doc.copied_nodes[id(self.mod)] = (self.mod, book.copied_from)
        output = next((n for n in gm.graph.nodes if n.op == "output"), None)
        if output is not None:
            self.mod.outputs = values.get(output.name) or output_values(output, values)
            self._tensor_fields(strategies.result_fields(gm, examples.get(output.name)))

    def _tensor_fields(self, result: Mapping[str, Any] | None) -> None:
        """A ``forward`` that returns a dict-like result (a ``ModelOutput`` dataclass): its
        outputs are the fields that hold tensors, and a note names them and those left out
        (unset fields, caches)."""
        mod = self.mod
        if result is None or not result:
            return
        try:
            items = [(str(k), v, len(values_of(v))) for k, v in result.items()]
        except Exception:  # a user's mapping may raise on iteration
            return
        if sum(n for _, _, n in items) != len(mod.outputs):
            return
        kept: list[Value] = []
        shown: list[str] = []
        left: list[str] = []
        at = 0
        for key, value, count in items:
            part = mod.outputs[at : at + count]
            at += count
            if any(v.kind == "tensor" for v in part):
                kept.extend(part)
                shown.append(f"`{key}` {', '.join(_value_text(v) for v in part)}")
            else:
                left.append(f"`{key}`" + ("" if value is None else f" ({type(value).__name__})"))
        if not kept:
            return
        mod.outputs = kept
        what = strategies.result_kind(result)
        what = "a dict" if what in ("dict", "immutable_dict") else f"`{what}`"
        note = f"`forward` returns {what}; its tensor fields are shown: {'; '.join(shown)}"
        if left:
            note += f" (not shown: {', '.join(left)})"
        self.note(note)

    # -- inputs ----------------------------------------------------------------------------

    def _plan_inputs(self, module: nn.Module) -> InputPlan:
        """Declared inputs (FX403 when invalid), plain-value defaults, and what is left."""
        req, doc = self.req, self.doc
        try:
            params = inputs.forward_parameters(module)
        except (TypeError, ValueError):
            params = []
        plan = InputPlan(params=params, symbols=inputs.Symbols(req.inputs))
        specs = {spec.name: spec for spec in req.inputs}
        for param in plan.positional():
            spec = specs.get(param.name)
            if spec is not None:
                try:
                    plan.planned[param.name] = inputs.from_spec(spec, plan.symbols, doc.namespace)
                    plan.declared.add(param.name)
                    continue
                except inputs.InputError as exc:
                    span = line_span(doc.source, spec.line) if spec.line else self.span
                    error = f"`{param.name}`: {exc}"
                    self.diagnose(
                        catalogue.FX403(span, error=error).diagnostic({"arg": param.name})
                    )
            recorded = self.given.get(param.name)
            if recorded is not None:
                plan.planned[param.name] = recorded
                plan.declared.add(param.name)
                continue
            sized = param.default is None and (
                inputs.from_build(param.name, self.arguments, plan.symbols)
                or inputs.skip_sample(param.name, module, plan.symbols, self._spatial())
                or inputs.cross_attention_states(param.name, module, self.arguments, plan.symbols)
                or (self.defaults_needed and inputs.needed_unasked(param, module))
            )
            if inputs.keeps_default(param) and not sized:
                planned = inputs.PlannedInput(
                    param.name, "value", value=param.default, origin="default"
                )
                plan.planned[param.name] = planned
            else:
                plan.pending.append(param.name)
        primary = inputs.primary_input(plan.positional()) if not plan.pending else None
        if primary is not None and primary.name not in plan.declared:
            # every input defaults (``input_ids=None, ..., inputs_embeds=None``): a forward
            # called with none of them computes nothing; its main input is inferred instead
            del plan.planned[primary.name]
            plan.pending.append(primary.name)
            others = (
                []
                if self.one_modality
                else inputs.other_modalities(module, plan.positional(), primary)
            )
            self.other_inputs = [n for n in others if n not in plan.declared]
            for name in [*inputs.decoder_inputs(plan.positional(), primary), *others]:
                if name not in plan.declared:
                    del plan.planned[name]
                    plan.pending.append(name)
        _needed_defaults(plan, module)
        names = {p.name for p in params}
        for spec in req.inputs:
            if spec.name not in names:
                span = line_span(doc.source, spec.line) if spec.line else self.span
                error = f"`{req.name}.forward` has no parameter `{spec.name}`"
                self.diagnose(catalogue.FX403(span, error=error).diagnostic({"arg": spec.name}))
        return plan

    def _spatial(self) -> int:
        """The image size the build names, else the one fxls assumes first."""
        return self.hints.get("spatial", inputs.SPATIAL)

    def _inferred(
        self, graph_owner: Any, node: torch.fx.Node | None, name: str, plan: InputPlan, at: Span
    ) -> inputs.PlannedInput | None:
        """An undeclared input inferred from the first layer it reaches (FX405 once the sizes
        are settled, ``_report_assumed``), or FX402."""
        spatial = self.hints.get("spatial", inputs.SPATIAL)
        planned = _a_dtype(name, plan) or self._from_calls(plan).get(name)
        if planned is None:
            planned = self._from_build(graph_owner, node, name, plan, spatial)
        if planned is None and self.module is not None:
            planned = inputs.up_block_inputs(
                name, self.module, self.arguments, plan.symbols, spatial
            ) or inputs.skip_sample(name, self.module, plan.symbols, spatial)
        if planned is None and self.module is not None:
            planned = inputs.cross_attention_states(name, self.module, self.arguments, plan.symbols)
        first = inputs.config_first(name, self.module, graph_owner, node) if self.module else False
        if planned is None and self.module is not None and first:
            planned = inputs.from_config(name, self.module, self.arguments, plan.symbols)
        if planned is None and node is not None:
            planned = inputs.infer(graph_owner, node, plan.symbols, spatial)
        if planned is None and self.module is not None:
            planned = inputs.infer_from_source(
                self.module, name, self.doc.tree, plan.symbols, spatial
            )
        if planned is None and self.module is not None:
            planned = inputs.from_config(name, self.module, self.arguments, plan.symbols)
        if planned is None:
            planned = self._last_resort(graph_owner, node, name, plan)
        if planned is None:
            return None
        planned = self._as_unpacked(name, planned, plan)
        planned.name = name
        self.assumed_inputs.append((planned, at))
        return planned

    def _as_unpacked(
        self, name: str, planned: inputs.PlannedInput, plan: InputPlan
    ) -> inputs.PlannedInput:
        """``planned`` laid out as ``forward`` unpacks the input's size (``tgt_len, bsz,
        embed_dim = query.size()``: :mod:`axes`), or as an input assumed alike was (``key``
        and ``value`` beside that ``query``)."""
        if self.module is None or planned.kind != "tensor" or not planned.dims:
            return planned
        unpacking = axes.unpacked_names(self.module, name)
        if unpacking is not None:
            laid = axes.laid_out(planned, unpacking, plan.symbols)
            if laid is not planned:
                plan.laid_out.setdefault(tuple(planned.dims), (name, unpacking))
            return laid
        like = plan.laid_out.get(tuple(planned.dims))
        if like is None:
            return planned
        return axes.laid_out(planned, like[1], plan.symbols, like=like[0])

    def _last_resort(
        self, graph_owner: Any, node: torch.fx.Node | None, name: str, plan: InputPlan
    ) -> inputs.PlannedInput | None:
        """An image of the build's size for an image-like name, a plain value, or the first
        layer the input reaches through shape-keeping calls."""
        spatial = self.hints.get("spatial", inputs.SPATIAL)
        video = _video_like(name, self.hints)
        if "spatial" in self.hints and (video or _image_like(name)):
            b = (inputs.BATCH, plan.symbols.size(inputs.BATCH))
            dims = [b, (None, self.hints.get("channels", 3)), (None, spatial), (None, spatial)]
            reason = f"image size {spatial} of the build"
            if video:  # (B, C, F, H, W), as Conv3d takes it
                dims.insert(2, (None, self.hints["frames"]))
                reason = f"{self.hints['frames']} frames of image size {spatial} of the build"
            return inputs.PlannedInput(name, "tensor", dims, assumed=True, reason=reason)
        planned = self._plain_value(name, plan) or inputs.per_sample(name, plan.symbols)
        if planned is None and self.module is not None:
            planned = inputs.rotary_positions(name, self.module, plan.symbols)
        if planned is None:
            planned = self._normalized(name, plan)
        if planned is None and node is not None:
            planned = inputs.infer_downstream(graph_owner, node, plan.symbols, spatial)
        if planned is None and node is not None:
            planned = inputs.meets_parameter(graph_owner, node, plan.symbols)
        return planned

    def _from_build(
        self, graph_owner: Any, node: torch.fx.Node | None, name: str, plan: InputPlan, spatial: int
    ) -> inputs.PlannedInput | None:
        """What the build's sizes say of ``name`` (:func:`inputs.from_build`), unless the first
        layer it reaches takes another width: that layer's (a model's ``caption_projection``
        takes the text encoder's 2304 features, not its ``cross_attention_dim`` of 2240)."""
        planned = inputs.from_build(name, self.arguments, plan.symbols)
        if planned is None or node is None:
            return planned
        layer = inputs.infer(graph_owner, node, plan.symbols, spatial)
        if layer is None or layer.kind != "tensor" or not layer.dims or not planned.dims:
            return planned
        if layer.dims[-1][1] == planned.dims[-1][1]:
            return planned
        if len(layer.dims) != len(planned.dims):
            return layer
        return replace(layer, dims=[*planned.dims[:-1], layer.dims[-1]])  # the build's length

    def _normalized(self, name: str, plan: InputPlan) -> inputs.PlannedInput | None:
        """``[B, T, width]`` for the first input of a normalization class of the library's
        own (``RMSNorm``, its width known: :func:`inputs.norm_width`), ``[B, width, H, W]``
        for one that normalizes channels first (:func:`axes.channels_first`), else None."""
        first = next(iter(plan.positional()), None)
        module = self.module
        width = inputs.norm_width(module) if module is not None else None
        if first is None or first.name != name or width is None or module is None:
            return None
        b, t = (inputs.BATCH, plan.symbols.size(inputs.BATCH)), (
            inputs.SEQUENCE, plan.symbols.size(inputs.SEQUENCE)
        )  # fmt: skip
        reason = f"the width {width} `{type(module).__name__}` normalizes"
        first_axis = axes.channels_first(module)
        sizes = inputs.spatial_sizes(first_axis.spatial) if first_axis is not None else None
        if first_axis is not None and sizes is not None:
            # channels first: ``[B, C, H, W]`` for a ``LayerNorm2d``
            dims = [b, (None, width), *((None, size) for size in sizes)]
            reason = f"{reason}, channels first as `{first_axis.text}` meets it"
            return inputs.PlannedInput(name, "tensor", dims, assumed=True, reason=reason)
        return inputs.PlannedInput(
            name, "tensor", [b, t, (None, width)], assumed=True, reason=reason
        )

    def _fill_missing(
        self,
        ordered: list[inputs.PlannedInput | None],
        names: list[str],
        spans: list[Span],
        symbols: inputs.Symbols,
    ) -> bool:
        """Inputs nothing told: shaped after the tensor inputs that are known (``memory``
        like ``tgt``, a mask after a sequence: :func:`inputs.shaped_like`; those shaped so
        before it too: Mochi's ``encoder_attention_mask`` after ``encoder_hidden_states``
        made a sequence of ``temb``'s width), else FX402. Returns whether every input is now
        planned."""
        known = [p for p in ordered if p is not None and p.kind == "tensor"]
        complete = True
        for index, planned in enumerate(ordered):
            if planned is not None:
                continue
            name, at = names[index], spans[index]
            if not known:
                diag = catalogue.FX402(
                    at,
                    arg=name,
                    cls=self.req.name,
                    example=catalogue.suggested_shape(name),
                    reason="",
                )
                self.diagnose(diag.diagnostic({"arg": name}))
                complete = False
                continue
            like = None
            if self.module is not None:
                like = inputs.position_ids(name, known, self.module, self.arguments)
            like = like or inputs.shaped_like(name, known, symbols)
            if self.plan is not None:
                like = self._as_unpacked(name, like, self.plan)
            ordered[index] = like
            self.assumed_inputs.append((like, at))
            if like.kind == "tensor":
                known.append(like)
        return complete

    def _from_calls(self, plan: InputPlan) -> dict[str, inputs.PlannedInput]:
        """Inputs the file passes to this class in its own calls (evidence before guesses)."""
        if self.called_with is None:
            module = self.module
            self.called_with = {}
            if module is not None:
                names = [p.name for p in plan.positional()]
                built = self.mod.constructed
                built_by = built.text if built is not None and built.source == "call site" else None
                self.called_with = inputs.from_calls(
                    self.doc, type(module), names, plan.symbols, built_by
                )
        return {k: copy.copy(v) for k, v in self.called_with.items()}

    def _plain_value(self, name: str, plan: InputPlan) -> inputs.PlannedInput | None:
        """Inputs that are not tensors fed to a layer: a position (``start_pos`` -> 0), a count
        (``num_frames: int`` -> 1), a flag, or a recurrent state made by the module's own ``init_hidden(batch)``."""
        annotation = _annotation(name, plan)
        if annotation is bool:
            return inputs.PlannedInput(name, "value", value=False, assumed=True, reason="a flag")
        if annotation is dict or name.endswith("kwargs"):
            return inputs.PlannedInput(
                name, "value", value={}, assumed=True, reason="its name, keyword arguments"
            )
        if _POSITION.match(name):
            return inputs.PlannedInput(
                name, "value", value=0, assumed=True, reason="its name, a position"
            )
        if annotation is int:
            # a count (``num_frames: int``): 1 divides every size it may be taken from
            return inputs.PlannedInput(
                name, "value", value=1, assumed=True, reason="its annotation `int`, a count"
            )
        module = self.module
        size_use = inputs.used_as_size(module, name) if module else None
        if size_use is not None:
            # a length (``torch.arange(seq_len)``): the sequence's example size
            return inputs.PlannedInput(
                name, "value", value=plan.symbols.size(inputs.SEQUENCE), assumed=True,
                reason=f"its use as a size, `{size_use}`",
            )  # fmt: skip
        if module is not None and _STATE.match(name):
            for method in ("init_hidden", "init_hidden_state", "init_state", "initial_state",
                           "begin_state"):  # fmt: skip
                make = getattr(module, method, None)
                if not callable(make):
                    continue
                batch = plan.symbols.size(inputs.BATCH)
                try:
                    with torch.device("meta"):
                        value = make(batch)
                except Exception:
                    continue
                return inputs.PlannedInput(
                    name, "value", value=value, assumed=True,
                    reason=f"`self.{method}({batch})`",
                )  # fmt: skip
        return None

    def _report_assumed(self, ordered: list[inputs.PlannedInput]) -> None:
        """FX405 for each assumed input, with the sizes the capture ran with."""
        final = {p.name: p for p in ordered}
        for planned, at in self.assumed_inputs:
            used = final.get(planned.name, planned)
            shape = used.shape_text()
            directive = shape
            if used.kind == "value":  # a tuple of tensors is an expression, not a shape
                directive = inputs.directive_expr(used.value) or shape
            info = catalogue.FX405(
                at, arg=used.name, shape=shape, reason=used.reason, directive=directive
            )
            self.diagnose(info.diagnostic({"arg": used.name, "shape": shape}))
        self.assumed_inputs = []

    def _set_inputs(self, ordered: list[inputs.PlannedInput]) -> None:
        once = {id(p): p for p in ordered}  # a tuple given as a concrete value: one per item
        self.mod.inputs = [
            InputValue(p.name, p.protocol_value(), p.assumed, "assumed" if p.assumed else p.origin)
            for p in once.values()
        ]
        self.mod.input_sizes = {
            name: size for p in ordered if p.kind == "tensor" for name, size in p.dims if name
        }

    def _complete_inputs(
        self, gm: torch.fx.GraphModule, placeholders: list[torch.fx.Node], plan: InputPlan
    ) -> list[inputs.PlannedInput] | None:
        """Inputs in placeholder order, undeclared ones inferred; None when one cannot be."""
        found: list[inputs.PlannedInput | None] = []
        names = _placeholder_params(placeholders, plan.params)
        spans = [node.meta.get(SPAN_KEY, self.span) for node in placeholders]
        for node, param_name, span in zip(placeholders, names, spans):
            planned = plan.planned.get(param_name)
            if planned is None:
                planned = self._inferred(gm, node, param_name, plan, span)
            found.append(planned)
        complete = self._fill_missing(found, names, spans, plan.symbols)
        ordered = [p for p in found if p is not None]
        self._set_inputs(ordered)
        return ordered if complete else None

    # -- tracing ---------------------------------------------------------------------------

    def _trace(self, module: nn.Module, plan: InputPlan) -> Traced:
        """Trace ``module`` with the FX strategies (see :mod:`fxls.worker.capture.trace.strategies`).

        Each failed attempt is explained (FX1xx at its span) and, when a repair applies (leaf,
        wrap, concrete), the trace is retried with it, at most ``MAX_AUTO_LEAVES`` leaves and
        ``strategies.MAX_ATTEMPTS`` attempts in all. Sets ``mod.status``/``strategy``/``notes``
        on success, ``mod.error`` and status ``failed`` when no FX graph could be had.
        """
        doc, req, mod = self.doc, self.req, self.mod
        functions, library_modules = strategies.library_autowrap()
        library_leaves = strategies.library_leaf_classes(module)
        repairs = strategies.Repairs()
        defaults = plan.defaults()
        param_names = [p.name for p in plan.positional()]
        reported: dict[tuple[str, int, int], Diagnostic] = {}
        auto_leaves = 0

        def leaves() -> list[str]:
            return [*req.leaf, *repairs.leaves]

        tracer = SpanTracer(doc.path, doc.source)
        decider = decided.Decider(module, {})
        for _attempt in range(strategies.MAX_ATTEMPTS):
            concrete = plan.concrete()
            concrete.update({name: defaults[name] for name in repairs.concrete})
            decider = decided.Decider(module, _examples(plan, concrete))
            tracer = SpanTracer(
                doc.path,
                doc.source,
                leaves(),
                autowrap_functions=[*functions, *repairs.wraps],
                autowrap_modules=library_modules,
                leaf_predicate=strategies.is_library_leaf,
                reuse_blocks=reuse.enabled(doc.job.reuse_blocks),
            )
            tracer.decider = decider
            try:
                # forward may store proxies on self while tracing
                with state.kept(module.modules()):
                    graph = tracer.trace(module, concrete_args=concrete or None)
                    decided.drop_checks(graph, decider.decisions)
                    gm = graph_module(tracer.root, graph, type(module).__name__)
                _attributes_restored(gm, module)
            except BaseException as exc:
                cpulimit.passed_on(exc)
                failure = failures.explain(exc, doc.path, doc.source, req.name, self.span, doc.tree)
                text = _failing_text(doc, failure, exc, module)
                repair = strategies.next_repair(
                    exc, module, doc.namespace, doc.path, repairs, leaves(), defaults, text
                )
                # a rank or dtype check on inputs not known yet: they are inferred as for a
                # run on fake tensors, and the next attempt decides the check (each attempt
                # infers at least one more, so this ends)
                unknown = decider.needs_inputs
                if unknown and self._infer_for_checks(module, tracer.graph, plan, decider.missing):
                    repair = strategies.Repair("decided", f"`{short_source(text)}`")
                elif repair is None and repairs.decided:
                    # past a decided check, the trace went where a default (`mask=None`,
                    # a proxy while tracing) took another branch: the defaults, as a run
                    # on fake tensors has them
                    repair = strategies.defaults_fixed(repairs, defaults)
                if repair is not None and repair.kind == "leaf" and auto_leaves >= MAX_AUTO_LEAVES:
                    repair = None
                self.unknown_for_checks = sorted(decider.missing) if unknown else []
                diag = self._trace_failure(exc, failure, text, repair, defaults)
                self._report_attempt(reported, diag)
                if repair is None:
                    mod.error = error_info("trace", exc)
                    mod.status = "failed"
                    return Traced(
                        None, tracer.graph, [*req.leaf, *library_leaves], tracer.traced_params
                    )
                auto_leaves += repair.kind == "leaf"
                repairs.add(repair)
                continue
            used = strategies.used_value_placeholders(
                gm, [n for n in defaults if n not in repairs.concrete], param_names
            )
            if used:
                repairs.add(strategies.Repair("concrete", ", ".join(used), names=used))
                continue
            break
        else:
            mod.status = "failed"
            self.note(f"gave up tracing after {strategies.MAX_ATTEMPTS} attempts")
            return Traced(None, tracer.graph, [*req.leaf, *library_leaves], tracer.traced_params)
        if concrete:
            _drop_concrete_guards(gm)
        self._report_decided(decider, repairs)
        mod.status = "traced"  # repairs are in the strategy (fx+leaf...); partial: shapes stop
        mod.strategy = repairs.strategy(declared_leaves=bool(req.leaf))
        mod.notes.extend(repairs.notes(defaults))
        segments = tracer.replayer.segments if tracer.replayer is not None else []
        return Traced(
            gm, gm.graph, leaves() + library_leaves, tracer.traced_params, segments,
            tracer.module_calls, concrete,
        )  # fmt: skip

    def _infer_for_checks(
        self, module: nn.Module, graph: torch.fx.Graph, plan: InputPlan, wanted: set[str]
    ) -> bool:
        """The inputs not known yet that a check read (placeholder names ``wanted``), inferred
        from what the trace recorded and the module (as for a run on fake tensors) and
        planned; whether any was. The others are inferred from the whole trace, as always."""
        assign_ast_spans(graph, self.forward_def, self.doc.source)
        placeholders = [n for n in graph.nodes if n.op == "placeholder"]
        by_param = dict(zip(_placeholder_params(placeholders, plan.params), placeholders))
        found = False
        for name in list(plan.pending):
            node = by_param.get(name)
            if node is None or str(node.target) not in wanted:
                continue
            span = node.meta.get(SPAN_KEY, self.span)
            planned = self._inferred(module, node, name, plan, span)
            if planned is not None:
                plan.planned[name] = planned
                plan.pending.remove(name)
                found = True
        return found

    def _report_decided(self, decider: decided.Decider, repairs: strategies.Repairs) -> None:
        """Each check decided while tracing: FX101 at its line (once; worked around, so
        information in the end), and the strategy says ``decided``."""
        decisions = decider.decisions
        self.decided_inputs = set(decider.read_inputs)
        self.checks_decided = bool(decisions)
        if not decisions:  # an earlier attempt's inferred inputs decided none in the end
            repairs.applied = [r for r in repairs.applied if r.kind != "decided"]
            return
        codes = set(_DECIDED_CODES.values())
        said = {(d.code, d.span.line): d for d in self.mod.diagnostics if d.code in codes}
        texts = []
        for decision in decisions:
            span = decision.span
            if span is None:  # in code of another file (a library's module)
                texts.append("checks in code of other files")
                continue
            text = short_source(self.doc.source.text(span))
            texts.append(f"`{text}`")
            key = (_DECIDED_CODES[decision.kind], span.line)
            diag = said.get(key)
            if diag is None:
                diag = said[key] = _decided_diagnostic(decision, span, text)
                self.diagnose(diag)
            elif "value" in diag.data:
                continue
            diag.data.update(decided=f"`{text}`", value=decision.value)
            taken = "the rank is " if decision.kind != "check" else ""
            how = (
                f"fxls decided it while tracing from the ranks and dtypes of the inputs: "
                f"{taken}`{decision.value}` for these inputs."
            )
            diag.fix = f"{how} {diag.fix}" if diag.fix else how
        target = ", ".join(dict.fromkeys(texts))
        found = next((r for r in repairs.applied if r.kind == "decided"), None)
        if found is None:
            repairs.add(strategies.Repair("decided", target))
        else:
            found.target = target

    def _report_attempt(
        self, reported: dict[tuple[str, int, int], Diagnostic], diag: Diagnostic
    ) -> None:
        """A failed trace attempt's diagnostic, once per code and place; the last attempt's
        (no repair left) replaces an earlier one there, which names a repair fxls made."""
        key = (diag.code, diag.span.line, diag.span.col)
        earlier = reported.get(key)
        if earlier is None:
            reported[key] = diag
            self.diagnose(diag)
        elif not any(k in diag.data for k in strategies.REPAIR_KINDS):
            # ``reported`` holds the one shown there (a later one naming a repair is not)
            found = self.mod.diagnostics
            found[next(i for i, d in enumerate(found) if d is earlier)] = diag
            reported[key] = diag

    def _trace_failure(
        self,
        exc: BaseException,
        failure: failures.Failure,
        text: str,
        repair: strategies.Repair | None,
        defaults: dict[str, Any],
    ) -> Diagnostic:
        """The diagnostic of a failed trace attempt, with the repair fxls tries next; when none
        is left and the code stopped on a parameter left at its default ``None``
        (``timestep.to(...)`` with no ``timestep``), FX402 naming it there: it says which input
        to declare, where the error alone does not."""
        data: dict[str, Any] = {"exception": type(exc).__name__}
        if repair is not None:
            data[repair.kind] = repair.target
            return failure.message.diagnostic(data)
        if self.unknown_for_checks:
            return _undecided(failure.message.diagnostic(data), self.unknown_for_checks[0])
        error = safe_str(exc)
        left_none = self._left_none(error, failure.span, text, defaults)
        if left_none is None and failure.outer is not None:  # raised in a submodule's code
            outer = self.doc.source.text(failure.outer)
            left_none = self._left_none(error, failure.outer, outer, defaults)
        return left_none or failure.message.diagnostic(data)

    def _left_none(
        self, error: str, span: Span | None, text: str, defaults: dict[str, Any]
    ) -> Diagnostic | None:
        """FX402 at ``span`` for the parameter left at its default ``None`` (of ``defaults``)
        that the code ``text`` stopped on with ``error``, if it is one."""
        names = [name for name, value in defaults.items() if value is None]
        named = failures.none_given(error, text, names)
        if named is None or span is None:
            return None
        self.met_none = True
        why = f": it is left at its default `None`, and `{short_source(text)}` needs a value"
        example = catalogue.suggested_shape(named)
        message = catalogue.FX402(span, arg=named, cls=self.req.name, example=example, reason=why)
        return message.diagnostic({"arg": named, "declare": example})

    # -- shapes ----------------------------------------------------------------------------

    def _propagate(
        self, gm: torch.fx.GraphModule, ordered: list[inputs.PlannedInput],
        placeholders: list[torch.fx.Node], symbolic: bool | None = None,
    ) -> shapes.Propagation | BaseException:  # fmt: skip
        feeds: list[shapes.ExampleInput] = [
            replace(p, name=str(n.target)) for p, n in zip(ordered, placeholders)
        ]
        given = self._given_examples(ordered, placeholders) if symbolic is None else None
        if symbolic is None:
            symbolic = self.doc.job.symbolic
        try:
            segments = self.traced.segments if self.traced is not None else []
            copies = reuse.copies(segments)
            if given is not None and self.within is not None:
                fed = [(feed, given[feed.name]) for feed in feeds]
                inside = shapes.propagate_within(
                    self.within[0], gm, fed, symbolic=symbolic, reuse=copies
                )
                if inside is not None:
                    return inside
            return self._propagate_watching(gm, feeds, symbolic, copies)
        except Exception as exc:
            return exc

    def _propagate_watching(
        self,
        gm: torch.fx.GraphModule,
        feeds: list[shapes.ExampleInput],
        symbolic: bool,
        copies: Any,
    ) -> shapes.Propagation:
        """``shapes.propagate`` with the job's kept runs; the first call of each watched class
        inside a submodule it runs whole is recorded in ``inner_calls``."""
        runs = self._kept_runs()
        inner = parents.InnerCalls(self.watching) if runs is not None and self.watching else None
        if runs is not None and inner is not None:
            runs.watch, runs.replay = inner.around, inner.replayed
        try:
            prop = shapes.propagate(gm, feeds, symbolic=symbolic, reuse=copies, kept_runs=runs)
        finally:
            if runs is not None:
                runs.watch = runs.replay = None
        if inner is not None:
            prop.inner_calls, prop.inner_blind = inner.calls, inner.blind
        return prop

    def _kept_runs(self, eager: bool = False) -> keptruns.KeptRuns | None:
        """The job's outputs of submodules kept whole (``FXLS_KEPT_RUNS=0``: none), of the
        graphs' runs or (``eager``) of ``forward``'s runs in comparisons."""
        if os.environ.get(keptruns.KEPT_RUNS_ENV) == "0":
            return None
        runs = self.doc.kept_runs
        if runs is None:
            runs = self.doc.kept_runs = {}
        if eager not in runs:
            runs[eager] = keptruns.KeptRuns(reuse.configured, reuse.described)
        return typing.cast(keptruns.KeptRuns, runs[eager])

    def _given_examples(
        self, ordered: list[inputs.PlannedInput], placeholders: list[torch.fx.Node]
    ) -> dict[str, Any] | None:
        """The parent's example of each placeholder, by placeholder name, when every input is
        the one recorded off the parent's trace; else None."""
        if self.within is None:
            return None
        examples = self.within[1]
        given: dict[str, Any] = {}
        for planned, node in zip(ordered, placeholders, strict=True):
            name = str(node.target)
            if self.given.get(name) is not planned or name not in examples:
                return None
            given[name] = examples[name]
        return given

    def _settle_sizes(
        self,
        gm: torch.fx.GraphModule,
        placeholders: list[torch.fx.Node],
        ordered: list[inputs.PlannedInput],
    ) -> tuple[list[inputs.PlannedInput], shapes.Propagation | BaseException]:
        """Shapes for the planned inputs; when they fail and an input was assumed, its first
        other form that runs through (``fc1 = Linear(9216, 128)`` means 28×28; token ids
        sequence-first for an RNN; a sequence as long as the size the error named)."""
        prop = self._propagate(gm, ordered, placeholders)
        if isinstance(prop, shapes.Propagation) and prop.error is None:
            if not _output_batch_twice(gm, prop.values, ordered):
                return ordered, prop
            if not (self.checks_decided or _broadcast_against_itself(gm, prop.values)):
                return ordered, prop  # the batch twice as a product makes it (`a @ b.T`)
            # the graph of decided checks stands in for a run on fake tensors, which tries
            # the other forms of an assumed input then (`_batch_once`): so does it, and a
            # graph whose arithmetic put the batch against itself
            return self._one_batch(gm, placeholders, ordered, prop)
        failed = prop.error if isinstance(prop, shapes.Propagation) else None
        named = inputs.sizes_named_by(failed.original) if failed is not None else []
        sequence = (
            _size_named(ordered, inputs.SEQUENCE) or _frames(ordered) or _unused_size(ordered)
        )
        for trial in self._other_forms(ordered, named, sequence):
            # trials run with static sizes (cheap); only the one that fits runs symbolic
            attempt = self._propagate(gm, trial, placeholders, symbolic=False)
            if isinstance(attempt, shapes.Propagation) and attempt.error is None:
                return trial, self._propagate(gm, trial, placeholders)
            error = attempt.error if isinstance(attempt, shapes.Propagation) else None
            said = f"{error.original} {error.message}" if error else str(attempt)
            self.met_none = self.met_none or _NONE in said[:2000]
        return ordered, prop

    def _other_forms(
        self, ordered: list[inputs.PlannedInput], named: list[int], sequence: int | None
    ) -> Iterator[list[inputs.PlannedInput]]:
        """``ordered`` with one input in another form (``inputs.alternatives``), in order;
        never one that changes the rank or dtype of an input a decided check read (the graph
        holds the branch of the form it was traced with)."""
        length = _size_named(ordered, inputs.SEQUENCE)
        for index, planned in enumerate(ordered):
            for alternative in inputs.alternatives(planned, named, sequence, length):
                if planned.name in self.decided_inputs and not _same_rank_and_dtype(
                    planned, alternative
                ):
                    continue
                yield [*ordered[:index], alternative, *ordered[index + 1 :]]

    def _one_batch(
        self,
        gm: torch.fx.GraphModule,
        placeholders: list[torch.fx.Node],
        ordered: list[inputs.PlannedInput],
        prop: shapes.Propagation,
    ) -> tuple[list[inputs.PlannedInput], shapes.Propagation]:
        """Shapes whose output had the batch twice (:func:`_batch_twice`): the first other
        form of an assumed input (:meth:`_other_forms`) with which it has it once, else
        ``prop`` as it is."""
        for trial in self._other_forms(ordered, [], _unused_size(ordered)):
            attempt = self._propagate(gm, trial, placeholders, symbolic=False)
            if not isinstance(attempt, shapes.Propagation) or attempt.error is not None:
                continue
            if not _output_batch_twice(gm, attempt.values, trial):
                again = self._propagate(gm, trial, placeholders)
                if isinstance(again, shapes.Propagation):
                    return trial, again
        return ordered, prop

    def _shapes(
        self, gm: torch.fx.GraphModule, prop: shapes.Propagation | BaseException
    ) -> tuple[dict[str, list[Value]], dict[str, Any]]:
        """Report a propagation: FX201 at the failing node. Returns (values, examples)."""
        doc, mod = self.doc, self.mod
        if isinstance(prop, BaseException):
            mod.status = "partial"
            self.diagnose(
                catalogue.FX202(self.span, node=mod.name, error=one_line(prop)).diagnostic()
            )
            return {}, {}
        values, examples = dict(prop.values), dict(prop.examples)
        for note in prop.notes:  # named dimensions fixed to their example size, and why
            if note not in mod.notes:
                mod.notes.append(note)
        mod.example_nodes = list(prop.example_nodes)
        mod.example_sizes = dict(prop.example_sizes)
        failed_node = prop.error.node if prop.error is not None else None
        message = prop.error.message if prop.error is not None else ""
        if failed_node is not None:
            mod.status = "partial"
            node = next((n for n in gm.graph.nodes if n.name == failed_node), None)
            span = node.meta.get(SPAN_KEY) if node is not None else None
            call_site = node.meta.get(CALL_SITE_KEY) if node is not None else None
            related = []
            if call_site is not None and call_site != span:
                related.append(Related(call_site, f"called from `{mod.name}.forward` here"))
            text = doc.source.text(span).strip() if span is not None else ""
            shown = short_source(text, failed_node)
            cause = prop.error.original[:400] if prop.error else ""
            base = {"node": failed_node, "cause": cause}
            self._shape_error(span or self.span, related, shown, message, base)
        return values, examples

    def _none_shape_error(self, found: Diagnostic, message: str) -> bool:
        """A shape error that a parameter left at its default ``None`` caused (``'NoneType'
        object has no attribute 'to'`` where ``self.norm1(x, temb)`` passed no ``temb``):
        FX402 naming it, and the error as a hint of it. Whether it was one."""
        if self.plan is None:
            return False
        text = self.doc.source.text(found.span)
        left_none = self._left_none(message, found.span, text, self.plan.defaults())
        if left_none is None:
            return False
        self.diagnose(left_none)
        arg = left_none.data["arg"]
        found.severity = "hint"
        found.data["left_none"] = arg
        found.fix = f"This error happens with `{arg}` left at its default `None`; declare it."
        self.diagnose(found)
        return True

    def _shape_error(
        self, span: Span, related: list[Related], shown: str, message: str, base: dict[str, str]
    ) -> None:
        """FX201 at ``span``; a hint naming the assumption when the inputs or the build it
        ran with are fxls's guesses (the code may well be right). ``base``: the diagnostic's
        data, the failing node and what torch said (``cause``: one error is reported once,
        ``pipeline._reported_where_it_happens``)."""
        mod = self.mod
        diag = catalogue.FX201(span, related, node=shown, error=message)
        if self._none_shape_error(diag.diagnostic(base), message):
            return
        assumed = [p for p in self.feeds_planned if p.assumed]
        upstream = next((p.upstream for p in self.feeds_planned if p.upstream), None)
        how = mod.constructed
        if assumed:
            # the error may come from fxls's guess, not from the code: say so, quietly
            guessed = ", ".join(f"`{p.name}` {p.shape_text()}" for p in assumed)
            found = diag.diagnostic({**base, "assumed_inputs": True})
            found.severity = "hint"
            found.fix = (
                f"This shape error happens with inputs fxls assumed ({guessed}); declare "
                f"the real input with `# fxls: {assumed[0].name} = (...)` above the class."
            )
            self.diagnose(found)
        elif upstream is not None:
            found = diag.diagnostic({**base, "assumed_inputs": True})
            found.severity = "hint"
            found.fix = (
                f"This shape error happens with the inputs `{upstream}` passes here, which "
                f"follow from inputs fxls assumed for it; declare the real input above "
                f"`class {upstream}` with `# fxls: NAME = (...)`."
            )
            self.diagnose(found)
        elif self.plan is not None and self._called_with_nothing(self.plan):
            # ``forward(self, *args, **kwargs)`` (a wrapper passing everything on), or every
            # parameter at its default ``None``: fxls called it with nothing, which says
            # nothing about the code
            found = diag.diagnostic({**base, "no_arguments": True})
            found.severity = "hint"
            found.fix = self._nothing_given_fix(self.plan)
            self.diagnose(found)
        elif how is not None and how.source == "assumed":
            found = diag.diagnostic({**base, "assumed_init": True})
            found.severity = "hint"
            found.fix = (
                f"This shape error happens with constructor arguments fxls assumed "
                f"({how.text}); give the real ones with `# fxls: init(...)` above the class."
            )
            self.diagnose(found)
        else:
            self.diagnose(diag.diagnostic(dict(base)))

    @staticmethod
    def _called_with_nothing(plan: InputPlan) -> bool:
        """Whether fxls called ``forward`` with no value of its own choosing: it takes only
        ``*args``/``**kwargs``, or every parameter was left at its default ``None`` (none is
        named like a main input, ``inputs.PRIMARY_INPUTS``) and none declared."""
        if not plan.params:
            return False
        if not plan.positional():
            return True
        return (
            not plan.declared
            and all(
                p.origin == "default" and p.kind == "value" and p.value is None
                for p in plan.planned.values()
            )
            and len(plan.planned) == len(plan.positional())
        )

    def _nothing_given_fix(self, plan: InputPlan) -> str:
        name = self.mod.name
        if not plan.positional():
            return (
                f"`{name}.forward` takes only `*args`/`**kwargs`, and fxls called it with "
                "none; capture the class that calls it, or describe its inputs with "
                "`# fxls: init(...)` and input directives."
            )
        first = plan.positional()[0].name
        return (
            f"Every input of `{name}.forward` defaults to `None`, and fxls called it with "
            f"none (it could not tell which is the main one); declare it above the class: "
            f"`# fxls: {first} = (...)`."
        )

    def _compare_with_eager(
        self,
        module: nn.Module,
        gm: torch.fx.GraphModule,
        feeds: list[shapes.ExampleInput],
        traced: Traced,
    ) -> None:
        """FX109 when the traced graph and eager execution on fake inputs give other outputs."""
        doc, mod, specialized = self.doc, self.mod, self.specialized
        how = strategies.Comparison(
            tuple(traced.leaves),
            on_meta=doc.job.eager_on_meta,
            other_batch=bool(specialized) or mod.strategy != _PLAIN_FX,
            kept_runs=self._kept_runs(),
            eager_runs=self._kept_runs(eager=True),
        )
        try:
            found = strategies.eager_divergence(gm, module, feeds, doc.path, doc.job.source, how)
        except Exception as exc:  # the comparison is a bonus: never lose the capture over it
            self.note(f"comparing with eager execution failed: {one_line(exc)}")
            return
        if found is None:
            return
        span = specialized[0].span if specialized else self.span
        related = [Related(d.span, "decided once while tracing") for d in specialized[1:]]
        if specialized:
            related.insert(0, Related(self.span, f"`{mod.name}` traced with inputs {found.sizes}"))
        diag = catalogue.FX109(span, related, traced=found.traced, eager=found.eager)
        self.diagnose(diag.diagnostic({"sizes": found.sizes}))
        mod.status = "partial"

    # -- the fake-run strategy -------------------------------------------------------------

    def _fake_run(self, module: nn.Module, plan: InputPlan, traced: Traced) -> None:
        """Strategy 3: run ``forward`` on fake tensors and record every torch call it makes.

        Inputs not declared are inferred from the graph FX recorded before it failed. The
        recorded graph gives per-line nodes with named arguments and shapes (strategy
        ``fake-run``, status ``partial``; graph rewrites are not offered for it). When
        ``forward`` raises on fake tensors too (a data-dependent branch), the nodes recorded
        before the failure are kept and the FX failure diagnostic stays.
        """
        doc, mod = self.doc, self.mod
        placeholders = [n for n in traced.partial.nodes if n.op == "placeholder"]
        by_param = dict(zip(_placeholder_params(placeholders, plan.params), placeholders))
        found: list[inputs.PlannedInput | None] = []
        names, spans = [], []
        for param in plan.positional():
            node = by_param.get(param.name)
            span = node.meta.get(SPAN_KEY, self.span) if node is not None else self.span
            planned = plan.planned.get(param.name)
            if planned is None:
                planned = self._inferred(module, node, param.name, plan, span)
            found.append(planned)
            names.append(param.name)
            spans.append(span)
        if not self._fill_missing(found, names, spans, plan.symbols):
            self._report_assumed([])
            return
        ordered = [p for p in found if p is not None]
        watches = parents.Watches(module, self._children_watched(module, traced))
        taken = branches.Branches()
        fake_run = self._fake_runner(module, traced, watches, taken)

        static_note = ""
        started = time.process_time()
        try:
            ordered, run = _batch_once(ordered, fake_run, doc.job.symbolic)
            took = time.process_time() - started
            if run.error is not None and run.mode == "symbolic":
                # some kernels refuse symbolic sizes; static sizes still give the shapes
                static = fake_run(ordered, False)
                if static.error is None:
                    run = static
                    static_note = "named dimensions could not stay symbolic while running `forward`"
        except Exception as exc:
            self._use_inputs(ordered)
            self.note(f"running forward on fake tensors failed: {one_line(exc)}")
            return
        feeds = self._use_inputs(ordered)
        self.children_ran = watches.of(run, doc.job.symbolic)
        gm = run.graph_module
        if gm is None:
            self.note("running forward on fake tensors recorded no usable graph")
            return
        values = run.values
        fixed = fakerun.fixed_sizes(run, feeds)
        if fixed and doc.job.symbolic:
            symbolic = run.mode == "symbolic"
            allowed = shapes.rerun_allowed(took, len(gm.graph.nodes))
            again = (lambda f: fake_run(f, symbolic)) if allowed else None
            general = fakerun.generalize(run, feeds, again)
            values = general.values
            mod.example_nodes = general.bound
            mod.example_sizes = dict(fixed) if general.bound else {}
            self.note(_fixed_note(fixed, general, static_note))
        elif static_note:
            self.note(f"{static_note}; the shapes are for the example sizes")
        assign_ast_spans(gm.graph, self.forward_def, doc.source)
        self._report_branches(run)
        mod.nodes = [
            node_info(gm, node, values, run.examples, rename=run.rename) for node in gm.graph.nodes
        ]
        mod.containers = containers(gm, doc.path, module)
        mod.strategy = Strategy("fake-run")
        output = next((n for n in gm.graph.nodes if n.op == "output"), None)
        if run.error is None and output is not None:
            mod.outputs = list(values.get(output.name, []))
            self._tensor_fields(strategies.result_fields(None, run.examples.get(output.name)))
            mod.status = "traced"  # every node has its shapes; the strategy says fake-run
            mod.error = None
            mod.diagnostics.extend(
                d.diagnostic() for d in _unused_in_run(gm, run, doc.source, doc.path, run.asked)
            )
            self.note(
                "torch.fx could not trace `forward`; its nodes and shapes come from running it "
                "on fake tensors (no FX graph: graph rewrites are not offered)"
            )
            return
        self._fake_run_stopped(run)

    def _children_ran(
        self, watched: dict[type, str]
    ) -> tuple[parents.FirstCalls, dict[str, int]] | None:
        """:attr:`children_ran` when its run watched every class of ``watched``."""
        ran = self.children_ran
        return ran if ran is not None and set(watched) <= ran[0].wanted else None

    def _children_watched(self, module: nn.Module, traced: Traced) -> frozenset[type]:
        """The watched classes a fake run of ``module`` can record the first calls of on the
        way, as :func:`parents.record` would: those among its submodules, when no class is
        kept whole by name (``parents.record`` runs without leaf classes)."""
        if traced.leaves:
            return frozenset()
        return frozenset({type(m) for m in module.modules()} & self.watching)

    def _use_inputs(self, ordered: list[inputs.PlannedInput]) -> list[shapes.ExampleInput]:
        """The inputs ``forward`` ran with, shown and reported (FX405); its feeds."""
        self._set_inputs(ordered)
        self._report_assumed(ordered)
        self.feeds_planned = ordered
        self.feeds = [replace(p) for p in ordered]
        return self.feeds

    def _fake_run_left_none(self, error: BaseException, defaults: dict[str, Any]) -> None:
        """FX402 where a run on fake tensors stopped on a parameter left at its default
        ``None``: at the innermost line of the document, or at the class's own line that
        called the code which raised (``self.norm1(x, temb)``); not twice where the trace
        stopped so too."""
        spans, _, _ = failures.locate(error, self.doc.path, self.doc.source)
        message = safe_str(error)
        for span in spans[:1] + [s for s in spans[-1:] if s != spans[0]]:
            found = self._left_none(message, span, self.doc.source.text(span), defaults)
            if found is None:
                continue
            said = [(d.code, d.span) for d in self.mod.diagnostics]
            if (found.code, found.span) not in said:
                self.diagnose(found)
            return

    def _fake_runner(
        self,
        module: nn.Module,
        traced: Traced,
        watches: parents.Watches,
        taken: branches.Branches,
    ) -> Callable[[Sequence[shapes.ExampleInput], bool], fakerun.FakeRun]:
        """A run of ``module``'s ``forward`` on fake tensors of given inputs (symbolic or
        not), watched, that takes a condition on tensor values it stops at one way and runs
        again (``taken``: the same way in every run)."""
        doc = self.doc

        def fake_run(feeds: Sequence[shapes.ExampleInput], symbolic: bool) -> fakerun.FakeRun:
            def once() -> fakerun.FakeRun:
                return watches.run(
                    symbolic,
                    lambda watch: fakerun.fake_run(
                        module,
                        [replace(p) for p in feeds],
                        doc.path,
                        symbolic=symbolic,
                        leaf_classes=traced.leaves,
                        source=doc.job.source,
                        hooks=fakerun.Hooks(watch, taken),
                    ),
                )

            run = once()
            while run.error is not None and taken.again():  # a condition on values: take it
                run = once()
            return run

        return fake_run

    def _report_branches(self, run: fakerun.FakeRun) -> None:
        """Each condition on tensor values the run took one way (:mod:`branches`): FX101 at
        it says the value taken (the one a failed trace left there, else a new one), and a
        note names them, by the expression whose truth was taken (``padding_mask.any()``)."""
        doc = self.doc
        by_id = {id(value): name for name, value in run.examples.items()}
        texts = []
        for decision, tensor in run.decided:
            span = doc.source.code_span(*decision.site) if decision.filename == doc.path else None
            if span is None:  # in code of another file (a library's module)
                texts.append(f"a condition at line {decision.frame_line} of another file")
                continue
            asked = run.spans.get(by_id.get(id(tensor), ""), (None, None))[0]
            text = short_source(doc.source.text(asked if asked is not None else span))
            texts.append(f"`{text}` as `{decision.value}`")
            diag = next(
                (d for d in self.mod.diagnostics if d.code == "FX101" and d.span.line == span.line),
                None,
            )
            if diag is None:
                diag = _decided_diagnostic(decided.Decision(None, decision.value, span), span, text)
                self.diagnose(diag)
            diag.data.update(taken=f"`{text}`", value=decision.value)  # not a trace repair
            how = (
                f"fxls ran `forward` on fake tensors taking `{text}` as `{decision.value}` (fake "
                "tensors have no values): the shapes after it are those of that branch."
            )
            diag.fix = f"{how} {diag.fix}" if diag.fix else how
        if texts:
            self.note(
                "conditions on tensor values were taken one way to run `forward` on fake tensors "
                f"(an `assert` as holding, any other as false): {', '.join(texts)}"
            )

    def _fake_run_stopped(self, run: fakerun.FakeRun) -> None:
        """A fake run that ended before ``forward`` returned: the nodes before are shown, and
        a torch operation that refused the shapes is FX201 where it happens."""
        doc, mod = self.doc, self.mod
        where = f" at line {run.error_span.line}" if run.error_span is not None else ""
        error = one_line(run.error) if run.error is not None else "no output"
        if run.error is not None and "DataDependent" in type(run.error).__name__:
            error = "a Python decision depends on tensor values, which fake tensors do not have"
        mod.status = "failed"  # no outputs: the FX error stays, the nodes before it are shown
        if run.error is not None and run.error_span is not None and _shape_failure(run.error):
            # a torch operation refused the shapes: the error is reported where it happens
            mod.status = "partial"
            text = doc.source.text(run.error_span)
            shown = short_source(text, run.error_target or "forward")
            first = safe_str(run.error).strip().splitlines()
            message = Namer(run.names).text(first[0] if first else type(run.error).__name__)
            base = {"node": run.error_target or "", "cause": message[:400]}
            self._shape_error(run.error_span, [], shown, message[:400], base)
        elif run.error is not None and self.plan is not None:
            self._fake_run_left_none(run.error, self.plan.defaults())
        self.note(
            f"torch.fx could not trace `forward`, and running it on fake tensors stopped{where} "
            f"({error}); only the operations before that point are shown"
        )


def _batch_twice(run: fakerun.FakeRun, ordered: list[inputs.PlannedInput]) -> bool:
    """Whether ``forward``'s output has the batch in two dimensions though no input has:
    a batch broadcast against itself, the mark of an assumed input of the wrong rank
    (x-transformers' ``AdaptiveRMSNorm``: ``x`` assumed ``[B, 64]`` and ``condition``
    ``[B, 64]`` made ``[B, 1, 64]`` gave ``[B, B, 64]``)."""
    return _output_batch_twice(run.graph_module, run.values, ordered)


def _same_rank_and_dtype(a: inputs.PlannedInput, b: inputs.PlannedInput) -> bool:
    return a.kind == b.kind and len(a.dims) == len(b.dims) and a.dtype == b.dtype


def _output_batch_twice(
    gm: torch.fx.GraphModule | None,
    values: Mapping[str, list[Value]],
    ordered: list[inputs.PlannedInput],
) -> bool:
    """:func:`_batch_twice` of a graph's output values."""
    if not any(p.assumed for p in ordered):
        return False
    if any([n for n, _ in p.dims].count(inputs.BATCH) > 1 for p in ordered if p.kind == "tensor"):
        return False
    output = next((n for n in gm.graph.nodes if n.op == "output"), None) if gm else None
    return _batch_in_two(values.get(output.name, []) if output is not None else [])


def _batch_in_two(found: list[Value]) -> bool:
    """Whether a tensor among ``found`` has the batch in two dimensions."""
    return any((v.shape or []).count(inputs.BATCH) > 1 for v in found if v.kind == "tensor")


_BROADCASTING = elementwise.ARITHMETIC_FUNCTIONS | {torch.div, torch.where}
_BROADCASTING_METHODS = elementwise.ARITHMETIC_METHODS | {
    f"{name}_" for name in elementwise.ARITHMETIC_METHODS
}


def _broadcast_against_itself(gm: torch.fx.GraphModule, values: Mapping[str, list[Value]]) -> bool:
    """Whether an elementwise operator of the graph gave the batch in two dimensions though
    none of its operands has it twice: ``x * scale[:, None, :]`` with ``x`` ``[B, 64]`` and
    ``scale`` ``[B, 64]`` is ``[B, B, 64]``, a batch broadcast against itself (a product such
    as ``a @ b.T`` makes ``[B, B]`` on purpose: a similarity of every pair)."""

    def twice(name: str) -> bool:
        return _batch_in_two(values.get(name) or [])

    for node in gm.graph.nodes:
        if not (
            (node.op == "call_function" and node.target in _BROADCASTING)
            or (node.op == "call_method" and node.target in _BROADCASTING_METHODS)
        ):
            continue
        if twice(node.name) and not any(twice(a.name) for a in node.all_input_nodes):
            return True
    return False


def _batch_once(
    ordered: list[inputs.PlannedInput],
    fake_run: Callable[[list[inputs.PlannedInput], bool], fakerun.FakeRun],
    symbolic: bool,
) -> tuple[list[inputs.PlannedInput], fakerun.FakeRun]:
    """``fake_run`` of ``ordered``; when its output has the batch in two dimensions
    (:func:`_batch_twice`), or it stopped on an assumed input of the wrong rank
    (:func:`_rank_failure`: ``B, N, C = x.shape`` of ``x`` assumed ``[B, 64]`` from the
    ``Linear`` it reaches), the first other form of an assumed input (``inputs.alternatives``:
    features as a sequence ``[B, T, F]``, ...) with which ``forward`` runs through without,
    else ``ordered`` and its run as they are."""
    run = fake_run(ordered, symbolic)
    if run.error is None and not _batch_twice(run, ordered):
        return ordered, run
    asserted = inputs.asserted_sizes(run.error) if run.error is not None else []
    stopped_by_sizes = run.error is not None and (_rank_failure(run.error) or asserted)
    if run.error is not None and not (stopped_by_sizes and any(p.assumed for p in ordered)):
        return ordered, run
    named = inputs.sizes_named_by(str(run.error)) if run.error is not None else []
    named += [size for size in asserted if size not in named]
    sequence = _unused_size(ordered)
    length = _size_named(ordered, inputs.SEQUENCE)
    for index, planned in enumerate(ordered):
        found = inputs.alternatives(planned, named, sequence, length)
        for alternative in found[:MAX_FORMS_TRIED]:
            trial = [*ordered[:index], alternative, *ordered[index + 1 :]]
            try:
                other = fake_run(trial, symbolic)
            except Exception:  # user code: the next form
                continue
            if other.error is None and not _batch_twice(other, trial):
                return trial, other
    return ordered, run


MAX_FORMS_TRIED = 4
"""Other forms of one assumed input a fake run is tried with (each runs ``forward`` again)."""


_NONE = "'NoneType'"
"""How Python's errors name a ``None`` it refused ("'NoneType' object has no attribute 'to'")."""


def _size_named(ordered: list[inputs.PlannedInput], name: str) -> int | None:
    """The example size of the dimension ``name`` in the first input that has one."""
    return next((size for p in ordered for n, size in p.dims if n == name), None)


def _rank_failure(exc: BaseException) -> bool:
    """Whether a fake run stopped where an input of another rank would have gone on: a torch
    operation refused the shapes (:func:`_shape_failure`), the input's shape unpacked into
    more names than it has ("not enough values to unpack (expected 3, got 2)"), or an einops
    pattern of another rank ("Expected 3 dimensions, got 2")."""
    text = str(exc)[:2000]
    return (
        _shape_failure(exc)
        or (isinstance(exc, ValueError) and "values to unpack" in text)
        or ("Einops" in type(exc).__name__ and "dimensions" in text)
    )


def _fixed_note(fixed: dict[str, int], found: sizes.Generalized, static: str) -> str:
    """What a fake run whose sizes were fixed shows, in words (``static``: why every named
    dimension was fixed, when it was)."""
    named = ", ".join(f"{name} = {size}" for name, size in fixed.items())
    other = found.reruns[0]
    again = ", ".join(f"{name} = {size}" for name, size in other.sizes.items())
    names = ", ".join(fixed)
    sized = "its example size" if len(fixed) == 1 else "their example sizes"
    why = static if static else f"`forward` fixes {names} to {sized}"
    if not found.bound:
        return f"{why}; computed again at {again}, the shapes follow the names"
    count = "1 shape holds" if len(found.bound) == 1 else f"{len(found.bound)} shapes hold"
    if other.error == fakerun.NOT_AGAIN:
        return f"{why} (not computed again at another size: the model is large); {count} for {named} only"
    if other.error is not None:
        return f"{why}; at {again} it fails at `{other.error}`: {count} for {named} only"
    return f"{why}; computed again at {again}, {count} for {named} only"


def _attributes_restored(gm: torch.fx.GraphModule, module: nn.Module) -> None:
    """Give ``gm``'s attributes the values ``module`` has again after tracing: a graph module
    copies what its ``get_attr`` nodes read when it is made, and an attribute ``forward``
    assigned while tracing (``self.mask = self.mask.to(x.dtype)``) held a Proxy then."""
    for node in gm.graph.nodes:
        if node.op != "get_attr":
            continue
        owner_path, _, name = str(node.target).rpartition(".")
        try:  # user classes may define __getattr__: anything may come of it
            owner = gm.get_submodule(owner_path)
            if not isinstance(getattr(owner, name), torch.fx.Proxy):
                continue
            setattr(owner, name, getattr(module.get_submodule(owner_path), name))
        except Exception:
            continue


def _drop_concrete_guards(gm: torch.fx.GraphModule) -> None:
    """Remove the ``_assert(flag == False, "... has been specialized ...")`` nodes FX adds for
    ``concrete_args``: they have no source line and only guard against other values."""
    changed = False
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target is not torch._assert or node.users:
            continue
        if "has been specialized to have value" not in str(node.args[1:2]):
            continue
        condition = node.args[0]
        gm.graph.erase_node(node)
        if isinstance(condition, torch.fx.Node) and not condition.users:
            gm.graph.erase_node(condition)
        changed = True
    if changed:
        gm.recompile()


def _value_text(value: Value) -> str:
    if value.kind == "tensor":
        return "[" + ", ".join(str(d) for d in value.shape or []) + "]"
    return value.text or value.kind


def _examples(plan: InputPlan, concrete: Mapping[str, Any]) -> dict[str, Any]:
    """The inputs known before tracing, by parameter name, as the decider runs them: tensors
    on the meta device at their example sizes, plain values as they are."""
    out: dict[str, Any] = dict(concrete)
    for name, planned in plan.planned.items():
        try:
            out.setdefault(name, shapes.meta_feeds([replace(planned, name=name)])[name])
        except Exception:  # a value that cannot be made meta: not known to the decider
            continue
    return out


def _placeholder_params(
    placeholders: list[torch.fx.Node], params: list[inspect.Parameter]
) -> list[str]:
    """The forward parameter each placeholder stands for: fx names those of a concrete
    argument after it, one per value it holds (``flag_1``; ``size_1``, ``size_2`` for a
    tuple ``size``)."""
    names = [p.name for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    targets = {str(node.target).lstrip("*") for node in placeholders}
    out = []
    for i, node in enumerate(placeholders):
        target = str(node.target).lstrip("*")
        base, _, number = target.rpartition("_")
        if target in names:
            out.append(target)
        elif number.isdecimal() and base in names and base not in targets:
            out.append(base)
        elif i < len(names):
            out.append(names[i])
        else:
            out.append(target)
    return out


_DECIDED_CODES = {"check": "FX101", "rank": "FX102", "unpacked": "FX103"}
"""The code of a decided check, by its kind."""


def _decided_diagnostic(decision: decided.Decision, span: Span, text: str) -> Diagnostic:
    """The diagnostic of a check decided while tracing where no failed attempt left one:
    FX102 for ``len(x.shape)``, FX103 for a shape unpacked into a starred name, FX101 for a
    condition."""
    if decision.kind == "unpacked":
        return catalogue.FX103(span, source=text, where="").diagnostic({})
    if decision.kind == "rank":
        arg, use, meaning = failures.length_fields(text)
        found = catalogue.FX102(span, source=text, where="", arg=arg, use=use, meaning=meaning)
        return found.diagnostic({})
    name = failures.flag_name(text) or "flag"
    return catalogue.FX101(span, source=text, where="", arg=name).diagnostic({})


def _undecided(diag: Diagnostic, name: str) -> Diagnostic:
    """``diag`` of a rank or dtype check that fxls would decide but for the input ``name``,
    which it could not infer: its fix says that declaring it decides the check."""
    example = catalogue.suggested_shape(name)
    how = (
        f"fxls decides this check while tracing once it knows `{name}`: declare it above the "
        f"class (`# fxls: {name} = {example}`)."
    )
    diag.fix = f"{how} {diag.fix}" if diag.fix else how
    diag.data.update(arg=name, declare=example)
    return diag
