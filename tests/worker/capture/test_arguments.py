"""Named arguments for FX call nodes on real traced models (fxls.worker.capture.records.arguments)."""

from __future__ import annotations

import inspect
import math
import operator
import re
import time
from typing import Any

import pytest
import torch
import torch.fx
import torch.nn as nn
import torch.nn.functional as F

from fxls.protocol.model import Arg
from fxls.worker.capture.records.arguments import format_value, named_arguments


def scale_rows(x: torch.Tensor, factor: float = 2.0, *, bias: float = 0.0) -> torch.Tensor:
    """A user helper kept opaque to tracing with torch.fx.wrap."""
    return x * factor + bias


torch.fx.wrap("scale_rows")


# ---------------------------------------------------------------------------------------
# Models
# ---------------------------------------------------------------------------------------


class CNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.act = nn.ReLU()
        self.pool = nn.MaxPool2d(2)
        self.w = nn.Parameter(torch.randn(8, 8, 3, 3))
        self.fc = nn.Linear(8 * 2 * 2, 10)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.act(self.bn(self.conv1(x)))
        x = F.relu(x)
        x = self.pool(x)
        x = F.conv2d(x, self.w, stride=2)
        y, indices = F.max_pool2d(x, 2, return_indices=True)
        z = F.max_pool2d(x, 1)
        x = torch.flatten(y + z[:, :, :2, :2], 1)
        return self.fc(x), indices


class Attention(nn.Module):
    bias: torch.Tensor

    def __init__(self, n_embd: int = 32, n_head: int = 4, block: int = 16) -> None:
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.drop = nn.Dropout(0.1)
        self.n_head, self.n_embd = n_head, n_embd
        self.register_buffer("bias", torch.tril(torch.ones(block, block)).view(1, 1, block, block))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).permute(0, 2, 1, 3)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        att = self.drop(att)
        y = torch.matmul(att, v)
        y = y + F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, n_embd: int = 32) -> None:
        super().__init__()
        self.fc = nn.Linear(n_embd, 4 * n_embd)
        self.gelu = nn.GELU()
        self.proj = nn.Linear(4 * n_embd, n_embd)
        self.drop = nn.Dropout(0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.proj(self.gelu(self.fc(x))))


class Block(nn.Module):
    def __init__(self, n_embd: int = 32, n_head: int = 4, block: int = 16) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = Attention(n_embd, n_head, block)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = MLP(n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(F.layer_norm(x, (x.size(-1),)))
        return x


class GPT(nn.Module):
    def __init__(self, n_layer: int = 12, n_embd: int = 32, vocab: int = 50, block: int = 16):
        super().__init__()
        self.wte = nn.Embedding(vocab, n_embd)
        self.wpe = nn.Embedding(block, n_embd)
        self.h = nn.ModuleList([Block(n_embd, 4, block) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab, bias=False)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, Any]:
        _, t = idx.size()
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        return logits, loss


class ResBlock(nn.Module):
    def __init__(self, cin: int = 4, cout: int = 8) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=2, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=2), nn.BatchNorm2d(cout))
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += self.downsample(x)
        return self.relu(out)


class Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)


class Misc(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[Any, ...]:
        n = x.shape[0]
        c = x.size(1)
        d = getattr(x, "dtype")  # noqa: B009 - recorded as a getattr call
        r = math.sqrt(c)
        a = torch.add(x, x)
        b = torch.add(x, 1.0, alpha=2)
        cat = torch.cat([a, b], dim=1)
        st = torch.stack((a, b))
        s1, s2 = torch.split(cat, 4, dim=1)
        c1, c2 = torch.chunk(cat, 2, 1)
        ch = x.chunk(2)
        v = x.view(2, -1)
        p = x.permute(1, 0)
        e = x[None].expand(3, -1, -1)
        rep = x.repeat(2, 1)
        re_ = x.reshape(n, -1)
        f = x.to(torch.float16)
        g = x.float()
        h = x.new_zeros((2, 3))
        z = torch.ones(2, 3, device=x.device)
        k = x.sum(1, keepdim=True)
        m = x.mean(dim=-1)
        q = operator.neg(x) - x * 2 / r
        u = scale_rows(x, 3.0)
        w = x[..., 0:2]
        return n, d, st, s1, s2, c1, c2, ch, v, p, e, rep, re_, f, g, h, z, k, m, q, u, w


def trace(model: nn.Module) -> torch.fx.GraphModule:
    """symbolic_trace, with buffers proxied so ``self.bias[:, :, :T, :T]`` traces."""
    tracer = torch.fx.Tracer()
    tracer.proxy_buffer_attributes = True
    return torch.fx.GraphModule(model, tracer.trace(model))


def run_examples(gm: torch.fx.GraphModule, *inputs: torch.Tensor) -> dict[str, Any]:
    """node name -> output, by running the graph on meta inputs."""
    examples: dict[str, Any] = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, n: torch.fx.Node) -> Any:
            result = super().run_node(n)
            examples[n.name] = result
            return result

    Recorder(gm).run(*inputs)
    return examples


