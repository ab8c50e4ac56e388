"""run_capture in-process on fixture model files: spans, inputs, shapes vs eager, statuses."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

from fxls.analysis import parse
from fxls.engine.analyze import build_requests
from fxls.lsp.features.hover import class_markdown
from fxls.lsp.features.inlay_hints import shape_hints
from fxls.protocol.codec import from_dict, to_dict
from fxls.protocol.labels import strategy_label
from fxls.protocol.model import (
    CaptureJob,
    CaptureResult,
    ClassRequest,
    DimSpec,
    InputSpec,
    ModuleResult,
    NodeInfo,
    Span,
)
from fxls.worker.capture.pipeline import run_capture

FIXTURES = Path(__file__).parents[2] / "fixtures" / "capture"


DECLARE = "../rewrites/declare_before.py"
"""The code-action tests' model whose ``timestep`` is left at ``None`` (as Flux's)."""


def _text(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def _line_of(text: str, needle: str, start: int = 1) -> int:
    for number, line in enumerate(text.splitlines(), start=1):
        if number >= start and needle in line:
            return number
    raise AssertionError(f"{needle!r} not in fixture")


def _span_of(text: str, needle: str, after: str | None = None) -> Span:
    """Expected span (code point columns) of ``needle`` on its first line (after ``after``)."""
    start = _line_of(text, after) if after else 1
    line = _line_of(text, needle, start)
    col = text.splitlines()[line - 1].index(needle)
    return Span(line, col, line, col + len(needle))


def _request(text: str, name: str, **kwargs: object) -> ClassRequest:
    return ClassRequest(name=name, line=_line_of(text, f"class {name}"), **kwargs)  # type: ignore[arg-type]


def _capture(fixture: str, *requests: ClassRequest, **job_kwargs: object) -> CaptureResult:
    path = str(FIXTURES / fixture)
    phases: list[tuple[str, str | None]] = []
    job = CaptureJob(path=path, source=_text(fixture), classes=list(requests), **job_kwargs)  # type: ignore[arg-type]
    result = run_capture(job, lambda phase, cls: phases.append((phase, cls)))
    assert phases[0] == ("import", None)
    # the result must survive the wire
    assert from_dict(CaptureResult, to_dict(result)) == result
    return result


def _traced(fixture: str, name: str) -> ModuleResult:
    """The fixture's class ``name``, captured alone, which must have traced."""
    (mod,) = _capture(fixture, _request(_text(fixture), name)).modules
    assert mod.status == "traced", (mod.status, mod.diagnostics)
    return mod


def _input_shapes(mod: ModuleResult) -> list[tuple[str, list[int | str] | None]]:
    return [(i.name, i.value.shape) for i in mod.inputs]


def _load(fixture: str) -> ModuleType:
    """Import the fixture for real, to run it eagerly."""
    name = f"fxls_fixture_{fixture.removesuffix('.py')}"
    spec = importlib.util.spec_from_file_location(name, FIXTURES / fixture)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _node(mod: ModuleResult, name: str) -> NodeInfo:
    return next(n for n in mod.nodes if n.name == name)


def _concrete(shape: list[int | str], sizes: dict[str, int]) -> list[int]:
    return [sizes[d] if isinstance(d, str) else d for d in shape]


def _codes(mod: ModuleResult) -> list[str]:
    return [d.code for d in mod.diagnostics]


def _of_source(name: str, source: str, *requests: ClassRequest) -> list[ModuleResult]:
    """The modules of ``requests`` captured from ``source`` (a file ``/virtual/{name}``)."""
    job = CaptureJob(path=f"/virtual/{name}", source=source, classes=list(requests))
    return run_capture(job, lambda *_: None).modules


_BTC8 = InputSpec("x", dims=[DimSpec("B"), DimSpec("T"), DimSpec(None, 8)])


# ---------------------------------------------------------------------------------------


def test_small_cnn_spans_targets_and_shapes_match_eager() -> None:
    text = _text("cnn.py")
    result = _capture("cnn.py", _request(text, "SmallCNN"))
    assert result.error is None
    (mod,) = result.modules
    assert mod.status == "traced" and strategy_label(mod.strategy) == "fx" and mod.build == "meta"
    assert mod.params == sum(p.numel() for p in _load("cnn.py").SmallCNN().parameters())

    conv1 = _node(mod, "conv1")
    assert conv1.op == "call_module" and conv1.target == "conv1"
    assert conv1.span == _span_of(text, "self.conv1(x)")
    assert conv1.call_site == conv1.span
    assert conv1.module_type is not None and conv1.module_type.startswith(
        "Conv2d(3, 16, kernel_size=(3, 3)"
    )
    assert conv1.module_path == "" and conv1.users == 1
    relu = _node(mod, "relu")
    assert relu.target == "torch.nn.functional.relu"
    assert relu.span == _span_of(text, "F.relu(self.bn1(self.conv1(x)))")
    # named arguments for every call
    assert [a.name for a in relu.args][:1] == ["input"] and relu.args[0].node == "bn1"
    assert relu.signature is not None
    assert _node(mod, "flatten").target == "flatten"
    assert _node(mod, "flatten").op == "call_method"

    # non-ASCII text before the call: code point columns, not UTF-8 bytes
    conv2 = _node(mod, "conv2")
    assert conv2.span == _span_of(text, "self.conv2(x)")
    line = text.splitlines()[conv2.span.line - 1]
    assert line[conv2.span.col : conv2.span.end_col] == "self.conv2(x)"
    assert len(line.encode()) != len(line)

    # placeholder and output spans come from the AST of forward
    assert _node(mod, "x").span == _span_of(text, "x", after="def forward")
    out = _node(mod, "output")
    assert (
        out.span is not None and text.splitlines()[out.span.line - 1].strip() == "return self.fc(y)"
    )

    # inferred input: batch symbolic, channels from conv1, marked assumed (FX405)
    assert [i.name for i in mod.inputs] == ["x"] and [i.assumed for i in mod.inputs] == [True]
    assert mod.inputs[0].value.shape == ["B", 3, 224, 224]
    fx405 = [d for d in mod.diagnostics if d.code == "FX405"]
    assert len(fx405) == 1 and fx405[0].severity == "information" and "conv1" in fx405[0].message

    # output shapes equal eager execution with the same concrete sizes
    net = _load("cnn.py").SmallCNN().eval()
    sizes = {"B": 2}
    x = torch.randn(_concrete(mod.inputs[0].value.shape or [], sizes))
    with torch.no_grad():
        eager = net(x)
    assert _concrete(mod.outputs[0].shape or [], sizes) == list(eager.shape)
    assert mod.outputs[0].dtype == "float32"
    assert {"build", "trace", "shapes"} <= set(mod.timings)


def test_resnet_traces_through_blocks_and_downsample() -> None:
    text = _text("resnet.py")
    result = _capture("resnet.py", _request(text, "ResNet"), _request(text, "BasicBlock"))
    resnet, block = result.modules
    assert resnet.status == "traced"
    # a node written inside BasicBlock.forward: span there, call site in ResNet.forward
    conv = _node(resnet, "layer1_0_conv1")
    assert conv.span == _span_of(text, "self.conv1(x)", after="class BasicBlock")
    assert conv.call_site == _span_of(text, "self.layer1(x)", after="class ResNet")
    assert conv.module_path == "layer1.0"
    down = _node(resnet, "layer2_0_downsample_0")
    assert down.span == _span_of(text, "self.downsample(x)")
    assert down.module_type is not None and down.module_type.startswith("Conv2d(16, 32")
    # same concrete sizes as eager
    net = _load("resnet.py").ResNet().eval()
    x = torch.randn(_concrete(resnet.inputs[0].value.shape or [], {"B": 2}))
    with torch.no_grad():
        assert _concrete(resnet.outputs[0].shape or [], {"B": 2}) == list(net(x).shape)
    # BasicBlock needs constructor arguments: it is captured from the instance ResNet builds
    # and calls first, with the inputs it receives there (in ResNet's dimension names)
    assert block.status == "traced" and block.constructed is not None
    assert block.constructed.source == "parent" and block.constructed.text == "ResNet.layer1.0"
    assert block.constructed.inputs_from == "ResNet"
    layer1 = _node(resnet, "layer1_0_conv1")
    first = _node(block, "conv1")
    assert first.outputs == layer1.outputs
    assert not [d for d in block.diagnostics if d.severity in ("error", "warning")]


