"""Markdown helpers shared by hover, inlay hints and code lenses (text forms: ``fxls.render``)."""

from __future__ import annotations

import re


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
