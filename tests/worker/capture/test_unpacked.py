# ruff: noqa: F841  (the sample functions are read as bytecode, never run)
"""How many values a starred value must give, read off the bytecode that unpacks it."""

from __future__ import annotations

import dis
from collections.abc import Callable
from typing import Any

import pytest

from fxls.worker.capture.trace.unpacked import extends_a_list, starred_count


def _heads(x: Any, self: Any) -> None:
    b, n, _, h = *x.shape, self.heads


def _around(x: Any, self: Any) -> None:
    b, n, d, h, w = x.shape[0], *x.shape[-2:], self.heads, self.window


def _called(x: Any, self: Any) -> None:
    b, n, _, h = *x.shape, self.f(x, dim=2)


def _two_starred(x: Any, y: Any) -> None:
    a, b, c = *x.shape, *y.shape


def _kept(x: Any) -> tuple[Any, ...]:
    return (*x.shape, 3)


def _chosen(x: Any, flag: bool) -> None:
    a, b, c = *x.shape, (1 if flag else 2)


@pytest.mark.parametrize(
    ("function", "count"),
    [(_heads, 3), (_around, 2), (_called, 3), (_two_starred, None), (_kept, None), (_chosen, None)],
)
def test_the_count_a_starred_value_must_give(function: Callable[..., Any], count: int) -> None:
    """Three of ``*x.shape, h`` unpacked into four names, two of ``x.shape[-2:]`` between one
    value and two; unknown beside another starred value, when the tuple is kept whole or when
    a value is chosen by a branch (a jump)."""
    code = function.__code__
    extends = [i.offset for i in dis.get_instructions(code) if i.opname == "LIST_EXTEND"]
    assert extends and all(extends_a_list(code, offset) for offset in extends)
    assert starred_count(code, extends[-1 if function is _two_starred else 0]) == count
    first = next(i.offset for i in dis.get_instructions(code) if i.opname != "LIST_EXTEND")
    assert not extends_a_list(code, first) and starred_count(code, first) is None
