"""Shapes and dtypes for every node of an FX graph, without real memory.

``propagate(gm, inputs, symbolic=True)`` runs the graph on example inputs that hold no data:

- ``symbolic``: when an input names a dimension (``B``, ``T``), it becomes a fake tensor whose
  named dimensions are symbols of a ``ShapeEnv``; results print in the user's names
  (``["B", "T", 768]``, ``"T - 1"``, ``"B*T"``).
- ``meta``: otherwise (or with ``symbolic=False``) every tensor lives on the meta device, the
  fastest path. Operators without a meta kernel fall back to ``fake``.
- ``fake``: static fake tensors; also used when the module was built on the CPU (real
  parameters), so activations never allocate memory.

Propagation stops at the first node that fails; values for the nodes before it are kept and
the failure becomes a :class:`ShapeError` with a readable message naming the node.

Symbol naming: each name is one symbol; a name used on several inputs must have the same
example size everywhere (the capture guarantees it) and is unified with its first use. Two
names that share an example size still get distinct symbols (torch 2.13 does not duck-size
``StatelessSymbolicContext`` inputs). When an operation proves two names equal (``x +
x.transpose(0, 1)`` needs ``T == B``) or fixes a name to its example size (``x.view(2, -1)``
with ``B = 2``), later shapes print the first name (or the number) consistently, and
``Propagation.notes`` says which node did it. Example sizes of 0 or 1 are specialized by
torch: give named dimensions sizes of at least 2.

Speed:
- the most frequent operations (Linear, LayerNorm, BatchNorm, LSTM/GRU/RNN, matmul) make
  their output directly with ``new_empty`` when their shape is certain, instead of running
  torch's Python meta decompositions; anything unusual runs the real operator;
- in a symbolic run, activations, dropout, softmax, ``masked_fill``, arithmetic and comparisons
  on contiguous tensors are answered by :mod:`~fxls.worker.capture.shapes.elementwise`;
- a node whose inputs have the same metadata as an earlier node's (the repeated blocks of a
  transformer) reuses that node's output (off when the graph changes shapes in place).
"""

from __future__ import annotations

import collections
import contextlib
import logging
import operator
import os
import re
import time
import typing
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
import torch.fx
from torch.fx.immutable_collections import immutable_dict, immutable_list

from fxls.protocol.model import Value
from fxls.worker.capture import cpulimit
from fxls.worker.capture.shapes import elementwise, keptruns, kernels, shortcuts
from fxls.worker.capture.shapes import sizes as example_sizes
from fxls.worker.capture.shapes import state as module_state
from fxls.worker.capture.shapes.explain import NoExample, ShapeError, shape_error, target_name
from fxls.worker.capture.shapes.shortcuts import (
    MATMULS,
    SDPA,
    DtypeMismatch,
    check_dtype,
    fast_matmul,
    fast_module,
    fast_sdpa,
    same_size,
)
from fxls.worker.capture.shapes.values import MISSING, Namer, values_of

__all__ = [
    "ELEMENTWISE_ENV",
    "PARENT_SHAPES_ENV",
    "RERUN_CPU_SHARE",
    "RERUN_NODES",
    "ZERO_ONE_ENV",
    "DtypeMismatch",
    "ExampleInput",
    "Propagation",
    "Run",
    "ShapeError",
    "data_free_torch",
    "dispatch_cache",
    "map_named_tensors",
    "map_tensors",
    "meta_feeds",
    "named_fake",
    "new_fake_mode",
    "propagate",
    "propagate_within",
    "quiet_loggers",
    "rerun_allowed",
    "values_of",
    "warm_up",
]


@dataclass
class ExampleInput:
    """One ``forward`` argument: a data-free tensor of ``dims`` and ``dtype``, or a value."""

    name: str
    """Forward parameter name (the placeholder's target)."""
    kind: Literal["tensor", "value"]
    dims: list[tuple[str | None, int]] = field(default_factory=list)
    """Per dimension: (symbol name or None, example size)."""
    dtype: torch.dtype = torch.float32
    value: Any = None
    """For kind ``value``: passed as is; real tensors inside become fake/meta tensors."""
    inner_dims: list[list[tuple[str | None, int]]] | None = None
    """For kind ``value``: the dimensions of each tensor inside it, in :func:`map_tensors`
    order, with names where a parent's call had them (``cos, sin`` of ``[1, T, 128]``)."""


@dataclass
class Propagation:
    values: dict[str, list[Value]]
    """Node name -> outputs (tuples/lists flattened in order)."""
    examples: dict[str, Any]
    """Node name -> the example value itself (fake/meta tensor, SymInt, Python value)."""
    error: ShapeError | None
    mode: str
    """``symbolic``, ``fake`` or ``meta``: how the run treated named dimensions (a run asked
    to be symbolic whose named dimensions are all 0 or 1 ran at static sizes and is
    ``symbolic`` too: torch makes those sizes numbers, :func:`_zero_one_run`)."""
    notes: list[str] = field(default_factory=list)
    """Things the user should know, e.g. a named dimension fixed to its example size."""
    namer: Any = None
    """The run's ``Namer`` (symbols -> the user's dimension names)."""
    fixed: dict[str, int] = field(default_factory=dict)
    """Named dimensions a node fixed to a number (name -> the number), or, for a run at
    static sizes, every named dimension (name -> its example size)."""
    fixed_at: dict[str, str] = field(default_factory=dict)
    """Name -> the node that fixed it (absent for a run at static sizes)."""
    pinned: list[Any] = field(default_factory=list)
    """Expressions in named dimensions a node required to equal a number
    (``example_sizes.pinned``): their names are in ``fixed`` though no name was replaced."""
    example_nodes: list[str] = field(default_factory=list)
    """Nodes whose values hold for the example sizes in ``example_sizes`` only: computed again
    at other sizes of the fixed names, their numbers changed in a way no expression in the
    names gives, or that run did not get to them (:mod:`~fxls.worker.capture.shapes.sizes`)."""
    example_sizes: dict[str, int] = field(default_factory=dict)
    """The example sizes ``example_nodes`` hold for (the fixed names)."""
    run: Run | None = None
    """What the run ran in (its fake mode, ``ShapeEnv``, results by input metadata), for the
    runs of the sub-blocks it called (:func:`propagate_within`)."""
    inner_calls: dict[type, Any] = field(default_factory=dict)
    """Class -> (instance, args, kwargs) of its first call inside a submodule the run kept
    whole, for the classes a capture watched there (``KeptRuns.watch``)."""
    inner_blind: bool = True
    """Whether a watched class may have been called inside a submodule kept whole without
    ``inner_calls`` holding it (nothing was watched, or ``InnerCalls.blind``)."""


