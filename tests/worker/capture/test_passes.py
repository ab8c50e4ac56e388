"""User passes (``# fxls: pass Class``) through the real zygote, and the observation in-process.

``tests/fixtures/passes/broken.py`` marks, with a ``# FX35n`` comment, the one line of each
pass that fxls must blame; every pass there breaks the graph in its own way.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import torch.fx

from fxls.analysis import parse
from fxls.protocol.codec import from_dict, to_dict
from fxls.protocol.edits import apply_edits
from fxls.protocol.labels import strategy_label
from fxls.protocol.model import (
    CaptureJob,
    CaptureResult,
    FixOutcome,
    FixRequest,
    Limits,
    ModuleResult,
    RewriteJob,
)
from fxls.worker.capture.pipeline import capture_document, run_capture
from fxls.worker.rewrite.run import run_rewrite

FIXTURES = Path(__file__).parents[2] / "fixtures" / "passes"
MARK = re.compile(r"#\s*(FX35\d)\s*$")
DEF = re.compile(r"^def (\w+)\(")


def _job(name: str, text: str | None = None) -> CaptureJob:
    path = FIXTURES / name
    text = path.read_text() if text is None else text
    parsed = parse(text)
    assert not parsed.diagnostics, parsed.diagnostics
    return CaptureJob(
        path=str(path),
        source=text,
        classes=[c.request() for c in parsed.classes],
        sys_path=[str(FIXTURES)],
    )


def _expected(text: str) -> dict[str, tuple[str, int]]:
    """Pass name -> (code, line) from the ``# FX35n`` marks of a fixture."""
    found: dict[str, tuple[str, int]] = {}
    current = None
    for number, line in enumerate(text.splitlines(), start=1):
        m = DEF.match(line)
        if m is not None:
            current = m.group(1)
        mark = MARK.search(line)
        if mark is not None and current is not None:
            found[current] = (mark.group(1), number)
    return found


def _module(result: CaptureResult, name: str) -> ModuleResult:
    return next(m for m in result.modules if m.name == name)


@pytest.mark.asyncio(loop_scope="module")
async def test_each_broken_pass_is_blamed_at_its_line_through_the_zygote(worker: Any) -> None:
    job = _job("broken.py")
    result = await worker.run(job)
    assert result.kind == "ok", result.message
    assert result.payload is not None
    net = _module(result.payload, "Net")
    assert net.status == "traced"  # the passes never change the capture itself
    expected = _expected(job.source)
    assert len(expected) == 9
    got: dict[str, list[tuple[str, int]]] = {}
    for d in net.diagnostics:
        if "pass" in d.data:
            got.setdefault(d.data["pass"], []).append((d.code, d.span.line))
    for name, (code, line) in expected.items():
        assert got.get(name) == [(code, line)], (name, got.get(name))
    statuses = {p.function: p.status for p in net.passes}
    assert statuses == dict.fromkeys(expected, "failed")
    # the exception travels for the hover
    raised = next(p for p in net.passes if p.function == "raises")
    assert raised.message == "ValueError: unexpected module fc"


@pytest.mark.asyncio(loop_scope="module")
async def test_a_correct_pass_reports_what_it_changed(worker: Any) -> None:
    job = _job("good.py")
    result = await worker.run(job)
    assert result.kind == "ok", result.message
    assert result.payload is not None
    net = _module(result.payload, "Net")
    assert not [d for d in net.diagnostics if d.code.startswith("FX35")]
    (run,) = net.passes
    assert (run.function, run.status, run.before, run.after) == ("functional_relu", "ok", 5, 5)
    assert (run.added, run.removed, run.replaced) == (1, 0, 1)
    lines = job.source.splitlines()
    added = next(c for c in run.changes if c.kind == "added")
    replaced = next(c for c in run.changes if c.kind == "replaced")
    assert added.target == "torch.nn.functional.relu"
    assert added.span is not None and "gm.graph.call_function(F.relu" in lines[added.span.line - 1]
    assert (replaced.node, replaced.by, replaced.target) == ("relu", added.node, "torch.relu")
    assert replaced.span is not None and "torch.relu(self.fc1(x))" in lines[replaced.span.line - 1]
    # the capture is the one of the source, not of the pass's output
    assert [n.target for n in net.nodes if n.op == "call_function"] == ["torch.relu"]


