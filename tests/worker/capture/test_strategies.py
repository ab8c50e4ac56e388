"""Capture strategies in order (fx, repairs, fake-run) and silent mis-traces (FX108, FX109).

Each model of tests/fixtures/capture/strategies.py needs exactly one strategy or repair. The
capture runs in-process (``run_capture``); shapes are checked against eager execution of the
fixture imported for real, on small real CPU inputs at the example sizes.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

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

FIXTURE = Path(__file__).parents[2] / "fixtures" / "capture" / "strategies.py"
TEXT = FIXTURE.read_text(encoding="utf-8")
LINES = TEXT.splitlines()

B, T, H, W = 2, 6, 4, 6
"""Example sizes the capture uses (B: the default first size; the others are declared)."""


def _line(needle: str, after: str | None = None) -> int:
    start = 0 if after is None else next(i for i, line in enumerate(LINES) if after in line)
    return next(i for i in range(start, len(LINES)) if needle in LINES[i]) + 1


def _span(needle: str, after: str) -> Span:
    line = _line(needle, after)
    col = LINES[line - 1].index(needle)
    return Span(line, col, line, col + len(needle))


def _dims(*dims: str | int) -> list[DimSpec]:
    sizes = {"T": T, "H": H, "W": W}
    return [DimSpec(None, d) if isinstance(d, int) else DimSpec(d, sizes.get(d)) for d in dims]


REQUESTS = {
    "EinopsPatches": [InputSpec("x", dims=_dims("B", 3, "H", "W"))],
    "EinopsPacked": [
        InputSpec("x", dims=_dims("B", "T", 8)),
        InputSpec("cls_token", dims=_dims("B", 8)),
    ],
    "EinxForget": [InputSpec("x", dims=_dims("B", "T", 8))],
    "WithLenBlock": [InputSpec("x", dims=_dims("B", 6))],
    "HalfHelper": [InputSpec("x", dims=_dims("B", "T", 6))],
    "Flagged": [InputSpec("x", dims=_dims("B", 6))],
    "TokenKeep": [InputSpec("x", dims=_dims("B", "T", 6))],
    "SignGate": [InputSpec("x", dims=_dims("B", 6))],
    "HelperChecks": [InputSpec("x", dims=_dims("B", 6)), InputSpec("b", dims=_dims(4))],
    "Flexible": [InputSpec("x", dims=_dims("B", 6))],
    "Combined": [InputSpec("x", dims=_dims("B", "T", 6))],
}


@pytest.fixture(scope="module")
def modules() -> dict[str, ModuleResult]:
    classes = [
        ClassRequest(name, _line(f"class {name}("), inputs=specs)
        for name, specs in REQUESTS.items()
    ]
    job = CaptureJob(path=str(FIXTURE), source=TEXT, classes=classes)
    result = run_capture(job, lambda *_: None)
    assert result.error is None
    assert from_dict(CaptureResult, to_dict(result)) == result  # survives the wire
    return {mod.name: mod for mod in result.modules}


@pytest.fixture(scope="module")
def fixture_module() -> ModuleType:
    name = "fxls_fixture_strategies"
    spec = importlib.util.spec_from_file_location(name, FIXTURE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _eager(fixture_module: ModuleType, name: str, *inputs: torch.Tensor) -> torch.Tensor:
    torch.manual_seed(0)
    model = getattr(fixture_module, name)().eval()
    with torch.no_grad():
        out: torch.Tensor = model(*inputs)
    return out


def _concrete(mod: ModuleResult, index: int = 0) -> list[int]:
    return _at_example_sizes(mod.outputs[index].shape or [])


def _at_example_sizes(shape: list[int | str]) -> list[int]:
    import sympy

    sizes = {"B": B, "T": T, "H": H, "W": W}
    symbols = {k: sympy.Symbol(k, integer=True, positive=True) for k in sizes}
    out = []
    for d in shape:
        if isinstance(d, int):
            out.append(d)
        else:
            value = sympy.sympify(d, locals=symbols).subs({symbols[k]: v for k, v in sizes.items()})
            out.append(int(value))
    return out


def _errors(mod: ModuleResult) -> list[str]:
    return [d.code for d in mod.diagnostics if d.severity == "error"]


def _infos(mod: ModuleResult) -> list[str]:
    return [d.code for d in mod.diagnostics if d.severity == "information" and d.code < "FX400"]


def _warnings(mod: ModuleResult) -> list[str]:
    return [d.code for d in mod.diagnostics if d.severity == "warning"]


def _nodes(mod: ModuleResult, target: str) -> list[NodeInfo]:
    return [n for n in mod.nodes if n.target == target or n.target.endswith("." + target)]


# ---------------------------------------------------------------------------------------
# 1. fx with library functions auto-wrapped
# ---------------------------------------------------------------------------------------


def test_einops_traces_with_plain_fx(
    modules: dict[str, ModuleResult], fixture_module: ModuleType
) -> None:
    mod = modules["EinopsPatches"]
    assert mod.status == "traced" and strategy_label(mod.strategy) == "fx" and _errors(mod) == []
    # the einops layer is a leaf module, the functions are one node each at their lines
    (patches,) = [n for n in mod.nodes if n.op == "call_module" and n.target == "patches"]
    assert patches.module_type is not None and patches.module_type.startswith("Rearrange(")
    (rearrange,) = _nodes(mod, "rearrange")
    assert rearrange.op == "call_function"
    assert rearrange.span == _span('rearrange(tokens, "b n (h d) -> b h n d", h=2)', "def forward")
    assert [a.name for a in rearrange.args][:2] == ["tensor", "pattern"]
    (reduce,) = _nodes(mod, "reduce")  # written as einops.reduce(...)
    assert reduce.span is not None and reduce.span.line == _line("einops.reduce(heads")
    eager = _eager(fixture_module, "EinopsPatches", torch.randn(B, 3, H, W))
    assert _concrete(mod) == list(eager.shape)


def test_einops_pack_and_unpack_are_one_node_each(
    modules: dict[str, ModuleResult], fixture_module: ModuleType
) -> None:
    """``x, ps = pack(...)`` and ``unpack(x, ps, ...)`` trace as nodes whose results unpack."""
    mod = modules["EinopsPacked"]
    assert mod.status == "traced" and strategy_label(mod.strategy) == "fx", mod.strategy
    (pack,) = _nodes(mod, "pack")
    (unpack,) = _nodes(mod, "unpack")
    assert pack.op == unpack.op == "call_function"
    assert pack.span is not None and pack.span.line == _line("pack([cls_token, x]")
    (proj,) = [n for n in mod.nodes if n.target == "proj"]
    assert proj.outputs[0].shape is not None and proj.outputs[0].shape[-1] == 8
    eager = _eager(fixture_module, "EinopsPacked", torch.randn(B, T, 8), torch.randn(B, 8))
    assert _concrete(mod) == list(eager.shape)


def test_einx_operations_are_one_node_each(
    modules: dict[str, ModuleResult], fixture_module: ModuleType
) -> None:
    """einx reads its operands' shapes as numbers, which a traced value does not have
    (x-transformers' ``DataDependentAlibi`` failed: "Failed to determine which backend to
    use"): each operation is one node, and its shapes follow the names (einx fixes them to the
    example's sizes while shapes are computed; they are computed again at other sizes)."""
    mod = modules["EinxForget"]
    assert mod.status == "traced" and strategy_label(mod.strategy) == "fx", mod.diagnostics
    (add,) = _nodes(mod, "add")
    (subtract,) = _nodes(mod, "subtract")
    assert add.op == subtract.op == "call_function"
    assert subtract.span is not None and subtract.span.line == _line('einx.subtract("b h i')
    assert add.outputs[0].shape == ["B", 2, "T"]
    assert mod.outputs[0].shape == ["B", 2, "T", "T"]
    eager = _eager(fixture_module, "EinxForget", torch.randn(B, T, 8))
    assert _concrete(mod) == list(eager.shape)
    assert list(_eager(fixture_module, "EinxForget", torch.randn(3, 5, 8)).shape) == [3, 2, 5, 5]


# ---------------------------------------------------------------------------------------
# 2. repairs
# ---------------------------------------------------------------------------------------


def test_failing_submodule_is_kept_as_a_leaf(
    modules: dict[str, ModuleResult], fixture_module: ModuleType
) -> None:
    mod = modules["WithLenBlock"]
    assert (
        mod.status == "traced" and strategy_label(mod.strategy) == "fx+leaf" and mod.error is None
    )
    (fx102,) = [d for d in mod.diagnostics if d.code == "FX102"]
    assert fx102.span == _span("len(x)", "class LenScale(") and fx102.data["leaf"] == "LenScale"
    assert any("`LenScale`" in note for note in mod.notes)
    (scale,) = [n for n in mod.nodes if n.op == "call_module" and n.target == "scale"]
    assert scale.span == _span("self.scale(self.fc(x))", "class WithLenBlock(")
    eager = _eager(fixture_module, "WithLenBlock", torch.randn(B, 6))
    assert _concrete(mod) == list(eager.shape)


def test_failing_helper_is_auto_wrapped(
    modules: dict[str, ModuleResult], fixture_module: ModuleType
) -> None:
    mod = modules["HalfHelper"]
    assert (
        mod.status == "traced" and strategy_label(mod.strategy) == "fx+wrap" and mod.error is None
    )
    (fx104,) = [d for d in mod.diagnostics if d.code == "FX104"]
    assert fx104.span == _span("int(x.size(1) * 0.5)", "def keep_half")
    assert fx104.data["wrap"] == "keep_half"
    (helper,) = _nodes(mod, "keep_half")
    assert helper.op == "call_function" and helper.args[0].node == "fc"
    assert helper.span == _span("keep_half(self.fc(x))", "class HalfHelper(")
    assert any("`keep_half`" in note for note in mod.notes)
    eager = _eager(fixture_module, "HalfHelper", torch.randn(B, T, 6))
    assert _concrete(mod) == list(eager.shape)


def test_flag_argument_is_fixed_to_its_default(
    modules: dict[str, ModuleResult], fixture_module: ModuleType
) -> None:
    mod = modules["Flagged"]
    assert (
        mod.status == "traced"
        and strategy_label(mod.strategy) == "fx+concrete"
        and mod.error is None
    )
    (fx101,) = [d for d in mod.diagnostics if d.code == "FX101"]
    assert fx101.span == _span("normalize", "        if normalize")
    assert fx101.data["concrete"] == "normalize"
    assert any("`normalize=False`" in note for note in mod.notes)
    assert [i.name for i in mod.inputs] == ["x", "normalize"] and mod.inputs[
        1
    ].value.text == "False"
    # only the branch taken for the default is in the graph; no guard nodes without a line
    assert not _nodes(mod, "normalize") and all(
        n.span is not None for n in mod.nodes if n.op.startswith("call")
    )
    eager = _eager(fixture_module, "Flagged", torch.randn(B, 6))
    assert _concrete(mod) == list(eager.shape)


def test_repairs_combine_one_per_failure(
    modules: dict[str, ModuleResult], fixture_module: ModuleType
) -> None:
    mod = modules["Combined"]
    assert mod.status == "traced" and strategy_label(mod.strategy) == "fx+leaf+wrap+concrete"
    # each failure that led to a repair is reported where it happened, with the repair named
    # ... as information: the module still gets its shapes
    found = {d.code: d for d in mod.diagnostics if d.severity == "information"}
    assert _errors(mod) == []
    assert sorted(found) == ["FX101", "FX102", "FX104"]
    assert found["FX101"].data["concrete"] == "normalize"
    assert found["FX102"].data["leaf"] == "LenScale"
    assert found["FX104"].data["wrap"] == "keep_half"
    assert found["FX102"].span == _span("len(x)", "class LenScale(")
    fixed = [n for n in mod.notes if "fixes B to" in n or "fixes T to" in n]
    assert len(mod.notes) - len(fixed) == 3
    # `len(x)` inside the leaf fixes the batch size while shapes are computed, and
    # `int(x.size(1) * 0.5)` inside the wrapped helper requires int(T/2) to be 3: each said
    # once, and the shapes after them, computed again at other sizes, follow the names
    assert len(fixed) == 2 and "follow B" in fixed[0] and "follow T" in fixed[1], fixed
    assert mod.outputs[0].shape == ["B", "T//2", 4]
    assert mod.example_nodes == []
    eager = _eager(fixture_module, "Combined", torch.randn(B, T, 6))
    assert _concrete(mod) == list(eager.shape)


# ---------------------------------------------------------------------------------------
# 3. fake-run
# ---------------------------------------------------------------------------------------


def test_untraceable_root_gets_nodes_from_a_fake_run(
    modules: dict[str, ModuleResult], fixture_module: ModuleType
) -> None:
    mod = modules["TokenKeep"]
    assert (
        mod.status == "traced" and strategy_label(mod.strategy) == "fake-run" and mod.error is None
    )
    assert _infos(mod) == ["FX104"]  # the FX failure stays visible at its span
    assert _errors(mod) == []
    (fx104,) = [d for d in mod.diagnostics if d.code == "FX104"]
    assert fx104.span == _span("int(x.size(1) * self.ratio)", "class TokenKeep(")
    assert any("fake tensors" in note for note in mod.notes)

    x = torch.randn(B, T, 6)
    torch.manual_seed(0)
    model = fixture_module.TokenKeep().eval()
    with torch.no_grad():
        h = model.fc(x)
        kept = h[:, : int(T * 0.5)]
        out = kept.softmax(dim=-1)
    after = "class TokenKeep("
    expected = {
        "fc": (_span("self.fc(x)", after), ["B", "T", 4], list(h.shape)),
        "operator.getitem": (_span("h[:, :keep]", after), None, list(kept.shape)),
        "softmax": (_span("kept.softmax(dim=-1)", after), None, list(out.shape)),
    }
    for target, (span, symbolic, real) in expected.items():
        (node,) = [n for n in mod.nodes if n.target == target]
        assert node.span == span, target
        shape = node.outputs[0].shape or []
        if symbolic is not None:
            assert shape == symbolic
        assert _at_example_sizes(shape) == real, target
    (fc,) = [n for n in mod.nodes if n.target == "fc"]
    assert fc.module_type is not None and fc.module_type.startswith("Linear(")
    assert fc.args[0].name == "input" and fc.args[0].node == "x"
    assert _concrete(mod) == list(out.shape)
    # `int(x.size(1) * 0.5)` keeps T symbolic but requires int(T/2) to be its example value,
    # 3: the shapes after it were shown as [B, 3, 4] for every T (at the next size, 7,
    # int(3.5) is 3 too). Computed again where int(T/2) changes, they follow T
    assert [n.outputs[0].shape for n in mod.nodes if n.target == "softmax"] == [["B", "T//2", 4]]
    assert mod.example_nodes == [] and any("follow the names" in n for n in mod.notes), mod.notes
    with torch.no_grad():
        for length in (7, 10, 13):
            assert model(torch.randn(B, length, 6)).shape == (B, length // 2, 4)


def test_a_data_dependent_branch_is_taken_one_way_and_said(
    modules: dict[str, ModuleResult], fixture_module: ModuleType
) -> None:
    """``if h.sum() > 0:`` stops torch.fx and a run on fake tensors (no values): the run takes
    the condition as false, goes on to ``return -h``, and says so at the condition (FX101,
    information: worked around) and in a note. Eager with values that take that branch gives
    the same output."""
    mod = modules["SignGate"]
    assert mod.status == "traced" and strategy_label(mod.strategy) == "fake-run"
    assert [o.shape for o in mod.outputs] == [["B", 6]] and mod.error is None
    assert _errors(mod) == [] and _warnings(mod) == []
    after = "class SignGate("
    (fx101,) = [d for d in mod.diagnostics if d.code == "FX101"]
    assert fx101.severity == "information" and fx101.span.line == _line("h.sum() > 0", after)
    assert fx101.data.get("value") is False
    assert "taking `h.sum() > 0` as `False`" in (fx101.fix or "")
    targets = [n.target for n in mod.nodes if n.op != "placeholder"]
    assert targets[:2] == ["fc", "sum"] and "output" in targets
    (fc,) = [n for n in mod.nodes if n.target == "fc"]
    assert fc.span == _span("self.fc(x)", after) and fc.outputs[0].shape == ["B", 6]
    assert "FX302" not in [d.code for d in mod.diagnostics]  # the comparison was used
    assert any("`h.sum() > 0` as `False`" in note for note in mod.notes), mod.notes
    torch.manual_seed(0)
    model = fixture_module.SignGate().eval()
    with torch.no_grad():
        for batch in (2, 5):
            x = torch.zeros(batch, 6)
            model.fc.bias.fill_(-1.0)  # h.sum() < 0: the branch fxls took
            assert not model.fc(x).sum() > 0
            assert model(x).shape == (batch, 6)


# ---------------------------------------------------------------------------------------
# Silent mis-traces
# ---------------------------------------------------------------------------------------


def test_checks_in_helpers_and_submodules_traced_through_warn(
    modules: dict[str, ModuleResult],
) -> None:
    mod = modules["HelperChecks"]
    assert mod.status == "traced" and strategy_label(mod.strategy) == "fx"
    fx108 = [d for d in mod.diagnostics if d.code == "FX108"]
    assert [d.span for d in fx108] == [_span("isinstance(x, (list, tuple))", "def maybe_cat")]
    assert all(d.severity == "warning" for d in fx108)
    assert "FX109" not in [d.code for d in mod.diagnostics]  # same shapes as eager


def test_divergence_from_eager_execution(
    modules: dict[str, ModuleResult], fixture_module: ModuleType
) -> None:
    mod = modules["Flexible"]
    check = _span("isinstance(x, torch.Tensor)", "class Flexible(")
    (fx108,) = [d for d in mod.diagnostics if d.code == "FX108"]
    (fx109,) = [d for d in mod.diagnostics if d.code == "FX109"]
    assert fx108.span == check and fx109.span == check
    assert fx109.related[0].span.line == _line("class Flexible(")
    # the traced graph skipped the unsqueeze: eager gives another shape
    eager = _eager(fixture_module, "Flexible", torch.randn(B, 6))
    assert f"running `forward` gives [{', '.join(map(str, eager.shape))}]" in fx109.message
    assert _concrete(mod) != list(eager.shape)
    assert mod.status == "partial"


def test_divergence_at_another_batch_size(fixture_module: ModuleType) -> None:
    """A graph that baked the example batch size agrees with eager at that size only."""
    import torch.fx

    from fxls.worker.capture.shapes.propagation import ExampleInput
    from fxls.worker.capture.trace.strategies import eager_divergence

    baked = torch.fx.symbolic_trace(fixture_module.ReshapeTwo())
    eager = fixture_module.ReshapeBatch()
    feeds = [ExampleInput("x", "tensor", [("B", 2), (None, 3), (None, 6)])]
    found = eager_divergence(baked, eager, feeds, str(FIXTURE), TEXT)
    assert found is not None
    assert (found.traced, found.eager, found.sizes) == ("[2, 27]", "[3, 18]", "x [3, 3, 6]")
    # the faithful graph agrees at both sizes
    faithful = torch.fx.symbolic_trace(fixture_module.ReshapeBatch())
    assert eager_divergence(faithful, eager, feeds, str(FIXTURE), TEXT) is None


class _CpuConstant(torch.nn.Module):
    """Eager adds a CPU tensor the traced graph never sees (a meta run cannot add it)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(6, 4)
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls = self.calls + 1
        if isinstance(x, torch.Tensor):
            x = (x + torch.ones(6, device="cpu")).unsqueeze(1)
        return self.fc(x)


def test_eager_runs_on_meta_tensors_and_finds_what_fake_tensors_find(
    fixture_module: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """For modules built on the meta device the eager side of FX109 runs ``forward`` on meta
    tensors, without a recorded fake run, and reports the same divergences."""
    import torch.fx

    from fxls.worker.capture.shapes.propagation import ExampleInput
    from fxls.worker.capture.trace import fakerun
    from fxls.worker.capture.trace.strategies import Comparison, eager_divergence

    with torch.device("meta"):
        flexible = fixture_module.Flexible().eval()
    images = [ExampleInput("x", "tensor", [("B", 2), (None, 3), (None, 6)])]
    rows = [ExampleInput("x", "tensor", [("B", 2), (None, 6)])]
    cases = [
        (
            torch.fx.symbolic_trace(fixture_module.ReshapeTwo()),
            fixture_module.ReshapeBatch(),
            images,
        ),
        (
            torch.fx.symbolic_trace(fixture_module.ReshapeBatch()),
            fixture_module.ReshapeBatch(),
            images,
        ),
        (torch.fx.symbolic_trace(flexible), flexible, rows),
    ]
    by_fake = [
        eager_divergence(gm, eager, feeds, str(FIXTURE), TEXT, Comparison(on_meta=False))
        for gm, eager, feeds in cases
    ]
    assert [found is not None for found in by_fake] == [True, False, True]

    def no_fake_run(*args: object, **kwargs: object) -> None:
        raise AssertionError("the meta run answered: no fake run is needed")

    monkeypatch.setattr(fakerun, "fake_run", no_fake_run)
    by_meta = [eager_divergence(gm, eager, feeds, str(FIXTURE), TEXT) for gm, eager, feeds in cases]
    assert by_meta == by_fake
    (found,) = [f for f in by_meta[2:] if f is not None]
    assert (found.traced, found.eager) == ("[2, 4]", "[2, 1, 4]")


class _Labelled(torch.nn.Module):
    """A head whose trace fixed ``labels`` (FX names its placeholder ``labels_1``)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(6, 3)

    def forward(self, x: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
        return self.fc(x) if labels is None else self.fc(x) + labels


def test_eager_side_passes_a_renamed_placeholder_to_its_parameter() -> None:
    """An example input named as FX renames a placeholder (``labels_1``) is the parameter
    ``labels``: ``forward`` takes no ``**kwargs`` for it, and runs on meta tensors."""
    from fxls.worker.capture.shapes.propagation import ExampleInput
    from fxls.worker.capture.trace import fakerun

    with torch.device("meta"):
        module = _Labelled().eval()
    feeds = [
        ExampleInput("x", "tensor", [("B", 2), (None, 6)]),
        ExampleInput("labels_1", "value", value=None),
    ]
    found = fakerun.meta_outputs(module, feeds)
    assert found is not None and [v.shape for v in found] == [[2, 3]]


def test_eager_falls_back_to_fake_tensors_when_the_meta_run_raises() -> None:
    """``forward`` adding a CPU tensor cannot run on meta tensors: the fake run answers, the
    divergence is still found, and the tensor the run assigned to the module is put back."""
    import torch.fx

    from fxls.worker.capture.shapes.propagation import ExampleInput
    from fxls.worker.capture.trace import fakerun
    from fxls.worker.capture.trace.strategies import Comparison, eager_divergence

    with torch.device("meta"):
        module = _CpuConstant().eval()
    before = module.calls
    rows = [ExampleInput("x", "tensor", [("B", 2), (None, 6)])]
    assert fakerun.meta_outputs(module, rows) is None
    assert module.calls is before
    gm = torch.fx.symbolic_trace(module)
    before = module.calls  # tracing ran the assignment once more
    source = Path(__file__).read_text(encoding="utf-8")
    found = eager_divergence(gm, module, rows, __file__, source)
    assert found is not None and (found.traced, found.eager) == ("[2, 4]", "[2, 1, 4]")
    assert found == eager_divergence(gm, module, rows, __file__, source, Comparison(on_meta=False))
    assert module.calls is before


# ---------------------------------------------------------------------------------------
# Through the real worker (zygote, fork, sandbox)
# ---------------------------------------------------------------------------------------


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.timeout(120)
async def test_strategies_through_the_sandboxed_worker(worker) -> None:  # type: ignore[no-untyped-def]
    names = ("EinopsPatches", "HalfHelper", "TokenKeep", "Flexible")
    classes = [ClassRequest(name, _line(f"class {name}("), inputs=REQUESTS[name]) for name in names]
    job = CaptureJob(path=str(FIXTURE), source=TEXT, classes=classes)
    result = await worker.run(job)
    assert result.kind == "ok", (result.message, result.output_head)
    assert result.payload is not None
    mods = {m.name: m for m in result.payload.modules}
    assert [strategy_label(mods[n].strategy) for n in names] == ["fx", "fx+wrap", "fake-run", "fx"]
    keep = mods["TokenKeep"]
    assert [n.target for n in keep.nodes if n.op != "placeholder"] == [
        "fc",
        "operator.getitem",
        "softmax",
        "output",
    ]
    assert "FX109" in [d.code for d in mods["Flexible"].diagnostics]