@dataclass
class Run:
    """The context of one propagation: entered again to run a sub-block inside it."""

    device: torch.device
    mode: Any
    """The ``FakeTensorMode`` (None for a meta run)."""
    shape_env: Any
    constant: Callable[[torch.Tensor], torch.Tensor]
    memo: dict[Any, Any] | None
    """The interpreter's results by the metadata of their inputs (None: the graph was not
    safe to memoize)."""
    spoiled: bool = False
    """A run inside it failed or fixed a name: its ``ShapeEnv`` may now hold what the parent's
    run did not, so no other run is made inside it."""
    kept_runs: keptruns.KeptRuns | None = None
    """Outputs of submodules kept whole that the job's other classes ran already."""


_QUIET_LOGGERS = (
    "torch._subclasses.fake_tensor",
    "torch.fx.experimental.symbolic_shapes",
    "torch.fx.experimental.recording",
    "torch.fx.interpreter",
    "torch.fx.passes.shape_prop",
    "torch.__trace",
)


_quiet_depth = 0


@contextlib.contextmanager
def quiet_loggers() -> Iterator[None]:
    """Silence torch's loggers that report failing ops at ERROR level. Re-entrant: inside
    another ``quiet_loggers`` it does nothing (each ``setLevel`` clears the level cache of all
    ~270 loggers of the process; a capture silences them once, around all of its steps)."""
    global _quiet_depth
    if _quiet_depth:
        _quiet_depth += 1
        try:
            yield
        finally:
            _quiet_depth -= 1
        return
    saved = []
    for name in _QUIET_LOGGERS:
        logger = logging.getLogger(name)
        saved.append((logger, logger.level))
        logger.setLevel(logging.CRITICAL + 1)
    _quiet_depth = 1
    try:
        yield
    finally:
        _quiet_depth = 0
        for logger, level in saved:
            logger.setLevel(level)


@contextlib.contextmanager
def data_free_torch() -> Iterator[None]:
    """Make torch's layers run on tensors without data.

    ``nn.TransformerEncoder`` compares a given mask with a causal one (``bool((mask ==
    causal).all())``) only to pick a faster kernel; on fake or meta tensors that question has
    no answer and stops the run. While fxls propagates shapes, the check answers with what the
    caller said (``is_causal``), which changes no shape.
    """
    import torch.nn.modules.transformer as transformer

    original = getattr(transformer, "_detect_is_causal_mask", None)
    if original is None:
        yield
        return

    def detect(mask: Any, is_causal: Any = None, size: Any = None) -> bool:
        if isinstance(mask, torch.Tensor) and (
            mask.device.type == "meta" or type(mask).__name__ == "FakeTensor"
        ):
            return bool(is_causal)
        return bool(original(mask, is_causal, size))

    transformer._detect_is_causal_mask = detect
    try:
        yield
    finally:
        transformer._detect_is_causal_mask = original


# ---------------------------------------------------------------------------------------
# The interpreter
# ---------------------------------------------------------------------------------------


