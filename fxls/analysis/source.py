"""Source text helpers: line splitting and column conversion for the AST pass.

Python's ``ast`` reports columns as UTF-8 byte offsets; fxls speaks code points (see
``fxls.worker.protocol``). Everything here is pure and never raises on odd input.
"""

from __future__ import annotations

import re

from fxls.worker.protocol import Span

_NEWLINE = re.compile(r"\r\n|\r|\n")


def split_lines(text: str) -> list[str]:
    """Split like Python's tokenizer and LSP do (``\\r\\n``, ``\\r``, ``\\n``), no terminators."""
    return _NEWLINE.split(text)


class SourceLines:
    """A document's lines with 1-based access and byte-to-code-point column conversion."""

    def __init__(self, text: str):
        self.text = text
        self.lines = split_lines(text)

    def line(self, lineno: int) -> str:
        """Text of 1-based line ``lineno`` ('' when out of range)."""
        if 1 <= lineno <= len(self.lines):
            return self.lines[lineno - 1]
        return ""

    def col(self, lineno: int, byte_col: int) -> int:
        """UTF-8 byte offset within a line -> code point offset."""
        line = self.line(lineno)
        if line.isascii():
            return min(byte_col, len(line)) if byte_col >= 0 else 0
        return len(line.encode("utf-8")[: max(byte_col, 0)].decode("utf-8", errors="ignore"))

    def span(
        self, lineno: int, byte_col: int, end_lineno: int | None, end_byte_col: int | None
    ) -> Span:
        """A Span from AST positions (byte columns), in code points."""
        end_line = end_lineno if end_lineno is not None else lineno
        end_col = (
            self.col(end_line, end_byte_col)
            if end_byte_col is not None
            else len(self.line(end_line))
        )
        return Span(lineno, self.col(lineno, byte_col), end_line, end_col)

    def line_span(self, lineno: int) -> Span:
        """The stripped text of a whole line (for diagnostics on a comment line)."""
        line = self.line(lineno)
        stripped = line.lstrip()
        start = len(line) - len(stripped)
        return Span(lineno, start, lineno, len(line.rstrip()))
