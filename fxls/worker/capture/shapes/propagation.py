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
- a node whose inputs have the same metadata as an earlier node's (the repeated blocks of a
  transformer) reuses that node's output (off when the graph changes shapes in place).
"""

from __future__ import annotations

import ast
import contextlib
import logging
import math
import operator
import os
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
import torch.fx

from fxls.protocol.model import Dim, Value

__all__ = [
    "DtypeMismatch",
    "ExampleInput",
    "Propagation",
    "ShapeError",
    "propagate",
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


@dataclass
class ShapeError:
    """The first node whose shape propagation failed."""

    node: str
    message: str
    """Readable message (names modules' expected sizes, uses the user's dimension names)."""
    exception: BaseException
    original: str = ""
    """The exception's own first line (dimension symbols renamed), for reference."""


@dataclass
class Propagation:
    values: dict[str, list[Value]]
    """Node name -> outputs (tuples/lists flattened in order)."""
    examples: dict[str, Any]
    """Node name -> the example value itself (fake/meta tensor, SymInt, Python value)."""
    error: ShapeError | None
    mode: str
    """``symbolic``, ``fake`` or ``meta``."""
    notes: list[str] = field(default_factory=list)
    """Things the user should know, e.g. a named dimension fixed to its example size."""
    namer: Any = None
    """The run's ``_Namer`` (symbols -> the user's dimension names)."""


_QUIET_LOGGERS = (
    "torch._subclasses.fake_tensor",
    "torch.fx.experimental.symbolic_shapes",
    "torch.fx.experimental.recording",
    "torch.fx.interpreter",
    "torch.fx.passes.shape_prop",
    "torch.__trace",
)


@contextlib.contextmanager
def _quiet_loggers() -> Iterator[None]:
    """Silence torch's loggers that report failing ops at ERROR level."""
    saved = []
    for name in _QUIET_LOGGERS:
        logger = logging.getLogger(name)
        saved.append((logger, logger.level))
        logger.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
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
# Rendering values
# ---------------------------------------------------------------------------------------


class _Namer:
    """Renders SymInts and symbolic expressions in the user's dimension names."""

    def __init__(self, names: dict[Any, str] | None = None) -> None:
        self.names: dict[Any, str] = names or {}
        """sympy Symbol -> user's name."""
        self._by_text = {str(sym): name for sym, name in self.names.items()}
        self._cache: dict[Any, str] = {}

    def expr(self, expr: Any) -> Dim:
        """A sympy expression (or int) -> int, or readable text in user names."""
        if isinstance(expr, int):
            return expr
        if getattr(expr, "is_Integer", False) or getattr(expr, "is_number", False):
            try:
                return int(expr)
            except TypeError:
                return str(expr)
        text = self._cache.get(expr)
        if text is None:
            text = self._render(expr)
            self._cache[expr] = text
        return text

    def _render(self, expr: Any) -> str:
        mapping = {}
        for sym in expr.free_symbols:
            name = self.names.get(sym)
            if name is None:
                raw = str(sym)
                # unbacked symbols (data-dependent values, after nonzero or .item()) print as "?"
                name = "?" if raw.startswith(("u", "zuf", "zf")) else raw
            # the symbol's own class (sympy's Symbol, via torch: no import of sympy here)
            mapping[sym] = type(sym)(name, integer=True, positive=True)
        return _tidy(str(expr.xreplace(mapping)))

    def dim(self, d: Any) -> Dim:
        if isinstance(d, torch.SymInt):
            node = d.node
            if node.is_nested_int() if hasattr(node, "is_nested_int") else False:
                return str(d)
            expr = node.expr
            shape_env = getattr(node, "shape_env", None)
            if shape_env is not None:
                with contextlib.suppress(Exception):
                    expr = shape_env.replace(expr)
            return self.expr(expr)
        return int(d)

    def scalar(self, v: Any) -> str:
        if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            node = v.node
            if isinstance(v, torch.SymInt):
                return str(self.dim(v))
            try:
                return str(self.expr(node.expr))
            except Exception:
                return str(v)
        return repr(v)

    def text(self, message: str) -> str:
        """Rename raw symbols (``s26``) inside a message to the user's names."""
        if not self._by_text:
            return message
        return re.sub(r"\bs\d+\b", lambda m: self._by_text.get(m.group(0), m.group(0)), message)