class _Propagator(torch.fx.Interpreter):
    """Runs nodes one at a time on data-free examples; placeholders come from a dict."""

    def __init__(self, gm: torch.fx.GraphModule, feeds: dict[str, Any], run: Run) -> None:
        super().__init__(gm, garbage_collect_values=False)
        self.feeds = feeds
        self.constant = run.constant
        self.memo: dict[Any, Any] | None = None
        """Results by the metadata of their inputs, shared by the runs of one ``run`` (a run
        inside a parent's shares its parent's: :func:`propagate_within`)."""
        if _memo_safe(gm):
            if run.memo is None:
                run.memo = {}
            self.memo = run.memo
        self._module_keys: dict[str, Any] = {}
        self.same_layout = self.memo is not None and os.environ.get(ELEMENTWISE_ENV) != "0"
        """Elementwise operators answered by :mod:`elementwise` (runs whose results the memo
        may share: its answers are tensors of the run, shared the same way)."""
        self.fake_mode = run.mode is not None
        self.context = run
        self.kept = module_state.Keeper()
        """The state of the user's leaves this run called, put back when it ends."""

    def _own(self, result: Any) -> Any:
        """``result`` when it is a tensor of this run (a fake tensor of its mode, or a meta
        tensor in a meta run), else None."""
        from torch._subclasses.fake_tensor import FakeTensor

        if not isinstance(result, torch.Tensor):
            return None
        fake = isinstance(result, FakeTensor)
        if self.fake_mode:
            return result if fake else None
        return result if not fake and result.device == _META else None

    def run_node(self, n: torch.fx.Node) -> Any:
        """Run ``n``, reusing the result of an earlier node with identical inputs' metadata.

        Outputs of shape functions depend only on their inputs' metadata (shape, strides,
        dtype, device) and constant arguments, so a repeated layer (the 48 blocks of a GPT)
        reuses the first block's outputs instead of dispatching every operator again.
        """
        if self.memo is None or n.op not in _MEMO_OPS:
            return super().run_node(n)
        with self._set_current_node(n):
            args, kwargs = self.fetch_args_kwargs_from_env(n)
            with _METADATA_ONLY():
                key = self._memo_key(n, args, kwargs)
            if key is not None:
                hit = self.memo.get(key)
                if hit is not None:
                    return hit
            result = getattr(self, n.op)(n.target, args, kwargs)
            if key is not None:
                with _METADATA_ONLY():
                    if _reusable(result):
                        self.memo[key] = result
            return result

    def _memo_key(self, n: torch.fx.Node, args: Any, kwargs: Any) -> Any:
        if n.op == "call_module":
            target: Any = self._module_keys.get(str(n.target), MISSING)
            if target is MISSING:
                target = _module_key(self.fetch_attr(str(n.target)))
                self._module_keys[str(n.target)] = target
            if target is None:
                return None
        elif n.op == "call_method":
            if str(n.target) in _NO_MEMO_METHODS or str(n.target).endswith("_"):
                return None
            target = n.target
        else:
            target = n.target
            if target in _NO_MEMO_FUNCTIONS or not _library_function(target):
                return None
        try:
            key = (n.op, target, _signature(args), _signature(kwargs))
            hash(key)
        except _Unkeyable:
            return None
        except TypeError:
            return None
        return key

    def placeholder(self, target: Any, args: Any, kwargs: Any) -> Any:
        name = str(target)
        if name in self.feeds:
            return self.feeds[name]
        base = re.sub(r"_\d+$", "", name)  # concrete_args placeholders are renamed ``which_1``
        if base in self.feeds:
            return self.feeds[base]
        if name.startswith("*"):
            return {} if name.startswith("**") else ()
        if args:
            return args[0]  # the forward parameter's default
        raise NoExample(name)

    def get_attr(self, target: Any, args: Any, kwargs: Any) -> Any:
        value = super().get_attr(target, args, kwargs)
        if self.constant is not None and isinstance(value, torch.Tensor):
            # tensors created while tracing (``torch.tensor([1.0, 2.0])`` in forward) are real
            # CPU constants: give them the device and kind of everything else
            return self.constant(value)
        return value

    def call_module(self, target: Any, args: Any, kwargs: Any) -> Any:
        module = self.fetch_attr(str(target))
        if not kwargs and args and isinstance(args[0], torch.Tensor):
            with _METADATA_ONLY():
                fast = self._fast_module(module, args)
            if fast is not None:
                return fast
        self.kept.keep_leaf(module)
        context = self.context
        runs = context.kept_runs
        if runs is None:
            return self._run_kept(target, args, kwargs)
        call = runs.key(module, args, kwargs, context.shape_env, context.mode)
        with runs.watch(module) if runs.watch is not None else contextlib.nullcontext() as seen:
            return runs.through(call, lambda: self._run_kept(target, args, kwargs), module, seen)

    def _fast_module(self, module: torch.nn.Module, args: Any) -> Any:
        """A torch layer's output from its shape shortcut, None when there is none."""
        check_dtype(module, args[0])
        fast = fast_module(module, args[0], args[1:])
        if fast is None and self.same_layout and len(args) == 1:
            fast = self._own(elementwise.same_layout_module(module, args[0]))
        return fast

    def _run_kept(self, target: Any, args: Any, kwargs: Any) -> Any:
        # a kept submodule runs its Python code: its attention, matrix products and torch
        # layers take the same shortcuts as graph nodes do; it gets plain dicts and lists
        with shortcuts.builtin_shortcuts(), shortcuts.Shortcuts():
            return super().call_module(target, thawed(args), thawed(kwargs))

    def call_function(self, target: Any, args: Any, kwargs: Any) -> Any:
        with _METADATA_ONLY():
            fast = self._fast_function(target, args, kwargs)
        if fast is not None:
            return fast
        if not _library_function(target):  # a user's helper gets what an eager call passes
            args, kwargs = thawed(args), thawed(kwargs)
        return super().call_function(kernels.for_target(target), args, kwargs)

    def _fast_function(self, target: Any, args: Any, kwargs: Any) -> Any:
        """A function's output from its shape shortcut, None when there is none."""
        fast = None
        if target in MATMULS and len(args) == 2 and not kwargs:
            fast = fast_matmul(args[0], args[1])
        elif target is SDPA:
            fast = fast_sdpa(tuple(args), dict(kwargs))
        if fast is None and self.same_layout:
            fast = self._own(elementwise.same_layout_function(target, tuple(args), dict(kwargs)))
        return fast

    def call_method(self, target: Any, args: Any, kwargs: Any) -> Any:
        with _METADATA_ONLY():
            fast = self._fast_method(target, args, kwargs)
        if fast is not None:
            return fast
        return super().call_method(target, args, kwargs)

    def _fast_method(self, target: Any, args: Any, kwargs: Any) -> Any:
        """A method's output from its shape shortcut, None when there is none."""
        fast = None
        if target == "matmul" and len(args) == 2 and not kwargs:
            fast = fast_matmul(args[0], args[1])
        if fast is None and self.same_layout:
            fast = self._own(elementwise.same_layout_method(str(target), tuple(args), dict(kwargs)))
        return fast


# Reuse across repeated layers -----------------------------------------------------------

ELEMENTWISE_ENV = "FXLS_ELEMENTWISE_RULES"
"""``0`` in the worker's environment: symbolic runs dispatch every elementwise operator (no
:mod:`~fxls.worker.capture.shapes.elementwise` answers), to compare."""

_MEMO_OPS = frozenset({"call_function", "call_method", "call_module"})
_NO_MEMO_METHODS = frozenset({"item", "tolist", "nonzero", "unique", "masked_select", "numpy"})
_NO_MEMO_FUNCTIONS = {
    operator.setitem,
    operator.iadd,
    operator.isub,
    operator.imul,
    operator.itruediv,
    operator.ifloordiv,
    operator.imatmul,
    torch.nonzero,
    torch.unique,
    torch.masked_select,
    torch.manual_seed,
}
_METADATA_MUTATORS = frozenset(
    {
        "resize_",
        "resize_as_",
        "set_",
        "as_strided_",
        "unsqueeze_",
        "squeeze_",
        "transpose_",
        "t_",
        "swapdims_",
        "swapaxes_",
        "requires_grad_",
        "share_memory_",
        "detach_",
    }
)


class _Unkeyable(Exception):
    """An argument that cannot be part of a memo key."""


def _memo_safe(gm: torch.fx.GraphModule) -> bool:
    """Reuse is off when the graph changes a tensor's metadata in place or calls user leaves."""
    for node in gm.graph.nodes:
        if node.op in ("call_method", "call_function"):
            name = node.target if isinstance(node.target, str) else target_name(node)
            if name in _METADATA_MUTATORS:
                return False
    return True


_METADATA_ONLY = torch._C.DisableTorchFunction
"""Around the propagator's own reading of tensors' metadata (shapes, strides, dtypes, devices:
its memo keys and records), which a run makes inside ``with torch.device(...)`` so that the
user's ``torch.zeros(n)`` lands on the run's device: without it, each property read went
through that mode's Python handler (6 reads: 6.1 µs, 0.6 µs without; a ResNet-50's run read
3,200). Nothing made of tensors is computed in it."""


