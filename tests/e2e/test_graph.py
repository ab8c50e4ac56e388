"""``fxls graph`` through the real CLI and worker: DOT, SVG (Graphviz) and HTML (dagre).

Structure is asserted on what each format carries: node and cluster counts, the ×N collapse
of repeated blocks, data-flow edges and source lines.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from harness import ROOT, needs_worker

pytestmark = [needs_worker, pytest.mark.slow]
HAS_DOT = shutil.which("dot") is not None


def _graph(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fxls", "graph", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, **(env or {})},
    )


def _html_data(path: Path) -> dict[str, Any]:
    page = path.read_text()
    found = re.search(r'<script type="application/json" id="fxls-data">(.*?)</script>', page, re.S)
    assert found, "no graph data in the page"
    data: dict[str, Any] = json.loads(found.group(1).replace("<\\/", "</"))
    return data


@pytest.fixture(scope="module")
def resnet_html(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("graph") / "resnet.html"
    proc = _graph("docs/examples/resnet.py:ResNet", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "177 nodes, 97 drawn" in proc.stderr
    page = out.read_text()
    assert "<script src" not in page and "<link" not in page
    urls = set(re.findall(r"https?://[^\"' )]*", page))
    assert urls == {"http://www.w3.org/2000/svg"}, "the page must be self-contained"
    assert "@dagrejs/dagre 3.1.3" in page
    return _html_data(out)


def test_html_collapses_repeated_bottlenecks(resnet_html: dict[str, Any]) -> None:
    data = resnet_html
    assert data["class"] == "ResNet" and data["total_nodes"] == 177
    repeats = {
        c["path"]: (c["repeat"], c["last_path"]) for c in data["clusters"] if c["repeat"] > 1
    }
    # layerN.0 has the downsampling branch; the blocks after it are identical
    assert repeats == {
        "layer1.1": (2, "layer1.2"),
        "layer2.1": (3, "layer2.3"),
        "layer3.1": (5, "layer3.5"),
        "layer4.1": (2, "layer4.2"),
    }
    clusters = {c["id"] for c in data["clusters"]}
    assert {"layer1.0", "layer1.0.downsample", "layer2.0", "layer3.0", "layer4.0"} <= clusters
    ids = {n["id"] for n in data["nodes"]}
    assert len(ids) == len(data["nodes"]) == 97
    assert not any(n["cluster"] and n["cluster"].startswith("layer3.2") for n in data["nodes"])
    for src, dst in data["edges"]:
        assert src in ids and dst in ids
    # data flow: the residual add of a block reads the block's input and its last batch norm
    add = next(n for n in data["nodes"] if n["cluster"] == "layer1.0" and n["label"] == "add")
    inputs = {src for src, dst in data["edges"] if dst == add["id"]}
    assert inputs == {"layer1_0_bn3", "layer1_0_downsample_1"}
    conv1 = next(n for n in data["nodes"] if n["id"] == "conv1")
    source = (ROOT / "docs/examples/resnet.py").read_text().splitlines()
    assert "self.conv1(x)" in source[conv1["line"] - 1]
    assert conv1["shape"] == "[B, 64, 112, 112]" and conv1["label"] == "Conv2d"


def test_dot_of_the_examples(tmp_path: Path) -> None:
    cases = {
        "docs/examples/cnn.py": (14, 0, 0),
        "docs/examples/gpt.py:GPT": (55, 3, 1),
    }
    for target, (nodes, clusters, collapsed) in cases.items():
        out = tmp_path / "graph.dot"
        proc = _graph(target, "-o", str(out))
        assert proc.returncode == 0, proc.stderr
        dot = out.read_text()
        assert len(re.findall(r'^\s*"[^"]+" \[label=<', dot, re.M)) == nodes, target
        assert dot.count("subgraph cluster_") == clusters, target
        assert len(re.findall(r" ×\d+ ", dot)) == collapsed, target
        assert len(re.findall(r'^\s*"[^"]+" -> "[^"]+";$', dot, re.M)) >= nodes - 1
    dot = (tmp_path / "graph.dot").read_text()
    assert 'label="h.0 ×2  (h.0 … h.1)"' in dot
    assert 'tooltip="docs/examples/gpt.py:48:19  call_module h.0.attn.c_attn"' in dot


def test_no_collapse_draws_every_block(tmp_path: Path) -> None:
    out = tmp_path / "gpt.html"
    proc = _graph("docs/examples/gpt.py:GPT", "-o", str(out), "--no-collapse")
    assert proc.returncode == 0, proc.stderr
    data = _html_data(out)
    assert len(data["nodes"]) == data["total_nodes"] == 99
    assert {c["id"] for c in data["clusters"]} >= {"h.0", "h.1", "h.0.attn", "h.1.attn"}


@pytest.mark.skipif(not HAS_DOT, reason="Graphviz dot is not installed")
def test_svg_by_graphviz(tmp_path: Path) -> None:
    out = tmp_path / "gpt.svg"
    proc = _graph("docs/examples/gpt.py:GPT", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    root = ET.parse(out).getroot()
    ns = {"svg": "http://www.w3.org/2000/svg"}
    groups = root.findall(".//svg:g", ns)
    nodes = [g for g in groups if g.get("class") == "node"]
    clusters = [g for g in groups if g.get("class") == "cluster"]
    edges = [g for g in groups if g.get("class") == "edge"]
    assert len(nodes) == 55 and len(clusters) == 3 and len(edges) >= 54
    titles = [t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text")]
    assert any("×2" in t for t in titles)


def test_svg_without_graphviz_says_what_to_do(tmp_path: Path) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    os.symlink(sys.executable, empty / "python")
    proc = _graph("docs/examples/cnn.py", "-o", str(tmp_path / "x.svg"), env={"PATH": str(empty)})
    assert proc.returncode == 2
    assert "Graphviz" in proc.stderr and "apt-get install graphviz" in proc.stderr
    assert not (tmp_path / "x.svg").exists()


def test_usage_errors(tmp_path: Path) -> None:
    proc = _graph("docs/examples/gpt.py", "-o", str(tmp_path / "g.dot"))
    assert proc.returncode == 2 and "name one: docs/examples/gpt.py:CLASS" in proc.stderr
    proc = _graph("docs/examples/gpt.py:Nope", "-o", str(tmp_path / "g.dot"))
    assert proc.returncode == 2 and "no module class Nope" in proc.stderr
    proc = _graph("docs/examples/cnn.py", "-o", str(tmp_path / "g.png"))
    assert proc.returncode == 2 and ".svg, .html or .dot" in proc.stderr


def test_gpt48_renders_quickly_with_blocks_collapsed(tmp_path: Path) -> None:
    formats = ["html", "dot"] + (["svg"] if HAS_DOT else [])
    for fmt in formats:
        out = tmp_path / f"gpt48.{fmt}"
        started = time.monotonic()
        proc = _graph("bench/models/gpt48.py:GPT48", "-o", str(out))
        elapsed = time.monotonic() - started
        assert proc.returncode == 0, proc.stderr
        assert "1980 nodes, 53 drawn (collapsed h.0 ×48)" in proc.stderr
        assert elapsed < 60, f"{fmt}: {elapsed:.1f} s"
    data = _html_data(tmp_path / "gpt48.html")
    (block,) = [c for c in data["clusters"] if c["repeat"] > 1]
    assert (block["path"], block["repeat"], block["last_path"]) == ("h.0", 48, "h.47")
    node = shutil.which("node")
    if node is None:
        return
    # the page's layout (dagre) on the collapsed graph, timed outside a browser
    script = tmp_path / "layout.js"
    script.write_text(LAYOUT_JS)
    proc = subprocess.run(
        [
            node,
            str(script),
            str(ROOT / "fxls/graph/vendor/dagre.min.js"),
            str(tmp_path / "gpt48.html"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    laid_out, ms = proc.stdout.split()
    assert int(laid_out) == 53 and float(ms) < 20_000


LAYOUT_JS = r"""
const fs = require("fs");
eval(fs.readFileSync(process.argv[2], "utf8").replace('"use strict";var dagre=', "globalThis.dagre="));
const page = fs.readFileSync(process.argv[3], "utf8");
const json = page.match(/<script type="application\/json" id="fxls-data">([\s\S]*?)<\/script>/)[1];
const data = JSON.parse(json.split("<\\/").join("</"));
const g = new dagre.graphlib.Graph({ compound: true });
g.setGraph({ rankdir: "TB" });
g.setDefaultEdgeLabel(() => ({}));
for (const c of data.clusters) g.setNode("K:" + c.id, {});
for (const c of data.clusters) if (c.parent) g.setParent("K:" + c.id, "K:" + c.parent);
for (const n of data.nodes) {
  g.setNode(n.id, { width: 8 * n.title.length + 16, height: 44 });
  if (n.cluster) g.setParent(n.id, "K:" + n.cluster);
}
for (const [a, b] of data.edges) g.setEdge(a, b);
const t = Date.now();
dagre.layout(g);
const placed = data.nodes.filter((n) => Number.isFinite(g.node(n.id).x)).length;
console.log(placed, Date.now() - t);
"""