def _tidy(text: str) -> str:
    """Normalize parentheses: ``(((H - 1)//4)) + 1`` -> ``(H - 1)//4 + 1``."""
    if "(" not in text:
        return text
    try:
        tidy = ast.unparse(ast.parse(text, mode="eval"))
    except (SyntaxError, ValueError):
        return text
    return re.sub(r" (\*\*|\*|//|/) ", r"\1", tidy)


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _shape(t: torch.Tensor, namer: _Namer) -> list[Dim]:
    return [namer.dim(d) for d in t.shape]


def _size_text(dims: Sequence[Dim]) -> str:
    return "[" + ", ".join(str(d) for d in dims) + "]"


def values_of(obj: Any, namer: _Namer | None = None) -> list[Value]:
    """Flatten a node's example value into protocol ``Value`` entries."""
    namer = namer or _Namer()
    out: list[Value] = []
    _flatten(obj, namer, out, 0)
    return out


def _flatten(obj: Any, namer: _Namer, out: list[Value], depth: int) -> None:
    if isinstance(obj, torch.Tensor):
        out.append(Value(kind="tensor", shape=_shape(obj, namer), dtype=_dtype_name(obj.dtype)))
    elif isinstance(obj, torch.Size):
        dims = [namer.dim(d) for d in obj]
        out.append(Value(kind="size", shape=dims, text=_size_text(dims)))
    elif isinstance(obj, (bool, torch.SymBool)):
        out.append(Value(kind="bool", text=namer.scalar(obj)))
    elif isinstance(obj, (int, torch.SymInt)):
        out.append(Value(kind="int", text=namer.scalar(obj)))
    elif isinstance(obj, (float, torch.SymFloat)):
        out.append(Value(kind="float", text=namer.scalar(obj)))
    elif obj is None:
        out.append(Value(kind="none", text="None"))
    elif isinstance(obj, torch.dtype):
        out.append(Value(kind="dtype", text=str(obj)))
    elif isinstance(obj, torch.device):
        out.append(Value(kind="device", text=str(obj)))
    elif isinstance(obj, (tuple, list)) and depth < 8:
        for item in obj:
            _flatten(item, namer, out, depth + 1)
    elif isinstance(obj, dict) and depth < 8:
        for item in obj.values():
            _flatten(item, namer, out, depth + 1)
    elif isinstance(obj, str):
        out.append(Value(kind="other", text=repr(obj)[:80]))
    else:
        out.append(Value(kind="other", text=type(obj).__name__))


# ---------------------------------------------------------------------------------------
# The interpreter
# ---------------------------------------------------------------------------------------


_MISSING = object()


class _Propagator(torch.fx.Interpreter):
    """Runs nodes one at a time on data-free examples; placeholders come from a dict."""

    def __init__(
        self,
        gm: torch.fx.GraphModule,
        feeds: dict[str, Any],
        constant: Callable[[torch.Tensor], torch.Tensor] | None = None,
    ) -> None:
        super().__init__(gm, garbage_collect_values=False)
        self.feeds = feeds
        self.constant = constant
        self.memo: dict[Any, Any] | None = {} if _memo_safe(gm) else None
        self._module_keys: dict[str, Any] = {}

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
            key = self._memo_key(n, args, kwargs)
            if key is not None:
                hit = self.memo.get(key)
                if hit is not None:
                    return hit
            result = getattr(self, n.op)(n.target, args, kwargs)
            if key is not None and _reusable(result):
                self.memo[key] = result
            return result

    def _memo_key(self, n: torch.fx.Node, args: Any, kwargs: Any) -> Any:
        if n.op == "call_module":
            target: Any = self._module_keys.get(str(n.target), _MISSING)
            if target is _MISSING:
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
        raise _NoExample(name)

    def get_attr(self, target: Any, args: Any, kwargs: Any) -> Any:
        value = super().get_attr(target, args, kwargs)
        if self.constant is not None and isinstance(value, torch.Tensor):
            # tensors created while tracing (``torch.tensor([1.0, 2.0])`` in forward) are real
            # CPU constants: give them the device and kind of everything else
            return self.constant(value)
        return value

    def call_module(self, target: Any, args: Any, kwargs: Any) -> Any:
        if not kwargs and args and isinstance(args[0], torch.Tensor):
            module = self.fetch_attr(str(target))
            _check_dtype(module, args[0])
            fast = _fast_module(module, args[0], args[1:])
            if fast is not None:
                return fast
        return super().call_module(target, args, kwargs)

    def call_function(self, target: Any, args: Any, kwargs: Any) -> Any:
        if target in _MATMULS and len(args) == 2 and not kwargs:
            fast = _fast_matmul(args[0], args[1])
            if fast is not None:
                return fast
        if target is _SDPA:
            fast = _fast_sdpa(tuple(args), dict(kwargs))
            if fast is not None:
                return fast
        return super().call_function(target, args, kwargs)

    def call_method(self, target: Any, args: Any, kwargs: Any) -> Any:
        if target == "matmul" and len(args) == 2 and not kwargs:
            fast = _fast_matmul(args[0], args[1])
            if fast is not None:
                return fast
        return super().call_method(target, args, kwargs)


