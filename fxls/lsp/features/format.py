"""Values as Markdown for hovers (their text forms: ``fxls.engine.render``; escaping:
``fxls.lsp.features.markdown``)."""

from __future__ import annotations

from collections.abc import Sequence

from fxls.engine.render import dtype_name, shape_text, value_text
from fxls.lsp.features import markdown as md
from fxls.protocol.model import Value


def value_md(value: Value, *, cell: bool = False) -> str:
    """A Value as Markdown: the shape as a code span, the dtype as a word (`[B, 64]`
    float32); other values as a word or code span. Every part is escaped by
    :mod:`fxls.lsp.features.markdown`."""
    limit = md.MAX_CELL if cell else md.MAX_VALUE
    if value.kind == "tensor":
        shape = shape_text(value.shape) if value.shape is not None else "tensor"
        text = md.code(shape, limit, cell=cell)
        name = dtype_name(value.dtype)
        return f"{text} {md.word(name, limit, cell=cell)}" if name else text
    return md.word(value_text(value), limit, cell=cell)


def values_md(values: Sequence[Value], *, cell: bool = False) -> str:
    """Like :func:`fxls.engine.render.values_text`, as Markdown."""
    if not values:
        return ""
    if len(values) == 1:
        return value_md(values[0], cell=cell)
    shown = [value_md(v, cell=cell) for v in values[: md.MAX_LISTED_VALUES]]
    if len(values) > md.MAX_LISTED_VALUES:
        shown.append(f"… {len(values) - md.MAX_LISTED_VALUES} more")
    return "(" + ", ".join(shown) + ")"
