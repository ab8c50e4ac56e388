"""Conversions between fxls positions and LSP positions, in one place.

fxls (protocol) positions: lines 1-based, columns 0-based code points.
LSP positions: lines 0-based, characters in the negotiated encoding: UTF-16 code units
(the default), UTF-8 bytes or UTF-32 code points.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from lsprotocol import types

from fxls.protocol.catalogue import docs_url
from fxls.protocol.model import Diagnostic, Span

Encoding = str
UTF8 = types.PositionEncodingKind.Utf8.value
UTF16 = types.PositionEncodingKind.Utf16.value
UTF32 = types.PositionEncodingKind.Utf32.value

LineMapper = Callable[[int], "int | None"]
"""Line of the analysed text -> line of the current text (1-based), None when edited."""

_SEVERITY = {
    "error": types.DiagnosticSeverity.Error,
    "warning": types.DiagnosticSeverity.Warning,
    "information": types.DiagnosticSeverity.Information,
    "hint": types.DiagnosticSeverity.Hint,
}
_UNNECESSARY = {"FX302"}


def _identity(line: int) -> int | None:
    return line


def encoding_name(encoding: object) -> Encoding:
    """A PositionEncodingKind or string -> ``"utf-8"``, ``"utf-16"`` or ``"utf-32"``."""
    value = getattr(encoding, "value", encoding)
    return value if value in (UTF8, UTF16, UTF32) else UTF16


def units(text: str, encoding: Encoding) -> int:
    """Length of ``text`` in the encoding's code units."""
    if encoding == UTF32:
        return len(text)
    if encoding == UTF8:
        return len(text.encode("utf-8"))
    return len(text) + sum(1 for ch in text if ord(ch) > 0xFFFF)


def to_units(line_text: str, col: int, encoding: Encoding) -> int:
    """A code-point column -> a character offset in the encoding (clamped to the line)."""
    col = max(0, min(col, len(line_text)))
    return units(line_text[:col], encoding)


def from_units(line_text: str, character: int, encoding: Encoding) -> int:
    """A character offset in the encoding -> a code-point column (clamped to the line)."""
    if encoding == UTF32:
        return max(0, min(character, len(line_text)))
    count = 0
    for index, ch in enumerate(line_text):
        width = len(ch.encode("utf-8")) if encoding == UTF8 else (2 if ord(ch) > 0xFFFF else 1)
        if count + width > character:
            return index
        count += width
    return len(line_text)


def _line(lines: Sequence[str], line: int) -> str:
    return lines[line - 1] if 1 <= line <= len(lines) else ""


def lsp_position(line: int, col: int, lines: Sequence[str], encoding: Encoding) -> types.Position:
    """A protocol position (1-based line, code-point column) -> an LSP position."""
    line = max(1, min(line, max(len(lines), 1)))
    return types.Position(line=line - 1, character=to_units(_line(lines, line), col, encoding))


def position_from_lsp(
    position: types.Position, lines: Sequence[str], encoding: Encoding
) -> tuple[int, int]:
    """An LSP position -> (1-based line, code-point column)."""
    line = position.line + 1
    return line, from_units(_line(lines, line), position.character, encoding)


def lsp_range(
    span: Span,
    lines: Sequence[str],
    encoding: Encoding,
    mapper: LineMapper = _identity,
) -> types.Range | None:
    """A protocol span -> an LSP range on the current text; None if its lines were edited.

    ``lines`` is the current text; ``mapper`` maps the span's lines (of the analysed text)
    to the current text. A span on unchanged lines has the same columns in both texts.
    """
    start = mapper(span.line)
    end = mapper(span.end_line)
    if start is None or end is None:
        return None
    if end < start or (end == start and span.end_col < span.col):
        end, end_col = start, span.col
    else:
        end_col = span.end_col
    return types.Range(
        start=lsp_position(start, span.col, lines, encoding),
        end=lsp_position(end, end_col, lines, encoding),
    )


def span_contains(span: Span, line: int, col: int) -> bool:
    """Whether a protocol position lies in a span (end inclusive, so the cursor after a
    call still hovers it)."""
    if line < span.line or line > span.end_line:
        return False
    if line == span.line and col < span.col:
        return False
    return not (line == span.end_line and col > span.end_col)


def lsp_diagnostic(
    diagnostic: Diagnostic,
    uri: str,
    lines: Sequence[str],
    encoding: Encoding,
    mapper: LineMapper = _identity,
) -> types.Diagnostic | None:
    """A protocol diagnostic -> an LSP diagnostic on the current text (None if its line
    was edited since the analysis)."""
    rng = lsp_range(diagnostic.span, lines, encoding, mapper)
    if rng is None:
        return None
    related = []
    for rel in diagnostic.related:
        rel_range = lsp_range(rel.span, lines, encoding, mapper)
        if rel_range is not None:
            related.append(
                types.DiagnosticRelatedInformation(
                    location=types.Location(uri=uri, range=rel_range), message=rel.message
                )
            )
    message = diagnostic.message
    if diagnostic.fix:
        message = f"{message}\n\n{diagnostic.fix}"
    data = dict(diagnostic.data)
    if diagnostic.fix:
        data.setdefault("fix", diagnostic.fix)
    href = docs_url(diagnostic.code)
    return types.Diagnostic(
        range=rng,
        message=message,
        severity=_SEVERITY.get(diagnostic.severity, types.DiagnosticSeverity.Error),
        code=diagnostic.code,
        code_description=types.CodeDescription(href=href) if href else None,
        source="fxls",
        related_information=related or None,
        tags=[types.DiagnosticTag.Unnecessary] if diagnostic.code in _UNNECESSARY else None,
        data=data or None,
    )


def _line_starts(text: str) -> list[tuple[int, int]]:
    """(start offset, end offset without the terminator) of each line; LSP line terminators
    are ``\\n``, ``\\r\\n`` and ``\\r`` only (not the other breaks ``str.splitlines`` knows)."""
    out = []
    start = 0
    index = 0
    size = len(text)
    while index < size:
        ch = text[index]
        if ch == "\n" or ch == "\r":
            out.append((start, index))
            index += 2 if ch == "\r" and text.startswith("\n", index + 1) else 1
            start = index
        else:
            index += 1
    out.append((start, size))
    return out


def _offset(lines: list[tuple[int, int]], text: str, position: types.Position, enc: str) -> int:
    if position.line >= len(lines):
        return len(text)
    start, end = lines[max(position.line, 0)]
    return start + from_units(text[start:end], max(position.character, 0), enc)


def apply_change(
    text: str, change: types.TextDocumentContentChangeEvent, encoding: Encoding
) -> str:
    """Apply one ``didChange`` content change to ``text`` the way the LSP specification says.

    A character past the end of its line means the end of the line (never the next line);
    a line past the end of the text means the end of the text.
    """
    if not isinstance(change, types.TextDocumentContentChangePartial):
        return change.text
    lines = _line_starts(text)
    start = _offset(lines, text, change.range.start, encoding)
    end = _offset(lines, text, change.range.end, encoding)
    if end < start:
        start, end = end, start
    return text[:start] + change.text + text[end:]
