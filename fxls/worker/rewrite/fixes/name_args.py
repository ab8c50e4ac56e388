"""Refactor: name every argument of a call, from the named-argument analysis.

``F.conv2d(x, w, None, 2)`` -> ``F.conv2d(input=x, weight=w, bias=None, stride=2)``: each
positional argument gets the parameter name the capture bound it to (``NodeInfo.args``),
inserted before the user's own expression, which is kept as written. Arguments that cannot be
passed by name (positional-only, ``*args``) stay positional, and so do the ones before them.
Every node traced from the call (a loop records several) must agree on the names. Verified
like every code change: the edited module computes the same.
"""

from __future__ import annotations

import ast
import keyword

from fxls.protocol.model import FixRequest, NodeInfo, Span, TextEdit
from fxls.worker.rewrite import text
from fxls.worker.rewrite.base import Original, Proposal, Unavailable

NAMEABLE = frozenset({"positional_or_keyword", "keyword_only"})
TRUSTED_SIGNATURES = frozenset({"module.forward", "python", "aten", "normalized"})


def positional_names(node: NodeInfo) -> list[str | None]:
    """The parameter name of each positional argument slot (None: cannot be named)."""
    args = list(node.args)
    if node.op == "call_method" and args and args[0].name == "self":
        args = args[1:]
    out: list[str | None] = []
    for arg in args:
        if arg.kind == "var_positional":
            break
        if arg.kind == "keyword_only" or arg.kind == "var_keyword":
            break
        nameable = arg.kind in NAMEABLE and arg.name.isidentifier()
        out.append(arg.name if nameable and not keyword.iskeyword(arg.name) else None)
    return out


def names_for(nodes: list[NodeInfo], count: int) -> list[str | None]:
    """Names for ``count`` positional arguments, agreed by every node of the call."""
    found: list[str | None] | None = None
    for node in nodes:
        if node.signature not in TRUSTED_SIGNATURES:
            raise Unavailable(f"the parameter names of `{node.target}` are not certain")
        names = positional_names(node)[:count]
        if len(names) < count:
            names += [None] * (count - len(names))
        if found is not None and names != found:
            raise Unavailable("the calls traced from this line bind different parameters")
        found = names
    if found is None:
        raise Unavailable("no traced call here")
    # positional arguments must precede keyword ones: name only the trailing run
    start = count
    while start > 0 and found[start - 1] is not None:
        start -= 1
    return [None] * start + found[start:]


def propose(original: Original, fix: FixRequest) -> Proposal:
    source = original.doc.source
    call = text.expression_at(original.tree, source, fix.span, (ast.Call,))
    assert isinstance(call, ast.Call)
    if any(isinstance(a, ast.Starred) for a in call.args):
        raise Unavailable("the call unpacks `*args`")
    if not call.args:
        raise Unavailable("every argument is already named")
    mod = original.module(fix.cls)
    nodes = [
        n
        for n in mod.nodes
        if n.op in ("call_function", "call_method", "call_module") and n.span == fix.span
    ]
    names = names_for(nodes, len(call.args))
    given = {k.arg for k in call.keywords}
    edits: list[TextEdit] = []
    for arg, name in zip(call.args, names):
        if name is None:
            continue
        if name in given:
            raise Unavailable(f"`{name}` is passed twice")
        at = source.node_span(arg)
        edits.append(TextEdit(Span(at.line, at.col, at.line, at.col), f"{name}="))
    if not edits:
        raise Unavailable("no argument of this call can be passed by name")
    callee = text.segment(source, call.func)
    return Proposal(f"Name every argument of `{callee}(...)`", edits, check="numeric")
