"""FX105: ``torch.zeros(a, b)`` with traced sizes -> ``x.new_zeros((a, b))``.

``x`` is the tensor the first size is read from (``x.size(0)``, ``x.shape[1]``); the sizes
and keyword arguments are kept as written. ``new_zeros`` takes the dtype and device of ``x``
where ``torch.zeros`` takes the defaults: when ``x`` is not float32 the plain form computes
something else, so a second form with ``dtype=torch.float32`` is tried. Covers ``zeros``,
``ones``, ``empty`` and ``full``. Verified as a trace fix-it.
"""

from __future__ import annotations

import ast

from fxls.protocol.fixkinds import needs_parentheses
from fxls.protocol.model import FixRequest, TextEdit
from fxls.worker.rewrite import text
from fxls.worker.rewrite.base import Original, Proposal, Unavailable, gone_of
from fxls.worker.rewrite.fixes.assertion import torch_name

FACTORIES = ("zeros", "ones", "empty", "full")


def _size_source(node: ast.expr) -> ast.expr | None:
    """``x`` of ``x.size(0)``, ``x.size()``, ``x.shape[1]``, ``x.shape``."""
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "size"
    ):
        return node.func.value
    if isinstance(node, ast.Subscript):
        node = node.value
    if isinstance(node, ast.Attribute) and node.attr == "shape":
        return node.value
    return None


def propose(original: Original, fix: FixRequest) -> Proposal:
    source = original.doc.source
    call = text.expression_at(original.tree, source, fix.span, (ast.Call,))
    assert isinstance(call, ast.Call)
    torch = torch_name(original)
    func = call.func
    if not (
        isinstance(func, ast.Attribute)
        and isinstance(func.value, ast.Name)
        and func.value.id == torch
        and func.attr in FACTORIES
    ):
        raise Unavailable("not a call of `torch.zeros/ones/empty/full`")
    if any(isinstance(a, ast.Starred) for a in call.args) or any(
        k.arg is None or k.arg in ("out", "size") for k in call.keywords
    ):
        raise Unavailable("the call passes `*sizes`, `**kwargs`, `size=` or `out=`")
    fill: list[ast.expr] = []
    if func.attr == "full":
        if len(call.args) != 2:
            raise Unavailable("`torch.full` needs its size and fill value given by position")
        size_nodes = [call.args[0]]
        fill = [call.args[1]]
    else:
        size_nodes = list(call.args)
    if not size_nodes:
        raise Unavailable("no sizes given")
    flat = (
        list(size_nodes[0].elts)
        if len(size_nodes) == 1 and isinstance(size_nodes[0], (ast.Tuple, ast.List))
        else size_nodes
    )
    base = next((b for b in map(_size_source, flat) if b is not None), None)
    if base is None:
        raise Unavailable("no size is read from a tensor (`x.size(0)`, `x.shape[0]`)")
    receiver = text.segment(source, base)
    if needs_parentheses(base):
        receiver = f"({receiver})"
    if len(size_nodes) == 1:
        sizes = text.segment(source, size_nodes[0])
    else:
        sizes = "(" + ", ".join(text.segment(source, n) for n in size_nodes) + ")"
    args = [sizes] + [text.segment(source, n) for n in fill]
    keywords = [f"{k.arg}={text.segment(source, k.value)}" for k in call.keywords]
    method = f"new_{func.attr}"

    def edit(extra: list[str]) -> list[TextEdit]:
        new = f"{receiver}.{method}({', '.join(args + keywords + extra)})"
        return [text.replace(source, call, new)]

    has_dtype = any(k.arg == "dtype" for k in call.keywords)
    alternatives = [] if has_dtype else [edit([f"dtype={torch}.float32"])]
    return Proposal(
        f"Replace `{torch}.{func.attr}(...)` with `{receiver}.{method}(...)` (traceable)",
        edit([]),
        check="numeric",
        traces_past=True,
        gone=gone_of(fix),
        alternatives=alternatives,
    )
