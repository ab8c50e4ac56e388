"""The compile check on a busy machine (no worker: a runner that answers as a loaded machine
would). A compile job stopped by the wall clock while it computed runs once more with a longer
limit, as captures do; a check that still did not finish says so (FX609), never nothing. On a
loaded CI machine the check of an editor's document ended with no FX6xx and no word why."""

from __future__ import annotations

from typing import Any

from fxls.analysis import parse
from fxls.engine.analyze import BUSY_RETRY_FACTOR, AnalysisRequest, EngineOptions, FileAnalysis
from fxls.engine.compilecheck import CompileCache, check_compile
from fxls.protocol.model import (
    CaptureResult,
    CompileCheck,
    InputValue,
    JobResult,
    Limits,
    ModuleResult,
    Value,
)

TEXT = """import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x):
        print(x.shape)
        return self.proj(x)
"""


def _analysis() -> FileAnalysis:
    module = ModuleResult(
        name="Net",
        line=5,
        status="traced",
        build="cpu",
        inputs=[InputValue("x", Value(kind="tensor", shape=[2, 8], dtype="torch.float32"))],
    )
    return FileAnalysis(path="/w/net.py", version=1, modules=[module], classes=parse(TEXT).classes)


class _Busy:
    """Answers each job with the next of ``answers``; records the wall-clock limits sent."""

    def __init__(self, *answers: JobResult) -> None:
        self.answers = list(answers)
        self.limits: list[float] = []

    async def run(self, job: Any, limits: Limits | None = None, *args: Any, **kwargs: Any) -> Any:
        assert limits is not None and kwargs["compile"] is not None
        self.limits.append(limits.timeout_s)
        return self.answers.pop(0)


def _timeout(cpu_s: float) -> JobResult:
    """A job the wall clock stopped after 20 s, having used ``cpu_s`` of CPU."""
    return JobResult(id=1, kind="timeout", duration_s=20.0, cpu_s=cpu_s, message="timed out")


def _ok() -> JobResult:
    sent = ModuleResult(name="Net", line=5, status="traced", compile=CompileCheck("ok", graphs=1))
    return JobResult(id=2, kind="ok", payload=CaptureResult(modules=[sent]))


async def _check(runner: _Busy, cache: CompileCache | None = None) -> FileAnalysis:
    analysis = _analysis()
    options = EngineOptions(compile_check=True, limits=Limits(timeout_s=20.0))
    await check_compile(runner, analysis, AnalysisRequest("/w/net.py", TEXT), options, cache)  # type: ignore[arg-type]
    return analysis


async def test_a_job_slowed_by_a_busy_machine_runs_again_with_a_longer_limit() -> None:
    runner = _Busy(_timeout(cpu_s=15.0), _ok())
    analysis = await _check(runner)
    assert runner.limits == [20.0, 20.0 * BUSY_RETRY_FACTOR]
    (net,) = analysis.modules
    assert net.compile is not None and net.compile.status == "ok"
    assert analysis.diagnostics == []


async def test_a_check_that_never_finished_says_so_and_is_checked_again_next_time() -> None:
    cache = CompileCache()
    runner = _Busy(_timeout(cpu_s=15.0), _timeout(cpu_s=30.0))
    analysis = await _check(runner, cache)
    (info,) = analysis.diagnostics
    assert info.code == "FX609" and info.severity == "information"
    assert "`Net` did not finish (it hit its time limit)" in info.message
    assert (info.span.line, info.span.col) == (5, len("class "))  # at the class's name
    # not kept: the same text is checked again (the next edit, the next save)
    again = _Busy(_ok())
    assert (await _check(again, cache)).diagnostics == [] and again.limits == [20.0]


async def test_a_job_that_waited_is_not_run_again() -> None:
    """A timeout with no CPU used is the class's own wait (``sleep``, a lock): the same again."""
    runner = _Busy(_timeout(cpu_s=0.1))
    analysis = await _check(runner)
    assert runner.limits == [20.0]
    assert [d.code for d in analysis.diagnostics] == ["FX609"]
