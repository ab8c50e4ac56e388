"""A submodule kept whole is run once per job for every class that calls it alike.

Each case runs the real capture (``run_capture``) of a small file whose head classes keep the
same base model whole (its ``forward`` cannot be traced by FX) and compares what is shown
with the same capture where every call runs (``FXLS_KEPT_RUNS=0``).
"""

from __future__ import annotations

import textwrap
from typing import Any

import pytest
import torch

from fxls.protocol.model import CaptureJob, ClassRequest, DimSpec, InputSpec, ModuleResult
from fxls.worker.capture.build import parents
from fxls.worker.capture.pipeline import run_capture
from fxls.worker.capture.shapes import keptruns
from fxls.worker.capture.trace import reuse

HEADS = """\
import torch
from torch import nn


class Config:
    def __init__(self, width=16, labels=2, twice=False):
        self.width = width
        self.labels = labels
        self.twice = twice


class Base(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.proj = nn.Linear(config.width, config.width)

    def forward(self, x, mask=None, scale=1.0):
        if x.shape[-1] > 4:  # FX cannot trace this: Base is kept whole by its callers
            x = self.proj(x) * scale
        if self.config.twice:
            x = torch.cat([x, x], dim=-1)
        return x, {"hidden": x.sum(-1)}


class HeadA(nn.Module):
    def __init__(self):
        super().__init__()
        self.base = Base(Config(labels=2))
        self.out = nn.Linear(16, 2)

    def forward(self, x):
        h, extra = self.base(x)
        return self.out(h), extra["hidden"]


class HeadB(nn.Module):
    def __init__(self):
        super().__init__()
        self.base = Base(Config(labels=5))
        self.out = nn.Linear(16, 5)

    def forward(self, x):
        h, extra = self.base(x, mask=None, scale=1.0)
        return self.out(h), extra["hidden"]
"""


def _capture(
    text: str, *names: str, more: tuple[InputSpec, ...] = (), undeclared: tuple[str, ...] = ()
) -> dict[str, ModuleResult]:
    """Capture ``names`` (those in ``undeclared`` without declared inputs)."""
    lines = text.splitlines()
    x = InputSpec("x", dims=[DimSpec("B", 2), DimSpec("T", 7), DimSpec(None, 16)])
    requests = [
        ClassRequest(
            name,
            next(i for i, t in enumerate(lines, 1) if t.startswith(f"class {name}")),
            inputs=[] if name in undeclared else [x, *more],
        )
        for name in names
    ]
    job = CaptureJob(path="/virtual/heads.py", source=textwrap.dedent(text), classes=requests)
    result = run_capture(job, lambda *_: None)
    assert result.error is None, result.error
    return {m.name: m for m in result.modules}


def _shown(mods: dict[str, ModuleResult]) -> dict[str, Any]:
    """What the editor shows of each class: status, strategy, notes, each node's shapes."""
    return {
        name: (
            mod.status,
            mod.strategy,
            mod.notes,
            [(n.name, n.target, [v.shape for v in n.outputs], n.module_type) for n in mod.nodes],
            [(d.code, d.message) for d in mod.diagnostics],
        )
        for name, mod in mods.items()
    }


@pytest.fixture
def recalled(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, bool]]:
    """(class, symbolic run or not) of each call answered from another class's run."""
    found: list[tuple[str, bool]] = []
    recall = keptruns.KeptRuns.recall

    def counted(self: keptruns.KeptRuns, call: keptruns.Call, **kwargs: Any) -> Any:
        out = recall(self, call, **kwargs)
        if out is not keptruns.MISSING:
            found.append((call.key[0].__name__, call.shape_env is not None))
        return out

    monkeypatch.setattr(keptruns.KeptRuns, "recall", counted)
    return found


def _symbolic(recalled: list[tuple[str, bool]]) -> list[str]:
    """The classes answered in symbolic runs (the runs at static sizes of the eager
    comparison, at the example's batch and one more, are shared too)."""
    return [name for name, symbolic in recalled if symbolic]


def _in_base(code: str) -> str:
    """``HEADS`` with ``code`` (unindented lines) run by ``Base.forward`` before its last
    branch."""
    lines = "".join(f"        {line}\n" for line in code.splitlines())
    return HEADS.replace("        if self.config.twice:", lines + "        if self.config.twice:")


def _without(
    monkeypatch: pytest.MonkeyPatch, text: str, *names: str, undeclared: tuple[str, ...] = ()
) -> dict[str, Any]:
    with monkeypatch.context() as patch:
        patch.setenv(keptruns.KEPT_RUNS_ENV, "0")
        return _shown(_capture(text, *names, undeclared=undeclared))