def thawed(value: Any, depth: int = 0) -> Any:
    """``value`` with the immutable lists and dicts FX keeps a node's arguments in made plain
    ``list`` and ``dict`` again, inside tuples, lists and dicts too: a helper may change what
    it is given (``kwargs.pop("frame_index", None)``), as it does in an eager run."""
    kind = type(value)
    if depth > 8 or kind not in _FROZEN:
        return value
    if kind is tuple:
        return tuple(thawed(v, depth + 1) for v in value)
    if kind in (list, immutable_list):
        return [thawed(v, depth + 1) for v in value]
    return {k: thawed(v, depth + 1) for k, v in value.items()}


_FROZEN = frozenset({tuple, list, dict, immutable_list, immutable_dict})


def _library_function(fn: Any) -> bool:
    """torch's and the standard library's functions; user functions (``torch.fx.wrap``-ed
    helpers) may do anything, so their results are never reused."""
    module = getattr(fn, "__module__", None) or ""
    return module in ("_operator", "operator", "math", "builtins") or module.startswith("torch")


def _module_key(module: torch.nn.Module) -> Any:
    """What makes two built-in modules compute the same shapes; None for anything else."""
    kind = type(module)
    if not kind.__module__.startswith("torch.nn.") or next(module.children(), None) is not None:
        return None
    tensors = tuple(
        (name, tuple(t.shape), t.dtype, t.device)
        for name, t in (
            *module.named_parameters(recurse=False),
            *module.named_buffers(recurse=False),
        )
        if t is not None
    )
    return (kind, module.extra_repr(), module.training, tensors)


def _signature(obj: Any, depth: int = 0) -> Any:
    """A hashable description of an argument's metadata (tensors by shape, never by data)."""
    if isinstance(obj, torch.Tensor):
        return (
            "T",
            obj.dtype,
            obj.device,
            tuple(_sym_key(d) for d in obj.shape),
            tuple(_sym_key(d) for d in obj.stride()),
            _sym_key(obj.storage_offset()),
            obj.layout,
        )
    if obj is None or isinstance(obj, (str, torch.dtype, torch.device, torch.memory_format)):
        return obj
    if isinstance(obj, (bool, int, float, complex, torch.SymInt, torch.SymFloat, torch.SymBool)):
        return (type(obj).__name__, _sym_key(obj))
    if depth > 6:
        raise _Unkeyable
    if isinstance(obj, (tuple, list)):
        return (type(obj).__name__, tuple(_signature(v, depth + 1) for v in obj))
    if isinstance(obj, dict):
        return ("dict", tuple((k, _signature(v, depth + 1)) for k, v in obj.items()))
    if isinstance(obj, slice):
        return ("slice", _signature((obj.start, obj.stop, obj.step), depth + 1))
    if obj is Ellipsis:
        return "..."
    raise _Unkeyable


def _sym_key(value: Any) -> Any:
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return ("sym", value.node.expr)
    return value


def _reusable(result: Any) -> bool:
    """Tensors (or tuples of them) whose sizes hold no data-dependent symbol."""
    items = result if isinstance(result, (tuple, list)) else (result,)
    for item in items:
        if not isinstance(item, torch.Tensor):
            return False
        for d in item.shape:
            if isinstance(d, torch.SymInt) and any(
                str(sym).startswith("u") for sym in d.node.expr.free_symbols
            ):
                return False
    return True


def _module_device(gm: torch.nn.Module) -> torch.device:
    for param in gm.parameters():
        return param.device
    for buffer in gm.buffers():
        return buffer.device
    return torch.device("meta")


def map_named_tensors(
    obj: Any,
    inner_dims: list[list[tuple[str | None, int]]] | None,
    named: Callable[[list[tuple[str | None, int]], torch.dtype], torch.Tensor],
    plain: Callable[[torch.Tensor], torch.Tensor],
) -> Any:
    """:func:`map_tensors` where a tensor with named dimensions (``inner_dims``, same order)
    is made by ``named(dims, dtype)`` and any other by ``plain``."""
    remaining = iter(inner_dims or [])

    def make(t: torch.Tensor) -> torch.Tensor:
        dims = next(remaining, None)
        if dims and any(n for n, _ in dims) and len(dims) == t.dim():
            return named(dims, t.dtype)
        return plain(t)

    return map_tensors(obj, make)


def map_tensors(obj: Any, fn: Any, depth: int = 0) -> Any:
    """Apply ``fn`` to every tensor inside nested tuples/lists/dicts (and UserDicts)."""
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if depth > 8:
        return obj
    if isinstance(obj, tuple):
        items = [map_tensors(v, fn, depth + 1) for v in obj]
        return type(obj)(*items) if hasattr(obj, "_fields") else tuple(items)
    if isinstance(obj, list):
        return [map_tensors(v, fn, depth + 1) for v in obj]
    if isinstance(obj, dict):
        return {k: map_tensors(v, fn, depth + 1) for k, v in obj.items()}
    if type(obj) is collections.UserDict:  # each run its own (a block may write into it)
        return collections.UserDict({k: map_tensors(v, fn, depth + 1) for k, v in obj.items()})
    return obj


def _is_named(inputs: list[ExampleInput]) -> bool:
    return any(name for inp in inputs if inp.kind == "tensor" for name, _ in inp.dims)


Copies = Mapping[str, "tuple[str, Any]"]
"""Node name -> (name of the node it is a copy of, the copied call's ``reuse.Segment``)."""


