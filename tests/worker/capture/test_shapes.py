"""Shape and dtype propagation (fxls.worker.capture.shapes.propagation) against eager execution on real tensors."""

from __future__ import annotations

import itertools
import math
import resource
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import pytest
import torch
import torch.fx
import torch.nn.functional as F
from torch import nn
from torch._subclasses.fake_tensor import FakeTensor

from fxls.protocol.model import Value
from fxls.worker.capture.shapes.propagation import (
    ZERO_ONE_ENV,
    ExampleInput,
    Propagation,
    propagate,
    warm_up,
)

# --- models ----------------------------------------------------------------------------


class SmallCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.pool = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(8, 16, 3, stride=2)
        self.fc = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(F.relu(self.bn1(self.conv1(x))))
        x = F.relu(self.conv2(x))
        x = F.adaptive_avg_pool2d(x, 1)
        return self.fc(torch.flatten(x, 1))


class ResBlock(nn.Module):
    def __init__(self, cin: int = 8, cout: int = 16, stride: int = 2) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.down(x))


class CausalSelfAttention(nn.Module):
    bias: torch.Tensor

    def __init__(self, d: int = 768, heads: int = 12, block: int = 64) -> None:
        super().__init__()
        self.heads = heads
        self.ln = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        mask = torch.tril(torch.ones(block, block)).view(1, 1, block, block)
        self.register_buffer("bias", mask)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.size()
        q, k, v = self.qkv(self.ln(x)).split(C, dim=2)
        q = q.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        k = k.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        v = v.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return x + self.proj(y)


