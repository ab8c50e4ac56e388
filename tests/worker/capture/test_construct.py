"""Building and feeding classes nobody described: each source of evidence, one small file each.

Every case runs the real capture (``run_capture``) on a document without ``# fxls:`` directives
and checks where the instance and its inputs came from, and what fxls says about it.
"""

from __future__ import annotations

import textwrap
from typing import Any

import pytest

from fxls.protocol.labels import strategy_label
from fxls.protocol.model import CaptureJob, ClassRequest, DimSpec, InputSpec, ModuleResult
from fxls.worker.capture.build import parents
from fxls.worker.capture.classcapture import ClassCapture
from fxls.worker.capture.pipeline import run_capture
from fxls.worker.capture.shapes import keptruns
from fxls.worker.capture.trace import fakerun


def _capture(
    source: str,
    *names: str,
    inputs: dict[str, list[InputSpec]] | None = None,
    children_from_trace: bool = True,
) -> dict[str, ModuleResult]:
    text = textwrap.dedent(source)
    lines = text.splitlines()
    requests = [
        ClassRequest(
            name,
            next(i for i, t in enumerate(lines, 1) if t.startswith(f"class {name}")),
            inputs=(inputs or {}).get(name, []),
        )
        for name in names
    ]
    job = CaptureJob(
        path="/virtual/model.py",
        source=text,
        classes=requests,
        children_from_trace=children_from_trace,
    )
    result = run_capture(job, lambda *_: None)
    assert result.error is None, result.error
    return {m.name: m for m in result.modules}


HEADER = """\
import math
from dataclasses import dataclass
import torch
from torch import nn
"""


def test_sub_block_is_captured_from_its_parent_with_the_parents_names() -> None:
    mods = _capture(
        HEADER
        + """
@dataclass
class Config:
    n_embd: int = 48
    vocab: int = 100

class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.fc = nn.Linear(config.n_embd, config.n_embd)

    def forward(self, x):
        return self.fc(x).relu()

class Model(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.emb = nn.Embedding(config.vocab, config.n_embd)
        self.blocks = nn.ModuleList([Block(config) for _ in range(3)])

    def forward(self, idx):
        x = self.emb(idx)
        for block in self.blocks:
            x = block(x)
        return x
""",
        "Block",
        "Model",
    )
    model, block = mods["Model"], mods["Block"]
    assert model.constructed is not None and model.constructed.source == "config"
    assert model.constructed.text == "Model(Config())"
    assert model.inputs[0].value.shape == ["B", "T"] and model.inputs[0].value.dtype == "int64"
    assert block.constructed is not None and block.constructed.source == "parent"
    assert block.constructed.text == "Model.blocks.0" and block.constructed.inputs_from == "Model"
    # the block's input is what Model.forward gives it, in Model's dimension names
    assert block.inputs[0].value.shape == ["B", "T", 48] and [i.assumed for i in block.inputs] == [
        False
    ]
    assert block.outputs[0].shape == ["B", "T", 48]
    assert not [d for d in block.diagnostics if d.code in ("FX401", "FX402", "FX408")]


FIXING_HERE = "        # fixing\n"
"""Where a test puts a line that makes the parent's run fix its names."""


def _eager_inputs(
    source: str, build: Any, child: str, sizes: list[tuple[int, ...]], *, tokens: bool = False
) -> list[tuple[int, ...]]:
    """The size of the first argument the submodule ``child`` gets when the module ``build``
    makes of ``source`` runs eagerly on zeros of each of ``sizes`` (token ids when ``tokens``)."""
    import torch

    space: dict[str, Any] = {}
    exec(compile(HEADER + source, "<test>", "exec"), space)
    model, seen = build(space), []
    getattr(model, child).register_forward_hook(
        lambda m, args, out: seen.append(tuple(args[0].shape))
    )
    for size in sizes:
        model(torch.zeros(size, dtype=torch.long if tokens else torch.float32))
    return seen


FLATTENED = """
@dataclass
class Config:
    n_embd: int = 48
    experts: int = 4
    vocab: int = 100

class Router(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.gate = nn.Linear(config.n_embd, config.experts)

    def forward(self, tokens):
        return self.gate(tokens).softmax(-1).topk(2, dim=-1)

class Moe(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.emb = nn.Embedding(config.vocab, config.n_embd)
        self.router = Router(config)

    def forward(self, idx):
        x = self.emb(idx)
        b, t, c = x.shape
        # fixing
        weights, chosen = self.router(x.reshape(b * t, c))
        return weights.view(b, t, 2)
"""


FIXING = "        x = x + torch.zeros(len(range(b)), len(range(t)), c)\n"
"""A line that makes the parent's run fix ``B`` and ``T`` to their example sizes (``range``
needs numbers): the block's input gets its names back from a run at other sizes."""


@pytest.mark.parametrize("fixing", ["", FIXING], ids=["symbolic", "fixed"])
def test_a_block_called_on_flattened_tokens_shows_their_product(fixing: str) -> None:
    """A parent that flattens its batch of sequences before calling a block (a mixture of
    experts' router): the block gets ``[B*T, 48]``, not the number the example sizes make (it
    showed ``[6, 48]``, a size that is wrong at any other batch). Checked against eager runs
    at two sizes: the router's input is ``batch × length`` tokens each time."""
    source = FLATTENED.replace(FIXING_HERE, fixing)
    mods = _capture(HEADER + source, "Router", "Moe")
    router = mods["Router"]
    assert router.inputs[0].value.shape == ["B*T", 48], router.inputs
    assert [o.shape for o in router.outputs] == [["B*T", 2], ["B*T", 2]], router.outputs
    assert mods["Moe"].outputs[0].shape == ["B", "T", 2]
    seen = _eager_inputs(
        source, lambda space: space["Moe"](space["Config"]()), "router", [(2, 5), (3, 7)],
        tokens=True,
    )  # fmt: skip
    assert seen == [(10, 48), (21, 48)]


WINDOWS = """
class Inner(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(8, 8, 3, padding=1)

    def forward(self, windows):
        return self.conv(windows)

class Windows(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 1)
        self.inner = Inner()

    def forward(self, x):
        x = self.stem(x)
        b, c, h, w = x.shape
        # fixing
        parts = x.view(b, c, 2, h // 2, 2, w // 2).permute(0, 2, 4, 1, 3, 5)
        return self.inner(parts.reshape(b * 4, c, h // 2, w // 2))
"""


@pytest.mark.parametrize(
    "fixing", ["", "        x = x[: len(range(b))]\n"], ids=["symbolic", "fixed"]
)
def test_a_block_called_on_the_windows_of_a_batch_shows_a_multiple_of_it(fixing: str) -> None:
    """A parent that cuts each image into 4 windows and calls a block on all of them (Swin's
    window attention): the block gets ``[4*B, ...]``, not 8 (eager: 4 × the batch at 2 and 3)."""
    source = WINDOWS.replace(FIXING_HERE, fixing)
    mods = _capture(HEADER + source, "Inner", "Windows")
    inner = mods["Inner"]
    (shape,) = [i.value.shape for i in inner.inputs]
    assert shape is not None and shape[0] == "4*B" and shape[1] == 8, inner.inputs
    assert inner.outputs[0].shape == shape
    seen = _eager_inputs(
        source, lambda space: space["Windows"](), "inner", [(2, 3, 32, 32), (3, 3, 32, 32)]
    )
    assert [size[0] for size in seen] == [8, 12]


