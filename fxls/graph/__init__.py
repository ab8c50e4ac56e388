"""The graph view of a captured module: ``fxls graph`` writes it as DOT, SVG or HTML.

Pure data and text (no LSP, no torch): :mod:`fxls.graph.model` builds the drawable graph from a
``ModuleResult``; :mod:`fxls.graph.dot` writes DOT and runs Graphviz for SVG;
:mod:`fxls.graph.html` writes a self-contained page laid out by dagre (vendored).
"""

from __future__ import annotations

from fxls.graph.model import Graph, GraphCluster, GraphNode, build_graph

FORMATS = ("svg", "html", "dot")


def render_graph(graph: Graph, fmt: str) -> str:
    """``graph`` as ``svg``, ``html`` or ``dot`` text (SVG raises GraphvizMissing without dot)."""
    if fmt == "dot":
        from fxls.graph.dot import to_dot

        return to_dot(graph)
    if fmt == "svg":
        from fxls.graph.dot import to_svg

        return to_svg(graph)
    if fmt == "html":
        from fxls.graph.html import to_html

        return to_html(graph)
    raise ValueError(f"unknown graph format {fmt!r}")


__all__ = ["FORMATS", "Graph", "GraphCluster", "GraphNode", "build_graph", "render_graph"]