class Recurrent(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(16, 32, num_layers=2, batch_first=True)
        self.head = nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        out, (h, c) = self.lstm(x)
        return self.head(out), (h, c)


class TokenModel(nn.Module):
    def __init__(self, vocab: int = 100, d: int = 32) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(64, d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(0, idx.size(1), dtype=torch.long, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        return self.head(x).half()


class Derived(nn.Module):
    """Sizes derived from named dimensions."""

    def forward(self, x: torch.Tensor) -> Any:
        shifted = x[:, 1:]
        flat = x.reshape(-1, x.size(-1))
        doubled = torch.cat([x, x], dim=1)
        half = x[:, : x.size(1) // 2]
        return shifted, flat, doubled, half, x.size(1) - 1, x.shape, x.dtype, x.device, None


class Stack(nn.Module):
    """Repeated layers (outputs are reused across identical ones) with different configs."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.Sequential(*[CausalSelfAttention(64, 4, 16) for _ in range(3)])
        self.up = nn.Linear(64, 96)
        self.mid = nn.Linear(96, 96)
        self.down = nn.Linear(96, 64, bias=False)
        self.norms = nn.ModuleList([nn.LayerNorm(64), nn.LayerNorm(64, elementwise_affine=False)])

    def forward(self, x: torch.Tensor) -> Any:
        x = self.blocks(x)
        h = self.mid(self.mid(self.up(x)))
        y = self.down(h)
        return self.norms[0](y), self.norms[1](y).half(), self.down(h.float()).transpose(1, 2)


class InPlace(nn.Module):
    """Changes a tensor's shape in place: identical later calls must not reuse results."""

    def forward(self, x: torch.Tensor) -> Any:
        a = x.clone()
        a.unsqueeze_(0)
        b = x.clone()
        return a, b, b + 1


def trace(module: nn.Module) -> torch.fx.GraphModule:
    """Plain FX tracing; buffers become proxies so `self.bias[:, :, :T, :T]` traces."""
    tracer = torch.fx.Tracer()
    tracer.proxy_buffer_attributes = True
    return torch.fx.GraphModule(module, tracer.trace(module))


def build(factory: Callable[[], nn.Module], device: str) -> nn.Module:
    torch.manual_seed(0)
    with torch.device(device):
        return factory()


def tensor(
    name: str, *dims: tuple[str | None, int], dtype: torch.dtype = torch.float32
) -> ExampleInput:
    return ExampleInput(name=name, kind="tensor", dims=list(dims), dtype=dtype)


class Recorder(torch.fx.Interpreter):
    """Runs the graph on real tensors and records every node's tensor shapes and dtypes
    when the node runs (later in-place ops may change the objects)."""

    def __init__(self, gm: torch.fx.GraphModule) -> None:
        super().__init__(gm, garbage_collect_values=False)
        self.outputs: dict[str, list[tuple[list[int], torch.dtype]]] = {}

    def run_node(self, n: torch.fx.Node) -> Any:
        result = super().run_node(n)
        self.outputs[n.name] = [(list(t.shape), t.dtype) for t in flat_tensors(result)]
        return result


def flat_tensors(obj: Any) -> list[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (tuple, list)) and not isinstance(obj, torch.Size):
        return [t for item in obj for t in flat_tensors(item)]
    return []


def evaluate(dim: int | str, sizes: dict[str, int]) -> int:
    """A propagated dimension (``"B*T"``, ``"T - 1"``) evaluated at the example sizes."""
    if isinstance(dim, int):
        return dim
    return int(eval(dim, {"__builtins__": {}}, dict(sizes)))


CASES: dict[str, tuple[Callable[[], nn.Module], list[ExampleInput]]] = {
    "cnn": (SmallCNN, [tensor("x", ("B", 2), (None, 3), ("H", 32), ("W", 28))]),
    "resblock": (ResBlock, [tensor("x", ("B", 2), (None, 8), ("H", 15), ("W", 12))]),
    "attention": (
        lambda: CausalSelfAttention(64, 4, 16),
        [tensor("x", ("B", 2), ("T", 7), (None, 64))],
    ),
    "lstm": (Recurrent, [tensor("x", ("B", 3), ("T", 5), (None, 16))]),
    "tokens": (TokenModel, [tensor("idx", ("B", 2), ("T", 9), dtype=torch.int64)]),
    "derived": (Derived, [tensor("x", ("B", 2), ("T", 6), (None, 4))]),
    "stack": (Stack, [tensor("x", ("B", 2), ("T", 5), (None, 64))]),
    "inplace": (InPlace, [tensor("x", ("B", 3), (None, 4))]),
}


def eager_outputs(name: str) -> dict[str, list[tuple[list[int], torch.dtype]]]:
    factory, inputs = CASES[name]
    module = build(factory, "cpu").eval()
    gm = trace(module)
    args = []
    for inp in inputs:
        sizes = [s for _, s in inp.dims]
        if inp.dtype == torch.int64:
            args.append(torch.randint(0, 10, sizes))
        else:
            args.append(torch.randn(sizes, dtype=inp.dtype))
    recorder = Recorder(gm)
    with torch.no_grad():
        recorder.run(*args)
    return recorder.outputs


def check_against_eager(name: str, prop: Propagation) -> int:
    """Every tensor output of every node equals eager execution (shape and dtype)."""
    _, inputs = CASES[name]
    sizes = {n: s for inp in inputs for n, s in inp.dims if n}
    real = eager_outputs(name)
    assert prop.error is None, prop.error
    assert set(prop.values) == set(real)
    compared = 0
    for node, tensors in real.items():
        propagated = [v for v in prop.values[node] if v.kind == "tensor"]
        assert len(propagated) == len(tensors), node
        for (real_shape, real_dtype), v in zip(tensors, propagated):
            assert v.shape is not None
            assert [evaluate(d, sizes) for d in v.shape] == real_shape, (node, v.shape)
            assert v.dtype == str(real_dtype).removeprefix("torch."), node
            compared += 1
    return compared


# --- shapes equal eager execution --------------------------------------------------------


@pytest.mark.parametrize("name", sorted(CASES))
def test_static_shapes_match_eager(name: str) -> None:
    factory, inputs = CASES[name]
    gm = trace(build(factory, "meta"))
    prop = propagate(gm, inputs, symbolic=False)
    assert prop.mode == "meta"
    assert all(isinstance(d, int) for vs in prop.values.values() for v in vs for d in v.shape or [])
    assert check_against_eager(name, prop) >= 3


@pytest.mark.parametrize("name", sorted(CASES))
def test_symbolic_shapes_match_eager(name: str) -> None:
    factory, inputs = CASES[name]
    gm = trace(build(factory, "meta"))
    prop = propagate(gm, inputs)
    assert prop.mode == "symbolic"
    assert check_against_eager(name, prop) >= 3
    assert prop.notes == []


def test_cpu_built_module_uses_fake_tensors() -> None:
    factory, inputs = CASES["attention"]
    gm = trace(build(factory, "cpu"))
    static = propagate(gm, inputs, symbolic=False)
    assert static.mode == "fake"
    assert isinstance(static.examples["qkv"], FakeTensor)
    assert static.examples["qkv"].device.type == "cpu"
    check_against_eager("attention", static)
    symbolic = propagate(gm, inputs)
    assert symbolic.mode == "symbolic"
    assert symbolic.values["output"][0].shape == ["B", "T", 64]


# --- symbolic names ---------------------------------------------------------------------


def shape(prop: Propagation, node: str, index: int = 0) -> list[int | str] | None:
    return prop.values[node][index].shape


class _Halves(nn.Module):
    def forward(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return tokens.repeat(2, 1), tokens.new_zeros(48 // tokens.shape[0])


def test_a_dimension_named_by_a_product_keeps_it_whole_in_expressions() -> None:
    """A block a parent calls on flattened tokens gets a dimension named ``B*T``; in an
    expression the product stays one factor (``2*(B*T)``, ``48//(B*T)``; ``48//B*T`` would
    read as another size)."""
    prop = propagate(trace(_Halves()), [tensor("tokens", ("B*T", 6), (None, 48))])
    assert prop.error is None
    assert shape(prop, "tokens") == ["B*T", 48]
    assert shape(prop, "repeat") == ["2*(B*T)", 48]
    assert shape(prop, "new_zeros") == ["48//(B*T)"]


def test_gpt_attention_names() -> None:
    gm = trace(build(lambda: CausalSelfAttention(768, 12, 1024), "meta"))
    prop = propagate(gm, [tensor("x", ("B", 2), ("T", 128), (None, 768))])
    assert prop.error is None
    assert shape(prop, "x") == ["B", "T", 768]
    assert shape(prop, "qkv") == ["B", "T", 2304]
    assert shape(prop, "matmul") == ["B", 12, "T", "T"]
    assert shape(prop, "softmax") == ["B", 12, "T", "T"]
    assert shape(prop, "getitem_6") == [1, 1, "T", "T"]  # the causal mask sliced by T
    assert shape(prop, "output") == ["B", "T", 768]
    assert prop.values["getitem_2"] == [Value(kind="int", text="768")]  # C from x.size()
    assert prop.values["getitem_1"] == [Value(kind="int", text="T")]


def test_derived_expressions_print_readably() -> None:
    gm = trace(Derived())
    prop = propagate(gm, CASES["derived"][1])
    out = prop.values["output"]
    assert [v.shape for v in out[:4]] == [
        ["B", "T - 1", 4],
        ["B*T", 4],
        ["B", "2*T", 4],
        ["B", "T//2", 4],
    ]
    assert out[4] == Value(kind="int", text="T - 1")
    assert out[5] == Value(kind="size", shape=["B", "T", 4], text="[B, T, 4]")
    assert out[6] == Value(kind="dtype", text="torch.float32")
    assert out[7].kind == "device"
    assert out[8] == Value(kind="none", text="None")


def test_strided_conv_expression() -> None:
    gm = trace(build(SmallCNN, "meta"))
    prop = propagate(gm, CASES["cnn"][1])
    assert shape(prop, "pool") == ["B", 8, "H//2", "W//2"]
    assert shape(prop, "conv2") == ["B", 16, "(H//2 - 3)//2 + 1", "(W//2 - 3)//2 + 1"]
    assert shape(prop, "fc") == ["B", 10]


def test_same_size_for_two_names_keeps_both_until_an_op_equates_them() -> None:
    gm = trace(Derived())
    prop = propagate(gm, [tensor("x", ("B", 4), ("T", 4), (None, 3))])
    assert shape(prop, "x") == ["B", "T", 3]
    assert prop.values["output"][1].shape == ["B*T", 3]

    class Square(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + x.transpose(0, 1)

    prop = propagate(trace(Square()), [tensor("x", ("B", 4), ("T", 4))])
    assert shape(prop, "transpose") == ["T", "B"]
    assert shape(prop, "add") == ["B", "B"]  # the first name, consistently
    assert prop.notes == ["`add` requires T == B: shapes after it use B"]


def test_same_name_on_two_inputs_is_one_symbol() -> None:
    class Pair(nn.Module):
        def forward(self, a: torch.Tensor, b: torch.Tensor) -> Any:
            return torch.cat([a, b], dim=0), a + b, a.size(0) - b.size(0)

    prop = propagate(
        trace(Pair()), [tensor("a", ("N", 3), (None, 2)), tensor("b", ("N", 3), (None, 2))]
    )
    assert shape(prop, "cat") == ["2*N", 2]
    assert shape(prop, "add") == ["N", 2]
    assert prop.values["sub"] == [Value(kind="int", text="0")]
    assert prop.notes == []


def test_symbolic_false_and_unnamed_dims_are_static() -> None:
    gm = trace(build(TokenModel, "meta"))
    named = CASES["tokens"][1]
    assert propagate(gm, named, symbolic=False).values["head"][0].shape == [2, 9, 100]
    unnamed = [tensor("idx", (None, 2), (None, 9), dtype=torch.int64)]
    prop = propagate(gm, unnamed)
    assert prop.mode == "meta"
    assert shape(prop, "head") == [2, 9, 100]


@pytest.mark.parametrize("name", sorted(CASES))
def test_names_of_size_one_run_at_static_sizes_with_the_same_results(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    factory, inputs = CASES[name]
    # ``# fxls: x = (B=1, 3, 224, 224)``: the batch named and 1, every other size a number
    ones = [
        replace(i, dims=[("B", 1) if n == "B" else (None, s) for n, s in i.dims])
        if i.kind == "tensor"
        else i
        for i in inputs
    ]
    gm = trace(build(factory, "meta"))
    fast = propagate(gm, ones)
    assert fast.mode == "symbolic" and fast.run is not None and fast.run.shape_env is None
    monkeypatch.setenv(ZERO_ONE_ENV, "0")
    slow = propagate(gm, ones)
    assert slow.run is not None and slow.run.shape_env is not None
    assert fast.values == slow.values
    assert (fast.error, fast.notes, fast.fixed) == (slow.error, slow.notes, slow.fixed)


def test_a_named_size_above_one_keeps_the_run_symbolic() -> None:
    gm = trace(build(TokenModel, "meta"))
    prop = propagate(gm, [tensor("idx", ("B", 1), ("T", 9), dtype=torch.int64)])
    assert prop.run is not None and prop.run.shape_env is not None
    assert shape(prop, "head") == [1, "T", 100]


def test_specialization_is_noted() -> None:
    class Fixed(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.view(2, -1)

    prop = propagate(trace(Fixed()), [tensor("x", ("B", 2), ("T", 5))])
    assert prop.error is None
    assert shape(prop, "view") == [2, "T"]
    assert len(prop.notes) == 1 and "B = 2" in prop.notes[0] and "`view`" in prop.notes[0]


def test_symbolic_limitation_falls_back_to_example_sizes() -> None:
    class MaskedPool(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attn = nn.MultiheadAttention(8, 2)

        def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            seq = x.flatten(2).permute(2, 0, 1)
            return self.attn(seq, seq, seq, key_padding_mask=mask.flatten(1))[0]

    gm = trace(build(MaskedPool, "meta").eval())
    inputs = [
        tensor("x", ("B", 2), (None, 8), ("H", 3), ("W", 5)),
        tensor("mask", ("B", 2), ("H", 3), ("W", 5), dtype=torch.bool),
    ]
    prop = propagate(gm, inputs)
    # torch's fake kernel for masked attention needs concrete sizes: the shapes are computed
    # at the example sizes and at two others, and each dimension is written in the names
    assert prop.error is None and prop.mode == "meta"
    assert shape(prop, "output") == ["H*W", "B", 8]
    assert prop.example_nodes == []
    assert "`attn` does not support symbolic sizes" in prop.notes[0]
    assert "follow the names" in prop.notes[0]


def test_lstm_state_fixes_only_the_batch() -> None:
    class WithState(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.rnn = nn.LSTM(16, 32, num_layers=2)

        def forward(self, x: torch.Tensor, hidden: Any) -> Any:
            return self.rnn(x, hidden)

    state = (torch.zeros(2, 3, 32), torch.zeros(2, 3, 32))
    gm = trace(build(WithState, "meta"))
    inputs = [
        tensor("x", ("T", 5), ("B", 3), (None, 16)),
        ExampleInput("hidden", "value", value=state),
    ]
    prop = propagate(gm, inputs)
    assert prop.error is None
    assert [v.shape for v in prop.values["rnn"]] == [["T", 3, 32], [2, 3, 32], [2, 3, 32]]
    # the state is made for a batch of 3: at another batch the layer fails, so every shape
    # from it on holds for B = 3 only, and says so
    assert prop.notes == [
        "`rnn` only works for B = 3: at B = 4 the shapes fail at `rnn`; 2 shapes hold for "
        "B = 3 only"
    ]
    assert prop.example_nodes == ["rnn", "output"] and prop.example_sizes == {"B": 3}
    bad = [inputs[0], ExampleInput("hidden", "value", value=(state[0][:, :2], state[1][:, :2]))]
    wrong = propagate(gm, bad)
    assert wrong.error is not None and wrong.error.node == "rnn"


# --- dtypes and values -------------------------------------------------------------------


def test_dtypes_propagate() -> None:
    gm = trace(build(TokenModel, "meta"))
    prop = propagate(gm, CASES["tokens"][1])
    assert prop.values["idx"][0].dtype == "int64"
    assert prop.values["arange"][0] == Value(kind="tensor", shape=["T"], dtype="int64")
    assert prop.values["wte"][0] == Value(kind="tensor", shape=["B", "T", 32], dtype="float32")
    assert prop.values["half"][0].dtype == "float16"


def test_get_attr_and_tuples() -> None:
    gm = trace(build(Recurrent, "meta"))
    prop = propagate(gm, CASES["lstm"][1])
    assert [v.shape for v in prop.values["lstm"]] == [["B", "T", 32], [2, "B", 32], [2, "B", 32]]
    assert [v.shape for v in prop.values["output"]] == [["B", "T", 4], [2, "B", 32], [2, "B", 32]]
    attention = trace(build(lambda: CausalSelfAttention(64, 4, 16), "meta"))
    prop = propagate(attention, CASES["attention"][1])
    assert prop.values["bias"] == [Value(kind="tensor", shape=[1, 1, 16, 16], dtype="float32")]


def test_tensor_constants_from_tracing_follow_the_module() -> None:
    class Constant(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(2, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(x + torch.tensor([1.0, 2.0]))  # a real CPU tensor in the graph

    gm = trace(build(Constant, "meta"))
    assert any(n.op == "get_attr" for n in gm.graph.nodes)
    for symbolic in (True, False):
        prop = propagate(gm, [tensor("x", ("B", 3), (None, 2))], symbolic)
        assert prop.error is None
        assert shape(prop, "output") == (["B", 4] if symbolic else [3, 4])


def test_value_inputs_with_real_tensors_become_data_free() -> None:
    class WithPast(nn.Module):
        def forward(self, x: torch.Tensor, past: Any, flag: Any = None) -> torch.Tensor:
            return torch.cat([past[0], x], dim=1)

    past = (torch.zeros(2, 3, 16), torch.zeros(2, 3, 16))
    gm = trace(WithPast())
    for symbolic in (True, False):
        prop = propagate(
            gm,
            [
                tensor("x", ("B", 2), ("T", 5), (None, 16)),
                ExampleInput("past", "value", value=past),
            ],
            symbolic=symbolic,
        )
        assert prop.error is None
        examples = prop.examples["past"]
        assert all(t is not p and t.device.type == "meta" for t, p in zip(examples, past))
        assert prop.values["flag"] == [Value(kind="none", text="None")]  # the default
        # cat with the static past fixes B to its example size 2, and says so
        assert shape(prop, "cat") == ([2, "T + 3", 16] if symbolic else [2, 8, 16])
        assert len(prop.notes) == symbolic and all("B = 2" in note for note in prop.notes)


# --- errors ------------------------------------------------------------------------------


class BadLinear(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.fc1(x))
        return self.fc2(h).sum()


@pytest.mark.parametrize("symbolic", [True, False])
def test_linear_error_names_node_and_in_features(
    symbolic: bool, capfd: pytest.CaptureFixture[str]
) -> None:
    gm = trace(build(BadLinear, "meta"))
    prop = propagate(gm, [tensor("x", ("B", 4), (None, 16))], symbolic=symbolic)
    assert prop.error is not None
    assert prop.error.node == "fc2"
    message = prop.error.message
    assert "in_features=64" in message and "`relu`" in message and "32" in message
    assert ("[B, 32]" if symbolic else "[4, 32]") in message
    assert "reduction dim" in prop.error.original
    assert isinstance(prop.error.exception, RuntimeError)
    # values before the failing node are kept, none after it
    assert shape(prop, "relu") == (["B", 32] if symbolic else [4, 32])
    assert "fc2" not in prop.values and "sum_1" not in prop.values
    out, err = capfd.readouterr()
    assert out == "" and err == ""


def test_matmul_error_is_readable() -> None:
    class MatMul(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.empty(64, 10))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.mm(x, self.w)

    prop = propagate(trace(build(MatMul, "meta")), [tensor("x", (None, 4), (None, 32))])
    assert prop.error is not None and prop.error.node == "mm"
    assert prop.error.message.startswith(
        "mat1 is [4, 32] but mat2 is [64, 10]: inner dimensions 32 and 64 differ"
    )


def test_conv_and_embedding_errors_name_the_module() -> None:
    gm = trace(build(SmallCNN, "meta"))
    prop = propagate(gm, [tensor("x", ("B", 2), (None, 4), (None, 32), (None, 32))])
    assert prop.error is not None and prop.error.node == "conv1"
    assert "in_channels=3" in prop.error.message and "4 channels" in prop.error.message

    gm = trace(build(TokenModel, "meta"))
    prop = propagate(gm, [tensor("idx", (None, 2), (None, 9), dtype=torch.float32)])
    assert prop.error is not None and prop.error.node == "wte"
    assert "integer indices" in prop.error.message and "float32" in prop.error.message


def test_layernorm_and_broadcast_errors() -> None:
    gm = trace(build(lambda: CausalSelfAttention(64, 4, 16), "meta"))
    prop = propagate(gm, [tensor("x", ("B", 2), ("T", 7), (None, 32))])
    assert prop.error is not None and prop.error.node == "ln"
    assert "LayerNorm([64])" in prop.error.message and "[B, T, 32]" in prop.error.message

    class Broadcast(nn.Module):
        def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            return a + b

    prop = propagate(
        trace(Broadcast()), [tensor("a", ("B", 2), (None, 5)), tensor("b", ("B", 2), (None, 6))]
    )
    assert prop.error is not None and prop.error.node == "add"
    assert "(5)" in prop.error.message and "(6)" in prop.error.message
    assert "[B, 5]" in prop.error.message  # the inputs, in the user's names
    # torch's symbolic broadcast error ends in a ")" nothing opened: left out
    assert "dimension 1 (inputs: " in prop.error.message, prop.error.message
    assert prop.error.message.count("(") == prop.error.message.count(")")


class HalfInput(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 4)
        self.bn = nn.BatchNorm1d(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(self.fc(x.half()))


@pytest.mark.parametrize("symbolic", [True, False])
def test_dtype_mismatch_is_an_error_as_in_eager(symbolic: bool) -> None:
    with pytest.raises(RuntimeError):
        build(HalfInput, "cpu")(torch.randn(2, 8))
    prop = propagate(trace(build(HalfInput, "meta")), [tensor("x", ("B", 2), (None, 8))], symbolic)
    assert prop.error is not None and prop.error.node == "fc"
    assert "float32 weights" in prop.error.message and "float16" in prop.error.message


def test_training_batch_norm_keeps_its_batch_size_check() -> None:
    class Head(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bn = nn.BatchNorm1d(8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.bn(x)

    gm = trace(build(Head, "meta"))
    prop = propagate(gm, [tensor("x", (None, 1), (None, 8))])
    assert prop.error is not None and prop.error.node == "bn"
    assert "more than 1 value per channel" in prop.error.message
    gm.eval()
    assert propagate(gm, [tensor("x", (None, 1), (None, 8))]).error is None


def test_data_dependent_ops() -> None:
    class NonZero(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x[x.nonzero()[:, 0]]

    gm = trace(NonZero())
    static = propagate(gm, [tensor("x", (None, 4), (None, 3))])
    assert static.error is not None and static.error.node == "nonzero"
    assert "depends on tensor values" in static.error.message
    symbolic = propagate(gm, [tensor("x", ("N", 4), (None, 3))])
    assert symbolic.error is None
    assert shape(symbolic, "nonzero") == ["?", 2]

    class Item(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.new_zeros(x.sum().item())  # type: ignore[arg-type]

    static = propagate(trace(Item()), [tensor("x", (None, 4))])
    assert static.error is not None and static.error.node == "item"
    assert "reads a tensor's values" in static.error.message
    symbolic = propagate(trace(Item()), [tensor("x", ("N", 4))])
    assert symbolic.error is not None and symbolic.error.node in {"item", "new_zeros"}
    assert "`item`, a value read from a tensor's data" in symbolic.error.message


def test_missing_input_is_an_error_on_its_placeholder() -> None:
    prop = propagate(trace(Derived()), [])
    assert prop.error is not None and prop.error.node == "x"
    assert "`x`" in prop.error.message


def test_warm_up_runs() -> None:
    warm_up()


# --- memory and speed --------------------------------------------------------------------


def test_large_model_uses_no_real_memory() -> None:
    width, batch = 4096, 8192

    class MLP(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = nn.Sequential(*[nn.Linear(width, width) for _ in range(8)])

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.layers(x).relu()

    gm = trace(build(MLP, "meta"))  # 134 M parameters: 537 MB if real
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for symbolic in (False, True):
        # activations of 8192 x 4096 fp32 would be 134 MB each
        prop = propagate(gm, [tensor("x", ("B", batch), (None, width))], symbolic=symbolic)
        assert prop.error is None
        assert prop.values["output"][0].shape == ["B" if symbolic else batch, width]
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mb < 100


@pytest.mark.slow
def test_speed_of_static_propagation() -> None:
    gm = trace(build(lambda: nn.Sequential(*[ResBlock(16, 16, 1) for _ in range(16)]), "meta"))
    inputs = [tensor("input", (None, 1), (None, 16), (None, 112), (None, 112))]
    propagate(gm, inputs)
    start = time.perf_counter()
    prop = propagate(gm, inputs)
    elapsed = time.perf_counter() - start
    assert prop.error is None
    assert elapsed < 1.0  # ~0.05 s on an idle machine


def test_attention_shortcut_gives_what_the_operator_gives() -> None:
    # shortcuts.fast_sdpa answers F.scaled_dot_product_attention for fake tensors: shape, strides
    # and dtype must be the operator's, static and with symbolic sizes, for the layouts models
    # pass (transposed heads, sliced, expanded, L != S, masks that broadcast); dropout, odd
    # masks and masks beside is_causal go to the operator
    import torch.nn.functional as F
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import (
        DimDynamic,
        ShapeEnv,
        StatelessSymbolicContext,
    )

    from fxls.worker.capture.shapes.shortcuts import fast_sdpa as _fast_sdpa

    for env in (None, ShapeEnv()):
        mode = FakeTensorMode(shape_env=env, allow_non_fake_inputs=True)

        def tensor(
            *shape: int,
            dynamic: tuple[int, ...] = (),
            dtype: Any = torch.float32,
            env: Any = env,
            mode: Any = mode,
        ) -> Any:
            base = torch.empty(*shape, dtype=dtype, device="meta")
            if env is None:
                with mode:
                    return torch.empty(*shape, dtype=dtype)
            ctx = StatelessSymbolicContext(
                dynamic_sizes=[
                    DimDynamic.DYNAMIC if i in dynamic else DimDynamic.STATIC
                    for i in range(len(shape))
                ]
            )
            fake = mode.from_tensor(base, symbolic_context=ctx)
            with mode:
                return torch.empty_strided(fake.shape, fake.stride(), dtype=dtype, device="cpu")

        q = tensor(2, 3, 4, 8, dynamic=(0, 2))
        heads = tensor(2, 4, 3, 8, dynamic=(0, 1)).transpose(1, 2)
        k6 = tensor(2, 3, 6, 8)
        static = tensor(2, 3, 4, 8)
        with mode:
            padding = torch.zeros(heads.shape[0], 1, 1, heads.shape[2])
        cases: list[tuple[tuple[Any, ...], dict[str, Any], bool]] = [
            ((q, q, q), {}, True),
            ((heads, heads, heads), {"is_causal": True}, True),
            ((q[:, :, :, :4],) * 3, {}, True),
            ((tensor(1, 3, 4, 8).expand(2, 3, 4, 8), k6, k6), {"scale": 0.5}, True),
            ((tensor(4, 8), tensor(5, 8), tensor(5, 8)), {"dropout_p": 0.0}, True),
            ((tensor(2, 4, 8, dtype=torch.float16),) * 3, {}, True),
            ((static, static, static), {"attn_mask": tensor(4, 4, dtype=torch.bool)}, True),
            ((heads, heads, heads), {"attn_mask": padding}, True),  # [B, 1, 1, L] of the query
            ((static, k6, k6), {"attn_mask": tensor(1, 3, 4, 6)}, True),
            ((static, k6, k6), {"attn_mask": tensor(3, 4, 6)}, True),
            # a 4 x 4 mask beside a symbolic L: not certain
            ((q, q, q), {"attn_mask": tensor(4, 4, dtype=torch.bool)}, env is None),
            (
                (static,) * 3,
                {"attn_mask": tensor(4, 4, dtype=torch.bool), "is_causal": True},
                False,
            ),
            ((static,) * 3, {"attn_mask": tensor(4, 4, dtype=torch.float64)}, False),
            ((static,) * 3, {"attn_mask": tensor(4, 4, dtype=torch.int64)}, False),
            ((static, k6, k6), {"attn_mask": tensor(1, 1, 1, 4, 6)}, False),
            ((q, q, q), {"dropout_p": 0.1}, False),
            ((q, k6, tensor(2, 3, 6, 5)), {}, False),
        ]
        for args, kwargs, expected in cases:
            with mode:
                fast = _fast_sdpa(args, kwargs)
                try:
                    real = F.scaled_dot_product_attention(*args, **kwargs)
                except RuntimeError:  # what the operator refuses, the shortcut leaves to it
                    real = None
            assert (fast is not None) == expected, kwargs
            if fast is not None:
                assert real is not None, kwargs
                assert (fast.shape, fast.stride(), fast.dtype) == (
                    real.shape,
                    real.stride(),
                    real.dtype,
                ), (env, [a.shape for a in args], kwargs)


# --- shapes after a fixed size, computed again at other sizes ------------------------------


def _runs(table: dict[int, list[int | str]]) -> Any:
    """A rerun that answers one node ``n`` with ``table[size of B]`` (missing: it failed)."""
    from fxls.worker.capture.shapes.sizes import Rerun

    def run(sizes: dict[str, int]) -> Rerun:
        shape = table.get(sizes["B"])
        if shape is None:
            return Rerun(sizes, error="n")
        return Rerun(sizes, {"n": [Value(kind="tensor", shape=shape, dtype="float32")]})

    return run


@pytest.mark.parametrize(
    ("first", "table", "shown", "bound"),
    [
        ([2, 8], {3: [3, 8]}, ["B", 8], False),  # the name itself: settled by one rerun
        ([4, 8], {3: [6, 8], 4: [8, 8]}, ["2*B", 8], False),  # checked by a third run
        ([3, "T"], {3: [4, "T"], 4: [5, "T"]}, ["B + 1", "T"], False),
        (["2*T", 8], {3: ["3*T", 8], 4: ["4*T", 8]}, ["B*T", 8], False),
        ([4, 8], {3: [9, 8], 4: [16, 8]}, [4, 8], True),  # B*B: no a*B + c through all three
        ([2, 8], {}, [2, 8], True),  # the other size fails: holds for B = 2 only
        ([2, 8], {3: ["B", 8]}, ["B", 8], False),  # a rerun that keeps the name
    ],
)
def test_generalize_writes_dimensions_in_the_fixed_name(
    first: list[int | str], table: dict[int, list[int | str]], shown: list[Any], bound: bool
) -> None:
    from fxls.worker.capture.shapes.sizes import generalize

    found = generalize(
        {"n": [Value(kind="tensor", shape=first, dtype="float32")]}, {"B": 2}, _runs(table)
    )
    assert found.values["n"][0].shape == shown
    assert found.bound == (["n"] if bound else [])


def test_generalize_tells_two_fixed_names_apart() -> None:
    """Fixed together, ``B`` and ``T`` move by other steps (2, 3, 4 and 5, 7, 13), so that a
    dimension that is ``T`` is never taken for ``2*B + 1``; products of names are found."""
    from fxls.worker.capture.shapes.sizes import Rerun, generalize

    def run(sizes: dict[str, int]) -> Rerun:
        b, t = sizes["B"], sizes["T"]
        shape: list[int | str] = [t, b * t, b, 16]
        return Rerun(sizes, {"n": [Value(kind="tensor", shape=shape, dtype="float32")]})

    first = [Value(kind="tensor", shape=[5, 10, 2, 16], dtype="float32")]
    found = generalize({"n": first}, {"B": 2, "T": 5}, run)
    assert found.values["n"][0].shape == ["T", "B*T", "B", 16]
    assert found.bound == [] and len(found.reruns) == 2


def test_a_value_before_anything_was_fixed_is_kept() -> None:
    """Values rendered before the name was fixed mention it and stay, even when another run
    has nothing for them; numbers another run has nothing for hold for the example only."""
    from fxls.worker.capture.shapes.sizes import Rerun, generalize

    first = {
        "x": [Value(kind="tensor", shape=["B", 16], dtype="float32")],
        "y": [Value(kind="tensor", shape=[2, 16], dtype="float32")],
        "n": [Value(kind="int", text="2")],
    }
    found = generalize(first, {"B": 2}, lambda sizes: Rerun(sizes, {}, error="x"))
    assert found.values == first
    assert found.bound == ["y", "n"]
    again = generalize(
        {
            "n": [Value(kind="int", text="2")],
            "s": [Value(kind="size", shape=[2, 3], text="[2, 3]")],
        },
        {"B": 2},
        lambda sizes: Rerun(
            sizes,
            {
                "n": [Value(kind="int", text=str(sizes["B"]))],
                "s": [Value(kind="size", shape=[sizes["B"], 3], text="")],
            },
        ),
    )
    assert again.values["n"] == [Value(kind="int", text="B")]
    assert again.values["s"] == [Value(kind="size", shape=["B", 3], text="[B, 3]")]


def test_a_value_without_dimensions_beside_one_that_moves_is_kept() -> None:
    """A node whose outputs are a tensor that follows the fixed name and a flag (or
    ``None``) that is the same in every run: the tensor is written in the name and the flag
    kept (a node of Swin's stages gave both, and generalizing it raised an ``IndexError``
    that lost every shape of the class)."""
    from fxls.worker.capture.shapes.sizes import Rerun, generalize

    def run(sizes: dict[str, int]) -> Rerun:
        moved = Value(kind="tensor", shape=[sizes["B"], 16], dtype="float32")
        return Rerun(sizes, {"n": [moved, Value(kind="none", text="None")]})

    first = [Value(kind="tensor", shape=[2, 16], dtype="float32"), Value(kind="none", text="None")]
    found = generalize({"n": first}, {"B": 2}, run)
    assert found.values["n"] == [
        Value(kind="tensor", shape=["B", 16], dtype="float32"),
        Value(kind="none", text="None"),
    ]
    assert found.bound == []


class _Windowed(nn.Module):
    """Like Swin's layers: ``forward`` makes its window as small as the input it is given,
    on the module, and runs with that window."""

    def __init__(self) -> None:
        super().__init__()
        self.window = 8

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.window = min(self.window, x.shape[-1])
        return x.unflatten(-1, (-1, self.window))


class _WindowedNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.windowed = _Windowed()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.windowed(x).sum(-1)


def test_what_a_leaf_assigns_to_its_module_does_not_reach_the_next_run() -> None:
    """A leaf of the user's code runs its ``forward`` in every propagation, and the capture
    propagates the same instance many times (input forms, other sizes): a run at a small size
    left Swin's window at 4 instead of 7 for every later run. Each run starts from the
    module as it was built, as an eager run of a fresh model would."""

    class Tracer(torch.fx.Tracer):
        def is_leaf_module(self, m: nn.Module, qualified_name: str) -> bool:
            return isinstance(m, _Windowed) or super().is_leaf_module(m, qualified_name)

    net = _WindowedNet()
    gm = torch.fx.GraphModule(net, Tracer().trace(net))
    small = propagate(gm, [tensor("x", (None, 2), (None, 4))], symbolic=False)
    assert shape(small, "windowed") == [2, 1, 4]
    large = propagate(gm, [tensor("x", (None, 2), (None, 32))], symbolic=False)
    assert shape(large, "windowed") == [2, 4, 8]
    assert net.windowed.window == 8


class _Fixed(nn.Module):
    """``F.interpolate``'s fake kernel fixes the batch; ``extra`` additions follow."""

    def __init__(self, extra: int = 0) -> None:
        super().__init__()
        self.extra = extra

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(self.extra):
            x = x + 1
        return F.interpolate(x, scale_factor=2).flatten(1)


def test_a_large_run_is_not_computed_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the node budget, the shapes after the fixing node are not computed again: they
    are listed as holding for the example size, never shown as if they held for any."""
    import fxls.worker.capture.shapes.propagation as propagation

    Fixed = _Fixed
    monkeypatch.setattr(propagation, "RERUN_NODES", 0)
    prop = propagate(trace(Fixed()), [tensor("x", ("B", 2), (None, 3), (None, 4), (None, 4))])
    assert shape(prop, "flatten") == [2, 192]
    assert prop.example_nodes == ["interpolate", "flatten", "output"]
    assert prop.example_sizes == {"B": 2}
    assert "not computed again" in prop.notes[0]
    monkeypatch.undo()
    prop = propagate(trace(Fixed()), [tensor("x", ("B", 2), (None, 3), (None, 4), (None, 4))])
    assert shape(prop, "flatten") == ["B", 192] and prop.example_nodes == []


def test_whether_a_run_is_computed_again_does_not_depend_on_the_clock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A graph of 600 nodes whose run looks 5 s long is computed again all the same (a file
    shows the same shapes on a slow machine as on a fast one); only a job whose CPU limit
    two more such runs would pass keeps the example size."""
    import fxls.worker.capture.shapes.propagation as propagation

    clock = iter(range(0, 10**6, 5))
    monkeypatch.setattr(propagation.time, "process_time", lambda: float(next(clock)))
    monkeypatch.setattr(propagation.time, "perf_counter", lambda: float(next(clock)))
    gm = trace(_Fixed(extra=600))
    assert 400 < len(gm.graph.nodes) <= propagation.RERUN_NODES
    x = [tensor("x", ("B", 2), (None, 3), (None, 4), (None, 4))]
    prop = propagate(gm, x)
    assert shape(prop, "flatten") == ["B", 192] and prop.example_nodes == []
    monkeypatch.setattr(propagation.cpulimit, "soft_limit_s", lambda: 30.0)
    prop = propagate(gm, x)
    assert shape(prop, "flatten") == [2, 192] and "not computed again" in prop.notes[0]
    monkeypatch.setattr(propagation.cpulimit, "soft_limit_s", lambda: 10**7)
    assert shape(propagate(gm, x), "flatten") == ["B", 192]


def test_python_errors_between_torch_calls_are_said_in_words() -> None:
    """An item past the end of a tuple a module returned is named with what the tuple
    holds, not as "tuple index out of range"; a module whose own code raises is named with
    its class (kept whole as a leaf, FX records one node for it)."""

    class Pair(nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return x, x * 2

    class Third(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.pair = Pair()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.pair(x)[2]

    class Leaves(torch.fx.Tracer):
        def is_leaf_module(self, m: nn.Module, qualname: str) -> bool:
            return isinstance(m, Pair) or super().is_leaf_module(m, qualname)

    module = Third()
    gm = torch.fx.GraphModule(module, Leaves().trace(module))
    prop = propagate(gm, [tensor("x", ("B", 2), (None, 8))])
    assert prop.error is not None and prop.error.node == "getitem"
    assert prop.error.message.startswith("takes item 2 of a tuple of 2 ([B, 8] float32"), (
        prop.error.message
    )

    class Picky(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            parts = [x]
            return parts[3]

    class Outer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.picky = Picky()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.picky(x)

    class PickyLeaf(torch.fx.Tracer):
        def is_leaf_module(self, m: nn.Module, qualname: str) -> bool:
            return isinstance(m, Picky) or super().is_leaf_module(m, qualname)

    outer = Outer()
    gm = torch.fx.GraphModule(outer, PickyLeaf().trace(outer))
    prop = propagate(gm, [tensor("x", ("B", 2), (None, 8))])
    assert prop.error is not None
    assert prop.error.message.startswith("`picky` (Picky) raised IndexError in its own code"), (
        prop.error.message
    )


def _conv_cases() -> Iterator[tuple[Any, list[int]]]:
    """Convolution layers and input sizes: every kind, 1×1 and strided kernels, dilation,
    groups, batch and channels of 1, outputs and padded inputs smaller than the kernel."""
    convs = [torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d]
    for dims, cin, cout, k, s, p, g, batch, hw in itertools.product(
        (1, 2, 3), (1, 4), (2, 4), (1, 3), (1, 2), (0, 1), (1, 2), (1, 3), (1, 6)
    ):
        if cin % g == 0 and cout % g == 0:
            d = 2 if s == 2 else 1
            conv = convs[dims - 1](
                cin, cout, k, stride=s, padding=p, dilation=d, groups=g, bias=g == 1
            )
            yield conv, [batch, cin, *([hw] * dims)]


@pytest.mark.parametrize("device", ["meta", "cpu"])
def test_convolution_shortcut_gives_what_the_operator_gives(device: str) -> None:
    # shortcuts.fast_conv answers Conv1d/2d/3d: shape, strides, dtype and device must be the
    # kernel's on meta tensors (static runs) and on fake tensors with a symbolic batch
    # (symbolic runs; a CPU-built module's fake run), for inputs laid out in every way
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import (
        DimDynamic,
        ShapeEnv,
        StatelessSymbolicContext,
    )

    from fxls.worker.capture.shapes.shortcuts import fast_conv

    answered = left = 0
    for symbolic in (False, True):
        mode = FakeTensorMode(shape_env=ShapeEnv(), allow_non_fake_inputs=True)
        for conv, shape in _conv_cases():
            with torch.device(device):
                conv = conv.to(device)
            base = torch.empty(shape, device="meta")
            inputs = [base, base.transpose(-1, -2)]
            if len(shape) == 4:
                inputs.append(base.to(memory_format=torch.channels_last))
            for x in inputs:
                if symbolic or device == "cpu":
                    dynamic = [DimDynamic.DYNAMIC if symbolic else DimDynamic.STATIC]
                    dynamic += [DimDynamic.STATIC] * (x.dim() - 1)
                    ctx = StatelessSymbolicContext(dynamic_sizes=dynamic)
                    x = mode.from_tensor(x, symbolic_context=ctx)
                    if device == "cpu":
                        with mode:
                            x = x.to("cpu")
                with mode if isinstance(x, FakeTensor) else torch.device("meta"):
                    fast = fast_conv(conv, x)
                    try:
                        real = conv._conv_forward(x, conv.weight, conv.bias)
                    except RuntimeError:
                        assert fast is None, (conv, x.shape)
                        left += 1
                        continue
                if fast is None:
                    left += 1
                    continue
                answered += 1
                got = (fast.shape, fast.stride(), fast.dtype, fast.device)
                assert got == (real.shape, real.stride(), real.dtype, real.device), (conv, x.shape)
    assert answered > 200 and left > 50


def _modes() -> list[tuple[Any, Any]]:
    """A static and a symbolic fake mode: (its ``ShapeEnv`` or None, the mode)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    return [
        (env, FakeTensorMode(shape_env=env, allow_non_fake_inputs=True))
        for env in (None, ShapeEnv())
    ]


def _from_meta(
    mode: Any, shape: tuple[int, ...], dtype: Any = torch.float32, dynamic: int = 0
) -> Any:
    """A fake tensor of ``mode`` made from a meta tensor; its first ``dynamic`` dimensions
    symbolic when the mode has a ``ShapeEnv``."""
    from torch.fx.experimental.symbolic_shapes import DimDynamic, StatelessSymbolicContext

    base = torch.empty(*shape, dtype=dtype, device="meta")
    if mode.shape_env is None or not dynamic:
        return mode.from_tensor(base, static_shapes=True)
    sizes = [DimDynamic.DYNAMIC if i < dynamic else DimDynamic.STATIC for i in range(len(shape))]
    return mode.from_tensor(base, symbolic_context=StatelessSymbolicContext(sizes))


def test_elementwise_rules_give_what_the_operator_gives() -> None:
    # shapes.elementwise answers activations, dropout, softmax, masked_fill, arithmetic and
    # comparisons with a number: shape, strides, dtype and storage offset must be the
    # operator's, with symbolic and static sizes; anything else goes to the operator
    import operator

    import torch.nn.functional as F

    from fxls.worker.capture.shapes import elementwise as ew

    for env, mode in _modes():

        def tensor(*shape: int, dtype: Any = torch.float32, mode: Any = mode) -> Any:
            return _from_meta(mode, shape, dtype, dynamic=2)

        x = tensor(2, 5, 8)
        heads = tensor(2, 5, 4, 6).transpose(1, 2)
        buffer = _from_meta(mode, (1, 1, 16, 16))
        mask = _from_meta(mode, (5, 8), torch.bool)
        T = x.shape[1]
        ints = tensor(2, 5, dtype=torch.int64)

        def ones(*shape: int, mode: Any = mode) -> Any:
            return _from_meta(mode, shape)

        weight = ones(8)
        function_cases: list[tuple[Any, tuple[Any, ...], dict[str, Any], bool]] = [
            (F.gelu, (x,), {}, True),
            (F.gelu, (x,), {"approximate": "tanh"}, True),
            (F.relu, (x,), {"inplace": False}, True),
            (torch.tanh, (x,), {}, True),
            (F.silu, (heads,), {}, False),  # not contiguous
            (F.relu, (ints,), {}, False),  # not floating
            (F.dropout, (x, 0.1, True), {}, True),
            (F.dropout, (x,), {"p": 0.0, "training": False}, True),
            (operator.add, (x, x), {}, True),
            (operator.mul, (x, 0.5), {}, True),
            (operator.truediv, (2, x), {}, True),
            # [5, 8] broadcasts to [2, 5, 8]; a symbolic T would need a guard T == 5
            (operator.add, (x, tensor(5, 8)), {}, env is None),
            (operator.mul, (x, weight), {}, True),  # a [8] weight broadcast to x's sizes
            (operator.sub, (weight.view(1, 1, 8), x), {}, True),
            (operator.add, (ones(2, 1, 8), ones(1, 5, 8)), {}, False),  # broadcast each other
            (operator.mul, (x, x.half()), {}, False),  # dtypes differ
            (operator.add, (x, True), {}, False),
            (F.softmax, (x,), {"dim": -1}, True),
            (torch.softmax, (x, 1), {}, True),
            (F.softmax, (x,), {"dim": -1, "dtype": torch.float64}, False),
            (operator.eq, (x, 0), {}, True),
            (operator.lt, (1.5, ints), {}, True),
            (operator.eq, (buffer[:, :, :T, :T], 0), {}, True),  # a slice: row by row, with gaps
            (operator.ne, (heads, 0), {}, False),  # transposed
            # [5, 8] broadcasts to [2, 5, 8]; a symbolic T would need a guard T == 5
            (torch.masked_fill, (x, mask, 0.0), {}, env is None),
        ]
        for target, args, kwargs, expected in function_cases:
            with mode:
                fast = ew.same_layout_function(target, args, kwargs)
                real = target(*args, **kwargs)
            assert (fast is not None) == expected, (target, kwargs, env)
            if fast is not None:
                assert _layout(fast) == _layout(real), (target, env)
        att = tensor(2, 3, 5, 5)
        with mode:
            causal = buffer[:, :, :5, :5] == 0
        method_cases: list[tuple[str, tuple[Any, ...], bool]] = [
            ("masked_fill", (att, causal, float("-inf")), True),
            ("softmax", (att, -1), True),
            ("softmax", (att, 4), False),  # no such dimension
            ("contiguous", (heads,), True),
            ("contiguous", (x,), True),
            ("relu", (x,), True),
            ("div", (x, x), True),
            ("ge", (att, 0.0), True),
        ]
        for name, args, expected in method_cases:
            with mode:
                fast = ew.same_layout_method(name, args, {})
                assert (fast is not None) == expected, (name, env)
                if fast is not None:
                    assert _layout(fast) == _layout(getattr(args[0], name)(*args[1:])), (name, env)
        for module, expected in [
            (torch.nn.GELU(), True),
            (torch.nn.GELU(approximate="tanh"), True),
            (torch.nn.Dropout(0.2), True),
            (torch.nn.Softmax(dim=-1), True),
            (torch.nn.Softmax(), False),  # no dimension given
            (torch.nn.ELU(), False),  # not answered
        ]:
            with mode:
                fast = ew.same_layout_module(module, x)
                assert (fast is not None) == expected, (module, env)
                if fast is not None:
                    assert _layout(fast) == _layout(module(x)), (module, env)


def _layout(t: torch.Tensor) -> Any:
    return (tuple(t.shape), t.stride(), t.dtype, t.device, t.storage_offset())


def test_the_embedding_shortcut_gives_what_the_layer_gives() -> None:
    # shortcuts.fast_module answers nn.Embedding for integer indices, static and symbolic
    from fxls.worker.capture.shapes.shortcuts import fast_module

    with torch.device("meta"):
        layers = [
            (torch.nn.Embedding(50, 8), True),
            (torch.nn.Embedding(50, 8, padding_idx=0).half(), True),
            (torch.nn.Embedding(50, 8, max_norm=1.0), False),
        ]
    for env, mode in _modes():
        for dtype, expected in ((torch.int64, True), (torch.int32, True), (torch.float32, False)):
            idx = _from_meta(mode, (2, 5), dtype, dynamic=2)
            for layer, answered in layers:
                with mode:
                    fast = fast_module(layer, idx, ())
                    assert (fast is not None) == (expected and answered), (layer, dtype)
                    if fast is not None:
                        assert _layout(fast) == _layout(layer(idx)), (layer, dtype, env)


# --- operators whose meta kernel refuses what the CPU runs (shapes.kernels) --------------

GROUPED = [
    # (mat_a, mat_b, offs): a 2-D operand is jagged along ``offs`` (group ends, int32)
    pytest.param((10, 8), (3, 8, 12), [4, 7, 10], id="2d-3d"),
    pytest.param((3, 5, 8), (3, 8, 12), None, id="3d-3d"),
    pytest.param((8, 12), (12, 8), [4, 8, 12], id="2d-2d"),
    pytest.param((3, 8, 16), (16, 12), [4, 8, 12], id="3d-2d"),
]


@pytest.mark.parametrize(("a", "b", "offs"), GROUPED)
@pytest.mark.parametrize("where", ["meta", "fake", "symbolic"])
def test_grouped_mm_on_meta_gives_what_the_cpu_kernel_gives(
    a: tuple[int, ...], b: tuple[int, ...], offs: list[int] | None, where: str
) -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    from fxls.worker.capture.shapes import kernels

    cpu = [torch.randn(a), torch.randn(b)]
    groups = torch.tensor(offs, dtype=torch.int32) if offs is not None else None
    expected = torch._grouped_mm(*cpu, offs=groups)  # float32 on the CPU runs
    on_meta = [t.to("meta") for t in cpu]
    meta_offs = groups.to("meta") if groups is not None else None
    with pytest.raises(RuntimeError, match="BF16"):  # and torch's meta kernel refuses it
        torch._grouped_mm(*on_meta, offs=meta_offs)
    if where == "meta":
        out = kernels.grouped_mm(*on_meta, offs=meta_offs)
    else:
        mode = FakeTensorMode(shape_env=ShapeEnv() if where == "symbolic" else None)
        fakes = [mode.from_tensor(t) for t in [*cpu, *([groups] if offs is not None else [])]]
        with mode:
            out = kernels.grouped_mm(fakes[0], fakes[1], offs=fakes[2] if offs else None)
    assert tuple(out.shape) == tuple(expected.shape)
    assert out.dtype == expected.dtype == torch.float32


def test_grouped_mm_leaves_what_the_cpu_rule_does_not_cover_to_torch() -> None:
    from fxls.worker.capture.shapes import kernels

    a, b = torch.empty(4, 5, 8, device="meta"), torch.empty(4, 8, 8, device="meta")
    bf16 = kernels.grouped_mm(a.bfloat16(), b.bfloat16())  # torch's own meta kernel
    assert bf16.shape == (4, 5, 8) and bf16.dtype == torch.bfloat16
    with pytest.raises(RuntimeError):  # mixed dtypes: torch's error, as before
        kernels.grouped_mm(a, b.half())
    with pytest.raises(RuntimeError, match="contraction"):
        kernels.grouped_mm(a, torch.empty(4, 7, 8, device="meta"))
    # rows 24 bytes apart: the CPU kernel's error, not the meta kernel's "BF16"
    cpu_error = "strides should be multiple of 16 bytes"
    with pytest.raises(RuntimeError, match=cpu_error):
        torch._grouped_mm(torch.randn(4, 5, 8), torch.randn(4, 8, 6))
    with pytest.raises(RuntimeError, match=cpu_error):
        kernels.grouped_mm(a, torch.empty(4, 8, 6, device="meta"))
    transposed = torch.empty(4, 6, 8, device="meta").transpose(1, 2)  # column-major: taken
    assert kernels.grouped_mm(a, transposed).shape == (4, 5, 6)
    assert torch._grouped_mm(torch.randn(4, 5, 8), torch.randn(4, 6, 8).transpose(1, 2)).shape == (
        4,
        5,
        6,
    )


def test_a_graph_calling_grouped_mm_propagates_in_float32() -> None:
    from fxls.worker.capture.shapes import kernels

    class Experts(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.randn(3, 8, 12))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch._grouped_mm(x, self.w)

    gm = torch.fx.symbolic_trace(Experts())
    assert any(n.target is torch._grouped_mm for n in gm.graph.nodes)
    with kernels.cpu_rules():
        x = ExampleInput("x", "tensor", [(None, 3), ("T", 5), (None, 8)])
        prop = propagate(gm, [x])
    assert prop.error is None, prop.error
    assert prop.values["output"][0].shape == [3, "T", 12]
    assert torch._grouped_mm is not kernels.grouped_mm  # put back
