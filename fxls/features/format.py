"""Text forms of shapes, values and counts shared by hover, inlay hints and code lenses."""

from __future__ import annotations

import re
from collections.abc import Sequence

from fxls.features import markdown as md
from fxls.worker.protocol import Dim, NodeInfo, Value


def dtype_name(dtype: str | None) -> str:
    """``torch.float32`` -> ``float32``."""
    if not dtype:
        return ""
    return dtype.removeprefix("torch.")


def shape_text(shape: Sequence[Dim]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def value_text(value: Value, *, dtype: bool = True, default_dtype: str | None = None) -> str:
    """A Value as shown to the user: ``[B, 64, 112, 112] float32``, ``3``, ``None``.

    With ``default_dtype`` set, that dtype is left out (inlay hints omit ``float32``).
    """
    if value.kind == "tensor":
        text = shape_text(value.shape) if value.shape is not None else "tensor"
        name = dtype_name(value.dtype)
        if dtype and name and name != default_dtype:
            text = f"{text} {name}"
        return text
    if value.kind == "none":
        return "None"
    if value.text is not None:
        return value.text
    return value.kind


def values_text(values: Sequence[Value], **kwargs: object) -> str:
    """One output as its value, several (a flattened tuple) in parentheses."""
    if not values:
        return ""
    if len(values) == 1:
        return value_text(values[0], **kwargs)  # type: ignore[arg-type]
    return "(" + ", ".join(value_text(v, **kwargs) for v in values) + ")"  # type: ignore[arg-type]


def count_text(n: int) -> str:
    """Parameter counts: ``950``, ``12.3 k``, ``25.6 M``, ``1.5 B``."""
    for size, suffix in ((1_000_000_000, "B"), (1_000_000, "M"), (1_000, "k")):
        if abs(n) >= size:
            return f"{n / size:.1f} {suffix}"
    return str(n)


_INDEX = re.compile(r"(?<![A-Za-z_])\d+")


def name_pattern(node: NodeInfo) -> tuple[str, str]:
    """Key under which nodes of loop iterations agree: ``h.0.attn`` and ``h.7.attn`` match."""
    target = node.module_path or node.target
    return node.op, _INDEX.sub("#", target if node.op == "call_module" else node.target)


def value_md(value: Value, *, cell: bool = False) -> str:
    """A Value as Markdown: the shape as a code span, the dtype as a word (`[B, 64]`
    float32); other values as a word or code span. Every part is escaped by
    :mod:`fxls.features.markdown`."""
    limit = md.MAX_CELL if cell else md.MAX_VALUE
    if value.kind == "tensor":
        shape = shape_text(value.shape) if value.shape is not None else "tensor"
        text = md.code(shape, limit, cell=cell)
        name = dtype_name(value.dtype)
        return f"{text} {md.word(name, limit, cell=cell)}" if name else text
    return md.word(value_text(value), limit, cell=cell)


def values_md(values: Sequence[Value], *, cell: bool = False) -> str:
    """Like :func:`values_text`, as Markdown."""
    if not values:
        return ""
    if len(values) == 1:
        return value_md(values[0], cell=cell)
    shown = [value_md(v, cell=cell) for v in values[: md.MAX_LISTED_VALUES]]
    if len(values) > md.MAX_LISTED_VALUES:
        shown.append(f"… {len(values) - md.MAX_LISTED_VALUES} more")
    return "(" + ", ".join(shown) + ")"