def call_nodes(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return [n for n in gm.graph.nodes if n.op in ("call_function", "call_method", "call_module")]


def by_name(args: list[Arg]) -> dict[str, Arg]:
    return {a.name: a for a in args}


def named(gm: torch.fx.GraphModule, examples: dict[str, Any]) -> dict[str, tuple[dict, str]]:
    out = {}
    for node in call_nodes(gm):
        args, source = named_arguments(gm, node, examples)
        out[node.name] = (by_name(args), source)
    return out


# ---------------------------------------------------------------------------------------
# Completeness check, independent of the implementation
# ---------------------------------------------------------------------------------------


def _expected_names(gm: torch.fx.GraphModule, node: torch.fx.Node) -> list[list[str]] | None:
    """Candidate parameter-name lists for the node's target (None: no independent source)."""
    if node.op == "call_module":
        forward = gm.get_submodule(str(node.target)).forward
        return [list(inspect.signature(forward).parameters)]
    target = node.target
    if node.op == "call_method":
        fn = getattr(torch.Tensor, str(target))
        if inspect.isfunction(fn):
            return [list(inspect.signature(fn).parameters)]
        qualified, self_name = f"aten::{target}", "self"
    else:
        assert callable(target)
        try:
            sig = inspect.signature(inspect.unwrap(target))
            names = list(sig.parameters)
            if names != ["args", "kwargs"]:
                return [[n for n in names if not n.startswith("_") and n != "out"]]
        except (TypeError, ValueError):
            pass
        qualified = torch.jit._builtins._find_builtin(target)
        self_name = "input"
        if qualified is None:
            return None
    schemas = torch._C._jit_get_schemas_for_operator(qualified)
    return [
        [self_name if a.name == "self" else a.name for a in s.arguments if a.name != "implicit"]
        for s in schemas
        if not any(a.name == "out" for a in s.arguments)
    ] or None


def check_complete(gm: torch.fx.GraphModule, node: torch.fx.Node, args: list[Arg], source: str):
    assert source != "none", f"{node.format_node()} has no signature"
    names = [a.name for a in args]
    assert len(set(names)) == len(names), names
    for key, value in node.kwargs.items():
        if not key.startswith("_") and not (key == "out" and value is None):
            assert key in names, f"{node.name}: kwarg {key} missing from {names}"
    texts = " ".join(a.value for a in args)
    for inp in node.all_input_nodes:
        assert re.search(rf"\b{re.escape(inp.name)}\b", texts), f"{node.name}: {inp.name} lost"
    for a in args:
        if a.node is not None:
            assert a.value == a.node
    expected = _expected_names(gm, node)
    if expected is not None and source != "approximate":
        assert names in expected, f"{node.name}: {names} not among {expected}"


def coverage(gm: torch.fx.GraphModule, examples: dict[str, Any]) -> tuple[int, int]:
    nodes = call_nodes(gm)
    covered = 0
    for node in nodes:
        args, source = named_arguments(gm, node, examples)
        check_complete(gm, node, args, source)
        covered += source != "none"
    return covered, len(nodes)


# ---------------------------------------------------------------------------------------
# Tests
# ---------------------------------------------------------------------------------------

MODELS = {
    "cnn": (CNN, lambda: (torch.randn(2, 3, 20, 20),)),
    "block": (Block, lambda: (torch.randn(2, 16, 32),)),
    "resblock": (ResBlock, lambda: (torch.randn(2, 4, 8, 8),)),
    "encoder": (Encoder, lambda: (torch.randn(2, 5, 16),)),
    "misc": (Misc, lambda: (torch.randn(4, 8),)),
}


@pytest.mark.parametrize("examples_mode", ["full", "partial", "none"])
@pytest.mark.parametrize("model", list(MODELS))
def test_every_call_node_is_named(model: str, examples_mode: str) -> None:
    cls, make_inputs = MODELS[model]
    gm = trace(cls().eval())
    examples = run_examples(gm, *make_inputs()) if examples_mode != "none" else {}
    if examples_mode == "partial":  # as if propagation stopped half-way at an error
        examples = dict(list(examples.items())[: len(examples) // 2])
    covered, total = coverage(gm, examples)
    assert total > 0
    assert covered == total


def test_cnn_arguments() -> None:
    gm = trace(CNN())
    result = named(gm, run_examples(gm, torch.randn(2, 3, 20, 20)))
    args, source = result["conv1"]
    assert source == "module.forward"
    assert (args["input"].value, args["input"].node, args["input"].default) == ("x", "x", False)

    args, source = result["conv2d"]
    assert source == "aten"
    assert list(args) == ["input", "weight", "bias", "stride", "padding", "dilation", "groups"]
    assert (args["stride"].value, args["stride"].default) == ("2", False)
    assert (args["padding"].value, args["padding"].default) == ("0", True)
    assert (args["bias"].value, args["bias"].default) == ("None", True)
    assert args["weight"].node == "w"

    args, source = result["relu"]
    assert source == "python"
    assert (args["inplace"].value, args["inplace"].default) == ("False", True)

    args, _ = result["max_pool2d_with_indices"]
    assert (args["return_indices"].value, args["return_indices"].default) == ("True", False)
    assert (args["kernel_size"].value, args["kernel_size"].default) == ("2", False)
    assert args["stride"].default and args["padding"].default

    args, source = result["max_pool2d"]
    assert source == "python"
    assert (args["return_indices"].value, args["return_indices"].default) == ("False", True)

    args, source = result["flatten"]
    assert source == "aten"
    assert (args["start_dim"].value, args["start_dim"].default) == ("1", False)
    assert (args["end_dim"].value, args["end_dim"].default) == ("-1", True)

    args, _ = result["getitem_2"]
    assert args["b"].value == "(:, :, :2, :2)"


@pytest.mark.parametrize("with_examples", [True, False], ids=["examples", "no-examples"])
def test_gpt_block_arguments(with_examples: bool) -> None:
    gm = trace(Block())
    examples = run_examples(gm, torch.randn(2, 16, 32)) if with_examples else {}
    result = named(gm, examples)

    args, source = result["attn_c_attn"]
    assert source == "module.forward" and args["input"].node == "ln_1"

    args, source = result["split"]
    assert source == "python"
    assert [(a.name, a.value, a.default) for a in args.values()] == [
        ("self", "attn_c_attn", False),
        ("split_size", "32", False),
        ("dim", "2", False),
    ]

    args, source = result["view"]
    assert source == "aten"
    assert args["size"].value == "[getitem, getitem_1, 4, floordiv]"
    assert args["self"].node == "getitem_3"

    args, _ = result["permute"]
    assert args["dims"].value == "[0, 2, 1, 3]"

    args, _ = result["transpose"]
    assert [(a.name, a.value) for a in args.values()] == [
        ("self", "view"),
        ("dim0", "1"),
        ("dim1", "2"),
    ]

    args, source = result["matmul"]  # the @ operator
    assert source == "python" and list(args) == ["a", "b"]

    args, source = result["matmul_1"]  # torch.matmul
    assert source == "aten" and list(args) == ["input", "other"]

    args, source = result["sqrt"]
    assert source == "python" and args["x"].node == "size_1"

    args, _ = result["masked_fill"]
    assert args["value"].value == "float('-inf')"
    assert args["mask"].node == "eq"

    args, source = result["softmax"]
    assert source == "python"
    assert (args["dim"].value, args["dim"].default) == ("-1", False)
    assert args["dtype"].default
    assert "_stacklevel" not in args

    args, source = result["scaled_dot_product_attention"]
    assert source == "aten"
    assert (args["is_causal"].value, args["is_causal"].default) == ("True", False)
    assert args["attn_mask"].default and args["dropout_p"].default
    assert args["scale"].kind == "keyword_only"

    args, _ = result["contiguous"]
    assert (args["memory_format"].value, args["memory_format"].default) == (
        "torch.contiguous_format",
        True,
    )

    args, source = result["layer_norm"]
    assert source == "python"
    assert (
        args["normalized_shape"].value == "(size_1,)" or args["normalized_shape"].default is False
    )
    assert (args["eps"].value, args["eps"].default) == ("1e-05", True)

    args, _ = result["add_1"]  # residual
    assert (args["a"].node, args["b"].node) == ("x", "attn_c_proj")


@pytest.mark.parametrize("with_examples", [True, False], ids=["examples", "no-examples"])
def test_misc_arguments(with_examples: bool) -> None:
    gm = trace(Misc())
    examples = run_examples(gm, torch.randn(4, 8)) if with_examples else {}
    result = named(gm, examples)

    args, source = result["add"]  # torch.add(x, x)
    assert source == "aten"
    assert [(a.name, a.value, a.default) for a in args.values()] == [
        ("input", "x", False),
        ("other", "x", False),
        ("alpha", "1", True),
    ]
    args, source = result["add_1"]  # torch.add(x, 1.0, alpha=2)
    assert source == "aten"
    assert (args["other"].value, args["other"].default) == ("1.0", False)
    assert (args["alpha"].value, args["alpha"].default) == ("2", False)

    args, source = result["getattr_1"]  # x.shape
    assert source == "python"
    assert [(a.name, a.value) for a in args.values()] == [("obj", "x"), ("name", "'shape'")]

    args, _ = result["size"]  # x.size(1)
    assert [(a.name, a.value) for a in args.values()] == [("self", "x"), ("dim", "1")]

    args, _ = result["cat"]
    assert (args["tensors"].value, args["dim"].value, args["dim"].default) == (
        "[add, add_1]",
        "1",
        False,
    )
    args, _ = result["stack"]
    assert (args["tensors"].value, args["dim"].default) == ("(add, add_1)", True)

    args, source = result["split"]
    assert source == "python"
    assert (args["split_size_or_sections"].value, args["dim"].value) == ("4", "1")

    args, source = result["chunk"]
    assert source == "aten"
    assert [(a.name, a.value) for a in args.values()] == [
        ("input", "cat"),
        ("chunks", "2"),
        ("dim", "1"),
    ]
    args, _ = result["chunk_1"]
    assert (args["dim"].value, args["dim"].default) == ("0", True)

    assert result["view"][0]["size"].value == "[2, -1]"
    assert result["permute"][0]["dims"].value == "[1, 0]"
    args, _ = result["expand"]
    assert args["size"].value == "[3, -1, -1]"
    assert "implicit" not in args
    assert result["repeat"][0]["repeats"].value == "[2, 1]"
    assert result["reshape"][0]["shape"].value == "[getitem, -1]"

    args, _ = result["to"]
    assert (args["dtype"].value, args["copy"].default) == ("torch.float16", True)
    assert result["new_zeros"][0]["size"].value == "(2, 3)"
    args, source = result["ones"]
    assert source == "aten" and args["size"].value == "[2, 3]"
    assert "out" not in args

    args, _ = result["sum_1"]
    assert (args["dim"].value, args["keepdim"].value, args["keepdim"].default) == (
        "1",
        "True",
        False,
    )
    assert result["float_1"][1] in ("aten", "approximate")

    args, source = result["scale_rows"]
    assert source == "python"
    assert [(a.name, a.value, a.default) for a in args.values()] == [
        ("x", "x", False),
        ("factor", "3.0", False),
        ("bias", "0.0", True),
    ]

    args, _ = result["getitem_6"]  # x[..., 0:2]
    assert args["b"].value == "(..., 0:2)"


def test_module_leaf_and_defaults() -> None:
    gm = trace(Encoder())
    layer_args, source = named_arguments(gm, call_nodes(gm)[0], {})
    assert source == "module.forward"
    assert [(a.name, a.default) for a in layer_args] == [
        ("src", False),
        ("src_mask", True),
        ("src_key_padding_mask", True),
        ("is_causal", True),
    ]

    gm = trace(ResBlock())
    result = named(gm, {})
    assert result["downsample_0"][0]["input"].node == "x"
    args, source = result["add"]  # out += self.downsample(x)
    assert source == "python" and args["b"].node == "downsample_1"


def test_varargs_parameter() -> None:
    class Star(nn.Module):
        def forward(self, *xs: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
            return xs[0] * scale

    class Root(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.star = Star()

        def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            return self.star(a, b)

    class StarLeaf(torch.fx.Tracer):
        def is_leaf_module(self, m: nn.Module, module_qualified_name: str) -> bool:
            return isinstance(m, Star) or super().is_leaf_module(m, module_qualified_name)

    tracer = StarLeaf()
    root = Root()
    gm = torch.fx.GraphModule(root, tracer.trace(root))
    args, source = named_arguments(gm, call_nodes(gm)[0], {})
    assert source == "module.forward"
    assert [(a.name, a.value, a.kind, a.default) for a in args] == [
        ("xs", "(a, b)", "var_positional", False),
        ("scale", "1.0", "keyword_only", True),
    ]


def test_non_call_nodes_have_no_arguments() -> None:
    gm = trace(CNN())
    for node in gm.graph.nodes:
        if node.op in ("placeholder", "output", "get_attr"):
            assert named_arguments(gm, node, {}) == ([], "none")


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (slice(None, 2), ":2"),
        (slice(0, 2), "0:2"),
        (slice(None), ":"),
        (slice(None, None, 2), "::2"),
        (Ellipsis, "..."),
        ((1,), "(1,)"),
        ([1, (2, 3)], "[1, (2, 3)]"),
        (torch.float32, "torch.float32"),
        (torch.channels_last, "torch.channels_last"),
        (torch.device("cpu"), "torch.device('cpu')"),
        (float("inf"), "float('inf')"),
        (None, "None"),
        ("mean", "'mean'"),
        (torch.Size([2, 3]), "torch.Size([2, 3])"),
        (1e-05, "1e-05"),
    ],
)
def test_format_value(value: Any, text: str) -> None:
    assert format_value(value) == text


def test_format_value_nodes() -> None:
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    t = graph.placeholder("seq")
    assert format_value(x) == "x"
    assert format_value((slice(None, t), [x, 1])) == "(:seq, [x, 1])"


def test_gpt_12_layer_coverage_and_speed() -> None:
    with torch.device("meta"):
        model = GPT(n_layer=12)
        idx = torch.zeros(2, 16, dtype=torch.long)
    gm = trace(model)
    examples = run_examples(gm, idx, idx)
    nodes = call_nodes(gm)
    start = time.perf_counter()
    results = [named_arguments(gm, node, examples) for node in nodes]
    elapsed = time.perf_counter() - start
    covered = sum(source != "none" for _, source in results)
    print(f"12-layer GPT: {covered}/{len(nodes)} call nodes named in {elapsed:.3f} s")
    assert len(nodes) > 400
    assert covered == len(nodes)
    for node, (args, source) in zip(nodes, results):
        check_complete(gm, node, args, source)
    args, source = results[[n.name for n in nodes].index("arange")]
    assert source == "aten"
    assert (by_name(args)["dtype"].value, by_name(args)["start"].value) == ("torch.int64", "0")
    args, source = results[[n.name for n in nodes].index("cross_entropy")]
    assert source == "python"
    assert (by_name(args)["ignore_index"].value, by_name(args)["ignore_index"].default) == (
        "-1",
        False,
    )
    assert by_name(args)["reduction"].default
    assert elapsed < 2.0
