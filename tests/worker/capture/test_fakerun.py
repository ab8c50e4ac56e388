"""The fake-run capture (fxls.worker.capture.trace.fakerun) on models torch.fx cannot trace.

Each model is a document: its source is written to a file, compiled with that path as filename
and registered in linecache, built on the meta device and run on fake tensors. Recorded graphs
are checked against eager execution: the recorded graph is replayed on the same model built
for real on the CPU, every node's real shape must equal the fake shape, and the replayed output
must equal the eager output of the model.
"""

from __future__ import annotations

import linecache
import operator
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.fx

from fxls.protocol.model import Span
from fxls.worker.capture.records.arguments import named_arguments
from fxls.worker.capture.shapes.propagation import ExampleInput
from fxls.worker.capture.trace import graphcheck
from fxls.worker.capture.trace.fakerun import FakeRun, fake_run

PRELUDE = """\
import math
import torch
import torch.nn as nn
import torch.nn.functional as F
from einops import rearrange
"""

# ---------------------------------------------------------------------------------------
# Documents
# ---------------------------------------------------------------------------------------

ASSERT_MODEL = """
class Clip(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 8)

    def forward(self, x):
        assert x.size(1) <= 64, "sequence too long"
        h = self.fc(x)
        return h.relu()
"""

INT_RANGE_MODEL = """
class Halves(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(12, 12)

    def forward(self, x):
        keep = int(x.size(1) * 0.5)
        y = self.fc(x[:, :keep])
        rows = []
        for i in range(x.size(0)):
            rows.append(y[i].sum(0))
        z = torch.zeros(x.size(0), x.size(2))
        return (1 - torch.stack(rows)) + z
"""

ROTARY_MODEL = """
def rotate_half(x):
    b, t, h, d = x.shape
    x1 = x[..., : d // 2]
    x2 = x[..., d // 2 :]
    return torch.cat((-x2, x1), dim=-1)


class Rotary(nn.Module):
    def __init__(self, n_head=4, n_embd=32):
        super().__init__()
        self.n_head = n_head
        self.q = nn.Linear(n_embd, n_embd)

    def forward(self, x):
        q = rearrange(self.q(x), "b t (h d) -> b t h d", h=self.n_head)
        cos = torch.ones(q.shape[1], q.shape[-1])
        return q * cos[None, :, None, :] + rotate_half(q)
"""

MASK_MODEL = """
class Scores(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x, mask=None):
        att = self.proj(x) @ x.transpose(-2, -1)
        if mask is not None:
            att = att.masked_fill(mask == 0, float("-inf"))
        return F.softmax(att, dim=-1)
"""

GPT_MODEL = """
class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd=32, n_head=4, block_size=16):
        super().__init__()
        self.n_head = n_head
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.register_buffer(
            "bias", torch.tril(torch.ones(block_size, block_size)).view(1, 1, block_size, block_size)
        )

    def forward(self, x):
        B, T, C = x.size()
        assert T <= self.bias.size(-1), "Cannot forward, sequence too long"
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = rearrange(q, "b t (h d) -> b h t d", h=self.n_head)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, n_embd=32):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd))

    def forward(self, x):
        return self.net(x)


class Block(nn.Module):
    def __init__(self, n_embd=32):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = MLP(n_embd)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


class GPT(nn.Module):
    def __init__(self, n_layer=3, vocab=50, n_embd=32):
        super().__init__()
        self.wte = nn.Embedding(vocab, n_embd)
        self.wpe = nn.Embedding(16, n_embd)
        self.h = nn.ModuleList([Block(n_embd) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab, bias=False)
        self.wte.weight = self.lm_head.weight

    def forward(self, idx):
        b, t = idx.size()
        pos = torch.arange(0, t, dtype=torch.long)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))
"""

BROKEN_MODEL = """
def widen(x):
    return x @ torch.ones(7, 3)


class Broken(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 5)

    def forward(self, x):
        h = self.fc(x)
        return widen(h)


class WrongWidth(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 5)

    def forward(self, x):
        h = x.relu()
        return self.fc(h)


class DataBranch(nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            return x
        return -x
"""