def test_required_arguments_are_assumed_and_said() -> None:
    mods = _capture(
        HEADER
        + """
class Encoder(nn.Module):
    def __init__(self, rnn_type, ntoken, ninp, nlayers, dropout=0.5):
        super().__init__()
        assert rnn_type in ["LSTM", "GRU"]
        self.emb = nn.Embedding(ntoken, ninp)
        self.rnn = getattr(nn, rnn_type)(ninp, ninp, nlayers)

    def forward(self, tokens, hidden):
        out, hidden = self.rnn(self.emb(tokens), hidden)
        return out, hidden

    def init_hidden(self, bsz):
        weight = next(self.parameters())
        return (weight.new_zeros(self.rnn.num_layers, bsz, self.rnn.hidden_size),
                weight.new_zeros(self.rnn.num_layers, bsz, self.rnn.hidden_size))
""",
        "Encoder",
    )
    enc = mods["Encoder"]
    assert enc.constructed is not None and enc.constructed.source == "assumed"
    # the string comes from what __init__ compares it with, sizes from the parameter names
    assert enc.constructed.assumed == {
        "rnn_type": "'LSTM'", "ntoken": "256", "ninp": "64", "nlayers": "2"
    }  # fmt: skip
    (fx408,) = [d for d in enc.diagnostics if d.code == "FX408"]
    assert fx408.severity == "information"
    assert "init(rnn_type='LSTM', ntoken=256, ninp=64, nlayers=2)" in (fx408.fix or "")
    # token ids run sequence-first into the RNN; the state comes from init_hidden(batch)
    assert [i.name for i in enc.inputs] == ["tokens", "hidden"]
    assert enc.inputs[0].value.shape == ["T", "B"] and enc.inputs[0].value.dtype == "int64"
    assert enc.outputs[0].shape is not None and enc.outputs[0].shape[-1] == 64
    assert not [d for d in enc.diagnostics if d.severity == "error"]


def test_factory_function_and_a_block_only_another_factory_builds() -> None:
    mods = _capture(
        HEADER
        + """
class Small(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.conv = nn.Conv2d(width, width, 3, padding=1)

    def forward(self, x):
        return self.conv(x)

class Wide(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.conv = nn.Conv2d(width, width * 4, 1)
        self.back = nn.Conv2d(width * 4, width, 1)

    def forward(self, x):
        return x + self.back(self.conv(x))

class Net(nn.Module):
    def __init__(self, block, width, n):
        super().__init__()
        self.stem = nn.Conv2d(3, width, 3, padding=1)
        self.blocks = nn.Sequential(*[block(width) for _ in range(n)])

    def forward(self, x):
        return self.blocks(self.stem(x))

def _net(block, n):
    return Net(block, 16, n)

def small_net():
    return _net(Small, 2)

def wide_net():
    return _net(Wide, 3)
""",
        "Small",
        "Wide",
        "Net",
    )
    net, small, wide = mods["Net"], mods["Small"], mods["Wide"]
    assert net.constructed is not None and net.constructed.source == "factory"
    assert net.constructed.text == "small_net()"
    assert small.constructed is not None and small.constructed.source == "parent"
    assert small.inputs[0].value.shape == ["B", 16, 224, 224]
    # no parent the file captures calls Wide, but wide_net() builds one
    assert wide.constructed is not None and wide.constructed.source == "parent"
    assert wide.inputs[0].value.shape == ["B", 16, 224, 224]
    assert wide.outputs[0].shape == ["B", 16, 224, 224]


def test_inputs_of_the_files_demo_are_read_from_the_names_it_assigns() -> None:
    """vit-pytorch's ``simple_vit_1d.py`` ends with a demo that does not run when fxls runs
    the file: ``v = SimpleViT(...)``, ``time_series = torch.randn(4, 3, 256)``, ``logits =
    v(time_series)``. The input is the demo's tensor, with its batch named (``[B, 3, 256]``:
    the first layer alone, a ``Rearrange`` of ``(n p)``, says nothing, FX402), and the value
    the name holds is the one assigned last before the call. Only for an instance built as
    the demo builds it: x-transformers' ``NextLatentWrapper(model, ...)`` demo passes ids of
    its model's ``max_seq_len`` (1024), longer than the one fxls builds takes."""
    mods = _capture(
        HEADER
        + """
class Series(nn.Module):
    def __init__(self, seq_len, patch_size, dim):
        super().__init__()
        self.patch_size = patch_size
        self.proj = nn.Linear(3 * patch_size, dim)
        self.head = nn.Linear(dim, 10)

    def forward(self, series):
        b, c, n = series.shape
        x = series.reshape(b, c, n // self.patch_size, self.patch_size)
        x = x.permute(0, 2, 3, 1).flatten(2)
        return self.head(self.proj(x).mean(1))

class Embed(nn.Module):
    def __init__(self, max_len=16):
        super().__init__()
        self.tok = nn.Embedding(256, 32)
        self.pos = nn.Parameter(torch.zeros(max_len, 32))

    def forward(self, ids):
        return self.tok(ids) + self.pos[: ids.shape[1]]

if __name__ == "__main__":
    v = Series(seq_len=256, patch_size=16, dim=32)
    time_series = torch.randn(2, 3, 64)
    time_series = torch.randn(4, 3, 256)
    logits = v(time_series)
    time_series = torch.randn(4, 3, 512)
    size = 1024
    e = Embed(max_len=size)
    ids = torch.randint(0, 256, (2, 1024))
    e(ids)
""",
        "Series",
        "Embed",
    )
    series = mods["Series"]
    assert series.status == "traced", series.diagnostics
    assert series.inputs[0].value.shape == ["B", 3, 256]
    assert series.outputs[0].shape == ["B", 10]
    (fx405,) = [d for d in series.diagnostics if d.code == "FX405"]
    assert "the call at line 32" in fx405.message
    # the demo's Embed has max_len=1024, fxls's the default 16: its [2, 1024] ids do not fit
    embed = mods["Embed"]
    assert embed.status == "traced", embed.diagnostics
    assert embed.inputs[0].value.shape == ["B", "T"]
    assert embed.outputs[0].shape == ["B", "T", 32]


def test_input_size_that_runs_through_and_inputs_the_file_passes() -> None:
    mods = _capture(
        HEADER
        + """
import torch.nn.functional as F

class Mnist(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.fc1 = nn.Linear(32 * 13 * 13, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        return self.fc1(torch.flatten(x, 1))

class Probe(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(12, 4)

    def forward(self, x):
        return self.fc(x)

if __name__ == "__main__":
    print(Probe()(torch.randn(5, 7, 12)).shape)
""",
        "Mnist",
        "Probe",
    )
    mnist, probe = mods["Mnist"], mods["Probe"]
    # 224x224 does not fit fc1; 28x28 is the first size that runs through
    assert mnist.inputs[0].value.shape == ["B", 1, 28, 28] and mnist.outputs[0].shape == ["B", 10]
    assert not [d for d in mnist.diagnostics if d.code == "FX201"]
    (fx405,) = [d for d in mnist.diagnostics if d.code == "FX405"]
    assert "(B, 1, 28, 28)" in fx405.message
    # the file's own call says the input is [*, 7, 12], not the first layer's [B, 12]
    assert probe.inputs[0].value.shape == ["B", 7, 12]
    assert "the call at line" in next(d.message for d in probe.diagnostics if d.code == "FX405")


def test_nothing_works_gives_information_not_an_error() -> None:
    mods = _capture(
        HEADER
        + """
class FromCheckpoint(nn.Module):
    def __init__(self, state_dict):
        super().__init__()
        self.fc = nn.Linear(state_dict["fc.weight"].shape[1], 2)

    def forward(self, x):
        return self.fc(x)
""",
        "FromCheckpoint",
    )
    mod = mods["FromCheckpoint"]
    assert mod.status == "failed"
    (fx401,) = [d for d in mod.diagnostics if d.code == "FX401"]
    assert fx401.severity == "information"
    assert "init(state_dict=...)" in (fx401.fix or "")


