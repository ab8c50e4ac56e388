"""The text report of ``fxls check``: one header per class, one line per call, diagnostics.

Columns are 1-based here, as compilers print them, so editors can jump to them. Every part of
a line that comes from a result or a path goes through :func:`fxls.cli.report.escape.escape_text`
(controls shown, no command can start, long blobs removed, length capped).
"""

from __future__ import annotations

from fxls.analysis.notebook import NotebookModule
from fxls.cli.check.run import NotMade
from fxls.cli.report.cells import position, relabel
from fxls.cli.report.escape import escape_text
from fxls.engine import render
from fxls.engine.analyze import FileAnalysis
from fxls.protocol.labels import strategy_label
from fxls.protocol.model import Diagnostic, InputSpec, ModuleResult, NodeInfo, Value


def _shape_only(v: Value) -> str:
    """Only the shape of a tensor value (``[B, 1000]``); other values as text."""
    return render.value_text(v, dtype=False)


def _input_specs(
    analysis: FileAnalysis, cls: str, extra: dict[str, list[InputSpec]]
) -> dict[str, InputSpec]:
    info = next((c for c in analysis.classes if c.name == cls), None)
    specs = {s.name: s for s in (info.inputs if info else [])}
    specs.update({s.name: s for s in extra.get(cls, [])})
    return specs


def _input_text(name: str, value: Value, spec: InputSpec | None, assumed: bool) -> str:
    if spec is not None and spec.kind == "shape" and value.kind == "tensor" and value.shape:
        if len(spec.dims) == len(value.shape):
            parts = [
                f"{d.name}={d.size}" if d.name and d.size is not None else str(s)
                for d, s in zip(spec.dims, value.shape)
            ]
            shown = "[" + ", ".join(parts) + "]"
        else:
            shown = _shape_only(value)
    elif value.kind == "tensor":
        shown = _shape_only(value)
    else:
        shown = render.value_text(value)
    if value.kind == "tensor" and value.dtype and value.dtype != "float32":
        shown += f" {value.dtype}"
    return f"{name} {shown}" + (" (assumed)" if assumed else "")


def where(node: NodeInfo) -> str:
    """The module instance a call runs in, as the user names it: ``layer1.0.conv1`` for a
    submodule call, ``layer1.0`` for a function called inside one, empty at the top level."""
    return node.target if node.op == "call_module" else (node.module_path or "")


def diagnostic_line(path: str, d: Diagnostic, notebook: NotebookModule | None = None) -> str:
    """``path:line:column: severity CODE message`` (column 1-based; in a notebook
    ``path:cell 3:line:column``), escaped."""
    s = d.span
    where = f"{escape_text(path, path=True)}:{position(notebook, s.line, s.col + 1)}: "
    return where + escape_text(f"{d.severity} {d.code} {relabel(notebook, d.message)}")


def not_made_line(path: str, fix: NotMade) -> str:
    """``path:line: fix not made: TITLE: REASON``, escaped (the title names the checked code,
    the reason comes from the worker)."""
    where = escape_text(path, path=True) + (f":{fix.line}" if fix.line is not None else "")
    return f"{where}: fix not made: {escape_text(fix.title)}: {escape_text(fix.reason)}"


def _status_parts(m: ModuleResult) -> list[str]:
    """``traced (fx)``; for a skipped class, also why there is nothing to show."""
    how = f" ({strategy_label(m.strategy)})" if m.strategy.method != "none" else ""
    parts = [m.status + how]
    if m.status == "skipped" and m.notes:
        parts.append(render.truncate(m.notes[0], 120))
    return parts


def _outputs_text(m: ModuleResult) -> str:
    """`` → [B, 10]``, and ``(holds for B = 2)`` when the outputs hold for that size only."""
    if not m.outputs:
        return ""
    held = render.outputs_hold_for(m)
    return " → " + ", ".join(_shape_only(v) for v in m.outputs) + (f" ({held})" if held else "")


def _compile_lines(m: ModuleResult) -> list[str]:
    """``  torch.compile: compiles to 5 graphs (3 breaks)`` (the breaks are diagnostics)."""
    check = m.compile
    if check is None:
        return []
    found = render.compile_text(check) or f"not checked: {check.message}"
    return ["  " + escape_text(f"torch.compile: {found}")]


def _params_text(m: ModuleResult) -> str | None:
    """``25.6 M params``; with the default configuration's first when the build has fewer
    layers than it: ``6.7 B params (535.8 M params as built)``."""
    params = render.params_text(m.params)
    if m.default_params is None:
        return params
    return f"{render.params_text(m.default_params)} ({params} as built)"


def format_text(
    analysis: FileAnalysis,
    extra_inputs: dict[str, list[InputSpec]] | None = None,
    text: str | None = None,
    notebook: NotebookModule | None = None,
) -> str:
    """The human-readable report of one file (columns 1-based, like compilers print them).

    With the analysed ``text``, calls show the expressions the user wrote as arguments; with
    a ``notebook``, positions are cells and lines in them (``cell 3:12:5``)."""
    source = text.split("\n") if text is not None else None
    lines: list[str] = []
    path = escape_text(analysis.path, path=True)
    for m in analysis.modules:
        parts = _status_parts(m)
        if m.nodes:
            parts.append(f"{len(m.nodes)} nodes")
        params = _params_text(m)
        if params:
            parts.append(params)
        specs = _input_specs(analysis, m.name, extra_inputs or {})
        if m.inputs:
            shown = ", ".join(
                _input_text(i.name, i.value, specs.get(i.name), i.assumed) for i in m.inputs
            )
            shown += _outputs_text(m)
            parts.append(shown)
        header = escape_text(f"class {m.name}  " + " · ".join(parts))
        lines.append(f"{path}:{position(notebook, m.line)} {header}")
        rows = []
        by_name = {n.name: n for n in m.nodes}
        inner = render.inner_module_calls(m.nodes)
        for n in m.nodes:
            if not n.op.startswith("call_"):
                continue
            span = n.span or n.call_site
            loc = position(notebook, span.line, span.col + 1) if span else "-"
            outputs = ", ".join(render.value_text(v) for v in n.outputs)
            call = render.call_text(n, source, by_name, inner)
            rows.append((loc, *(escape_text(cell) for cell in (where(n), n.op, call, outputs))))
        if rows:
            widths = [max(len(r[i]) for r in rows) for i in range(4)]
            for r in rows:
                row = "  " + "  ".join(r[i].ljust(widths[i]) for i in range(4))
                lines.append(f"{row}  → {r[4]}" if r[4] else row.rstrip())
        for run in m.passes:
            counts = render.pass_counts(run)
            lines.append(
                "  "
                + escape_text(f"pass {run.function} (line {run.line}): {run.status} · {counts}")
            )
        lines.extend(_compile_lines(m))
    lines.extend(diagnostic_line(analysis.path, d, notebook) for d in analysis.diagnostics)
    if not analysis.modules and not analysis.diagnostics:
        lines.append(f"{path}: no nn.Module classes found")
    return "\n".join(lines) + "\n"
