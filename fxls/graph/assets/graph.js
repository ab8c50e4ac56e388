// fxls graph view: lays out the graph embedded in the page with dagre and draws it as SVG.
// Clusters are submodules (click a cluster's title to collapse or expand it); a collapsed run
// of identical blocks shows "×N". Click a node to see its source location and details.
// Drag to pan, wheel to zoom. No network access, no other library.
(function () {
  "use strict";
  const NS = "http://www.w3.org/2000/svg";
  const data = JSON.parse(document.getElementById("fxls-data").textContent);
  const clusters = new Map(data.clusters.map((c) => [c.id, c]));
  const nodes = new Map(data.nodes.map((n) => [n.id, n]));
  const collapsed = new Set();
  const CHAR = 6.6;
  const LINE = 14;

  // nodes per cluster, children included
  const size = new Map();
  for (const n of data.nodes) {
    let c = n.cluster;
    while (c) {
      size.set(c, (size.get(c) || 0) + 1);
      c = clusters.get(c).parent;
    }
  }
  // large graphs open with their top-level clusters collapsed
  const AUTO_COLLAPSE = 250;
  if (data.nodes.length > AUTO_COLLAPSE) {
    for (const c of data.clusters) {
      if (!c.parent && (size.get(c.id) || 0) > 1) collapsed.add(c.id);
    }
  }

  function el(tag, attrs, parent) {
    const e = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    if (parent) parent.appendChild(e);
    return e;
  }

  function ancestors(cid) {
    const out = [];
    while (cid) {
      out.push(cid);
      cid = clusters.get(cid).parent;
    }
    return out;
  }

  // The outermost collapsed cluster that hides a cluster (or null).
  function hiddenBy(cid) {
    let found = null;
    for (const a of ancestors(cid)) if (collapsed.has(a)) found = a;
    return found;
  }

  function repeatText(c) {
    return c.repeat > 1 ? " ×" + c.repeat : "";
  }

  function nodeLines(n) {
    const lines = [n.title];
    if (n.label && n.label !== n.title) lines.push(n.label);
    if (n.shape) lines.push(n.shape);
    return lines;
  }

  function box(lines) {
    const w = Math.max(...lines.map((t) => t.length)) * CHAR + 16;
    return { width: Math.max(w, 40), height: lines.length * LINE + 10 };
  }

  function layout() {
    const g = new dagre.graphlib.Graph({ compound: true });
    g.setGraph({ rankdir: "TB", nodesep: 16, ranksep: 26, edgesep: 8, marginx: 24, marginy: 24 });
    g.setDefaultEdgeLabel(() => ({}));
    const visible = (cid) => !cid || hiddenBy(cid) === null;
    for (const c of data.clusters) {
      const by = hiddenBy(c.id);
      if (by !== null && by !== c.id) continue;
      const parent = c.parent && visible(c.parent) ? "K:" + c.parent : null;
      if (by === c.id) {
        const lines = [c.label + repeatText(c), (size.get(c.id) || 0) + " nodes"];
        g.setNode("C:" + c.id, { kind: "collapsed", cluster: c, lines, ...box(lines) });
        if (parent) g.setParent("C:" + c.id, parent);
      } else {
        g.setNode("K:" + c.id, { kind: "cluster", cluster: c });
        if (parent) g.setParent("K:" + c.id, parent);
      }
    }
    const owner = new Map();
    for (const n of data.nodes) {
      const by = n.cluster ? hiddenBy(n.cluster) : null;
      if (by !== null) {
        owner.set(n.id, "C:" + by);
        continue;
      }
      owner.set(n.id, "N:" + n.id);
      const lines = nodeLines(n);
      g.setNode("N:" + n.id, { kind: "node", node: n, lines, ...box(lines) });
      if (n.cluster) g.setParent("N:" + n.id, "K:" + n.cluster);
    }
    // clusters left without anything inside are dropped (dagre needs children)
    for (const c of data.clusters) {
      const id = "K:" + c.id;
      if (g.hasNode(id) && g.children(id).length === 0) g.removeNode(id);
    }
    const seen = new Set();
    for (const [src, dst] of data.edges) {
      const a = owner.get(src);
      const b = owner.get(dst);
      if (!a || !b || a === b || seen.has(a + "\u0000" + b)) continue;
      seen.add(a + "\u0000" + b);
      g.setEdge(a, b);
    }
    const started = performance.now();
    dagre.layout(g);
    document.getElementById("fxls-status").textContent =
      `${data.nodes.length} of ${data.total_nodes} nodes drawn · ` +
      `${g.nodeCount()} boxes · layout ${Math.round(performance.now() - started)} ms`;
    return g;
  }

  const svg = document.getElementById("fxls-svg");
  const view = el("g", { id: "fxls-view" }, svg);
  let scale = 1;
  let tx = 0;
  let ty = 0;
  function apply() {
    view.setAttribute("transform", `translate(${tx},${ty}) scale(${scale})`);
  }

  function select(n) {
    const panel = document.getElementById("fxls-details");
    panel.replaceChildren();
    const add = (tag, text, cls) => {
      const e = document.createElement(tag);
      e.textContent = text;
      if (cls) e.className = cls;
      panel.appendChild(e);
      return e;
    };
    add("h2", n.title);
    const where = n.line === null ? data.file : `${data.file}:${n.line}:${(n.col || 0) + 1}`;
    const loc = add("div", "", "fxls-location");
    const a = document.createElement("a");
    a.href = "vscode://file/" + encodeURI(data.abs_file + ":" + (n.line || 1) + ":" + ((n.col || 0) + 1));
    a.textContent = where;
    a.title = "open in VS Code";
    loc.appendChild(a);
    add("div", `${n.op} · ${n.target}`, "fxls-op");
    if (n.module_type) add("div", n.module_type, "fxls-mono");
    if (n.shape) add("div", "→ " + n.shape, "fxls-mono");
    if (n.call_site_line !== null && n.call_site_line !== n.line) {
      add("div", `called from line ${n.call_site_line} of ${data.class}.forward`);
    }
    for (const [name, value] of n.args) add("div", `${name} = ${value}`, "fxls-mono");
    for (const e of svg.querySelectorAll(".fxls-selected")) e.classList.remove("fxls-selected");
    const target = svg.querySelector(`[data-node="${CSS.escape(n.id)}"]`);
    if (target) target.classList.add("fxls-selected");
    location.hash = "node=" + encodeURIComponent(n.id);
  }

  function draw() {
    const g = layout();
    view.replaceChildren();
    const layerClusters = el("g", {}, view);
    const layerEdges = el("g", {}, view);
    const layerNodes = el("g", {}, view);
    const byDepth = g
      .nodes()
      .filter((id) => id.startsWith("K:"))
      .sort((a, b) => ancestors(a.slice(2)).length - ancestors(b.slice(2)).length);
    for (const id of byDepth) {
      const v = g.node(id);
      const c = v.cluster;
      const grp = el("g", { class: "fxls-cluster" + (c.repeat > 1 ? " fxls-repeat" : "") }, layerClusters);
      el("rect", { x: v.x - v.width / 2, y: v.y - v.height / 2 - 12, width: v.width, height: v.height + 12, rx: 6 }, grp);
      const t = el("text", { x: v.x - v.width / 2 + 6, y: v.y - v.height / 2 - 1, class: "fxls-cluster-title" }, grp);
      t.textContent = "▾ " + c.label + repeatText(c) + (c.repeat > 1 ? `  (${c.path} … ${c.last_path})` : "");
      t.addEventListener("click", () => {
        collapsed.add(c.id);
        draw();
      });
    }
    for (const e of g.edges()) {
      const pts = g.edge(e).points;
      const d = pts.map((p, i) => (i ? "L" : "M") + p.x.toFixed(1) + "," + p.y.toFixed(1)).join(" ");
      el("path", { d, class: "fxls-edge", "marker-end": "url(#fxls-arrow)" }, layerEdges);
    }
    for (const id of g.nodes()) {
      const v = g.node(id);
      if (v.kind === "cluster") continue;
      const x = v.x - v.width / 2;
      const y = v.y - v.height / 2;
      const cls = v.kind === "collapsed" ? "fxls-node fxls-collapsed" : "fxls-node fxls-op-" + v.node.op;
      const grp = el("g", { class: cls }, layerNodes);
      el("rect", { x, y, width: v.width, height: v.height, rx: v.kind === "collapsed" ? 6 : 4 }, grp);
      v.lines.forEach((line, i) => {
        const t = el("text", { x: v.x, y: y + 5 + LINE * (i + 0.8), class: i ? "fxls-sub" : "fxls-main" }, grp);
        t.textContent = line;
      });
      if (v.kind === "collapsed") {
        grp.addEventListener("click", () => {
          collapsed.delete(v.cluster.id);
          draw();
        });
        const title = el("title", {}, grp);
        title.textContent = "click to expand";
      } else {
        grp.setAttribute("data-node", v.node.id);
        grp.addEventListener("click", (ev) => {
          ev.stopPropagation();
          select(v.node);
        });
        const title = el("title", {}, grp);
        title.textContent = v.node.line === null ? data.file : `${data.file}:${v.node.line}`;
      }
    }
    const info = g.graph();
    svg.dataset.width = info.width;
    svg.dataset.height = info.height;
  }

  function fit() {
    const w = +svg.dataset.width || 1;
    const h = +svg.dataset.height || 1;
    const box = svg.getBoundingClientRect();
    scale = Math.min(box.width / w, box.height / h, 1.5);
    if (scale < 0.6) scale = Math.min(box.width / w, 1); // tall graphs: readable, top first
    tx = Math.max((box.width - w * scale) / 2, 0);
    ty = Math.max((box.height - h * scale) / 2, 0);
    apply();
  }

  let drag = null;
  svg.addEventListener("mousedown", (e) => {
    drag = { x: e.clientX - tx, y: e.clientY - ty };
  });
  window.addEventListener("mousemove", (e) => {
    if (!drag) return;
    tx = e.clientX - drag.x;
    ty = e.clientY - drag.y;
    apply();
  });
  window.addEventListener("mouseup", () => {
    drag = null;
  });
  svg.addEventListener(
    "wheel",
    (e) => {
      e.preventDefault();
      const r = svg.getBoundingClientRect();
      const px = e.clientX - r.left;
      const py = e.clientY - r.top;
      const k = Math.exp(-e.deltaY * 0.0015);
      tx = px - (px - tx) * k;
      ty = py - (py - ty) * k;
      scale *= k;
      apply();
    },
    { passive: false },
  );
  document.getElementById("fxls-fit").addEventListener("click", fit);
  document.getElementById("fxls-expand").addEventListener("click", () => {
    const many = data.nodes.length > 600;
    if (many && !confirm(`Lay out all ${data.nodes.length} nodes? This can take a while.`)) return;
    collapsed.clear();
    draw();
    fit();
  });
  document.getElementById("fxls-collapse").addEventListener("click", () => {
    for (const c of data.clusters) if (!c.parent) collapsed.add(c.id);
    draw();
    fit();
  });
  draw();
  fit();
  const wanted = decodeURIComponent((location.hash.match(/node=([^&]+)/) || [])[1] || "");
  if (nodes.has(wanted)) select(nodes.get(wanted));
  window.fxlsGraph = { data, collapsed, draw, select };
})();
