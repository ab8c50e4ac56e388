"""The engine with the real worker: sandbox outcomes of real jobs become FX5xx diagnostics on
the class that caused them, and the other classes of the file are still captured."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from fxls.engine.analyze import AnalysisRequest, EngineOptions, analyze
from fxls.engine.workerclient import WorkerClient
from fxls.protocol.model import Limits

pytestmark = [pytest.mark.worker, pytest.mark.asyncio(loop_scope="module")]


SOURCE = textwrap.dedent(
    """\
    import os
    from torch import nn

    # fxls: x = (B=2, 4)
    class Aborts(nn.Module):
        def forward(self, x):
            os.abort()

    # fxls: x = (B=2, 4)
    class Hangs(nn.Module):
        def forward(self, x):
            while True:
                pass

    # fxls: x = (B=2, 4)
    class Good(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 3)

        def forward(self, x):
            return self.fc(x)

    # fxls: skip
    class Skipped(nn.Module):
        def forward(self, x):
            return x
    """
)


@pytest.mark.slow
@pytest.mark.asyncio(loop_scope="module")
async def test_each_failing_class_gets_its_own_diagnostic(
    worker: WorkerClient, tmp_path: Path
) -> None:
    path = str(tmp_path / "models.py")
    options = EngineOptions(limits=Limits(timeout_s=6, cpu_s=2))
    result = await analyze(worker, AnalysisRequest(path, SOURCE, version=7), options=options)
    assert result.version == 7
    assert result.outcome in ("signal", "cpu_limit")
    status = {m.name: m.status for m in result.modules}
    assert status == {"Aborts": "failed", "Hangs": "failed", "Good": "traced", "Skipped": "skipped"}
    codes = {(d.code, d.span.line) for d in result.diagnostics}
    assert ("FX503", 5) in codes  # SIGABRT on `class Aborts`
    assert ("FX506", 10) in codes  # a busy loop is stopped by the CPU limit, not the clock
    good = result.module("Good")
    assert good is not None and good.outputs[0].shape == ["B", 3]
    assert [c.name for c in result.classes] == ["Aborts", "Hangs", "Good", "Skipped"]


@pytest.mark.slow
@pytest.mark.asyncio(loop_scope="module")
async def test_a_file_that_exits_at_import_is_one_file_level_diagnostic(
    worker: WorkerClient, tmp_path: Path
) -> None:
    source = "import os\nfrom torch import nn\nos._exit(4)\n\nclass A(nn.Module):\n    pass\n"
    result = await analyze(worker, AnalysisRequest(str(tmp_path / "m.py"), source))
    assert result.modules == []
    (diag,) = [d for d in result.diagnostics if d.severity == "error"]
    assert (diag.code, diag.span.line) == ("FX504", 1)
    assert "code 4" in diag.message


@pytest.mark.slow
@pytest.mark.asyncio(loop_scope="module")
async def test_a_capture_that_waits_is_stopped_by_the_clock_and_said_so(
    worker: WorkerClient, tmp_path: Path
) -> None:
    source = textwrap.dedent(
        """\
        import time
        from torch import nn

        # fxls: x = (B=2, 4)
        class Sleeps(nn.Module):
            def forward(self, x):
                time.sleep(600)
                return x
        """
    )
    options = EngineOptions(limits=Limits(timeout_s=1.5, cpu_s=5))
    result = await analyze(worker, AnalysisRequest(str(tmp_path / "m.py"), source), options=options)
    (diag,) = [d for d in result.diagnostics if d.code == "FX501"]
    assert diag.severity == "warning"
    assert diag.span.line == 5
    assert "1.5 s of wall-clock time" in diag.message
    assert "waiting" in diag.message  # no CPU used: not retried, and the cause named
