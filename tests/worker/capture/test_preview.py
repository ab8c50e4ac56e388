"""The ``preview`` job: a first answer at example sizes from one run on meta tensors, which a new
zygote runs before it has imported ``torch._dynamo``; the capture then replaces it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fxls.engine import analyze as analyze_module
from fxls.engine.analyze import AnalysisRequest, FileAnalysis, analyze, preview

pytestmark = [pytest.mark.timeout(180)]
ASYNC = pytest.mark.asyncio(loop_scope="module")

MODEL = textwrap.dedent(
    """\
    import torch
    from torch import nn


    # fxls: x = (B, 16)
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(16, 4)
            self.norm = nn.BatchNorm1d(4)
            self.emb = nn.Embedding(10, 4)
            nn.init.normal_(self.emb.weight, std=0.02)

        def forward(self, x):
            h = self.norm(self.fc(x))
            return torch.relu(h).unsqueeze(1) + self.emb.weight[:1]
    """
)


def _line(text: str) -> int:
    return next(i for i, t in enumerate(MODEL.splitlines(), 1) if text in t)


@ASYNC
async def test_a_new_worker_answers_a_preview_first_then_the_capture_with_named_dims(
    own_worker,  # type: ignore[no-untyped-def]
    tmp_path: Path,
) -> None:
    path = tmp_path / "net.py"
    path.write_text(MODEL)
    request = AnalysisRequest(str(path), MODEL)
    assert not own_worker.captures_ready  # still importing what captures need
    order: list[str] = []

    async def first() -> FileAnalysis | None:
        found = await preview(own_worker, request)
        order.append("preview")
        return found

    async def full() -> FileAnalysis:
        found = await analyze(own_worker, request)
        order.append("capture")
        return found

    shown, final = await asyncio.gather(first(), full())
    assert order == ["preview", "capture"]
    assert shown is not None and shown.provenance == "preliminary" and shown.provisional
    assert not shown.diagnostics
    (net,) = shown.modules
    assert net.strategy.method == "meta-run" and net.build == "meta"
    assert [o.shape for o in net.outputs] == [[2, 1, 4]]  # B at its example size
    by_target = {n.target: n for n in net.nodes}
    fc = by_target["fc"]
    assert fc.op == "call_module" and fc.module_type is not None
    assert fc.module_type.startswith("Linear(")
    assert fc.span is not None and fc.span.line == _line("self.fc(x)")
    assert fc.outputs[0].shape == [2, 4]
    assert by_target["norm"].outputs[0].shape == [2, 4]
    relu = by_target["torch.relu"]
    assert relu.op == "call_function" and relu.outputs[0].shape == [2, 4]
    assert by_target["unsqueeze"].op == "call_method"
    assert "operator.add" in by_target, sorted(by_target)
    assert by_target["operator.add"].outputs[0].shape == [2, 1, 4]
    # the capture: named dimensions, the full analysis, not marked
    assert final.provenance == "worker" and not final.provisional
    (captured,) = final.modules
    assert captured.strategy.method == "fx"
    assert [o.shape for o in captured.outputs] == [["B", 1, 4]]
    assert own_worker.captures_ready


@ASYNC
async def test_a_slow_preview_does_not_hold_back_the_capture(
    own_worker,  # type: ignore[no-untyped-def]
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A preview that runs long (a file that imports a large library) holds the zygote's
    imports for ``PREVIEW_WAIT_S`` only: the capture of another file is done while it still
    runs. (The preview runs for a minute, so that this holds on a loaded machine too; it is
    cancelled once the capture is done.)"""
    monkeypatch.setattr(analyze_module, "PREVIEW_LIMIT_S", 90.0)
    slow, quick = tmp_path / "slow.py", tmp_path / "net.py"
    slow_text = "import time\n\ntime.sleep(60)\n\n" + MODEL
    slow.write_text(slow_text)
    quick.write_text(MODEL)
    slow_preview = asyncio.ensure_future(preview(own_worker, AnalysisRequest(str(slow), slow_text)))
    await asyncio.sleep(0.1)  # the preview is sent first, as the server does
    found = await analyze(own_worker, AnalysisRequest(str(quick), MODEL))
    assert found.modules[0].status == "traced"
    assert not slow_preview.done()
    slow_preview.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await slow_preview


