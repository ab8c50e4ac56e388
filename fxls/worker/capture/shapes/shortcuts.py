"""Shortcuts: the output of the most frequent (and, symbolically, most expensive) operations
is made directly with ``new_empty`` when its shape is certain; anything unusual (a mismatch, a
dtype difference, broadcasting) runs the real operator, which also produces its error."""

from __future__ import annotations

import contextlib
import math
import operator
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import torch
import torch.fx
from torch.overrides import TorchFunctionMode

from fxls.worker.capture.shapes.values import dtype_name

# Shortcuts: the output of the most frequent (and, symbolically, most expensive) operations is
# made directly with ``new_empty`` when its shape is certain; anything unusual (a mismatch, a
# dtype difference, broadcasting) runs the real operator, which also produces its error.

MATMULS = {operator.matmul, torch.matmul}
SDPA = torch.nn.functional.scaled_dot_product_attention


def same_size(a: Any, b: Any) -> bool:
    """Structural equality of two sizes (ints or SymInts) that never adds a guard."""
    if isinstance(a, torch.SymInt):
        a = a.node.expr
    if isinstance(b, torch.SymInt):
        b = b.node.expr
    return bool(a == b)


def _unify(a: Any, b: Any) -> bool:
    """``same_size``, or a symbolic size that equals the other at its example value: record the
    equality (a guard, as the real kernel would) and say yes."""
    if same_size(a, b):
        return True
    if not isinstance(a, torch.SymInt) and not isinstance(b, torch.SymInt):
        return False
    try:
        torch._check(a == b)  # type: ignore[no-untyped-call]
    except Exception:
        return False
    return True


def fast_matmul(a: Any, b: Any) -> torch.Tensor | None:
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        return None
    if a.dtype != b.dtype or a.device != b.device or a.dim() < 2 or b.dim() < 2:
        return None
    sa, sb = a.shape, b.shape
    if not same_size(sa[-1], sb[-2]):
        return None
    if b.dim() == 2 or (
        a.dim() == b.dim() and all(same_size(x, y) for x, y in zip(sa[:-2], sb[:-2]))
    ):
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


