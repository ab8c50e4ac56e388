"""FX601: delete a debug ``print(...)`` or logging call that breaks ``torch.compile``'s graph.

Only a statement that is the call alone (``print(x.shape)``, ``logger.info(...)``,
``logging.debug(...)``) is deleted, and only when its arguments bind nothing, yield nothing and
call nothing but attribute reads and pure tensor methods; the block keeps a ``pass`` when it
was the only statement. Verified like every code change: the edited module computes the same.
What is printed is gone: offered as a quick fix, never applied by "fix all".
"""

from __future__ import annotations

import ast

from fxls.protocol.model import FixRequest
from fxls.worker.rewrite import text
from fxls.worker.rewrite.base import Original, Proposal, Unavailable

LOGGING_METHODS = frozenset(
    {"debug", "info", "warning", "warn", "error", "critical", "exception", "log"}
)
LOGGER_ROOTS = frozenset({"logging", "logger", "log", "_logger", "LOGGER", "LOG"})
SHOWN = 50
"""Characters of the statement a title shows."""


def propose(original: Original, fix: FixRequest) -> Proposal:
    source = original.doc.source
    stmt, block, _ = text.enclosing_statement(original.tree, source, fix.span)
    if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)):
        raise Unavailable("the line is not a call statement of its own")
    call = stmt.value
    if not debug_call(call):
        raise Unavailable("not a `print(...)` or logging call")
    for node in ast.walk(call):
        if isinstance(node, (ast.NamedExpr, ast.Yield, ast.YieldFrom, ast.Await)):
            raise Unavailable("the call's arguments bind or yield a value")
    if isinstance(call.func, ast.Name) and original.doc.namespace.get("print", print) is not print:
        raise Unavailable("`print` is redefined in this file")
    shown = text.segment(source, stmt).strip().splitlines()[0]
    if len(shown) > SHOWN:
        shown = shown[: SHOWN - 1] + "…"
    edit = text.delete_statement(source, stmt, block)
    return Proposal(f"Remove the debug call `{shown}`", [edit], check="numeric")


def debug_call(call: ast.Call) -> bool:
    """``print(...)``, ``logging.info(...)``, ``logger.debug(...)``, ``self.logger.info(...)``."""
    func = call.func
    if isinstance(func, ast.Name):
        return func.id == "print"
    if not (isinstance(func, ast.Attribute) and func.attr in LOGGING_METHODS):
        return False
    root = func.value
    if isinstance(root, ast.Attribute):
        return root.attr in LOGGER_ROOTS
    return isinstance(root, ast.Name) and root.id in LOGGER_ROOTS
