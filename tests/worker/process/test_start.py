"""Start-up of the real zygote: the ready frame and the protocol version both sides speak."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fxls.protocol.model import PROTOCOL_VERSION

pytestmark = [pytest.mark.timeout(180)]
ASYNC = pytest.mark.asyncio(loop_scope="module")


@ASYNC
async def test_ready_frame_carries_the_protocol_version(worker) -> None:  # type: ignore[no-untyped-def]
    assert worker.ready is not None
    assert worker.ready.protocol == PROTOCOL_VERSION
    assert worker.ready.torch_version.startswith("2.")


@ASYNC
async def test_the_zygote_is_ready_after_the_imports_and_warms_the_rest_while_idle(
    own_worker,  # type: ignore[no-untyped-def]
) -> None:
    import asyncio
    import time

    from fxls.engine.analyze import AnalysisRequest, analyze
    from fxls.worker.process import warmup

    ready = own_worker.ready
    assert ready is not None
    assert list(ready.warm_steps) == [name for name, _ in warmup.FIRST]
    assert all(seconds >= 0 for seconds in ready.warm_steps.values())
    # a job right away runs (its child does what the zygote has not warmed yet)
    text = "import torch\nfrom torch import nn\n\n\nclass Net(nn.Module):\n    def forward(self, x):\n        return x.relu()\n"
    first = await analyze(own_worker, AnalysisRequest("/tmp/net.py", text))
    assert first.outcome == "ok" and first.modules[0].status in ("traced", "partial")
    deadline = time.monotonic() + 60
    while not any("warm-up finished while idle" in line for line in own_worker.logs):
        assert time.monotonic() < deadline, own_worker.logs
        await asyncio.sleep(0.05)
    done = next(line for line in own_worker.logs if "warm-up finished while idle" in line)
    assert all(name in done for name, _ in warmup.LATER)
    # then, with no job running, the common operators (each step a capture of its own)
    while not any("common operators finished while idle" in line for line in own_worker.logs):
        assert time.monotonic() < deadline, own_worker.logs
        await asyncio.sleep(0.05)
    quiet = next(line for line in own_worker.logs if "common operators finished" in line)
    assert all(name in quiet for name, _ in warmup.QUIET)
    again = await analyze(own_worker, AnalysisRequest("/tmp/net.py", text))
    assert again.modules[0].status == first.modules[0].status


def test_the_warm_up_captures_trace_every_class() -> None:
    # a warm-up capture that failed would warm nothing (and say nothing: the zygote only logs)
    from fxls.worker.process import warmup

    for result in (warmup.warm_transformer(), warmup.warm_cnn()):
        assert result.error is None
        for module in result.modules:
            assert module.status == "traced" and not module.diagnostics, module.name
            assert module.outputs and module.outputs[0].shape is not None
        assert [m.constructed.source for m in result.modules[1:] if m.constructed] == ["parent"] * (
            len(result.modules) - 1
        )


def test_the_spare_captures_trace_and_stop_once_a_job_waits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from fxls.worker.process import warmup

    for step in warmup.SPARE_STEPS:
        result = step()
        assert result.error is None and result.modules
        assert all(m.status == "traced" and m.outputs for m in result.modules), step
    ran: list[int] = []
    steps = tuple(lambda i=i: ran.append(i) for i in range(3))
    monkeypatch.setattr(warmup, "SPARE_STEPS", steps)
    answers = iter([False, False, True])
    warmup.warm_spare(lambda: next(answers))
    assert ran == [0, 1]  # the job came while the second ran: no third
    ran.clear()
    warmup.warm_spare()
    assert ran == [0, 1, 2]


def test_a_spare_expects_its_job_as_the_last_ones_after_the_same_kind_of_job() -> None:
    # a capture's compile check follows it at once; the next capture waits for the user: the
    # spare forked after each kind is planned by the waits after that kind only
    from fxls.worker.process import zygote

    spawner = zygote.ForkSpawner([], 0)
    assert spawner.expected(100.0) is None  # none yet: the whole warm-up
    for waited in (0.004, 0.006, 0.005):
        spawner.note_wait("capture", waited)
    for waited in (0.9, 0.4, 2.5):
        spawner.note_wait("compile", waited)
    spawner.last_kind = "capture"
    assert spawner.expected(100.0) == 100.004
    spawner.last_kind = "compile"
    assert spawner.expected(100.0) == 100.4
    spawner.last_kind = "rewrite"
    assert spawner.expected(100.0) is None
    for _ in range(zygote.SPARE_WAITS):  # the oldest waits are forgotten
        spawner.note_wait("compile", 1.0)
    spawner.last_kind = "compile"
    assert spawner.expected(100.0) == 101.0


def test_the_spare_warms_no_step_that_could_outlast_its_wait(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a spare expecting its job 50 ms after it starts runs its first 20 ms step, not a second
    # (taken as twice the first: it could end after the job came); with time, all of them
    import time

    from fxls.worker.process import warmup

    ran: list[int] = []

    def step(i: int) -> None:
        time.sleep(0.02)
        ran.append(i)

    monkeypatch.setattr(warmup, "SPARE_STEPS", tuple(lambda i=i: step(i) for i in range(3)))
    warmup.warm_spare(until=time.monotonic() + 0.05)
    assert ran == [0]
    ran.clear()
    warmup.warm_spare(until=time.monotonic() + 30)
    assert ran == [0, 1, 2]


@pytest.mark.parametrize("asked", [False, True])
def test_torch_builds_structured_trace_records_only_when_they_are_written(
    asked: bool, tmp_path: Path
) -> None:
    """Without ``TORCH_TRACE`` the warmed worker's trace log has no handler, so a ``ShapeEnv``
    builds no record (stacks read from source files) for a handler that writes nothing; with
    it, torch's handler stays and writes its traces."""
    code = (
        "from fxls.worker.process import warmup; warmup.warm_up(); "
        "from torch._logging import _internal as i; "
        "print(sum(isinstance(h, i.LazyTraceHandler) for h in i.trace_log.handlers))"
    )
    env = {k: v for k, v in os.environ.items() if k != "TORCH_TRACE"}
    if asked:
        env["TORCH_TRACE"] = str(tmp_path)
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ("1" if asked else "0")


