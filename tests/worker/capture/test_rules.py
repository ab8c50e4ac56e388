"""User rules in-process: loading the rules file, matching, applying one match and verifying it.

Fixtures: ``tests/fixtures/rules`` (``fxls_rules.py``, ``mlp_before.py`` / ``mlp_after.py``,
``stack.py``). ``run_rewrite`` executes user code as the sandboxed child does.
"""

from __future__ import annotations

from pathlib import Path

from fxls.analysis import parse
from fxls.protocol.codec import from_dict, to_dict
from fxls.protocol.edits import apply_edits
from fxls.protocol.model import (
    CaptureJob,
    CaptureResult,
    Diagnostic,
    FixOutcome,
    FixRequest,
    RewriteJob,
    RulesFile,
)
from fxls.worker.capture.pipeline import capture_document
from fxls.worker.rewrite.run import run_rewrite

FIXTURES = Path(__file__).parents[2] / "fixtures" / "rules"
RULES = FIXTURES / "fxls_rules.py"


def _job(name: str, rules: RulesFile | None = None) -> CaptureJob:
    path = FIXTURES / name
    text = path.read_text()
    return CaptureJob(
        path=str(path),
        source=text,
        classes=[c.request() for c in parse(text).classes],
        sys_path=[str(FIXTURES)],
        rules=rules or RulesFile(str(RULES), RULES.read_text()),
    )


def _capture(job: CaptureJob) -> CaptureResult:
    _, result = capture_document(job, lambda *a: None)
    assert from_dict(CaptureResult, to_dict(result)) == result  # survives the wire
    return result


def _matches(result: CaptureResult) -> list[tuple[str, Diagnostic]]:
    return [(m.name, d) for m in result.modules for d in m.diagnostics if d.code == "FX360"]


def _apply(job: CaptureJob, cls: str, diag: Diagnostic) -> FixOutcome:
    fix = FixRequest(
        id=f"rule:{diag.data['rule']}",
        kind="rule",
        cls=cls,
        span=diag.span,
        code="FX360",
        params={"rule": diag.data["rule"]},
    )
    result = run_rewrite(job, RewriteJob(fixes=[fix]), lambda *a: None)
    assert result.rewrite is not None
    (outcome,) = result.rewrite.outcomes
    return outcome


def test_each_match_is_an_fx360_at_the_matched_code() -> None:
    job = _job("mlp_before.py")
    found = _matches(_capture(job))
    assert [(cls, d.data["rule"], d.span.line) for cls, d in found] == [
        ("MLP", "gelu_tanh", 21),
        ("MLP", "hard_gate", 23),
    ]
    gelu = found[0][1]
    lines = job.source.split("\n")
    assert lines[20][gelu.span.col : gelu.span.end_col].startswith("0.5 * h * (1.0 + torch.tanh(")
    assert gelu.severity == "information"
    # without a rules file nothing matches
    job.rules = None
    assert _matches(_capture(job)) == []


def test_a_rule_that_computes_the_same_is_safe_and_gives_the_after_fixture() -> None:
    job = _job("mlp_before.py")
    (_, gelu), _ = _matches(_capture(job))
    outcome = _apply(job, "MLP", gelu)
    assert outcome.applicability == "safe", outcome.reason
    assert outcome.title == "Apply rule `gelu_tanh`"
    assert any("computes the same" in c for c in outcome.checks)
    after = apply_edits(job.source, outcome.edits)
    assert after == (FIXTURES / "mlp_after.py").read_text()


def test_a_rule_that_changes_results_is_unsafe_with_the_counterexample() -> None:
    job = _job("mlp_before.py")
    _, (_, gate) = _matches(_capture(job))
    outcome = _apply(job, "MLP", gate)
    assert outcome.applicability == "unsafe"
    assert "outputs differ on x [2, 16]" in outcome.reason
    assert "g = F.hardsigmoid(self.gate(x))" in apply_edits(job.source, outcome.edits)


def test_a_match_inside_a_loop_is_refused() -> None:
    job = _job("stack.py")
    ((cls, diag),) = _matches(_capture(job))
    outcome = _apply(job, cls, diag)
    assert outcome.applicability == "unavailable"
    assert outcome.edits == []
    assert "`for` loop at line 14" in outcome.reason and "unroll" in outcome.reason


def _load_problems(text: str) -> list[tuple[str, int, str]]:
    path = FIXTURES / "fxls_rules.py"
    job = CaptureJob(path=str(path), source=text, rules=RulesFile(str(path), text))
    result = _capture(job)
    return [(d.code, d.span.line, d.message) for d in result.diagnostics]


def test_the_rules_file_reports_why_a_rule_does_not_load() -> None:
    text = """import torch


def pattern_orphan(x):
    return x.sigmoid()


def pattern_branchy(x):
    if x.sum() > 0:
        return x
    return -x


def replacement_branchy(x):
    return x.abs()


def pattern_arity(x):
    return x + 1


def replacement_arity(x, y):
    return x + y


def pattern_fine(x):
    return torch.relu(x)


def replacement_fine(x):
    return torch.clamp(x, min=0.0)
"""
    problems = _load_problems(text)
    assert [(code, line) for code, line, _ in problems] == [
        ("FX362", 4),
        ("FX363", 9),
        ("FX363", 22),
    ], problems
    assert "`pattern_orphan` has no `replacement_orphan`" in problems[0][2]
    assert "control flow" in problems[1][2]
    assert "takes 2 argument(s), the pattern 1" in problems[2][2]
    assert _load_problems(RULES.read_text()) == []


def test_a_rules_file_that_raises_or_does_not_parse_is_fx361_at_its_line() -> None:
    raising = "import torch\n\nLIMIT = 1 / 0\n\n\ndef pattern_a(x):\n    return x\n"
    assert [(c, line) for c, line, _ in _load_problems(raising)] == [("FX361", 3)]
    assert "ZeroDivisionError" in _load_problems(raising)[0][2]
    broken = "import torch\n\ndef pattern_a(x:\n    return x\n"
    ((code, line, message),) = _load_problems(broken)
    assert code == "FX361" and line == 3 and "SyntaxError" in message


def test_a_rules_file_that_hangs_is_fx361_not_a_lost_capture() -> None:
    hanging = "import torch\n\n\ndef pattern_a(x):\n    while True:\n        pass\n\n\ndef replacement_a(x):\n    return x\n"
    ((code, line, message),) = _load_problems(hanging)
    assert code == "FX361" and line in (5, 6), (line, message)
    assert "took longer than" in message
    # the result says so, for any document the rules went with (the server then leaves
    # this text out of the next jobs); rules that load say nothing
    model = FIXTURES / "mlp_before.py"
    for text, slow in ((hanging, True), (RULES.read_text(), False)):
        rules = RulesFile(str(FIXTURES / "fxls_rules.py"), text)
        job = CaptureJob(path=str(model), source=model.read_text(), rules=rules)
        assert _capture(job).rules_too_slow is slow


def test_only_plain_function_names_are_rules() -> None:
    text = (
        "import torch\n\n\ndef _p(x):\n    return torch.sigmoid(x)\n\n\n"
        "globals()['pattern_`odd\\nname'] = _p\nglobals()['replacement_`odd\\nname'] = _p\n"
    )
    path = FIXTURES / "fxls_rules.py"
    job = _job("mlp_before.py", RulesFile(str(path), text))
    assert _matches(_capture(job)) == []
    assert _load_problems(text) == []
