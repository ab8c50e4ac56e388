"""A module-level helper torch.fx cannot trace into: ``torch.fx.wrap("helper")`` after it.

fxls already records such a helper as one call while capturing (``fx+wrap``); the edit makes
plain ``torch.fx.symbolic_trace`` do the same, for every FX tool. ``torch.fx.wrap`` must be
called at the top level of the module that defines the function, with its name; the line goes
right after the ``def``. Verified as a trace fix-it (plain torch.fx no longer fails in the
helper) and as a change of code (the module computes the same).
"""

from __future__ import annotations

import ast
import re

from fxls.protocol.model import FixRequest, Span, TextEdit
from fxls.worker.rewrite import text
from fxls.worker.rewrite.base import Original, Proposal, Unavailable, gone_of
from fxls.worker.rewrite.fixes.assertion import torch_name

_NAME = re.compile(r"^[A-Za-z_]\w*$")


def propose(original: Original, fix: FixRequest) -> Proposal:
    name = str(fix.params.get("wrap", ""))
    if not _NAME.match(name):
        raise Unavailable(f"`{name}` is not a function name")
    tree = original.tree
    defs = [
        n
        for n in tree.body
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name
    ]
    if len(defs) != 1:
        raise Unavailable(f"`{name}` is not defined once at the top level of this file")
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "wrap"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and node.args[0].value == name
        ):
            raise Unavailable(f"`{name}` is already wrapped")
    torch = torch_name(original)
    fn = defs[0]
    end = fn.end_lineno or fn.lineno
    nl = text.newline_of(original.source)
    line = f'{torch}.fx.wrap("{name}"){nl}'
    if end >= len(original.doc.source.lines):  # the file ends with the def, no newline
        line = nl + line
    edit = TextEdit(Span(end + 1, 0, end + 1, 0), line)
    return Proposal(
        f'Wrap `{name}` for torch.fx: `{torch}.fx.wrap("{name}")`',
        [edit],
        check="numeric",
        traces_past=True,
        gone=gone_of(fix),
    )