# Reuse across repeated layers -----------------------------------------------------------

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
            name = node.target if isinstance(node.target, str) else _target_name(node)
            if name in _METADATA_MUTATORS:
                return False
    return True


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


# Shortcuts: the output of the most frequent (and, symbolically, most expensive) operations is
# made directly with ``new_empty`` when its shape is certain; anything unusual (a mismatch, a
# dtype difference, broadcasting) runs the real operator, which also produces its error.

_MATMULS = {operator.matmul, torch.matmul}
_SDPA = torch.nn.functional.scaled_dot_product_attention


def _same(a: Any, b: Any) -> bool:
    """Structural equality of two sizes (ints or SymInts) that never adds a guard."""
    if isinstance(a, torch.SymInt):
        a = a.node.expr
    if isinstance(b, torch.SymInt):
        b = b.node.expr
    return bool(a == b)


def _unify(a: Any, b: Any) -> bool:
    """``_same``, or a symbolic size that equals the other at its example value: record the
    equality (a guard, as the real kernel would) and say yes."""
    if _same(a, b):
        return True
    if not isinstance(a, torch.SymInt) and not isinstance(b, torch.SymInt):
        return False
    try:
        torch._check(a == b)  # type: ignore[no-untyped-call]
    except Exception:
        return False
    return True


def _fast_matmul(a: Any, b: Any) -> torch.Tensor | None:
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        return None
    if a.dtype != b.dtype or a.device != b.device or a.dim() < 2 or b.dim() < 2:
        return None
    sa, sb = a.shape, b.shape
    if not _same(sa[-1], sb[-2]):
        return None
    if b.dim() == 2 or (a.dim() == b.dim() and all(_same(x, y) for x, y in zip(sa[:-2], sb[:-2]))):
        shape = [*sa[:-1], sb[-1]]
    else:
        return None
    return a.new_empty(shape)


