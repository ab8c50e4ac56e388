"""Conversions between fxls positions and LSP positions, in one place.

fxls (protocol) positions: lines 1-based, columns 0-based code points.
LSP positions: lines 0-based, characters in the negotiated encoding: UTF-16 code units
(the default), UTF-8 bytes or UTF-32 code points.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from lsprotocol import types

from fxls.lsp.features import markdown as md
from fxls.protocol.catalogue import docs_url
from fxls.protocol.model import Diagnostic, Span

Encoding = str
UTF8 = types.PositionEncodingKind.Utf8.value
UTF16 = types.PositionEncodingKind.Utf16.value
UTF32 = types.PositionEncodingKind.Utf32.value

LineMapper = Callable[[int], "int | None"]
"""Line of the analysed text -> line of the current text (1-based), None when edited."""
Elsewhere = Callable[[int], "tuple[str, Sequence[str], LineMapper] | None"]
"""Line of the analysed text that is not in the URI being published -> the URI it is in (a
notebook's other cell), that URI's current lines and the mapper to them; None when nowhere."""

_SEVERITY = {
    "error": types.DiagnosticSeverity.Error,
    "warning": types.DiagnosticSeverity.Warning,
    "information": types.DiagnosticSeverity.Information,
    "hint": types.DiagnosticSeverity.Hint,
}
_UNNECESSARY = {"FX302"}
MAX_MESSAGE = 4_000
"""Longest diagnostic message sent to the client (worker text is clipped to this)."""
_MAX_RELATED = 20


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


@dataclass(frozen=True)
class Published:
    """Where diagnostics are published: a URI, its current lines, the map of lines of the
    analysed text to them, and where lines the URI does not show are (``elsewhere``: the
    other cells of a notebook; related information there is placed on them)."""

    uri: str
    lines: Sequence[str]
    mapper: LineMapper = _identity
    elsewhere: Elsewhere | None = None


def lsp_diagnostic(
    diagnostic: Diagnostic,
    uri: str,
    lines: Sequence[str],
    encoding: Encoding,
    mapper: LineMapper = _identity,
) -> types.Diagnostic | None:
    """A protocol diagnostic -> an LSP diagnostic on the current text (None if its line
    was edited since the analysis)."""
    return diagnostic_on(diagnostic, Published(uri, lines, mapper), encoding)


def diagnostic_on(
    diagnostic: Diagnostic, where: Published, encoding: Encoding
) -> types.Diagnostic | None:
    """:func:`lsp_diagnostic` on ``where``: related information on lines its URI does not
    show is placed where ``where.elsewhere`` says (another cell of a notebook), else left
    out."""
    rng = lsp_range(diagnostic.span, where.lines, encoding, where.mapper)
    if rng is None:
        return None
    related = []
    for rel in diagnostic.related:
        location = _related_location(rel.span, where, encoding)
        if location is not None:
            message = md.plain(rel.message, md.MAX_VALUE)
            related.append(types.DiagnosticRelatedInformation(location=location, message=message))
            if len(related) >= _MAX_RELATED:
                break
    message = md.plain(diagnostic.message, MAX_MESSAGE, newlines=True)
    if diagnostic.fix:
        message = f"{message}\n\n{md.plain(diagnostic.fix, md.MAX_VALUE, newlines=True)}"
    data = dict(diagnostic.data)
    if diagnostic.fix:
        data.setdefault("fix", diagnostic.fix)
    code = diagnostic.code if md.is_word(diagnostic.code) else md.plain(diagnostic.code, 32)
    href = docs_url(code) if md.is_word(code) else None
    return types.Diagnostic(
        range=rng,
        message=message,
        severity=_SEVERITY.get(diagnostic.severity, types.DiagnosticSeverity.Error),
        code=code,
        code_description=types.CodeDescription(href=href) if href else None,
        source="fxls",
        related_information=related or None,
        tags=[types.DiagnosticTag.Unnecessary] if code in _UNNECESSARY else None,
        data=data or None,
    )


def _related_location(span: Span, where: Published, encoding: Encoding) -> types.Location | None:
    """Where related information is: in ``where``'s URI, else where ``elsewhere`` places it."""
    rng = lsp_range(span, where.lines, encoding, where.mapper)
    if rng is not None:
        return types.Location(uri=where.uri, range=rng)
    place = where.elsewhere(span.line) if where.elsewhere is not None else None
    if place is None:
        return None
    other_uri, other_lines, other_mapper = place
    rng = lsp_range(span, other_lines, encoding, other_mapper)
    return None if rng is None else types.Location(uri=other_uri, range=rng)


_BLOCK = 1 << 16


def _nth_newline_start(text: str, line: int) -> int | None:
    """Offset where 0-based ``line`` starts when ``\\n`` is the only terminator that
    matters; None past the last line. Counts newlines a block at a time (C speed), then walks
    the last block: no Python loop over characters or over every line."""
    if line <= 0:
        return 0
    pos, remaining, size = 0, line, len(text)
    while pos < size:
        end = min(pos + _BLOCK, size)
        count = text.count("\n", pos, end)
        if count >= remaining:
            index = pos - 1
            for _ in range(remaining):
                index = text.find("\n", index + 1, end)
            return index + 1
        remaining -= count
        pos = end
    return None


def _walk_line_bounds(text: str, line: int) -> tuple[int, int] | None:
    """Like :func:`_line_bounds` for texts with lone ``\\r`` terminators: one step per line,
    each terminator found with ``str.find``."""
    size = len(text)
    start, current = 0, 0
    next_lf, next_cr = text.find("\n"), text.find("\r")
    while True:
        lf = next_lf if next_lf != -1 else size
        cr = next_cr if next_cr != -1 else size
        end = min(lf, cr)
        if current == line:
            return start, end
        if end == size:
            return None
        start = end + 2 if end == cr and cr + 1 == lf else end + 1
        current += 1
        if next_lf != -1 and next_lf < start:
            next_lf = text.find("\n", start)
        if next_cr != -1 and next_cr < start:
            next_cr = text.find("\r", start)


def _line_bounds(text: str, line: int) -> tuple[int, int] | None:
    """(start offset, end offset without the terminator) of 0-based ``line``, None past the
    last line. LSP line terminators are ``\\n``, ``\\r\\n`` and ``\\r`` only (not the
    other breaks ``str.splitlines`` knows)."""
    crs = text.count("\r")
    if crs and crs != text.count("\r\n"):
        return _walk_line_bounds(text, line)
    start = _nth_newline_start(text, line)
    if start is None:
        return None
    end = text.find("\n", start)
    if end == -1:
        return start, len(text)
    if crs and end > start and text[end - 1] == "\r":
        end -= 1
    return start, end


def _offset(text: str, position: types.Position, enc: str) -> int:
    bounds = _line_bounds(text, max(position.line, 0))
    if bounds is None:
        return len(text)
    start, end = bounds
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
    start = _offset(text, change.range.start, encoding)
    end = _offset(text, change.range.end, encoding)
    if end < start:
        start, end = end, start
    return text[:start] + change.text + text[end:]
