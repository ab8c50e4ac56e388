"""Hover: what a call in ``forward`` does (named arguments, shapes) and class summaries.

Pure: works on protocol objects (``ModuleResult``/``NodeInfo``) and the analysed text, in
protocol positions (1-based lines, code-point columns).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from lsprotocol import types

from fxls.features.convert import Encoding, LineMapper, lsp_range, span_contains
from fxls.features.format import md_cell, md_code_brackets
from fxls.protocol.model import ModuleResult, NodeInfo, Span
from fxls.render import count_text, display_name, name_pattern, value_text, values_text

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


def _outputs(node: NodeInfo) -> str:
    return values_text(node.outputs) or "?"


def node_markdown(node: NodeInfo, module: ModuleResult) -> str:
    """Markdown for one node: header, argument table, output."""
    what = node.module_type if node.op == "call_module" and node.module_type else node.target
    parts = [f"{display_name(node)} · {node.op} · {what}"]
    if node.args:
        by_name = {n.name: n for n in module.nodes}
        rows = ["| argument | value | shape |", "| --- | --- | --- |"]
        for arg in node.args:
            name = f"*{arg.name}" if arg.kind == "var_positional" else arg.name
            if arg.kind == "var_keyword":
                name = f"**{arg.name}"
            value = f"{arg.value} · default" if arg.default else arg.value
            source = by_name.get(arg.node) if arg.node else None
            shape = values_text(source.outputs) if source is not None else ""
            rows.append(f"| {md_cell(name)} | {md_cell(value)} | {md_cell(shape)} |")
        parts.append("\n".join(rows))
    if node.outputs:
        parts.append(f"→ {_outputs(node)}")
    if node.signature == "approximate":
        parts.append("*argument names are approximate*")
    return "\n\n".join(parts)


def loop_markdown(nodes: Sequence[NodeInfo], module: ModuleResult) -> str:
    """Markdown for the same line run several times (a loop over blocks)."""
    first, last = nodes[0], nodes[-1]
    text = node_markdown(first, module)
    header, _, rest = text.partition("\n\n")
    summary = f"×{len(nodes)}: {display_name(first)} … {display_name(last)}"
    out_first, out_last = _outputs(first), _outputs(last)
    lines = [header, summary]
    body = rest
    if out_first != out_last:
        body = body.replace(f"→ {out_first}", f"→ {out_first} … {out_last}")
    return "\n\n".join([*lines, body] if body else lines)


_ITERATION = re.compile(r"^(.*?\.\d+)(?:\.|$)")


def _iterations(nodes: Sequence[NodeInfo]) -> list[str] | None:
    """Distinct ``h.0``, ``h.1`` ... prefixes when every node belongs to one loop iteration."""
    seen: list[str] = []
    for node in nodes:
        match = _ITERATION.match(node.module_path or "")
        if match is None:
            return None
        if match.group(1) not in seen:
            seen.append(match.group(1))
    return seen if len(seen) > 1 else None


def group_markdown(nodes: Sequence[NodeInfo]) -> str:
    """Markdown for a call whose nodes are in a helper or submodule (hovered at the call site)."""
    iterations = _iterations(nodes)
    head = f"{len(nodes)} nodes"
    listed = list(nodes)
    if iterations is not None:
        head = f"×{len(iterations)}: {iterations[0]} … {iterations[-1]}"
        first = _ITERATION.match(nodes[0].module_path or "")
        prefix = first.group(1) if first else ""
        listed = [
            n
            for n in nodes
            if (n.module_path or "") == prefix or (n.module_path or "").startswith(prefix + ".")
        ]
        head += f" · {len(listed)} nodes each"
    rows = ["| node | op | target | output |", "| --- | --- | --- | --- |"]
    for node in listed[:_MAX_LISTED]:
        rows.append(
            f"| {md_cell(display_name(node))} | {node.op} | {md_cell(node.target)} "
            f"| {md_cell(_outputs(node))} |"
        )
    if len(listed) > _MAX_LISTED:
        rows.append(f"| … {len(listed) - _MAX_LISTED} more | | | |")
    return "\n\n".join([head, "\n".join(rows), f"→ {_outputs(nodes[-1])}"])


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
    status: str = module.status
    if module.strategy not in ("none", ""):
        status = f"{status} ({module.strategy})"
    rows = ["| | |", "| --- | --- |"]
    if module.params is not None:
        rows.append(f"| parameters | {count_text(module.params)} ({module.params:,}) |")
    if module.buffers is not None:
        rows.append(f"| buffers | {module.buffers:,} |")
    if module.nodes:
        kinds: dict[str, int] = {}
        for node in module.nodes:
            kinds[node.op] = kinds.get(node.op, 0) + 1
        by_kind = " · ".join(f"{n} {op}" for op, n in kinds.items())
        rows.append(f"| nodes | {len(module.nodes)}: {by_kind} |")
    for index, value in enumerate(module.inputs):
        name = module.input_names[index] if index < len(module.input_names) else f"#{index}"
        assumed = index < len(module.inputs_assumed) and module.inputs_assumed[index]
        how = "assumed" if assumed else "declared"
        rows.append(f"| input `{md_cell(name)}` | {md_cell(value_text(value))} ({how}) |")
    if module.outputs:
        rows.append(f"| output | {md_cell(values_text(module.outputs))} |")
    capture = module.strategy if module.strategy else "none"
    if module.build:
        capture += f", built on {module.build}"
    rows.append(f"| capture | {capture} |")
    if isolation:
        rows.append(f"| isolation | {', '.join(isolation)} |")
    seconds = sum(module.timings.values()) if module.timings else duration_s
    if seconds is not None:
        rows.append(f"| capture time | {seconds:.2f} s |")
    parts = [f"{module.name} · nn.Module · {status}", "\n".join(rows)]
    if module.error is not None:
        err = module.error
        parts.append(f"failed in {err.phase}: `{err.type}: {md_cell(err.message)[:300]}`")
    return "\n\n".join(parts)


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
    value = text.markdown if note is None else f"{text.markdown}\n\n*{note}*"
    value = md_code_brackets(value)
    return types.Hover(
        contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value=value), range=rng
    )
