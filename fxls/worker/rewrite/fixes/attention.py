"""Refactor: hand-written scaled-dot-product attention -> ``F.scaled_dot_product_attention``.

The pattern is matched on the class's FX graph, walking from each softmax over the last
dimension: before it, an optional ``masked_fill(mask, -inf)``, an optional scaling by a number
(``* s`` or ``/ d``, computed from sizes and constants only), and ``q @ k.transpose(-2, -1)``
(or ``torch.matmul``); after it, an optional dropout and ``@ v``. Every intermediate value has
one user. The matched nodes are mapped back to the statements of ``forward`` that produced
them (their call sites); those statements must compute nothing else, and the names they bind
(but the last) must not be read afterwards. A statement between them that is independent of
the attention (``v = self.value(x)`` after the softmax) stays, above the new statement. They
become one statement::

    y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                       dropout_p=self.attn_dropout.p if self.training else 0.0)

``scale=`` is passed unless the scale is the default ``1 / sqrt(k.size(-1))`` (or
``k.shape[-1] ** -0.5``); a mask becomes ``is_causal=True`` when that verifies (a causal tril
buffer), else ``attn_mask=`` (the negated mask: SDPA attends where the mask is True). Dropout
on the weights becomes ``dropout_p``, applied when the original applies it: a dropout module's
``p`` in training and 0 in eval, ``F.dropout``'s ``p`` under its own ``training`` argument.
Verified like every code change, in eval mode, and in training mode too when there is dropout:
with the same seed before each run, SDPA on the CPU draws its dropout mask as ``F.dropout``
does on the attention weights, so both versions compute the same there as well.
"""

from __future__ import annotations

import ast
import math
import operator
import re
from dataclasses import dataclass, field

import torch
import torch.fx
from torch import nn

from fxls.protocol.model import FixRequest, Span, TextEdit
from fxls.protocol.positions import SourceText, contains
from fxls.worker.capture.spans import CALL_SITE_KEY, SPAN_KEY
from fxls.worker.rewrite import text
from fxls.worker.rewrite.base import Original, Proposal, Unavailable
from fxls.worker.rewrite.fixes.assertion import torch_name

_MATMULS = (operator.matmul, torch.matmul)
_SCALES = (operator.mul, operator.truediv)
_SIZE_METHODS = frozenset({"size", "dim"})
_LAST_SIZE = r"\.(?:size\(-1\)|shape\[-1\])"
_DEFAULT_SCALE = re.compile(
    r"^\(?\s*1(?:\.0*)?\s*/\s*(?:math\.sqrt|np\.sqrt|sqrt)\((?P<x>\w+)" + _LAST_SIZE + r"\)\s*\)?$"
    r"|^\(?\s*(?P<y>\w+)" + _LAST_SIZE + r"\s*\*\*\s*-0?\.5\s*\)?$"
)
"""SDPA's default scale, ``1 / sqrt(E)`` with ``E`` the last size of ``k``, as people write
it: ``1.0 / math.sqrt(k.size(-1))``, ``k.shape[-1] ** -0.5``."""


@dataclass
class Match:
    """The nodes of one attention, from ``q @ k^T`` to ``@ v``."""

    scores: torch.fx.Node
    """``q @ k.transpose(-2, -1)``."""
    key_t: torch.fx.Node
    scale: torch.fx.Node | None
    masked: torch.fx.Node | None
    softmax: torch.fx.Node
    dropout: torch.fx.Node | None
    out: torch.fx.Node
    """``attn @ v``."""
    extra: set[torch.fx.Node] = field(default_factory=set)
    """Nodes that only feed the pattern (the mask, the scale from sizes)."""

    def nodes(self) -> list[torch.fx.Node]:
        chain = [self.key_t, self.scores, self.scale, self.masked, self.softmax, self.dropout]
        return [n for n in chain if n is not None] + [self.out]


def _only_user(node: torch.fx.Node) -> torch.fx.Node | None:
    users = list(node.users)
    return users[0] if len(users) == 1 else None