@pytest.mark.parametrize("fixture, cls", [("resnet.py", "ResNet"), ("gpt.py", "Block")])
def test_shape_rules_read_tensors_without_the_runs_device_mode(
    fixture: str, cls: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run's propagation is inside ``with torch.device(...)`` (the user's ``torch.zeros(n)``
    lands on the run's device); the shape rules of its layers and operators, its memo keys and
    its check of a copied block's inputs read shapes, strides and dtypes around that mode
    (about 2 µs a read through it), and the results stay those of the real kernels (the other
    tests)."""
    from torch.utils._device import DeviceContext

    callers: list[tuple[str, str]] = []
    handler = DeviceContext.__torch_function__

    def counted(self: Any, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        code = sys._getframe(1).f_code
        callers.append((Path(code.co_filename).name, code.co_name))
        return handler(self, func, types, args, kwargs)

    monkeypatch.setattr(DeviceContext, "__torch_function__", counted)
    text = _text(fixture)
    (mod,) = _capture(fixture, _request(text, cls)).modules
    assert mod.status == "traced" and mod.nodes
    assert callers, "the run is inside the device mode"
    # (the shortcut mode hands the operators it does not answer on: those are runs)
    rules = ("shortcuts.py", "elementwise.py")
    through = [c for c in callers if c[0] in rules and c[1] != "__torch_function__"]
    through += [c for c in callers if c[1] in ("_signature", "_memo_key", "_same_inputs")]
    assert not through


def test_gpt_block_named_dims_buffer_slicing_and_init_text() -> None:
    text = _text("gpt.py")
    req = _request(
        text,
        "Block",
        init="n_embd=32, n_head=4, block_size=16",
        inputs=[InputSpec("x", dims=[DimSpec("B"), DimSpec("T", 8), DimSpec(None, 32)])],
    )
    (mod,) = _capture("gpt.py", req).modules
    assert mod.status == "traced", mod.diagnostics
    assert [i.assumed for i in mod.inputs] == [False]
    assert mod.inputs[0].value.shape == ["B", "T", 32]
    assert not [d for d in mod.diagnostics if d.severity == "error"]
    # the causal-mask buffer is a graph value, sliced at the user's line
    getattr_nodes = [n for n in mod.nodes if n.op == "get_attr" and n.target == "attn.bias"]
    assert getattr_nodes and getattr_nodes[0].span == _span_of(text, "self.bias")
    softmax = next(n for n in mod.nodes if n.target == "torch.nn.functional.softmax")
    assert softmax.span == _span_of(text, "F.softmax(att, dim=-1)")
    assert softmax.call_site == _span_of(text, "self.attn(self.ln_1(x))")
    assert softmax.outputs[0].shape == ["B", 4, "T", "T"]
    assert mod.outputs[0].shape == ["B", "T", 32]
    # eager with the example sizes (B=2 by default, T as given)
    block = _load("gpt.py").Block(n_embd=32, n_head=4, block_size=16).eval()
    with torch.no_grad():
        eager = block(torch.randn(2, 8, 32))
    assert _concrete(mod.outputs[0].shape or [], {"B": 2, "T": 8}) == list(eager.shape)


def test_expression_inputs_and_flag_defaults() -> None:
    source = (
        "import torch\nimport torch.nn as nn\n\n\n"
        "class Masked(nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n        self.fc = nn.Linear(5, 3)\n\n"
        "    def forward(self, x, scale, mask=None, relu=True):\n"
        "        y = self.fc(x) * scale\n"
        "        if mask is not None:\n            y = y * mask\n"
        "        return torch.relu(y) if relu else y\n"
    )
    req = ClassRequest(
        "Masked",
        5,
        inputs=[
            InputSpec("x", kind="expr", expr="torch.randn(4, 7, 5)"),
            InputSpec("scale", kind="expr", expr="2.0"),
        ],
    )
    result = run_capture(
        CaptureJob(path="/virtual/masked.py", source=source, classes=[req]), lambda *_: None
    )
    (mod,) = result.modules
    # `if relu` fails plain FX; the flags are fixed to their defaults (concrete_args) and the
    # failure stays visible where it happened
    assert mod.status == "traced" and strategy_label(mod.strategy) == "fx+concrete"
    # ... as a warning: the module works and fxls still shows its shapes
    assert [d.code for d in mod.diagnostics if d.severity == "information"] == ["FX101"]
    assert not [d for d in mod.diagnostics if d.severity == "error"]
    assert [i.name for i in mod.inputs] == ["x", "scale", "mask", "relu"]
    assert mod.inputs[0].value.shape == [4, 7, 5] and mod.inputs[1].value.text == "2.0"
    assert mod.inputs[2].value.kind == "none" and mod.inputs[3].value.text == "True"
    assert mod.outputs[0].shape == [4, 7, 3]
    assert [n.target for n in mod.nodes if n.op == "call_function"].count("torch.relu") == 1


def test_cpu_fallback_when_init_needs_real_values() -> None:
    text = _text("build_cases.py")
    (mod,) = _capture("build_cases.py", _request(text, "NeedsValues")).modules
    assert mod.build == "cpu" and mod.status == "traced"
    assert "FX406" in _codes(mod)
    assert mod.outputs[0].shape == ["B", 4]


def test_build_failures_do_not_hide_other_classes() -> None:
    text = _text("build_cases.py")
    result = _capture(
        "build_cases.py",
        _request(text, "NeedsArgs"),
        _request(text, "ExitsInInit"),
        _request(text, "Recurses"),
        _request(text, "Plain"),
        _request(text, "NeedsArgs", init="dim=4, heads=2"),
        _request(text, "NeedsCheckpoint"),
        _request(text, "NeedsCheckpoint", init="'model.pt'"),
    )
    needs_args, exits, recurses, plain, with_init, checkpoint, checkpoint_init = result.modules
    # required arguments nothing in the file gives: built with labelled assumptions
    assert needs_args.status == "traced" and needs_args.constructed is not None
    assert needs_args.constructed.source == "assumed"
    assert needs_args.constructed.assumed == {"dim": "64", "heads": "4"}
    (fx408,) = [d for d in needs_args.diagnostics if d.code == "FX408"]
    assert fx408.severity == "information" and fx408.data["init"] == "dim=64, heads=4"
    assert fx408.fix is not None and "# fxls: init(dim=64, heads=4)" in fx408.fix
    # what cannot be built even so: information, at the class name, with an init example
    assert checkpoint.status == "failed" and checkpoint.error is not None
    (fx401,) = [d for d in checkpoint.diagnostics if d.code == "FX401"]
    assert fx401.severity == "information"
    assert fx401.span == _span_of(text, "NeedsCheckpoint", after="class NeedsCheckpoint")
    assert fx401.fix is not None and "init(checkpoint=...)" in fx401.fix
    # ... but arguments the user wrote that fail are an error
    (fx401_init,) = [d for d in checkpoint_init.diagnostics if d.code == "FX401"]
    assert fx401_init.severity == "error"
    assert (
        exits.error is not None
        and exits.error.kind == "system_exit"
        and exits.error.phase == "init"
    )
    assert recurses.error is not None and recurses.error.kind == "recursion"
    assert recurses.error.phase == "trace"
    assert plain.status == "skipped"
    assert with_init.status == "traced" and with_init.outputs[0].shape == ["B", 8]


def test_unused_computation_hint() -> None:
    text = _text("unused.py")
    (mod,) = _capture("unused.py", _request(text, "WithUnused")).modules
    hints = [d for d in mod.diagnostics if d.code == "FX302"]
    assert [h.span for h in hints] == [_span_of(text, "self.fc2(x).relu()")]
    assert hints[0].severity == "hint"
    assert "FX301" not in _codes(mod)


def test_calls_that_work_in_place_are_not_unused() -> None:
    text = _text("unused.py")
    spec = InputSpec("x", dims=[DimSpec("B"), DimSpec(None, 6)])
    (mod,) = _capture("unused.py", _request(text, "InPlace", inputs=[spec])).modules
    assert mod.status == "traced", mod.error
    in_place = {"mul_", "relu_", "relu", "act", "add", "zero_"}
    assert in_place <= {n.target.rsplit(".", 1)[-1] for n in mod.nodes}
    hints = [d for d in mod.diagnostics if d.code == "FX302"]
    assert [h.span for h in hints] == [_span_of(text, "h + 1", after="class InPlace")]


def test_leaf_classes_are_not_traced_into() -> None:
    text = _text("gpt.py")
    req = _request(
        text,
        "Block",
        leaf=["CausalSelfAttention"],
        inputs=[InputSpec("x", dims=[DimSpec("B"), DimSpec("T"), DimSpec(None, 32)])],
    )
    (mod,) = _capture("gpt.py", req).modules
    assert strategy_label(mod.strategy) == "fx+leaf"
    attn = _node(mod, "attn")
    assert attn.op == "call_module" and attn.span == _span_of(text, "self.attn(self.ln_1(x))")
    assert not any(n.target == "torch.nn.functional.softmax" for n in mod.nodes)


def test_shape_error_at_the_failing_call() -> None:
    source = (
        "import torch.nn as nn\n\n"
        "class Inner(nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n        self.fc = nn.Linear(8, 4)\n\n"
        "    def forward(self, h):\n        return self.fc(h)\n\n"
        "class Outer(nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n        self.inner = Inner()\n\n"
        "    def forward(self, x):\n        y = x.relu()\n        return self.inner(y)\n"
    )
    spec = InputSpec("x", dims=[DimSpec("B"), DimSpec(None, 16)])
    job = CaptureJob(
        path="/virtual/shape.py", source=source, classes=[ClassRequest("Outer", 11, inputs=[spec])]
    )
    (mod,) = run_capture(job, lambda *_: None).modules
    assert mod.status == "partial"
    (diag,) = [d for d in mod.diagnostics if d.severity == "error"]
    assert diag.code == "FX201" and diag.data["node"] == "inner_fc"
    assert diag.span == Span(9, 15, 9, 25)
    assert diag.related[0].span == Span(18, 15, 18, 28)
    # values before the failing node are kept
    assert _node(mod, "relu").outputs[0].shape == ["B", 16]


def test_attributes_assigned_while_tracing_hold_tensors_afterwards() -> None:
    """``self.mask = self.mask.to(x.dtype)`` stores a Proxy while FX traces; the graph module
    made from the trace reads the tensor again, so the layer that takes the mask runs."""
    source = (
        "import torch\nimport torch.nn as nn\n\n"
        "class CachesMask(nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n"
        "        self.attn = nn.MultiheadAttention(8, 2)\n"
        "        self.mask = torch.zeros(4, 4)\n\n"
        "    def forward(self, x):\n"
        "        self.mask = self.mask.to(dtype=x.dtype)\n"
        "        return self.attn(x, x, x, need_weights=False, attn_mask=self.mask)[0]\n"
    )
    spec = InputSpec("x", dims=[DimSpec(None, 4), DimSpec("B"), DimSpec(None, 8)])
    job = CaptureJob(
        path="/virtual/mask.py",
        source=source,
        classes=[ClassRequest("CachesMask", 4, inputs=[spec])],
    )
    (mod,) = run_capture(job, lambda *_: None).modules
    assert mod.status == "traced" and strategy_label(mod.strategy) == "fx", mod.diagnostics
    assert not [d for d in mod.diagnostics if d.code == "FX201"]
    assert mod.outputs[0].shape == [4, "B", 8]


def test_what_forward_puts_into_a_dict_of_its_module_is_gone_after_each_trace() -> None:
    """LeViT's attention caches its bias per device in a dict of its own
    (``self.attention_bias_cache[str(x.device)] = ...``) when not training. The parent's trace
    left a proxy there, and the block's own trace of the same instance read it: FX301 "does
    not belong to this Graph" on the block and every parent captured after it."""
    source = (
        "import torch\nimport torch.nn as nn\n\n"
        "class CachedBias(nn.Module):\n"
        "    def __init__(self, width=16):\n        super().__init__()\n"
        "        self.bias = nn.Parameter(torch.zeros(width))\n"
        "        self.cache = {}\n\n"
        "    def forward(self, x):\n"
        "        key = str(x.device)\n"
        "        if key not in self.cache:\n"
        "            self.cache[key] = self.bias * 2\n"
        "        return x + self.cache[key]\n\n"
        "class Residual(nn.Module):\n"
        "    def __init__(self, block):\n        super().__init__()\n"
        "        self.block = block\n\n"
        "    def forward(self, x):\n"
        "        return x + self.block(x)\n\n"
        "class Net(nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n"
        "        self.layer = Residual(self.block())\n\n"
        "    def block(self):\n"
        "        return CachedBias()\n\n"
        "    def forward(self, x):\n"
        "        return self.layer(x)\n"
    )
    mods = {
        m.name: m for m in _of_source("cached.py", source, *build_requests(parse(source).classes))
    }
    for name in ("Net", "Residual", "CachedBias"):
        mod = mods[name]
        assert mod.status == "traced", (name, mod.diagnostics)
        assert not [d for d in mod.diagnostics if d.code in ("FX301", "FX201")], name
        assert mod.outputs[0].shape == mods["Net"].inputs[0].value.shape, name
        assert mod.outputs[0].shape[-1] == 16, name


def test_a_tensor_forward_replaces_in_a_dict_of_its_module_is_put_back() -> None:
    """``self.cache["scale"] = self.cache["scale"].to(x.dtype)`` puts a proxy in the dict
    while tracing: the runs after the trace get the tensor again (a run that got the proxy
    reported FX109, "running `forward` gives Proxy"), and putting it back compares nothing
    (comparing the proxy with the tensor would be traced)."""
    source = (
        "import torch\nimport torch.nn as nn\n\n"
        "class Scaled(nn.Module):\n"
        "    def __init__(self, width=16):\n        super().__init__()\n"
        "        self.proj = nn.Linear(width, width)\n"
        '        self.cache = {"scale": torch.ones(width)}\n\n'
        "    def forward(self, x):\n"
        '        self.cache["scale"] = self.cache["scale"].to(x.dtype)\n'
        '        return self.proj(x) * self.cache["scale"]\n'
    )
    (mod,) = _of_source("scaled.py", source, ClassRequest("Scaled", 4))
    assert mod.status == "traced", mod.diagnostics
    assert [d.code for d in mod.diagnostics] == ["FX405"]
    assert mod.outputs[0].shape == mod.inputs[0].value.shape


def test_an_assumed_sequence_takes_the_length_a_shape_error_names() -> None:
    """Token ids are assumed ``(B, T)``; a positional table of 16 rows added to them fails at
    the assumed length, so ``T`` is tried at 16, the size the error names."""
    source = (
        "import torch\nimport torch.nn as nn\n\n"
        "class Tokens(nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n"
        "        self.emb = nn.Embedding(100, 8)\n"
        "        self.pos = nn.Parameter(torch.zeros(16, 8))\n\n"
        "    def forward(self, idx):\n"
        "        return self.emb(idx) + self.pos\n"
    )
    job = CaptureJob(path="/virtual/tokens.py", source=source, classes=[ClassRequest("Tokens", 4)])
    (mod,) = run_capture(job, lambda *_: None).modules
    assert not [d for d in mod.diagnostics if d.code == "FX201"], mod.diagnostics
    assert mod.inputs[0].value.shape == ["B", "T"] and mod.outputs[0].shape == ["B", 16, 8]
    assert any("T = 16" in note for note in mod.notes), mod.notes


def test_sizes_a_shape_error_names_become_alternatives_of_assumed_inputs() -> None:
    from fxls.worker.capture.build.inputs import (
        MAX_NAMED_SIZES,
        PlannedInput,
        alternatives,
        sizes_named_by,
    )

    error = "The size of tensor a (T) must match the size of tensor b (16) at dimension 1"
    assert sizes_named_by(error) == [16]
    many = " ".join(f"({n})" for n in range(1, 50))
    assert sizes_named_by(many) == [2, 3, 4, 5, 6][:MAX_NAMED_SIZES]
    tokens = PlannedInput("idx", "tensor", [("B", 2), ("T", 5)], torch.int64, assumed=True)
    # sequence-first first, then T at the named size; the batch is never resized
    assert [p.dims for p in alternatives(tokens, [16])] == [
        [("T", 5), ("B", 2)],
        [("B", 2), ("T", 16)],
    ]
    declared = PlannedInput("idx", "tensor", [("B", 2), ("T", 5)], torch.int64)
    assert alternatives(declared, [16]) == []


def test_a_class_that_cannot_be_built_alone_is_captured_as_its_parent_builds_it() -> None:
    """``Stack(layer, n)`` takes a layer object fxls cannot guess, and ``Parent.forward``'s
    input is unknown, so no call records it: the instance ``Parent.__init__`` built is used,
    with inputs inferred from its first layer."""
    source = (
        "import copy\nimport torch.nn as nn\n\n"
        "class Stack(nn.Module):\n"
        "    def __init__(self, layer, n):\n        super().__init__()\n"
        "        self.layers = nn.ModuleList([copy.deepcopy(layer) for _ in range(n)])\n\n"
        "    def forward(self, x):\n"
        "        for layer in self.layers:\n            x = layer(x)\n        return x\n\n"
        "class Parent(nn.Module):\n"
        "    def __init__(self, width=8):\n        super().__init__()\n"
        "        layer = nn.Linear(width, width)\n"
        "        self.stack = Stack(layer, 2)\n\n"
        "    def forward(self, feats):\n"
        "        return self.stack(feats.flatten(2).permute(2, 0, 1))\n"
    )
    requests = [ClassRequest("Stack", 4), ClassRequest("Parent", 14)]
    job = CaptureJob(path="/virtual/stack.py", source=source, classes=requests)
    stack, parent = run_capture(job, lambda *_: None).modules
    assert "FX402" in _codes(parent)
    assert "FX401" not in _codes(stack), stack.diagnostics
    built = stack.constructed
    assert built is not None and (built.source, built.text) == ("parent", "Parent.stack")
    assert built.inputs_from is None  # built by the parent, not called by it
    assert stack.inputs[0].value.shape == ["B", 8] and stack.outputs[0].shape == ["B", 8]
    assert "built by Parent.__init__ as Parent.stack" in class_markdown(stack)


def test_unknown_inputs_give_fx402() -> None:
    source = (
        "import torch.nn as nn\n\n"
        "class Id(nn.Module):\n    def forward(self, x):\n        return x.relu()\n"
    )
    result = run_capture(
        CaptureJob(path="/virtual/id.py", source=source, classes=[ClassRequest("Id", 3)]),
        lambda *_: None,
    )
    (mod,) = result.modules
    assert mod.status == "partial"
    (fx402,) = [d for d in mod.diagnostics if d.code == "FX402"]
    assert fx402.span == Span(4, 22, 4, 23)
    assert _node(mod, "relu").span == Span(5, 15, 5, 23)


def test_import_failure_reports_fx404_at_the_users_line() -> None:
    source = "import torch\n\nx = 1\nraise ValueError('boom')\n"
    result = run_capture(CaptureJob(path="/virtual/bad.py", source=source), lambda *_: None)
    assert result.error is not None and result.error.phase == "import"
    (diag,) = result.diagnostics
    assert diag.code == "FX404" and diag.span.line == 4 and "ValueError" in diag.message

    exits = run_capture(
        CaptureJob(path="/virtual/exit.py", source="import sys\nsys.exit(2)\n"), lambda *_: None
    )
    assert exits.error is not None and exits.error.kind == "system_exit"
    assert exits.diagnostics[0].span.line == 2

    syntax = run_capture(
        CaptureJob(path="/virtual/syn.py", source="def f(:\n  pass\n"), lambda *_: None
    )
    assert syntax.diagnostics[0].code == "FX404" and syntax.diagnostics[0].span.line == 1


def test_document_name_is_not_main() -> None:
    source = (
        "import torch.nn as nn\n"
        "if __name__ == '__main__':\n    raise SystemExit('ran as a script')\n"
        "class A(nn.Module):\n    def forward(self, x):\n        return x\n"
    )
    result = run_capture(CaptureJob(path="/virtual/a.py", source=source), lambda *_: None)
    assert result.error is None


@pytest.mark.slow
def test_llama_size_model_costs_no_real_memory() -> None:
    source = (
        "import torch.nn as nn\n\n"
        "class Big(nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n"
        "        self.emb = nn.Embedding(32000, 4096)\n"
        "        self.layers = nn.Sequential(*[nn.Linear(4096, 4096) for _ in range(32)])\n"
        "    def forward(self, ids):\n        return self.layers(self.emb(ids))\n"
    )
    result = run_capture(
        CaptureJob(path="/virtual/big.py", source=source, classes=[ClassRequest("Big", 3)]),
        lambda *_: None,
    )
    (mod,) = result.modules
    assert mod.build == "meta" and mod.params is not None and mod.params > 500_000_000
    assert mod.inputs[0].value.shape == ["B", "T"] and mod.inputs[0].value.dtype == "int64"
    assert mod.outputs[0].shape == ["B", "T", 4096]


def test_declared_input_without_a_parameter_gives_fx403() -> None:
    source = (
        "import torch.nn as nn\n\n"
        "# fxls: y = (B, 3)\n"
        "class Lin(nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n        self.fc = nn.Linear(3, 2)\n\n"
        "    def forward(self, x):\n        return self.fc(x)\n"
    )
    spec = InputSpec("y", dims=[DimSpec("B"), DimSpec(None, 3)], line=3)
    job = CaptureJob(
        path="/virtual/lin.py", source=source, classes=[ClassRequest("Lin", 4, inputs=[spec])]
    )
    (mod,) = run_capture(job, lambda *_: None).modules
    (fx403,) = [d for d in mod.diagnostics if d.code == "FX403"]
    assert fx403.span == Span(3, 0, 3, len("# fxls: y = (B, 3)"))
    # x is still inferred from the first layer
    assert mod.status == "traced" and [i.assumed for i in mod.inputs] == [True]
    assert mod.outputs[0].shape == ["B", 2]


def test_multi_line_call_span() -> None:
    source = (
        "import torch.nn as nn\n\n"
        "class Lin(nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n        self.fc = nn.Linear(3, 2)\n\n"
        "    def forward(self, x):\n"
        "        y = self.fc(\n"
        "            x\n"
        "        )\n"
        "        return y\n"
    )
    job = CaptureJob(path="/virtual/ml.py", source=source, classes=[ClassRequest("Lin", 3)])
    (mod,) = run_capture(job, lambda *_: None).modules
    assert _node(mod, "fc").span == Span(9, 12, 11, 9)


def test_meta_builds_skip_initializers_and_masks_with_the_same_tensors() -> None:
    # build._MetaBuild answers initializers and tril/triu of meta tensors itself: every
    # parameter and buffer must come out as the kernels make them (shape, dtype, strides)
    from torch import nn

    from fxls.worker.capture.build.instances import _MetaBuild

    class Masked(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(8, 4)
            self.norm = nn.LayerNorm(4)
            self.emb = nn.Embedding(10, 4)
            nn.init.trunc_normal_(self.emb.weight, std=0.02)
            nn.init.zeros_(self.fc.bias)
            self.register_buffer("causal", torch.tril(torch.ones(6, 6)).view(1, 1, 6, 6))
            self.register_buffer("upper", torch.ones(3, 5, dtype=torch.bool).triu(1))
            self.scale = nn.Parameter(torch.empty(2, 3, dtype=torch.float16).t().normal_())

    def tensors(
        module: nn.Module,
    ) -> list[tuple[str, tuple[int, ...], torch.dtype, tuple[int, ...], str]]:
        return [
            (name, tuple(t.shape), t.dtype, t.stride(), t.device.type)
            for name, t in [*module.named_parameters(), *module.named_buffers()]
        ]

    with torch.device("meta"):
        plain = Masked()
    assert torch.get_default_device().type == "cpu"
    with _MetaBuild():  # the meta device as the default device, as torch.device("meta")
        assert torch.get_default_device().type == "meta"
        fast = Masked()
        # a tensor made from values on the device it names is real: its values are written
        data = torch.tensor([0.0, 0.0], device="cpu").fill_(1.0)
        named = torch.zeros(2, device="cpu")
    assert torch.get_default_device().type == "cpu"
    assert tensors(fast) == tensors(plain)
    assert all(t.is_meta for t in fast.parameters())
    assert type(fast.scale) is nn.Parameter
    assert data.device.type == "cpu" and data.tolist() == [1.0, 1.0]
    assert named.is_meta


def test_meta_builds_answer_the_initializers_that_hand_themselves_to_the_mode() -> None:
    # nn.init.normal_/uniform_/constant_ pass themselves to a torch function mode; inside its
    # handler the mode is off, so writing the values would run the meta kernels (the slow
    # part of a transformers head's build): _MetaBuild answers them with their tensor
    from torch import nn
    from torch.utils._python_dispatch import TorchDispatchMode

    from fxls.worker.capture.build.instances import _MetaBuild

    class Counting(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.ops: list[str] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            self.ops.append(str(func))
            return func(*args, **(kwargs or {}))

    class Inited(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.empty(16, 8))
            self.b = nn.Parameter(torch.empty(16))
            self.g = nn.Parameter(torch.empty(4, 4))
            self.same = nn.init.normal_(self.w, std=0.02) is self.w
            nn.init.uniform_(self.g, -0.1, 0.1)
            nn.init.constant_(self.b, 1.0)

    with torch.device("meta"):
        plain = Inited()
    with Counting() as counting, _MetaBuild():
        fast = Inited()
    written = [op for op in counting.ops if op.split(".")[1].rstrip("_") in
               ("normal", "uniform", "fill")]  # fmt: skip
    assert written == []
    assert fast.same
    assert [(n, p.shape, p.dtype, p.device.type) for n, p in fast.named_parameters()] == [
        (n, p.shape, p.dtype, p.device.type) for n, p in plain.named_parameters()
    ]
    with Counting() as counting, torch.device("meta"):  # torch's own path runs the kernels
        Inited()
    assert any("normal" in op for op in counting.ops)


@pytest.mark.filterwarnings("ignore::UserWarning")  # torch on some of its layers
def test_meta_builds_skip_torch_layer_resets_with_the_same_tensors() -> None:
    # build._values_unwritten skips reset_parameters of torch's own layers on the meta
    # device: every parameter and buffer must come out as with the resets, a user's own
    # reset_parameters still runs, and torch's methods are back afterwards
    from torch import nn

    from fxls.worker.capture.build.instances import _MetaBuild, _values_unwritten

    class Own(nn.Linear):
        def reset_parameters(self) -> None:
            super().reset_parameters()
            self.register_buffer("seen", torch.zeros(3))

    class Layers(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.parts = nn.ModuleList([
                nn.Linear(8, 4), nn.Bilinear(3, 4, 5), nn.Conv2d(3, 8, 3), nn.Conv1d(2, 4, 5),
                nn.ConvTranspose2d(4, 2, 3), nn.BatchNorm2d(8), nn.InstanceNorm1d(4, affine=True),
                nn.LayerNorm(4), nn.GroupNorm(2, 8), nn.RMSNorm(4), nn.Embedding(10, 4, padding_idx=0),
                nn.EmbeddingBag(10, 4), nn.MultiheadAttention(8, 2), nn.LSTM(4, 6, 2),
                nn.GRUCell(4, 6), nn.PReLU(3), nn.Transformer(8, 2, 1, 1, 16),
                nn.AdaptiveLogSoftmaxWithLoss(8, 20, [5, 10]), Own(2, 3),
            ])  # fmt: skip

    def tensors(module: nn.Module) -> list[tuple[object, ...]]:
        return [
            (name, type(t), tuple(t.shape), t.dtype, t.stride(), t.device.type, t.requires_grad)
            for name, t in [*module.named_parameters(), *module.named_buffers()]
        ]

    before = nn.Linear.reset_parameters
    with torch.device("meta"), _MetaBuild():
        plain = Layers()
    with torch.device("meta"), _MetaBuild(), _values_unwritten():
        assert nn.Linear.reset_parameters is not before
        fast = Layers()
    assert tensors(fast) == tensors(plain)
    assert "parts.18.seen" in dict(fast.named_buffers())
    assert nn.Linear.reset_parameters is before
    assert nn.Conv2d(3, 8, 3).weight.detach().abs().sum() > 0  # real values again

    def replaced(self: nn.Module) -> None:
        self.register_buffer("replaced", torch.zeros(1))

    original = nn.LayerNorm.reset_parameters
    nn.LayerNorm.reset_parameters = replaced  # type: ignore[method-assign]
    try:
        with torch.device("meta"), _values_unwritten():
            assert "replaced" in dict(nn.LayerNorm(4).named_buffers())
        assert nn.LayerNorm.reset_parameters is replaced
    finally:
        nn.LayerNorm.reset_parameters = original  # type: ignore[method-assign]


def test_each_input_says_where_it_came_from() -> None:
    # declared by a directive, recorded from the parent's call, the parameter's default, or
    # assumed (FX405): what the class hover shows after each input
    from fxls.analysis import parse
    from fxls.engine.analyze import build_requests
    from fxls.lsp.features.hover import class_markdown

    source = (
        "import torch\nfrom torch import nn\n\n\n"
        "class Inner(nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n        self.fc = nn.Linear(16, 4)\n\n"
        "    def forward(self, x, mask=None):\n        return self.fc(x)\n\n\n"
        "# fxls: x = (B, 16)\n"
        "class Outer(nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n        self.inner = Inner()\n\n"
        "    def forward(self, x):\n        return self.inner(x.relu())\n\n\n"
        "class Alone(nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n        self.fc = nn.Linear(8, 2)\n\n"
        "    def forward(self, x):\n        return self.fc(x)\n"
    )
    job = CaptureJob(
        path="/virtual/origins.py", source=source, classes=build_requests(parse(source).classes)
    )
    mods = {m.name: m for m in run_capture(job, lambda *_: None).modules}
    assert [i.origin for i in mods["Inner"].inputs] == ["parent", "default"]
    assert [i.origin for i in mods["Outer"].inputs] == ["declared"]
    assert [i.origin for i in mods["Alone"].inputs] == ["assumed"]
    inner = class_markdown(mods["Inner"])
    assert "[B, 16] float32 (from the parent's call)" in inner
    assert "None (the default)" in inner
    assert "[B, 16] float32 (declared)" in class_markdown(mods["Outer"])
    assert "[B, 8] float32 (assumed)" in class_markdown(mods["Alone"])


def test_a_traced_value_asked_callable_first_is_not_called() -> None:
    # torch.fx's Proxy defines __call__, so `arg() if callable(arg) else arg` recorded
    # `x.__call__()` (FX201 "'FakeTensor' object has no attribute '__call__'", no shapes after
    # it); a tensor is not callable in eager, so the trace returns it as eager does. A call of
    # a traced value with no callable() asked is still recorded (eager fails there too).
    text = _text("callable_default.py")
    result = _capture(
        "callable_default.py",
        _request(
            text, "Masked", inputs=[InputSpec("x", dims=[DimSpec("B", 2), DimSpec(None, 32)])]
        ),
        _request(text, "CallsItsInput"),
    )
    masked, calls = result.modules
    assert masked.status == "traced", masked.diagnostics
    assert not [n for n in masked.nodes if n.target == "__call__"], masked.nodes
    assert [o.shape for o in masked.outputs] == [["B", 32]], masked.outputs
    model = _load("callable_default.py").Masked()
    for batch in (2, 3):
        assert model(torch.randn(batch, 32)).shape == (batch, 32)
    assert any(n.target == "__call__" for n in calls.nodes), calls.nodes
    assert [d.code for d in calls.diagnostics if d.code == "FX201"] == ["FX201"], calls.diagnostics


def test_token_ids_reach_their_embedding_through_a_cast() -> None:
    # `self.emb(x.long())` stopped the search for the layer an input reaches, and the search
    # in the source then took a later `self.norm(x)`, after `x` had been given the embeddings:
    # `x` was assumed [B, T, 64] float32 and the output [B, 64, 64, 256]. A cast keeps the
    # shape, and a name given another value is not the input from there on (`Rebound`: the
    # ids go through a helper fxls cannot follow, so it asks instead of guessing from `norm`).
    text = _text("token_ids.py")
    result = _capture("token_ids.py", _request(text, "Wrapper"), _request(text, "Rebound"))
    wrapper, rebound = result.modules
    assert [(i.value.shape, i.value.dtype) for i in wrapper.inputs] == [(["B", "T"], "int64")]
    (fx405,) = [d for d in wrapper.diagnostics if d.code == "FX405"]
    assert "token_emb.emb" in fx405.message, fx405.message
    assert [o.shape for o in wrapper.outputs] == [["B", "T", 256]], wrapper.outputs
    model = _load("token_ids.py").Wrapper()
    for batch, length in ((2, 5), (3, 7)):
        assert model(torch.randint(0, 256, (batch, length))).shape == (batch, length, 256)
    assert [d.code for d in rebound.diagnostics if d.code in ("FX402", "FX405")] == ["FX402"]


def test_a_block_two_models_call_is_shown_as_the_one_that_names_more_dimensions() -> None:
    # `ViT` comes first in the file and called `Block` with 3136 patches of an assumed image;
    # `LM` calls it with token ids of any length. The block was shown as [B, 3136, 64] (the
    # first parent's call); the language model's call says more of it: [B, T, 64].
    text = _text("two_parents.py")
    result = _capture(
        "two_parents.py", _request(text, "Block"), _request(text, "ViT"), _request(text, "LM")
    )
    block, vit, lm = result.modules
    assert [i.value.shape for i in block.inputs] == [["B", "T", 64]], block.inputs
    assert [o.shape for o in block.outputs] == [["B", "T", 64]], block.outputs
    assert block.constructed is not None and "LM" in block.constructed.expr, block.constructed
    # each parent still shows its own call
    assert [o.shape for o in vit.outputs] == [["B", 3136, 64]], vit.outputs
    assert [o.shape for o in lm.outputs] == [["B", "T", 64]], lm.outputs
    module = _load("two_parents.py")
    model = module.LM()
    for batch, length in ((2, 5), (3, 7)):
        assert model(torch.randint(0, 256, (batch, length))).shape == (batch, length, 64)
        x = torch.randn(batch, length, 64)
        assert model.block(x).shape == (batch, length, 64)


def test_a_size_a_kernel_takes_as_a_number_still_follows_its_name() -> None:
    # `adaptive_avg_pool1d(h, T // 2)`: the kernel makes the size a number, which requires
    # T // 2 to be 2 while T stays a name; the output was shown as [B, 4, 2] for every T
    text = _text("pinned_sizes.py")
    (pool,) = _capture("pinned_sizes.py", _request(text, "HalfPool")).modules
    assert [o.shape for o in pool.outputs] == [["B", 4, "T//2"]], pool.outputs
    assert pool.example_nodes == [], pool.notes
    model = _load("pinned_sizes.py").HalfPool()
    for batch, length in ((2, 5), (3, 9)):
        assert model(torch.randn(batch, length, 6)).shape == (batch, 4, length // 2)


def test_an_assumed_input_of_too_few_dimensions_for_forward_is_tried_as_a_sequence() -> None:
    # `x` was assumed [B, 64] from the `Linear` it reaches; `forward` unpacks its shape into
    # three names, and running it on fake tensors (FX cannot trace the `map`) stopped with
    # "not enough values to unpack": the class failed. As a sequence it runs through.
    text = _text("unpacked_shape.py")
    (attention,) = _capture("unpacked_shape.py", _request(text, "Attention")).modules
    assert attention.status == "traced", (attention.status, attention.diagnostics)
    assert [(i.name, i.value.shape) for i in attention.inputs] == [("x", ["B", "T", 64])]
    assert [o.shape for o in attention.outputs] == [["B", "T", 64]], attention.outputs
    model = _load("unpacked_shape.py").Attention()
    for batch, length in ((2, 5), (3, 7)):
        assert model(torch.randn(batch, length, 64)).shape == (batch, length, 64)


def test_an_assumed_input_that_broadcasts_the_batch_against_itself_is_tried_as_a_sequence() -> None:
    # `x` was assumed [B, 64] and `condition` [B, 64] made [B, 1, 64]: the output was shown as
    # [B, B, 64], a batch broadcast against itself. As a sequence, x [B, T, 64], it is
    # [B, T, 64], as the code means.
    text = _text("adaptive_norm.py")
    (norm,) = _capture("adaptive_norm.py", _request(text, "AdaptiveRMSNorm")).modules
    assert [(i.name, i.value.shape) for i in norm.inputs] == [
        ("x", ["B", "T", 64]),
        ("condition", ["B", 64]),
    ], norm.inputs
    assert [o.shape for o in norm.outputs] == [["B", "T", 64]], norm.outputs
    model = _load("adaptive_norm.py").AdaptiveRMSNorm()
    for batch, length in ((2, 5), (3, 7)):
        out = model(torch.randn(batch, length, 64), condition=torch.randn(batch, 64))
        assert out.shape == (batch, length, 64)


def test_a_plain_graph_whose_arithmetic_broadcasts_the_batch_against_itself_is_tried_again() -> (
    None
):
    # diffusers' `AuraFlowPreFinalBlock`: no layer tells `x`'s shape, it was assumed [B, 64]
    # like the condition, and `x * (1 + scale)[:, None, :]` showed [B, B, 64] as the output of
    # a graph FX traced without deciding a check (only such graphs were tried again). As a
    # sequence, x [B, T, 64], it is [B, T, 64], as the code means.
    text = _text("adaptive_norm.py")
    (block,) = _capture("adaptive_norm.py", _request(text, "PreFinalModulation")).modules
    assert block.strategy.method == "fx" and not block.strategy.repairs, block.strategy
    assert [(i.name, i.value.shape) for i in block.inputs] == [
        ("x", ["B", "T", 64]),
        ("conditioning_embedding", ["B", 64]),
    ], block.inputs
    assert [o.shape for o in block.outputs] == [["B", "T", 64]], block.outputs
    model = _load("adaptive_norm.py").PreFinalModulation()
    for batch, length in ((2, 5), (3, 7)):
        out = model(torch.randn(batch, length, 64), torch.randn(batch, 64))
        assert out.shape == (batch, length, 64)


def test_a_norm_of_any_width_says_nothing_and_masks_follow_their_shaped_sequences() -> None:
    # A norm built for any width (`dim` (0,), no weight) was taken for the first layer of
    # both streams, which became [B, T, 1] (width 0 made 1) and broadcast against the
    # modulation. The streams are sequences of `temb`'s width now, the text's of its own
    # length, and each mask follows its stream, shaped in the same pass ([B, 32] like
    # `temb` before).
    block = _traced("named_inputs.py", "ModulatedJointBlock")
    assert _input_shapes(block) == [
        ("hidden_states", ["B", "T", 32]),
        ("encoder_hidden_states", ["B", "S", 32]),
        ("temb", ["B", 32]),
        ("attention_mask", ["B", "T"]),
        ("encoder_attention_mask", ["B", "S"]),
    ]
    assert [o.shape for o in block.outputs] == [["B", "T", 32], ["B", "S", 32]], block.outputs
    model = _load("named_inputs.py").ModulatedJointBlock()
    for batch, length, source in ((2, 5, 3), (3, 7, 11)):
        x, context = model(
            torch.randn(batch, length, 32),
            torch.randn(batch, source, 32),
            torch.randn(batch, 32),
            torch.ones(batch, length, dtype=torch.int64),
            torch.ones(batch, source, dtype=torch.int64),
        )
        assert x.shape == (batch, length, 32) and context.shape == (batch, source, 32)


def test_an_encoders_sequence_nothing_told_has_its_own_length() -> None:
    # Shaped after `hidden_states` [B, T, 32], the text was [B, T, 32] and its mask, shaped
    # before it, [B, T, 32] like `hidden_states` too: the text is [B, S, 32] and its mask its
    # positions, [B, S].
    block = _traced("named_inputs.py", "PooledContext")
    assert _input_shapes(block) == [
        ("hidden_states", ["B", "T", 32]),
        ("encoder_attention_mask", ["B", "S"]),
        ("encoder_hidden_states", ["B", "S", 32]),
    ]
    assert [o.shape for o in block.outputs] == [["B", "T", 32]], block.outputs
    model = _load("named_inputs.py").PooledContext()
    for batch, length, source in ((2, 5, 3), (3, 7, 11)):
        mask = torch.ones(batch, source, dtype=torch.int64)
        out = model(torch.randn(batch, length, 32), mask, torch.randn(batch, source, 32))
        assert out.shape == (batch, length, 32)


def test_a_cross_attentions_context_has_its_own_length() -> None:
    # `context` reaches its own LayerNorm: it was [B, T, 32] like `x`, and the attention's
    # weights [B, T, T]. A context is another sequence: [B, S, 32], weights [B, T, S].
    block = _traced("named_inputs.py", "ContextAttention")
    assert _input_shapes(block) == [("x", ["B", "T", 32]), ("context", ["B", "S", 32])]
    assert [o.shape for o in block.outputs] == [["B", "T", 32], ["B", "T", "S"]], block.outputs
    model = _load("named_inputs.py").ContextAttention()
    for batch, length, source in ((2, 5, 3), (3, 7, 11)):
        out, weights = model(torch.randn(batch, length, 32), torch.randn(batch, source, 32))
        assert out.shape == (batch, length, 32) and weights.shape == (batch, length, source)


def test_an_encoders_sequence_that_must_be_as_long_as_the_models_is_tried_so() -> None:
    # The text has its own length S; added position by position to `hidden_states` [B, T, 32]
    # it stopped the class (a shape error, T against S). As long as the sequence, it runs.
    block = _traced("named_inputs.py", "AddedContext")
    assert _input_shapes(block) == [
        ("hidden_states", ["B", "T", 32]),
        ("encoder_hidden_states", ["B", "T", 32]),
    ]
    assert [o.shape for o in block.outputs] == [["B", "T", 32]], block.outputs
    model = _load("named_inputs.py").AddedContext()
    for batch, length in ((2, 5), (3, 7)):
        out = model(torch.randn(batch, length, 32), torch.randn(batch, length, 32))
        assert out.shape == (batch, length, 32)


def test_an_input_named_like_a_sequence_that_is_one_vector_per_sample_is_tried_as_one() -> None:
    # `image_embeds` was assumed [B, T, 24] by its name; `reshape(batch, 4, -1)` then made
    # [B, 4, 16*T] and `torch.cat` failed: the class showed a shape error and no output.
    # Tried last as one vector per sample, [B, 24], it runs through.
    tokens = _traced("named_inputs.py", "ImageTokens")
    assert _input_shapes(tokens) == [
        ("text_embeds", ["B", "T", 32]),
        ("image_embeds", ["B", 24]),
    ]
    assert [o.shape for o in tokens.outputs] == [["B", "T + 4", 16]], tokens.outputs
    model = _load("named_inputs.py").ImageTokens()
    for batch, length in ((2, 5), (3, 7)):
        out = model(torch.randn(batch, length, 32), torch.randn(batch, 24))
        assert out.shape == (batch, length + 4, 16)


def test_inputs_nothing_told_are_shaped_after_a_known_one_by_their_names() -> None:
    # Only `temb` [B, 32] is known (from the `Linear` it reaches); the two streams were made
    # [B, 32] like it, and their concatenation [B, 64] failed the `LayerNorm`. Named as
    # sequences, they are [B, T, 32] and, the encoder's, [B, S, 32]: two lengths (both were
    # T). A mask beside a sequence is one value per position.
    text = _text("named_inputs.py")
    block, conv = _capture(
        "named_inputs.py", _request(text, "JointBlock"), _request(text, "MaskedConv")
    ).modules
    assert block.status == "traced", (block.status, block.diagnostics)
    assert [(i.name, i.value.shape) for i in block.inputs] == [
        ("hidden_states", ["B", "T", 32]),
        ("encoder_hidden_states", ["B", "S", 32]),
        ("temb", ["B", 32]),
    ]
    assert [o.shape for o in block.outputs] == [["B", "S", 32], ["B", "T", 32]], block.outputs
    reasons = [d.message for d in block.diagnostics if d.code == "FX405"]
    assert any("`temb`'s width, as a sequence" in r for r in reasons), reasons
    assert conv.status == "traced", (conv.status, conv.diagnostics)
    mask = next(i for i in conv.inputs if i.name == "input_mask")
    assert (mask.value.shape, mask.value.dtype) == (["B", "T"], "int64")
    assert [o.shape for o in conv.outputs] == [["B", "T", 32]], conv.outputs
    fixture = _load("named_inputs.py")
    for batch, length, source in ((2, 5, 3), (3, 7, 11)):
        x = torch.randn(batch, length, 32)
        context, rest = fixture.JointBlock()(
            x, torch.randn(batch, source, 32), torch.randn(batch, 32)
        )
        assert context.shape == (batch, source, 32) and rest.shape == (batch, length, 32)
        ones = torch.ones(batch, length, dtype=torch.int64)
        assert fixture.MaskedConv()(x, x, ones).shape == (batch, length, 32)


def test_a_size_named_with_an_offset_is_solved_for_the_assumed_dimension() -> None:
    # "The size of tensor a (T + 1) must match the size of tensor b (17)": T was tried at 17
    # (then T + 1 = 18) and the class stayed partial with the shape error. Solved, T = 16.
    from fxls.worker.capture.build.inputs import sizes_named_by

    error = "The size of tensor a (T + 1) must match the size of tensor b (17) at dimension 1"
    assert sizes_named_by(error) == [16, 17]
    pool = _traced("named_inputs.py", "ClassTokenPool")
    assert _input_shapes(pool) == [("hidden_states", ["B", "T", 32])]
    assert [o.shape for o in pool.outputs] == [["B", 32]], pool.outputs
    assert pool.example_sizes.get("T") == 16, (pool.example_sizes, pool.notes)
    model = _load("named_inputs.py").ClassTokenPool()
    for batch in (2, 3):
        assert model(torch.randn(batch, 16, 32)).shape == (batch, 32)


def test_a_parameter_defaulting_to_none_that_forward_needs_is_given_when_none_does_not_run() -> (
    None
):
    # `timestep=None` is handed to the time embedding without asking whether it was given;
    # captured with its default, the embedding raised "'NoneType' object has no attribute
    # 'device'" and the class showed a shape error and no output. Captured again with it as
    # an input, one diffusion timestep per sample, it runs through; `return_dict` stays.
    dit = _traced("unasked_defaults.py", "TinyDiT")
    shown = [(i.name, i.value.kind, i.value.shape) for i in dit.inputs]
    assert shown[:2] == [("latents", "tensor", ["B", 4, 224, 224]), ("timestep", "tensor", ["B"])]
    assert [(i.name, i.value.kind) for i in dit.inputs][2:] == [("return_dict", "bool")]
    assert not any(d.code == "FX201" for d in dit.diagnostics), dit.diagnostics
    assert [o.shape for o in dit.outputs] == [["B", 12544, 16]], dit.outputs
    model = _load("unasked_defaults.py").TinyDiT()
    for batch in (2, 3):
        out = model(torch.randn(batch, 4, 224, 224), torch.randint(0, 1000, (batch,)))
        assert out["sample"].shape == (batch, 12544, 16)


def test_a_stop_on_a_parameter_left_none_names_the_input_to_declare() -> None:
    # Flux's transformer (the code-action tests' `Denoiser`): `timestep` is left at its default and `timestep.to(...)` raised
    # "'NoneType' object has no attribute 'to'", shown as FX199 with a fix that said to mark a
    # submodule as a leaf. It says which input to declare, where; the earlier failure that
    # fxls got past (a traced `guidance` took the branch calling with one argument too many)
    # is information, not a warning.
    text = _text(DECLARE)
    (dit,) = _capture(DECLARE, _request(text, "Denoiser")).modules
    assert dit.status == "failed"
    warnings = [d for d in dit.diagnostics if d.severity == "warning"]
    assert [(d.code, d.data.get("arg"), d.span) for d in warnings] == [
        ("FX402", "timestep", _span_of(text, "timestep.to", after="class Denoiser"))
    ], dit.diagnostics
    assert "left at its default `None`" in warnings[0].message
    assert "# fxls: timestep = (B,) int64" in (warnings[0].fix or "")
    (earlier,) = [d for d in dit.diagnostics if d.code == "FX199"]
    assert earlier.severity == "information" and "fxls got past this" in (earlier.fix or "")
    # declared, the next stop names the next input: the position ids
    timestep = InputSpec("timestep", dims=[DimSpec(name="B")], dtype="int64")
    (dit,) = _capture(DECLARE, _request(text, "Denoiser", inputs=[timestep])).modules
    warnings = [d for d in dit.diagnostics if d.severity == "warning"]
    assert [(d.code, d.data.get("arg")) for d in warnings] == [("FX402", "ids")], dit.diagnostics


def test_a_run_on_fake_tensors_that_stops_on_a_parameter_left_none_names_it() -> None:
    # torch.fx stops at `if x.ndim == 3`; the run on fake tensors then stopped at
    # `pooled.std()` with `pooled` left at None, said only in a note ("'NoneType' object has
    # no attribute 'std'"): FX402 names it there (Flux's `pooled_projections`). Given as an
    # input, the class stops later anyway (ids sizing a table), so this is what is shown.
    text = _text("unasked_defaults.py")
    (dit,) = _capture("unasked_defaults.py", _request(text, "PooledDiT")).modules
    (left,) = [d for d in dit.diagnostics if d.code == "FX402"]
    assert left.severity == "warning" and left.data["arg"] == "pooled", dit.diagnostics
    assert left.span == _span_of(text, "pooled.std", after="class PooledDiT")
    assert "# fxls: pooled = (B, C)" in (left.fix or "")


def test_a_parameter_left_none_that_a_submodule_stops_on_is_named_at_the_call() -> None:
    # diffusers' `HunyuanDiTBlock`: `temb` left at None stops the run inside the norm
    # (`emb.to(...)` in `ShiftNorm`), whose code does not name it: FX402 is at the block's
    # own call `self.norm1(x, temb)`. The trace's last stop (`int(lengths.max())`), first
    # met before fxls fixed `temb`, stays a warning: it is where torch.fx stops.
    text = _text("unasked_defaults.py")
    (block,) = _capture("unasked_defaults.py", _request(text, "NormedBlock")).modules
    warnings = [(d.code, d.span) for d in block.diagnostics if d.severity == "warning"]
    assert sorted(warnings, key=str) == sorted(
        [
            ("FX104", _span_of(text, "int(lengths.max())", after="class NormedBlock")),
            ("FX402", _span_of(text, "self.norm1(x, temb)", after="class NormedBlock")),
        ],
        key=str,
    ), block.diagnostics
    (left,) = [d for d in block.diagnostics if d.code == "FX402"]
    assert left.data["arg"] == "temb" and "# fxls: temb = (B, C)" in (left.fix or "")


def test_the_first_layer_an_input_reaches_sets_its_width_over_the_build() -> None:
    # `encoder_hidden_states` was sized by the block's `cross_attention_dim` (32) though it
    # first goes through `caption_projection`, Linear(48, 32): a shape error there and no
    # output. The layer's width wins; the length stays the build's own `S`.
    block = _traced("named_inputs.py", "CaptionedBlock")
    assert _input_shapes(block) == [
        ("hidden_states", ["B", "T", 32]),
        ("encoder_hidden_states", ["B", "S", 48]),
    ]
    assert [o.shape for o in block.outputs] == [["B", "T", 32]], block.outputs
    model = _load("named_inputs.py").CaptionedBlock()
    for batch, length, source in ((2, 5, 3), (3, 7, 4)):
        out = model(torch.randn(batch, length, 32), torch.randn(batch, source, 48))
        assert out.shape == (batch, length, 32)


def test_what_counts_as_a_parameter_forward_needs_though_it_defaults_to_none() -> None:
    import inspect as _inspect

    from fxls.worker.capture.build.inputs import needed_unasked

    fixture = _load("unasked_defaults.py")

    class Asking(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.skip_linear = None
            self.gradient_checkpointing = False

        def forward(self, x, mask=None, cond=None, scale=None, options_kwargs=None, flag: bool | None = None, rope=None, skip=None, held=None):  # fmt: skip
            if callable(mask):  # a helper asks, as `if exists(mask)` does
                x = x * mask
            y = x if cond is None else x + cond
            # handed on by keyword: the callee may ask (diffusers' `image_rotary_emb`)
            y = torch.nn.functional.dropout(y, p=0.0, training=rope)
            if self.skip_linear is not None:  # not run by this instance (HunyuanDiTBlock)
                y = self.skip_linear(torch.cat([y, skip], dim=-1))
            if torch.is_grad_enabled() and self.gradient_checkpointing:  # not run either
                y = torch.utils.checkpoint.checkpoint(torch.add, y, held)  # (diffusers' blocks)
            return y * scale, options_kwargs, flag

    params = _inspect.signature(Asking.forward).parameters
    needed = {name for name in params if name != "self" and needed_unasked(params[name], Asking())}
    assert needed == {"scale"}, needed
    dit = fixture.TinyDiT
    timestep = _inspect.signature(dit.forward).parameters["timestep"]
    assert needed_unasked(timestep, dit())


def test_a_helper_given_a_length_is_given_a_number() -> None:
    # A rotary helper's `forward(self, seq_len)` and an ALiBi bias's `forward(self, i, j)`
    # take lengths: `torch.arange(seq_len)`. fxls had nothing to go on (FX402, no shapes); a
    # parameter used only as a size is now the sequence's example size, assumed and said so.
    # `Positions` also uses its `t` as a tensor (`t.float()`), so it is not a number: beside
    # its `inv_freq` it is the positions of a rotary embedding, `[T]` int64.
    text = _text("length_inputs.py")
    result = _capture(
        "length_inputs.py",
        _request(text, "Rotary"),
        _request(text, "AlibiBias"),
        _request(text, "Positions"),
    )
    rotary, alibi, positions = result.modules
    module = _load("length_inputs.py")
    assert rotary.status == "traced", rotary.diagnostics
    (given,) = rotary.inputs
    assert (given.name, given.value.kind, given.assumed) == ("seq_len", "int", True), given
    assert given.value.text is not None
    n = int(given.value.text)
    (fx405,) = [d for d in rotary.diagnostics if d.code == "FX405"]
    assert "torch.arange(seq_len" in fx405.message, fx405.message
    cos, sin = module.Rotary()(n)
    assert [o.shape for o in rotary.outputs] == [list(cos.shape), list(sin.shape)]
    assert alibi.status == "traced", alibi.diagnostics
    sizes = {i.name: int(i.value.text or "0") for i in alibi.inputs}
    assert set(sizes) == {"i", "j"} and all(i.assumed for i in alibi.inputs), alibi.inputs
    eager = module.AlibiBias()(sizes["i"], sizes["j"])
    assert [o.shape for o in alibi.outputs] == [list(eager.shape)], alibi.outputs
    assert [d.code for d in positions.diagnostics if d.code in ("FX402", "FX405")] == ["FX405"]
    (t,) = positions.inputs
    assert (t.value.shape, t.value.dtype, t.assumed) == (["T"], "int64", True), t
    length = 7
    eager_positions = module.Positions()(torch.arange(length))
    assert positions.outputs[0].shape == ["T", *eager_positions.shape[1:]]
    assert eager_positions.shape[0] == length


def test_an_assert_on_a_length_gives_the_length_to_try() -> None:
    # `b, n, device = *x.shape, x.device` stops torch.fx; the run on fake tensors then stopped
    # at `assert n == self.max_seq_len` with the assumed `T`, and the class showed nothing. The
    # numbers a failed `assert` compares with are tried as sizes of the assumed input, as
    # those a shape error names are: `T` = 16, said in the output's sizes.
    text = _text("length_inputs.py")
    (fixed,) = _capture("length_inputs.py", _request(text, "FixedLength")).modules
    assert fixed.status == "traced", fixed.diagnostics
    assert [(i.value.shape, i.value.dtype) for i in fixed.inputs] == [(["B", "T"], "int64")]
    assert [o.shape for o in fixed.outputs] == [["B", 16, 32]], fixed.outputs
    assert fixed.example_sizes == {"T": 16}, fixed.example_sizes
    model = _load("length_inputs.py").FixedLength()
    for batch in (2, 3):
        assert model(torch.randint(0, 256, (batch, 16))).shape == (batch, 16, 32)


def test_a_shape_error_of_a_call_with_every_input_left_at_none_is_a_hint() -> None:
    # fxls cannot tell which input of `forward(self, patches=None, mask=None)` is the main
    # one, so it calls it with none; the block it calls then refuses `None`. That said
    # nothing about the code, yet it was an error (transformers' Pix2Struct showed one on
    # released code); now a hint saying which input to declare.
    text = _text("no_main_input.py")
    (model,) = _capture("no_main_input.py", _request(text, "NoMainInput")).modules
    (fx201,) = [d for d in model.diagnostics if d.code == "FX201"]
    assert fx201.severity == "hint", fx201
    assert fx201.fix is not None and "# fxls: patches = (...)" in fx201.fix, fx201.fix
    assert not [d for d in model.diagnostics if d.severity == "error"], model.diagnostics


def test_pieces_of_a_split_with_a_fixed_count_are_iterated_in_the_graph() -> None:
    """``map(f, qkv.chunk(3))``, a generator over ``split([..])``, ``(q, *kv.chunk(2))`` and
    a loop over ``tensor_split(2)`` take as many pieces as the split makes: one FX graph
    (torch.fx refuses to iterate a traced value), shapes as eager. A loop over the rows of a
    traced value, whose count is a size, is still FX103."""
    source = (
        "import torch\nimport torch.nn as nn\n\n"
        "class Pieces(nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n"
        "        self.q = nn.Linear(8, 8)\n        self.kv = nn.Linear(8, 16)\n\n"
        "    def forward(self, x):\n"
        "        qkv = (self.q(x), *self.kv(x).chunk(2, dim=-1))\n"
        "        q, k, v = map(lambda t: t.transpose(1, 2), qkv)\n"
        "        a, b = (t * 2 for t in q.split([3, 5], dim=1))\n"
        "        total = k\n"
        "        for half in v.tensor_split(2, dim=1):\n"
        "            total = total + half.sum(dim=1, keepdim=True)\n"
        "        return a, b, total\n\n"
        "class Rows(nn.Module):\n"
        "    def forward(self, x):\n"
        "        return torch.stack([r * 2 for r in x])\n"
    )
    requests = [ClassRequest("Pieces", 4, inputs=[_BTC8]), ClassRequest("Rows", 14, inputs=[_BTC8])]
    pieces, rows = _of_source("pieces.py", source, *requests)
    assert pieces.status == "traced" and strategy_label(pieces.strategy) == "fx", pieces.diagnostics
    assert "FX103" not in _codes(pieces)
    assert [o.shape for o in pieces.outputs] == [["B", 3, "T"], ["B", 5, "T"], ["B", 8, "T"]]
    getitems = [n for n in pieces.nodes if "getitem" in n.target]
    assert len(getitems) == 2 + 2 + 2, [
        n.target for n in pieces.nodes
    ]  # chunk, split, tensor_split
    namespace: dict[str, object] = {}
    exec(compile(source, "/virtual/pieces.py", "exec"), namespace)
    eager = namespace["Pieces"]()(torch.randn(2, 5, 8))  # type: ignore[operator]
    assert [list(t.shape) for t in eager] == [[2, 3, 5], [2, 5, 5], [2, 8, 5]]
    assert "FX103" in _codes(rows)


def test_hints_of_pieces_taken_in_turn_name_the_values_made_from_them() -> None:
    """``qkv = x.chunk(3)`` shows the three pieces; ``q, k, v = map(f, qkv)`` and a generator
    name what ``f`` made of each piece (the pieces are written where the split is, not read
    as the values assigned)."""
    source = (
        "import torch\nimport torch.nn as nn\n\n"
        "class Heads(nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n"
        "        self.qkv = nn.Linear(8, 24)\n\n"
        "    def forward(self, x):\n"
        "        qkv = self.qkv(x).chunk(3, dim=-1)\n"
        "        q, k, v = map(lambda t: t.transpose(1, 2), qkv)\n"
        "        a, b = (t.sum(-1) for t in q.split([3, 5], dim=1))\n"
        "        return q @ k.transpose(1, 2) @ v, a, b\n"
    )
    (mod,) = _of_source("heads.py", source, ClassRequest("Heads", 4, inputs=[_BTC8]))
    assert strategy_label(mod.strategy) == "fx", mod.diagnostics
    hints = {h.line: h.label for h in shape_hints([mod], source)}
    assert hints[10] == "▸ ([B, T, 8], [B, T, 8], [B, T, 8])"
    assert hints[11] == "▸ q: [B, 8, T], k: [B, 8, T], v: [B, 8, T]"
    assert hints[12] == "▸ a: [B, 3], b: [B, 5]"


def test_a_shape_unpacked_into_a_starred_name_takes_the_rank_of_the_input() -> None:
    """``*_, n, dtype = *x.shape, x.dtype`` (vit-pytorch's ``SimpleViT`` for series) and
    ``b, *_ = x.shape`` unpack any rank of at least one: fxls takes the rank of the input
    while tracing (a decided unpacking, FX103 as information saying the rank taken) and the
    class traces into one FX graph (torch.fx refuses the starred unpacking: a run on fake
    tensors without a graph). A rank the statement cannot take stays FX103."""
    source = (
        "import torch.nn as nn\n\n"
        "class Series(nn.Module):\n"
        "    def __init__(self, dim=64):\n"
        "        super().__init__()\n"
        "        self.proj = nn.Linear(dim, dim)\n\n"
        "    def forward(self, x):\n"
        "        *_, n, dtype = *x.shape, x.dtype\n"
        "        b, *_ = x.shape\n"
        "        return self.proj(x).to(dtype).reshape(b, -1, n)\n\n"
        "class Deep(nn.Module):\n"
        "    def __init__(self, dim=64):\n"
        "        super().__init__()\n"
        "        self.proj = nn.Linear(dim, dim)\n\n"
        "    def forward(self, x):\n"
        "        b, n, d, *_ = x.shape\n"
        "        return self.proj(x).reshape(b, n * d)\n"
    )
    x = InputSpec("x", dims=[DimSpec("B"), DimSpec("T"), DimSpec(None, 64)])
    flat = InputSpec("x", dims=[DimSpec("B"), DimSpec(None, 64)])
    series, deep = _of_source(
        "unpack_ex.py", source, ClassRequest("Series", 3, inputs=[x]),
        ClassRequest("Deep", 12, inputs=[flat]),
    )  # fmt: skip
    assert series.status == "traced", series.diagnostics
    assert strategy_label(series.strategy) == "fx+decided"
    assert series.outputs[0].shape == ["B", "T", 64]
    found = {d.span.line: d for d in series.diagnostics if d.code == "FX103"}
    assert set(found) == {9, 10}
    assert all(d.severity == "information" and d.data["value"] == 3 for d in found.values())
    hints = {h.line: h.label for h in shape_hints([series], source)}
    assert hints[9] == "▸ n=64"  # the names beside the star: `dtype` is no size of `x`
    assert hints[10] == "▸ b=B"
    # three sizes and more of a declared rank-2 input: as eager, no count works
    assert "FX103" in _codes(deep) and deep.status != "traced"
    # an input fxls assumes, [B, 64] from the Linear, too short for the statement: its rank
    # is not taken (the trace would stop at the unpacking, FX199), and the run on fake
    # tensors tries the rank the statement needs
    (assumed,) = _of_source("unpack_ex.py", source, ClassRequest("Deep", 12))
    assert assumed.status == "traced" and "FX199" not in _codes(assumed), assumed.diagnostics
    assert _input_shapes(assumed) == [("x", ["B", "T", 64])]


def test_a_slice_of_a_shape_built_into_a_tuple_takes_the_rank_of_the_input() -> None:
    """transformers' attention layers write ``input_shape = hidden_states.shape[:-1]`` and
    ``hidden_shape = (*input_shape, -1, self.head_dim)``: torch.fx refuses to iterate the
    slice (FX103), and the class was only run on fake tensors, with no FX graph. The slice
    gives the rank of the input less one: the class traces into one graph, the rank taken
    said as information, and the shapes are eager's at two sizes."""
    source = (
        "import torch.nn as nn\n\n"
        "class Attention(nn.Module):\n"
        "    def __init__(self, dim=64, heads=4):\n"
        "        super().__init__()\n"
        "        self.head_dim = dim // heads\n"
        "        self.q_proj = nn.Linear(dim, dim)\n"
        "        self.o_proj = nn.Linear(dim, dim)\n\n"
        "    def forward(self, hidden_states):\n"
        "        input_shape = hidden_states.shape[:-1]\n"
        "        hidden_shape = (*input_shape, -1, self.head_dim)\n"
        "        q = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)\n"
        "        out = (q @ q.transpose(-1, -2)).softmax(-1) @ q\n"
        "        return self.o_proj(out.transpose(1, 2).reshape(*input_shape, -1))\n"
    )
    x = InputSpec("hidden_states", dims=[DimSpec("B"), DimSpec("T"), DimSpec(None, 64)])
    (mod,) = _of_source("sliced.py", source, ClassRequest("Attention", 3, inputs=[x]))
    assert mod.status == "traced" and strategy_label(mod.strategy) == "fx+decided", mod.diagnostics
    found = {d.span.line: d for d in mod.diagnostics if d.code == "FX103"}
    assert set(found) == {12, 15}  # each line that iterates the slice
    assert all(d.severity == "information" and d.data["value"] == 3 for d in found.values())
    assert mod.outputs[0].shape == ["B", "T", 64]
    (view,) = [n for n in mod.nodes if n.target == "view"]
    assert view.outputs[0].shape == ["B", "T", 4, 16]
    hints = {h.line: h.label for h in shape_hints([mod], source)}
    # the sizes on the line that makes them; the tuple made of them is not its last size
    assert hints[11] == "▸ [B, T]" and 12 not in hints and hints[15] == "▸ [B, T, 64]"
    namespace: dict[str, Any] = {}
    exec(compile(source, "sliced.py", "exec"), namespace)
    model = namespace["Attention"]()
    for b, t in ((2, 5), (3, 7)):
        assert list(model(torch.randn(b, t, 64)).shape) == [b, t, 64]


def test_an_unpacking_decided_before_a_later_stop_is_information() -> None:
    """The slice is iterated (decided from the rank), then a shape error stops the capture
    with no outputs: the stop is the warning to act on; the decided line is information
    saying fxls got past it (it was a warning, one more per attention class of DETR)."""
    source = (
        "import torch.nn as nn\n\n"
        "class Broken(nn.Module):\n"
        "    def __init__(self, dim=64):\n"
        "        super().__init__()\n"
        "        self.q_proj = nn.Linear(dim, dim)\n"
        "        self.o_proj = nn.Linear(48, dim)\n\n"
        "    def forward(self, hidden_states):\n"
        "        input_shape = hidden_states.shape[:-1]\n"
        "        q = self.q_proj(hidden_states).view(*input_shape, 4, -1)\n"
        "        return self.o_proj(q.flatten(2))\n"
    )
    x = InputSpec("hidden_states", dims=[DimSpec("B"), DimSpec("T"), DimSpec(None, 64)])
    (mod,) = _of_source("broken.py", source, ClassRequest("Broken", 3, inputs=[x]))
    assert mod.status != "traced" and not mod.outputs, mod.diagnostics
    (decided,) = [d for d in mod.diagnostics if d.code == "FX103"]
    assert decided.severity == "information" and decided.span.line == 11
    assert "fxls got past this" in (decided.fix or "")
    assert any(d.code == "FX201" and d.span.line == 12 for d in mod.diagnostics), mod.diagnostics


def test_a_starred_shape_unpacked_with_other_values_traces_at_the_rank_it_needs() -> None:
    """``b, n, _, h = *x.shape, self.heads`` needs three sizes of ``x``: the graph takes them
    (torch.fx refuses the starred shape, FX103), and the input assumed ``[B, 64]`` from the
    first layer is tried at the rank the code needs, ``[B, T, 64]``, as a run on fake tensors
    does after "not enough values to unpack"; the rank is not decided from the assumed input
    when the list asks the shape's length. The hint names the sizes the shape gives."""
    source = (
        "import torch.nn as nn\n\n"
        "class Attention(nn.Module):\n"
        "    def __init__(self, dim=64, heads=4):\n"
        "        super().__init__()\n"
        "        self.heads = heads\n"
        "        self.to_qkv = nn.Linear(dim, dim * 3, bias=False)\n\n"
        "    def forward(self, x):\n"
        "        b, n, _, h = *x.shape, self.heads\n"
        "        q, k, v = self.to_qkv(x).chunk(3, dim=-1)\n"
        "        q, k = (t.reshape(b, n, h, -1).transpose(1, 2) for t in (q, k))\n"
        "        return (q @ k.transpose(-1, -2)).softmax(-1)\n"
    )
    (mod,) = _of_source("star.py", source, ClassRequest("Attention", 3))
    assert mod.status == "traced" and strategy_label(mod.strategy) == "fx", mod.diagnostics
    assert not {"FX102", "FX103"} & set(_codes(mod))
    assert _input_shapes(mod) == [("x", ["B", "T", 64])]
    assert mod.outputs[0].shape == ["B", 4, "T", "T"]
    hints = {h.line: h.label for h in shape_hints([mod], source)}
    assert hints[10] == "▸ b=B, n=T, _=64"  # the names the shape's sizes are given
