"""Hover: what a call in ``forward`` does (named arguments, shapes) and class summaries.

Pure: works on protocol objects (``ModuleResult``/``NodeInfo``) and the analysed text, in
protocol positions (1-based lines, code-point columns).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from lsprotocol import types

from fxls.features import markdown as md
from fxls.features.convert import Encoding, LineMapper, lsp_range, span_contains
from fxls.features.format import value_md, values_md
from fxls.protocol.model import ModuleResult, NodeInfo, Span
from fxls.render import count_text, display_name, name_pattern

_CLASS_RE = re.compile(r"^(\s*class\s+)([A-Za-z_]\w*)")
_MAX_LISTED = 20


@dataclass
class HoverText:
    markdown: str
    span: Span


def _size(span: Span) -> tuple[int, int]:
    return span.end_line - span.line, (span.end_col - span.col) if span.end_line == span.line else 0


def _candidate(node: NodeInfo, line: int, col: int) -> Span | None:
    best: Span | None = None
    for span in (node.span, node.call_site):
        contains = span is not None and span_contains(span, line, col)
        if contains and (best is None or _size(span) < _size(best)):  # type: ignore[arg-type]
            best = span
    return best


def _outputs(node: NodeInfo, *, cell: bool = False) -> str:
    return values_md(node.outputs, cell=cell) or "?"


def _table(header: str, rows: Sequence[str], more: str, max_rows: int = md.MAX_ROWS) -> str:
    """A Markdown table of at most ``max_rows`` rows and MAX_MARKDOWN / 2 characters."""
    body = md.join_blocks(rows, "\n", md.MAX_MARKDOWN // 2, more, max_count=max_rows)
    return header + ("\n" + body if body else "")


def _paragraphs(parts: Sequence[str]) -> str:
    return md.join_blocks(parts, "\n\n", md.MAX_MARKDOWN)


def _header(node: NodeInfo) -> str:
    what = node.module_type if node.op == "call_module" and node.module_type else node.target
    return f"{md.word(display_name(node))} · {md.word(node.op)} · {md.word(what)}"


def node_markdown(node: NodeInfo, module: ModuleResult) -> str:
    """Markdown for one node: header, argument table, output."""
    parts = [_header(node)]
    if node.args:
        by_name = {n.name: n for n in module.nodes}
        rows = []
        for arg in node.args:
            prefix = {"var_positional": "\\*", "var_keyword": "\\*\\*"}.get(arg.kind, "")
            value = md.cell(arg.value) + (" · default" if arg.default else "")
            source = by_name.get(arg.node) if arg.node else None
            shape = values_md(source.outputs, cell=True) if source is not None else ""
            rows.append(f"| {prefix}{md.cell(arg.name)} | {value} | {shape} |")
        header = "| argument | value | shape |\n| --- | --- | --- |"
        parts.append(_table(header, rows, "| … {n} more | | |"))
    if node.outputs:
        parts.append(f"→ {_outputs(node)}")
    if node.signature == "approximate":
        parts.append("*argument names are approximate*")
    return _paragraphs(parts)


def loop_markdown(nodes: Sequence[NodeInfo], module: ModuleResult) -> str:
    """Markdown for the same line run several times (a loop over blocks)."""
    first, last = nodes[0], nodes[-1]
    text = node_markdown(first, module)
    header, _, rest = text.partition("\n\n")
    summary = f"×{len(nodes)}: {md.word(display_name(first))} … {md.word(display_name(last))}"
    out_first, out_last = _outputs(first), _outputs(last)
    lines = [header, summary]
    body = rest
    if out_first != out_last:
        body = body.replace(f"→ {out_first}", f"→ {out_first} … {out_last}")
    return _paragraphs([*lines, body] if body else lines)


def iteration_prefix(path: str) -> str | None:
    """``h.3`` for ``h.3.attn.proj``: the path up to its first all-digit part (not the
    first part), or None. One pass over the dotted parts."""
    parts = path.split(".")
    for index in range(1, len(parts)):
        if parts[index].isdecimal():
            return ".".join(parts[: index + 1])
    return None


def _iterations(nodes: Sequence[NodeInfo]) -> list[str] | None:
    """Distinct ``h.0``, ``h.1`` ... prefixes when every node belongs to one loop iteration."""
    seen: list[str] = []
    known: set[str] = set()
    for node in nodes:
        prefix = iteration_prefix(node.module_path or "")
        if prefix is None:
            return None
        if prefix not in known:
            known.add(prefix)
            seen.append(prefix)
    return seen if len(seen) > 1 else None


def group_markdown(nodes: Sequence[NodeInfo]) -> str:
    """Markdown for a call whose nodes are in a helper or submodule (hovered at the call site)."""
    iterations = _iterations(nodes)
    head = f"{len(nodes)} nodes"
    listed = list(nodes)
    if iterations is not None:
        head = f"×{len(iterations)}: {md.word(iterations[0])} … {md.word(iterations[-1])}"
        prefix = iteration_prefix(nodes[0].module_path or "") or ""
        listed = [
            n
            for n in nodes
            if (n.module_path or "") == prefix or (n.module_path or "").startswith(prefix + ".")
        ]
        head += f" · {len(listed)} nodes each"
    rows = [
        f"| {md.cell(display_name(node))} | {md.cell(node.op)} | {md.cell(node.target)} "
        f"| {_outputs(node, cell=True)} |"
        for node in listed
    ]
    header = "| node | op | target | output |\n| --- | --- | --- | --- |"
    table = _table(header, rows, "| … {n} more | | | |", _MAX_LISTED)
    return _paragraphs([head, table, f"→ {_outputs(nodes[-1])}"])


def class_name_span(module: ModuleResult, lines: Sequence[str]) -> Span | None:
    """The span of the class name on its ``class`` line."""
    if not 1 <= module.line <= len(lines):
        return None
    match = _CLASS_RE.match(lines[module.line - 1])
    if match is None or match.group(2) != module.name:
        return None
    return Span(module.line, match.start(2), module.line, match.end(2))


def class_markdown(
    module: ModuleResult, *, isolation: Sequence[str] = (), duration_s: float | None = None
) -> str:
    """Markdown summary of a module class."""
    status = md.word(module.status)
    if module.strategy not in ("none", ""):
        status = f"{status} ({md.word(module.strategy)})"
    rows = []
    if module.params is not None:
        rows.append(f"| parameters | {count_text(module.params)} ({module.params:,}) |")
    if module.buffers is not None:
        rows.append(f"| buffers | {module.buffers:,} |")
    if module.nodes:
        kinds: dict[str, int] = {}
        for node in module.nodes:
            kinds[node.op] = kinds.get(node.op, 0) + 1
        by_kind = " · ".join(f"{n} {md.cell(op)}" for op, n in list(kinds.items())[:10])
        rows.append(f"| nodes | {len(module.nodes)}: {by_kind} |")
    for index, value in enumerate(module.inputs):
        name = module.input_names[index] if index < len(module.input_names) else f"#{index}"
        assumed = index < len(module.inputs_assumed) and module.inputs_assumed[index]
        how = "assumed" if assumed else "declared"
        rows.append(
            f"| input {md.code(name, md.MAX_CELL, cell=True)} "
            f"| {value_md(value, cell=True)} ({how}) |"
        )
    if module.outputs:
        rows.append(f"| output | {values_md(module.outputs, cell=True)} |")
    capture = md.cell(module.strategy) if module.strategy else "none"
    if module.build:
        capture += f", built on {md.cell(module.build)}"
    rows.append(f"| capture | {capture} |")
    if isolation:
        rows.append(f"| isolation | {', '.join(md.cell(layer) for layer in isolation)} |")
    seconds = sum(module.timings.values()) if module.timings else duration_s
    if seconds is not None:
        rows.append(f"| capture time | {seconds:.2f} s |")
    parts = [
        f"{md.word(module.name)} · nn.Module · {status}",
        _table("| | |\n| --- | --- |", rows, "| … {n} more | |"),
    ]
    if module.error is not None:
        err = module.error
        error = md.code(f"{err.type}: {err.message}", md.MAX_VALUE // 4)
        parts.append(f"failed in {md.word(err.phase)}: {error}")
    return _paragraphs(parts)


def hover_text(
    modules: Sequence[ModuleResult],
    lines: Sequence[str],
    line: int,
    col: int,
    *,
    isolation: Sequence[str] = (),
    duration_s: float | None = None,
) -> HoverText | None:
    """The hover at a position of the analysed text, or None."""
    for module in modules:
        name_span = class_name_span(module, lines)
        if name_span is not None and span_contains(name_span, line, col):
            md = class_markdown(module, isolation=isolation, duration_s=duration_s)
            return HoverText(md, name_span)
    best: tuple[tuple[int, int], Span, ModuleResult] | None = None
    for module in modules:
        for node in module.nodes:
            span = _candidate(node, line, col)
            if span is not None and (best is None or _size(span) < best[0]):
                best = (_size(span), span, module)
    if best is None:
        return None
    _, span, module = best
    group = [n for n in module.nodes if _candidate(n, line, col) == span]
    if len(group) == 1:
        return HoverText(node_markdown(group[0], module), span)
    if len({name_pattern(n) for n in group}) == 1:
        return HoverText(loop_markdown(group, module), span)
    return HoverText(group_markdown(group), span)


def lsp_hover(
    text: HoverText | None,
    current_lines: Sequence[str],
    encoding: Encoding,
    mapper: LineMapper,
    *,
    note: str | None = None,
) -> types.Hover | None:
    """HoverText -> an LSP Hover on the current text (None if its lines were edited)."""
    if text is None:
        return None
    rng = lsp_range(text.span, current_lines, encoding, mapper)
    if rng is None:
        return None
    value = text.markdown if note is None else f"{text.markdown}\n\n*{md.plain(note)}*"
    return types.Hover(
        contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value=value), range=rng
    )
