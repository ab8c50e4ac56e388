"""Capture strategies: tracer settings, automatic repairs, and checks of what tracing baked in.

fxls tries, in order (the one used is ``ModuleResult.capture``):

1. ``fx``: torch.fx with buffers as graph values and known library functions recorded as
   single nodes (einops ``rearrange``/``repeat``/``reduce``/``einsum``; the layers of
   ``einops.layers.torch`` as leaf modules), so einops code traces without source changes.
2. FX with repairs that need no source change, combined as needed within a bounded number of
   attempts (status ``partial``, each repair explained in ``ModuleResult.notes``):
   ``leaf`` (the submodule class whose ``forward`` raised is kept as a leaf), ``wrap`` (the
   module-level helper function that raised is recorded as one call, like ``torch.fx.wrap``),
   ``concrete`` (plain-value ``forward`` arguments are fixed to their defaults with
   ``concrete_args``). The capture reads ``fx+leaf``, ``fx+wrap``, ``fx+concrete`` or a
   combination such as ``fx+leaf+wrap``.
3. ``fake-run`` (:mod:`fxls.worker.capture.trace.fakerun`) when no FX graph can be had.

Silent mis-traces: :func:`traced_through_checks` finds ``isinstance``/``is None`` checks on
traced values in helpers and submodules traced through (FX108), and :func:`eager_divergence`
compares the traced graph with running ``forward`` on the same fake inputs, and at a second
batch size (FX109).
"""

from __future__ import annotations

import ast
import sys
import types
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from types import CodeType, ModuleType, TracebackType
from typing import Any

import torch
import torch.fx

from fxls.protocol import catalogue
from fxls.protocol.model import RepairKind, Strategy, Value
from fxls.protocol.positions import SourceText
from fxls.worker.capture import failures
from fxls.worker.capture.records.nodes import submodule
from fxls.worker.capture.shapes import keptruns, shortcuts
from fxls.worker.capture.shapes import propagation as shapes
from fxls.worker.capture.spans import find_function
from fxls.worker.capture.trace import fakerun

MAX_ATTEMPTS = 12
"""Traces tried per class before giving up on FX (each failed one adds at most one repair)."""

MAX_COMPARE_NODES = 400
"""Graphs larger than this are not compared with eager execution (FX109): it costs seconds."""

_EINX = """id sum mean var std prod count_nonzero any all max min logsumexp add subtract multiply
true_divide floor_divide divide logical_and logical_or where maximum minimum less less_equal
greater greater_equal equal not_equal logaddexp dot get_at set_at add_at subtract_at softmax
log_softmax sort argsort flip roll argmax argmin rearrange reduce elementwise"""

LIBRARY_FUNCTIONS: dict[str, tuple[str, ...]] = {
    "einops": ("rearrange", "repeat", "reduce", "einsum", "pack", "unpack"),
    # einx's operations read their operands' shapes as numbers (a traced value has none)
    "einx": tuple(_EINX.split()),
}
"""Functions recorded as one ``call_function`` node, by module; only modules the document has
imported are used (the worker never imports them itself)."""

LIBRARY_LEAF_MODULES = ("einops.layers.",)
"""Module classes defined under these packages are leaf modules."""


# ---------------------------------------------------------------------------------------
# Strategy 1: tracer settings for known libraries
# ---------------------------------------------------------------------------------------


def library_autowrap() -> tuple[list[Callable[..., Any]], list[ModuleType]]:
    """Library functions to auto-wrap and the modules whose attributes to patch."""
    functions: list[Callable[..., Any]] = []
    modules: list[ModuleType] = []
    for module_name, names in LIBRARY_FUNCTIONS.items():
        module = sys.modules.get(module_name)
        if module is None:
            continue
        found = [getattr(module, n) for n in names if callable(getattr(module, n, None))]
        if found:
            functions.extend(found)
            modules.append(module)
    return functions, modules


def is_library_leaf(module: torch.nn.Module) -> bool:
    """Whether ``module`` is a library layer fxls keeps as a leaf (``einops.layers.torch``)."""
    name = type(module).__module__ or ""
    return name.startswith(LIBRARY_LEAF_MODULES)