def propagate(
    gm: torch.fx.GraphModule,
    inputs: list[ExampleInput],
    symbolic: bool = True,
    reuse: Copies | None = None,
    kept_runs: keptruns.KeptRuns | None = None,
) -> Propagation:
    """Shapes and dtypes of every node of ``gm``, computed without real memory.

    Args:
        gm: a traced module, built on the meta device (or on the CPU).
        inputs: one example per ``forward`` argument; named dims stay symbolic.
        symbolic: keep named dims symbolic; False forces the static path.
        reuse: nodes copied from a template call of an identical sub-block
            (:mod:`fxls.worker.capture.trace.reuse`): when the copied call's inputs have the same
            metadata as the template's, its nodes take the template nodes' results.
        kept_runs: outputs of submodules kept whole that other classes of the job ran
            (:mod:`keptruns`).

    Returns:
        A :class:`Propagation`; ``error`` names the first failing node (values before it are
        kept).

    Example:
        >>> p = propagate(gm, [ExampleInput("x", "tensor", [("B", 2), (None, 3)])])
        >>> p.values["x"][0].shape
        ['B', 3]
    """
    device = _module_device(gm)
    with quiet_loggers(), data_free_torch():
        if not (symbolic and _is_named(inputs)):
            return _run_static(gm, inputs, device, reuse, kept_runs)
        ones = _zero_one_run(gm, inputs, device, reuse)
        if ones is not None:
            return ones
        started = time.process_time()
        result = _run_fake(gm, inputs, symbolic=True, reuse=reuse, kept_runs=kept_runs)
        took = time.process_time() - started
        if result.error is not None:
            # some kernels only take concrete sizes: when the static run gets further, use it
            static = _run_static(gm, inputs, device, reuse)
            if _further(gm, static, result):
                static.fixed = _named_sizes(inputs)
                why = (
                    f"`{result.error.node}` does not support symbolic sizes "
                    f"({result.error.original})"
                )
                _generalize(gm, inputs, device, reuse, static)
                if static.example_nodes:
                    held = ", ".join(f"{k} = {v}" for k, v in static.example_sizes.items())
                    count = _shapes(static.example_nodes)
                    note = f"{why}; shapes are computed at the example sizes: {count} hold "
                    note += f"for {held} only, the others follow the names"
                else:
                    note = f"{why}; shapes computed at several example sizes follow the names"
                static.notes.insert(0, note)
                return static
        if result.fixed:
            again = rerun_allowed(took, len(gm.graph.nodes))
            _generalize(gm, inputs, device, reuse, result, again=again)
        return result


ZERO_ONE_ENV = "FXLS_ZERO_ONE_STATIC"
"""``0`` in the worker's environment: a symbolic run whose named dimensions are all 0 or 1 runs
in a ``ShapeEnv`` as the others do instead of at static sizes (:func:`_zero_one_run`), to
compare."""


def _zero_one_run(
    gm: torch.fx.GraphModule,
    inputs: list[ExampleInput],
    device: torch.device,
    reuse: Copies | None,
) -> Propagation | None:
    """A symbolic run made at static sizes when every named dimension of the inputs is 0 or 1
    (``B=1``): a ``ShapeEnv`` makes such sizes numbers when it makes the fake inputs
    (``specialize_zero_one``), so the symbolic run would hold no symbol and fix no name, and
    the static run gives its results without the symbolic fake dispatch. None when the static
    run fails or notes something (the symbolic run then runs and words it as it does)."""
    if os.environ.get(ZERO_ONE_ENV) == "0" or not _zero_one_only(inputs):
        return None
    static = _run_static(gm, inputs, device, reuse)
    if static.error is not None or static.notes:
        return None
    static.mode = "symbolic"
    return static


def _zero_one_only(inputs: list[ExampleInput]) -> bool:
    """Whether every named dimension of the inputs is 0 or 1 and no tensor inside a value has
    named dimensions (a symbolic run makes those afresh, a static one copies the value's)."""
    for inp in inputs:
        if inp.kind != "tensor":
            if any(name for dims in inp.inner_dims or [] for name, _ in dims):
                return False
        elif any(name and size not in (0, 1) for name, size in inp.dims):
            return False
    return True


PARENT_SHAPES_ENV = "FXLS_PARENT_SHAPES"
"""``0`` in the worker's environment: a sub-block's class propagates its shapes on its own
instead of inside its parent's run (:func:`propagate_within`), to compare."""


def propagate_within(
    parent: Propagation,
    gm: torch.fx.GraphModule,
    fed: Sequence[tuple[ExampleInput, Any]],
    symbolic: bool = True,
    reuse: Copies | None = None,
) -> Propagation | None:
    """The shapes of a sub-block's class, computed inside the run of the parent that called
    it: ``fed`` pairs each input the class's own run would make (:func:`propagate`'s
    ``inputs``) with the parent's example of that argument of the call. The operators the parent
    ran on the same metadata are not run again (the run shares the parent's results by input
    metadata, its fake mode and ``ShapeEnv``), so the first call of a block costs the parent
    alone. None when the result could differ from :func:`propagate`'s: the parent's run
    fixed or equated a name or failed, or its graph changes a tensor's metadata in place; an
    input is not a tensor, or not what the class's own
    run would make (a dimension the parent has as an expression, another dtype, a
    non-contiguous layout); a run that fails or fixes a name here (the class's own run
    reports it in its own words)."""
    run = parent.run
    if run is None or run.spoiled or os.environ.get(PARENT_SHAPES_ENV) == "0":
        return None
    if run.memo is None:  # the parent's graph changes metadata in place: its examples may too
        return None
    if parent.error is not None or parent.notes or parent.fixed or parent.example_nodes:
        return None
    static = "meta" if run.device == _META else "fake"
    expected = "symbolic" if symbolic and _is_named([inp for inp, _ in fed]) else static
    if parent.mode != expected or _module_device(gm) != run.device:
        return None
    namer = parent.namer
    feeds: dict[str, Any] = {}
    for inp, value in fed:
        if inp.kind != "tensor" or not _fed_as(value, inp, namer):
            return None
        feeds[inp.name] = value
    fixed = len(run.shape_env.replacements) if run.shape_env is not None else 0
    with contextlib.ExitStack() as stack:
        stack.enter_context(quiet_loggers())
        stack.enter_context(data_free_torch())
        if run.mode is not None:
            stack.enter_context(run.mode)
        stack.enter_context(torch.device(run.device))
        stack.enter_context(torch.no_grad())
        result = _interpret(gm, feeds, namer, parent.mode, run=run, reuse=reuse)
    now = len(run.shape_env.replacements) if run.shape_env is not None else 0
    if result.error is not None or result.notes or now != fixed:
        run.spoiled = True
        return None
    return result


