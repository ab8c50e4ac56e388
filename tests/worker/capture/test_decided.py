"""Rank and dtype checks on traced values are decided while tracing; size and value checks
are not (``fxls.worker.capture.trace.decided``)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import torch

from fxls.protocol.labels import strategy_label
from fxls.protocol.model import CaptureJob, ClassRequest, DimSpec, InputSpec, ModuleResult
from fxls.protocol.positions import SourceText
from fxls.worker.capture.pipeline import run_capture
from fxls.worker.capture.trace import decided
from fxls.worker.capture.trace.tracer import SpanTracer

FIXTURE = Path(__file__).parents[2] / "fixtures" / "capture" / "rank_checks.py"
TEXT = FIXTURE.read_text(encoding="utf-8")
LINES = TEXT.splitlines()


def _line(needle: str) -> int:
    return next(i for i, line in enumerate(LINES, start=1) if needle in line)


def _capture(name: str, inputs: list[InputSpec] | None = None) -> ModuleResult:
    request = ClassRequest(name, _line(f"class {name}("), inputs=inputs or [])
    job = CaptureJob(path=str(FIXTURE), source=TEXT, classes=[request])
    (mod,) = run_capture(job, lambda *_: None).modules
    return mod


def _fixture() -> Any:
    spec = importlib.util.spec_from_file_location("fxls_fixture_rank_checks", FIXTURE)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_rank_and_dtype_checks_of_assumed_inputs_are_decided_and_leave_no_node() -> None:
    mod = _capture("Attention")
    # torch.fx stops at `input_ndim == 4`; with the input inferred from `to_q`, the checks
    # are answered from its rank and dtype and the module has an FX graph (it had a fake run)
    assert mod.status == "traced" and strategy_label(mod.strategy) == "fx+decided"
    assert [(i.name, i.value.shape) for i in mod.inputs] == [("hidden_states", ["B", "T", 32])]
    assert [o.shape for o in mod.outputs] == [["B", "T", 32]]
    checks = {d.span.line: d for d in mod.diagnostics if d.code == "FX101"}
    both = [i for i, line in enumerate(LINES, start=1) if "if input_ndim == 4" in line]
    assert sorted(checks) == [*both, _line("if out.dtype")]
    assert all(d.severity == "information" and d.data["value"] is False for d in checks.values())
    # the checks' own nodes are gone: nothing reads a rank or dtype, nothing unused is hinted
    assert not [n for n in mod.nodes if n.target in ("getattr", "eq", "dim")]
    assert [n.target for n in mod.nodes if n.op == "call_module"] == ["to_q"]
    assert not [d for d in mod.diagnostics if d.code == "FX301"]


def test_a_declared_image_takes_the_other_branch() -> None:
    image = InputSpec("hidden_states", dims=[DimSpec("B"), DimSpec(size=32), DimSpec("H"),
                                             DimSpec("W")])  # fmt: skip
    mod = _capture("Attention", [image])
    assert strategy_label(mod.strategy) == "fx+decided"
    assert [o.shape for o in mod.outputs] == [["B", 32, "H", "W"]]
    checks = [d for d in mod.diagnostics if d.code == "FX101"]
    assert [d.data["value"] for d in checks] == [True, True, False]
    model = _fixture().Attention()
    for size in (2, 3):
        assert model(torch.randn(size, 32, 4, 5)).shape == (size, 32, 4, 5)


def test_one_configuration_called_with_two_ranks_takes_each_its_branch() -> None:
    # identical sub-blocks are traced once and replayed; a block whose trace decided a check
    # is not replayed for another call, which may pass another rank
    tokens = InputSpec("tokens", dims=[DimSpec("B"), DimSpec("T"), DimSpec(size=32)])
    image = InputSpec("image", dims=[DimSpec("B"), DimSpec(size=32), DimSpec("H"), DimSpec("W")])
    mod = _capture("TwoRanks", [tokens, image])
    assert mod.status == "traced" and strategy_label(mod.strategy) == "fx+decided"
    assert [o.shape for o in mod.outputs] == [["B", "T", 32], ["B", 32, "H", "W"]]


def test_size_and_value_checks_are_not_decided() -> None:
    x = InputSpec("x", dims=[DimSpec("B"), DimSpec(size=3)])
    for name, source in (("SizeCheck", "x.shape[1] == 3"), ("ValueCheck", "x.sum() > 0")):
        mod = _capture(name, [x])
        assert "decided" not in strategy_label(mod.strategy), name
        (check,) = [d for d in mod.diagnostics if d.code == "FX101"]
        assert source in check.message and "decided" not in check.data
        # the value check is taken one way by the run on fake tensors instead (``branches``)
        assert ("taken" in check.data) == (name == "ValueCheck"), check.data


def test_len_of_a_shape_is_decided_as_the_rank() -> None:
    # `len(timesteps.shape) == 0` (a UNet's time embedding), `assert len(timesteps.shape) ==
    # 1` in a helper and `len(sample.size()) - 1` used as a number: torch.fx refuses `len`
    # of a traced value; fxls answers it with the rank and traces on
    sample = InputSpec("sample", dims=[DimSpec("B"), DimSpec(size=16)])
    timesteps = InputSpec("timesteps", dims=[DimSpec("B")], dtype="int64")
    mod = _capture("TimeEmbedding", [sample, timesteps])
    assert mod.status == "traced" and strategy_label(mod.strategy) == "fx+decided"
    assert [o.shape for o in mod.outputs] == [["B", 16]]
    found = {d.span.line: d for d in mod.diagnostics if d.code == "FX102"}
    assert sorted(found) == [
        _line("assert len(timesteps.shape)"),
        _line("if len(timesteps.shape)"),
        _line("len(sample.size())"),
    ]
    assert [found[line].data["value"] for line in sorted(found)] == [1, 1, 2]
    assert all(d.severity == "information" for d in found.values())
    fix = str(found[_line("if len(timesteps.shape)")].fix)
    assert "the rank is `1` for these inputs" in fix
    assert "Use `timesteps.dim()` instead of `len(timesteps.shape)`" in fix
    # the `size()` read is gone with the decision; the graph computes what eager does
    assert not [n for n in mod.nodes if n.target == "size"]
    model = _fixture().TimeEmbedding()
    for batch in (2, 3):
        out = model(torch.randn(batch, 16), torch.arange(batch))
        assert out.shape == (batch, 16)


def test_only_the_inputs_a_check_reads_are_inferred_before_the_trace_ends() -> None:
    # the check reads `timestep` only: `encoder_hidden_states` is inferred from the whole
    # trace (its projection takes 24 features), not guessed before it
    hidden = InputSpec("hidden_states", dims=[DimSpec("B"), DimSpec("T"), DimSpec(size=16)])
    mod = _capture("CaptionedTime", [hidden])
    assert mod.status == "traced" and strategy_label(mod.strategy) == "fx+decided"
    shapes = {i.name: i.value.shape for i in mod.inputs}
    assert shapes["encoder_hidden_states"][-1] == 24, shapes
    assert [o.shape for o in mod.outputs] == [["B", "T", 16]]


def test_a_check_on_an_input_fxls_cannot_infer_says_to_declare_it() -> None:
    mod = _capture("Angles")
    (check,) = [d for d in mod.diagnostics if d.code == "FX101"]
    assert check.span.line == _line("if t.ndim == 1")
    assert check.data["arg"] == "t" and check.data["declare"] == "(B,) int64"
    assert str(check.fix).startswith(
        "fxls decides this check while tracing once it knows `t`: declare it above the class "
        "(`# fxls: t = (B,) int64`)."
    )
    # declared, the check is decided and the class traced
    positions = InputSpec("t", dims=[DimSpec("B"), DimSpec("T")], dtype="int64")
    mod = _capture("Angles", [positions])
    assert mod.status == "traced" and strategy_label(mod.strategy) == "fx+decided"
    assert [o.shape for o in mod.outputs] == [["B", "T", 4]]
    # beside an ``inv_freq``, ``t`` is a rotary embedding's positions, ``[T]``: decided so
    mod = _capture("Positions")
    assert mod.status == "traced" and strategy_label(mod.strategy) == "fx+decided"
    assert [i.value.shape for i in mod.inputs] == [["T"]]
    assert [o.shape for o in mod.outputs] == [[1, "T", 4]]


def test_len_of_a_tensor_is_not_decided() -> None:
    mod = _capture("Length", [InputSpec("x", dims=[DimSpec("B"), DimSpec(size=4)])])
    assert "decided" not in strategy_label(mod.strategy)
    (check,) = [d for d in mod.diagnostics if d.code == "FX102"]
    assert "value" not in check.data and "Use `x.size(0)` instead of `len(x)`" in str(check.fix)


def test_a_dtype_read_off_a_weight_leaves_no_unused_node() -> None:
    mod = _capture("Cast", [InputSpec("x", dims=[DimSpec("B"), DimSpec(size=8)])])
    assert strategy_label(mod.strategy) == "fx+decided"
    (check,) = [d for d in mod.diagnostics if d.code == "FX101"]
    assert check.data["value"] is False
    # the weight read for its dtype only is gone with the check: no FX302 hint about it
    assert not [d for d in mod.diagnostics if d.code == "FX302"], mod.diagnostics
    assert [n.op for n in mod.nodes] == ["placeholder", "call_module", "output"]


def _traced_with_reuse(module: torch.nn.Module, *examples: torch.Tensor) -> SpanTracer:
    """A trace of ``module`` as the capture makes one: identical blocks replayed, checks
    decided from the examples (on the meta device)."""
    tracer = SpanTracer(str(FIXTURE), SourceText(TEXT), reuse_blocks=True)
    names = [n for n in ("x", "tokens", "image") if n in module.forward.__code__.co_varnames]
    feeds = {n: e.to("meta") for n, e in zip(names, examples, strict=True)}
    tracer.decider = decided.Decider(module, feeds)
    graph = tracer.trace(module)
    decided.drop_checks(graph, tracer.decider.decisions)
    tracer.graph_module = torch.fx.GraphModule(module, graph)  # type: ignore[attr-defined]
    return tracer


def test_identical_blocks_that_decide_a_check_are_replayed_for_the_same_ranks() -> None:
    fixture = _fixture()
    torch.manual_seed(0)
    stack = fixture.Stack()
    x = torch.randn(2, 5, 32)
    tracer = _traced_with_reuse(stack, x)
    assert tracer.replayer is not None and len(tracer.replayer.segments) == 2
    assert torch.allclose(tracer.graph_module(x), stack(x))  # type: ignore[attr-defined]
    # the same configuration called with a sequence, then an image: not replayed
    two = fixture.TwoRanks()
    image = torch.randn(2, 32, 3, 4)
    tracer = _traced_with_reuse(two, x, image)
    assert tracer.replayer is not None and tracer.replayer.segments == []
    got = tracer.graph_module(x, image)  # type: ignore[attr-defined]
    want = two(x, image)
    assert all(torch.allclose(a, b) for a, b in zip(got, want, strict=True))
