"""The ``fxls/graph`` answer: one captured class as an HTML page (or why there is none)."""

from __future__ import annotations

from typing import Any

from fxls.graph import build_graph, render_graph
from fxls.lsp.documents import Document


def graph_page(doc: Document | None, uri: str, cls: Any, trusted: bool) -> dict[str, Any]:
    """``{"html", "nodes"}`` for class ``cls`` of ``doc``, else ``{"error"}`` saying why not."""
    if doc is None or doc.result is None:
        why = "" if trusted else " (the workspace is not trusted, so fxls runs none of it)"
        return {"error": f"this file has not been analysed yet{why}"}
    module = doc.result.analysis.module(cls) if isinstance(cls, str) else None
    if module is None or not module.nodes:
        return {"error": f"no graph for {cls}: it is not a module class fxls could capture"}
    path = doc.path if getattr(doc, "path", None) else uri
    drawn = build_graph(str(path), module)
    return {"html": render_graph(drawn, "html"), "nodes": drawn.total_nodes}