def _fed_as(value: Any, inp: ExampleInput, namer: Namer) -> bool:
    """Whether ``value`` is the tensor a run of its own makes of ``inp``: its dtype, each
    named dimension a symbol of that name, each other one the example size, contiguous."""
    if not isinstance(value, torch.Tensor) or value.dtype != inp.dtype:
        return False
    if value.layout != torch.strided or value.dim() != len(inp.dims):
        return False
    if not same_size(value.storage_offset(), 0):
        return False
    stride: Any = 1
    for (name, size), d, st in reversed(list(zip(inp.dims, value.shape, value.stride()))):
        if name:
            expr = d.node.expr if isinstance(d, torch.SymInt) else None
            if expr is None or not expr.is_Symbol or namer.names.get(expr) != name:
                return False
        elif isinstance(d, torch.SymInt) or d != size:
            return False
        if not same_size(st, stride):
            return False
        stride = stride * (d.node.expr if isinstance(d, torch.SymInt) else d)
    return True


RERUN_NODES = 2500
"""A run that fixed a named dimension is computed again at other sizes (one more run, a second
to confirm) unless its graph has more nodes than this: a run on fake tensors costs about a
millisecond a node (``Deimv2Model``'s 2,327 nodes: 2.0-2.3 s on one core of a 2-core virtual
machine), and three runs of a larger graph would take most of a job's CPU limit. The decision reads no clock, so a file shows the same shapes on a fast
machine and a slow one; only a job near its CPU limit (:func:`rerun_allowed`) decides by
time, where the alternative is the job being stopped."""
RERUN_CPU_SHARE = 0.8
"""The share of the job's CPU limit that the runs made so far and two more as long as the
first may use."""


def rerun_allowed(took: float, nodes: int) -> bool:
    """Whether a run over ``nodes`` nodes that took ``took`` seconds of CPU may be made again:
    its graph is at most ``RERUN_NODES`` long, and two more runs fit in what the job's CPU limit
    leaves (always, without a limit)."""
    if nodes > RERUN_NODES:
        return False
    limit = cpulimit.soft_limit_s()
    return limit is None or time.process_time() + 2 * took <= RERUN_CPU_SHARE * limit


def _named_sizes(inputs: list[ExampleInput]) -> dict[str, int]:
    """Each name of the inputs' dimensions -> its example size."""
    return {name: size for inp in inputs if inp.kind == "tensor" for name, size in inp.dims if name}


def _generalize(
    gm: torch.fx.GraphModule,
    inputs: list[ExampleInput],
    device: torch.device,
    reuse: Copies | None,
    result: Propagation,
    again: bool = True,
) -> None:
    """Numbers that stand for a fixed name written in it again, from runs at other sizes of
    the fixed names; what no run explains is listed in ``example_nodes`` (see
    :mod:`~fxls.worker.capture.shapes.sizes`). The notes say what was done. Without
    ``again``, nothing is computed again: every number after the fixing node is listed."""
    static = result.mode != "symbolic"

    def run(sizes: dict[str, int]) -> example_sizes.Rerun:
        if not again:
            return example_sizes.Rerun(sizes, error=_NOT_AGAIN)
        resized = [example_sizes.resized(inp, sizes) for inp in inputs]
        try:
            if static:
                other = _run_static(gm, resized, device, reuse)
            else:
                other = _run_fake(gm, resized, symbolic=True, reuse=reuse)
        except Exception as exc:
            return example_sizes.Rerun(sizes, error=type(exc).__name__)
        error = other.error.node if other.error is not None else None
        return example_sizes.Rerun(sizes, other.values, error)

    step = example_sizes.telling_step(result.pinned, result.namer.names, result.fixed)
    found = example_sizes.generalize(result.values, result.fixed, run, first_step=step)
    result.values = found.values
    result.example_nodes = found.bound
    if found.bound:
        result.example_sizes = dict(result.fixed)
    result.notes = [n for n in result.notes if not n.endswith(_FIXED_NOTE_END)]
    if static:
        return
    other = found.reruns[0]
    for name, size in result.fixed.items():
        node = result.fixed_at.get(name, "?")
        at = f"{name} = {other.sizes[name]}"
        if not found.bound:
            result.notes.append(
                f"`{node}` fixes {name} to {size} while computing shapes; computed again at "
                f"{at}, the shapes after it follow {name}"
            )
        elif other.error == _NOT_AGAIN:
            result.notes.append(
                f"`{node}` fixes {name} to {size} while computing shapes (not computed again "
                f"at another size: the model is large); {_shapes(found.bound)} hold for "
                f"{name} = {size} only"
            )
        elif other.error is not None and other.error in result.values:
            result.notes.append(
                f"`{node}` only works for {name} = {size}: at {at} the shapes fail at "
                f"`{other.error}`; {_shapes(found.bound)} hold for {name} = {size} only"
            )
        else:
            result.notes.append(
                f"`{node}` fixes {name} to {size} while computing shapes; computed again at "
                f"{at}, {_shapes(found.bound)} change in a way no expression in {name} "
                f"gives: they hold for {name} = {size} only"
            )


def _shapes(nodes: Sequence[str]) -> str:
    return "1 shape" if len(nodes) == 1 else f"{len(nodes)} shapes"


_FIXED_NOTE_END = "shapes after it use that size instead of the name"
_NOT_AGAIN = "not computed again"


def _run_static(
    gm: torch.fx.GraphModule,
    inputs: list[ExampleInput],
    device: torch.device,
    reuse: Copies | None = None,
    kept_runs: keptruns.KeptRuns | None = None,
) -> Propagation:
    if device.type != "meta":
        return _run_fake(gm, inputs, symbolic=False, reuse=reuse, kept_runs=kept_runs)
    result = _run_meta(gm, inputs, reuse, kept_runs)
    if result.error is not None and _missing_meta_kernel(result.error.exception):
        fake = _run_fake(gm, inputs, symbolic=False, reuse=reuse)
        if _further(gm, fake, result):
            return fake
    return result


def _further(gm: torch.fx.GraphModule, a: Propagation, b: Propagation) -> bool:
    """Whether propagation ``a`` got further through the graph than ``b``."""
    if a.error is None:
        return b.error is not None
    if b.error is None:
        return False
    order = {node.name: i for i, node in enumerate(gm.graph.nodes)}
    return order.get(a.error.node, -1) > order.get(b.error.node, -1)


def _missing_meta_kernel(exc: BaseException) -> bool:
    text = str(exc)
    return isinstance(exc, NotImplementedError) or "'Meta' backend" in text