@pytest.mark.asyncio(loop_scope="module")
async def test_a_pass_that_hangs_is_stopped_at_its_line_and_the_capture_kept(worker: Any) -> None:
    text = (
        (FIXTURES / "good.py")
        .read_text()
        .replace(
            "    for node in list(gm.graph.nodes):",
            "    while True:\n        pass\n    for node in []:",
        )
    )
    job = _job("good.py", text)
    # a small CPU limit gives the pass its shortest budget (half a second)
    result = await worker.run(job, Limits(timeout_s=10.0, cpu_s=3.0))
    assert result.kind == "ok", result.message
    assert result.payload is not None
    net = _module(result.payload, "Net")
    assert net.status == "traced" and net.outputs
    (diag,) = [d for d in net.diagnostics if d.code == "FX356"]
    assert "PassTimeout: the pass ran longer than" in diag.message
    assert text.splitlines()[diag.span.line - 1].strip() in ("while True:", "pass")


@pytest.mark.asyncio(loop_scope="module")
async def test_a_pass_stuck_outside_python_is_stopped_by_the_job_limits(worker: Any) -> None:
    text = (
        (FIXTURES / "good.py")
        .read_text()
        .replace(
            "    for node in list(gm.graph.nodes):",
            "    import signal\n    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGALRM])\n"
            "    while True:\n        pass\n    for node in []:",
        )
    )
    result = await worker.run(_job("good.py", text), Limits(timeout_s=3.0))
    assert result.kind == "timeout"
    assert result.current_class == "Net"


def test_files_without_pass_directives_run_no_pass() -> None:
    text = (FIXTURES / "good.py").read_text().replace("# fxls: pass Net\n", "")
    result = run_capture(_job("good.py", text), lambda *a: None)
    assert _module(result, "Net").passes == []
    assert not any(d.code.startswith("FX35") for d in _module(result, "Net").diagnostics)


def test_the_observation_is_undone_and_the_original_module_untouched() -> None:
    create, erase = torch.fx.Graph.create_node, torch.fx.Graph.erase_node
    args = torch.fx.Node.__dict__["args"]
    job = _job("broken.py")
    doc, _ = capture_document(job, lambda *a: None)
    before = [n.name for n in doc.captures["Net"].traced.gm.graph.nodes]
    from fxls.worker.capture.passes import run_passes

    modules = [ModuleResult(name="Net", line=r.line, status="traced") for r in job.classes]
    run_passes(doc, job.classes, modules, lambda *a: None)
    assert torch.fx.Graph.create_node is create and torch.fx.Graph.erase_node is erase
    assert torch.fx.Node.__dict__["args"] is args
    assert [n.name for n in doc.captures["Net"].traced.gm.graph.nodes] == before
    assert len(modules[0].passes) == 9


def test_a_pass_on_a_class_without_an_fx_graph_is_not_run() -> None:
    text = """import torch
from torch import nn


# fxls: x = (B, 4)
class Branchy(nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            return x + 1
        return x - 1


# fxls: pass Branchy
def noop(gm):
    return gm
"""
    result = run_capture(_job("good.py", text), lambda *a: None)
    mod = _module(result, "Branchy")
    assert strategy_label(mod.strategy) == "fake-run"
    (run,) = mod.passes
    assert run.status == "not run" and "fake-run" in run.message
    (diag,) = [d for d in mod.diagnostics if d.code == "FX358"]
    assert diag.span.line == 14 and diag.severity == "information"
    assert from_dict(CaptureResult, to_dict(result)) == result


