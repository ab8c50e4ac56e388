"""How capture reports what went wrong: error records, one-line causes, spans to blame."""

from __future__ import annotations

import os
import re
import traceback
from typing import Any

from fxls.protocol.model import Diagnostic, ErrorInfo, ErrorKind, Phase, Span
from fxls.protocol.positions import SourceText
from fxls.worker.capture import failures


def error_kind(exc: BaseException) -> ErrorKind:
    if isinstance(exc, SystemExit):
        return "system_exit"
    if isinstance(exc, RecursionError):
        return "recursion"
    return "exception"


def error_info(phase: Phase, exc: BaseException) -> ErrorInfo:
    """An exception caught in ``phase`` as plain data (traceback capped)."""
    try:
        tb = "".join(traceback.format_exception(exc))
    except BaseException:
        tb = ""
    return ErrorInfo(kind=error_kind(exc), phase=phase, type=type(exc).__name__,
                     message=safe_str(exc), traceback=tb[-20000:])  # fmt: skip


def safe_str(exc: BaseException) -> str:
    """``str(exc)``, which user code can make raise."""
    try:
        text = str(exc)
    except BaseException:
        text = ""
    if isinstance(exc, SystemExit):
        text = f"SystemExit({text})" if text else "SystemExit"
    return text


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def one_line(exc: BaseException) -> str:
    """``TypeError: first line of the message``, without the memory addresses of object
    reprs (``<... object at 0x7f6c642717d0>``), which differ on every run."""
    text = safe_str(exc).strip().splitlines()
    first = _ADDRESS.sub("", text[0]) if text else ""
    name = type(exc).__name__
    return f"{name}: {first}" if first and not first.startswith(name) else (first or name)


_PACKAGE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
"""The folder of the ``fxls`` package (this module is ``fxls/worker/capture/reporting.py``)."""


def raised_in(exc: BaseException) -> str:
    """Where ``exc`` was raised (``modeling_llama.py:204``), and the innermost place in
    fxls's own code it came from when that is another (``re/__init__.py:176, from
    fxls/worker/capture/build/inputs.py:1497``)."""
    places = [
        (frame.f_code.co_filename, line) for frame, line in traceback.walk_tb(exc.__traceback__)
    ]
    if not places:
        return "an unknown place"
    text = _place(*places[-1])
    ours = [place for place in places if _in_fxls(place[0])]
    if ours and ours[-1] != places[-1]:
        text += f", from {_place(*ours[-1])}"
    return text


def _in_fxls(path: str) -> bool:
    return os.path.abspath(path).startswith(_PACKAGE + os.sep)


def _place(path: str, line: int) -> str:
    """``fxls/...`` for fxls's own files, else the file's name and the parent folder's."""
    full = os.path.abspath(path)
    if _in_fxls(full):
        where = "fxls/" + os.path.relpath(full, _PACKAGE).replace(os.sep, "/")
    else:
        where = "/".join(full.replace(os.sep, "/").split("/")[-2:])
    return f"{where[-120:]}:{line}"


def line_span(source: SourceText, line: int) -> Span:
    """The stripped text of a whole line."""
    return source.line_span(line)


def class_span(source: SourceText, line: int, name: str) -> Span:
    """The class name on its ``class`` line (the whole line when not found)."""
    text = source.line(line)
    col = text.find(f"class {name}")
    if col >= 0:
        start = col + len("class ")
        return Span(line, start, line, start + len(name))
    return line_span(source, line)


def user_span(exc: BaseException, path: str, source: SourceText) -> Span | None:
    """Where in the document ``exc`` was raised (innermost frame of the file)."""
    spans, _, _ = failures.locate(exc, path, source)
    return spans[0] if spans else None


def outer_span(exc: BaseException, path: str, source: SourceText) -> Span | None:
    """The top-level statement of the document that ``exc`` went through (outermost frame of
    the file): in a notebook, the statement of the cell that ran the code that raised."""
    spans, _, _ = failures.locate(exc, path, source)
    return spans[-1] if spans else None


def once_per_span(diagnostics: list[Diagnostic]) -> list[Diagnostic]:
    """Diagnostics with the same code and span, once."""
    seen: set[tuple[Any, ...]] = set()
    out = []
    for d in diagnostics:
        key = (d.code, d.span.line, d.span.col, d.span.end_line, d.span.end_col)
        if key not in seen:
            seen.add(key)
            out.append(d)
    return out
