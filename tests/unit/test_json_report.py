"""The JSON report lists each diagnostic once, in the class it belongs to."""

from __future__ import annotations

from fxls.cli.report.jsondoc import to_json
from fxls.engine.analyze import FileAnalysis
from fxls.protocol.model import Diagnostic, ModuleResult, Span


def _fx104(data: dict[str, str]) -> Diagnostic:
    return Diagnostic(
        "FX104", "warning", "a traced value is used where Python needs a real number: `int(n)`",
        Span(5, 8, 5, 14), data=data,
    )  # fmt: skip


def test_the_same_diagnostic_from_a_class_and_the_file_is_listed_once() -> None:
    """A class captured again inside its parent reports the same failure with other data
    (which capture found it): the file keeps one of them, and the class's document lists it
    once, not once per copy."""
    own, parents = _fx104({"strategy": "fake-run"}), _fx104({"strategy": "fx+leaf"})
    module = ModuleResult(name="FeedForward", line=3, status="partial", diagnostics=[own])
    analysis = FileAnalysis("/p/m.py", None, [module], diagnostics=[parents])
    doc = to_json(analysis)
    (listed,) = doc["modules"][0]["diagnostics"]
    assert listed["code"] == "FX104" and listed["line"] == 5
    assert doc["diagnostics"] == []