_IMPORTS_OF_A_CAPTURE = """\
import sys
from fxls.protocol.model import CaptureJob, ClassRequest
from fxls.worker.capture.pipeline import run_capture
from fxls.worker.process import warmup
warmup.warm_all()
before = set(sys.modules)
job = CaptureJob("/virtual/choice.py", SOURCE, [ClassRequest("Choice", line=8, inputs=[INPUT])])
result = run_capture(job, lambda *_: None)
assert result.modules[0].status == "traced", result.modules[0]
print(result.modules[0].outputs[0].shape)
print(sorted(m for m in set(sys.modules) - before if m.split(".")[0] in ("torch", "sympy")))
"""
_CHOICE = """\
import torch
from torch import nn


# a multiple-choice head: [B, C, T] token ids flattened to [B*C, T]


class Choice(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(16, 8)

    def forward(self, ids):
        return self.emb(ids.view(-1, ids.size(-1)))
"""


def test_a_capture_after_the_warm_up_imports_no_torch_or_sympy_module() -> None:
    # what a job child imports itself it imports on every edit: a view dividing a product of
    # named sizes simplifies the quotient, and sympy's first simplify imported sympy.physics
    # (a quarter of a second of each BERT edit) until the warm-up did it once
    code = (
        f"SOURCE = {_CHOICE!r}\n"
        "from fxls.protocol.model import InputSpec, DimSpec\n"
        "INPUT = InputSpec('ids', dims=[DimSpec('B', 2), DimSpec('C', 4), DimSpec('T', 5)], "
        "dtype='int64')\n" + _IMPORTS_OF_A_CAPTURE
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    shape, imported = done.stdout.strip().splitlines()
    assert shape == "['B*C', 'T', 8]"
    assert imported == "[]"
