"""SARIF 2.1.0: the format code-scanning services (GitHub code scanning and others) read.

One run; ``tool.driver.rules`` holds every code the run reports (id, a PascalCase name, the
title, the docs link); each result has its level, a location with 1-based line and column
numbers counted in code points (``columnKind``), the class it belongs to as a logical location,
and a ``partialFingerprints`` entry that stays the same when lines move above it. Every string
of the log goes through :func:`fxls.cli.report.escape.escape_tree`, as in the JSON report.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

from fxls import __version__
from fxls.analysis.notebook import NotebookModule
from fxls.cli.report.cells import cell_of, relabel
from fxls.cli.report.escape import escape_tree
from fxls.cli.report.paths import relative_path
from fxls.engine.analyze import FileAnalysis
from fxls.protocol.catalogue import ALL_MESSAGES, docs_url
from fxls.protocol.model import Diagnostic, Span

SARIF_VERSION = "2.1.0"
SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
LEVELS = {"error": "error", "warning": "warning", "information": "note", "hint": "note"}
SRCROOT = "%SRCROOT%"
FINGERPRINT = "fxls/v1"
URI_KEYS = frozenset({"uri", "helpUri"})
"""Fields that hold an address (escaped as paths: see :func:`fxls.cli.report.escape.escape_text`)."""


def rule_name(title: str) -> str:
    """``Traced value used in control flow`` -> ``TracedValueUsedInControlFlow``."""
    return "".join(w[:1].upper() + w[1:] for w in re.findall(r"[A-Za-z0-9]+", title))


def rule(code: str) -> dict[str, Any]:
    message = ALL_MESSAGES.get(code)
    title = message.title if message else code
    entry: dict[str, Any] = {
        "id": code,
        "name": rule_name(title) or code,
        "shortDescription": {"text": title},
        "defaultConfiguration": {
            "level": LEVELS.get(message.severity if message else "error", "error")
        },
    }
    url = docs_url(code)
    if url:
        entry["helpUri"] = url
        entry["help"] = {"text": f"{code}: {title}. See {url}"}
    return entry


def _region(span: Span) -> dict[str, Any]:
    return {
        "startLine": max(span.line, 1),
        "startColumn": span.col + 1,
        "endLine": max(span.end_line, span.line, 1),
        "endColumn": max(span.end_col + 1, span.col + 2)
        if span.end_line == span.line
        else span.end_col + 1,
    }


def _location(
    uri: dict[str, Any], span: Span, notebook: NotebookModule | None = None
) -> dict[str, Any]:
    """A file and region; in a notebook (whose file lines are JSON) the file, with the line
    of the file that holds the cell's line when known, and the cell and the region in the
    cell as properties (``cell`` counted from 1)."""
    cell, line = cell_of(notebook, span.line)
    if notebook is None or cell is None:
        return {"physicalLocation": {"artifactLocation": uri, "region": _region(span)}}
    in_cell = Span(line, span.col, line + max(span.end_line - span.line, 0), span.end_col)
    physical: dict[str, Any] = {"artifactLocation": uri}
    in_file = notebook.file_line(span.line)
    if in_file is not None:
        physical["region"] = {"startLine": in_file}
    return {
        "physicalLocation": physical,
        "properties": {"cell": cell, "region": _region(in_cell)},
    }


def _artifact_location(path: str, base: str, index: int) -> dict[str, Any]:
    rel = relative_path(path, base)
    if rel is not None:
        return {"uri": quote(rel, safe="/"), "uriBaseId": SRCROOT, "index": index}
    return {"uri": Path(path).resolve().as_uri(), "index": index}


def _folder_uri(folder: str) -> str:
    uri = Path(folder).resolve().as_uri()
    return uri if uri.endswith("/") else uri + "/"


def _owner(analysis: FileAnalysis, d: Diagnostic) -> str | None:
    for m in analysis.modules:
        if d in m.diagnostics:
            return m.name
    for info in analysis.classes:
        if info.span.line <= d.span.line <= info.span.end_line:
            return info.name
    return None


def _line(lines: list[str], number: int) -> str:
    return lines[number - 1].strip() if 1 <= number <= len(lines) else ""


def sarif_log(
    files: Sequence[tuple[FileAnalysis, str]],
    base: str,
    *,
    successful: bool = True,
    notebooks: dict[str, NotebookModule | None] | None = None,
) -> dict[str, Any]:
    """The SARIF log of a run: ``files`` are (analysis, the text it was computed from);
    ``notebooks``, by analysis path, place the results of notebooks in their cells."""
    codes = sorted({d.code for a, _ in files for d in a.diagnostics})
    rule_index = {code: i for i, code in enumerate(codes)}
    artifacts: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    for analysis, text in files:
        index = len(artifacts)
        uri = _artifact_location(analysis.path, base, index)
        artifacts.append({"location": {k: v for k, v in uri.items() if k != "index"}})
        lines = text.split("\n")
        notebook = (notebooks or {}).get(analysis.path)
        seen: dict[str, int] = {}
        for d in analysis.diagnostics:
            owner = _owner(analysis, d)
            rel = relative_path(analysis.path, base) or analysis.path
            key = "\0".join([rel, d.code, owner or "", _line(lines, d.span.line)])
            seen[key] = seen.get(key, 0) + 1
            digest = hashlib.sha256(f"{key}\0{seen[key]}".encode()).hexdigest()[:32]
            message = relabel(notebook, d.message) + (f"\n\n{d.fix}" if d.fix else "")
            cell, line = cell_of(notebook, d.span.line)
            if cell is not None:
                message = f"cell {cell}, line {line}: {message}"
            result: dict[str, Any] = {
                "ruleId": d.code,
                "ruleIndex": rule_index[d.code],
                "level": LEVELS.get(d.severity, "error"),
                "message": {"text": message},
                "locations": [_location(uri, d.span, notebook)],
                "partialFingerprints": {FINGERPRINT: digest},
            }
            if owner:
                result["locations"][0]["logicalLocations"] = [
                    {"name": owner, "fullyQualifiedName": owner, "kind": "type"}
                ]
            if d.related:
                result["relatedLocations"] = [
                    {
                        **_location(uri, r.span, notebook),
                        "id": i,
                        "message": {"text": relabel(notebook, r.message)},
                    }
                    for i, r in enumerate(d.related)
                ]
            results.append(result)
    driver: dict[str, Any] = {
        "name": "fxls",
        "version": __version__,
        "semanticVersion": __version__,
        "rules": [rule(code) for code in codes],
    }
    log = {
        "$schema": SARIF_SCHEMA,
        "version": SARIF_VERSION,
        "runs": [
            {
                "tool": {"driver": driver},
                "originalUriBaseIds": {SRCROOT: {"uri": _folder_uri(base)}},
                "artifacts": artifacts,
                "results": results,
                "columnKind": "unicodeCodePoints",
                "invocations": [{"executionSuccessful": successful}],
            }
        ],
    }
    escaped: dict[str, Any] = escape_tree(log, URI_KEYS)
    return escaped