@ASYNC
async def test_a_warm_worker_answers_previews_too(worker, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "net.py"
    path.write_text(MODEL)
    await analyze(worker, AnalysisRequest(str(path), MODEL))
    assert worker.captures_ready
    shown = await preview(worker, AnalysisRequest(str(path), MODEL))
    assert shown is not None and [o.shape for o in shown.modules[0].outputs] == [[2, 1, 4]]


@ASYNC
async def test_no_preview_without_shapes(worker, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "bad.py"
    broken = MODEL.replace("self.fc(x)", "self.fc(x, x)")  # forward raises: the capture says why
    for text in (broken, "x = (\n", "import torch\n"):
        path.write_text(text)
        assert await preview(worker, AnalysisRequest(str(path), text)) is None


_RUN = """\
import json, sys
import torch
{first}
from fxls.analysis import parse
from fxls.engine.analyze import EngineOptions, build_requests, capture_job
from fxls.worker.capture.preview import run_preview

shown = {{}}
for path in {paths!r}:
    text = open(path).read()
    job = capture_job(path, text, build_requests(parse(text).classes), EngineOptions())
    result = run_preview(job, lambda phase, name: None)
    shown[path] = [
        [m.name, [o.shape for o in m.outputs],
         [[n.op, n.target, n.span.line, [o.shape or o.text for o in n.outputs]] for n in m.nodes]]
        for m in result.modules
    ]
print(json.dumps({{
    "shown": shown,
    "modules": {{
        name: type(sys.modules.get(name)).__name__
        for name in ("torch._dynamo", "torch.fx.experimental.symbolic_shapes", "sympy")
    }},
    "loaded": [n for n in ("torch._dynamo.config", "torch.export._trace", "sympy.core")
               if n in sys.modules],
}}))
"""


def _run(paths: list[str], first: str = "") -> dict[str, object]:
    """``run_preview`` on ``paths`` in a fresh interpreter (as a preview child forked right
    after the zygote's ``import torch`` runs it), after ``first``."""
    root = Path(__file__).resolve().parents[3]
    out = subprocess.run(
        [sys.executable, "-c", _RUN.format(first=first, paths=paths)],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
        timeout=120,
    )
    found: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return found


def test_the_meta_run_imports_neither_dynamo_nor_sympy(tmp_path: Path) -> None:
    """The meta build (``nn.init.normal_``, torch's ``reset_parameters``) and the forward on
    meta tensors (batch norm's Python meta kernel, ``torch._check``, type promotion) load
    neither ``torch._dynamo``, ``torch.export``, ``symbolic_shapes`` nor sympy: their stand-ins
    answer (``preview.stand_ins``)."""
    path = tmp_path / "net.py"
    path.write_text(MODEL)
    found = _run([str(path)])
    assert found["modules"] == {
        "torch._dynamo": "StandIn",
        "torch.fx.experimental.symbolic_shapes": "StandIn",
        "sympy": "StandIn",
    }
    assert found["loaded"] == []
    (net,) = found["shown"][str(path)]  # type: ignore[index]
    assert net[1] == [[2, 1, 4]]


def test_the_stand_ins_change_no_shape() -> None:
    """The example models previewed with the stand-ins and with the real modules imported
    first (then no stand-in is put in place): the same records."""
    examples = Path(__file__).resolve().parents[3] / "docs" / "examples"
    paths = [str(examples / name) for name in ("cnn.py", "gpt.py", "resnet.py")]
    fast = _run(paths)
    real = _run(paths, "import sympy, torch._dynamo, torch.fx.experimental.symbolic_shapes")
    assert real["modules"] == dict.fromkeys(real["modules"], "module")  # type: ignore[arg-type]
    assert fast["shown"] == real["shown"]
    assert fast["loaded"] == [] and set(fast["modules"].values()) == {"StandIn"}  # type: ignore[attr-defined]
    assert all(fast["shown"].values())  # type: ignore[attr-defined]
