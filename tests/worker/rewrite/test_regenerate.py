"""Writing a transformed FX graph back into ``forward`` (rewrites/regenerate.py), in-process.

Each test captures a small document, transforms a copy of a class's traced graph the way a
pass or a subgraph rewrite would, and checks the edits: only the changed statements are
rewritten (everything else byte for byte), the printed code is idiomatic, and the gates refuse
what cannot be written back honestly (loops, code traced through, tensor constants, attributes
the class does not have, BatchNorm folding).
"""

from __future__ import annotations

import ast
import copy
import operator
from collections.abc import Callable

import pytest
import torch
import torch.fx
from torch.fx import subgraph_rewriter

from fxls.analysis import parse
from fxls.protocol.edits import apply_edits
from fxls.protocol.model import CaptureJob
from fxls.worker.capture.pipeline import capture_document
from fxls.worker.rewrite.base import Original, Unavailable
from fxls.worker.rewrite.regenerate import regenerate_forward

Transform = Callable[[torch.fx.GraphModule], object]


def _regenerate(tmp_path, source: str, cls: str, transform: Transform) -> str:  # type: ignore[no-untyped-def]
    path = tmp_path / "model.py"
    path.write_text(source)
    job = CaptureJob(
        path=str(path), source=source, classes=[c.request() for c in parse(source).classes]
    )
    doc, result = capture_document(job, lambda *a: None)
    assert result.error is None, result.error
    original = Original(doc, result)
    traced = original.capture(cls).traced
    assert traced is not None and traced.gm is not None
    gm = copy.deepcopy(traced.gm)
    transform(gm)
    gm.graph.lint()
    gm.recompile()
    edits = regenerate_forward(original, cls, gm)
    edited = apply_edits(source, edits)
    ast.parse(edited)
    return edited


def _relu(x):  # type: ignore[no-untyped-def]
    return torch.nn.functional.relu(x)


def _clamp(x):  # type: ignore[no-untyped-def]
    return torch.clamp(x, min=0.0)


MLP = '''import math

import torch
import torch.nn.functional as F
from torch import nn


class Net(nn.Module):
    """A net."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 4)

    @torch.no_grad()
    def forward(self, x):
        """Doc."""
        b, d = x.shape
        h = self.fc1(x)  # first layer
        h = F.relu(h)
        # a comment between statements
        y = self.fc2(h) * math.sqrt(d)
        return y + 1
'''


def test_only_the_changed_statement_is_rewritten(tmp_path) -> None:  # type: ignore[no-untyped-def]
    edited = _regenerate(
        tmp_path, MLP, "Net", lambda gm: subgraph_rewriter.replace_pattern(gm, _relu, _clamp)
    )
    assert edited == MLP.replace("h = F.relu(h)", "h = torch.clamp(h, min=0.0)")


def test_an_unchanged_graph_gives_no_edits(tmp_path) -> None:  # type: ignore[no-untyped-def]
    assert _regenerate(tmp_path, MLP, "Net", lambda gm: None) == MLP


def test_printed_code_is_idiomatic(tmp_path) -> None:  # type: ignore[no-untyped-def]
    def double(gm: torch.fx.GraphModule) -> None:
        # y = fc2(h) * sqrt(d)  ->  y = (fc2(h) + fc2(h)) * sqrt(d) - 1, reading fc2 twice
        mul = next(n for n in gm.graph.nodes if n.target is operator.mul)
        fc2, scale = mul.args
        with gm.graph.inserting_before(mul):
            twice = gm.graph.call_function(operator.add, (fc2, fc2))
            scaled = gm.graph.call_function(operator.mul, (twice, scale))
            less = gm.graph.call_function(operator.sub, (scaled, 1))
        mul.replace_all_uses_with(less)
        gm.graph.erase_node(mul)

    edited = _regenerate(tmp_path, MLP, "Net", double)
    body = edited.split('"""Doc."""\n')[1]
    assert body == (
        "        b, d = x.shape\n"
        "        h = self.fc1(x)  # first layer\n"
        "        h = F.relu(h)\n"
        "        # a comment between statements\n"
        "        fc2 = self.fc2(h)\n"
        "        y = (fc2 + fc2) * math.sqrt(d) - 1\n"
        "        return y + 1\n"
    )
    # the def line, decorator and docstring stay, and nothing of FX's own code appears
    assert "    @torch.no_grad()\n    def forward(self, x):\n" in edited
    for fx_only in ("wrap(", "math_sqrt", "= None", "getattr_1", "_tensor_constant"):
        assert fx_only not in edited


def test_functions_are_named_as_the_file_imports_them(tmp_path) -> None:  # type: ignore[no-untyped-def]
    def gelu(gm: torch.fx.GraphModule) -> None:
        relu = next(n for n in gm.graph.nodes if n.target is torch.nn.functional.relu)
        relu.target = torch.nn.functional.gelu
        relu.kwargs = {"approximate": "tanh"}

    edited = _regenerate(tmp_path, MLP, "Net", gelu)
    assert '        h = F.gelu(h, approximate="tanh")\n' in edited
    bare = MLP.replace("import torch.nn.functional as F\n", "").replace("F.relu", "torch.relu")
    edited = _regenerate(
        tmp_path,
        bare,
        "Net",
        lambda gm: setattr(
            next(n for n in gm.graph.nodes if n.target is torch.relu), "target", torch.sigmoid
        ),
    )
    assert "        h = torch.sigmoid(h)\n" in edited