HELPER_LEAF_MODEL = """
class Scale(nn.Module):
    def forward(self, x):
        for _ in range(int(x.size(-1))):
            x = x * 0.5
        return x


class UsesScale(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = Scale()
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, x):
        y, _ = self.attn(x, x, x, need_weights=False)
        return self.scale(y)
"""

CONSTANTS_MODEL = """
TABLE = torch.arange(6.0)


class Flat(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = torch.ones(3)

    def forward(self, x):
        B, T, C = x.shape
        y = x.reshape(B * T, C) * self.scale
        rows = [row.sum() for row in y]
        return y + TABLE[:3], torch.stack(rows)
"""


# ---------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------


class Doc:
    """A document compiled from a file, with its namespace and text."""

    def __init__(self, path: Path, body: str) -> None:
        self.source = PRELUDE + textwrap.dedent(body)
        self.path = str(path)
        path.write_text(self.source, encoding="utf-8")
        lines = self.source.splitlines(keepends=True)
        linecache.cache[self.path] = (len(self.source), None, lines, self.path)
        self.namespace: dict[str, Any] = {"__name__": "fxls_test_document"}
        exec(compile(self.source, self.path, "exec"), self.namespace)

    def meta(self, name: str) -> torch.nn.Module:
        with torch.device("meta"):
            module = self.namespace[name]()
        assert isinstance(module, torch.nn.Module)
        return module

    def real(self, name: str) -> torch.nn.Module:
        torch.manual_seed(0)
        module = self.namespace[name]()
        assert isinstance(module, torch.nn.Module)
        return module.eval()

    def span(self, text: str, nth: int = 0) -> Span:
        """Span of the ``nth`` occurrence of ``text`` (on one line) in the document."""
        found = []
        for number, line in enumerate(self.source.splitlines(), start=1):
            start = line.find(text)
            while start >= 0:
                found.append(Span(number, start, number, start + len(text)))
                start = line.find(text, start + 1)
        return found[nth]


@pytest.fixture
def doc(tmp_path: Path) -> Iterator[Callable[[str], Doc]]:
    made: list[Doc] = []

    def make(body: str) -> Doc:
        d = Doc(tmp_path / f"doc{len(made)}.py", body)
        made.append(d)
        return d

    yield make
    for d in made:
        linecache.cache.pop(d.path, None)


def tensor(name: str, *dims: tuple[str | None, int], dtype: torch.dtype = torch.float32) -> Any:
    return ExampleInput(name, "tensor", list(dims), dtype)


def calls(run: FakeRun) -> list[torch.fx.Node]:
    assert run.graph_module is not None
    return [n for n in run.graph_module.graph.nodes if n.op.startswith("call_")]


def targets(run: FakeRun) -> list[str]:
    out = []
    for node in calls(run):
        target = node.target
        out.append(target if isinstance(target, str) else getattr(target, "__name__", str(target)))
    return out


def nodes_at(run: FakeRun, span: Span) -> list[torch.fx.Node]:
    return [n for n in calls(run) if run.spans[n.name][0] == span]


def real_inputs(inputs: list[Any]) -> dict[str, Any]:
    torch.manual_seed(1)
    feeds: dict[str, Any] = {}
    for inp in inputs:
        if inp.kind == "value":
            feeds[inp.name] = inp.value
        elif inp.dtype == torch.long:
            feeds[inp.name] = torch.randint(0, 10, [s for _, s in inp.dims])
        else:
            feeds[inp.name] = torch.randn([s for _, s in inp.dims], dtype=inp.dtype)
    return feeds


