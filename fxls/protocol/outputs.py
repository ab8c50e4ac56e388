"""Output values of a verified edit, compared outside the job that computed them.

A rewrite job runs user code (the file, its passes, the workspace's rules) in the same process
as fxls's verification, so user code can replace ``torch.allclose``, ``torch.equal`` or
``Tensor.__eq__`` and make any edit compare equal. The job therefore also sends the values it
compared (:class:`~fxls.protocol.model.OutputSample`: up to :data:`SAMPLED_VALUES` values of
each of up to :data:`SAMPLED_OUTPUTS` outputs, before and after the edit, at the same
positions), and the server or CLI compares them here, in plain Python, with the tolerances the
job uses. One wire format (:func:`pack`, :func:`unpack`) for both sides. Standard library only.
"""

from __future__ import annotations

import base64
import math
import struct
from collections.abc import Sequence

from fxls.protocol.model import OutputSample, OutputValues

RTOL = 1e-4
ATOL = 1e-5
SAMPLED_VALUES = 1024
"""Values sent per output (evenly spaced over the flattened tensor when it has more)."""
SAMPLED_OUTPUTS = 4
"""Outputs sent per input; further outputs are compared in the job only."""
_MAX_TEXT = 4 * ((SAMPLED_VALUES * 2 * 8 + 2) // 3)
"""The longest ``values`` text a sample may carry (complex values take two numbers)."""


def integer(dtype: str) -> bool:
    """Whether values of ``dtype`` travel as int64 (integers and bools) rather than float64."""
    return not any(kind in dtype for kind in ("float", "complex"))


def pack(values: Sequence[float], dtype: str) -> str:
    """The ``values`` text of :class:`~fxls.protocol.model.OutputValues` for ``values``."""
    code = "q" if integer(dtype) else "d"
    return base64.b64encode(struct.pack(f"<{len(values)}{code}", *values)).decode("ascii")


def unpack(side: OutputValues) -> list[float] | None:
    """The values of ``side``; None when its text is not a valid sample."""
    if len(side.values) > _MAX_TEXT:
        return None
    try:
        raw = base64.b64decode(side.values, validate=True)
    except ValueError:
        return None
    if len(raw) % 8:
        return None
    code = "q" if integer(side.dtype) else "d"
    return [v for (v,) in struct.iter_unpack(f"<{code}", raw)]


def _expected(side: OutputValues) -> int:
    """How many numbers a sample of a tensor of ``side``'s shape and dtype holds."""
    count = min(math.prod(side.shape), SAMPLED_VALUES)
    return count * 2 if "complex" in side.dtype else count


def _close(want: float, got: float) -> bool:
    """``torch.allclose(want, got, RTOL, ATOL, equal_nan=True)`` for one pair of values."""
    if want == got or (math.isnan(want) and math.isnan(got)):
        return True
    return abs(want - got) <= ATOL + RTOL * abs(got)


def difference(sample: OutputSample) -> str | None:
    """How the edited output differs from the original (None when the values agree within the
    tolerances, as the job's own comparison requires)."""
    before, after = sample.before, sample.after
    where = sample.where
    if before.shape != after.shape:
        return f"{where} has shape {after.shape} instead of {before.shape}"
    if before.dtype != after.dtype:
        return f"{where} is {after.dtype} instead of {before.dtype}"
    want, got = unpack(before), unpack(after)
    if want is None or got is None or not len(want) == len(got) == _expected(before):
        return f"{where}: the values sent to compare are not readable"
    if integer(before.dtype):
        return None if want == got else f"{where} has other values"
    worst = max((abs(w - g) for w, g in zip(want, got) if not _close(w, g)), default=None)
    return None if worst is None else f"{where}: max |Δ| = {worst:.3g}"
