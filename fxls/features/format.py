"""Text forms of shapes, values and counts shared by hover, inlay hints and code lenses."""

from __future__ import annotations

import re
from collections.abc import Sequence

from fxls.protocol.model import Dim, NodeInfo, Value


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


def md_cell(text: str) -> str:
    """Text safe inside a Markdown table cell."""
    return text.replace("|", "\\|").replace("\n", " ")


_CODE_SPAN = re.compile(r"(`+)(?:.*?)\1", re.DOTALL)
_BRACKETED = re.compile(r"\[([^\[\]`]*)\]")


def md_code_brackets(markdown: str) -> str:
    """Put bracketed text outside code spans into code spans: ``[B, T, 64]`` -> `` `[B, T, 64]` ``.

    A bare ``[B, T, 64]`` is link syntax to some Markdown views (Neovim's hover hides the
    brackets), and they show a backslash escape literally; a code span reads right everywhere.
    """
    out: list[str] = []
    last = 0
    for match in _CODE_SPAN.finditer(markdown):
        out.append(_BRACKETED.sub(r"`[\1]`", markdown[last : match.start()]))
        out.append(match.group(0))
        last = match.end()
    out.append(_BRACKETED.sub(r"`[\1]`", markdown[last:]))
    return "".join(out)