def replay(run: FakeRun, real: torch.nn.Module, feeds: dict[str, Any]) -> tuple[Any, dict]:
    """Run the recorded graph on ``real`` (same class, real weights); per-node real values."""
    gm = run.graph_module
    assert gm is not None
    root: dict[str, Any] = {}
    for node in gm.graph.nodes:
        if node.op == "call_module":
            root[node.target] = real.get_submodule(node.target)
        elif node.op == "get_attr":
            owner, _, attr = node.target.rpartition(".")
            source = real if hasattr(real.get_submodule(owner), attr) else gm  # constants
            root[node.target] = getattr(source.get_submodule(owner), attr)
    replayed = torch.fx.GraphModule(root, gm.graph)
    seen: dict[str, Any] = {}

    class Collect(torch.fx.Interpreter):
        def run_node(self, n: torch.fx.Node) -> Any:
            out = super().run_node(n)
            seen[n.name] = out
            return out

    placeholders = [n.target for n in gm.graph.nodes if n.op == "placeholder"]
    with torch.no_grad():
        out = Collect(replayed).run(*[feeds[p] for p in placeholders])
    return out, seen


def shapes_of(value: Any) -> list[list[int]]:
    if isinstance(value, torch.Tensor):
        return [[int(d) for d in value.shape]]
    if isinstance(value, (tuple, list)):
        return [s for v in value for s in shapes_of(v)]
    return []


def check_against_eager(d: Doc, name: str, inputs: list[Any]) -> FakeRun:
    """Static fake run; every node's fake shape equals the replayed real shape; output == eager."""
    run = fake_run(d.meta(name), inputs, d.path, symbolic=False)
    assert run.error is None, run.error
    real = d.real(name)
    feeds = real_inputs(inputs)
    with torch.no_grad():
        eager = real(**feeds)
    out, seen = replay(run, real, feeds)
    torch.testing.assert_close(out, eager)
    compared = 0
    for node_name, fake_value in run.examples.items():
        if node_name in seen and shapes_of(fake_value):
            assert shapes_of(fake_value) == shapes_of(seen[node_name]), node_name
            compared += 1
    assert compared >= len(calls(run)) // 2
    return run


ELEMENTS_MODEL = """
class Elements(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        shape = x.size()
        for _ in range(2):
            pass
        h = x.reshape(-1, shape[-1]).view(shape[0], -1, shape[2])
        B, T, C = x.size()
        q, k = self.fc(h).split(4, dim=-1)
        return torch.cat([q, k], -1).view(B, T * C)
"""


UNLISTED_METHODS_MODEL = """
class Heads(nn.Module):
    def __init__(self):
        super().__init__()
        self.q = nn.Linear(64, 64)

    def forward(self, x):
        q = self.q(x).unflatten(-1, (-1, 16))
        pad = x.new_zeros(x.shape[0], 1, 64)
        step = q.stride()[0]  # 64 * T
        return torch.cat([pad, x], dim=1), q * step
"""


# ---------------------------------------------------------------------------------------
# Tests
# ---------------------------------------------------------------------------------------


def test_assert_on_sequence_length(doc: Callable[[str], Doc]) -> None:
    d = doc(ASSERT_MODEL)
    inputs = [tensor("x", ("B", 3), ("T", 5), (None, 16))]
    run = fake_run(d.meta("Clip"), inputs, d.path)
    assert run.error is None
    assert run.mode == "symbolic"
    assert targets(run) == ["fc", "relu"]  # the size query for the assert leaves no node
    (fc,) = nodes_at(run, d.span("self.fc(x)"))
    assert fc.op == "call_module"
    assert run.values["fc"][0].shape == ["B", "T", 8]
    assert run.values["output"][0].shape == ["B", "T", 8]
    assert graphcheck.unused_nodes(run.graph_module.graph) == []  # type: ignore[union-attr]
    check_against_eager(d, "Clip", inputs)


def test_assert_failing_reports_the_users_line(doc: Callable[[str], Doc]) -> None:
    d = doc(ASSERT_MODEL)
    run = fake_run(d.meta("Clip"), [tensor("x", (None, 2), (None, 80), (None, 16))], d.path)
    assert isinstance(run.error, AssertionError)
    assert run.error_span == d.span("x.size(1) <= 64")
    assert run.error_target is None
    assert run.graph_module is not None
    assert [n.op for n in run.graph_module.graph.nodes] == ["placeholder"]