def _is_softmax_last(node: torch.fx.Node, gm: torch.fx.GraphModule) -> bool:
    if node.op == "call_function" and node.target in (
        torch.nn.functional.softmax,
        torch.softmax,
    ):
        dim = node.kwargs.get("dim", node.args[1] if len(node.args) > 1 else None)
        return bool(dim == -1) and node.kwargs.get("dtype") is None
    if node.op == "call_method" and node.target == "softmax":
        dim = node.kwargs.get("dim", node.args[1] if len(node.args) > 1 else None)
        return bool(dim == -1)
    if node.op == "call_module":
        module = gm.get_submodule(str(node.target))
        return isinstance(module, nn.Softmax) and module.dim == -1
    return False


def _is_dropout(node: torch.fx.Node, gm: torch.fx.GraphModule) -> bool:
    if node.op == "call_module":
        return isinstance(gm.get_submodule(str(node.target)), nn.Dropout)
    return node.op == "call_function" and node.target is torch.nn.functional.dropout


def _is_matmul(node: torch.fx.Node) -> bool:
    return (node.op == "call_function" and node.target in _MATMULS) or (
        node.op == "call_method" and node.target == "matmul"
    )


def _is_key_transpose(node: object) -> bool:
    if not isinstance(node, torch.fx.Node) or node.op != "call_method":
        return False
    if node.target == "transpose" and len(node.args) == 3:
        return {node.args[1], node.args[2]} == {-2, -1}
    return False


def _scalar_only(value: object, seen: set[torch.fx.Node]) -> bool:
    """A number computed from sizes and constants (``1.0 / math.sqrt(k.size(-1))``)."""
    if not isinstance(value, torch.fx.Node):
        return isinstance(value, (int, float))
    if value.op == "call_method" and value.target in _SIZE_METHODS:
        seen.add(value)
        return True
    if (
        value.op == "call_function"
        and value.target is getattr
        and len(value.args) == 2
        and value.args[1] in ("shape", "ndim")
    ):
        seen.add(value)  # ``k.shape``, read by ``k.shape[-1]``
        return True
    if value.op == "call_function" and (
        getattr(value.target, "__module__", None) in ("math", "_operator", "operator")
        or value.target in (math.sqrt, operator.getitem)
    ):
        seen.add(value)
        return all(_scalar_only(a, seen) for a in value.args)
    return False


def matches(gm: torch.fx.GraphModule) -> list[Match]:
    """Every attention pattern in ``gm``."""
    found = []
    for softmax in gm.graph.nodes:
        if not _is_softmax_last(softmax, gm):
            continue
        match = _match_at(softmax, gm)
        if match is not None:
            found.append(match)
    return found


def _match_at(softmax: torch.fx.Node, gm: torch.fx.GraphModule) -> Match | None:
    extra: set[torch.fx.Node] = set()
    node = softmax.args[0] if softmax.args else None
    masked = scale = None
    if (
        isinstance(node, torch.fx.Node)
        and node.op == "call_method"
        and node.target == "masked_fill"
    ):
        value = node.args[2] if len(node.args) > 2 else node.kwargs.get("value")
        if not (isinstance(value, float) and math.isinf(value) and value < 0):
            return None
        if _only_user(node) is not softmax:
            return None
        masked, node = node, node.args[0]
    if isinstance(node, torch.fx.Node) and node.op == "call_function" and node.target in _SCALES:
        left, right = node.args[0], node.args[1]
        if node.target is operator.truediv and not isinstance(left, torch.fx.Node):
            return None
        other = right if isinstance(left, torch.fx.Node) and _is_matmul(left) else left
        inner = left if other is right else right
        if not _scalar_only(other, extra) or not isinstance(inner, torch.fx.Node):
            return None
        if _only_user(node) is not (masked or softmax):
            return None
        scale, node = node, inner
    if not (isinstance(node, torch.fx.Node) and _is_matmul(node)):
        return None
    if _only_user(node) is not (scale or masked or softmax):
        return None
    key_t = node.args[1]
    if not _is_key_transpose(key_t) or _only_user(key_t) is not node:  # type: ignore[arg-type]
        return None
    assert isinstance(key_t, torch.fx.Node)
    after = _only_user(softmax)
    dropout = None
    if after is not None and _is_dropout(after, gm):
        dropout, after = after, _only_user(after)
    if after is None or not _is_matmul(after) or after.args[0] is not (dropout or softmax):
        return None
    return Match(node, key_t, scale, masked, softmax, dropout, after, extra)


