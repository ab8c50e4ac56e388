"""FX103: sizes unpacked into a call, ``y.view(*x.shape[:-1], h, -1)`` -> ``y.view(x.shape[:-1] + (h, -1))``.

Unpacking a traced size with ``*`` asks torch.fx for its length, which tracing cannot know
(``Proxy`` cannot be iterated). The methods and functions that take sizes (``view``,
``reshape``, ``expand``, ``repeat``, ``permute``, ``new_zeros``/``new_ones``/``new_empty``,
``torch.zeros``/``ones``/``empty``/``rand``/``randn``) also take them as one sequence, and a
``torch.Size`` plus a tuple is a ``torch.Size``: the sizes become one argument, a sum of the
unpacked sizes and tuples of the other arguments. It works for inputs of any rank (no size is
fixed) and is recorded in the graph as one ``add``. Only unpacked ``x.shape`` / ``x.size()``
(sliced or not) qualify: ``*`` of a list would not add to a tuple. Verified as a trace fix-it.
"""

from __future__ import annotations

import ast

import torch

from fxls.protocol.fixkinds import needs_parentheses
from fxls.protocol.model import FixRequest, Span, TextEdit
from fxls.worker.rewrite import text
from fxls.worker.rewrite.base import Original, Proposal, Unavailable, gone_of

METHODS = frozenset(
    {"view", "reshape", "expand", "repeat", "permute", "new_zeros", "new_ones", "new_empty"}
)
"""Tensor methods that take their sizes either unpacked or as one sequence."""

FUNCTIONS = frozenset({"zeros", "ones", "empty", "rand", "randn"})
"""``torch.<name>(*sizes)`` that also take one sequence."""


def is_size(node: ast.expr) -> bool:
    """``x.shape``, ``x.size()``, or a slice of either: a ``torch.Size`` at run time."""
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Slice):
        node = node.value
    if isinstance(node, ast.Attribute):
        return node.attr == "shape"
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "size"
        and not node.args
        and not node.keywords
    )


def takes_sizes(call: ast.Call, torch_names: set[str]) -> bool:
    """Whether ``call`` is one of the sizes-taking methods or ``torch`` functions."""
    func = call.func
    if not isinstance(func, ast.Attribute):
        return False
    if isinstance(func.value, ast.Name) and func.value.id in torch_names:
        return func.attr in FUNCTIONS
    return func.attr in METHODS


def sized_call(call: ast.Call, torch_names: set[str]) -> bool:
    """A sizes-taking call whose positional arguments unpack only sizes."""
    starred = [a for a in call.args if isinstance(a, ast.Starred)]
    return (
        bool(starred) and takes_sizes(call, torch_names) and all(is_size(a.value) for a in starred)
    )


def propose(original: Original, fix: FixRequest) -> Proposal:
    source = original.doc.source
    call = text.expression_at(original.tree, source, fix.span, (ast.Call,))
    assert isinstance(call, ast.Call)
    torch_names = {n for n, v in original.doc.namespace.items() if v is torch}
    if not sized_call(call, torch_names):
        raise Unavailable("not a call of a sizes-taking function with `*x.shape` unpacked")
    parts: list[str] = []
    loose: list[str] = []
    for arg in call.args:
        if isinstance(arg, ast.Starred):
            if loose:
                parts.append(_tuple(loose))
                loose = []
            inner = text.segment(source, arg.value)
            parts.append(f"({inner})" if needs_parentheses(arg.value) else inner)
        else:
            loose.append(text.segment(source, arg))
    if loose:
        parts.append(_tuple(loose))
    joined = " + ".join(parts)
    start = source.node_span(call.args[0])
    end = source.node_span(call.args[-1])
    if any(
        (k.lineno, k.col_offset) < (call.args[-1].lineno, call.args[-1].col_offset)
        for k in call.keywords
    ):
        raise Unavailable("keyword arguments stand between the unpacked sizes")
    edit = TextEdit(Span(start.line, start.col, end.end_line, end.end_col), joined)
    return Proposal(
        f"Pass the sizes as one argument: `{_short(joined)}` (traceable)",
        [edit],
        check="numeric",
        traces_past=True,
        gone=gone_of(fix),
    )


def _tuple(items: list[str]) -> str:
    return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"


def _short(value: str, limit: int = 60) -> str:
    return value if len(value) <= limit else value[: limit - 1] + "…"
