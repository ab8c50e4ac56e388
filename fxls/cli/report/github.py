"""GitHub Actions workflow commands: one ``::error``/``::warning`` per error or warning, and with
``--annotate-info`` one ``::notice`` per information or hint diagnostic.

GitHub turns them into annotations on the pull request's changed lines; information and hints
(unused code, assumed inputs, trace fallbacks) would outnumber the problems, and GitHub shows
only a few annotations of each kind per step, so ``fxls check`` leaves them out by default. Escaping follows the
Actions toolkit: in the message ``%``, ``\\r`` and ``\\n``; in properties also ``:`` and ``,``.
Columns are 1-based; ``endColumn`` is the last column of the span (inclusive). Every string
taken from a result or a path goes through :func:`fxls.cli.report.escape.escape_text` first
(controls shown, no command can start, long blobs removed, length capped), so the only line
breaks and properties of a command are fxls's own.
"""

from __future__ import annotations

from fxls.analysis.notebook import NotebookModule
from fxls.cli.report.cells import cell_of, relabel
from fxls.cli.report.escape import escape_text
from fxls.cli.report.paths import display_path
from fxls.engine.analyze import FileAnalysis
from fxls.protocol.model import Diagnostic

COMMANDS = {"error": "error", "warning": "warning", "information": "notice", "hint": "notice"}
NOTICES = frozenset({"information", "hint"})
"""Severities annotated only on request (``--annotate-info``)."""


def escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def annotation(path: str, d: Diagnostic, notebook: NotebookModule | None = None) -> str:
    """``::error file=m.py,line=3,endLine=3,col=5,endColumn=9,title=FX201::message``. In a
    notebook, whose file lines are JSON, the title names the cell and line (``FX201 · cell
    3, line 12, column 5``) and ``line`` is the line of the file that holds that line's
    string (see :func:`fxls.analysis.notebook.file_lines`), when known."""
    s = d.span
    cell, line = cell_of(notebook, s.line)
    if cell is None:
        props = [
            ("file", escape_text(path, path=True)),
            ("line", str(s.line)),
            ("endLine", str(s.end_line)),
            ("col", str(s.col + 1)),
            ("endColumn", str(max(s.end_col, s.col + 1))),
            ("title", escape_text(d.code)),
        ]
    else:
        title = f"{d.code} · cell {cell}, line {line}, column {s.col + 1}"
        props = [("file", escape_text(path, path=True)), ("title", escape_text(title))]
        in_file = notebook.file_line(s.line) if notebook is not None else None
        if in_file is not None:
            props[1:1] = [("line", str(in_file))]
    message = escape_text(relabel(notebook, d.message), newlines=True)
    if d.fix:
        message += "\n" + escape_text(d.fix, newlines=True)
    head = ",".join(f"{key}={escape_property(value)}" for key, value in props)
    return f"::{COMMANDS.get(d.severity, 'notice')} {head}::{escape_data(message)}"


def format_github(
    analysis: FileAnalysis,
    base: str,
    *,
    annotate_info: bool = True,
    notebook: NotebookModule | None = None,
) -> str:
    """The annotations of one file (an empty string when it has none); information and hint
    diagnostics only with ``annotate_info``."""
    path = display_path(analysis.path, base)
    shown = [d for d in analysis.diagnostics if annotate_info or d.severity not in NOTICES]
    return "".join(annotation(path, d, notebook) + "\n" for d in shown)
