"""End-of-line inlay hints: the output shape of each statement in ``forward`` and helpers."""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass

from lsprotocol import types

from fxls.features import markdown as md
from fxls.features.convert import Encoding, LineMapper, units
from fxls.protocol.model import ModuleResult, NodeInfo
from fxls.render import values_text

_SKIP_OPS = {"placeholder", "output", "get_attr"}
_COMPOUND = (
    ast.For,
    ast.AsyncFor,
    ast.While,
    ast.If,
    ast.With,
    ast.AsyncWith,
    ast.Try,
    ast.FunctionDef,
    ast.AsyncFunctionDef,
    ast.ClassDef,
    ast.Match,
)


@dataclass
class ShapeHint:
    line: int
    """Line (1-based, analysed text) the hint is shown at the end of."""
    label: str
    node: str


def statement_ends(source: str) -> dict[int, int]:
    """Line -> last line of the simple statement on it (empty if the text does not parse)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return {}
    ends: dict[int, int] = {}
    for stmt in ast.walk(tree):
        if not isinstance(stmt, ast.stmt):
            continue
        end = stmt.end_lineno or stmt.lineno
        if isinstance(stmt, _COMPOUND):
            body = getattr(stmt, "body", None)
            # the header of a compound statement: `for b in self.blocks(x):`
            if body:
                end = max(stmt.lineno, body[0].lineno - 1)
                for line in range(stmt.lineno, end + 1):
                    ends.setdefault(line, end)
            continue
        for line in range(stmt.lineno, end + 1):
            ends[line] = end
    return ends


def shape_hints(modules: Sequence[ModuleResult], source: str) -> list[ShapeHint]:
    """One hint per statement: the output of its last node (graph order). A call into a
    helper counts for the helper's statement and for the calling statement."""
    ends = statement_ends(source)
    last: dict[int, NodeInfo] = {}
    for module in modules:
        seen: dict[int, NodeInfo] = {}
        for node in module.nodes:
            if node.op in _SKIP_OPS or node.span is None or not node.outputs:
                continue
            spans = [node.span]
            if node.call_site is not None and node.call_site != node.span:
                spans.append(node.call_site)  # `return self.helper(y)` in forward
            for span in spans:
                seen[ends.get(span.end_line, span.end_line)] = node
        for line, node in seen.items():
            last.setdefault(line, node)
    hints = []
    for line in sorted(last):
        node = last[line]
        text = values_text(node.outputs, default_dtype="float32")
        if text:
            label = md.plain(f"▸ {text}", md.MAX_LABEL)
            hints.append(ShapeHint(line=line, label=label, node=node.name))
    return hints


def lsp_inlay_hints(
    hints: Sequence[ShapeHint],
    current_lines: Sequence[str],
    encoding: Encoding,
    mapper: LineMapper,
    visible: types.Range | None = None,
) -> list[types.InlayHint]:
    """ShapeHints -> LSP inlay hints at the end of their (current) lines within ``visible``."""
    out = []
    for hint in hints:
        line = mapper(hint.line)
        if line is None or not 1 <= line <= len(current_lines):
            continue
        if visible is not None and not visible.start.line <= line - 1 <= visible.end.line:
            continue
        text = current_lines[line - 1].rstrip("\r")
        out.append(
            types.InlayHint(
                position=types.Position(line=line - 1, character=units(text, encoding)),
                label=hint.label,
                kind=types.InlayHintKind.Type,
                padding_left=True,
                tooltip=types.MarkupContent(
                    kind=types.MarkupKind.Markdown, value=f"output of {md.code(hint.node)}"
                ),
            )
        )
    return out
