"""GitHub Actions workflow commands: one ``::error``/``::warning``/``::notice`` per diagnostic.

GitHub turns them into annotations on the pull request's changed lines. Escaping follows the
Actions toolkit: in the message ``%``, ``\\r`` and ``\\n``; in properties also ``:`` and ``,``.
Columns are 1-based; ``endColumn`` is the last column of the span (inclusive). Every string
taken from a result or a path goes through :func:`fxls.cli.report.escape.escape_text` first
(controls shown, no command can start, long blobs removed, length capped), so the only line
breaks and properties of a command are fxls's own.
"""

from __future__ import annotations

from fxls.cli.report.escape import escape_text
from fxls.cli.report.paths import display_path
from fxls.engine.analyze import FileAnalysis
from fxls.protocol.model import Diagnostic

COMMANDS = {"error": "error", "warning": "warning", "information": "notice", "hint": "notice"}


def escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def annotation(path: str, d: Diagnostic) -> str:
    """``::error file=m.py,line=3,endLine=3,col=5,endColumn=9,title=FX201::message``."""
    s = d.span
    props = [
        ("file", escape_text(path, path=True)),
        ("line", str(s.line)),
        ("endLine", str(s.end_line)),
        ("col", str(s.col + 1)),
        ("endColumn", str(max(s.end_col, s.col + 1))),
        ("title", escape_text(d.code)),
    ]
    message = escape_text(d.message, newlines=True)
    if d.fix:
        message += "\n" + escape_text(d.fix, newlines=True)
    head = ",".join(f"{key}={escape_property(value)}" for key, value in props)
    return f"::{COMMANDS.get(d.severity, 'notice')} {head}::{escape_data(message)}"


def format_github(analysis: FileAnalysis, base: str) -> str:
    """The annotations of one file (an empty string when it has no diagnostics)."""
    path = display_path(analysis.path, base)
    return "".join(annotation(path, d) + "\n" for d in analysis.diagnostics)