def test_int_range_and_zeros_of_sizes(doc: Callable[[str], Doc]) -> None:
    d = doc(INT_RANGE_MODEL)
    inputs = [tensor("x", ("B", 3), ("T", 6), (None, 12))]
    run = fake_run(d.meta("Halves"), inputs, d.path)
    assert run.error is None, run.error
    # one `y[i].sum(0)` per loop iteration, all on one span
    sums = nodes_at(run, d.span("y[i].sum(0)"))
    assert [n.target for n in sums] == ["sum"] * 3
    (zeros,) = nodes_at(run, d.span("torch.zeros(x.size(0), x.size(2))"))
    assert zeros.target is torch.zeros
    assert run.values[zeros.name][0].shape == [3, 12]  # range() pinned B to its example size
    (fc,) = [n for n in calls(run) if n.op == "call_module"]
    # int(T * 0.5) is computed before the loop: T is pinned to 6, keep = 3
    fc_shape = run.values[fc.name][0].shape
    assert fc_shape is not None and fc_shape[1] == 3
    run = check_against_eager(d, "Halves", inputs)
    assert "stack" in targets(run)


def test_rotary_helper_and_einops(doc: Callable[[str], Doc]) -> None:
    d = doc(ROTARY_MODEL)
    inputs = [tensor("x", ("B", 2), ("T", 5), (None, 32))]
    run = fake_run(d.meta("Rotary"), inputs, d.path)
    assert run.error is None, run.error
    # einops turns rearrange into Tensor methods; they carry the rearrange call's span
    rearranged = nodes_at(
        run, d.span('rearrange(self.q(x), "b t (h d) -> b t h d", h=self.n_head)')
    )
    assert "reshape" in [n.target for n in rearranged]
    assert run.values[rearranged[-1].name][0].shape == ["B", "T", 4, 8]
    # the helper's ops are written in the helper; their call site is the forward line
    (cat,) = nodes_at(run, d.span("torch.cat((-x2, x1), dim=-1)"))
    assert run.spans[cat.name][1] == d.span("rotate_half(q)")
    assert run.values[cat.name][0].shape == ["B", "T", 4, 8]
    (half,) = nodes_at(run, d.span("x[..., : d // 2]"))
    assert run.values[half.name][0].shape == ["B", "T", 4, 4]
    assert run.values["output"][0].shape == ["B", "T", 4, 8]
    assert graphcheck.unused_nodes(run.graph_module.graph) == []  # type: ignore[union-attr]
    check_against_eager(d, "Rotary", inputs)


def test_optional_mask_branch(doc: Callable[[str], Doc]) -> None:
    d = doc(MASK_MODEL)
    without = [tensor("x", ("B", 2), ("T", 5), (None, 8)), ExampleInput("mask", "value")]
    run = fake_run(d.meta("Scores"), without, d.path)
    assert run.error is None
    assert "masked_fill" not in targets(run)
    check_against_eager(d, "Scores", without)

    with_mask = [tensor("x", ("B", 2), ("T", 5), (None, 8)), tensor("mask", ("T", 5), ("T", 5))]
    run = fake_run(d.meta("Scores"), with_mask, d.path)
    assert run.error is None
    (fill,) = nodes_at(run, d.span('att.masked_fill(mask == 0, float("-inf"))'))
    assert run.values[fill.name][0].shape == ["B", "T", "T"]
    (eq,) = nodes_at(run, d.span("mask == 0"))
    mask_node = eq.args[0]
    assert isinstance(mask_node, torch.fx.Node) and mask_node.name == "mask"
    check_against_eager(d, "Scores", with_mask)


