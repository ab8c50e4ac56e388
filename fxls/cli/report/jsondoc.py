"""The JSON report of ``fxls check`` (schema version 1, docs/cli.md).

Version 1 only grows: fields may be added (each documented with the version of fxls that added
it), never renamed or removed. Every string of the document goes through
:func:`fxls.cli.report.escape.escape_tree` (controls and bidirectional controls shown escaped, long
blobs removed, each string capped).
"""

from __future__ import annotations

from typing import Any

from fxls.analysis.notebook import NotebookModule
from fxls.cli.check.run import NotMade
from fxls.cli.report.cells import cell_of, relabel
from fxls.cli.report.escape import escape_tree
from fxls.engine import render
from fxls.engine.analyze import FileAnalysis, diagnostic_key
from fxls.protocol.labels import strategy_label
from fxls.protocol.model import (
    CompileCheck,
    Diagnostic,
    ErrorInfo,
    InputSpec,
    PassResult,
    Value,
)

JSON_VERSION = 1
PATH_KEYS = frozenset({"file"})
"""Fields that hold a path (escaped as paths: see :func:`fxls.cli.report.escape.escape_text`)."""


def _json_diag(d: Diagnostic) -> dict[str, Any]:
    s = d.span
    return {
        "code": d.code,
        "severity": d.severity,
        "message": d.message,
        "line": s.line,
        "col": s.col,
        "end_line": s.end_line,
        "end_col": s.end_col,
        "fix": d.fix,
    }


def _json_value(v: Value) -> dict[str, Any]:
    return {"kind": v.kind, "shape": v.shape, "dtype": v.dtype, "text": v.text}


def to_json(
    analysis: FileAnalysis,
    extra_inputs: dict[str, list[InputSpec]] | None = None,
    not_made: list[NotMade] | None = None,
    notebook: NotebookModule | None = None,
) -> dict[str, Any]:
    """One file's result as the version-1 JSON document (docs/cli.md); with ``not_made``
    (``--fix``), also ``fixes_not_made``; for a ``notebook``, every ``line`` counts in the
    cell named by the ``cell`` beside it (:func:`in_cells`)."""
    by_class = {c.name: c for c in analysis.classes}
    claimed: set[int] = set()
    modules = []
    for m in analysis.modules:
        info = by_class.get(m.name)
        own = list(m.diagnostics)
        keys = {diagnostic_key(d) for d in own}
        for i, d in enumerate(analysis.diagnostics):
            inside = info is not None and info.span.line <= d.span.line <= info.span.end_line
            directive = info is not None and any(
                x.line == d.span.line for x in info.directives.items
            )
            if diagnostic_key(d) in keys or inside or directive:
                claimed.add(i)
                if diagnostic_key(d) not in keys:
                    keys.add(diagnostic_key(d))
                    own.append(d)
        nodes = []
        bound = set(m.example_nodes)
        for n in m.nodes:
            span = n.span
            nodes.append(
                {
                    "name": n.name,
                    "op": n.op,
                    "target": n.target,
                    "line": span.line if span else None,
                    "col": span.col if span else None,
                    "end_line": span.end_line if span else None,
                    "end_col": span.end_col if span else None,
                    "call_site_line": n.call_site.line if n.call_site else None,
                    "args": [
                        {"name": a.name, "value": a.value, "default": a.default} for a in n.args
                    ],
                    "outputs": [_json_value(v) for v in n.outputs],
                    "inputs": list(n.inputs),
                    "module_path": n.module_path or None,
                    "holds_for": dict(m.example_sizes) if n.name in bound else None,
                }
            )
        modules.append(
            {
                "class": m.name,
                "line": m.line,
                "status": m.status,
                "capture": strategy_label(m.strategy),
                "build": m.build,
                "isolation": list(analysis.isolation),
                "params": m.params,
                "default_params": m.default_params,
                "inputs": [
                    {
                        "name": i.name,
                        **_json_value(i.value),
                        "assumed": i.assumed,
                        "origin": i.origin,
                    }
                    for i in m.inputs
                ],
                "outputs": [_json_value(v) for v in m.outputs],
                "holds_for": render.outputs_held_sizes(m),
                "nodes": nodes,
                "diagnostics": [_json_diag(d) for d in sorted(own, key=_pos)],
                "passes": [_json_pass(p) for p in m.passes],
                "compile": _json_compile(m.compile),
                "notes": list(m.notes),
                "error": _json_error(m.error),
            }
        )
    rest = [d for i, d in enumerate(analysis.diagnostics) if i not in claimed]
    document = {
        "version": JSON_VERSION,
        "file": analysis.path,
        "outcome": analysis.outcome,
        "torch_version": analysis.torch_version,
        "modules": modules,
        "diagnostics": [_json_diag(d) for d in rest],
    }
    if not_made is not None:
        document["fixes_not_made"] = [
            {"line": n.line, "code": n.code, "kind": n.kind, "title": n.title, "reason": n.reason}
            for n in not_made
        ]
    if notebook is not None:
        in_cells(document, notebook)
    escaped: dict[str, Any] = escape_tree(document, PATH_KEYS)
    return escaped


