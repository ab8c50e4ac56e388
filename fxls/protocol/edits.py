"""Text edits on a document: spans to offsets, applying edits, merging them. Pure, stdlib only.

A :class:`~fxls.protocol.model.TextEdit` replaces a span of the text it was computed against
(1-based lines, code point columns, lines split like Python's tokenizer does: ``\\r\\n``,
``\\r``, ``\\n``). The worker computes them, the server and ``fxls check --fix`` apply them; both
go through here so a span means the same on both sides.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Sequence
from typing import Any

from fxls.protocol.model import Span, TextEdit

_NEWLINE = re.compile(r"\r\n|\r|\n")


def common_ends(a: Sequence[Any], b: Sequence[Any]) -> tuple[int, int]:
    """How many leading and trailing items ``a`` and ``b`` share (not overlapping): what a
    diff of the two need not look at."""
    prefix = 0
    limit = min(len(a), len(b))
    while prefix < limit and a[prefix] == b[prefix]:
        prefix += 1
    suffix = 0
    while suffix < limit - prefix and a[len(a) - 1 - suffix] == b[len(b) - 1 - suffix]:
        suffix += 1
    return prefix, suffix


class EditError(ValueError):
    """Edits that overlap or point outside the text."""


def line_starts(text: str) -> list[int]:
    """Offset of the first character of each line."""
    return [0] + [m.end() for m in _NEWLINE.finditer(text)]


def offset(text: str, starts: Sequence[int], line: int, col: int) -> int:
    """(1-based line, code point column) -> offset in ``text``; the column is clamped to the
    line, a line past the end means the end of the text."""
    if line < 1:
        return 0
    if line > len(starts):
        return len(text)
    begin = starts[line - 1]
    end = starts[line] if line < len(starts) else len(text)
    content_end = end
    while content_end > begin and text[content_end - 1] in "\r\n":
        content_end -= 1
    return min(begin + max(col, 0), content_end)


def position(starts: Sequence[int], at: int) -> tuple[int, int]:
    """Offset -> (1-based line, code point column)."""
    lo, hi = 0, len(starts) - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if starts[mid] <= at:
            lo = mid
        else:
            hi = mid - 1
    return lo + 1, at - starts[lo]


def span_of(starts: Sequence[int], begin: int, end: int) -> Span:
    line, col = position(starts, begin)
    end_line, end_col = position(starts, end)
    return Span(line, col, end_line, end_col)


def _ranges(text: str, edits: Iterable[TextEdit]) -> list[tuple[int, int, int, str]]:
    starts = line_starts(text)
    out = []
    for order, edit in enumerate(edits):
        s = edit.span
        begin = offset(text, starts, s.line, s.col)
        end = offset(text, starts, s.end_line, s.end_col)
        if end < begin:
            raise EditError(f"edit ends before it starts: {s}")
        out.append((begin, end, order, edit.text))
    out.sort(key=lambda r: (r[0], r[1], r[2]))
    return out


def overlaps(text: str, edits: Sequence[TextEdit]) -> bool:
    """Whether two of ``edits`` replace overlapping text (insertions at one point do not)."""
    ranges = _ranges(text, edits)
    return any(b[0] < a[1] for a, b in itertools.pairwise(ranges))


def apply_edits(text: str, edits: Sequence[TextEdit]) -> str:
    """``text`` with every edit applied; insertions at the same point keep their order.

    Raises:
        EditError: when two edits overlap.
    """
    ranges = _ranges(text, edits)
    parts: list[str] = []
    cursor = 0
    for begin, end, _, new in ranges:
        if begin < cursor:
            raise EditError("edits overlap")
        parts.append(text[cursor:begin])
        parts.append(new)
        cursor = end
    parts.append(text[cursor:])
    return "".join(parts)


def compatible(text: str, chosen: Sequence[TextEdit], more: Sequence[TextEdit]) -> bool:
    """Whether ``more`` can be applied together with ``chosen`` (no overlap)."""
    return not overlaps(text, [*chosen, *more])
