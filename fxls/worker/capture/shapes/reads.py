"""Values read off fake tensors, bounded.

``x.tolist()`` on a fake tensor makes one unknown number (an unbacked symbol) per value, at
about 0.1 ms each, more while the capture records the run. Library code reads small tensors
so (``grid_thw.tolist()``: three numbers per image); an input fxls assumed with the wrong
shape can make the same line read a million values (a ``[B, T, 4096]`` tensor assumed for
``grid_thw``), which would take the class's whole CPU time, and the file's after it, before
failing anyway. While :func:`bounded` lasts, such a read stops at once with
:class:`TooManyValuesRead`, which says how many values it asked for.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

MAX_VALUES_READ = 1024
"""The most values one ``tolist()`` of a fake tensor may read (about 0.1 s of symbols)."""


class TooManyValuesRead(RuntimeError):
    """A ``tolist()`` of a fake tensor with more than ``MAX_VALUES_READ`` values."""

    def __init__(self, count: int) -> None:
        super().__init__(
            f"`.tolist()` of a tensor of {count:,} values: on fake tensors each value is an "
            f"unknown number, and fxls reads at most {MAX_VALUES_READ:,} (is this input's "
            "shape right?)"
        )
        self.count = count


def _known(count: Any) -> int | None:
    """``count`` as a plain int: itself, or a symbolic size's hint; None when unknown."""
    if isinstance(count, int):
        return count
    hint = getattr(getattr(count, "node", None), "hint", None)
    return hint if isinstance(hint, int) else None


@contextlib.contextmanager
def bounded() -> Iterator[None]:
    """Make ``tolist()`` of a fake tensor of more than ``MAX_VALUES_READ`` values raise
    :class:`TooManyValuesRead` while the block runs (nothing changes when this torch's fake
    tensors have no ``tolist`` of their own)."""
    from torch._subclasses.fake_tensor import FakeTensor

    original = FakeTensor.__dict__.get("tolist")
    if original is None:
        yield
        return

    def tolist(self: Any) -> Any:
        count = _known(self.numel())
        if count is not None and count > MAX_VALUES_READ:
            raise TooManyValuesRead(count)
        return original(self)

    FakeTensor.tolist = tolist  # type: ignore[method-assign]
    try:
        yield
    finally:
        FakeTensor.tolist = original  # type: ignore[method-assign]