def test_a_block_a_guessing_parent_feeds_wrongly_is_captured_on_its_own() -> None:
    """The parent's input is a guess (from its `LayerNorm`), and what it hands the block
    does not fit the block's first layer: the block shows its own capture, with inputs from
    that layer, instead of the parent's call that stops at a shape error (`[6, 16]` for a
    `Conv2d`, a number where the parent's `B*T` was)."""
    mods = _capture(
        HEADER
        + """
class ConvLayer(nn.Module):
    def __init__(self, cin: int, cout: int):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 1)

    def forward(self, x):
        return self.conv(x)


class Head(nn.Module):
    def __init__(self, width: int = 16):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.out = ConvLayer(width, 8)

    def forward(self, features):
        x = self.norm(features)
        return self.out(x.flatten(0, 1))
""",
        "ConvLayer",
        "Head",
    )
    head, layer = mods["Head"], mods["ConvLayer"]
    assert head.inputs[0].assumed and head.status == "partial"
    assert any(d.code == "FX201" for d in head.diagnostics)  # the parent's own stop stays
    assert layer.status == "traced", layer.diagnostics
    assert not any(d.code == "FX201" for d in layer.diagnostics), layer.diagnostics
    [x] = layer.inputs
    assert x.assumed and len(x.value.shape or []) == 4, x
    assert layer.constructed is not None and layer.constructed.source != "parent"


def test_a_call_in_another_file_of_the_workspace_builds_the_class() -> None:
    from fxls.protocol.model import KnownCall

    text = textwrap.dedent(
        HEADER
        + """
class Tagger(nn.Module):
    def __init__(self, kind, vocab, width):
        super().__init__()
        self.emb = nn.Embedding(vocab, width)
        self.out = nn.Linear(width, 7 if kind == "pos" else 3)

    def forward(self, tokens):
        return self.out(self.emb(tokens))
"""
    )
    line = next(i for i, t in enumerate(text.splitlines(), 1) if t.startswith("class Tagger"))
    request = ClassRequest("Tagger", line, call_sites=[KnownCall("'pos', 120, 24", "train.py:12")])
    job = CaptureJob(path="/virtual/model.py", source=text, classes=[request])
    (mod,) = run_capture(job, lambda *_: None).modules
    assert mod.constructed is not None and mod.constructed.source == "call site"
    assert mod.constructed.text == "Tagger('pos', 120, 24) in train.py:12"
    assert mod.constructed.pin == "'pos', 120, 24"
    assert mod.outputs[0].shape == ["B", "T", 7]
    assert not [d for d in mod.diagnostics if d.code == "FX408"]


_PARENT = """
class Block(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.fc = nn.Linear(width, width)

    def forward(self, x, scale=2.0):
        return self.fc(x) * scale

class Model(nn.Module):
    def __init__(self, width: int = 16):
        super().__init__()
        self.blocks = nn.ModuleList([Block(width) for _ in range(3)])

    def forward(self, x):
        T = x.shape[1]
        for block in self.blocks:
            x = block(x, scale=T)
        return x
"""


@pytest.fixture
def runs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The class names of the parents whose ``forward`` ran again to record their children
    (not those whose run for their own shapes recorded them: ``ran``)."""
    found: list[str] = []
    record = parents.record

    def counted(parent: Any, *args: Any, **kwargs: Any) -> Any:
        if (args[3] if len(args) > 3 else kwargs.get("ran")) is None:
            found.append(type(parent).__name__)
        return record(parent, *args, **kwargs)

    monkeypatch.setattr(parents, "record", counted)
    return found


def test_sub_blocks_are_recorded_from_the_parents_trace_or_by_running_it(
    runs: list[str],
) -> None:
    source = HEADER + _PARENT
    mods = _capture(source, "Block", "Model")
    assert not runs  # a plain trace saw every call: forward is not run again for them
    block = mods["Block"]
    assert block.constructed is not None and block.constructed.source == "parent"
    assert [i.name for i in block.inputs] == ["x", "scale"] and [
        i.origin for i in block.inputs
    ] == ["parent", "parent"]
    assert block.inputs[0].value.shape == ["B", 16]  # Model's input is assumed [B, 16]
    assert block.inputs[1].value.text == "16"  # x.shape[1], as a second run would pass it

    def with_gate(gate: str, first: bool = False) -> str:
        """The same file with a ``Gate`` (which FX cannot trace: it is kept as a leaf) called
        after the blocks, or ``first``."""
        source = (HEADER + gate + _PARENT).replace(
            "        self.blocks = nn.ModuleList(",
            "        self.gate = Gate()\n        self.blocks = nn.ModuleList(",
        )
        if first:
            return source.replace(
                "        for block", "        x = self.gate(x)\n        for block"
            )
        return source.replace("        return x\n", "        return self.gate(x)\n")

    def same_records(mods_again: dict[str, ModuleResult]) -> None:
        assert strategy_label(mods_again["Model"].strategy) == "fx+leaf"
        again = mods_again["Block"]
        assert [(i.name, i.origin) for i in again.inputs] == [
            (i.name, i.origin) for i in block.inputs
        ]
        assert [i.value.shape for i in again.inputs] == [i.value.shape for i in block.inputs]
        assert again.inputs[1].value.text == block.inputs[1].value.text
        assert again.constructed is not None and again.constructed.text == "Model.blocks.0"

    # a sub-block kept whole (its `if` reads a size: FX cannot trace it) runs its forward in
    # the parent's propagation: every other call is in the trace, whose shapes are a run's
    branches_on_a_size = """
class Gate(nn.Module):
    def forward(self, x):
        if x.shape[-1] > 4:
            return x * 2
        return -x
"""
    same_records(_capture(with_gate(branches_on_a_size), "Block", "Model"))
    assert not runs

    # a flag the trace fixes to its default (`concrete_args`): a run leaves it at its default
    # too and takes the same branch
    flagged = (HEADER + _PARENT).replace(
        "    def forward(self, x):\n        T = x.shape[1]",
        "    def forward(self, x, twice=False):\n        T = x.shape[1]\n        if twice:\n"
        "            x = x * 2",
    )
    mods_flagged = _capture(flagged, "Block", "Model")
    assert strategy_label(mods_flagged["Model"].strategy) == "fx+concrete"
    assert not runs
    assert mods_flagged["Block"].inputs == block.inputs

    # the flag declared (`twice = True`): fixed to that value in the trace and passed as it
    x = InputSpec("x", dims=[DimSpec("B", 2), DimSpec(None, 16)])
    twice = InputSpec("twice", kind="expr", expr="True")
    declared = _capture(flagged, "Block", "Model", inputs={"Model": [x, twice]})
    assert not runs
    assert declared["Block"].inputs == block.inputs

    # a sub-block kept whole whose shapes depend on values: the parent's propagation stopped
    # there, so forward runs again for the records, and they are the same
    branches_on_values = branches_on_a_size.replace("x.shape[-1] > 4", "x.sum() > 0")
    same_records(_capture(with_gate(branches_on_values), "Block", "Model"))
    assert runs == ["Model"]

    # a watched class inside the sub-block kept whole: the trace did not see that call
    runs.clear()
    holds = """
