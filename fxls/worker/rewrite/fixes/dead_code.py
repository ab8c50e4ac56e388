"""FX302: delete a statement of ``forward`` whose every graph node is unused and pure.

The statement is deleted only when every node traced from it (matched by the call site in the
class's own ``forward``) is one ``eliminate_dead_code`` would remove, none works in place, the
names it binds are not read afterwards, and it calls nothing with an effect outside the graph
(``print``, logging). Verified like every code change: the edited module computes the same.
"""

from __future__ import annotations

import ast

import torch.fx

from fxls.protocol.model import FixRequest
from fxls.protocol.positions import SourceText, contains
from fxls.worker.capture.spans import CALL_SITE_KEY, SPAN_KEY
from fxls.worker.capture.trace import graphcheck
from fxls.worker.rewrite import text
from fxls.worker.rewrite.base import Original, Proposal, Unavailable

EFFECTFUL_CALLS = frozenset(
    {"print", "open", "exec", "eval", "setattr", "delattr", "input", "breakpoint", "next"}
)
EFFECTFUL_ROOTS = frozenset({"logging", "logger", "log", "warnings", "os", "sys", "wandb"})


def propose(original: Original, fix: FixRequest) -> Proposal:
    capture = original.capture(fix.cls)
    traced = capture.traced
    if traced is None or traced.gm is None:
        raise Unavailable("no FX graph of this class (unused code is removed from FX graphs)")
    forward = capture.forward_def
    if forward is None:
        raise Unavailable("`forward` is not in this file")
    source = original.doc.source
    stmt, block, ancestors = text.enclosing_statement(original.tree, source, fix.span)
    if text.enclosing_function(ancestors) is not forward:
        raise Unavailable("the computation is not written in this class's `forward`")
    _check_statement(stmt, forward, ancestors)
    _check_nodes(traced.gm.graph, source.node_span(stmt), source)
    shown = text.segment(source, stmt).strip().splitlines()[0]
    if len(shown) > 50:
        shown = shown[:49] + "…"
    edit = text.delete_statement(source, stmt, block)
    return Proposal(f"Remove unused `{shown}`", [edit], check="numeric")


def _check_statement(stmt: ast.stmt, forward: ast.AST, ancestors: list[ast.AST]) -> None:
    if isinstance(stmt, ast.Assign):
        targets = stmt.targets
        value: ast.expr = stmt.value
    elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
        targets, value = [stmt.target], stmt.value
    elif isinstance(stmt, ast.Expr):
        targets, value = [], stmt.value
    else:
        raise Unavailable("only assignments and expression statements are removed")
    bound: list[str] = []
    for target in targets:
        names = text.bound_names(target)
        if names is None:
            raise Unavailable("the statement stores into an attribute or item (a side effect)")
        bound.extend(names)
    for call in (n for n in ast.walk(value) if isinstance(n, ast.Call)):
        root = call.func
        while isinstance(root, (ast.Attribute, ast.Call, ast.Subscript)):
            root = root.value if not isinstance(root, ast.Call) else root.func
        if isinstance(root, ast.Name) and (
            (root.id in EFFECTFUL_CALLS and isinstance(call.func, ast.Name))
            or root.id in EFFECTFUL_ROOTS
        ):
            raise Unavailable(f"`{root.id}` may do something besides computing a value")
    if any(
        isinstance(n, (ast.NamedExpr, ast.Yield, ast.YieldFrom, ast.Await)) for n in ast.walk(value)
    ):
        raise Unavailable("the expression binds or yields")
    in_loop = any(isinstance(a, (ast.For, ast.While, ast.AsyncFor)) for a in ancestors)
    end = (stmt.end_lineno or stmt.lineno, stmt.end_col_offset or 0)
    for node in ast.walk(forward):
        if not (isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)):
            continue
        if node.id not in bound:
            continue
        if in_loop or (node.lineno, node.col_offset) >= end:
            raise Unavailable(f"`{node.id}` is read later in `forward`")


def _check_nodes(graph: torch.fx.Graph, stmt_span: object, source: SourceText) -> None:
    dead = set(graphcheck.unused_nodes(graph))
    inside = [
        n
        for n in graph.nodes
        if n.op not in ("placeholder", "output")
        and (n.meta.get(CALL_SITE_KEY) or n.meta.get(SPAN_KEY)) is not None
        and contains(stmt_span, n.meta.get(CALL_SITE_KEY) or n.meta[SPAN_KEY])  # type: ignore[arg-type]
    ]
    if not inside:
        raise Unavailable("no traced operation comes from this statement")
    used = [n for n in inside if n not in dead]
    if used:
        raise Unavailable(f"`{used[0].name}` of this statement is used")
    for n in inside:
        if graphcheck.works_in_place(n):
            name = n.target if isinstance(n.target, str) else getattr(n.target, "__name__", "")
            raise Unavailable(f"`{name}` works in place")
