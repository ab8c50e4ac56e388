"""A self-contained HTML page: the graph as JSON, dagre (vendored, MIT) and a small viewer.

The page needs no network: the layout library, the viewer's script and styles are inlined.
"""

from __future__ import annotations

import html
import json
import os
from importlib import resources

from fxls.graph.model import Graph

DAGRE_VERSION = "3.1.3"


def _asset(*parts: str) -> str:
    return resources.files("fxls.graph").joinpath(*parts).read_text(encoding="utf-8")


def _script(text: str) -> str:
    """Inline script text (fxls's own) that cannot close its own ``<script>`` element."""
    return text.replace("</", "<\\/")


_INERT_JSON = str.maketrans(
    {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
)


def script_json(data: object) -> str:
    """``data`` as JSON to embed in a ``<script>`` element, whatever strings a model put in it.

    ``<``, ``>`` and ``&`` can only occur inside JSON strings, where ``\\u003c`` means the same,
    so they are written that way: no ``</script>`` ends the element early, and no ``<!--`` or
    ``<script`` puts the HTML parser into the state where the real ``</script>`` is skipped
    (which blanked the page). U+2028 and U+2029 are escaped for JavaScript parsers that read
    them as line ends. ``JSON.parse`` gives back exactly the strings of ``data``."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return text.translate(_INERT_JSON)


def to_html(graph: Graph) -> str:
    data = graph.to_dict()
    data["abs_file"] = os.path.abspath(graph.file)
    title = f"{graph.cls} · fxls graph"
    collapsed = ", ".join(f"{c.path} ×{c.repeat}" for c in graph.collapsed)
    hint = (
        "Click a node for its source location; click a cluster's title to collapse it, a "
        "collapsed box to expand it. Drag to pan, wheel to zoom."
    )
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="generator" content="fxls graph">
<title>{html.escape(title)}</title>
<style>
{_asset("assets", "graph.css")}
</style>
</head>
<body>
<header>
<h1>{html.escape(graph.cls)}</h1>
<span class="fxls-file">{html.escape(graph.file)}</span>
<span>{html.escape(graph.status)} · {graph.total_nodes} nodes{html.escape(" · collapsed: " + collapsed) if collapsed else ""}</span>
<button id="fxls-fit" type="button">fit</button>
<button id="fxls-expand" type="button">expand all</button>
<button id="fxls-collapse" type="button">collapse all</button>
<span id="fxls-status"></span>
</header>
<svg id="fxls-svg" xmlns="http://www.w3.org/2000/svg">
<defs><marker id="fxls-arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#94a3b8"/></marker></defs>
</svg>
<aside id="fxls-details"><p class="fxls-hint">{html.escape(hint)}</p></aside>
<script type="application/json" id="fxls-data">{script_json(data)}</script>
<script>
/* @dagrejs/dagre {DAGRE_VERSION}, MIT License, Copyright (c) 2012-2014 Chris Pettitt */
{_script(_asset("vendor", "dagre.min.js"))}
</script>
<script>
{_script(_asset("assets", "graph.js"))}
</script>
</body>
</html>
"""
