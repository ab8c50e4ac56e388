"""Conditions on tensor values in a run on fake tensors: taken one way, said where they are.

A fake tensor has no values, so ``if not padding_mask.any():`` stopped the run of ``forward``
that fxls falls back on when torch.fx cannot trace a class, and the class showed no output.
fxls takes such a condition one way (an ``assert`` as holding, any other as false), runs
``forward`` again, and says so at the condition. Each test compares with eager runs whose
values take the same branch, at two sizes.
"""

from __future__ import annotations

from pathlib import Path

import torch

from fxls.protocol.model import CaptureJob, ClassRequest, ModuleResult
from fxls.worker.capture.pipeline import run_capture

FIXTURE = Path(__file__).parents[2] / "fixtures" / "capture" / "value_branch.py"
SOURCE = FIXTURE.read_text(encoding="utf-8")


def _capture() -> dict[str, ModuleResult]:
    lines = SOURCE.splitlines()
    requests = [
        ClassRequest(name, next(i for i, t in enumerate(lines, 1) if t.startswith(f"class {name}")))
        for name in ("Masked", "Checked", "Converge", "Fine")
    ]
    result = run_capture(CaptureJob(path=str(FIXTURE), source=SOURCE, classes=requests), print)
    assert result.error is None, result.error
    return {m.name: m for m in result.modules}


def _namespace() -> dict[str, object]:
    namespace: dict[str, object] = {}
    exec(compile(SOURCE, str(FIXTURE), "exec"), namespace)  # the test's own source
    return namespace


def test_a_mask_checked_for_padding_is_taken_as_having_none() -> None:
    """ESM-2's ``if not padding_mask.any(): padding_mask = None``: the run takes
    ``padding_mask.any()`` as false and goes on; the class shows its output, FX101 at the
    condition says the value taken, and the ``any()`` is not reported as unused."""
    masked = _capture()["Masked"]
    assert masked.status == "traced" and masked.strategy.method == "fake-run"
    assert [o.shape for o in masked.outputs] == [["B", "T", 33]]
    line = SOURCE.splitlines().index("        if not padding_mask.any():") + 1
    at = [d for d in masked.diagnostics if d.span.line == line]
    assert [d.code for d in at] == ["FX101"], [(d.code, d.message) for d in at]
    assert "taking `padding_mask.any()` as `False`" in (at[0].fix or "")
    assert at[0].data.get("value") is False and at[0].data.get("taken") == "`padding_mask.any()`"
    assert "ranks and dtypes" not in (at[0].fix or "")  # no repair of the trace said it
    assert any("`padding_mask.any()` as `False`" in note for note in masked.notes)
    namespace = _namespace()
    model = namespace["Masked"]()  # type: ignore[operator]
    for batch, length in ((2, 5), (3, 9)):  # tokens without padding take the same branch
        tokens = torch.full((batch, length), 4, dtype=torch.long)
        assert model(tokens).shape == (batch, length, 33)


def test_assertions_hold_and_other_conditions_are_false() -> None:
    """``assert`` and ``torch._assert`` on values are taken as holding; ``if
    torch.isnan(x).any(): raise`` and a ``while`` on values as false: the run ends with the
    output a finite input gives."""
    checked = _capture()["Checked"]
    assert checked.status == "traced", (checked.notes, [d.message for d in checked.diagnostics])
    assert [o.shape for o in checked.outputs] == [["B", 32]]
    note = next(n for n in checked.notes if n.startswith("conditions on tensor values"))
    assert "as `True`" in note and "as `False`" in note
    model = _namespace()["Checked"]()  # type: ignore[operator]
    for batch in (2, 3):
        assert model(torch.randn(batch, 16)).shape == (batch, 32)


def test_a_loop_a_decision_does_not_end_takes_it_the_other_way() -> None:
    """``while not (h.abs() < 1).all():`` taken as false never ends: after many passes the
    run takes it as true (the loop ends at once) and runs again, instead of running until
    the job's time limit."""
    converge = _capture()["Converge"]
    assert converge.status == "traced" and [o.shape for o in converge.outputs] == [["B", 16]]
    assert any("`(h.abs() < 1).all()` as `True`" in n for n in converge.notes), converge.notes
    model = _namespace()["Converge"]()  # type: ignore[operator]
    for batch in (2, 3):
        assert model(torch.randn(batch, 16)).shape == (batch, 16)


def test_a_class_without_such_conditions_says_nothing_of_them() -> None:
    fine = _capture()["Fine"]
    assert fine.status == "traced"
    assert not any("conditions on tensor values" in n for n in fine.notes)
