"""Operators whose meta kernel refuses what the CPU kernel runs.

fxls computes shapes on meta and fake tensors, so an operator whose meta kernel checks a
GPU-only condition reports an error for code that runs on the CPU. ``torch._grouped_mm`` (what
``torch.nn.functional.grouped_mm`` and transformers' mixture-of-experts layers call) is one:
its meta kernel asks for bfloat16 operands, as the CUDA kernel does, while the CPU kernel
also multiplies float32 and float16 ones (both ask for rows 16 bytes apart). fxls showed "Expected
inputs of BF16 type" at a Mixtral block's ``self.experts(...)``.

While a capture runs (:func:`cpu_rules`), ``torch._grouped_mm`` is :func:`grouped_mm`: on meta
and fake operands of another floating dtype it gives the output the CPU kernel gives (its
shape rule, in the operands' dtype); everything else, bfloat16 included, goes to torch's own.
A graph node whose target is torch's ``_grouped_mm`` is run by :func:`for_target`'s answer.
"""

from __future__ import annotations

import contextlib
import typing
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor

_ORIGINAL = torch._grouped_mm
_check = typing.cast(Callable[..., None], torch._check)
"""``torch._check``: a failed condition raises as the kernel would (a symbolic one is a
guard)."""
_FLOATS = (torch.float32, torch.float16)
"""Besides bfloat16 (which torch's meta kernel takes), what the CPU kernel multiplies."""


def grouped_mm(
    mat_a: Any,
    mat_b: Any,
    offs: Any = None,
    bias: Any = None,
    out_dtype: Any = None,
) -> Any:
    """``torch._grouped_mm`` as the CPU kernel sees it, on meta and fake operands."""
    out = _cpu_shaped(mat_a, mat_b, offs, bias, out_dtype)
    if out is not None:
        return out
    return _ORIGINAL(mat_a, mat_b, offs=offs, bias=bias, out_dtype=out_dtype)


def _without_values(a: Any, b: Any) -> bool:
    """Both on the meta device, or a fake tensor among them (its mode takes the other, a
    module's real parameter included, as a fake one)."""
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        return False
    return (a.is_meta and b.is_meta) or isinstance(a, FakeTensor) or isinstance(b, FakeTensor)


def _cpu_shaped(mat_a: Any, mat_b: Any, offs: Any, bias: Any, out_dtype: Any) -> Any:
    """The output of the CPU kernel for these operands, or None where torch's own meta kernel
    answers (bfloat16, a bias, another output dtype) or the operands are not what it takes."""
    if not _without_values(mat_a, mat_b) or bias is not None:
        return None
    if mat_a.dtype not in _FLOATS or mat_b.dtype != mat_a.dtype:
        return None
    if out_dtype is not None and out_dtype != mat_a.dtype:
        return None
    size = _output_size(mat_a, mat_b, offs)
    if size is None:
        return None
    for mat in (mat_a, mat_b):
        _check(_aligned(mat), lambda: "strides should be multiple of 16 bytes")
    return mat_a.new_empty(size)


def _aligned(mat: torch.Tensor) -> bool:
    """Whether the CPU kernel takes ``mat``'s layout: row- or column-major in its last two
    dimensions, the stride between rows (or columns) a multiple of 16 bytes."""
    rows, cols = mat.dim() - 2, mat.dim() - 1
    step = 16 // mat.element_size()
    stride = mat.stride()
    if stride[rows] == 1 and stride[cols] >= max(1, mat.shape[rows]):
        return bool(stride[cols] % step == 0)
    if stride[cols] == 1 and stride[rows] >= max(1, mat.shape[cols]):
        return bool(stride[rows] % step == 0)
    return False


def _output_size(mat_a: torch.Tensor, mat_b: torch.Tensor, offs: Any) -> list[Any] | None:
    """The grouped product's size: 2-D operands are split into groups along their jagged
    dimension by ``offs`` (int32, 1-D), 3-D ones enumerate their groups first."""
    if mat_a.dim() not in (2, 3) or mat_b.dim() not in (2, 3):
        return None
    if mat_a.dim() == 3 or mat_b.dim() == 3:
        _check(mat_a.size(-1) == mat_b.size(-2), lambda: "contraction dimension must match")
    if mat_a.dim() == 3 and mat_b.dim() == 3:
        if offs is not None:
            return None
        _check(mat_a.size(0) == mat_b.size(0), lambda: "batched dimension has to match")
        return [mat_a.size(0), mat_a.size(1), mat_b.size(-1)]
    if not (isinstance(offs, torch.Tensor) and offs.dim() == 1 and offs.dtype == torch.int32):
        return None
    groups = offs.size(0)
    if mat_a.dim() == 2 and mat_b.dim() == 2:
        return [groups, mat_a.size(0), mat_b.size(1)]
    if mat_a.dim() == 2:
        _check(groups == mat_b.size(0), lambda: "matrix batch sizes have to match")
        return [mat_a.size(0), mat_b.size(-1)]
    _check(groups == mat_a.size(0), lambda: "matrix batch sizes have to match")
    return [mat_a.size(1), mat_b.size(1)]


def for_target(target: Any) -> Any:
    """The function a graph node's ``target`` runs as during a capture."""
    return grouped_mm if target is _ORIGINAL else target


@contextlib.contextmanager
def cpu_rules() -> Iterator[None]:
    """While a capture runs: ``torch._grouped_mm`` is :func:`grouped_mm`."""
    torch._grouped_mm = grouped_mm  # type: ignore[assignment]
    try:
        yield
    finally:
        torch._grouped_mm = _ORIGINAL
