"""The span tracer (fxls.worker.capture.trace.tracer) makes the graph torch.fx makes; the
submodules fxls reads off a graph module are the ones torch finds.

Its own ways of lowering arguments, copying the module stack and wrapping leaf functions are
checked against ``torch.fx.Tracer`` node by node, and the frames it reads stop where the
trace started.
"""

from __future__ import annotations

import math
import textwrap
from collections import OrderedDict
from typing import Any, NamedTuple

import pytest
import torch
import torch.fx
from torch import nn

from fxls.protocol.positions import SourceText
from fxls.worker.capture.records.nodes import submodule
from fxls.worker.capture.spans import CALL_SITE_KEY, SPAN_KEY
from fxls.worker.capture.trace.tracer import SpanTracer


class Pair(NamedTuple):
    first: Any
    second: Any


class Inner(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.register_buffer("scale", torch.ones(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x) * self.scale


class Arguments(nn.Module):
    """Every kind of argument torch.fx lowers: parameters, buffers, a constant tensor, a
    module's own tensor attribute, tuples, lists, dicts, a named tuple, slices, ``None``,
    numbers, strings, dtypes, a wrapped ``math`` function, nested module calls."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Sequential(Inner(), Inner())
        self.weight = nn.Parameter(torch.randn(4))
        self.table = torch.arange(4.0)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> Any:
        h = self.inner(x) + self.weight + self.table + torch.tensor([1.0, 2.0, 3.0, 4.0])
        parts = torch.split(h, [2, 2], dim=-1)
        joined = torch.cat([parts[0], parts[1]], dim=-1)
        scaled = joined * math.sqrt(x.shape[-1])
        view = scaled[..., 1:3, None].to(dtype=torch.float32)
        both = torch.stack((view, view), dim=0).reshape(2, -1)
        return {"out": both, "pair": Pair(y, None), "name": "done", "rest": [h, 1.5]}


def _nodes(graph: torch.fx.Graph) -> list[tuple[Any, ...]]:
    def named(value: Any) -> Any:
        return torch.fx.node.map_arg(value, lambda node: f"%{node.name}")

    return [
        (n.name, n.op, n.target, named(n.args), named(n.kwargs), n.meta.get("nn_module_stack"))
        for n in graph.nodes
    ]


def test_the_graph_is_torch_fxs_node_for_node_and_twice() -> None:
    # a module each: a trace keeps the constant tensors it met on the module it traced
    expected = _nodes(torch.fx.Tracer().trace(Arguments()))
    source = SourceText("")
    for _ in range(2):  # the second trace takes the wrappers the first one made
        graph = SpanTracer(__file__, source).trace(Arguments())
        assert _nodes(graph) == expected
        assert math.sqrt is _SQRT  # the trace put the function back
    stacks = [n.meta["nn_module_stack"] for n in graph.nodes if "nn_module_stack" in n.meta]
    assert stacks and all(type(stack) is OrderedDict for stack in stacks)
    assert any(node.op == "call_function" and node.target is math.sqrt for node in graph.nodes), (
        "math.sqrt of a traced size is one node"
    )


_SQRT = math.sqrt


def test_frames_outside_the_trace_are_not_the_documents() -> None:
    """A document whose own code starts the trace (a function of the file calling into the
    tracer): each node's span and call site come from inside ``forward``, not from the
    document's line outside it."""
    path = "/virtual/doc.py"
    text = textwrap.dedent(
        """
        import torch
        from torch import nn

        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = nn.Linear(3, 3)

            def forward(self, x):
                y = self.lin(x)
                return torch.relu(y)

        def start(tracer):
            return tracer.trace(Model())
        """
    )
    namespace: dict[str, Any] = {}
    exec(compile(text, path, "exec"), namespace)
    source = SourceText(text)
    graph = namespace["start"](SpanTracer(path, source))
    lines = text.splitlines()
    spans = {n.name: n.meta[SPAN_KEY] for n in graph.nodes if SPAN_KEY in n.meta}
    sites = {n.name: n.meta[CALL_SITE_KEY] for n in graph.nodes if CALL_SITE_KEY in n.meta}
    assert set(spans) == {"lin", "relu"}
    assert lines[spans["lin"].line - 1].strip() == "y = self.lin(x)"
    assert lines[spans["relu"].line - 1].strip() == "return torch.relu(y)"
    assert sites == spans


class Shadowed(nn.Module):
    """A submodule whose name a property of the class hides from ``getattr``."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = Inner()
        self._modules["hidden"] = nn.Linear(2, 2)

    @property
    def hidden(self) -> nn.Module:
        return self.inner


def test_a_submodule_is_the_one_torch_finds() -> None:
    module = nn.Sequential(Arguments(), Shadowed())
    paths = [name for name, _ in module.named_modules()] + ["1.hidden", "1.hidden.proj"]
    for path in paths:
        assert submodule(module, path) is module.get_submodule(path), path
    assert submodule(module, "1.hidden") is module[1].inner  # what getattr gives
    for missing in ("2", "0.inner.5", "0.weight", "1.nothing"):
        with pytest.raises(AttributeError):
            submodule(module, missing)