LOOP = """import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(3)])
        self.out = nn.Linear(4, 2)

    def forward(self, x):
        for layer in self.layers:
            x = torch.relu(layer(x))
        y = torch.relu(self.out(x))
        return y
"""


def _last_relu_to_sigmoid(gm: torch.fx.GraphModule) -> None:
    last = [n for n in gm.graph.nodes if n.target is torch.relu][-1]
    last.target = torch.sigmoid


def _first_relu_to_sigmoid(gm: torch.fx.GraphModule) -> None:
    first = next(n for n in gm.graph.nodes if n.target is torch.relu)
    first.target = torch.sigmoid


def test_a_loop_the_change_does_not_touch_is_kept(tmp_path) -> None:  # type: ignore[no-untyped-def]
    edited = _regenerate(tmp_path, LOOP, "Net", _last_relu_to_sigmoid)
    assert edited == LOOP.replace("y = torch.relu(self.out(x))", "y = torch.sigmoid(self.out(x))")


def test_a_change_inside_a_loop_is_refused(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(Unavailable, match=r"`for` loop at line 12.*unroll"):
        _regenerate(tmp_path, LOOP, "Net", _first_relu_to_sigmoid)


NESTED = """import torch
from torch import nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return torch.relu(self.fc(x))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Block()
        self.out = nn.Linear(4, 2)

    def forward(self, x):
        x = self.block(x)
        return torch.relu(self.out(x))
"""


def test_a_change_in_code_traced_through_is_refused(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(Unavailable, match=r"traced through.*inline"):
        _regenerate(tmp_path, NESTED, "Net", _first_relu_to_sigmoid)
    # the submodule's call stays when the change is elsewhere
    edited = _regenerate(tmp_path, NESTED, "Net", _last_relu_to_sigmoid)
    assert "        x = self.block(x)\n        return torch.sigmoid(self.out(x))\n" in edited


def test_tensor_constants_and_new_attributes_are_refused(tmp_path) -> None:  # type: ignore[no-untyped-def]
    def constant(gm: torch.fx.GraphModule) -> None:
        gm.register_buffer("_tensor_constant0", torch.ones(4, device="meta"))
        out = next(n for n in gm.graph.nodes if n.op == "output")
        with gm.graph.inserting_before(out):
            c = gm.graph.get_attr("_tensor_constant0")
            added = gm.graph.call_function(operator.add, (out.args[0], c))
        out.args = (added,)

    with pytest.raises(Unavailable, match="frozen tensor constant"):
        _regenerate(tmp_path, MLP, "Net", constant)

    def new_layer(gm: torch.fx.GraphModule) -> None:
        gm.add_submodule("extra", torch.nn.Linear(4, 4, device="meta"))
        out = next(n for n in gm.graph.nodes if n.op == "output")
        with gm.graph.inserting_before(out):
            extra = gm.graph.call_module("extra", (out.args[0],))
        out.args = (extra,)

    with pytest.raises(Unavailable, match=r"`self\.extra`.*does not have"):
        _regenerate(tmp_path, MLP, "Net", new_layer)


CONV_BN = """import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        self.bn = nn.BatchNorm2d(8)

    def forward(self, x):
        x = self.conv(x)
        x = self.bn(x)
        return torch.relu(x)
"""


def test_conv_bn_fusion_is_refused(tmp_path) -> None:  # type: ignore[no-untyped-def]
    def fold(gm: torch.fx.GraphModule) -> None:
        bn = next(n for n in gm.graph.nodes if n.op == "call_module" and n.target == "bn")
        bn.replace_all_uses_with(bn.args[0])
        gm.graph.erase_node(bn)

    with pytest.raises(Unavailable, match=r"BatchNorm.*folded"):
        _regenerate(tmp_path, CONV_BN, "Net", fold)


SHARED = """import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 8)
        self.drop = nn.Dropout(0.1)
        self.fc2 = nn.Linear(8, 4)

    def forward(self, x):
        x = self.fc1(x)
        x = self.drop(x)
        a = torch.relu(x)
        b = torch.relu(x)
        a = a * 2
        a += 1
        return self.fc2(a + b), b
"""


def test_a_removed_layer_takes_only_its_own_line(tmp_path) -> None:  # type: ignore[no-untyped-def]
    def no_dropout(gm: torch.fx.GraphModule) -> None:
        drop = next(n for n in gm.graph.nodes if n.op == "call_module" and n.target == "drop")
        drop.replace_all_uses_with(drop.args[0])
        gm.graph.erase_node(drop)

    edited = _regenerate(tmp_path, SHARED, "Net", no_dropout)
    assert edited == SHARED.replace("        x = self.drop(x)\n", "")


def test_merged_values_keep_their_names_and_augmented_assignments_stay(tmp_path) -> None:  # type: ignore[no-untyped-def]
    def merge_relus(gm: torch.fx.GraphModule) -> None:
        first, second = [n for n in gm.graph.nodes if n.target is torch.relu]
        second.replace_all_uses_with(first)
        gm.graph.erase_node(second)

    edited = _regenerate(tmp_path, SHARED, "Net", merge_relus)
    assert edited == SHARED.replace("b = torch.relu(x)", "b = a")

    def add_two(gm: torch.fx.GraphModule) -> None:
        add = next(n for n in gm.graph.nodes if n.target is operator.add and 1 in n.args)
        add.args = (add.args[0], 2)

    edited = _regenerate(tmp_path, SHARED, "Net", add_two)
    assert edited == SHARED.replace("a += 1", "a += 2")


def test_a_merge_that_an_in_place_update_would_see_is_refused(tmp_path) -> None:  # type: ignore[no-untyped-def]
    source = SHARED.replace("        a = a * 2\n", "")

    def merge_relus(gm: torch.fx.GraphModule) -> None:
        first, second = [n for n in gm.graph.nodes if n.target is torch.relu]
        second.replace_all_uses_with(first)
        gm.graph.erase_node(second)

    with pytest.raises(Unavailable, match=r"changes `a` in place"):
        _regenerate(tmp_path, source, "Net", merge_relus)


SEQUENTIAL = """import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.seq = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4))
        self.out = nn.Linear(4, 2)

    def forward(self, x):
        y = self.seq(x) * 2
        return self.out(y)
"""


def test_a_change_next_to_a_container_traced_through_is_refused(tmp_path) -> None:  # type: ignore[no-untyped-def]
    def triple(gm: torch.fx.GraphModule) -> None:
        mul = next(n for n in gm.graph.nodes if n.target is operator.mul)
        mul.args = (mul.args[0], 3)

    with pytest.raises(Unavailable, match=r"`self\.seq`, which was traced through"):
        _regenerate(tmp_path, SEQUENTIAL, "Net", triple)


INHERITED = """import torch
from torch import nn


class Base(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        def act(t):
            return torch.relu(t)

        y = act(self.fc(x))
        return torch.relu(y)


class Child(Base):
    pass
"""


def test_an_inherited_forward_and_local_helpers_are_not_rewritten(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(Unavailable, match="inherits `forward`"):
        _regenerate(tmp_path, INHERITED, "Child", _last_relu_to_sigmoid)
    with pytest.raises(Unavailable, match=r"traced through.*inline"):
        _regenerate(tmp_path, INHERITED, "Base", _first_relu_to_sigmoid)
    edited = _regenerate(tmp_path, INHERITED, "Base", _last_relu_to_sigmoid)
    assert edited == INHERITED.replace("return torch.relu(y)", "return torch.sigmoid(y)")


HEADS = """import torch
from torch import nn

EPS = 1e-6


class Heads(nn.Module):
    def __init__(self, n_head: int = 2):
        super().__init__()
        self.n_head = n_head
        self.proj = nn.Linear(8, 8)

    def forward(self, x):
        B, T, C = x.size()
        q = self.proj(x).view(B, T, self.n_head, C // self.n_head)
        scale = 1.0 / self.n_head
        q = q * scale + EPS
        return q.transpose(1, 2)
"""


def test_attributes_the_graph_holds_as_numbers_are_written_as_attributes(tmp_path) -> None:  # type: ignore[no-untyped-def]
    def reshape(gm: torch.fx.GraphModule) -> None:
        next(n for n in gm.graph.nodes if n.target == "view").target = "reshape"

    edited = _regenerate(tmp_path, HEADS, "Heads", reshape)
    assert edited == HEADS.replace(".view(B, T,", ".reshape(B, T,")


def test_locals_the_graph_holds_as_numbers_are_refused(tmp_path) -> None:  # type: ignore[no-untyped-def]
    def divide(gm: torch.fx.GraphModule) -> None:
        next(n for n in gm.graph.nodes if n.target is operator.mul).target = operator.truediv

    with pytest.raises(Unavailable, match="reads `scale`, a Python value"):
        _regenerate(tmp_path, HEADS, "Heads", divide)


def test_an_attribute_that_is_none_is_refused(tmp_path) -> None:  # type: ignore[no-untyped-def]
    source = """import torch
import torch.nn.functional as F
from torch import nn


class Norm(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(4))
        self.bias = None

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)
"""
    with pytest.raises(Unavailable, match=r"`self\.bias`, which is None"):
        _regenerate(tmp_path, source, "Norm", _negate_output)


def _negate_output(gm: torch.fx.GraphModule) -> None:
    out = next(n for n in gm.graph.nodes if n.op == "output")
    with gm.graph.inserting_before(out):
        neg = gm.graph.call_function(operator.neg, (out.args[0],))
    out.args = (neg,)