def library_leaf_classes(root: torch.nn.Module) -> list[str]:
    """Class names of the library leaf layers inside ``root``."""
    return sorted({type(sub).__name__ for sub in root.modules() if is_library_leaf(sub)})


# ---------------------------------------------------------------------------------------
# Strategy 2: repairs
# ---------------------------------------------------------------------------------------


REPAIR_KINDS = ("leaf", "wrap", "concrete", "decided")
"""The kinds of repair; a failed attempt's diagnostic names its repair under its kind."""


@dataclass
class Repair:
    """One automatic repair: ``kind`` is one of :data:`REPAIR_KINDS`."""

    kind: str
    target: str
    """Class name (leaf), function name (wrap), comma-separated argument names (concrete) or
    the checks decided from ranks and dtypes (decided)."""
    function: Callable[..., Any] | None = None
    names: list[str] = field(default_factory=list)


@dataclass
class Repairs:
    """The repairs applied so far, in order."""

    leaves: list[str] = field(default_factory=list)
    wraps: list[Callable[..., Any]] = field(default_factory=list)
    concrete: list[str] = field(default_factory=list)
    applied: list[Repair] = field(default_factory=list)
    decided: bool = False
    """Checks were decided from the ranks and dtypes of the inputs (``decided``)."""

    def add(self, repair: Repair) -> None:
        if repair.kind == "decided" and self.decided:
            return  # one more input inferred for a check: the repair is there
        self.applied.append(repair)
        if repair.kind == "leaf":
            self.leaves.append(repair.target)
        elif repair.kind == "wrap" and repair.function is not None:
            self.wraps.append(repair.function)
        elif repair.kind == "concrete":
            self.concrete.extend(n for n in repair.names if n not in self.concrete)
        elif repair.kind == "decided":
            self.decided = True

    def strategy(self, declared_leaves: bool = False) -> Strategy:
        """``fx`` with the repairs applied (``leaf`` too for declared leaves), in the order
        leaf, wrap, concrete, decided."""
        kinds = {r.kind for r in self.applied}
        repairs: list[RepairKind] = []
        if declared_leaves or "leaf" in kinds:
            repairs.append("leaf")
        repairs += [k for k in ("wrap", "concrete", "decided") if k in kinds]
        return Strategy("fx", repairs)

    def notes(self, defaults: Mapping[str, Any]) -> list[str]:
        out = []
        for r in self.applied:
            if r.kind == "leaf":
                out.append(
                    f"`{r.target}` could not be traced through; it was kept as a leaf module"
                )
            elif r.kind == "wrap":
                out.append(
                    f"`{r.target}` could not be traced through; each call of it was recorded as "
                    "one node (auto-wrapped as with `torch.fx.wrap`)"
                )
            elif r.kind == "decided":
                out.append(
                    f"{r.target} decided while tracing from the ranks and dtypes of the inputs: "
                    "the graph holds the branches these inputs take"
                )
            else:
                fixed = ", ".join(f"`{n}={defaults.get(n)!r}`" for n in r.names)
                what = "its default" if len(r.names) == 1 else "their defaults"
                out.append(
                    f"traced with {fixed} fixed to {what} (`concrete_args`): the graph holds "
                    "only the branches taken for these values"
                )
        return out


def _frames(exc: BaseException) -> list[TracebackType]:
    """Traceback entries of ``exc`` and its causes, innermost first."""
    out: list[TracebackType] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        chain: list[TracebackType] = []
        tb = current.__traceback__
        while tb is not None:
            chain.append(tb)
            tb = tb.tb_next
        out.extend(reversed(chain))
        current = current.__cause__ or current.__context__
    return out


def _module_functions(namespace: Mapping[str, Any]) -> dict[CodeType, Callable[..., Any]]:
    """Module-level functions of the document, by code object."""
    out: dict[CodeType, Callable[..., Any]] = {}
    for value in namespace.values():
        if isinstance(value, types.FunctionType) and value.__module__ == namespace.get("__name__"):
            out.setdefault(value.__code__, value)
    return out


