"""The engine with the real worker: sandbox outcomes of real jobs become FX5xx diagnostics on
the class that caused them, and the other classes of the file are still captured."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from fxls.analysis import parse
from fxls.engine.analyze import (
    AnalysisRequest,
    EngineOptions,
    analyze,
    build_requests,
    capture_job,
)
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


BURNERS = "import time\nfrom torch import nn\n" + "".join(
    textwrap.dedent(
        f"""

        # fxls: x = (B=2, 4)
        class Burns{i}(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(4, 4)
                started = time.process_time()
                while time.process_time() - started < 0.8:
                    pass

            def forward(self, x):
                return self.fc(x)
        """
    )
    for i in range(4)
)
"""Four classes that each take 0.8 s of CPU time to build: more than a job's CPU limit of 2 s
together, well within it one by one."""


@pytest.mark.slow
@pytest.mark.asyncio(loop_scope="module")
async def test_a_job_out_of_cpu_time_keeps_the_classes_it_captured(
    worker: WorkerClient, tmp_path: Path
) -> None:
    """The job of the whole file reaches its CPU limit: it sends the classes it captured and
    names the others, which the next job captures. No class is blamed or given up, and the
    file's outcome is not a CPU limit."""
    path = str(tmp_path / "burners.py")
    job = capture_job(path, BURNERS, build_requests(parse(BURNERS).classes), EngineOptions())
    first = await worker.run(job, Limits(timeout_s=30, cpu_s=2))
    assert first.kind == "ok" and first.payload is not None, first
    done = [m.name for m in first.payload.modules]
    assert done and first.payload.unfinished, (done, first.payload.unfinished)
    assert sorted(done + first.payload.unfinished) == [f"Burns{i}" for i in range(4)]
    assert all(m.status == "traced" for m in first.payload.modules)

    options = EngineOptions(limits=Limits(timeout_s=30, cpu_s=2))
    result = await analyze(worker, AnalysisRequest(path, BURNERS), options=options)
    assert result.outcome == "ok", result.outcome
    assert {m.name: m.status for m in result.modules} == {f"Burns{i}": "traced" for i in range(4)}
    assert [m.line for m in result.modules] == sorted(m.line for m in result.modules)
    assert not [d for d in result.diagnostics if d.code.startswith("FX5")], result.diagnostics
    assert all(m.outputs[0].shape == ["B", 4] for m in result.modules)


class _Counting:
    """The worker client, counting the jobs it is given."""

    def __init__(self, worker: WorkerClient) -> None:
        self.worker, self.jobs = worker, 0

    async def run(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        self.jobs += 1
        return await self.worker.run(*args, **kwargs)


@pytest.mark.slow
@pytest.mark.asyncio(loop_scope="module")
async def test_a_large_job_out_of_cpu_time_with_nothing_done_is_captured_in_halves(
    worker: WorkerClient, tmp_path: Path
) -> None:
    """Ten classes, the first one hangs: the first job captures nothing before its limit. The
    classes are captured again in two halves; the half holding the hanging class runs out
    too and its five classes are captured one by one (1 + 2 + 5 jobs, not 1 + 10)."""
    good = "".join(
        f"\n\n# fxls: x = (B=2, 4)\nclass Good{i}(nn.Module):\n"
        "    def forward(self, x):\n        return x * 2\n"
        for i in range(9)
    )
    hang = "\n\n# fxls: x = (B=2, 4)\nclass Hangs(nn.Module):\n    def forward(self, x):\n"
    source = "from torch import nn" + hang + "        while True:\n            pass\n" + good
    counting = _Counting(worker)
    options = EngineOptions(limits=Limits(timeout_s=20, cpu_s=2))
    result = await analyze(
        counting, AnalysisRequest(str(tmp_path / "m.py"), source), options=options
    )  # type: ignore[arg-type]
    status = {m.name: m.status for m in result.modules}
    assert status == {"Hangs": "failed", **{f"Good{i}": "traced" for i in range(9)}}, status
    assert [d.code for d in result.diagnostics if d.code.startswith("FX5")] == ["FX506"]
    assert counting.jobs == 8, counting.jobs
