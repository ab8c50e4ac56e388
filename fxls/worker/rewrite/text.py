"""Finding statements and expressions by span, and the edits rewrites make of them.

Every edit touches only the text it must: a deleted statement takes its own lines (or only its
own text when it shares a line), a replaced expression only its span, a directive is one new
line above the class. Columns are code points (``SourceText``), like every span of fxls.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from fxls.protocol.model import Span, TextEdit
from fxls.protocol.positions import SourceText, contains
from fxls.worker.rewrite.base import Unavailable

FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef
_BODIES = ("body", "orelse", "finalbody")


def newline_of(source: str) -> str:
    """The document's line ending (``\\r\\n`` when it uses it, else ``\\n``)."""
    return "\r\n" if "\r\n" in source else "\n"


def class_def(tree: ast.Module, name: str) -> ast.ClassDef:
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    raise Unavailable(f"class `{name}` is not in the file")


def expression_at(
    tree: ast.AST, source: SourceText, span: Span, kinds: tuple[type[ast.AST], ...]
) -> ast.AST:
    """The expression of one of ``kinds`` whose span is exactly ``span``."""
    for node in ast.walk(tree):
        if isinstance(node, kinds) and source.node_span(node) == span:
            return node
    names = " or ".join(k.__name__ for k in kinds)
    raise Unavailable(f"no {names} at {span.line}:{span.col + 1}")


def _blocks(node: ast.AST) -> Iterator[list[ast.stmt]]:
    for name in _BODIES:
        block = getattr(node, name, None)
        if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
            yield block
    for handler in getattr(node, "handlers", []) or []:
        yield handler.body
    for case in getattr(node, "cases", []) or []:
        yield case.body


def enclosing_statement(
    tree: ast.Module, source: SourceText, span: Span
) -> tuple[ast.stmt, list[ast.stmt], list[ast.AST]]:
    """The innermost statement containing ``span``, the block it is in, and its ancestors
    (outermost first)."""
    found: tuple[ast.stmt, list[ast.stmt], list[ast.AST]] | None = None
    stack: list[tuple[ast.AST, list[ast.AST]]] = [(tree, [])]
    while stack:
        node, ancestors = stack.pop()
        for block in _blocks(node):
            for stmt in block:
                if contains(source.node_span(stmt), span):
                    found = (stmt, block, [*ancestors, node])
                    stack.append((stmt, [*ancestors, node]))
    if found is None:
        raise Unavailable(f"no statement at line {span.line}")
    return found


def enclosing_function(ancestors: list[ast.AST]) -> FunctionNode | None:
    for node in reversed(ancestors):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return node
    return None


def replace(source: SourceText, node: ast.AST, text: str) -> TextEdit:
    return TextEdit(source.node_span(node), text)


def segment(source: SourceText, node: ast.AST) -> str:
    return source.text(source.node_span(node))


_SEMI_AFTER = re.compile(r"\s*;[ \t]*")
_SEMI_BEFORE = re.compile(r";[ \t]*$")


def delete_statement(source: SourceText, stmt: ast.stmt, block: list[ast.stmt]) -> TextEdit:
    """Delete ``stmt``: its whole lines when it is alone on them, ``pass`` when it is the only
    statement of its block, else only its own text and one ``;``."""
    span = source.node_span(stmt)
    first, last = source.line(span.line), source.line(span.end_line)
    before, after = first[: span.col], last[span.end_col :]
    alone = not before.strip() and (not after.strip() or after.strip().startswith("#"))
    if len(block) == 1:
        return TextEdit(span, "pass")
    if alone:
        return TextEdit(Span(span.line, 0, span.end_line + 1, 0), "")
    m = _SEMI_AFTER.match(after)
    if m is not None:
        return TextEdit(Span(span.line, span.col, span.end_line, span.end_col + m.end()), "")
    m = _SEMI_BEFORE.search(before)
    if m is not None:
        return TextEdit(Span(span.line, m.start(), span.end_line, span.end_col), "")
    raise Unavailable("the statement shares its line in a way fxls cannot edit")


def header_line(cls: ast.ClassDef) -> int:
    """The first line of a class statement: its first decorator, else ``class``."""
    lines = [d.lineno for d in cls.decorator_list] + [cls.lineno]
    return min(lines)


def insert_directives(
    source: SourceText, tree: ast.Module, cls_name: str, bodies: list[str]
) -> TextEdit:
    """``# fxls: BODY`` lines directly above class ``cls_name`` (after its directives)."""
    cls = class_def(tree, cls_name)
    line = header_line(cls)
    indent = re.match(r"[ \t]*", source.line(line))
    pad = indent.group(0) if indent else ""
    nl = newline_of(source.source)
    text = "".join(f"{pad}# fxls: {body}{nl}" for body in bodies)
    return TextEdit(Span(line, 0, line, 0), text)


_INIT_DIRECTIVE = re.compile(r"^[ \t]*# fxls: init\(")


def ordered(edits: list[TextEdit]) -> list[TextEdit]:
    """Edits in text order; of several directives inserted above one class, ``init`` first."""
    return sorted(
        edits,
        key=lambda e: (e.span.line, e.span.col, 0 if _INIT_DIRECTIVE.match(e.text) else 1),
    )


def loaded_names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def bound_names(target: ast.expr) -> list[str] | None:
    """Names an assignment target binds; None when it stores into an attribute or item."""
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        out: list[str] = []
        for elt in target.elts:
            inner = bound_names(elt.value if isinstance(elt, ast.Starred) else elt)
            if inner is None:
                return None
            out.extend(inner)
        return out
    return None
