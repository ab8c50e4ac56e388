"""A captured module as a drawable graph: nodes, data-flow edges, clusters, collapsed repeats.

- Nodes are the FX nodes (``NodeInfo``): op, target, output shapes and the source span.
- Edges come from ``NodeInfo.inputs`` (the nodes each node reads).
- Clusters are the submodule instances nodes belong to (``NodeInfo.module_path``), nested.
- Repeated blocks collapse: instances ``P.0``, ``P.1``, ... of a module list whose nodes have
  the same structure (ops, relative targets, submodule types, shapes, internal edges) are drawn
  once, as the first instance with a repeat count (``h.0 ×48``). Edges into any instance go to
  the one drawn; edges between consecutive instances disappear into the ×N.

Pure data, no I/O; the writers (``dot``, ``html``, ``svg``) draw it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from fxls.engine import render
from fxls.protocol.model import ModuleResult, NodeInfo

_INDEX = re.compile(r"^\d+$")


@dataclass
class GraphNode:
    id: str
    name: str
    op: str
    target: str
    label: str
    """What the node does, briefly: ``Linear``, ``relu``, ``.view``, ``add``."""
    title: str
    """The node as the user knows it: the submodule path or the node name."""
    shape: str
    """Output shapes (``[B, T, 768]``; dtype when not float32)."""
    cluster: str | None
    line: int | None
    col: int | None
    end_line: int | None
    end_col: int | None
    call_site_line: int | None
    module_type: str | None = None
    args: list[tuple[str, str]] = field(default_factory=list)
    """(parameter, value) of the arguments the call passed explicitly."""


@dataclass
class GraphCluster:
    id: str
    path: str
    """Module instance path (``h.0.attn``)."""
    label: str
    parent: str | None
    repeat: int = 1
    """How many identical instances this cluster stands for (``×48``)."""
    last_path: str | None = None
    """The path of the last instance a collapsed cluster stands for (``h.47``)."""


@dataclass
class Graph:
    file: str
    cls: str
    status: str
    nodes: list[GraphNode] = field(default_factory=list)
    edges: list[tuple[str, str]] = field(default_factory=list)
    clusters: list[GraphCluster] = field(default_factory=list)
    total_nodes: int = 0
    """Nodes of the captured graph before repeated blocks were collapsed."""

    def cluster(self, cid: str) -> GraphCluster | None:
        return next((c for c in self.clusters if c.id == cid), None)

    @property
    def collapsed(self) -> list[GraphCluster]:
        return [c for c in self.clusters if c.repeat > 1]

    def to_dict(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "class": self.cls,
            "status": self.status,
            "total_nodes": self.total_nodes,
            "nodes": [vars(n) | {"args": [list(a) for a in n.args]} for n in self.nodes],
            "edges": [list(e) for e in self.edges],
            "clusters": [vars(c) for c in self.clusters],
        }


# ---------------------------------------------------------------------------------------
# Repeated blocks
# ---------------------------------------------------------------------------------------


def _instance_of(path: str) -> list[tuple[str, int]]:
    """Every (prefix, index) a module path is inside: ``h.3.attn`` -> ``[("h", 3)]``."""
    parts = path.split(".") if path else []
    found = []
    for i, part in enumerate(parts):
        if _INDEX.match(part) and i > 0:
            found.append((".".join(parts[:i]), int(part)))
    return found


def _within(path: str, instance: str) -> bool:
    return path == instance or path.startswith(instance + ".")


def _relative(text: str, instance: str) -> str:
    if _within(text, instance):
        return text[len(instance) :].lstrip(".")
    return text


def _signature(nodes: list[NodeInfo], instance: str) -> tuple[Any, ...]:
    index = {n.name: i for i, n in enumerate(nodes)}
    sig = []
    for n in nodes:
        target = _relative(n.target, instance) if n.op in ("call_module", "get_attr") else n.target
        sig.append(
            (
                n.op,
                target,
                _relative(n.module_path or "", instance),
                n.module_type,
                render.values_text(n.outputs),
                tuple(("in", index[s]) if s in index else ("ext",) for s in n.inputs),
            )
        )
    return tuple(sig)


def _collapse(
    nodes: list[NodeInfo], done: set[str]
) -> tuple[dict[str, str], dict[str, tuple[int, str]], set[str]] | None:
    """One round: collapse the runs of identical instances of the shallowest module lists.

    Returns (node name -> the name of the node drawn for it, instance path drawn ->
    (repeat, last instance path), prefixes handled), or None when nothing is left to do.
    """
    groups: dict[str, dict[int, list[NodeInfo]]] = {}
    for n in nodes:
        for prefix, i in _instance_of(n.module_path or ""):
            if prefix in done:
                continue
            groups.setdefault(prefix, {}).setdefault(i, []).append(n)
            break
    if not groups:
        return None
    depth = min(p.count(".") for p in groups)
    chosen = {p: g for p, g in groups.items() if p.count(".") == depth}
    replace: dict[str, str] = {}
    repeats: dict[str, tuple[int, str]] = {}
    for prefix, instances in chosen.items():
        order = sorted(instances)
        run: list[int] = []
        previous: tuple[Any, ...] | None = None
        runs: list[list[int]] = []
        for i in order:
            sig = _signature(instances[i], f"{prefix}.{i}")
            if run and sig == previous and i == run[-1] + 1:
                run.append(i)
            else:
                if len(run) > 1:
                    runs.append(run)
                run = [i]
            previous = sig
        if len(run) > 1:
            runs.append(run)
        for r in runs:
            first = instances[r[0]]
            repeats[f"{prefix}.{r[0]}"] = (len(r), f"{prefix}.{r[-1]}")
            for i in r[1:]:
                for k, n in enumerate(instances[i]):
                    replace[n.name] = first[k].name
    return replace, repeats, set(chosen)


# ---------------------------------------------------------------------------------------
# Building
# ---------------------------------------------------------------------------------------


def _cluster_path(n: NodeInfo) -> str:
    return n.module_path or ""


def _node(n: NodeInfo, cluster: str | None, held: str | None = None) -> GraphNode:
    """``held``: ``holds for B = 2`` when the node's values hold for the example sizes only."""
    span = n.span or n.call_site
    if n.op == "placeholder":
        label = "input"
    elif n.op == "output":
        label = "output"
    elif n.op == "get_attr":
        label = "attribute"
    else:
        label = render.short_target(n)
    shape = render.values_text(n.outputs, default_dtype="float32")
    if held and shape:
        shape = f"{render.truncate(shape, 60)} · {held}"
    return GraphNode(
        id=n.name,
        name=n.name,
        op=n.op,
        target=n.target,
        label=label,
        title=render.display_name(n),
        shape=render.truncate(shape, 80),
        cluster=cluster,
        line=span.line if span else None,
        col=span.col if span else None,
        end_line=span.end_line if span else None,
        end_col=span.end_col if span else None,
        call_site_line=n.call_site.line if n.call_site else None,
        module_type=n.module_type,
        args=[(a.name, render.truncate(a.value, 40)) for a in n.args if not a.default],
    )