_SDPA_PARAMS = (
    "query",
    "key",
    "value",
    "attn_mask",
    "dropout_p",
    "is_causal",
    "scale",
    "enable_gqa",
)
_SDPA_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _fast_sdpa(args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.Tensor | None:
    """``F.scaled_dot_product_attention`` without a mask, dropout or grouped heads, where the
    answer is certain: the output is laid out like the query (what torch's CPU kernel and its
    fake implementation give); fake tensors otherwise run the attention's decomposition, the
    most expensive operator of a transformer block. None leaves it to the operator."""
    if len(args) > len(_SDPA_PARAMS) or not set(kwargs) <= set(_SDPA_PARAMS):
        return None
    bound = dict(zip(_SDPA_PARAMS, args))
    if set(bound) & set(kwargs):
        return None
    bound.update(kwargs)
    q, k, v = bound.get("query"), bound.get("key"), bound.get("value")
    if not (
        isinstance(q, torch.Tensor) and isinstance(k, torch.Tensor) and isinstance(v, torch.Tensor)
    ):
        return None
    dropout, causal, scale = (
        bound.get("dropout_p", 0.0),
        bound.get("is_causal", False),
        bound.get("scale"),
    )
    if bound.get("attn_mask") is not None or bound.get("enable_gqa", False) is not False:
        return None
    if type(dropout) not in (int, float) or dropout != 0 or type(causal) is not bool:
        return None
    if scale is not None and type(scale) not in (int, float):
        return None
    if not (q.dtype == k.dtype == v.dtype and q.dtype in _SDPA_DTYPES):
        return None
    if not (q.device == k.device == v.device and q.dim() == k.dim() == v.dim() >= 2):
        return None
    if not (all(_same(a, b) for a, b in zip(q.shape[:-2], k.shape[:-2]))
            and all(_same(a, b) for a, b in zip(k.shape[:-2], v.shape[:-2]))):  # fmt: skip
        return None
    if not (
        _same(q.shape[-1], k.shape[-1])
        and _same(q.shape[-1], v.shape[-1])
        and _same(k.shape[-2], v.shape[-2])
    ):
        return None
    return torch.empty_like(q)


def _fast_module(module: Any, x: torch.Tensor, rest: tuple[Any, ...]) -> Any:
    kind = type(module)
    if kind in (torch.nn.LSTM, torch.nn.GRU, torch.nn.RNN):
        return _fast_rnn(module, x, rest[0] if len(rest) == 1 else None) if len(rest) <= 1 else None
    if rest:
        return None
    if kind is torch.nn.Linear:
        weight = module.weight
        bias = module.bias
        if (
            x.dim() >= 1
            and x.dtype == weight.dtype
            and (bias is None or bias.dtype == weight.dtype)
            and x.device == weight.device
            and _same(x.shape[-1], module.in_features)
        ):
            return x.new_empty([*x.shape[:-1], module.out_features])
    elif kind in _BATCHNORMS:
        weight = module.weight
        if (x.dim() == _BATCHNORMS[kind] or (kind is torch.nn.BatchNorm1d and x.dim() == 2)) and (
            (weight is None or (x.dtype == weight.dtype and x.device == weight.device))
            and _same(x.shape[1], module.num_features)
            and not (module.training and _one_value_per_channel(x))
        ):
            return torch.empty_like(x)
    elif kind is torch.nn.LayerNorm:
        norm = module.normalized_shape
        weight = module.weight
        if (
            0 < len(norm) <= x.dim()
            and (weight is None or (x.dtype == weight.dtype and x.device == weight.device))
            and all(_same(d, n) for d, n in zip(x.shape[-len(norm) :], norm))
        ):
            return x.new_empty(x.shape)
    return None


class DtypeMismatch(RuntimeError):
    """A module's weights and its input have different floating dtypes (eager rejects it)."""


def _check_dtype(module: torch.nn.Module, x: torch.Tensor) -> None:
    """Meta kernels accept ``Linear(float32)(x.half())``; eager CPU kernels do not."""
    if not isinstance(module, (torch.nn.Linear, torch.nn.modules.conv._ConvNd)):
        return
    weight = module.weight
    if x.dtype != weight.dtype and x.dtype.is_floating_point and weight.dtype.is_floating_point:
        raise DtypeMismatch(
            f"input type ({_dtype_name(x.dtype)}) and weight type "
            f"({_dtype_name(weight.dtype)}) should be the same"
        )


_BATCHNORMS = {torch.nn.BatchNorm1d: 3, torch.nn.BatchNorm2d: 4, torch.nn.BatchNorm3d: 5}


def _one_value_per_channel(x: torch.Tensor) -> bool:
    """Training-mode batch norm rejects inputs with one value per channel; let it say so."""
    sizes = [x.shape[0], *x.shape[2:]]
    return all(isinstance(d, int) for d in sizes) and math.prod(sizes) == 1


def _fast_rnn(module: Any, x: torch.Tensor, hx: Any) -> Any:
    """LSTM/GRU/RNN outputs; their fake kernels fix symbolic sizes to the example's values.

    ``hx`` (None, a state tensor, or an LSTM's ``(h, c)``) must have exactly the expected
    shapes, otherwise the real kernel runs and reports the mismatch.
    """
    weight = module.weight_ih_l0
    if x.dim() != 3 or x.dtype != weight.dtype or not _same(x.shape[-1], module.input_size):
        return None
    if module.batch_first:
        batch, time = x.shape[0], x.shape[1]
    else:
        time, batch = x.shape[0], x.shape[1]
    dirs = 2 if module.bidirectional else 1
    proj = getattr(module, "proj_size", 0)
    out_size = proj if proj > 0 else module.hidden_size
    layers = dirs * module.num_layers
    is_lstm = isinstance(module, torch.nn.LSTM)
    if hx is not None:
        states = tuple(hx) if is_lstm and isinstance(hx, (tuple, list)) else (hx,)
        wanted = [[layers, batch, out_size], [layers, batch, module.hidden_size]]
        if len(states) != (2 if is_lstm else 1):
            return None
        for state, shape in zip(states, wanted):
            if not (
                isinstance(state, torch.Tensor)
                and state.dtype == x.dtype
                and state.dim() == 3
                and all(_unify(a, b) for a, b in zip(state.shape, shape))
            ):
                return None
    out = x.new_empty(
        [batch, time, dirs * out_size] if module.batch_first else [time, batch, dirs * out_size]
    )
    h = x.new_empty([layers, batch, out_size])
    if is_lstm:
        return out, (h, x.new_empty([layers, batch, module.hidden_size]))
    return out, h


class _NoExample(Exception):
    def __init__(self, name: str) -> None:
        super().__init__(f"no example value for input `{name}`")
        self.name = name


def _module_device(gm: torch.nn.Module) -> torch.device:
    for param in gm.parameters():
        return param.device
    for buffer in gm.buffers():
        return buffer.device
    return torch.device("meta")


def map_tensors(obj: Any, fn: Any, depth: int = 0) -> Any:
    """Apply ``fn`` to every tensor inside nested tuples/lists/dicts."""
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
) -> Propagation:
    """Shapes and dtypes of every node of ``gm``, computed without real memory.

    Args:
        gm: a traced module, built on the meta device (or on the CPU).
        inputs: one example per ``forward`` argument; named dims stay symbolic.
        symbolic: keep named dims symbolic; False forces the static path.
        reuse: nodes copied from a template call of an identical sub-block
            (:mod:`fxls.worker.capture.trace.reuse`): when the copied call's inputs have the same
            metadata as the template's, its nodes take the template nodes' results.

    Returns:
        A :class:`Propagation`; ``error`` names the first failing node (values before it are
        kept).

    Example:
        >>> p = propagate(gm, [ExampleInput("x", "tensor", [("B", 2), (None, 3)])])
        >>> p.values["x"][0].shape
        ['B', 3]
    """
    device = _module_device(gm)
    with _quiet_loggers(), data_free_torch():
        if not (symbolic and _is_named(inputs)):
            return _run_static(gm, inputs, device, reuse)
        result = _run_fake(gm, inputs, device, symbolic=True, reuse=reuse)
        if result.error is None:
            return result
        # some kernels only take concrete sizes: when the static run gets further, use it
        static = _run_static(gm, inputs, device, reuse)
        if _further(gm, static, result):
            static.notes.insert(
                0,
                f"`{result.error.node}` does not support symbolic sizes "
                f"({result.error.original}); shapes are shown for the example sizes",
            )
            return static
        return result


