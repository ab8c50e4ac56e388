"""FX102: ``len(x)`` of a traced tensor -> ``x.size(0)``; ``len(x.shape)`` -> ``x.dim()``.

``len`` must return a Python int, which a traced value cannot give; ``x.size(0)`` is recorded
in the graph and is the same number in eager mode, and ``x.dim()`` (the rank of ``x``, what
``len`` of its shape is) is a check fxls decides while tracing. Verified as a trace fix-it.
"""

from __future__ import annotations

import ast

from fxls.protocol.fixkinds import length_written
from fxls.protocol.model import FixRequest
from fxls.worker.rewrite import text
from fxls.worker.rewrite.base import Original, Proposal, Unavailable, gone_of


def propose(original: Original, fix: FixRequest) -> Proposal:
    source = original.doc.source
    call = text.expression_at(original.tree, source, fix.span, (ast.Call,))
    assert isinstance(call, ast.Call)
    if not (
        isinstance(call.func, ast.Name)
        and call.func.id == "len"
        and len(call.args) == 1
        and not call.keywords
        and not isinstance(call.args[0], ast.Starred)
    ):
        raise Unavailable("not a call `len(x)`")
    if original.doc.namespace.get("len", len) is not len:
        raise Unavailable("`len` is redefined in this file")
    arg = call.args[0]
    inner = text.segment(source, arg)
    new = length_written(arg, lambda node: text.segment(source, node))  # len(x.shape): x.dim()
    return Proposal(
        f"Replace `len({inner})` with `{new}`",
        [text.replace(source, call, new)],
        check="numeric",
        traces_past=True,
        gone=gone_of(fix),
    )
