"""FX101 on an ``assert``: ``assert cond, msg`` -> ``torch._assert(cond, msg)``.

``torch._assert`` is recorded in the FX graph instead of being decided while tracing, and
raises the same way in eager mode. Needs the file to import ``torch`` under that name.
Verified as a trace fix-it: plain ``torch.fx.symbolic_trace`` no longer fails at the
statement, and the module computes the same.
"""

from __future__ import annotations

import ast

from fxls.protocol.model import FixRequest
from fxls.worker.rewrite import text
from fxls.worker.rewrite.base import Original, Proposal, Unavailable, gone_of


def torch_name(original: Original) -> str:
    """The name the document imported torch under (``torch``), or Unavailable."""
    import torch

    for name in ("torch",):
        if original.doc.namespace.get(name) is torch:
            return name
    raise Unavailable("the file does not `import torch`")


def propose(original: Original, fix: FixRequest) -> Proposal:
    source, tree = original.doc.source, original.tree
    stmt = next(
        (
            n
            for n in ast.walk(tree)
            if isinstance(n, ast.Assert) and source.node_span(n.test) == fix.span
        ),
        None,
    )
    if stmt is None:
        raise Unavailable("no `assert` at this condition")
    torch = torch_name(original)
    condition = text.segment(source, stmt.test)
    if stmt.msg is not None:
        message = text.segment(source, stmt.msg)
    else:
        message = repr(" ".join(condition.split()))
    new = f"{torch}._assert({condition}, {message})"
    return Proposal(
        f"Replace `assert` with `{torch}._assert(...)` (traceable)",
        [text.replace(source, stmt, new)],
        check="numeric",
        traces_past=True,
        gone=gone_of(fix),
    )