def _run_static(
    gm: torch.fx.GraphModule,
    inputs: list[ExampleInput],
    device: torch.device,
    reuse: Copies | None = None,
) -> Propagation:
    if device.type != "meta":
        return _run_fake(gm, inputs, device, symbolic=False, reuse=reuse)
    result = _run_meta(gm, inputs, reuse)
    if result.error is not None and _missing_meta_kernel(result.error.exception):
        fake = _run_fake(gm, inputs, device, symbolic=False, reuse=reuse)
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
    gm: torch.fx.GraphModule, inputs: list[ExampleInput], reuse: Copies | None = None
) -> Propagation:
    feeds = meta_feeds(inputs)
    with torch.device(_META), torch.no_grad():
        return _interpret(gm, feeds, _Namer(), "meta", constant=to_meta, reuse=reuse)


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
    device: torch.device,
    symbolic: bool,
    reuse: Copies | None = None,
) -> Propagation:
    from torch._subclasses.fake_tensor import FakeTensor
    from torch.fx.experimental.symbolic_shapes import (
        DimDynamic,
        ShapeEnv,
        StatelessSymbolicContext,
    )

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

    feeds: dict[str, Any] = {}
    for inp in inputs:
        if inp.kind != "tensor":
            feeds[inp.name] = map_tensors(inp.value, to_fake)
            continue
        base = torch.empty([s for _, s in inp.dims], dtype=inp.dtype, device=meta)
        if shape_env is None or not any(n for n, _ in inp.dims):
            feeds[inp.name] = to_fake(base)
            continue
        ctx: Any = StatelessSymbolicContext(
            dynamic_sizes=[DimDynamic.DYNAMIC if n else DimDynamic.STATIC for n, _ in inp.dims]
        )
        fake = to_fake(base, ctx)
        feeds[inp.name] = fake
        for (name, _), d in zip(inp.dims, fake.shape):
            if not (name and isinstance(d, torch.SymInt) and d.node.expr.is_Symbol):
                continue
            names.setdefault(d.node.expr, name)
            if name in first:
                # the same name on another input: one symbol (a guard records the equality)
                with contextlib.suppress(Exception):
                    torch._check(d == first[name])
            else:
                first[name] = d
    with mode, torch.device(device), torch.no_grad():
        return _interpret(
            gm, feeds, _Namer(names), "symbolic" if symbolic else "fake", shape_env, constant,
            reuse,
        )  # fmt: skip