def build_graph(file: str, module: ModuleResult, *, collapse: bool = True) -> Graph:
    """The drawable graph of one captured class."""
    graph = Graph(file=file, cls=module.name, status=module.status)
    nodes = list(module.nodes)
    graph.total_nodes = len(nodes)
    replace: dict[str, str] = {}
    repeats: dict[str, tuple[int, str]] = {}
    if collapse:
        done: set[str] = set()
        remaining = nodes
        while True:
            step = _collapse(remaining, done)
            if step is None:
                break
            more, reps, handled = step
            done |= handled
            replace.update(more)
            repeats.update(reps)
            remaining = [n for n in remaining if n.name not in more]
    kept = [n for n in nodes if n.name not in replace]

    def resolve(name: str) -> str:
        while name in replace:
            name = replace[name]
        return name

    # clusters: every module path of a kept node, the collapsed instances, and their parents
    paths: set[str] = {_cluster_path(n) for n in kept if _cluster_path(n)} | set(repeats)
    counts: dict[str, int] = {}
    for n in kept:
        p = _cluster_path(n)
        counts[p] = counts.get(p, 0) + 1

    def parent_of(path: str) -> str | None:
        parts = path.split(".")
        for i in range(len(parts) - 1, 0, -1):
            candidate = ".".join(parts[:i])
            if candidate in paths:
                return candidate
        return None

    children: dict[str | None, list[str]] = {}
    for p in paths:
        children.setdefault(parent_of(p), []).append(p)
    # a cluster holding one node and nothing else is drawn as that node
    trivial = {
        p for p in paths if counts.get(p, 0) <= 1 and not children.get(p) and p not in repeats
    }
    paths -= trivial

    def cluster_of(path: str) -> str | None:
        while path and path not in paths:
            path = parent_of(path) or ""
        return path or None

    for p in sorted(paths, key=lambda x: (x.count("."), x)):
        repeat, last = repeats.get(p, (1, None))
        parent = cluster_of(parent_of(p) or "")
        label = p if parent is None else _relative(p, parent)
        graph.clusters.append(
            GraphCluster(id=p, path=p, label=label, parent=parent, repeat=repeat, last_path=last)
        )
    held = render.example_text(module.example_sizes) if module.example_sizes else None
    bound = set(module.example_nodes)
    graph.nodes = [
        _node(n, cluster_of(_cluster_path(n)), held if n.name in bound else None) for n in kept
    ]

    # edges: drawn nodes only, each once; edges between instances of one run disappear
    instance_of_run: dict[str, str] = {}
    for first, (_repeat, last) in repeats.items():
        prefix, _, start = first.rpartition(".")
        for i in range(int(start), int(last.rpartition(".")[2]) + 1):
            instance_of_run[f"{prefix}.{i}"] = first

    def run_instance(n: NodeInfo) -> tuple[str, str] | None:
        for prefix, i in _instance_of(n.module_path or ""):
            key = f"{prefix}.{i}"
            if key in instance_of_run:
                return instance_of_run[key], key
        return None

    by_name = {n.name: n for n in nodes}
    seen: set[tuple[str, str]] = set()
    for n in nodes:
        dst = resolve(n.name)
        dst_run = run_instance(n)
        for src_name in n.inputs:
            src_node = by_name.get(src_name)
            if src_node is None:
                continue
            src_run = run_instance(src_node)
            if src_run and dst_run and src_run[0] == dst_run[0] and src_run[1] != dst_run[1]:
                continue  # from one instance of a collapsed run into the next
            edge = (resolve(src_name), dst)
            if edge[0] != edge[1] and edge not in seen:
                seen.add(edge)
                graph.edges.append(edge)
    return graph