def fast_sdpa(args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.Tensor | None:
    """``F.scaled_dot_product_attention`` without dropout or grouped heads, with a mask that
    broadcasts to the scores or none, where the answer is certain: the output is laid out like
    the query (what torch's CPU kernel and its fake implementation give); fake tensors
    otherwise run the attention's decomposition, the most expensive operator of a transformer
    block. None leaves it to the operator."""
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
    if bound.get("enable_gqa", False) is not False:
        return None
    if type(dropout) not in (int, float) or dropout != 0 or type(causal) is not bool:
        return None
    if scale is not None and type(scale) not in (int, float):
        return None
    if not _attention_fits(q, k, v):
        return None
    mask = bound.get("attn_mask")
    if mask is not None and not _mask_fits(mask, q, k, causal):
        return None
    return torch.empty_like(q)


def _attention_fits(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> bool:
    """Query, key and value of one dtype and device, with the same batch sizes, the key's
    length the value's and the query's features the key's and the value's."""
    if not (q.dtype == k.dtype == v.dtype and q.dtype in _SDPA_DTYPES):
        return False
    if not (q.device == k.device == v.device and q.dim() == k.dim() == v.dim() >= 2):
        return False
    if not (all(same_size(a, b) for a, b in zip(q.shape[:-2], k.shape[:-2]))
            and all(same_size(a, b) for a, b in zip(k.shape[:-2], v.shape[:-2]))):  # fmt: skip
        return False
    return bool(
        same_size(q.shape[-1], k.shape[-1])
        and same_size(q.shape[-1], v.shape[-1])
        and same_size(k.shape[-2], v.shape[-2])
    )


def _mask_fits(mask: Any, q: torch.Tensor, k: torch.Tensor, causal: bool) -> bool:
    """An attention mask the kernel takes as it is, leaving the output as without one: boolean
    or of the query's dtype, on its device, each size 1 or the scores' (``[..., L, S]``); not
    beside ``is_causal`` (left to torch)."""
    if causal or not isinstance(mask, torch.Tensor) or mask.device != q.device:
        return False
    if mask.dtype is not torch.bool and mask.dtype != q.dtype:
        return False
    scores = [*q.shape[:-1], k.shape[-2]]
    if mask.dim() > len(scores):
        return False
    return all(
        (type(m) is int and m == 1) or same_size(m, size)
        for m, size in zip(reversed(mask.shape), reversed(scores))
    )


def fast_module(module: Any, x: torch.Tensor, rest: tuple[Any, ...]) -> Any:
    kind = type(module)
    if kind in (torch.nn.LSTM, torch.nn.GRU, torch.nn.RNN):
        return fast_rnn(module, x, rest[0] if len(rest) == 1 else None) if len(rest) <= 1 else None
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
            and same_size(x.shape[-1], module.in_features)
        ):
            return x.new_empty([*x.shape[:-1], module.out_features])
    elif kind in _BATCHNORMS:
        weight = module.weight
        if (x.dim() == _BATCHNORMS[kind] or (kind is torch.nn.BatchNorm1d and x.dim() == 2)) and (
            (weight is None or (x.dtype == weight.dtype and x.device == weight.device))
            and same_size(x.shape[1], module.num_features)
            and not (module.training and _one_value_per_channel(x))
        ):
            return torch.empty_like(x)
    elif (rule := _layer_rule(kind)) is not None:
        return rule(module, x)
    elif kind is torch.nn.LayerNorm:
        norm = module.normalized_shape
        weight = module.weight
        if (
            0 < len(norm) <= x.dim()
            and (weight is None or (x.dtype == weight.dtype and x.device == weight.device))
            and all(same_size(d, n) for d, n in zip(x.shape[-len(norm) :], norm))
        ):
            return x.new_empty(x.shape)
    return None


_CONVS = (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d)


def _embedding(module: Any, x: torch.Tensor) -> torch.Tensor | None:
    """An ``Embedding`` looked up with integer indices: ``[*indices, embedding_dim]``,
    contiguous, of the weight's dtype (what ``F.embedding`` gives). A ``max_norm`` (which
    renormalizes the weight in place) or a sparse layout runs the operator."""
    weight = module.weight
    if module.max_norm is not None or weight.dim() != 2 or x.layout != torch.strided:
        return None
    if x.dtype not in (torch.int64, torch.int32) or x.device != weight.device:
        return None
    return x.new_empty([*x.shape, weight.shape[1]], dtype=weight.dtype)


def fast_conv(module: Any, x: torch.Tensor) -> torch.Tensor | None:
    """A ``Conv1d``/``Conv2d``/``Conv3d`` layer's output where the answer is certain: a batched
    input laid out row-major (contiguous) whose channels and spatial sizes are numbers (the
    batch may be a symbol: no check of the kernel reads it, so no guard is left out), zero
    padding given as numbers, a contiguous weight of the input's dtype and device. The output
    is ``[batch, out_channels, *(size + 2*padding - dilation*(kernel - 1) - 1) // stride + 1]``,
    contiguous: what torch's meta kernel gives on meta tensors, and its fake implementation
    for inputs and weights that are not channels-last (it picks the kernel's memory format).
    Anything the kernel would reject (an output or padded input smaller than the kernel, a
    channel mismatch) runs the operator, which reports it. None leaves it to the operator."""
    weight = module.weight
    if not _conv_layout(module, x):
        return None
    stride, padding, dilation = module.stride, module.padding, module.dilation
    sizes = list(x.shape[1:])
    if not all(type(n) is int for n in (*sizes, *stride, *padding, *dilation, module.groups)):
        return None
    if not (_row_major(x, sizes) and _row_major(weight, list(weight.shape[1:]))):
        return None
    groups, out_channels, batch = module.groups, weight.shape[0], x.shape[0]
    if groups < 1 or out_channels % groups or sizes[0] < 1 or weight.shape[1] * groups != sizes[0]:
        return None
    if type(batch) is int and batch < 1:
        return None
    out = []
    for n, k, s, p, d in zip(sizes[1:], weight.shape[2:], stride, padding, dilation):
        if s < 1 or d < 1 or p < 0 or n + 2 * p < d * (k - 1) + 1:
            return None
        out.append((n + 2 * p - d * (k - 1) - 1) // s + 1)
    if not all(o > 0 for o in out):
        return None
    return x.new_empty([batch, out_channels, *out])


def _conv_layout(module: Any, x: torch.Tensor) -> bool:
    """A batched input of the weight's dtype and device, zero padding given as numbers, one
    stride, padding and dilation per spatial dimension, a bias of one value per channel."""
    weight, bias = module.weight, module.bias
    spatial = weight.dim() - 2
    if x.dim() != weight.dim() or module.padding_mode != "zeros" or spatial < 1:
        return False
    if x.dtype != weight.dtype or x.device != weight.device or x.layout != torch.strided:
        return False
    if bias is not None and (bias.dtype != weight.dtype or tuple(bias.shape) != (weight.shape[0],)):
        return False
    padding = module.padding
    return not isinstance(padding, str) and (
        len(module.stride) == len(padding) == len(module.dilation) == spatial
    )


def _row_major(t: torch.Tensor, sizes: list[Any]) -> bool:
    """Whether ``t``'s strides are the row-major ones of its sizes, the first one's after
    ``sizes`` (numbers: the sizes after the first dimension); its offset 0."""
    expected = 1
    strides = t.stride()
    offset = t.storage_offset()
    if not all(type(n) is int for n in strides) or type(offset) is not int or offset != 0:
        return False
    for size, stride in zip(reversed(sizes), reversed(strides[1:]), strict=True):
        if stride != expected:
            return False
        expected *= size
    return strides[0] == expected


class DtypeMismatch(RuntimeError):
    """A module's weights and its input have different floating dtypes (eager rejects it)."""


def check_dtype(module: torch.nn.Module, x: torch.Tensor) -> None:
    """Meta kernels accept ``Linear(float32)(x.half())``; eager CPU kernels do not."""
    if not isinstance(module, (torch.nn.Linear, torch.nn.modules.conv._ConvNd)):
        return
    weight = module.weight
    if x.dtype != weight.dtype and x.dtype.is_floating_point and weight.dtype.is_floating_point:
        raise DtypeMismatch(
            f"input type ({dtype_name(x.dtype)}) and weight type "
            f"({dtype_name(weight.dtype)}) should be the same"
        )


_BATCHNORMS = {torch.nn.BatchNorm1d: 3, torch.nn.BatchNorm2d: 4, torch.nn.BatchNorm3d: 5}


def _one_value_per_channel(x: torch.Tensor) -> bool:
    """Training-mode batch norm rejects inputs with one value per channel; let it say so."""
    sizes = [x.shape[0], *x.shape[2:]]
    return all(isinstance(d, int) for d in sizes) and math.prod(sizes) == 1


def fast_rnn(module: Any, x: torch.Tensor, hx: Any) -> Any:
    """LSTM/GRU/RNN outputs; their fake kernels fix symbolic sizes to the example's values.

    ``hx`` (None, a state tensor, or an LSTM's ``(h, c)``) must have exactly the expected
    shapes, otherwise the real kernel runs and reports the mismatch.
    """
    weight = module.weight_ih_l0
    if x.dim() != 3 or x.dtype != weight.dtype or not same_size(x.shape[-1], module.input_size):
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


def _layer_rule(kind: type) -> Any:
    """The shortcut of a layer of one input that is a function of the layer and the input
    (looked up when called: tests wrap ``fast_conv``), or None."""
    if kind in _CONVS:
        return fast_conv
    return _embedding if kind is torch.nn.Embedding else None


# -- the shortcuts inside a run of Python code (a fake run, a kept submodule) ----------------


def is_builtin_leaf(module: torch.nn.Module, leaf_classes: Iterable[str] = ()) -> bool:
    """Whether a submodule call is recorded as one ``call_module`` node (FX's leaf rule)."""
    cls = type(module)
    if cls.__name__ in set(leaf_classes):
        return True
    name = cls.__module__ or ""
    builtin = name.startswith(("torch.nn", "torch.ao.nn"))
    return builtin and not isinstance(module, torch.nn.Sequential)


def _shortcut(fn: Callable[..., Any], *args: Any) -> Any:
    """The output of a shape shortcut; None runs the real op. Its reads of tensors' metadata
    skip the torch function modes of the run (what a device mode does to them is nothing)."""
    try:
        with torch._C.DisableTorchFunction():
            return fn(*args)
    except Exception:  # the real operator then runs and reports its own error
        return None


_MATMUL_FUNCTIONS = {torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__}
"""Shapes of these come from :func:`fast_matmul` when it is certain (much faster)."""


def function_shortcut(func: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
    """The output of a matrix product or ``scaled_dot_product_attention`` from its shape
    shortcut; None runs the real op."""
    if func in _MATMUL_FUNCTIONS and len(args) == 2 and not kwargs:
        return _shortcut(fast_matmul, args[0], args[1])
    if func is SDPA:
        return _shortcut(fast_sdpa, tuple(args), dict(kwargs))
    return None


def module_shortcut(module: torch.nn.Module, args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
    """The output of a torch layer called with one tensor, from its shape shortcut; None runs
    the layer."""
    if kwargs or len(args) != 1 or not isinstance(args[0], torch.Tensor):
        return None
    return _shortcut(fast_module, module, args[0], ())


class Shortcuts(TorchFunctionMode):
    """Matrix products and ``scaled_dot_product_attention`` take their output from the shape
    shortcuts where those are certain, as graph nodes do in :mod:`propagation` (on meta and
    fake tensors attention otherwise runs torch's Python decomposition)."""

    def __torch_function__(
        self,
        func: Any,
        types: Any,
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        out = function_shortcut(func, args, kwargs)
        return func(*args, **kwargs) if out is None else out


@contextlib.contextmanager
def builtin_shortcuts() -> Iterator[None]:
    """While it lasts, torch's layers called with one tensor take their output from the shape
    shortcuts where those are certain, as they do in a recorded run and in
    :func:`propagation.propagate` (a ``BatchNorm2d`` on meta tensors otherwise runs torch's
    Python decomposition)."""
    original = torch.nn.Module.__call__

    def call(module: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
        out = module_shortcut(module, args, kwargs) if is_builtin_leaf(module) else None
        return original(module, *args, **kwargs) if out is None else out

    torch.nn.Module.__call__ = call  # type: ignore[method-assign]
    try:
        yield
    finally:
        torch.nn.Module.__call__ = original  # type: ignore[method-assign]