def _interpret(
    gm: torch.fx.GraphModule,
    feeds: dict[str, Any],
    namer: _Namer,
    mode: str,
    shape_env: Any = None,
    constant: Callable[[torch.Tensor], torch.Tensor] | None = None,
    reuse: Copies | None = None,
) -> Propagation:
    interp = _Propagator(gm, feeds, constant)
    env = interp.env
    prop = Propagation(values={}, examples={}, error=None, mode=mode, namer=namer)
    fixed: set[Any] = set()
    replacements = 0
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
        return len(shape_env.replacements) if shape_env is not None else 0

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
            prop.values[node.name] = values_of(result, namer)
        except Exception as exc:
            prop.error = _shape_error(gm, node, exc, env, namer)
            break
        if shape_env is not None and len(shape_env.replacements) != replacements:
            replacements = len(shape_env.replacements)
            prop.notes.extend(_specialized(shape_env, namer, node, fixed))
    return prop


def _same_inputs(segment: Any, examples: dict[str, Any]) -> bool:
    """Whether a copied call's inputs have the metadata of its template call's inputs."""
    try:
        for new, old in zip(segment.inputs, segment.template_inputs, strict=True):
            if new not in examples or old not in examples:
                return False
            if _signature(examples[new]) != _signature(examples[old]):
                return False
    except (_Unkeyable, ValueError):
        return False
    return True


def _specialized(shape_env: Any, namer: _Namer, node: torch.fx.Node, fixed: set[Any]) -> list[str]:
    """Notes for named dimensions that ``node`` fixed to their example size."""
    notes = []
    for sym, name in namer.names.items():
        value = shape_env.replacements.get(sym)
        if sym in fixed or value is None:
            continue
        fixed.add(sym)
        if getattr(value, "is_number", False):
            notes.append(
                f"`{node.name}` only works for {name} = {value}: shapes after it use that size "
                "instead of the name"
            )
        elif (other := namer.expr(value)) != name:
            notes.append(f"`{node.name}` requires {name} == {other}: shapes after it use {other}")
    return notes


# ---------------------------------------------------------------------------------------
# Readable errors
# ---------------------------------------------------------------------------------------

_REDUCTION = re.compile(r"must have same reduction dim, but got \[([^\]]*)\] X \[([^\]]*)\]")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    line = text.splitlines()[0].strip()
    # C++ errors start with the source location of torch's build: drop it
    return re.sub(r"^\S+\.(?:cpp|h|hpp|cu):\d+: ", "", line)


def _describe(obj: Any, namer: _Namer) -> str:
    if isinstance(obj, torch.Tensor):
        return f"{_size_text(_shape(obj, namer))} {_dtype_name(obj.dtype)}"
    return namer.scalar(obj) if isinstance(obj, (int, float, bool)) else type(obj).__name__