def next_repair(
    exc: BaseException,
    root: torch.nn.Module,
    namespace: Mapping[str, Any],
    path: str,
    repairs: Repairs,
    leaves: Collection[str],
    candidates: Collection[str],
    failing_text: str,
) -> Repair | None:
    """The repair to try after ``exc`` was raised while tracing ``root``; None when none applies.

    The innermost frame of the failure decides: a module-level function of the document becomes
    a wrapped function, a submodule's ``forward`` a leaf module. Failing that, when the failing
    source text names plain-value ``forward`` arguments (``candidates``) not fixed yet, they
    are fixed to their defaults.
    """
    if isinstance(exc, (SystemExit, RecursionError, KeyboardInterrupt)):
        return None
    helpers = _module_functions(namespace)
    wrapped = {id(f) for f in repairs.wraps}
    owned = {id(sub) for sub in root.modules()} - {id(root)}
    for tb in _frames(exc):
        code = tb.tb_frame.f_code
        if code.co_filename == path:
            fn = helpers.get(code)
            if fn is not None and id(fn) not in wrapped:
                return Repair("wrap", fn.__name__, function=fn)
        if code.co_name == "forward":
            owner = tb.tb_frame.f_locals.get("self")
            if owner is not None and id(owner) in owned:
                name = type(owner).__name__
                if name in leaves:
                    break
                return Repair("leaf", name)
    names = [n for n in candidates if n not in repairs.concrete and _mentions(failing_text, n)]
    rest = [n for n in candidates if n not in repairs.concrete and n not in names]
    if names or (rest and _raised_by_root(exc, root, path)):
        # the failing text names them, or the root's own forward raised after checking them
        # (``if (input_ids is None) ^ (inputs_embeds is not None): raise ValueError(...)``)
        return Repair("concrete", ", ".join(names + rest), names=names + rest)
    return None


def defaults_fixed(repairs: Repairs, candidates: Collection[str]) -> Repair | None:
    """The plain-value arguments not fixed yet, all fixed to their defaults; None when none
    is left."""
    rest = [n for n in candidates if n not in repairs.concrete]
    return Repair("concrete", ", ".join(rest), names=rest) if rest else None


def _raised_by_root(exc: BaseException, root: torch.nn.Module, path: str) -> bool:
    """Whether ``exc`` was raised by a ``raise`` in the root module's own ``forward`` (its
    innermost frame), not by torch or a layer it called."""
    frames = _frames(exc)  # innermost first
    if not frames:
        return False
    frame = frames[0].tb_frame
    return (
        frame.f_code.co_name == "forward"
        and frame.f_code.co_filename == path
        and frame.f_locals.get("self") is root
    )


def _mentions(text: str, name: str) -> bool:
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError:
        return False
    return any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(tree))


def used_value_placeholders(
    gm: torch.fx.GraphModule, candidates: Collection[str], params: list[str]
) -> list[str]:
    """Plain-value arguments left as placeholders that the graph uses as values.

    A ``mask=None`` placeholder passes ``mask is not None`` while tracing (a Proxy is not None)
    and is then used as a tensor: the graph is wrong for the default. These need ``concrete``.
    """
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    out = []
    for node, name in zip(placeholders, params):
        if name in candidates and node.users:
            out.append(name)
    return out


# ---------------------------------------------------------------------------------------
# Silent mis-traces
# ---------------------------------------------------------------------------------------


def function_key(code: CodeType) -> tuple[str, int, str]:
    """What names a function in the document whatever copy of its code runs: its file, first
    line and qualified name."""
    return (code.co_filename, code.co_firstlineno, getattr(code, "co_qualname", code.co_name))


def traced_through_checks(
    traced_params: Mapping[CodeType, Collection[str]],
    tree: ast.Module | None,
    source: SourceText,
    skip: Iterable[CodeType] = (),
) -> list[catalogue.Message]:
    """FX108 for checks on traced values in the document's functions the trace went through.

    ``traced_params`` maps each code object of the document that created a node to the names of
    its parameters that held a Proxy (``SpanTracer.traced_params``); ``skip`` leaves out codes
    checked elsewhere (the root ``forward``, whose plain-value inputs are placeholders: an
    ``isinstance`` on one that is ``None`` is decided as it would be for ``None``). A code and
    the copy torch.fx traces instead (a ``forward`` with ``**kwargs``: other flags and argument
    count) are the same function.
    """
    if tree is None:
        return []
    skipped = {function_key(code) for code in skip}
    found: list[catalogue.Message] = []
    for code, names in traced_params.items():
        if function_key(code) in skipped or not names:
            continue
        func = find_function(tree, code)
        if func is not None:
            found.extend(failures.specialized_checks(func, set(names), source))
    return found