def test_gpt_block_shapes_spans_and_arguments(doc: Callable[[str], Doc]) -> None:
    d = doc(GPT_MODEL)
    inputs = [tensor("idx", ("B", 2), ("T", 7), dtype=torch.long)]
    meta = d.meta("GPT")
    run = fake_run(meta, inputs, d.path)
    assert run.error is None, run.error
    gm = run.graph_module
    assert gm is not None

    # built-in modules are one node each; Sequential is recorded through
    modules = [n.target for n in calls(run) if n.op == "call_module"]
    assert modules[:2] == ["wte", "wpe"]
    assert "h.0.mlp.net.0" in modules and "h.2.mlp.net.2" in modules
    assert "h.0.mlp.net" not in modules
    assert modules[-2:] == ["ln_f", "lm_head"]

    # a line inside the attention runs once per layer: three nodes, one span
    views = nodes_at(run, d.span("k.view(B, T, self.n_head, C // self.n_head)"))
    assert len(views) == 3
    assert {run.values[v.name][0].shape == ["B", "T", 4, 8] for v in views} == {True}
    softmax = nodes_at(run, d.span("F.softmax(att, dim=-1)"))
    assert [run.values[n.name][0].shape for n in softmax] == [["B", 4, "T", "T"]] * 3
    assert run.spans[softmax[0].name][1] == d.span("block(x)")
    assert softmax[1].meta["nn_module_stack"]["h.1.attn"][0] == "h.1.attn"
    (masked,) = nodes_at(
        run, d.span('att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))')
    )[:1]
    assert run.values[masked.name][0].shape == ["B", 4, "T", "T"]
    assert run.values["output"][0].shape == ["B", "T", 50]
    assert [n.target for n in gm.graph.nodes if n.op == "get_attr"] == [
        "h.0.attn.bias",
        "h.1.attn.bias",
        "h.2.attn.bias",
    ]
    (bias,) = [n for n in gm.graph.nodes if n.target == "h.1.attn.bias"]
    assert run.spans[bias.name] == (d.span("self.bias[:, :, :T, :T]"), d.span("block(x)"))

    # the module's own parameters are untouched by the run
    assert all(p.device.type == "meta" for p in meta.parameters())
    assert meta.get_parameter("wte.weight") is meta.get_parameter("lm_head.weight")

    # arguments are named for recorded nodes
    args, source = named_arguments(gm, views[0], run.examples)
    assert source == "aten"
    assert [a.name for a in args][:2] == ["self", "size"]
    args, source = named_arguments(gm, softmax[0], run.examples)
    assert source == "python"
    assert ("dim", "-1") in [(a.name, a.value) for a in args]
    (lm_head,) = [n for n in calls(run) if n.target == "lm_head"]
    args, source = named_arguments(gm, lm_head, run.examples)
    assert (source, [a.name for a in args]) == ("module.forward", ["input"])
    (arange,) = nodes_at(run, d.span("torch.arange(0, t, dtype=torch.long)"))
    args, _ = named_arguments(gm, arange, run.examples)
    assert ("dtype", "torch.int64") in [(a.name, a.value) for a in args]

    check_against_eager(d, "GPT", inputs)


def test_shape_error_keeps_the_graph_so_far(doc: Callable[[str], Doc]) -> None:
    d = doc(BROKEN_MODEL)
    run = fake_run(d.meta("Broken"), [tensor("x", ("B", 2), (None, 4))], d.path)
    assert isinstance(run.error, RuntimeError)
    assert run.error_span == d.span("x @ torch.ones(7, 3)")
    assert run.error_target == "matmul"
    assert run.graph_module is not None
    ops = [n.op for n in run.graph_module.graph.nodes]
    assert "output" not in ops
    assert targets(run) == ["fc", "ones"]
    assert run.values["fc"][0].shape == ["B", 5]


def test_leaf_classes_and_builtin_modules_with_kwargs(doc: Callable[[str], Doc]) -> None:
    d = doc(HELPER_LEAF_MODEL)
    inputs = [tensor("x", ("B", 2), ("T", 3), (None, 8))]
    run = fake_run(d.meta("UsesScale"), inputs, d.path)
    assert run.error is None, run.error
    attn = nodes_at(run, d.span("self.attn(x, x, x, need_weights=False)"))
    # the module call, and `y` taken out of its result (the unpacking is on the same line)
    assert [n.op for n in attn] == ["call_module", "call_function"]
    assert attn[1].target is operator.getitem and attn[1].args == (attn[0], 0)
    assert attn[0].kwargs == {"need_weights": False}
    assert run.values[attn[0].name][0].shape == ["B", "T", 8]
    assert targets(run).count("mul") == 8  # recorded through the user module

    run = fake_run(d.meta("UsesScale"), inputs, d.path, leaf_classes=["Scale"])
    assert targets(run) == ["attn", "getitem", "scale"]
    assert run.values["output"][0].shape == ["B", "T", 8]
    check_against_eager(d, "UsesScale", inputs)