def _arg_nodes(node: torch.fx.Node) -> list[torch.fx.Node]:
    found: list[torch.fx.Node] = []
    torch.fx.node.map_arg((node.args, node.kwargs), found.append)
    return found


def _target_name(node: torch.fx.Node) -> str:
    target = node.target
    if isinstance(target, str):
        return target
    return getattr(target, "__name__", str(target))


def _balanced(text: str) -> str:
    """``text`` without a closing parenthesis nothing opened at its end (torch's symbolic
    broadcast error ends "... at non-singleton dimension 1)")."""
    if text.endswith(")") and text.count(")") > text.count("("):
        return text[:-1]
    return text


def _shape_error(
    gm: torch.fx.GraphModule,
    node: torch.fx.Node,
    exc: BaseException,
    env: dict[torch.fx.Node, Any],
    namer: _Namer,
) -> ShapeError:
    original = _balanced(namer.text(_first_line(exc)))
    try:
        message = _explain(gm, node, exc, env, namer, original)
    except Exception:
        message = None
    if message is None:
        message = original
        inputs = [
            f"`{arg.name}` {_describe(env[arg], namer)}"
            for arg in _arg_nodes(node)
            if isinstance(env.get(arg, _MISSING), torch.Tensor)
        ]
        if inputs:
            message += f" (inputs: {', '.join(inputs[:4])})"
    return ShapeError(node=node.name, message=message, exception=exc, original=original)


def _explain(
    gm: torch.fx.GraphModule,
    node: torch.fx.Node,
    exc: BaseException,
    env: dict[torch.fx.Node, Any],
    namer: _Namer,
    original: str,
) -> str | None:
    """A readable message for the common failures; None when there is nothing better."""
    if isinstance(exc, _NoExample):
        return str(exc)
    data_dependent = _data_dependent(node, exc, env)
    if data_dependent:
        return data_dependent
    args = [env.get(a) if isinstance(a, torch.fx.Node) else a for a in node.args]
    first = args[0] if args else None
    if node.op == "call_module" and isinstance(first, torch.Tensor):
        module = gm.get_submodule(str(node.target))
        explained = _explain_module(module, node, first, namer, exc)
        if explained:
            return explained
    if node.op == "call_function" and node.target is torch.nn.functional.linear:
        weight = args[1] if len(args) > 1 else env.get(node.kwargs.get("weight"))  # type: ignore[arg-type]
        if isinstance(first, torch.Tensor) and isinstance(weight, torch.Tensor):
            w = _shape(weight, namer)
            x = _shape(first, namer)
            if len(w) == 2 and x and str(x[-1]) != str(w[1]):
                return (
                    f"input is {_size_text(x)} but weight is {_size_text(w)} "
                    f"(out_features × in_features): last dimension {x[-1]} differs from "
                    f"in_features {w[1]}"
                )
    match = _REDUCTION.search(original)
    if match:
        a, b = match.group(1), match.group(2)
        inner_a = a.split(",")[-1].strip()
        inner_b = b.split(",")[0].strip()
        return (
            f"mat1 is [{a}] but mat2 is [{b}]: inner dimensions {inner_a} and {inner_b} differ "
            f"({_target_name(node)})"
        )
    return None


def _data_dependent(
    node: torch.fx.Node, exc: BaseException, env: dict[torch.fx.Node, Any]
) -> str | None:
    from torch._subclasses.fake_tensor import (
        DataDependentOutputException,
        DynamicOutputShapeException,
    )
    from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

    op = _target_name(node)
    text = str(exc)
    if isinstance(exc, (DataDependentOutputException,)) or ("item()" in text and "meta" in text):
        return (
            f"`{op}` reads a tensor's values, which do not exist during shape propagation "
            "(data-dependent result)"
        )
    if isinstance(exc, DynamicOutputShapeException) or (
        isinstance(exc, NotImplementedError) and op in {"nonzero", "unique", "masked_select"}
    ):
        return (
            f"`{op}` has an output shape that depends on tensor values, which do not exist "
            "during shape propagation"
        )
    for arg in _arg_nodes(node):
        example = env.get(arg)
        if isinstance(example, (torch.SymInt, torch.SymFloat, torch.SymBool)) and any(
            str(sym).startswith(("u", "zuf", "zf")) for sym in example.node.expr.free_symbols
        ):
            return (
                f"`{op}` uses `{arg.name}`, a value read from a tensor's data, which is unknown "
                "during shape propagation"
            )
    if isinstance(exc, GuardOnDataDependentSymNode):
        return (
            f"`{op}` needs a size that depends on tensor values (for example after "
            "`nonzero` or `.item()`), which is unknown during shape propagation"
        )
    return None