@dataclass
class Divergence:
    """Output shapes of the traced graph and of eager execution that differ."""

    traced: str
    eager: str
    sizes: str
    """The input sizes it shows at, e.g. ``x [3, 16]``."""


def _render(values: list[Value]) -> str:
    parts = []
    for v in values:
        if v.kind == "tensor":
            parts.append("[" + ", ".join(str(d) for d in v.shape or []) + "]")
        else:
            parts.append(v.text or v.kind)
    return ", ".join(parts) if parts else "nothing"


def _key(values: list[Value], fields: bool = False) -> list[tuple[Any, ...]]:
    kinds = ("tensor",) if fields else ("tensor", "none")
    return [(v.kind, tuple(v.shape or ()), v.dtype) for v in values if v.kind in kinds]


def _static(inputs: list[shapes.ExampleInput], batch: int | None) -> list[shapes.ExampleInput]:
    """The inputs with every dimension fixed; ``batch`` replaces the batch dimension's size."""
    first = next((i for i in inputs if i.kind == "tensor" and i.dims), None)
    batch_name, batch_size = first.dims[0] if first is not None else (None, -1)
    out = []
    for inp in inputs:
        if inp.kind != "tensor":
            out.append(inp)
            continue
        dims: list[tuple[str | None, int]] = []
        for i, (name, size) in enumerate(inp.dims):
            same = name == batch_name if batch_name else (i == 0 and size == batch_size)
            dims.append((None, batch if batch is not None and same else size))
        out.append(shapes.ExampleInput(inp.name, "tensor", dims, inp.dtype, inp.value))
    return out


@dataclass(frozen=True)
class Comparison:
    """How :func:`eager_divergence` compares."""

    leaf_classes: tuple[str, ...] = ()
    """Classes ``forward`` keeps as leaves when it runs on fake tensors (as the trace did)."""
    on_meta: bool = True
    """``forward`` runs on meta tensors first when the graph did."""
    other_batch: bool = True
    """Also compare with the batch one larger: a trace that decided something once (a
    strategy other than plain FX, a check traced through) may have baked the example's
    batch into the graph. A plain FX trace holds every size as a node, so the graph and
    ``forward`` can differ at another batch only where they differ at the example's."""
    kept_runs: keptruns.KeptRuns | None = None
    """Outputs of submodules kept whole that the job's other classes ran (the graph's runs)."""
    eager_runs: keptruns.KeptRuns | None = None
    """The same for ``forward``'s runs on meta tensors (kept apart from the graph's): each
    head of a file calls the base model it keeps whole with the same arguments."""