_LINE_KEYS = {"line": "cell", "call_site_line": "call_site_cell"}


def in_cells(tree: Any, notebook: NotebookModule) -> None:
    """Module lines -> lines in cells, in place: each object with a ``line`` (or
    ``call_site_line``) gets the ``cell`` (``call_site_cell``) it is in, counted from 1, and
    its ``end_line`` counts in that cell too; messages name cells (``the call at cell 3,
    line 2``)."""
    if isinstance(tree, list):
        for item in tree:
            in_cells(item, notebook)
        return
    if not isinstance(tree, dict):
        return
    for key, cell_key in _LINE_KEYS.items():
        line = tree.get(key)
        if isinstance(line, int):
            cell, tree[key] = cell_of(notebook, line)
            tree[cell_key] = cell
            end = tree.get("end_line")
            if key == "line" and isinstance(end, int) and cell is not None:
                start = line - tree[key]
                tree["end_line"] = end - start
    if isinstance(tree.get("message"), str):
        tree["message"] = relabel(notebook, tree["message"])
    for value in tree.values():
        if isinstance(value, (list, dict)):
            in_cells(value, notebook)


def _json_error(error: ErrorInfo | None) -> dict[str, Any] | None:
    """What a class's capture raised that stopped it (its build, or fxls's own code: FX511):
    where, what, and the traceback; null when nothing did."""
    if error is None:
        return None
    return {
        "phase": error.phase,
        "type": error.type,
        "message": error.message,
        "traceback": error.traceback or None,
    }


def _json_compile(check: CompileCheck | None) -> dict[str, Any] | None:
    """The compile check: graphs, breaks (their count: each is a diagnostic of the module),
    recompiles; null when it did not run."""
    if check is None:
        return None
    return {
        "status": check.status,
        "graphs": check.graphs,
        "breaks": len(check.breaks),
        "recompiles": check.recompiles,
        "tensors": check.tensors or None,
        "message": check.message or None,
    }


def _json_pass(run: PassResult) -> dict[str, Any]:
    return {
        "function": run.function,
        "line": run.line,
        "status": run.status,
        "nodes_before": run.before,
        "nodes_after": run.after,
        "added": run.added,
        "removed": run.removed,
        "replaced": run.replaced,
        "changes": [
            {
                "kind": c.kind,
                "node": c.node,
                "op": c.op,
                "target": c.target,
                "by": c.by,
                "line": c.span.line if c.span else None,
            }
            for c in run.changes
        ],
        "message": run.message or None,
    }


def _pos(d: Diagnostic) -> tuple[int, int, str]:
    return (d.span.line, d.span.col, d.code)