def _explain_module(
    module: Any, node: torch.fx.Node, x: torch.Tensor, namer: _Namer, exc: BaseException
) -> str | None:
    """Name a module's expected input size against what it got."""
    nn = torch.nn
    shape = _shape(x, namer)
    got = f"{_size_text(shape)}"
    kind = type(module).__name__
    arg = node.args[0]
    src = f"`{arg.name}`" if isinstance(arg, torch.fx.Node) else "its input"
    if isinstance(exc, DtypeMismatch):
        return (
            f"`{node.target}` is {kind} with {_dtype_name(module.weight.dtype)} weights but its "
            f"input {src} is {_dtype_name(x.dtype)} {got}: convert one of them "
            f"(`.to({module.weight.dtype})` on the input, or the module's dtype)"
        )
    if isinstance(module, nn.Linear):
        if shape and str(shape[-1]) != str(module.in_features):
            return (
                f"`{node.target}` is {kind}(in_features={module.in_features}, "
                f"out_features={module.out_features}) but its input {src} is {got}: last "
                f"dimension {shape[-1]} differs from in_features {module.in_features}"
            )
    elif isinstance(module, nn.modules.conv._ConvNd):
        spatial = len(module.kernel_size)
        if len(shape) in (spatial + 1, spatial + 2):
            channels = shape[-spatial - 1]
            if str(channels) != str(module.in_channels):
                return (
                    f"`{node.target}` is {kind}(in_channels={module.in_channels}, "
                    f"out_channels={module.out_channels}) but its input {src} is {got}: it has "
                    f"{channels} channels, not {module.in_channels}"
                )
        else:
            return (
                f"`{node.target}` is {kind} and expects a {spatial + 2}-d (N, C, ...) or "
                f"{spatial + 1}-d input, but its input {src} is {got} ({len(shape)}-d)"
            )
    elif isinstance(module, (nn.Embedding, nn.EmbeddingBag)):
        if x.dtype.is_floating_point or x.dtype.is_complex or x.dtype == torch.bool:
            return (
                f"`{node.target}` is {kind}({module.num_embeddings}, {module.embedding_dim}) "
                f"and needs integer indices (int64), but its input {src} is "
                f"{_dtype_name(x.dtype)} {got}"
            )
    elif isinstance(module, nn.modules.batchnorm._NormBase):
        if len(shape) >= 2 and str(shape[1]) != str(module.num_features):
            return (
                f"`{node.target}` is {kind}({module.num_features}) but its input {src} is "
                f"{got}: it has {shape[1]} channels, not {module.num_features}"
            )
    elif isinstance(module, nn.LayerNorm):
        norm = list(module.normalized_shape)
        tail = shape[-len(norm) :] if norm else []
        if [str(d) for d in tail] != [str(d) for d in norm]:
            return (
                f"`{node.target}` is LayerNorm({_size_text(norm)}) but its input {src} is "
                f"{got}: its last dimensions {_size_text(tail)} differ from {_size_text(norm)}"
            )
    elif isinstance(module, nn.GroupNorm):
        if len(shape) >= 2 and str(shape[1]) != str(module.num_channels):
            return (
                f"`{node.target}` is GroupNorm({module.num_groups}, {module.num_channels}) but "
                f"its input {src} is {got}: it has {shape[1]} channels"
            )
    elif isinstance(module, nn.RNNBase) and shape and str(shape[-1]) != str(module.input_size):
        return (
            f"`{node.target}` is {kind}(input_size={module.input_size}, "
            f"hidden_size={module.hidden_size}) but its input {src} is {got}: last dimension "
            f"{shape[-1]} differs from input_size {module.input_size}"
        )
    return None


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
