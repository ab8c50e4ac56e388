"""Elementwise operators of a shape run answered without dispatching them.

An activation, a dropout, a softmax, ``masked_fill`` or an arithmetic operator on contiguous
floating tensors (the other operand a number or broadcast to the first's sizes) gives a
tensor with its input's metadata: the same sizes,
strides, dtype and device (what TensorIterator allocates for a contiguous input, and what the
operator's fake implementation gives). With symbolic sizes, torch computes that answer with
sympy arithmetic on every size and stride: 1-4 ms per operator in a fresh job child (GELU's
reference decomposition runs eight operators), most of a transformer block's symbolic run; on
meta tensors, torch's Python reference of the operator (0.1-0.2 ms).
Here the answer is the input itself, as the propagator's memo already gives one node's result
to another node with the same input metadata; so these shortcuts are used only where the memo
is (no operator of the graph changes a tensor's metadata in place). Anything not certain (an
integer tensor, a non-contiguous input, operands that broadcast each other, an unknown argument,
a symbolic scalar)
runs the operator, which also reports its errors.

``contiguous()`` of a non-contiguous tensor, and a comparison of a tensor with a number, give a
new contiguous tensor of its sizes (``new_empty``).
"""

from __future__ import annotations

import itertools
import operator
from typing import Any

import torch
import torch.nn.functional as F

from fxls.worker.capture.shapes.shortcuts import same_size

__all__ = [
    "ARITHMETIC_FUNCTIONS",
    "ARITHMETIC_METHODS",
    "same_layout_function",
    "same_layout_method",
    "same_layout_module",
]

_FLOATS = frozenset({torch.float16, torch.bfloat16, torch.float32, torch.float64})

_UNARY_FUNCTIONS: dict[Any, frozenset[str]] = {
    torch.relu: frozenset(),
    torch.sigmoid: frozenset(),
    torch.tanh: frozenset(),
    F.relu: frozenset({"inplace"}),
    F.silu: frozenset({"inplace"}),
    F.mish: frozenset({"inplace"}),
    F.hardswish: frozenset({"inplace"}),
    F.gelu: frozenset({"approximate"}),
}
"""Functions of one tensor whose output has its input's metadata, and the keyword arguments
(checked by :func:`_valid_keywords`) they may be given."""

_UNARY_METHODS = frozenset({"relu", "sigmoid", "tanh"})

_UNARY_MODULES = (
    torch.nn.ReLU,
    torch.nn.SiLU,
    torch.nn.Tanh,
    torch.nn.Sigmoid,
    torch.nn.Mish,
    torch.nn.Hardswish,
    torch.nn.Dropout,
)

ARITHMETIC_FUNCTIONS = frozenset(
    {operator.add, operator.sub, operator.mul, operator.truediv, torch.add, torch.sub, torch.mul}
)
"""Arithmetic of two operands that broadcast each other (functions and operators)."""
ARITHMETIC_METHODS = frozenset({"add", "sub", "mul", "div"})

_COMPARISON_FUNCTIONS = frozenset(
    {
        operator.eq, operator.ne, operator.lt, operator.le, operator.gt, operator.ge,
        torch.eq, torch.ne, torch.lt, torch.le, torch.gt, torch.ge,
    }
)  # fmt: skip
_COMPARISON_METHODS = frozenset({"eq", "ne", "lt", "le", "gt", "ge"})
_REAL = frozenset(
    {torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64} | _FLOATS
)


def _plain(x: Any) -> bool:
    """A contiguous dense tensor of a floating dtype."""
    return (
        isinstance(x, torch.Tensor)
        and x.dtype in _FLOATS
        and x.layout == torch.strided
        and x.is_contiguous()
    )


def _number(x: Any) -> bool:
    """A Python int or float (not a bool, a symbolic number or a tensor)."""
    return type(x) in (int, float)


def _valid_keywords(kwargs: dict[str, Any], allowed: frozenset[str]) -> bool:
    if not set(kwargs) <= allowed:
        return False
    if "inplace" in kwargs and type(kwargs["inplace"]) is not bool:
        return False
    return kwargs.get("approximate", "none") in ("none", "tanh")


def _arithmetic(a: Any, b: Any) -> torch.Tensor | None:
    """``a op b`` for two contiguous floating tensors of one dtype where one has the result's
    sizes and the other broadcasts to them (each of its sizes, from the right, 1 or the
    same), or a contiguous floating tensor and a Python number (either side): the tensor with
    the result's sizes."""
    if _plain(a) and _plain(b):
        if a.dtype != b.dtype or a.device != b.device:
            return None
        if _broadcasts(b, a):
            return a  # type: ignore[no-any-return]
        return b if _broadcasts(a, b) else None
    if _plain(a) and _number(b):
        return a  # type: ignore[no-any-return]
    if _number(a) and _plain(b):
        return b  # type: ignore[no-any-return]
    return None


def _broadcasts(small: torch.Tensor, big: torch.Tensor) -> bool:
    """Whether ``small`` broadcasts to ``big``'s sizes, leaving them as they are."""
    if small.dim() > big.dim():
        return False
    for s, b in zip(reversed(small.shape), reversed(big.shape)):
        if not (type(s) is int and s == 1) and not same_size(s, b):
            return False
    return True


