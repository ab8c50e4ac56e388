"""Diagnostics of one analysis as LSP diagnostics on the current text."""

from __future__ import annotations

from collections.abc import Sequence

from lsprotocol import types

from fxls.lsp.features.convert import (
    Encoding,
    LineMapper,
    Published,
    diagnostic_on,
    lsp_diagnostic,
)
from fxls.protocol.catalogue import FX407
from fxls.protocol.model import Diagnostic, Span


def lsp_diagnostics(
    diagnostics: Sequence[Diagnostic],
    uri: str,
    current_lines: Sequence[str],
    encoding: Encoding,
    mapper: LineMapper,
) -> list[types.Diagnostic]:
    """All diagnostics whose lines are unchanged since the analysis, shifted to where they
    are now, deduplicated."""
    return diagnostics_on(diagnostics, Published(uri, current_lines, mapper), encoding)


def diagnostics_on(
    diagnostics: Sequence[Diagnostic], where: Published, encoding: Encoding
) -> list[types.Diagnostic]:
    """:func:`lsp_diagnostics` on ``where`` (related information in other cells included:
    see :func:`fxls.lsp.features.convert.diagnostic_on`)."""
    out: list[types.Diagnostic] = []
    seen: set[tuple[str, str, int, int, int, int]] = set()
    for diagnostic in diagnostics:
        converted = diagnostic_on(diagnostic, where, encoding)
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


def too_large(size: int, limit: int, notebook: bool = False) -> types.Diagnostic:
    """FX407 at the start of a document fxls does not analyse (an empty range: measuring the
    first line of a huge one-line file would cost as much as parsing it)."""
    large = FX407(Span(1, 0, 1, 0), size=f"{size:,}", limit=f"{limit:,}")
    found = large.diagnostic(notebook=notebook)
    converted = lsp_diagnostic(found, "", [""], "utf-16")
    assert converted is not None
    return converted