_META = torch.device("meta")


def to_meta(t: torch.Tensor) -> torch.Tensor:
    """``t`` itself on the meta device, else a meta tensor like it."""
    return t if t.device == _META else torch.empty_like(t, device=_META)


def meta_feeds(inputs: Sequence[Any]) -> dict[str, Any]:
    """Each input by name on the meta device at its static example sizes (tensors inside plain
    values made meta too)."""
    feeds: dict[str, Any] = {}
    for inp in inputs:
        if inp.kind == "tensor":
            feeds[inp.name] = torch.empty([s for _, s in inp.dims], dtype=inp.dtype, device=_META)
        else:
            feeds[inp.name] = map_tensors(inp.value, to_meta)
    return feeds


def _run_meta(
    gm: torch.fx.GraphModule,
    inputs: list[ExampleInput],
    reuse: Copies | None = None,
    kept_runs: keptruns.KeptRuns | None = None,
) -> Propagation:
    feeds = meta_feeds(inputs)
    run = Run(_META, None, None, to_meta, None, kept_runs=kept_runs)
    with torch.device(_META), torch.no_grad():
        return _interpret(gm, feeds, Namer(), "meta", run=run, reuse=reuse)


FAKE_CACHE_ENV = "FXLS_FAKE_CACHE"
_fake_cache = False


@contextlib.contextmanager
def dispatch_cache(enabled: bool) -> Iterator[None]:
    """Within: symbolic runs use torch's fake-tensor dispatch cache when ``enabled`` (or when
    ``FXLS_FAKE_CACHE=1``); see :func:`new_fake_mode`."""
    global _fake_cache
    saved, _fake_cache = _fake_cache, enabled
    try:
        yield
    finally:
        _fake_cache = saved


def new_fake_mode(shape_env: Any) -> Any:
    """A ``FakeTensorMode`` for one run; symbolic ones without torch's dispatch cache.

    Every capture runs in a fresh job child with new ``ShapeEnv`` objects, and the cache of
    symbolic entries lives on the ``ShapeEnv``: nearly every lookup misses, and a miss costs the
    operator about twice (the new entry is checked by building the output again from it).
    Measured in a forked child on a 2-block GPT file: 0.94 s with the cache, 0.50 s without.
    Static runs keep it: their entries are shared by every mode of the process and do hit.
    Operators repeated inside one graph are memoized by :func:`propagate` itself.
    """
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = FakeTensorMode(shape_env=shape_env, allow_non_fake_inputs=True)
    if shape_env is not None and not (_fake_cache or os.environ.get(FAKE_CACHE_ENV) == "1"):
        mode.cache_enabled = False
    return mode


def _run_fake(
    gm: torch.fx.GraphModule,
    inputs: list[ExampleInput],
    symbolic: bool,
    reuse: Copies | None = None,
    kept_runs: keptruns.KeptRuns | None = None,
) -> Propagation:
    from torch._subclasses.fake_tensor import FakeTensor
    from torch.fx.experimental.symbolic_shapes import (
        ShapeEnv,
    )

    device = _module_device(gm)
    shape_env = ShapeEnv() if symbolic else None
    mode = new_fake_mode(shape_env)
    names: dict[Any, str] = {}
    first: dict[str, torch.SymInt] = {}
    meta = torch.device("meta")

    def to_fake(t: torch.Tensor, ctx: Any = None) -> torch.Tensor:
        # fakes start from meta tensors (no memory) unless given a real tensor for a CPU
        # module; ``.to(device)`` under the mode then makes a fake of the module's device
        if t.device != device and t.device != meta:
            t = torch.empty_like(t, device=meta)
        fake: torch.Tensor
        if ctx is None:
            fake = mode.from_tensor(t, static_shapes=True)
        else:
            fake = mode.from_tensor(t, symbolic_context=ctx)
        if fake.device != device:
            with mode:
                fake = fake.to(device)
        return fake

    def constant(t: torch.Tensor) -> torch.Tensor:
        return t if t.device == device or isinstance(t, FakeTensor) else to_fake(t)

    def fake_of(dims: list[tuple[str | None, int]], dtype: torch.dtype) -> torch.Tensor:
        return named_fake(dims, dtype, to_fake, shape_env, (names, first))

    feeds: dict[str, Any] = {}
    for inp in inputs:
        if inp.kind != "tensor":
            feeds[inp.name] = map_named_tensors(inp.value, inp.inner_dims, fake_of, to_fake)
        else:
            feeds[inp.name] = fake_of(inp.dims, inp.dtype)
    run = Run(device, mode, shape_env, constant, None, kept_runs=kept_runs)
    with mode, torch.device(device), torch.no_grad():
        kind = "symbolic" if symbolic else "fake"
        return _interpret(gm, feeds, Namer(names), kind, run=run, reuse=reuse)


def named_fake(
    dims: list[tuple[str | None, int]],
    dtype: torch.dtype,
    to_fake: Callable[..., torch.Tensor],
    shape_env: Any,
    seen: tuple[dict[Any, str], dict[str, torch.SymInt] | None],
) -> torch.Tensor:
    """A fake tensor of ``dims`` made by ``to_fake(meta tensor[, symbolic context])``: a
    symbol per named dimension when ``shape_env`` is given. ``seen``: each symbol's name, and
    each name's first symbol (the same name on another tensor is one symbol, by a guard;
    ``None``: no guards)."""
    from torch.fx.experimental.symbolic_shapes import DimDynamic, StatelessSymbolicContext

    names, first = seen
    base = torch.empty([s for _, s in dims], dtype=dtype, device=_META)
    if shape_env is None or not any(n for n, _ in dims):
        return to_fake(base)
    ctx: Any = StatelessSymbolicContext(
        dynamic_sizes=[DimDynamic.DYNAMIC if n else DimDynamic.STATIC for n, _ in dims]
    )
    fake = to_fake(base, ctx)
    for (name, _), d in zip(dims, fake.shape):
        if not (name and isinstance(d, torch.SymInt) and d.node.expr.is_Symbol):
            continue
        names.setdefault(d.node.expr, name)
        if first is None:
            continue
        if name in first:
            with contextlib.suppress(Exception):
                torch._check(d == first[name])
        else:
            first[name] = d
    return fake


