"""Diagnostics of one analysis as LSP diagnostics on the current text."""

from __future__ import annotations

from collections.abc import Sequence

from lsprotocol import types

from fxls.features.convert import Encoding, LineMapper, lsp_diagnostic
from fxls.protocol.model import Diagnostic


def lsp_diagnostics(
    diagnostics: Sequence[Diagnostic],
    uri: str,
    current_lines: Sequence[str],
    encoding: Encoding,
    mapper: LineMapper,
) -> list[types.Diagnostic]:
    """All diagnostics whose lines are unchanged since the analysis, shifted to where they
    are now, deduplicated."""
    out: list[types.Diagnostic] = []
    seen: set[tuple[str, str, int, int, int, int]] = set()
    for diagnostic in diagnostics:
        converted = lsp_diagnostic(diagnostic, uri, current_lines, encoding, mapper)
        if converted is None:
            continue
        r = converted.range
        key = (
            diagnostic.code,
            diagnostic.message,
            r.start.line,
            r.start.character,
            r.end.line,
            r.end.character,
        )
        if key not in seen:
            seen.add(key)
            out.append(converted)
    return out
