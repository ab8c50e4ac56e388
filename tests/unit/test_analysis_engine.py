"""The engine: sandbox outcomes -> FX5xx diagnostics, and per-class isolation of failures.

Pure: jobs are answered by scripted runners (tests/worker/test_engine_outcomes.py runs real ones).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from fxls.engine.analyze import (
    AnalysisRequest,
    EngineOptions,
    analyze,
    dedupe,
    failure_diagnostic,
    merge_per_class,
)
from fxls.protocol import catalogue
from fxls.protocol.model import (
    CaptureResult,
    Diagnostic,
    JobResult,
    Limits,
    ModuleResult,
    Related,
    Span,
)

ROOT = Path(__file__).resolve().parents[2]
SPAN = Span(3, 6, 3, 9)


@pytest.mark.parametrize(
    ("result", "code", "needle"),
    [
        (JobResult(1, "timeout"), "FX501", "within 7 s"),
        (JobResult(1, "oom"), "FX502", "512 MB"),
        (JobResult(1, "cpu_limit"), "FX506", "9 s"),
        (JobResult(1, "file_size_limit"), "FX507", "4 MB"),
        (JobResult(1, "signal", signal=11), "FX503", "SIGSEGV"),
        (JobResult(1, "exit", exit_code=3), "FX504", "exit code 3"),
        (JobResult(1, "result_too_large", message="40 MB"), "FX505", "40 MB"),
        (JobResult(1, "protocol_error", message="bad frame"), "FX509", "bad frame"),
        (JobResult(1, "worker_died", message="zygote exited"), "FX508", "zygote exited"),
        (JobResult(1, "exception", phase="trace", message="TraceError: x"), "FX199", "TraceError"),
        (JobResult(1, "exception", phase="init", message="TypeError: y"), "FX401", "TypeError"),
        (JobResult(1, "exception", phase="serialize", message="ValueError"), "FX503", "Value"),
    ],
)
def test_sandbox_outcomes_map_to_fx5xx(result: JobResult, code: str, needle: str) -> None:
    limits = Limits(timeout_s=7, cpu_s=9, memory_mb=512, file_size_mb=4)
    diag = failure_diagnostic(result, limits, "Net", SPAN)
    assert diag.code == code
    assert needle in diag.message
    assert diag.span == SPAN
    assert diag.data["kind"] == result.kind


def test_dedupe_sorts_and_drops_exact_duplicates() -> None:
    a = Diagnostic("FX201", "error", "m", Span(5, 2, 5, 4))
    b = Diagnostic("FX101", "error", "m", Span(2, 0, 2, 1))
    c = Diagnostic("FX302", "hint", "m", Span(5, 2, 5, 4))
    assert dedupe([a, b, a, c, Diagnostic("FX201", "error", "m", Span(5, 2, 5, 4))]) == [b, a, c]


def _failed_in_base(cls: str, used: str, span: Span = SPAN) -> Diagnostic:
    message = catalogue.FX199(
        span, [Related(Span(9, 4, 9, 20), f"called from `{cls}.forward` here")],
        cls=cls, error="ValueError: give exactly one",
    )  # fmt: skip
    found = message.diagnostic({"worked_around": used}, severity="information")
    found.fix = f"{catalogue.worked_around(used)} {found.fix}"
    return found


def test_one_failure_several_classes_reach_is_one_diagnostic_naming_them() -> None:
    heads = ["CausalLM", "SeqCls", "TokenCls", "QA", "MultipleChoice"]
    used = ["fx+leaf", "fake-run", "fx+leaf", "fake-run", "fake-run"]
    modules = [ModuleResult(h, 20 + i, "traced") for i, h in enumerate(heads)]
    for m, u in zip(modules, used):
        m.diagnostics = [_failed_in_base(m.name, u)]
    elsewhere = _failed_in_base("Other", "fake-run", Span(30, 0, 30, 5))
    modules.append(ModuleResult("Other", 40, "traced", diagnostics=[elsewhere]))
    loose = Diagnostic("FX404", "error", "m", Span(1, 0, 1, 1))

    merged = dedupe(merge_per_class([loose], modules))

    assert [d.code for d in merged] == ["FX404", "FX199", "FX199"]
    one = merged[1]
    assert one.message == (
        "torch.fx could not trace `CausalLM`, `SeqCls`, `TokenCls` and 2 other classes: "
        "ValueError: give exactly one"
    )
    assert one.fix is not None
    assert one.fix.startswith(
        "torch.fx.symbolic_trace fails here; fxls used `fx+leaf` for `CausalLM` and "
        "`TokenCls`; `fake-run` for `SeqCls`, `QA` and `MultipleChoice`, and still shows shapes."
    )
    assert one.fix.endswith(catalogue.FX199.fix or "")
    assert [r.message for r in one.related] == [f"called from `{h}.forward` here" for h in heads]
    assert one.data["classes"] == heads and "worked_around" not in one.data
    assert merged[2] is elsewhere  # another line: its own
    assert [len(m.diagnostics) for m in modules] == [1] * 6  # the modules keep theirs


def test_classes_captured_alike_keep_the_fix_and_other_messages_stay_apart() -> None:
    a, b = ModuleResult("A", 1, "traced"), ModuleResult("B", 2, "traced")
    a.diagnostics = [_failed_in_base("A", "fake-run")]
    b.diagnostics = [_failed_in_base("B", "fake-run")]
    [one] = merge_per_class([], [a, b])
    assert one.message.startswith("torch.fx could not trace `A` and `B`: ")
    assert one.fix == a.diagnostics[0].fix and one.data["worked_around"] == "fake-run"
    b.diagnostics = [catalogue.FX199(SPAN, cls="B", error="TypeError: other").diagnostic()]
    assert len(merge_per_class([], [a, b])) == 2  # another error at the same place
    b.diagnostics = [Diagnostic("FX101", "warning", "not naming the class", SPAN)]
    assert dedupe(merge_per_class([], [a, b])) == [b.diagnostics[0], a.diagnostics[0]]


async def test_syntax_error_and_cancellation_need_no_worker() -> None:
    class Never:
        async def run(self, *args: object) -> JobResult:
            raise AssertionError("no job expected")

    result = await analyze(Never(), AnalysisRequest("x.py", "class A(nn.Module:\n"))  # type: ignore[arg-type]
    assert result.outcome == "syntax_error"
    assert result.syntax_error is not None
    assert [d.code for d in result.diagnostics] == ["FX404"]
    empty = await analyze(Never(), AnalysisRequest("x.py", "x = 1\n"))  # type: ignore[arg-type]
    assert (empty.modules, empty.diagnostics, empty.outcome) == ([], [], "ok")

    class Slow:
        async def run(self, *args: object) -> JobResult:
            await asyncio.sleep(60)
            raise AssertionError("not reached")

    task = asyncio.ensure_future(
        analyze(Slow(), AnalysisRequest("x.py", "class A(nn.Module):\n    pass\n"))
    )  # type: ignore[arg-type]
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_retries_of_a_file_whose_classes_all_time_out_are_capped() -> None:
    """Six classes that hang: the first job and two single-class re-runs time out, one job
    at a time; the other three classes get FX510 without running."""
    source = "import torch.nn as nn\n" + "".join(
        f"\n\nclass Hang{i}(nn.Module):\n    def forward(self, x):\n        while True: pass\n"
        for i in range(6)
    )

    class AllTimeOut:
        def __init__(self) -> None:
            self.jobs: list[list[str]] = []
            self.running = self.most = 0

        async def run(self, job: object, *args: object) -> JobResult:
            names = [c.name for c in job.classes]  # type: ignore[attr-defined]
            self.jobs.append(names)
            self.running += 1
            self.most = max(self.most, self.running)
            await asyncio.sleep(0.01)
            self.running -= 1
            return JobResult(len(self.jobs), "timeout", phase="trace", current_class=names[0])

    runner = AllTimeOut()
    result = await analyze(runner, AnalysisRequest("x.py", source))  # type: ignore[arg-type]
    assert len(runner.jobs) == 3 and runner.most == 1
    codes = {m.name: [d.code for d in m.diagnostics] for m in result.modules}
    assert sorted(codes.values()).count(["FX501"]) == 3
    assert sorted(codes.values()).count(["FX510"]) == 3
    assert len(result.modules) == 6


async def test_a_cpu_limit_among_several_classes_is_blamed_on_a_class_alone() -> None:
    """The first job of three classes runs out of CPU time while it captures ``Slow1``: the
    time of ``Slow0`` counts too, so each class is captured alone, and only the one that runs
    out on its own (``Loop``) gets FX506, as on every run."""
    source = "import torch.nn as nn\n" + "".join(
        f"\n\nclass {name}(nn.Module):\n    def forward(self, x):\n        return x\n"
        for name in ("Slow0", "Slow1", "Loop")
    )

    class LimitOnTheWhole:
        def __init__(self) -> None:
            self.jobs: list[list[str]] = []

        async def run(self, job: object, *args: object) -> JobResult:
            names = [c.name for c in job.classes]  # type: ignore[attr-defined]
            self.jobs.append(names)
            if len(names) > 1:
                return JobResult(1, "cpu_limit", phase="trace", current_class="Slow1")
            if names == ["Loop"]:
                return JobResult(2, "cpu_limit", phase="trace", current_class="Loop")
            line = 4 if names == ["Slow0"] else 9
            module = ModuleResult(name=names[0], line=line, status="traced")
            return JobResult(3, "ok", payload=CaptureResult(modules=[module]))

    runner = LimitOnTheWhole()
    result = await analyze(runner, AnalysisRequest("x.py", source))  # type: ignore[arg-type]
    assert runner.jobs[0] == ["Slow0", "Slow1", "Loop"]
    assert sorted(runner.jobs[1:]) == [["Loop"], ["Slow0"], ["Slow1"]]
    codes = {m.name: [d.code for d in m.diagnostics] for m in result.modules}
    assert codes == {"Slow0": [], "Slow1": [], "Loop": ["FX506"]}


class Scripted:
    """A runner that answers jobs from a list and records the limits each ran with."""

    def __init__(self, *answers: JobResult) -> None:
        self.answers = list(answers)
        self.limits: list[Limits] = []

    async def run(self, job: object, limits: Limits, isolation: object) -> JobResult:
        self.limits.append(limits)
        return self.answers.pop(0)


BUSY_SOURCE = "from torch import nn\n\n# fxls: x = (2, 4)\nclass Net(nn.Module):\n    def forward(self, x):\n        return x\n"


async def test_a_busy_machine_gets_one_rerun_with_a_longer_clock() -> None:
    slowed = JobResult(1, "timeout", duration_s=4.0, cpu_s=2.5, wall_limit_s=4.0)
    runner = Scripted(slowed, JobResult(2, "ok"))
    options = EngineOptions(limits=Limits(timeout_s=4, cpu_s=10))
    result = await analyze(runner, AnalysisRequest("m.py", BUSY_SOURCE), options=options)  # type: ignore[arg-type]
    assert [lim.timeout_s for lim in runner.limits] == [4, 8]
    assert [lim.cpu_s for lim in runner.limits] == [10, 10]
    assert not [d for d in result.diagnostics if d.code.startswith("FX5")]


async def test_a_machine_busy_twice_is_a_warning_that_says_so() -> None:
    first = JobResult(1, "timeout", duration_s=4.0, cpu_s=2.5, wall_limit_s=4.0)
    again = JobResult(2, "timeout", duration_s=8.0, cpu_s=5.0, wall_limit_s=8.0)
    runner = Scripted(first, again)
    options = EngineOptions(limits=Limits(timeout_s=4, cpu_s=10))
    result = await analyze(runner, AnalysisRequest("m.py", BUSY_SOURCE), options=options)  # type: ignore[arg-type]
    (diag,) = [d for d in result.diagnostics if d.code == "FX501"]
    assert diag.severity == "warning"
    assert "8 s of wall-clock time" in diag.message
    assert "tried twice" in diag.message and "busy" in diag.message


async def test_a_job_that_waited_is_not_run_again() -> None:
    waited = JobResult(1, "timeout", duration_s=4.0, cpu_s=0.05, wall_limit_s=4.0)
    runner = Scripted(waited)
    options = EngineOptions(limits=Limits(timeout_s=4, cpu_s=10))
    result = await analyze(runner, AnalysisRequest("m.py", BUSY_SOURCE), options=options)  # type: ignore[arg-type]
    assert len(runner.limits) == 1
    assert any(d.code == "FX501" and "waiting" in d.message for d in result.diagnostics)


def test_a_job_of_many_classes_gets_more_time() -> None:
    from fxls.engine.analyze import job_limits

    base = Limits(timeout_s=20, cpu_s=10)
    assert job_limits(base, 1) == base and job_limits(base, 8) == base
    assert (job_limits(base, 9).cpu_s, job_limits(base, 9).timeout_s) == (20, 40)
    assert job_limits(base, 100).cpu_s == 30  # at most three limits


async def test_the_first_job_of_a_large_file_runs_with_its_larger_limit() -> None:
    source = "from torch import nn\n" + "".join(
        f"\n# fxls: x = (2, 4)\nclass Net{i}(nn.Module):\n    def forward(self, x):\n"
        "        return x\n"
        for i in range(20)
    )
    runner = Scripted(JobResult(1, "ok"))
    options = EngineOptions(limits=Limits(timeout_s=20, cpu_s=10))
    await analyze(runner, AnalysisRequest("m.py", source), options=options)  # type: ignore[arg-type]
    assert [(lim.cpu_s, lim.timeout_s) for lim in runner.limits] == [(30, 60)]


def test_a_job_names_its_file_by_absolute_path(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """``fxls check detr.py`` from the file's folder: the worker runs elsewhere and decides
    what the job may read from the job's path, so a relative one made the project's own
    packages unreadable there (FX404 PermissionError when /tmp held over 256 entries)."""
    from fxls.engine.analyze import capture_job

    monkeypatch.chdir(tmp_path)
    job = capture_job("detr.py", "x = 1\n", [], EngineOptions())
    assert job.path == str(tmp_path / "detr.py")
