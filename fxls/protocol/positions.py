"""Source positions: line splitting and UTF-8 byte columns to code points, in one place.

Python's ``ast`` and ``co_positions()`` report columns as UTF-8 byte offsets; the protocol
speaks 1-based lines and 0-based code point columns (``fxls.protocol.model.Span``). The AST
pass on the server and the tracer in the worker both convert here, so a span means the same
on both sides. Everything here but ``tokens`` is pure and never raises on odd input; ``tokens``
raises as ``tokenize`` does and keeps bounded memos (under a lock).
"""

from __future__ import annotations

import ast
import io
import re
import threading
import tokenize
from collections import OrderedDict
from types import CodeType
from typing import Any

from fxls.protocol.model import Span

_NEWLINE = re.compile(r"\r\n|\r|\n")


def contains(outer: Span, inner: Span) -> bool:
    """``inner`` lies within ``outer`` (both ends included)."""
    return (outer.line, outer.col) <= (inner.line, inner.col) and (
        inner.end_line,
        inner.end_col,
    ) <= (outer.end_line, outer.end_col)


def split_lines(text: str) -> list[str]:
    """Split like Python's tokenizer does (``\\r\\n``, ``\\r``, ``\\n``), no terminators."""
    return _NEWLINE.split(text)


_NOT_CODE = frozenset(
    {tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}
)
_TEXTS: OrderedDict[str, tuple[tokenize.TokenInfo, ...]] = OrderedDict()
_CHUNKS: OrderedDict[str, tuple[int, tuple[tokenize.TokenInfo, ...]]] = OrderedDict()
_MAX_CHUNKS = 256
_LOCK = threading.Lock()


def tokens(text: str, body: list[ast.stmt]) -> tuple[tokenize.TokenInfo, ...]:
    """The code and comment tokens of ``text`` (``tokenize.generate_tokens`` without NL,
    NEWLINE, INDENT, DEDENT and ENDMARKER), given ``body``, the statements ``ast.parse(text)``
    found. Each top-level statement's lines (with the comments above it) are tokenized once per
    text, so an edit inside one class tokenizes that class only (a statement that moved, lines
    added or removed above it, gets its tokens moved); the last two texts are kept whole.
    Raises as ``generate_tokens`` does."""
    with _LOCK:
        found = _TEXTS.get(text)
        if found is None:
            lines = text.split("\n")
            chunks = _chunks(body, len(lines))
            if chunks is None:
                found = _tokenize(text, 0)
            else:
                found = tuple(t for a, b in chunks for t in _chunk(lines, a, b))
            _TEXTS[text] = found
            if len(_TEXTS) > 2:
                _TEXTS.popitem(last=False)
        return found


def _chunks(body: list[ast.stmt], count: int) -> list[tuple[int, int]] | None:
    """(first, last) lines of each top-level statement, the lines above it from the previous
    one on; None when one starts where the previous ended (``a = 1; b = 2``) or not at column 0."""
    out: list[tuple[int, int]] = []
    first = 1
    for node in body:
        decorators = getattr(node, "decorator_list", [])
        start = min([node.lineno, *(d.lineno for d in decorators)])
        last = node.end_lineno or node.lineno
        if start < first or node.col_offset != 0:
            return None
        out.append((first, last))
        first = last + 1
    if first <= count:
        out.append((first, count))
    return out


def _chunk(lines: list[str], first: int, last: int) -> tuple[tokenize.TokenInfo, ...]:
    source = "\n".join(lines[first - 1 : last]) + ("\n" if last < len(lines) else "")
    kept = _CHUNKS.get(source)
    if kept is None:
        found = _tokenize(source, first - 1)
    elif kept[0] == first:
        found = kept[1]
    else:
        found = _moved(kept[1], first - kept[0])
    _CHUNKS[source] = (first, found)
    _CHUNKS.move_to_end(source)
    if len(_CHUNKS) > _MAX_CHUNKS:
        _CHUNKS.popitem(last=False)
    return found