def eager_divergence(
    gm: torch.fx.GraphModule,
    module: torch.nn.Module,
    inputs: list[shapes.ExampleInput],
    path: str,
    source: str,
    how: Comparison = Comparison(),
) -> Divergence | None:
    """Compare the traced graph with running ``module.forward`` on the same fake inputs.

    Both run on static fake tensors at the example sizes and (``how.other_batch``) again
    with the batch dimension (the first dimension of the first tensor input, everywhere it
    appears) one larger. A difference in output shapes or dtypes means tracing baked a
    Python decision into the graph. Runs that raise are not compared (None). When the graph
    ran on meta tensors (a module built on the meta device), ``forward`` first runs on meta
    tensors too (:func:`fakerun.meta_outputs`, unless ``how.on_meta`` is off) and on fake
    tensors only if that raises.
    """
    if sum(1 for _ in gm.graph.nodes) > MAX_COMPARE_NODES:
        return None
    first = next((i for i in inputs if i.kind == "tensor" and i.dims), None)
    batches: list[int | None] = [None]
    if first is not None and how.other_batch:
        batches.append(first.dims[0][1] + 1)
    leaves, on_meta = list(how.leaf_classes), how.on_meta
    kept = [sub for sub in kept_whole(gm).values() if sub is not None]
    for batch in batches:
        feeds = _static(inputs, batch)
        try:
            prop = shapes.propagate(gm, feeds, symbolic=False, kept_runs=how.kept_runs)
        except Exception:
            return None
        if prop.error is not None:
            continue
        output = next((n for n in gm.graph.nodes if n.op == "output"), None)
        if output is None or output.name not in prop.values:
            return None
        traced = prop.values[output.name]
        # a dict-like result (a ModelOutput) holds only the fields that were set when forward
        # runs, and every field the trace could not tell apart from a value when traced
        fields = result_fields(gm, prop.examples.get(output.name)) is not None
        shared = keptruns.answering(how.eager_runs, kept) if how.eager_runs and kept else None
        eager = (
            fakerun.meta_outputs(module, feeds, shared) if on_meta and prop.mode == "meta" else None
        )
        if eager is None:
            run = fakerun.fake_run(
                module, feeds, path, symbolic=False, leaf_classes=leaves, source=source
            )
            out_node = _output_name(run)
            if run.error is not None or out_node is None:
                continue
            eager = run.values.get(out_node, [])
        if _key(traced, fields) != _key(eager, fields):
            sizes = "; ".join(
                f"{i.name} [{', '.join(str(s) for _, s in i.dims)}]"
                for i in feeds
                if i.kind == "tensor"
            )
            return Divergence(_render(traced), _render(eager), sizes)
    return None


def kept_whole(gm: torch.fx.GraphModule) -> dict[str, torch.nn.Module | None]:
    """The submodules the graph calls whole (not torch's own layers) by path; None for a
    path the graph module lacks (taken as one: a run may go into it). ``forward`` calls them
    with the same code, and its calls of them may be answered by ``Comparison.eager_runs``."""
    kept: dict[str, torch.nn.Module | None] = {}
    for node in gm.graph.nodes:
        if node.op == "call_module":
            path = str(node.target)
            try:
                sub = submodule(gm, path)
            except AttributeError:
                kept[path] = None
                continue
            if not shortcuts.is_builtin_leaf(sub):
                kept[path] = sub
    return kept


def result_fields(gm: torch.fx.GraphModule | None, result: Any) -> Mapping[str, Any] | None:
    """A ``forward``'s dict-like result (a ``ModelOutput``) by field; None for other results.

    A graph traced with ``concrete_args`` returns its result flattened (a list of leaves) and
    keeps the structure as the pytree spec of its output (transformers registers
    ``ModelOutput`` with pytree): the fields are read from there, each with its leaves."""
    if isinstance(result, Mapping):
        return result
    info = getattr(gm.graph._codegen, "pytree_info", None) if gm is not None else None
    spec = getattr(info, "out_spec", None)
    if spec is None or not isinstance(result, (list, tuple)):
        return None
    kind = getattr(spec, "type", None)
    keys = getattr(spec, "context", None)
    children = spec.children() if callable(getattr(spec, "children", None)) else None
    if not (isinstance(kind, type) and issubclass(kind, Mapping)) or children is None:
        return None
    if not isinstance(keys, (list, tuple)) or len(keys) != len(children):
        return None
    if sum(child.num_leaves for child in children) != len(result):
        return None
    fields: dict[str, Any] = {}
    at = 0
    for key, child in zip(keys, children):
        leaves = list(result[at : at + child.num_leaves])
        at += child.num_leaves
        fields[str(key)] = leaves[0] if child.num_leaves == 1 else leaves
    return _Fields(kind.__name__, fields)


class _Fields(dict[str, Any]):
    """A result's fields read off its pytree spec, named after the result's type."""

    def __init__(self, kind: str, fields: dict[str, Any]) -> None:
        super().__init__(fields)
        self.kind = kind


def result_kind(result: Mapping[str, Any]) -> str:
    """The type name of a dict-like result (from :func:`result_fields`)."""
    return result.kind if isinstance(result, _Fields) else type(result).__name__


def _output_name(run: fakerun.FakeRun) -> str | None:
    gm = run.graph_module
    if gm is None:
        return None
    node = next((n for n in gm.graph.nodes if n.op == "output"), None)
    return node.name if node is not None else None
