"""Trace class at cursor (``workspace/executeCommand`` ``fxls.traceClass``): which module class
a position is in, and what its capture says.

Pure: works on the document text (the AST view of ``fxls.analysis``) and the captured
``ModuleResult``. The answer is a JSON-ready dict of plain text, clipped and without control
characters; each client escapes it for the surface it shows it on (a VS Code notification,
a Neovim float). Keys:

- ``kind``: ``traced``, ``partial``, ``failed``, ``skipped`` (the class's status), or the
  reason there is no capture: ``noClass``, ``untrusted``, ``notOpen``, ``syntaxError``,
  ``notCaptured``, ``error``; ``message`` says it in a sentence.
- with a capture: ``className``, ``line`` (0-based, on the document as it is now, or None
  when the class line was edited since), ``version``, ``status``, ``strategy``, ``summary``
  (one line), ``details`` (the lines of the class hover), ``assumed`` (what fxls made up:
  constructor arguments and inputs), ``pin`` (the directive that pins the assumed
  constructor arguments), ``diagnostics`` (the class's, first lines), ``graph`` (whether
  ``fxls/graph`` can draw it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fxls.analysis.classes import ClassInfo, find_classes, parse
from fxls.engine.render import values_text
from fxls.lsp.features import markdown as md
from fxls.lsp.features.code_lens import lens_title, module_diagnostics
from fxls.lsp.features.convert import LineMapper
from fxls.lsp.features.hover import class_summary
from fxls.protocol.labels import strategy_label
from fxls.protocol.model import Diagnostic, ModuleResult

COMMAND = "fxls.traceClass"
"""The command's name in ``executeCommandProvider``; its one argument is a
``TextDocumentPositionParams`` (``{"textDocument": {"uri"}, "position"}``)."""

MAX_DETAILS = 40
MAX_DIAGNOSTICS = 20
MAX_LINE = 500

NO_CLASS = (
    "fxls: the cursor is not in an nn.Module class. Put it on a class that subclasses "
    "nn.Module (its name, its body, or the # fxls: lines above it)."
)
UNTRUSTED = (
    "fxls: this workspace is not trusted, so fxls runs none of its code and traces nothing. "
    "Trust the workspace (in VS Code: Manage Workspace Trust), or start fxls with "
    '{"trusted": true} in initializationOptions.'
)
NOT_OPEN = "fxls: this document is not open in the server; open it in the editor first."


def problem(kind: str, message: str) -> dict[str, Any]:
    """An answer without a capture: why, in one sentence."""
    return {"kind": kind, "message": md.plain(message, MAX_LINE)}


def unparsable(text: str) -> dict[str, Any] | None:
    """The ``syntaxError`` answer when ``text`` does not parse, else None."""
    error = parse(text).syntax_error
    if error is None:
        return None
    where = f"line {error.span.line}: {error.message}"
    return problem("syntaxError", f"fxls: the file does not parse ({where}).")


def class_at(text: str, line: int) -> ClassInfo | None:
    """The module class whose statement holds 1-based ``line``: decorators, body and the
    comment lines (``# fxls:`` directives) directly above it count."""
    lines = text.split("\n")
    for cls in find_classes(text):
        start = cls.span.line
        while start > 1 and lines[start - 2].lstrip().startswith("#"):
            start -= 1
        if start <= line <= cls.span.end_line:
            return cls
    return None


def _assumed(module: ModuleResult) -> list[str]:
    out: list[str] = []
    built = module.constructed
    if built is not None and built.assumed:
        out.extend(f"{k}={v}" for k, v in built.assumed.items())
    for given in module.inputs:
        if given.assumed:
            out.append(f"input {given.name} {values_text([given.value])}")
    return out


def _summary(module: ModuleResult, found: Sequence[Diagnostic]) -> str:
    """``SmallCNN: traced (fx) · 7 nodes · 2.4 k params · [B, 3, 32, 32] → [B, 10]``."""
    parts = lens_title(module, found).split(" · ")[1:]  # without the leading "fxls"
    if module.status == "traced":
        how = module.strategy
        strategy = f" ({strategy_label(how)})" if how.method != "none" else ""
        parts.insert(0, f"traced{strategy}")
    return f"{module.name}: " + " · ".join(parts)


def _zero_based(line: int | None) -> int | None:
    return line - 1 if line is not None else None


def report(
    module: ModuleResult,
    modules: Sequence[ModuleResult],
    diagnostics: Sequence[Diagnostic],
    *,
    version: int | None,
    mapper: LineMapper,
    isolation: Sequence[str] = (),
    duration_s: float | None = None,
) -> dict[str, Any]:
    """The answer for a captured class (its diagnostics are those between its class line
    and the next class's)."""
    following = sorted(m.line for m in modules if m.line > module.line)
    found = module_diagnostics(module, diagnostics, following[0] if following else None)
    details = class_summary(module, isolation=isolation, duration_s=duration_s).lines()
    built = module.constructed
    return {
        "kind": module.status,
        "message": md.plain(_summary(module, found), MAX_LINE),
        "className": md.plain(module.name, md.MAX_LABEL),
        "line": _zero_based(mapper(module.line)),
        "version": version,
        "status": module.status,
        "strategy": md.plain(strategy_label(module.strategy), md.MAX_LABEL),
        "summary": md.plain(_summary(module, found), MAX_LINE),
        "details": [md.plain(text, MAX_LINE) for text in details[:MAX_DETAILS]],
        "assumed": [md.plain(text, MAX_LINE) for text in _assumed(module)],
        "pin": md.plain(f"# fxls: init({built.pin})", MAX_LINE)
        if built is not None and built.assumed and built.pin
        else None,
        "diagnostics": [
            {
                "code": md.plain(d.code, 16),
                "severity": d.severity,
                "message": md.plain(d.message.split("\n", 1)[0], MAX_LINE),
                "line": _zero_based(mapper(d.span.line)),
            }
            for d in found[:MAX_DIAGNOSTICS]
        ],
        "graph": bool(module.nodes),
    }