def _row_major(x: torch.Tensor) -> bool:
    """Contiguous, or laid out row by row with gaps (a slice of a larger buffer, such as a
    causal mask's ``bias[:, :, :T, :T]``): leading sizes of 1, then numeric strides that
    decrease strictly. TensorIterator gives an elementwise result of such an input the
    contiguous layout."""
    if x.layout != torch.strided:
        return False
    if x.is_contiguous():
        return True
    strides, sizes = x.stride(), x.shape
    lead = 0
    while lead < len(sizes) and type(sizes[lead]) is int and sizes[lead] == 1:
        lead += 1
    rest = strides[lead:]
    if not all(type(st) is int and st > 0 for st in rest):
        return False
    if any(type(d) is int and d == 1 for d in sizes[lead:]):
        return False
    return all(a > b for a, b in itertools.pairwise(rest))


def _compare(a: Any, b: Any) -> torch.Tensor | None:
    """``a <op> b`` for a tensor of a real dtype, laid out row by row, and a Python number
    (either side): a new contiguous boolean tensor of its sizes."""
    x, number = (a, b) if isinstance(a, torch.Tensor) else (b, a)
    if not (isinstance(x, torch.Tensor) and _number(number)) or x.dtype not in _REAL:
        return None
    if not _row_major(x):
        return None
    return x.new_empty(x.shape, dtype=torch.bool)


def _softmax(args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.Tensor | None:
    """``softmax(x, dim)`` (``dim`` given, positionally or by name; no ``dtype``)."""
    if len(args) > 2 or not set(kwargs) <= {"dim", "_stacklevel", "dtype"}:
        return None
    given = {**dict(zip(("input", "dim"), args)), **kwargs}
    x, dim = given.get("input"), given.get("dim")
    if not isinstance(x, torch.Tensor) or not _plain(x) or given.get("dtype") is not None:
        return None
    rank = max(x.dim(), 1)
    return x if type(dim) is int and -rank <= dim < rank else None


def _masked_fill(x: Any, mask: Any, value: Any) -> torch.Tensor | None:
    """``x.masked_fill(mask, value)``: a boolean mask that broadcasts to ``x`` (each of its
    sizes 1 or ``x``'s), a Python number."""
    if not (_plain(x) and _number(value) and isinstance(mask, torch.Tensor)):
        return None
    if mask.dtype != torch.bool or mask.device != x.device or mask.dim() > x.dim():
        return None
    for m, d in zip(reversed(mask.shape), reversed(x.shape)):
        if not (type(m) is int and m == 1) and not same_size(m, d):
            return None
    return x  # type: ignore[no-any-return]


def _dropout(args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.Tensor | None:
    names = ("input", "p", "training", "inplace")
    if len(args) > len(names) or not set(kwargs) <= set(names[1:]):
        return None
    given = {**dict(zip(names, args)), **kwargs}
    p = given.get("p", 0.5)
    flags = (given.get("training", True), given.get("inplace", False))
    if not (_number(p) and 0.0 <= p <= 1.0 and all(type(f) is bool for f in flags)):
        return None
    x = given.get("input")
    return x if _plain(x) else None


def same_layout_function(target: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The output of ``target(*args, **kwargs)`` when certain (see the module), else None."""
    allowed = _UNARY_FUNCTIONS.get(target)
    if allowed is not None:
        if len(args) == 1 and _valid_keywords(kwargs, allowed) and _plain(args[0]):
            return args[0]
        return None
    if target in ARITHMETIC_FUNCTIONS:
        return _arithmetic(*args) if len(args) == 2 and not kwargs else None
    if target in _COMPARISON_FUNCTIONS:
        return _compare(*args) if len(args) == 2 and not kwargs else None
    if target is F.dropout:
        return _dropout(args, kwargs)
    if target in (F.softmax, torch.softmax):
        return _softmax(args, kwargs)
    if target is torch.masked_fill and len(args) == 3 and not kwargs:
        return _masked_fill(*args)
    return None


def same_layout_method(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The output of ``args[0].name(*args[1:], **kwargs)`` when certain, else None."""
    if not args:
        return None
    x = args[0]
    if name in _UNARY_METHODS:
        return x if len(args) == 1 and not kwargs and _plain(x) else None
    if name in ARITHMETIC_METHODS:
        return _arithmetic(x, args[1]) if len(args) == 2 and not kwargs else None
    if name in _COMPARISON_METHODS:
        return _compare(x, args[1]) if len(args) == 2 and not kwargs else None
    if name == "softmax":
        return _softmax(args, kwargs)
    if name == "masked_fill" and len(args) == 3 and not kwargs:
        return _masked_fill(*args)
    if name == "contiguous" and len(args) == 1 and not kwargs:
        return _contiguous(x)
    return None


def _contiguous(x: Any) -> torch.Tensor | None:
    """``x.contiguous()``: ``x`` itself when it is contiguous (as eager returns it), else a
    new contiguous tensor of its sizes."""
    if not isinstance(x, torch.Tensor) or x.layout != torch.strided:
        return None
    if x.is_contiguous():
        return x
    return x.new_empty(x.shape)


def same_layout_module(module: Any, x: Any) -> Any:
    """The output of an activation or dropout module called on ``x`` alone, else None."""
    kind = type(module)
    if kind in _UNARY_MODULES:
        return x if _plain(x) else None
    if kind is torch.nn.GELU:
        return x if module.approximate in ("none", "tanh") and _plain(x) else None
    if kind is torch.nn.Softmax:
        return _softmax((x, module.dim), {})
    return None