class Gate(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Block(16)

    def forward(self, x):
        if x.shape[-1] > 4:
            return self.inner(x, scale=3.0)
        return -x
"""
    mods = _capture(with_gate(holds, first=True), "Block", "Model")
    assert runs == ["Model"] and strategy_label(mods["Model"].strategy) == "fx+leaf"
    inner = mods["Block"]
    assert inner.constructed is not None and inner.constructed.text == "Model.gate.inner"
    assert inner.inputs[1].value.text == "3.0"


@pytest.fixture
def fake_runs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The class names of the modules each run on fake tensors was made of, in order."""
    found: list[str] = []
    fake_run = fakerun.fake_run

    def counted(module: Any, *args: Any, **kwargs: Any) -> Any:
        found.append(type(module).__name__)
        return fake_run(module, *args, **kwargs)

    monkeypatch.setattr(fakerun, "fake_run", counted)
    return found


@pytest.mark.parametrize(
    "line",
    [
        "if x.shape[-1] > 4:  # FX cannot trace this; a run on fake tensors can",
        "for _ in range(x.shape[0]):  # the run fixes B: the children's inputs are named again",
    ],
    ids=["branch", "fixes-B"],
)
def test_children_of_a_class_run_on_fake_tensors_are_recorded_in_that_run(
    line: str, fake_runs: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A parent FX cannot trace ran on fake tensors for its shapes: the children's calls
    are read off that run, as a second run of its ``forward`` records them."""
    source = (HEADER + _PARENT).replace(
        "            x = block(x, scale=T)",
        f"            x = block(x, scale=T)\n            {line}\n                x = x + 1",
    )
    mods = _capture(source, "Block", "Model")
    assert mods["Model"].strategy.method == "fake-run" and mods["Model"].status == "traced"
    once = fake_runs.count("Model")
    block = mods["Block"]
    assert block.constructed is not None and block.constructed.text == "Model.blocks.0"
    assert block.inputs[0].value.shape == ["B", 16]

    fake_runs.clear()
    monkeypatch.setattr(ClassCapture, "_children_ran", lambda self, watched: None)
    again = _capture(source, "Block", "Model")
    assert fake_runs.count("Model") == once + 1  # forward ran again for the records
    assert again["Block"].inputs == block.inputs
    assert again["Block"].constructed == block.constructed
    assert again["Block"].nodes == block.nodes


_INSIDE_A_LEAF = """
class Inner(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.fc = nn.Linear(width, width * 2)

    def forward(self, x, scale=1.0):
        return self.fc(x) * scale

class Gate(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Inner(16)

    def forward(self, x):
        if x.shape[-1] > 4:  # FX cannot trace this: Model keeps Gate whole
            return self.inner(x[:, 1:], scale=3.0)
        return -x

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate = Gate()

    def forward(self, x):
        return self.gate(x).relu()
"""


def test_a_class_called_only_inside_a_sub_block_kept_whole_is_recorded_by_the_propagation(
    runs: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # the propagation of Model's graph runs Gate's forward, and records the first call of
    # Inner there: what a second run of Model's forward records
    source = HEADER + _INSIDE_A_LEAF
    x = InputSpec("x", dims=[DimSpec("B", 2), DimSpec("T", 5), DimSpec(None, 16)])
    names = ("Inner", "Gate", "Model")  # Gate, which builds Inner: Model is captured first
    mods = _capture(source, *names, inputs={"Model": [x]})
    assert not runs and strategy_label(mods["Model"].strategy) == "fx+leaf"
    inner = mods["Inner"]
    assert inner.constructed is not None and inner.constructed.text == "Model.gate.inner"
    assert [(i.name, i.origin) for i in inner.inputs] == [("x", "parent"), ("scale", "parent")]
    assert inner.inputs[0].value.shape == ["B", 4, 16]  # a size keeps a name, not a formula
    assert inner.inputs[1].value.text == "3.0"

    def shown(mod: ModuleResult) -> Any:
        return (mod.inputs, [(n.name, [v.shape for v in n.outputs]) for n in mod.nodes])

    ran = _capture(source, *names, inputs={"Model": [x]}, children_from_trace=False)
    assert runs == ["Model"] and shown(ran["Inner"]) == shown(inner)
    # without the job's kept runs nothing watches the propagation: forward runs again
    runs.clear()
    monkeypatch.setenv(keptruns.KEPT_RUNS_ENV, "0")
    again = _capture(source, *names, inputs={"Model": [x]})
    assert runs == ["Model"] and shown(again["Inner"]) == shown(inner)


def test_a_class_the_parent_builds_and_never_calls_needs_no_second_run(runs: list[str]) -> None:
    # the trace saw no call of Spare (an instance of Model's, none inside a submodule kept
    # whole): a run of Model's forward does not call it either
    source = (
        (HEADER + _PARENT)
        .replace(
            "class Model(nn.Module):",
            "class Spare(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
            "        self.fc = nn.Linear(16, 4)\n\n    def forward(self, x):\n"
            "        return self.fc(x)\n\nclass Model(nn.Module):",
        )
        .replace(
            "        self.blocks = nn.ModuleList(",
            "        self.spare = Spare()\n        self.blocks = nn.ModuleList(",
        )
    )
    mods = _capture(source, "Block", "Spare", "Model")
    assert not runs
    ran = _capture(source, "Block", "Spare", "Model", children_from_trace=False)
    assert runs and set(runs) == {"Model"}
    for name in ("Block", "Spare"):
        assert mods[name].inputs == ran[name].inputs
        assert mods[name].constructed == ran[name].constructed
    assert mods["Block"].constructed is not None
    assert mods["Block"].constructed.text == "Model.blocks.0"


def test_a_class_a_sub_block_kept_whole_holds_and_never_calls_needs_no_second_run(
    runs: list[str],
) -> None:
    # Gate (kept whole) takes the branch without Inner at these sizes: the propagation ran
    # Gate's forward watching Inner and saw no call, so a run of Model's forward makes none
    source = HEADER + _INSIDE_A_LEAF.replace("x.shape[-1] > 4", "x.shape[-1] > 64")
    x = InputSpec("x", dims=[DimSpec("B", 2), DimSpec("T", 5), DimSpec(None, 16)])
    names = ("Inner", "Gate", "Model")
    mods = _capture(source, *names, inputs={"Model": [x]})
    assert not runs and strategy_label(mods["Model"].strategy) == "fx+leaf"
    ran = _capture(source, *names, inputs={"Model": [x]}, children_from_trace=False)
    assert runs and set(runs) == {"Model"}
    for name in names:
        assert mods[name].inputs == ran[name].inputs
        assert mods[name].constructed == ran[name].constructed
        assert mods[name].nodes == ran[name].nodes

    # Gate calls an Inner that is not one of its submodules (Model's own, handed to it): the
    # watch on Gate's submodules does not see that call, so Model's forward runs again
    runs.clear()
    handed = (
        (HEADER + _INSIDE_A_LEAF)
        .replace("    def __init__(self):\n        super().__init__()\n        self.inner", (
            "    def __init__(self, other):\n        super().__init__()\n"
            "        object.__setattr__(self, 'other', other)\n        self.inner"
        ))
        .replace("self.inner(x[:, 1:], scale=3.0)", "self.other(x[:, 1:], scale=3.0)")
        .replace("        self.gate = Gate()", "        self.shared = Inner(16)\n        self.gate = Gate(self.shared)")
    )  # fmt: skip
    mods = _capture(handed, *names, inputs={"Model": [x]})
    assert runs and set(runs) == {"Model"}
    assert strategy_label(mods["Model"].strategy) == "fx+leaf"
    inner = mods["Inner"]
    assert inner.constructed is not None and inner.constructed.text == "Model.shared"
    assert inner.inputs[0].value.shape == ["B", 4, 16]


def test_the_watch_inside_a_submodule_kept_whole_knows_when_it_saw_every_call() -> None:
    import torch
    from torch import nn

    gate = nn.Sequential(nn.Linear(2, 2), nn.Sequential(nn.Linear(2, 2)))
    watch = parents.InnerCalls({nn.Linear, nn.ReLU})
    with watch.around(gate):
        gate(torch.zeros(1, 2))
    assert set(watch.calls) == {nn.Linear} and not watch.blind  # no ReLU was called
    assert watch.calls[nn.Linear][0] is gate[0]
    with watch.around(gate):
        pass  # its output copied from a kept run: forward did not run
    assert watch.blind
    handed = parents.InnerCalls({nn.ReLU})
    outside = nn.ReLU()
    with handed.around(gate):
        outside(torch.zeros(1))  # an instance that is no submodule of the one running
    assert handed.blind


def test_a_sub_block_called_inside_a_torch_module_is_recorded_where_a_run_sees_it_first(
    runs: list[str],
) -> None:
    # a module of torch.nn (nn.TransformerEncoder calls the layers it is given) is kept whole
    # by the trace and by a run of forward alike: both record the first call outside it
    source = (
        HEADER
        + """
class Layer(nn.Module):
    def __init__(self, width: int = 16):
        super().__init__()
        self.fc = nn.Linear(width, width)

    def forward(self, x):
        return self.fc(x).relu()

class Container(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = Layer()

    def forward(self, x):
        return self.layer(x) * 2

Container.__module__ = "torch.nn.modules.container_of_layers"

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.wrapped = Container()
        self.extra = Layer()

    def forward(self, x):
        return self.extra(self.wrapped(x)[:, :3])
"""
    )
    x = InputSpec("x", dims=[DimSpec("B", 2), DimSpec("T", 5), DimSpec(None, 16)])
    traced = _capture(source, "Layer", "Model", inputs={"Model": [x]})["Layer"]
    assert not runs
    ran = _capture(source, "Layer", "Model", inputs={"Model": [x]}, children_from_trace=False)
    assert runs == ["Model"]
    for layer in (traced, ran["Layer"]):
        assert layer.constructed is not None and layer.constructed.text == "Model.extra"
        assert layer.inputs[0].value.shape == ["B", 3, 16]


DEVICES = (
    HEADER
    + """

class Block(nn.Module):
    def __init__(self, dim: int = 8, device: str = "cpu"):
        super().__init__()
        self.proj = nn.Linear(dim, dim, device=device)
        self.register_buffer("mask", torch.tril(torch.ones(16, 16, device=device)))
        self.scale = torch.ones(dim).to(device)
        self.bias = torch.zeros(dim).cpu()

    def forward(self, x):
        x = self.proj(x)
        T = x.size(1)
        att = (x @ x.transpose(-2, -1)).masked_fill(self.mask[:T, :T] == 0, float("-inf"))
        return (att.softmax(-1) @ x) * self.scale + self.bias
"""
)


def test_devices_the_code_names_are_meta_in_the_build() -> None:
    """``device="cpu"`` in layers and factories, ``.to(device)`` and ``.cpu()``: the build
    stays on meta (no real memory, no FX406), and the module has no tensor on another device
    to clash with (minGPT-ddp's ``Block`` had FX201 "two devices, meta and cpu")."""
    mod = _capture(DEVICES, "Block")["Block"]
    assert mod.build == "meta", mod.build
    assert mod.status == "traced", (mod.status, [d.message for d in mod.diagnostics])
    assert not [d for d in mod.diagnostics if d.code in ("FX406", "FX201")]
    assert mod.outputs[0].shape == ["B", "T", 8]


def test_a_drop_path_schedule_read_in_init_keeps_the_build_on_meta() -> None:
    """``[x.item() for x in torch.linspace(0, rate, depth)]`` and ``.tolist()`` of its chunks
    (Swin, ConvNeXt, DaViT): the ranges are made with their values and the rest stays on meta,
    instead of a CPU build with real weights (Florence-2's ran out of the 2 GB job limit)."""
    mod = _capture(
        HEADER
        + """
class Stage(nn.Module):
    def __init__(self, depths=(2, 2), drop_path_rate: float = 0.2, width: int = 64):
        super().__init__()
        rates = [x.item() for x in torch.linspace(0, drop_path_rate, sum(depths))]
        per_stage = [c.tolist() for c in torch.linspace(0, 1, sum(depths), device="cpu").split(list(depths))]
        self.rates = rates + [r for stage in per_stage for r in stage]
        self.blocks = nn.ModuleList(nn.Linear(width, width) for _ in rates)
        self.register_buffer("steps", torch.arange(len(rates)))

    def forward(self, x):
        for block, rate in zip(self.blocks, self.rates):
            x = x + block(x) * (1 - rate)
        return x * self.steps.numel()
""",
        "Stage",
    )["Stage"]
    assert mod.build == "meta", [d.message for d in mod.diagnostics]
    assert not [d for d in mod.diagnostics if d.code == "FX406"]
    assert mod.status == "traced" and mod.outputs[0].shape == ["B", 64]


LSTM_MODEL = (
    HEADER
    + """

class RNNModel(nn.Module):
    def __init__(self, ntoken: int = 50, ninp: int = 16, nhid: int = 16, nlayers: int = 2):
        super().__init__()
        self.nhid, self.nlayers = nhid, nlayers
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.LSTM(ninp, nhid, nlayers)
        self.decoder = nn.Linear(nhid, ntoken)

    def forward(self, input, hidden):
        output, hidden = self.rnn(self.encoder(input), hidden)
        return self.decoder(output), hidden

    def init_hidden(self, bsz):
        weight = next(self.parameters())
        return (weight.new_zeros(self.nlayers, bsz, self.nhid),
                weight.new_zeros(self.nlayers, bsz, self.nhid))
"""
)


def test_a_suggested_directive_for_a_tuple_of_tensors_works_when_pasted() -> None:
    """The LSTM state fxls made with ``init_hidden`` is suggested as an expression
    (``hidden = (torch.zeros(2, 2, 16), torch.zeros(2, 2, 16))``), not as shapes that would
    read as one tensor's; written above the class, it is what the capture runs with."""
    mod = _capture(LSTM_MODEL, "RNNModel")["RNNModel"]
    (fx405,) = [d for d in mod.diagnostics if d.code == "FX405" and d.data["arg"] == "hidden"]
    assert fx405.fix is not None
    directive = fx405.fix.split("`# fxls: ", 1)[1].split("`", 1)[0]
    assert directive == "hidden = (torch.zeros(2, 2, 16), torch.zeros(2, 2, 16))", fx405.fix
    pasted = textwrap.dedent(LSTM_MODEL).replace(
        "class RNNModel", f"# fxls: {directive}\nclass RNNModel"
    )
    from fxls.analysis import parse
    from fxls.engine.analyze import build_requests

    requests = build_requests(parse(pasted).classes)  # the directive as the server reads it
    assert [s.name for s in requests[0].inputs] == ["hidden"], requests[0].inputs
    job = CaptureJob(path="/virtual/model.py", source=pasted, classes=requests)
    (again,) = run_capture(job, lambda *_: None).modules
    assert not [d for d in again.diagnostics if d.code == "FX405" and d.data["arg"] == "hidden"]
    assert [i.name for i in again.inputs][:2] == ["input", "hidden"], [i.name for i in again.inputs]
    assert again.status == "traced", [d.message for d in again.diagnostics]


LOCAL_VIT = (
    HEADER
    + """
from math import sqrt


class Residual(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x) + x


class FeedForward(nn.Module):
    def __init__(self, dim: int = 16):
        super().__init__()
        self.net = nn.Sequential(nn.LayerNorm(dim), nn.Conv2d(dim, dim, 1))

    def forward(self, x):
        h = w = int(sqrt(x.shape[-2]))
        x = x.transpose(1, 2).reshape(x.shape[0], -1, h, w)
        x = self.net(x)
        return x.flatten(2).transpose(1, 2)


class Model(nn.Module):
    def __init__(self, dim: int = 16):
        super().__init__()
        self.embed = nn.Linear(dim, dim)
        self.blocks = nn.Sequential(Residual(FeedForward(dim)), Residual(FeedForward(dim)))

    def forward(self, tokens):
        return self.blocks(self.embed(tokens))
"""
)


def test_a_shape_error_inside_a_block_is_reported_once_where_it_happens() -> None:
    """The LayerNorm of ``FeedForward`` sees ``[B, C, H, W]`` (vit-pytorch's LocalViT): one
    FX201, at ``self.net(x)`` in ``FeedForward``, found by running it on fake tensors after
    FX stopped at ``int(sqrt(...))`` — not again at every parent's call of the block."""
    found = _capture(LOCAL_VIT, "Residual", "FeedForward", "Model")
    text = textwrap.dedent(LOCAL_VIT).splitlines()
    where = next(i for i, t in enumerate(text, 1) if "x = self.net(x)" in t)
    reports = [(m.name, d) for m in found.values() for d in m.diagnostics if d.code == "FX201"]
    assert [(name, d.span.line) for name, d in reports] == [("FeedForward", where)], [
        (name, d.span.line, d.message) for name, d in reports
    ]
    assert "normalized_shape" in reports[0][1].message
    assert found["FeedForward"].status == "partial"


def test_a_wrapper_is_built_as_its_parent_builds_it_before_fxls_guesses() -> None:
    """``PreNorm(dim, fn)`` needs a callable fxls cannot guess: the instance its parent holds
    (with ``fn`` a real layer) is captured, though the parent's own inputs are unknown and
    the file's order does not show that the parent builds it (a helper function does)."""
    mods = _capture(
        HEADER
        + """
class PreNorm(nn.Module):
    def __init__(self, dim, fn):
        super().__init__()
        self.fn = fn
        self.norm = nn.LayerNorm(dim)

    def forward(self, x, **kwargs):
        return self.fn(self.norm(x), **kwargs)

def wrapped(dim):
    return PreNorm(dim, nn.Linear(dim, 2 * dim))

class Perceiver(nn.Module):
    def __init__(self, dim, depth):
        super().__init__()
        self.layers = nn.ModuleList([wrapped(dim) for _ in range(depth)])

    def forward(self, data):
        b, *axis, d = *data.shape, data.device
        for layer in self.layers:
            data = layer(data)
        return data
""",
        "PreNorm",
        "Perceiver",
    )
    pre = mods["PreNorm"]
    assert pre.constructed is not None and pre.constructed.source == "parent", pre.constructed
    assert pre.constructed.text == "Perceiver.layers.0"
    (x,) = pre.inputs
    (out,) = pre.outputs
    assert x.value.shape is not None and out.shape is not None, (x, out)
    dim = x.value.shape[-1]
    assert isinstance(dim, int) and out.shape[-1] == 2 * dim, (x, out)  # through `fn`, a Linear
    assert not [d for d in pre.diagnostics if d.severity in ("error", "warning")], pre.diagnostics


def test_a_list_in_a_union_annotation_gets_per_stage_guesses() -> None:
    """``levels: list[int] | tuple[int, ...]`` (PEP 604) is guessed like ``list[int]``: the class
    builds instead of "fxls found no way to call its constructor"."""
    mods = _capture(
        HEADER
        + """
class Quantize(nn.Module):
    def __init__(self, levels: list[int] | tuple[int, ...], scale: float | None = None):
        super().__init__()
        self.proj = nn.Linear(len(levels), len(levels))

    def forward(self, z):
        return self.proj(z).tanh()
""",
        "Quantize",
    )
    mod = mods["Quantize"]
    assert mod.constructed is not None and "levels=[" in mod.constructed.text, mod.diagnostics
    assert mod.status == "traced" and mod.outputs, mod.diagnostics


def test_a_wrapper_nothing_in_the_file_builds_wraps_an_identity() -> None:
    """``PreNormResidual(dim, fn)`` that only a function with required arguments builds (as
    in mlp-mixer): ``fn`` is kept and called by ``forward``, so fxls wraps ``nn.Identity()``
    (said in FX408 and its directive) instead of the int ``64`` ("'int' object is not
    callable"). A parameter called in ``__init__`` itself is not taken for a wrapped module."""
    mods = _capture(
        HEADER
        + """
class PreNormResidual(nn.Module):
    def __init__(self, dim, fn):
        super().__init__()
        self.fn = fn
        self.norm = nn.LayerNorm(dim)

    def forward(self, x):
        return self.fn(self.norm(x)) + x

class Stem(nn.Module):
    def __init__(self, dim, fn):
        super().__init__()
        self.proj = nn.Linear(dim, fn)

    def forward(self, x):
        return self.proj(x)

def MLPMixer(*, dim, depth):
    return nn.Sequential(*[PreNormResidual(dim, nn.Linear(dim, dim)) for _ in range(depth)])
""",
        "PreNormResidual",
        "Stem",
    )
    pre = mods["PreNormResidual"]
    assert pre.status == "traced", (pre.status, pre.diagnostics)
    assert pre.constructed is not None and pre.constructed.assumed == {
        "dim": "64", "fn": "nn.Identity()"
    }, pre.constructed  # fmt: skip
    (fx408,) = [d for d in pre.diagnostics if d.code == "FX408"]
    assert "init(dim=64, fn=nn.Identity())" in (fx408.fix or ""), fx408.fix
    assert pre.outputs[0].shape is not None and pre.outputs[0].shape[-1] == 64, pre.outputs
    assert not [d for d in pre.diagnostics if d.severity in ("error", "warning")], pre.diagnostics
    stem = mods["Stem"]
    assert stem.constructed is not None and stem.constructed.assumed is not None
    assert stem.constructed.assumed["fn"] != "nn.Identity()", stem.constructed


def test_parameters_a_failed_build_names_are_guessed_and_tried_again() -> None:
    """x-transformers' layers: ``Decoder(**kwargs)`` passes everything on to
    ``AttentionLayers.__init__(dim, depth=None, ...)``, which refuses ``depth=None``. Built
    with no arguments, ``Decoder`` failed with "missing 1 required positional argument:
    'dim'"; the parameters each failure names (a base's required one, then one left at its
    ``None`` default) are guessed and the build tried again: ``dim=64, depth=2``, said in
    FX408 and its directive. A name quoted in an error that is no parameter, or whose default
    is not ``None``, is left alone (``Strict`` still fails, with its own message)."""
    mods = _capture(
        HEADER
        + """
class AttentionLayers(nn.Module):
    def __init__(self, dim, depth=None, heads=4, causal=False):
        super().__init__()
        assert depth is not None, "`depth` must be passed in for `Decoder` or `Encoder`"
        self.causal = causal
        self.layers = nn.ModuleList([nn.Linear(dim, dim) for _ in range(depth)])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x

class Decoder(AttentionLayers):
    def __init__(self, **kwargs):
        assert "causal" not in kwargs, "cannot set causality on decoder"
        super().__init__(causal=True, **kwargs)

class Strict(nn.Module):
    def __init__(self, dim, heads=4):
        super().__init__()
        assert heads == 3, "`heads` must be 3"
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        return self.proj(x)
""",
        "AttentionLayers",
        "Decoder",
        "Strict",
    )
    for name in ("AttentionLayers", "Decoder"):
        mod = mods[name]
        assert mod.constructed is not None and mod.constructed.assumed == {
            "dim": "64", "depth": "2"
        }, (name, mod.constructed, mod.diagnostics)  # fmt: skip
        assert mod.status == "traced", (name, mod.status, mod.diagnostics)
        assert mod.outputs[0].shape is not None and mod.outputs[0].shape[-1] == 64, mod.outputs
        (fx408,) = [d for d in mod.diagnostics if d.code == "FX408"]
        assert "init(dim=64, depth=2)" in (fx408.fix or ""), fx408.fix
    strict = mods["Strict"]
    (fx401,) = [d for d in strict.diagnostics if d.code == "FX401"]
    assert "`heads` must be 3" in fx401.message, fx401.message


def test_a_parameter_annotated_with_a_module_class_gets_one_built() -> None:
    """x-transformers' ``TransformerWrapper(*, num_tokens, max_seq_len, attn_layers:
    AttentionLayers)``: the annotated class is built by its own recipes (here repaired to
    ``dim=64, depth=2``) and passed in; the class was "could not be built" (``attn_layers``
    was given the file's ``LayerNorm`` class, a name alike). The hover's text and the directive
    name the nested build; the shapes follow the token ids through it."""
    mods = _capture(
        HEADER
        + """
class LayerNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.ln = nn.LayerNorm(dim)

    def forward(self, x):
        return self.ln(x)

class AttentionLayers(nn.Module):
    def __init__(self, dim, depth=None):
        super().__init__()
        assert depth is not None, "`depth` must be passed in"
        self.dim = dim
        self.layers = nn.ModuleList([nn.Linear(dim, dim) for _ in range(depth)])
        self.norm = LayerNorm(dim)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.norm(x)

class TransformerWrapper(nn.Module):
    def __init__(self, *, num_tokens, max_seq_len, attn_layers: AttentionLayers):
        super().__init__()
        dim = attn_layers.dim
        self.token_emb = nn.Embedding(num_tokens, dim)
        self.attn_layers = attn_layers
        self.to_logits = nn.Linear(dim, num_tokens)

    def forward(self, x):
        return self.to_logits(self.attn_layers(self.token_emb(x)))
""",
        "TransformerWrapper",
    )
    wrapper = mods["TransformerWrapper"]
    assert wrapper.status == "traced", (wrapper.status, wrapper.diagnostics)
    assert wrapper.constructed is not None and wrapper.constructed.assumed == {
        "num_tokens": "256", "max_seq_len": "16", "attn_layers": "AttentionLayers(dim=64, depth=2)"
    }, wrapper.constructed  # fmt: skip
    (fx408,) = [d for d in wrapper.diagnostics if d.code == "FX408"]
    assert "attn_layers=AttentionLayers(dim=64, depth=2)" in (fx408.fix or ""), fx408.fix
    assert [o.shape for o in wrapper.outputs] == [["B", "T", 256]], wrapper.outputs


def test_a_wrapped_module_annotated_as_any_module_wraps_an_identity() -> None:
    """``LayerScale(fn: Module, dim)`` (as in x-transformers): the annotation says only that
    ``fn`` is a module, so it wraps ``nn.Identity()`` as an unannotated one does; the class
    failed with "fxls found no way to call its constructor"."""
    mods = _capture(
        HEADER
        + """
from torch.nn import Module

class LayerScale(Module):
    def __init__(self, fn: Module, dim, init_value=0.0):
        super().__init__()
        self.fn = fn
        self.gamma = nn.Parameter(torch.zeros(dim))

    def forward(self, x, **kwargs):
        return self.fn(x, **kwargs) * self.gamma
""",
        "LayerScale",
    )
    scale = mods["LayerScale"]
    assert scale.constructed is not None and scale.constructed.assumed == {
        "fn": "nn.Identity()", "dim": "64"
    }, scale.constructed  # fmt: skip
    # what ``x`` is, nothing says (an identity times a vector of 64): asked for, not guessed
    assert [d.code for d in scale.diagnostics if d.code.startswith("FX40")] == ["FX408", "FX402"]


def test_a_kept_activation_annotated_callable_is_an_identity() -> None:
    """``GLU(dim_in, dim_out, activation: Callable)`` (as in x-transformers) keeps
    ``activation`` and calls it on the gate: any function or module will do for shapes, so it
    is given ``nn.Identity()`` as a module annotated ``nn.Module`` is (the class failed with
    "fxls found no way to call its constructor")."""
    mods = _capture(
        HEADER
        + """
from typing import Callable

class GLU(nn.Module):
    def __init__(self, dim_in, dim_out, activation: Callable):
        super().__init__()
        self.act = activation
        self.proj = nn.Linear(dim_in, dim_out * 2)

    def forward(self, x):
        x, gate = self.proj(x).chunk(2, dim=-1)
        return x * self.act(gate)
""",
        "GLU",
    )
    assumed = {"dim_in": "64", "dim_out": "64", "activation": "nn.Identity()"}
    _assert_traced_as(mods["GLU"], assumed, [["B", 64]])


def _assert_traced_as(mod: ModuleResult, assumed: dict[str, str], shapes: list[object]) -> None:
    """``mod`` built with the ``assumed`` arguments, traced, its outputs of ``shapes``."""
    assert mod.status == "traced", (mod.status, mod.diagnostics)
    assert mod.constructed is not None and mod.constructed.assumed == assumed, mod.constructed
    assert [o.shape for o in mod.outputs] == shapes, mod.outputs


def test_a_count_the_constructor_wants_as_a_tuple_is_given_one_per_stage() -> None:
    """``MaxViT(..., depth)`` asserts ``isinstance(depth, tuple)`` with "depth needs to be
    tuple if integers indicating number of transformer blocks at that stage" (vit-pytorch's
    MaxViT, PiT, SepViT): the guessed ``depth=2`` is tried again as one count per stage,
    ``(2, 2)``, and the class is built and traced (it failed with the assertion)."""
    mods = _capture(
        HEADER
        + """
class Staged(nn.Module):
    def __init__(self, dim, depth, num_classes):
        super().__init__()
        assert isinstance(depth, tuple), "depth needs to be tuple if integers indicating number of blocks at that stage"
        self.stages = nn.ModuleList(
            [nn.Sequential(*[nn.Linear(dim, dim) for _ in range(n)]) for n in depth]
        )
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x):
        for stage in self.stages:
            x = stage(x)
        return self.head(x)
""",
        "Staged",
    )
    assumed = {"dim": "64", "depth": "(2, 2)", "num_classes": "10"}
    _assert_traced_as(mods["Staged"], assumed, [["B", 10]])


def test_guessed_numbers_a_constructor_needs_as_sequences_are_given_as_long_as_it_wants() -> None:
    """MobileViT-style: ``len(dims)``, ``ih, iw = image_size`` and ``init, *_, last =
    channels`` stop a build with guessed ints ("object of type 'int' has no len()", "cannot
    unpack non-iterable int object"). Each is tried again as a sequence of the guess, as long
    as ``__init__`` asserts (``assert len(dims) == 3``) or indexes it (``channels[4]``: five),
    and the class is built and traced (it failed with FX401). Only the value the failing
    call read changes: ``len(tokens_per_depth)`` in ``assert len(tokens_per_depth) == depth``
    (ats_vit) leaves ``depth`` a count."""
    mods = _capture(
        HEADER
        + """
class Staged(nn.Module):
    def __init__(self, image_size, dims, channels, num_classes, depth, tokens_per_depth):
        super().__init__()
        assert len(dims) == 3, "dims must be a tuple of 3"
        assert len(tokens_per_depth) == depth, "one count per layer"
        ih, iw = image_size
        first, *_, last = channels
        self.stem = nn.Conv2d(3, first, 3, padding=1)
        self.mid = nn.Conv2d(channels[0], channels[4], 1)
        self.proj = nn.Linear(channels[4], dims[2])
        self.head = nn.Linear(dims[2], num_classes)
        self.size = ih * iw

    def forward(self, x):
        x = self.mid(self.stem(x)).mean(dim=(2, 3))
        return self.head(self.proj(x))
""",
        "Staged",
    )
    assumed = {"image_size": "(32, 32)", "dims": "(64, 64, 64)",
               "channels": "(64, 64, 64, 64, 64)", "num_classes": "10", "depth": "2",
               "tokens_per_depth": "(2, 2)"}  # fmt: skip
    _assert_traced_as(mods["Staged"], assumed, [["B", 10]])


def test_a_none_default_the_failing_statement_reads_is_given_a_guess() -> None:
    """``float(drop_prob)`` with ``drop_prob=None`` (vit-pytorch's ``DropPath``), and an
    ``assert`` of ``exists(depth) and exists(heads)`` with both ``None`` (``T2TViT``), here
    stopped at its last condition, ``pos == "none"`` (``cct_3d``'s ``TransformerClassifier``):
    the parameters the failing statement reads as ``None`` are guessed, and the classes build
    (both failed with FX401)."""
    mods = _capture(
        HEADER
        + """
def exists(v):
    return v is not None


class Drop(nn.Module):
    def __init__(self, drop_prob=None):
        super().__init__()
        self.drop_prob = float(drop_prob)
        self.proj = nn.Linear(16, 16)

    def forward(self, x):
        return self.proj(x) * (1 - self.drop_prob)


class Deep(nn.Module):
    def __init__(self, dim=32, depth=None, heads=None, pos="sine"):
        super().__init__()
        assert (exists(depth) and exists(heads)) or pos == "none", "depth and heads, or no pos"
        self.layers = nn.Sequential(*[nn.Linear(dim, dim) for _ in range(depth)])

    def forward(self, x):
        return self.layers(x)
""",
        "Drop",
        "Deep",
    )
    _assert_traced_as(mods["Drop"], {"drop_prob": "0.0"}, [["B", 16]])
    _assert_traced_as(mods["Deep"], {"depth": "2", "heads": "4"}, [["B", 32]])


def test_a_video_input_is_a_clip_of_the_frames_and_image_size_the_build_names() -> None:
    """vit-pytorch's ``ViT`` for video (``vit_3d.py``): ``forward(self, video)`` starts with
    ``Rearrange('b c (f pf) (h p1) (w p2) -> ...')``, which says nothing of the input
    (FX402). The build names ``image_size`` and ``frames`` (guessed 32 and 16): the input is a
    clip of them, ``(B, 3, 16, 32, 32)``, channels before frames as ``Conv3d`` takes it."""
    mods = _capture(
        HEADER
        + """
class Video(nn.Module):
    def __init__(self, *, image_size, frames, channels=3, dim=32):
        super().__init__()
        self.patch = nn.Conv3d(channels, dim, kernel_size=(2, 8, 8), stride=(2, 8, 8))
        self.pos = nn.Parameter(torch.zeros(1, dim, frames // 2, image_size // 8, image_size // 8))
        self.head = nn.Linear(dim, 10)

    def forward(self, video):
        x = video.reshape(video.shape[0], video.shape[1], video.shape[2], -1)
        x = x.reshape(video.shape)
        return self.head((self.patch(x) + self.pos).flatten(2).mean(-1))
""",
        "Video",
    )
    video = mods["Video"]
    _assert_traced_as(video, {"image_size": "32", "frames": "16"}, [["B", 10]])
    assert video.inputs[0].value.shape == ["B", 3, 16, 32, 32]
    (fx405,) = [d for d in video.diagnostics if d.code == "FX405"]
    assert "16 frames of image size 32 of the build" in fx405.message


def test_a_count_of_levels_is_guessed_small() -> None:
    """NesT's ``num_hierarchies`` and ``block_repeats`` are counts: guessed as a depth is
    (2), not as a width (64, which made ``2 ** 63`` blocks: "Storage size calculation
    overflowed", FX401)."""
    mods = _capture(
        HEADER
        + """
class Levels(nn.Module):
    def __init__(self, dim, num_hierarchies, block_repeats):
        super().__init__()
        blocks = 2 ** (num_hierarchies - 1)
        self.pool = nn.Parameter(torch.zeros(blocks, dim))
        self.layers = nn.Sequential(*[nn.Linear(dim, dim) for _ in range(block_repeats)])

    def forward(self, x):
        return self.layers(x) + self.pool.sum(0)
""",
        "Levels",
    )
    assumed = {"dim": "64", "num_hierarchies": "2", "block_repeats": "2"}
    _assert_traced_as(mods["Levels"], assumed, [["B", 64]])


ADA_NORM_BLOCK = """
import torch
import torch.nn.functional as F
from torch import nn


class AdaNorm(nn.Module):
    def __init__(self, channels, emb):
        super().__init__()
        self.linear = nn.Linear(emb, channels * 2)

    def forward(self, x, emb):
        emb = self.linear(emb)[:, :, None, None]
        scale, shift = emb.chunk(2, dim=1)
        x = F.group_norm(x, 4)
        return x * (1 + scale) + shift


class Block(nn.Module):
    def __init__(self, channels=32, emb=16):
        super().__init__()
        self.norm = AdaNorm(channels, emb)
        self.act = nn.SiLU()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, hidden_states, temb):
        h = self.norm(hidden_states, temb)
        return self.conv(self.act(h))
"""


def test_an_input_normalized_by_functions_is_shaped_for_the_layer_it_reaches() -> None:
    """diffusers' ``AdaGroupNorm``: ``hidden_states`` reaches ``F.group_norm``, arithmetic
    and an activation before ``conv``. It is assumed an image of ``conv``'s channels, not shaped
    like ``temb`` (which made ``x * (1 + scale)`` broadcast to ``[B, 32, B, 32]``)."""
    block = _capture(ADA_NORM_BLOCK, "Block")["Block"]
    shapes = {i.name: i.value.shape for i in block.inputs}
    assert shapes == {"hidden_states": ["B", 32, 224, 224], "temb": ["B", 16]}, shapes
    assert block.outputs[0].shape == ["B", 32, 224, 224]
    (fx405,) = [d for d in block.diagnostics if d.code == "FX405" and "hidden" in d.message]
    assert "conv" in fx405.message


PARENT_AND_CHILD = """
    import torch.nn as nn

    # fxls: x = (B=2, 4)
    class Other(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x):
            return self.fc(x)

    # fxls: x = (B=2, 4)
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = Inner()

        def forward(self, x):
            return self.inner(x) * 2

    class Inner(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 8)

        def forward(self, x):
            return self.fc(x)
"""


def test_a_job_out_of_cpu_time_leaves_a_class_with_the_parent_it_is_captured_from(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The CPU limit falls while ``Inner`` is captured, after ``Net`` (which calls it, and
    whose capture recorded the instance ``Inner`` is captured from) and ``Other``: ``Other``
    is sent, ``Net`` and ``Inner`` are left to the next job together, which captures them as
    the whole job would have (``Inner`` from ``Net``'s instance)."""
    from fxls.worker.capture import cpulimit, pipeline

    real = pipeline.capture_class

    def limited(doc: Any, req: ClassRequest, *args: Any, **kwargs: Any) -> ModuleResult:
        if req.name == "Inner":
            raise cpulimit.OutOfCpu
        return real(doc, req, *args, **kwargs)

    text = textwrap.dedent(PARENT_AND_CHILD)
    lines = text.splitlines()
    requests = [
        ClassRequest(name, next(i for i, t in enumerate(lines, 1) if t.startswith(f"class {name}")))
        for name in ("Other", "Net", "Inner")
    ]
    job = CaptureJob(path="/virtual/model.py", source=text, classes=requests)
    monkeypatch.setattr(pipeline, "capture_class", limited)
    result = run_capture(job, lambda *_: None)
    assert [m.name for m in result.modules] == ["Other"]
    assert result.unfinished == ["Net", "Inner"]
    monkeypatch.setattr(pipeline, "capture_class", real)
    rest = CaptureJob(path="/virtual/model.py", source=text, classes=requests[1:])
    whole = CaptureJob(path="/virtual/model.py", source=text, classes=requests)
    again = {m.name: m for m in run_capture(rest, lambda *_: None).modules}
    at_once = {m.name: m for m in run_capture(whole, lambda *_: None).modules}
    assert again["Inner"].constructed is not None
    assert again["Inner"].constructed.source == "parent"
    for name in ("Net", "Inner"):
        assert again[name].outputs == at_once[name].outputs, name
        assert again[name].inputs == at_once[name].inputs, name


def test_a_layer_index_is_guessed_as_the_first_layer() -> None:
    """``layer_idx`` says which layer of a stack a block is: fxls builds the first (``0``),
    not a 64th of a stack of two (which FX408 then showed as ``layer_idx=64``)."""
    mods = _capture(
        HEADER
        + """
class Layer(nn.Module):
    def __init__(self, dim, layer_idx):
        super().__init__()
        self.layer_idx = layer_idx
        self.fc = nn.Linear(dim, dim)

    def forward(self, x):
        return self.fc(x)
""",
        "Layer",
    )
    layer = mods["Layer"]
    assert layer.constructed is not None
    assert layer.constructed.assumed == {"dim": "64", "layer_idx": "0"}
    (fx408,) = [d for d in layer.diagnostics if d.code == "FX408"]
    assert "layer_idx=0" in fx408.message