def test_a_pass_that_builds_a_new_graph_is_compared_by_node_names() -> None:
    copy_out = (
        "    graph = torch.fx.Graph()\n"
        "    env = {}\n"
        "    for node in gm.graph.nodes:\n"
        "        env[node] = graph.node_copy(node, lambda n: env[n])\n"
        "    return torch.fx.GraphModule(gm, graph)"
    )
    text = (FIXTURES / "good.py").read_text()
    text = text.replace("    gm.graph.lint()\n    gm.recompile()\n    return gm", copy_out)
    result = run_capture(_job("good.py", text), lambda *a: None)
    (run,) = _module(result, "Net").passes
    assert run.status == "ok", run.message
    changes = sorted((c.kind, c.node, c.by) for c in run.changes)
    assert changes == [("added", "relu_1", None), ("replaced", "relu", "relu_1")]


def test_a_pass_that_exits_or_names_a_skipped_class_keeps_the_capture() -> None:
    text = (FIXTURES / "good.py").read_text()
    text = text.replace(
        "    for node in list(gm.graph.nodes):", "    raise SystemExit(3)\n    for node in []:"
    )
    result = run_capture(_job("good.py", text), lambda *a: None)
    net = _module(result, "Net")
    assert net.status == "traced" and net.outputs
    (diag,) = [d for d in net.diagnostics if d.code == "FX356"]
    assert "SystemExit(3)" in diag.message
    assert text.splitlines()[diag.span.line - 1].strip() == "raise SystemExit(3)"

    skipped = (FIXTURES / "good.py").read_text().replace("# fxls: x = (B, 16)", "# fxls: skip")
    job = _job("good.py", skipped)
    result = run_capture(job, lambda *a: None)
    (run,) = _module(result, "Net").passes
    assert (run.status, run.message) == ("not run", "the class is skipped")


def _apply(job: CaptureJob, cls: str) -> FixOutcome:
    parsed = parse(job.source)
    (info,) = parsed.passes
    fix = FixRequest(
        id=f"pass:{cls}:{info.function}:{info.line}", kind="apply-pass", cls=cls, span=info.name_span,
        params={"pass": info.function, "line": info.line},
    )  # fmt: skip
    result = run_rewrite(job, RewriteJob(fixes=[fix]), lambda *a: None)
    assert result.rewrite is not None
    (outcome,) = result.rewrite.outcomes
    return outcome


def test_apply_pass_rewrites_forward_and_verifies_it() -> None:
    job = _job("good.py")
    outcome = _apply(job, "Net")
    assert outcome.applicability == "safe", outcome.reason
    assert outcome.title == "Apply `functional_relu` to `Net`"
    new = apply_edits(job.source, outcome.edits)
    assert new == job.source.replace("h = torch.relu(self.fc1(x))", "h = F.relu(self.fc1(x))")
    assert any("computes the same" in check for check in outcome.checks)


def test_apply_pass_is_unsafe_when_outputs_differ_and_unavailable_in_a_loop() -> None:
    changed = (
        (FIXTURES / "good.py").read_text().replace("F.relu, node.args", "torch.sigmoid, node.args")
    )
    outcome = _apply(_job("good.py", changed), "Net")
    assert outcome.applicability == "unsafe"
    assert outcome.reason.startswith("unsafe: outputs differ on x [2, 16]")
    looped = (
        (FIXTURES / "good.py")
        .read_text()
        .replace(
            "        h = torch.relu(self.fc1(x))\n",
            "        h = self.fc1(x)\n        for _ in range(2):\n            h = torch.relu(h)\n",
        )
    )
    outcome = _apply(_job("good.py", looped), "Net")
    assert outcome.applicability == "unavailable" and outcome.edits == []
    assert "loop" in outcome.reason, outcome.reason
    broken = (
        (FIXTURES / "good.py").read_text().replace("    gm.graph.lint()\n", "    return None\n")
    )
    outcome = _apply(_job("good.py", broken), "Net")
    assert outcome.applicability == "unavailable"
    assert "returned None" in outcome.reason