def test_builtin_leaves_take_the_shape_shortcut(
    doc: Callable[[str], Doc], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Linear and LayerNorm shapes come from shortcuts.fast_module, not from running the operator
    # on fake tensors (several times slower in a fresh job child); the shapes are the same
    d = doc(GPT_MODEL)
    inputs = [tensor("x", ("B", 2), ("T", 4), (None, 32))]
    before = fake_run(d.meta("Block"), inputs, d.path)
    assert before.error is None, before.error

    def not_called(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the operator ran")

    monkeypatch.setattr(torch.nn.functional, "linear", not_called)
    monkeypatch.setattr(torch.nn.functional, "layer_norm", not_called)
    run = fake_run(d.meta("Block"), inputs, d.path)
    assert run.error is None, run.error
    assert run.values == before.values
    assert any(n.op == "call_module" for n in calls(run))


def test_real_cpu_module_is_restored(doc: Callable[[str], Doc]) -> None:
    d = doc(GPT_MODEL)
    real = d.real("Block")
    before = {name: p for name, p in real.named_parameters()}
    snapshot = {name: p.detach().clone() for name, p in before.items()}
    run = fake_run(real, [tensor("x", ("B", 2), ("T", 4), (None, 32))], d.path)
    assert run.error is None, run.error
    assert run.values["output"][0].shape == ["B", "T", 32]
    after = dict(real.named_parameters())
    assert all(after[k] is before[k] for k in before)
    assert all(torch.equal(after[k], snapshot[k]) for k in before)
    assert type(real.get_buffer("attn.bias")) is torch.Tensor


def test_non_ascii_columns_are_code_points(doc: Callable[[str], Doc]) -> None:
    d = doc(
        """
class Accents(nn.Module):
    def forward(self, x):
        é = x * 2; return é.relu()
"""
    )
    run = fake_run(d.meta("Accents"), [tensor("x", (None, 3))], d.path)
    (relu,) = [n for n in calls(run) if n.target == "relu"]
    assert run.spans[relu.name][0] == d.span("é.relu()")


def test_constants_attributes_and_python_size_arithmetic(doc: Callable[[str], Doc]) -> None:
    d = doc(CONSTANTS_MODEL)
    inputs = [tensor("x", ("B", 2), ("T", 5), (None, 3))]
    meta = d.meta("Flat")
    run = fake_run(meta, inputs, d.path)
    assert run.error is None, run.error
    gm = run.graph_module
    assert gm is not None
    assert [n.target for n in gm.graph.nodes if n.op == "get_attr"] == ["scale", "_fxls_constant0"]
    assert torch.equal(gm.get_buffer("_fxls_constant0"), d.namespace["TABLE"])
    assert meta.scale.device.type == "meta"  # the plain tensor attribute is restored
    (reshape,) = nodes_at(run, d.span("x.reshape(B * T, C)"))
    assert run.values[reshape.name][0].shape == ["B*T", 3]
    args, _ = named_arguments(gm, reshape, run.examples)
    shape_arg = next(a for a in args if a.name == "shape")
    assert run.rename(shape_arg.value) == "[B*T, 3]"
    # iterating a tensor unbinds it once; each row's sum is one node on the comprehension
    sums = nodes_at(run, d.span("row.sum()"))
    assert len(sums) == 10
    assert "unbind" in targets(run)
    outputs = run.values["output"]
    assert [v.shape for v in outputs] == [["B*T", 3], [10]]  # iteration pins B*T to 10
    check_against_eager(d, "Flat", inputs)


def test_errors_inside_builtin_modules_and_on_data(doc: Callable[[str], Doc]) -> None:
    d = doc(BROKEN_MODEL)
    run = fake_run(d.meta("WrongWidth"), [tensor("x", ("B", 2), (None, 4))], d.path)
    assert isinstance(run.error, RuntimeError)
    assert run.error_span == d.span("self.fc(h)")
    assert run.error_target == "fc"
    assert targets(run) == ["relu"]

    # control flow on tensor data cannot run without data: the branch's line is blamed
    run = fake_run(d.meta("DataBranch"), [tensor("x", (None, 3))], d.path, symbolic=False)
    assert run.error is not None
    assert run.error_span == d.span("x.sum() > 0")
    assert run.error_target == "__bool__"
    assert targets(run) == ["sum", "gt"]


def test_elements_of_a_size_are_where_they_are_indexed(doc: Callable[[str], Doc]) -> None:
    """``shape = x.size()`` used lines below as ``shape[0]``: the element's node is at that
    subscript (not at ``x.size()``, whose value it is not); unpacked elements stay where they
    are unpacked, with the value they unpack."""
    d = doc(ELEMENTS_MODEL)
    inputs = [tensor("x", ("B", 2), ("T", 5), (None, 8))]
    run = fake_run(d.meta("Elements"), inputs, d.path)
    assert run.error is None, run.error
    (size,) = nodes_at(run, d.span("x.size()"))
    assert run.values[size.name][0].shape == ["B", "T", 8]
    (first,) = nodes_at(run, d.span("shape[0]"))
    assert first.target is operator.getitem and first.args == (size, 0)
    assert run.values[first.name][0].text == "B"
    assert run.spans[first.name][1] == d.span("shape[0]")  # written in forward: its own site
    at_unpacking = nodes_at(run, d.span("x.size()", 1))  # `B, T, C = x.size()`
    (unpacked,) = [n for n in at_unpacking if n.target == "size"]
    items = [n for n in calls(run) if n.target is operator.getitem and n.args[0] is unpacked]
    assert [n.args[1] for n in items] == [0] and set(items) <= set(at_unpacking)  # T * C: no node
    at_split = nodes_at(run, d.span("self.fc(h).split(4, dim=-1)"))
    assert [n.target for n in at_split] == ["split", operator.getitem, operator.getitem]
    check_against_eager(d, "Elements", inputs)


def test_tensor_methods_torch_does_not_list_are_methods(doc: Callable[[str], Doc]) -> None:
    """``x.unflatten``, ``x.new_zeros`` and ``x.stride`` reach the torch function mode as
    functions torch's list of ``Tensor`` methods leaves out: they are recorded as the methods
    they are, so their receiver is ``self`` and each argument has its own name (as a function,
    ``unflatten(self=-1, dim=(-1, 16), ...)`` named every argument one place off)."""
    d = doc(UNLISTED_METHODS_MODEL)
    inputs = [tensor("x", ("B", 2), ("T", 5), (None, 64))]
    run = fake_run(d.meta("Heads"), inputs, d.path)
    assert run.error is None, run.error
    gm = run.graph_module
    assert gm is not None
    (unflatten,) = [n for n in calls(run) if n.target == "unflatten"]
    (new_zeros,) = nodes_at(run, d.span("x.new_zeros(x.shape[0], 1, 64)"))
    (stride,) = [n for n in calls(run) if n.target == "stride"]
    named = {}
    for node in (unflatten, new_zeros, stride):
        assert node.op == "call_method", node.target
        args, _ = named_arguments(gm, node, run.examples)
        named[node.target] = [(a.name, a.value) for a in args]
    (q,) = [n for n in calls(run) if n.target == "q"]
    assert named["unflatten"] == [("self", q.name), ("dim", "-1"), ("sizes", "(-1, 16)")]
    assert [name for name, _ in named["new_zeros"]][:2] == ["self", "size"]
    assert named["new_zeros"][0] == ("self", "x")
    assert named["stride"][0] == ("self", unflatten.name)
    assert run.values[unflatten.name][0].shape == ["B", "T", 4, 16]
    check_against_eager(d, "Heads", inputs)