# ---------------------------------------------------------------------------------------
# Back to the source
# ---------------------------------------------------------------------------------------


def _at(node: torch.fx.Node) -> Span | None:
    span = node.meta.get(CALL_SITE_KEY) or node.meta.get(SPAN_KEY)
    return span if isinstance(span, Span) else None


def _ast_at(tree: ast.AST, src: SourceText, span: Span | None) -> ast.expr:
    if span is None:
        raise Unavailable("a node of the attention has no source position")
    for node in ast.walk(tree):
        if isinstance(node, ast.expr) and src.node_span(node) == span:
            return node
    raise Unavailable(f"no expression at line {span.line} for the attention")


def _operands(node: ast.expr) -> tuple[ast.expr, ast.expr]:
    """The two operands of ``a @ b`` / ``torch.matmul(a, b)`` / ``a.matmul(b)``."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
        return node.left, node.right
    if isinstance(node, ast.Call) and len(node.args) == 2 and not node.keywords:
        return node.args[0], node.args[1]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and len(node.args) == 1:
        return node.func.value, node.args[0]
    raise Unavailable("the matrix product is written in a way fxls does not rewrite")


def _functional(original: Original) -> str:
    for name, value in original.doc.namespace.items():
        if value is torch.nn.functional and name.isidentifier():
            return name
    return f"{torch_name(original)}.nn.functional"


def propose(original: Original, fix: FixRequest) -> Proposal:
    capture = original.capture(fix.cls)
    traced = capture.traced
    if traced is None or traced.gm is None:
        raise Unavailable("no FX graph of this class")
    forward = capture.forward_def
    if forward is None:
        raise Unavailable("`forward` is not in this file")
    src, tree = original.doc.source, original.tree
    found = [
        m for m in matches(traced.gm) if (s := _at(m.softmax)) is not None and contains(fix.span, s)
    ]
    if not found:
        raise Unavailable("no attention pattern (q @ kᵀ, scale, mask, softmax, dropout, @ v) here")
    match = found[0]
    spans = [s for s in (_at(n) for n in match.nodes()) if s is not None]
    first, _, ancestors = text.enclosing_statement(tree, src, spans[0])
    last, block, _ = text.enclosing_statement(tree, src, _at(match.out) or spans[-1])
    if text.enclosing_function(ancestors) is not forward:
        raise Unavailable("the attention is not written in this class's `forward`")
    if first not in block or last not in block:
        raise Unavailable("the attention spans several blocks")
    stmts = block[block.index(first) : block.index(last) + 1]
    out_span = _at(match.out)
    value = getattr(last, "value", None)
    exact = (
        isinstance(last, (ast.Assign, ast.Return))
        and isinstance(value, ast.expr)
        and src.node_span(value) == out_span
        and (isinstance(last, ast.Return) or _single_name(last))
    )
    kept = _check_statements(stmts, match, traced.gm.graph, src, forward, exact)
    lead = f"{last.targets[0].id} = " if isinstance(last, ast.Assign) else "return "  # type: ignore[attr-defined]

    scores = _ast_at(tree, src, _at(match.scores))
    q_ast, kt_ast = _operands(scores)
    if not (
        isinstance(kt_ast, ast.Call)
        and isinstance(kt_ast.func, ast.Attribute)
        and kt_ast.func.attr == "transpose"
    ):
        raise Unavailable("`k` is not transposed with `.transpose(-2, -1)` in the product")
    q, k = text.segment(src, q_ast), text.segment(src, kt_ast.func.value)
    _, v_ast = _operands(_ast_at(tree, src, _at(match.out)))
    v = text.segment(src, v_ast)
    args = [q, k, v]
    scale = _scale(match, tree, src, scores, k)
    if scale:
        args.append(scale)
    dropout_p = _dropout_p(match, tree, src) if match.dropout is not None else None
    if dropout_p is not None:
        args.append(f"dropout_p={dropout_p}")
    functional = _functional(original)
    indent = re.match(r"[ \t]*", src.line(first.lineno))
    pad = indent.group(0) if indent else ""
    kept_lines = {n for stmt in kept for n in range(stmt.lineno, (stmt.end_lineno or 0) + 1)}
    comments = [  # comment lines, and statements that only sit between those of the attention
        src.line(n)
        for n in range(first.lineno, (last.end_lineno or last.lineno) + 1 if exact else last.lineno)
        if src.line(n).strip().startswith("#") or n in kept_lines
    ]
    tail = src.line(last.end_lineno or last.lineno)[src.node_span(last).end_col :].rstrip()
    nl = text.newline_of(src.source)

    def edit(extra: list[str]) -> list[TextEdit]:
        call = (
            f"{functional}.scaled_dot_product_attention({', '.join(args[:3] + extra + args[3:])})"
        )
        if not exact:
            # the product is part of the last statement: drop the statements before it (their
            # comment lines stay) and put the call where the product was
            assert out_span is not None
            kept = "".join(c + nl for c in comments)
            return [
                TextEdit(Span(first.lineno, 0, last.lineno, 0), kept),
                TextEdit(out_span, call),
            ]
        body = "".join(c + nl for c in comments) + f"{pad}{lead}{call}{tail}{nl}"
        end = (last.end_lineno or last.lineno) + 1
        return [TextEdit(Span(first.lineno, 0, end, 0), body)]

    alternatives: list[list[TextEdit]] = []
    if match.masked is not None:
        mask = _mask(match, tree, src)
        first_try = edit(["is_causal=True"])
        alternatives.append(edit([f"attn_mask={mask}"]))
    else:
        first_try = edit([])
    return Proposal(
        f"Use `{functional}.scaled_dot_product_attention` (fused attention)",
        first_try,
        check="numeric",
        train=match.dropout is not None,
        alternatives=alternatives,
    )


def _single_name(stmt: ast.stmt) -> bool:
    return (
        isinstance(stmt, ast.Assign)
        and len(stmt.targets) == 1
        and isinstance(stmt.targets[0], ast.Name)
    )


def _downstream(node: torch.fx.Node) -> set[torch.fx.Node]:
    found: set[torch.fx.Node] = set()
    queue = list(node.users)
    while queue:
        n = queue.pop()
        if n not in found:
            found.add(n)
            queue.extend(n.users)
    return found


def _check_statements(
    stmts: list[ast.stmt],
    match: Match,
    graph: torch.fx.Graph,
    src: SourceText,
    forward: ast.AST,
    exact: bool,
) -> list[ast.stmt]:
    """The statements compute the attention and nothing else (with ``exact`` False, the last
    one may go on with the result: ``y = (att @ v).transpose(1, 2)``), except statements
    between them that neither read the attention nor are read by it but through ``q``, ``k``
    and ``v`` (``v = self.value(x)`` after the softmax): those are returned, to be kept
    above the new statement."""
    spans = [src.node_span(s) for s in stmts]
    inside = [
        n
        for n in graph.nodes
        if n.op not in ("placeholder", "output")
        and (at := _at(n)) is not None
        and any(contains(s, at) for s in spans)
    ]
    covered = set(match.nodes()) | match.extra
    # what the statements compute only to feed the mask or the scale (``self.bias[:, :, :T, :T]
    # == 0``, sizes): never the operands of the products, which the new call still reads
    feeding = covered - {match.scores, match.key_t, match.out}
    grown = True
    while grown:
        grown = False
        for node in inside:
            if node not in covered and node.users and all(u in feeding for u in node.users):
                covered.add(node)
                feeding.add(node)
                grown = True
    attention = set(match.nodes())
    reads_attention: set[torch.fx.Node] = set()
    for node in graph.nodes:
        if any(a in attention or a in reads_attention for a in node.all_input_nodes):
            reads_attention.add(node)
    later = set() if exact else _downstream(match.out)
    bound: set[str] = set()
    kept: list[ast.stmt] = []
    for stmt, span in zip(stmts, spans):
        own = [n for n in inside if (at := _at(n)) is not None and contains(span, at)]
        if stmt is stmts[-1]:
            if not (isinstance(stmt, ast.Return) or not exact or _single_name(stmt)):
                raise Unavailable("the attention's statements are not simple assignments")
            for node in own:
                if node not in covered and node not in later:  # ``own`` are inside ``last``
                    raise Unavailable(f"these statements also compute `{node.name}`")
            continue
        if stmt is not stmts[0] and own and not any(n in covered for n in own):
            reads = {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name)}
            if not any(n in reads_attention for n in own) and not reads & bound:
                kept.append(stmt)  # between the attention's statements, independent of them
                continue
        if not _single_name(stmt):
            raise Unavailable("the attention's statements are not simple assignments")
        for node in own:
            if node not in covered:
                raise Unavailable(f"these statements also compute `{node.name}`")
        bound.add(stmt.targets[0].id)  # type: ignore[attr-defined]
    final = stmts[-1]
    end = (final.end_lineno or final.lineno, final.end_col_offset or 0)
    for node in ast.walk(forward):
        if (
            isinstance(node, ast.Name)
            and isinstance(node.ctx, ast.Load)
            and node.id in bound
            and (node.lineno, node.col_offset) > end
        ):
            raise Unavailable(f"`{node.id}` (the attention weights) is read later")
    return kept


def _scale(match: Match, tree: ast.AST, src: SourceText, scores: ast.expr, k: str) -> str:
    """``scale=...`` for SDPA, or "" when the scale is its default ``1 / sqrt(E)``."""
    if match.scale is None:
        return "scale=1.0"
    node = _ast_at(tree, src, _at(match.scale))
    if not isinstance(node, ast.BinOp):
        raise Unavailable("the scaling is written in a way fxls does not rewrite")
    scores_span = src.node_span(scores)
    left_is_scores = contains(src.node_span(node.left), scores_span)
    other = node.right if left_is_scores else node.left
    shown = text.segment(src, other)
    if isinstance(node.op, ast.Mult):
        m = _DEFAULT_SCALE.match(shown.strip())
        if m is not None and (m.group("x") or m.group("y")) == k:
            return ""
        return f"scale={shown}"
    if isinstance(node.op, ast.Div) and left_is_scores:
        return (
            f"scale=1 / ({shown})" if not re.fullmatch(r"[\w.()]+", shown) else f"scale=1 / {shown}"
        )
    raise Unavailable("the scaling is written in a way fxls does not rewrite")


def _mask(match: Match, tree: ast.AST, src: SourceText) -> str:
    call = _ast_at(tree, src, _at(match.masked)) if match.masked is not None else None
    if not (isinstance(call, ast.Call) and call.args):
        raise Unavailable("the mask is written in a way fxls does not rewrite")
    mask = call.args[0]
    if (
        isinstance(mask, ast.Compare)
        and len(mask.ops) == 1
        and isinstance(mask.ops[0], ast.Eq)
        and isinstance(mask.comparators[0], ast.Constant)
        and mask.comparators[0].value == 0
    ):
        return f"{text.segment(src, mask.left)} != 0"
    return f"~({text.segment(src, mask)})"


def _dropout_p(match: Match, tree: ast.AST, src: SourceText) -> str | None:
    """SDPA's ``dropout_p`` for the dropout on the attention weights, exactly as it applies:
    ``self.drop.p if self.training else 0.0`` for a dropout module, and for ``F.dropout(att,
    p, training)`` the probability when ``training`` holds (``F.dropout``'s ``training`` is
    True unless passed: dropout then applies in eval mode too). None when it never applies
    (``training=False``)."""
    node = match.dropout
    assert node is not None
    call = _ast_at(tree, src, _at(node))
    if not isinstance(call, ast.Call):
        raise Unavailable("the dropout is written in a way fxls does not rewrite")
    if node.op == "call_module":
        return f"{text.segment(src, call.func)}.p if self.training else 0.0"
    named = {kw.arg: kw.value for kw in call.keywords if kw.arg is not None}
    if len(named) != len(call.keywords) or any(isinstance(a, ast.Starred) for a in call.args):
        raise Unavailable("the dropout's arguments are unpacked")
    p = named.get("p", call.args[1] if len(call.args) > 1 else None)
    training = named.get("training", call.args[2] if len(call.args) > 2 else None)
    shown = text.segment(src, p) if p is not None else "0.5"
    if training is None or (isinstance(training, ast.Constant) and training.value is True):
        return shown
    if isinstance(training, ast.Constant) and training.value is False:
        return None
    return f"{shown} if {text.segment(src, training)} else 0.0"
