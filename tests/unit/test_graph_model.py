"""The graph view's model on hand-made node lists: clusters, collapse of repeated blocks, edges."""

from __future__ import annotations

from fxls.graph import build_graph, render_graph
from fxls.protocol.model import ModuleResult, NodeInfo, Span, Value

SHAPE = [Value(shape=["B", 8], dtype="float32")]


def _node(name: str, op: str, target: str, path: str, inputs: list[str], line: int = 1) -> NodeInfo:
    return NodeInfo(
        name=name,
        op=op,  # type: ignore[arg-type]
        target=target,
        span=Span(line, 4, line, 10),
        outputs=list(SHAPE),
        module_type="Linear(8, 8)" if op == "call_module" else None,
        module_path=path,
        inputs=inputs,
    )


def _stack(n: int, *, odd_one: int | None = None) -> ModuleResult:
    nodes = [_node("x", "placeholder", "x", "", []), _node("scale", "get_attr", "scale", "", [])]
    prev = "x"
    for i in range(n):
        p = f"layers.{i}"
        lin = _node(f"layers_{i}_lin", "call_module", f"{p}.lin", p, [prev], 10)
        inner = f"{p}.act"
        act_op = "call_method" if i == odd_one else "call_function"
        act = _node(f"relu_{i}", act_op, "torch.relu", inner, [lin.name], 11)
        mul = _node(f"mul_{i}", "call_function", "operator.mul", inner, [act.name, "scale"], 12)
        add = _node(f"add_{i}", "call_function", "operator.add", p, [mul.name, prev], 13)
        nodes += [lin, act, mul, add]
        prev = add.name
    nodes.append(_node("output", "output", "output", "", [prev]))
    return ModuleResult(name="Stack", line=1, status="traced", nodes=nodes)


def test_identical_blocks_collapse_to_one() -> None:
    graph = build_graph("m.py", _stack(4))
    assert graph.total_nodes == 2 + 4 * 4 + 1
    assert [n.id for n in graph.nodes] == ["x", "scale", "layers_0_lin", "relu_0", "mul_0", "add_0", "output"]  # fmt: skip
    (block,) = graph.collapsed
    assert (block.path, block.repeat, block.last_path, block.parent) == (
        "layers.0",
        4,
        "layers.3",
        None,
    )
    act = graph.cluster("layers.0.act")
    assert act is not None and act.parent == "layers.0" and act.label == "act"
    assert set(graph.edges) == {
        ("x", "layers_0_lin"),
        ("x", "add_0"),
        ("layers_0_lin", "relu_0"),
        ("relu_0", "mul_0"),
        ("scale", "mul_0"),
        ("mul_0", "add_0"),
        ("add_0", "output"),  # the last block's output, drawn from the one block shown
    }
    assert len(graph.edges) == len(set(graph.edges))


def test_a_different_block_splits_the_run() -> None:
    graph = build_graph("m.py", _stack(5, odd_one=2))
    repeats = {c.path: (c.repeat, c.last_path) for c in graph.collapsed}
    assert repeats == {"layers.0": (2, "layers.1"), "layers.3": (2, "layers.4")}
    assert {c.path for c in graph.clusters if c.parent is None} == {
        "layers.0", "layers.2", "layers.3"
    }  # fmt: skip
    # edges between the runs survive: layers.1 (drawn as layers.0) feeds layers.2
    assert ("add_0", "layers_2_lin") in graph.edges
    assert ("add_2", "layers_3_lin") in graph.edges


def test_without_collapse_every_node_is_drawn() -> None:
    graph = build_graph("m.py", _stack(3), collapse=False)
    assert len(graph.nodes) == graph.total_nodes and graph.collapsed == []
    assert {c.path for c in graph.clusters} == {
        "layers.0", "layers.1", "layers.2", "layers.0.act", "layers.1.act", "layers.2.act"
    }  # fmt: skip


def test_dot_and_html_carry_the_same_graph() -> None:
    graph = build_graph("m.py", _stack(4))
    dot = render_graph(graph, "dot")
    assert dot.count("subgraph cluster_") == 2 and dot.count(" -> ") == 7
    assert 'label="layers.0 ×4  (layers.0 … layers.3)"' in dot
    assert 'tooltip="m.py:10:5  call_module layers.0.lin"' in dot
    page = render_graph(graph, "html")
    assert '"repeat":4' in page and '"last_path":"layers.3"' in page
    assert "</script>" not in page.split('id="fxls-data">', 1)[1].split("</script>", 1)[0]


def test_nodes_that_hold_for_the_example_sizes_only_say_so() -> None:
    """A node whose values were computed at a fixed batch carries ``holds for B = 2`` in its
    shape, in the model and so in both renderings; the others do not."""
    module = _stack(1)
    module.example_nodes = ["add_0", "output"]
    module.example_sizes = {"B": 2}
    graph = build_graph("m.py", module, collapse=False)
    shapes = {n.id: n.shape for n in graph.nodes}
    assert shapes["add_0"] == "[B, 8] · holds for B = 2", shapes
    assert shapes["relu_0"] == "[B, 8]"
    assert "holds for B = 2" in render_graph(graph, "dot")