def _kept_apart(
    recalled: list[tuple[str, bool]], monkeypatch: pytest.MonkeyPatch, text: str
) -> None:
    """HeadB's base (configured with ``twice``) concatenates: its run is not HeadA's, and each
    head shows its own base's output, as with every call run."""
    mods = _capture(text, "HeadA", "HeadB")
    assert _symbolic(recalled) == []
    calls = {name: next(n for n in mod.nodes if n.target == "base") for name, mod in mods.items()}
    assert calls["HeadA"].outputs[0].shape == ["B", "T", 16]
    assert calls["HeadB"].outputs[0].shape == ["B", "T", 32]
    assert _without(monkeypatch, text, "HeadA", "HeadB") == _shown(mods)


def test_heads_share_the_run_of_their_base_model(
    recalled: list[tuple[str, bool]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # the configurations differ in what Base.forward never reads (labels); HeadB passes the
    # keywords HeadA leaves at their defaults
    mods = _capture(HEADS, "HeadA", "HeadB")
    assert _symbolic(recalled) == ["Base"]
    # at static sizes (the eager comparison of a repaired trace: the example's batch and one
    # more) HeadB's graph takes HeadA's graph's runs, and HeadB's forward HeadA's forward's
    assert [name for name, symbolic in recalled if not symbolic] == ["Base"] * 4
    assert "leaf" in mods["HeadB"].strategy.repairs
    base_call = next(n for n in mods["HeadB"].nodes if n.target == "base")
    assert [v.shape for v in base_call.outputs][:1] == [["B", "T", 16]]
    recalled.clear()
    assert _without(monkeypatch, HEADS, "HeadA", "HeadB") == _shown(mods)
    assert recalled == []


def test_a_configuration_value_the_base_model_reads_is_compared(
    recalled: list[tuple[str, bool]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # HeadB's base concatenates (config.twice): its output is [B, T, 32], not HeadA's
    text = HEADS.replace("Base(Config(labels=5))", "Base(Config(labels=5, twice=True))").replace(
        "nn.Linear(16, 5)", "nn.Linear(32, 5)"
    )
    _kept_apart(recalled, monkeypatch, text)


def _copying(twice: bool) -> str:
    """``HEADS`` where ``Base.forward`` reads ``twice`` of a deep copy of its configuration
    (transformers' ``DynamicCache(config=...)`` deep-copies it in ``get_text_config``), both
    heads with two labels, HeadB's base with ``twice``."""
    text = "import copy\n" + HEADS.replace(
        "if self.config.twice:", "if copy.deepcopy(self.config).twice:"
    )
    text = text.replace("Base(Config(labels=5))", f"Base(Config(labels=2, twice={twice}))")
    return text.replace("nn.Linear(16, 5)", f"nn.Linear({32 if twice else 16}, 5)")


def test_a_run_that_copies_its_configuration_is_shared_when_it_holds_the_same_values(
    recalled: list[tuple[str, bool]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # copying reads the object's state (``__reduce_ex__``, a new bound method at each read):
    # what the run read is every attribute, and the two configurations hold the same
    mods = _capture(_copying(twice=False), "HeadA", "HeadB")
    assert _symbolic(recalled) == ["Base"]
    assert _without(monkeypatch, _copying(twice=False), "HeadA", "HeadB") == _shown(mods)


def test_a_value_read_of_a_copy_of_the_configuration_is_compared(
    recalled: list[tuple[str, bool]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # ``twice`` is read of the copy only: HeadB's base concatenates, its output is not HeadA's
    _kept_apart(recalled, monkeypatch, _copying(twice=True))


def _with_attributes(read: bool) -> str:
    """``HEADS`` where ``Base`` keeps values of its configuration in public attributes of its
    own and of a token embedding (``padding_idx``, which only the embedding's gradients
    use), and its ``forward`` reads ``twice`` from its own attribute (``read``) or from the
    configuration."""
    text = HEADS.replace(
        "        self.proj = nn.Linear(config.width, config.width)\n",
        "        self.proj = nn.Linear(config.width, config.width)\n"
        "        self.pad = config.labels\n"
        "        self.double = config.twice\n"
        "        self.tokens = nn.Embedding(10, config.width, padding_idx=config.labels)\n",
    )
    if read:
        text = text.replace("if self.config.twice:", "if self.double:")
    return text


def test_public_attributes_of_the_base_model_that_forward_never_reads_do_not_keep_heads_apart(
    recalled: list[tuple[str, bool]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # the heads' bases hold other labels in ``pad`` and in their embedding's padding_idx
    # (transformers' ``LlamaModel.padding_idx``, set from a head's pad_token_id)
    mods = _capture(_with_attributes(read=False), "HeadA", "HeadB")
    assert _symbolic(recalled) == ["Base"]
    assert _without(monkeypatch, _with_attributes(read=False), "HeadA", "HeadB") == _shown(mods)


def test_a_public_attribute_forward_reads_is_compared(
    recalled: list[tuple[str, bool]], monkeypatch: pytest.MonkeyPatch
) -> None:
    text = _with_attributes(read=True).replace(
        "Base(Config(labels=5))", "Base(Config(labels=5, twice=True))"
    )
    text = text.replace("nn.Linear(16, 5)", "nn.Linear(32, 5)")
    _kept_apart(recalled, monkeypatch, text)


def test_arguments_of_other_sizes_or_values_run_again(recalled: list[tuple[str, bool]]) -> None:
    # another scale, then another size of the same symbols: a new run each
    text = HEADS.replace("self.base(x, mask=None, scale=1.0)", "self.base(x, scale=2.0)")
    _capture(text, "HeadA", "HeadB")
    assert _symbolic(recalled) == []
    text = HEADS.replace(
        "h, extra = self.base(x, mask=None, scale=1.0)",
        "h, extra = self.base(x[:, 1:], mask=None, scale=1.0)",
    )
    mods = _capture(text, "HeadA", "HeadB")
    assert _symbolic(recalled) == []
    call = next(n for n in mods["HeadB"].nodes if n.target == "base")
    assert call.outputs[0].shape == ["B", "T - 1", 16]


def test_what_a_run_learns_about_a_size_is_learned_again(
    recalled: list[tuple[str, bool]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # the base model branches on the batch size (B > 3: not at the example, B = 2), and keeps
    # half of T as a number: its run adds the guards B <= 3 and int(T / 2) == 3, which the next
    # class's ShapeEnv is asked again; the second is why each class computes its shapes again
    # at another T and shows T//2 (without it, HeadB would show 3)
    text = _in_base(
        "if x.shape[0] > 3:\n    x = x + 1\nhalf = int(x.shape[1] * 0.5)\nx = x[:, :half]"
    )
    mods = _capture(text, "HeadA", "HeadB")
    assert _symbolic(recalled) == ["Base"]
    call = next(n for n in mods["HeadB"].nodes if n.target == "base")
    assert call.outputs[0].shape == ["B", "T//2", 16]
    assert any("fixes T to 7" in note for note in mods["HeadB"].notes)
    assert _without(monkeypatch, text, "HeadA", "HeadB") == _shown(mods)


def test_sizes_the_caller_made_one_are_shared(
    recalled: list[tuple[str, bool]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # each head adds y, whose batch is a name of its own (N), to x: the ShapeEnv makes N the
    # batch B (a replacement and the guard N == B), and the base model's argument has B alone
    text = HEADS.replace("def forward(self, x):", "def forward(self, x, y):").replace(
        "self.base(x", "self.base(x + y"
    )
    y = InputSpec("y", dims=[DimSpec("N", 2), DimSpec("T", 7), DimSpec(None, 16)])
    mods = _capture(text, "HeadA", "HeadB", more=(y,))
    assert _symbolic(recalled) == ["Base"]
    call = next(n for n in mods["HeadB"].nodes if n.target == "base")
    assert call.outputs[0].shape == ["B", "T", 16]
    with monkeypatch.context() as patch:
        patch.setenv(keptruns.KEPT_RUNS_ENV, "0")
        assert _shown(_capture(text, "HeadA", "HeadB", more=(y,))) == _shown(mods)


def test_a_run_that_fixes_a_size_is_not_shared(
    recalled: list[tuple[str, bool]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # B == 2 (the example) fixes B: a replacement in the ShapeEnv, not a guard
    text = _in_base("if x.shape[0] == 2:\n    x = x + 1")
    mods = _capture(text, "HeadA", "HeadB")
    assert _symbolic(recalled) == []
    assert _without(monkeypatch, text, "HeadA", "HeadB") == _shown(mods)


def test_an_output_holding_an_argument_is_not_shared(recalled: list[tuple[str, bool]]) -> None:
    # the base model hands its input back: a copy would not be the caller's own tensor
    text = HEADS.replace('return x, {"hidden": x.sum(-1)}', 'return x, {"hidden": x}')
    text = text.replace("if x.shape[-1] > 4:", "if x.shape[-1] > 40:")
    _capture(text, "HeadA", "HeadB")
    assert _symbolic(recalled) == []


def test_a_configuration_whose_class_cannot_be_watched_is_run_each_time(
    recalled: list[tuple[str, bool]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # what Base reads of such a configuration cannot be recorded: every call runs, and the
    # capture goes on as without sharing
    text = HEADS.replace(
        "class Config:",
        "class Frozen(type):\n"
        "    def __setattr__(cls, name, value):\n"
        "        raise TypeError('frozen class')\n\n\n"
        "class Config(metaclass=Frozen):",
    )
    mods = _capture(text, "HeadA", "HeadB")
    assert _symbolic(recalled) == []
    assert all(m.status == "traced" for m in mods.values())
    assert _without(monkeypatch, text, "HeadA", "HeadB") == _shown(mods)


def test_an_output_that_holds_the_configuration_holds_the_callers(
    recalled: list[tuple[str, bool]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Base hands its configuration on; each head keeps as many columns as its own has labels
    # (HeadB 5, not HeadA's 2), which Base itself never reads
    text = HEADS.replace(
        'return x, {"hidden": x.sum(-1)}', 'return x, {"hidden": x.sum(-1), "config": self.config}'
    ).replace(
        '        return self.out(h), extra["hidden"]\n',
        '        return self.out(h)[..., : extra["config"].labels], extra["hidden"]\n',
    )
    mods = _capture(text, "HeadA", "HeadB")
    assert _symbolic(recalled) == ["Base"]
    outputs = {name: next(n for n in mod.nodes if n.op == "output") for name, mod in mods.items()}
    assert outputs["HeadA"].outputs[0].shape == ["B", "T", 2]
    assert outputs["HeadB"].outputs[0].shape == ["B", "T", 5]
    assert _without(monkeypatch, text, "HeadA", "HeadB") == _shown(mods)


def test_a_shared_run_gives_the_calls_made_inside_it_to_the_next_head(
    recalled: list[tuple[str, bool]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Inner, a class of the file, is called inside Base with an unnamed 1 before its last
    # dimension: each top-level head may name more of it, so each looks for its first call
    # in its own run. HeadB's Base is answered from HeadA's run, which hands on the calls
    # made inside it: HeadB's forward does not run again for them
    text = (
        HEADS.replace(
            "        self.proj = nn.Linear(config.width, config.width)\n",
            "        self.proj = nn.Linear(config.width, config.width)\n"
            "        self.inner = Inner(config.width)\n",
        )
        .replace(
            "        if self.config.twice:",
            "        x = self.inner(x.unsqueeze(1)).squeeze(1)\n        if self.config.twice:",
        )
        .replace(
            "class Base(nn.Module):",
            "class Inner(nn.Module):\n"
            "    def __init__(self, width):\n"
            "        super().__init__()\n"
            "        self.fc = nn.Linear(width, width)\n\n"
            "    def forward(self, x):\n"
            "        return self.fc(x)\n\n\n"
            "class Base(nn.Module):",
        )
    )
    runs: list[str] = []
    record = parents.record

    def counted(parent: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
        runs.append(type(parent).__name__)
        return record(parent, *args, **kwargs)

    monkeypatch.setattr(parents, "record", counted)
    mods = _capture(text, "HeadA", "HeadB", "Inner", undeclared=("Inner",))
    assert _symbolic(recalled) == ["Base"]
    assert runs == []
    assert mods["Inner"].inputs[0].value.shape == ["B", 1, "T", 16]
    assert mods["Inner"].inputs[0].origin == "parent"
    assert _without(monkeypatch, text, "HeadA", "HeadB", "Inner", undeclared=("Inner",)) == (
        _shown(mods)
    )
    assert runs == ["HeadA", "HeadB"]  # without kept runs, each head runs forward again


class _Counted(torch.nn.Module):
    runs = 0

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
        type(self).runs += 1
        return self.proj(x) * scale


def test_answering_runs_a_call_once_and_puts_the_instance_back() -> None:
    """What the eager side of a comparison wraps its submodules kept whole in: a second
    instance of the same configuration called alike is answered from the first one's run,
    another argument runs, and no instance keeps the ``forward`` it was given."""
    runs = keptruns.KeptRuns(reuse.configured, reuse.described)
    with torch.device("meta"):
        first, second, own = _Counted(), _Counted(), _Counted()
    own.forward = own.forward  # an instance with a forward of its own is left alone
    x = torch.empty(2, 3, 4, device="meta")
    _Counted.runs = 0
    with torch.no_grad(), keptruns.answering(runs, [first, second, own]):
        assert "forward" in vars(first) and "forward" in vars(second)
        assert first(x).shape == (2, 3, 4)
        out = second(x)
        again = second(x, scale=2.0)
        own(x)
        own(x)
    assert (out.shape, out.device, again.shape) == ((2, 3, 4), torch.device("meta"), (2, 3, 4))
    assert _Counted.runs == 4  # first, second with another scale, own twice
    assert "forward" not in vars(first) and "forward" not in vars(second)
    assert vars(own)["forward"].__self__ is own