def _interpret(
    gm: torch.fx.GraphModule,
    feeds: dict[str, Any],
    namer: Namer,
    mode: str,
    run: Run,
    reuse: Copies | None = None,
) -> Propagation:
    """One run of ``gm`` on ``feeds``; a leaf of the user's code that assigns to its module
    while it runs (a window made as small as the image) leaves no trace for the next run."""
    interp = _Propagator(gm, feeds, run)
    try:
        return _interpret_nodes(interp, namer, mode, run, reuse)
    finally:
        interp.kept.restore()


def _interpret_nodes(
    interp: _Propagator, namer: Namer, mode: str, run: Run, reuse: Copies | None
) -> Propagation:
    gm = typing.cast(torch.fx.GraphModule, interp.module)
    shape_env = run.shape_env
    env = interp.env
    prop = Propagation(values={}, examples={}, error=None, mode=mode, namer=namer, run=run)
    fixed: set[Any] = set()
    replacements = guards = 0
    copies = reuse if reuse and interp.memo is not None else {}
    same: dict[int, bool] = {}
    # a named dimension fixed between a template call and its copy would print otherwise in
    # the copy: the ShapeEnv's replacements when each template call started
    starts: dict[str, int | None] = {
        next(iter(segment.copies.values())): None
        for _, segment in copies.values()
        if segment.copies
    }

    def fixed_count() -> int:
        return len(shape_env.replacements) + len(prop.pinned) if shape_env is not None else 0

    for node in gm.graph.nodes:
        if node.name in starts and starts[node.name] is None:
            starts[node.name] = fixed_count()
        copied = copies.get(node.name)
        if copied is not None:
            template, segment = copied
            fits = same.get(id(segment))
            if fits is None:
                first = next(iter(segment.copies.values()))
                fits = same[id(segment)] = starts.get(first) == fixed_count() and _same_inputs(
                    segment, prop.examples
                )
            if fits and template in prop.examples:
                result = prop.examples[template]
                env[node] = result
                prop.examples[node.name] = result
                prop.values[node.name] = prop.values[template]
                continue
        try:
            result = interp.run_node(node)
            env[node] = result
            prop.examples[node.name] = result
            with _METADATA_ONLY():
                prop.values[node.name] = values_of(result, namer)
        except Exception as exc:
            prop.error = shape_error(gm, node, exc, env, namer)
            break
        if shape_env is not None and len(shape_env.replacements) != replacements:
            replacements = len(shape_env.replacements)
            prop.notes.extend(_specialized(shape_env, namer, node, fixed, prop))
        if shape_env is not None and len(shape_env.guards) != guards:
            prop.notes.extend(_pinned(shape_env, shape_env.guards[guards:], namer, node, prop))
            guards = len(shape_env.guards)
    return prop


def _pinned(
    shape_env: Any, new: list[Any], namer: Namer, node: torch.fx.Node, prop: Propagation
) -> list[str]:
    """Notes for named dimensions ``node`` pinned through an expression that must equal a
    number (``example_sizes.pinned``), recorded in ``prop.fixed`` at their example sizes."""
    notes: list[str] = []
    found_pinned = example_sizes.pinned(new, namer.names)
    if not found_pinned:
        return notes
    examples = getattr(shape_env, "backed_var_to_val", None) or shape_env.var_to_val
    symbols = {name: sym for sym, name in namer.names.items()}
    for found, expr in found_pinned:
        sizes = {name: examples.get(symbols[name]) for name in found}
        if any(size is None or not getattr(size, "is_number", True) for size in sizes.values()):
            continue
        prop.pinned.append(expr)
        for name, size in sizes.items():
            if name not in prop.fixed:
                prop.fixed[name] = int(size)
                prop.fixed_at[name] = node.name
                notes.append(f"`{node.name}` only works for {name} = {size}: {_FIXED_NOTE_END}")
    return notes


def _same_inputs(segment: Any, examples: dict[str, Any]) -> bool:
    """Whether a copied call's inputs have the metadata of its template call's inputs."""
    try:
        for new, old in zip(segment.inputs, segment.template_inputs, strict=True):
            if new not in examples or old not in examples:
                return False
            with _METADATA_ONLY():
                if _signature(examples[new]) != _signature(examples[old]):
                    return False
    except (_Unkeyable, ValueError):
        return False
    return True


def _specialized(
    shape_env: Any, namer: Namer, node: torch.fx.Node, fixed: set[Any], prop: Propagation
) -> list[str]:
    """Notes for named dimensions that ``node`` fixed to their example size (recorded in
    ``prop.fixed``) or to another name."""
    notes = []
    for sym, name in namer.names.items():
        value = shape_env.replacements.get(sym)
        if sym in fixed or value is None:
            continue
        fixed.add(sym)
        if getattr(value, "is_number", False):
            prop.fixed.setdefault(name, int(value))
            prop.fixed_at.setdefault(name, node.name)
            notes.append(f"`{node.name}` only works for {name} = {value}: {_FIXED_NOTE_END}")
        elif (other := namer.expr(value)) != name:
            notes.append(f"`{node.name}` requires {name} == {other}: shapes after it use {other}")
    return notes


def warm_up() -> None:
    """Import and exercise the lazy parts (sympy, fake tensors) on a tiny meta module.

    Meant for the zygote before it forks: only meta and fake tensors are used, so no real
    kernel (and no OpenMP parallel region) ever runs.
    """
    with torch.device("meta"):
        module = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))
    gm = torch.fx.symbolic_trace(module)
    for named in (None, "B"):
        propagate(gm, [ExampleInput("input", "tensor", [(named, 2), (None, 3), (None, 4)])])
    # a view that divides a product of named sizes by one of them (``x.view(-1, T)`` of a
    # ``[B, C, T]`` input: a multiple-choice head) simplifies the quotient with
    # ``sympy.simplify``, whose first call imports ``sympy.physics`` (~0.25 s in each child)
    flat = torch.fx.symbolic_trace(_Flatten())
    propagate(flat, [ExampleInput("x", "tensor", [("B", 2), ("C", 3), ("T", 5)])])


class _Flatten(torch.nn.Module):
    """``[B, C, T]`` to ``[B*C, T]`` (:func:`warm_up`)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(-1, x.size(-1))
