"""Graphviz: the graph as DOT text, and SVG through Graphviz's ``dot`` when it is installed."""

from __future__ import annotations

import os
import shutil
import subprocess

from fxls.graph.model import Graph, GraphCluster, GraphNode

OP_COLORS = {
    "placeholder": "#dbeafe",
    "output": "#dbeafe",
    "call_module": "#fef3c7",
    "call_function": "#ecfccb",
    "call_method": "#f3e8ff",
    "get_attr": "#f1f5f9",
}


NO_DOT = (
    "SVG output needs Graphviz's `dot` on PATH (Debian/Ubuntu: apt-get install graphviz; "
    "macOS: brew install graphviz); write .html or .dot instead"
)


class GraphvizMissing(RuntimeError):
    """``dot`` is not on PATH."""


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _html(text: str) -> str:
    return (
        text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
    )


def location(graph: Graph, node: GraphNode) -> str:
    """``docs/examples/gpt.py:47:9`` (1-based column), or the file alone."""
    if node.line is None:
        return graph.file
    return f"{graph.file}:{node.line}" + (f":{node.col + 1}" if node.col is not None else "")


def _node_line(graph: Graph, n: GraphNode) -> str:
    rows = [f"<B>{_html(n.title)}</B>"]
    if n.label and n.label != n.title:
        rows.append(_html(n.label))
    if n.shape:
        rows.append(f'<FONT POINT-SIZE="9">{_html(n.shape)}</FONT>')
    if n.line is not None:
        rows.append(f'<FONT POINT-SIZE="8" COLOR="#64748b">line {n.line}</FONT>')
    label = "<" + "<BR/>".join(rows) + ">"
    attrs = {
        "label": label,
        "fillcolor": _quote(OP_COLORS.get(n.op, "#ffffff")),
        "tooltip": _quote(f"{location(graph, n)}  {n.op} {n.target}"),
        "id": _quote(f"node-{n.id}"),
    }
    if n.op in ("placeholder", "output"):
        attrs["shape"] = "ellipse"
    body = ", ".join(f"{k}={v}" for k, v in attrs.items())
    return f"{_quote(n.id)} [{body}];"


def _cluster_label(c: GraphCluster) -> str:
    if c.repeat > 1:
        return f"{c.label} ×{c.repeat}  ({c.path} … {c.last_path})"
    return c.label


def to_dot(graph: Graph) -> str:
    """DOT text with nested ``cluster_`` subgraphs; nodes carry their source location."""
    out = [
        f"digraph {_quote(graph.cls)} {{",
        f"  label={_quote(f'{graph.cls} · {graph.file} · {graph.total_nodes} nodes')};",
        '  labelloc="t"; rankdir="TB"; newrank=true; ranksep=0.3; nodesep=0.25;',
        '  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=10];',
        '  edge [color="#64748b", arrowsize=0.6];',
    ]
    members: dict[str | None, list[GraphNode]] = {}
    for n in graph.nodes:
        members.setdefault(n.cluster, []).append(n)
    children: dict[str | None, list[GraphCluster]] = {}
    for c in graph.clusters:
        children.setdefault(c.parent, []).append(c)
    index = {c.id: i for i, c in enumerate(graph.clusters)}

    def emit(cluster: GraphCluster | None, indent: str) -> None:
        key = cluster.id if cluster else None
        for c in children.get(key, []):
            style = "rounded,filled,bold" if c.repeat > 1 else "rounded"
            out.append(f"{indent}subgraph cluster_{index[c.id]} {{")
            out.append(f"{indent}  label={_quote(_cluster_label(c))}; style={_quote(style)};")
            out.append(f'{indent}  color="#94a3b8"; fillcolor="#f8fafc"; fontsize=10;')
            out.append(f"{indent}  id={_quote(f'cluster-{c.id}')};")
            emit(c, indent + "  ")
            out.append(f"{indent}}}")
        for n in members.get(key, []):
            out.append(indent + _node_line(graph, n))

    emit(None, "  ")
    for src, dst in graph.edges:
        out.append(f"  {_quote(src)} -> {_quote(dst)};")
    out.append("}")
    return "\n".join(out) + "\n"


def dot_binary() -> str | None:
    return shutil.which("dot")


def to_svg(graph: Graph, *, timeout: float = 120.0) -> str:
    """SVG drawn by Graphviz ``dot``; raises GraphvizMissing when it is not installed."""
    binary = dot_binary()
    if binary is None:
        raise GraphvizMissing(NO_DOT)
    proc = subprocess.run(
        [binary, "-Tsvg"],
        input=to_dot(graph),
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "LC_ALL": "C.UTF-8"},
    )
    if proc.returncode != 0:
        raise RuntimeError(f"dot failed: {proc.stderr.strip()[:500]}")
    return proc.stdout