def _moved(found: tuple[tokenize.TokenInfo, ...], by: int) -> tuple[tokenize.TokenInfo, ...]:
    """``found`` ``by`` lines further down."""
    info = tokenize.TokenInfo
    return tuple(
        info(t[0], t[1], (t[2][0] + by, t[2][1]), (t[3][0] + by, t[3][1]), t[4]) for t in found
    )


def _tokenize(source: str, offset: int) -> tuple[tokenize.TokenInfo, ...]:
    """The code and comment tokens of ``source``, ``offset`` lines further down."""
    return tuple(
        tok._replace(
            start=(tok.start[0] + offset, tok.start[1]), end=(tok.end[0] + offset, tok.end[1])
        )
        for tok in tokenize.generate_tokens(io.StringIO(source).readline)
        if tok.type not in _NOT_CODE
    )


class SourceText:
    """A document's lines with 1-based access and byte-to-code-point column conversion."""

    def __init__(self, text: str):
        self.source = text
        self.lines = split_lines(text)
        self._ascii = [line.isascii() for line in self.lines]

    def line(self, lineno: int) -> str:
        """Text of 1-based line ``lineno`` ('' when out of range)."""
        if 1 <= lineno <= len(self.lines):
            return self.lines[lineno - 1]
        return ""

    def col(self, lineno: int, byte_col: int) -> int:
        """A UTF-8 byte offset within a line -> code point offset (clamped to the line)."""
        if byte_col <= 0:
            return 0
        if not 1 <= lineno <= len(self.lines):
            return byte_col
        line = self.lines[lineno - 1]
        if self._ascii[lineno - 1]:
            return min(byte_col, len(line))
        return len(line.encode("utf-8")[:byte_col].decode("utf-8", errors="ignore"))

    def span(
        self,
        lineno: int,
        byte_col: int,
        end_lineno: int | None = None,
        end_byte_col: int | None = None,
    ) -> Span:
        """A Span from byte positions in AST order (a missing end is the end of the line)."""
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

    def text(self, span: Span) -> str:
        """The source text a span covers."""
        if span.line == span.end_line:
            return self.line(span.line)[span.col : span.end_col]
        parts = [self.line(span.line)[span.col :]]
        parts += [self.line(n) for n in range(span.line + 1, span.end_line)]
        parts.append(self.line(span.end_line)[: span.end_col])
        return "\n".join(parts)

    def segment(self, node: ast.expr) -> str | None:
        """``ast.get_source_segment(source, node)``, without splitting the whole source again
        for a node on one line (the standard function splits it at every call)."""
        line, end_col = node.lineno, node.end_col_offset
        if line != node.end_lineno or end_col is None or not 1 <= line <= len(self.lines):
            return ast.get_source_segment(self.source, node)
        return self.lines[line - 1].encode()[node.col_offset : end_col].decode()

    def node_span(self, node: ast.AST) -> Span:
        """The span of an AST node."""
        line: int = getattr(node, "lineno", 1)
        col: int = getattr(node, "col_offset", 0)
        end_line: int | None = getattr(node, "end_lineno", None)
        end_col: int | None = getattr(node, "end_col_offset", None)
        return self.span(line, col, end_line or line, end_col if end_col is not None else col)

    def code_span(self, code: CodeType, lasti: int) -> Span | None:
        """The span of the instruction at byte offset ``lasti`` of ``code``."""
        positions = _positions(code)
        index = lasti // 2
        if not 0 <= index < len(positions):
            return None
        line, end_line, col, end_col = positions[index]
        if line is None or col is None:
            return None
        return self.span(line, col, end_line or line, end_col if end_col is not None else col)


_POSITIONS: dict[CodeType, list[tuple[Any, Any, Any, Any]]] = {}


def _positions(code: CodeType) -> list[tuple[Any, Any, Any, Any]]:
    cached = _POSITIONS.get(code)
    if cached is None:
        cached = list(code.co_positions())
        _POSITIONS[code] = cached
    return cached
