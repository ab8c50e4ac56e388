"""Hover on a user pass (``# fxls: pass Class`` above its ``def``): the graph before -> after.

Pure: reads the ``PassResult`` of each class the pass ran on and the diagnostics it caused
(``Diagnostic.data["pass"]``), in protocol positions (1-based lines, code-point columns).
Every name, target and message comes from the worker and passes through
:mod:`fxls.lsp.features.markdown`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from fxls.engine.render import pass_counts
from fxls.lsp.features import markdown as md
from fxls.lsp.features.convert import span_contains
from fxls.lsp.features.hover import HoverText, Style
from fxls.protocol.model import Diagnostic, ModuleResult, PassChange, PassResult, Span

_DEF_RE = re.compile(r"^(\s*(?:async\s+)?def\s+)([A-Za-z_]\w*)")

MAX_CHANGE_ROWS = 30
"""Rows of changes shown per class (the counts cover all of them)."""
MAX_PASS_DIAGNOSTICS = 10


def def_name_span(line: int, function: str, lines: Sequence[str]) -> Span | None:
    """The function's name on its ``def`` line."""
    if not 1 <= line <= len(lines):
        return None
    match = _DEF_RE.match(lines[line - 1])
    if match is None or match.group(2) != function:
        return None
    return Span(line, match.start(2), line, match.end(2))


def pass_at(
    modules: Sequence[ModuleResult], lines: Sequence[str], line: int, col: int
) -> tuple[str, Span, list[tuple[ModuleResult, PassResult]]] | None:
    """The pass whose name is at (line, col), with every class it ran on."""
    found: list[tuple[ModuleResult, PassResult]] = []
    where: tuple[str, Span] | None = None
    for module in modules:
        for result in module.passes:
            if result.line != line:
                continue
            span = def_name_span(result.line, result.function, lines)
            if span is not None and span_contains(span, line, col):
                where = (result.function, span)
                found.append((module, result))
    if where is None:
        return None
    return where[0], where[1], found


def pass_diagnostics(module: ModuleResult, function: str) -> list[Diagnostic]:
    return [d for d in module.diagnostics if d.data.get("pass") == function]


def _seconds(value: float) -> str:
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"


def _change_row(change: PassChange) -> tuple[str, str, str, str]:
    node = change.node if change.by is None else f"{change.node} → {change.by}"
    line = str(change.span.line) if change.span is not None else ""
    return change.kind, node, change.target, line


def _diagnostic_line(d: Diagnostic) -> str:
    return f"{d.code} line {d.span.line}: {d.message}"


def pass_markdown(
    function: str,
    runs: Sequence[tuple[ModuleResult, PassResult]],
    style: Style = "table",
) -> str:
    """The hover of a pass: per class, the counts, the changes and the pass's diagnostics."""
    title = f"{function} · fxls pass"
    if style == "block":
        lines = [title]
        for module, result in runs:
            lines.append("")
            lines.append(f"{module.name} · {result.status} · {pass_counts(result)}")
            if result.message:
                lines.append(f"  {result.message}")
            rows = [_change_row(c) for c in result.changes]
            for kind, node, target, line in rows[:MAX_CHANGE_ROWS]:
                at = f"  (line {line})" if line else ""
                lines.append(f"  {kind:<8} {node}  {target}{at}")
            if len(rows) > MAX_CHANGE_ROWS:
                lines.append(f"  … {len(rows) - MAX_CHANGE_ROWS} more")
            for d in pass_diagnostics(module, function)[:MAX_PASS_DIAGNOSTICS]:
                lines.append(f"  {_diagnostic_line(d)}")
        return md.code_block(lines)
    parts = [f"{md.word(function)} · fxls pass"]
    for module, result in runs:
        # the counts are numbers and words of fxls: nothing to escape
        head = f"on {md.word(module.name)} · {md.text(result.status)} · {pass_counts(result)}"
        if result.duration_s:
            head += f" · {_seconds(result.duration_s)}"
        parts.append(head)
        if result.message:
            parts.append(md.code(result.message))
        rows = [_change_row(c) for c in result.changes]
        if rows:
            table = ["| change | node | target | line |", "| --- | --- | --- | --- |"]
            for kind, node, target, line in rows[:MAX_CHANGE_ROWS]:
                cells = [md.cell(kind), md.cell(node), md.cell(target), md.cell(line)]
                table.append("| " + " | ".join(cells) + " |")
            hidden = len(rows) - MAX_CHANGE_ROWS
            if hidden > 0:
                table.append(f"| … {hidden} more | | | |")
            parts.append(md.join_blocks(table, "\n", md.MAX_MARKDOWN // 2, "| … | | | |"))
        diagnostics = pass_diagnostics(module, function)
        if diagnostics:
            items = [
                f"- {md.word(d.code)} line {d.span.line}: {md.code(d.message)}" for d in diagnostics
            ]
            parts.append(
                md.join_blocks(
                    items,
                    "\n",
                    md.MAX_MARKDOWN // 4,
                    "- … {n} more",
                    max_count=MAX_PASS_DIAGNOSTICS,
                )
            )
    return md.join_blocks(parts, "\n\n", md.MAX_MARKDOWN)


def hover_text(
    modules: Sequence[ModuleResult],
    lines: Sequence[str],
    line: int,
    col: int,
    *,
    style: Style = "table",
) -> HoverText | None:
    """The hover on a pass function's name, or None when (line, col) is not on one."""
    found = pass_at(modules, lines, line, col)
    if found is None:
        return None
    function, span, runs = found
    return HoverText(pass_markdown(function, runs, style), span)
