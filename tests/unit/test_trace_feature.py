"""The pure part of "Trace class at cursor" (fxls.lsp.features.trace): which class a line is in,
and the plain-text answer built from a ModuleResult."""

from __future__ import annotations

import textwrap

from fxls.lsp.features import trace
from fxls.protocol.model import (
    Construction,
    Diagnostic,
    ErrorInfo,
    InputValue,
    ModuleResult,
    Span,
    Strategy,
    Value,
)

TEXT = textwrap.dedent(
    """\
    import torch.nn as nn


    def helper(x):
        return x


    # fxls: x = (B, 4)
    @some_decorator
    class Net(nn.Module):
        def forward(self, x):
            return x

    class Plain:
        pass

    class Child(Net):
        pass
    """
)


def _line(needle: str) -> int:
    return TEXT.split("\n").index(next(t for t in TEXT.split("\n") if needle in t)) + 1


def test_the_class_at_a_line_includes_its_directives_and_decorators() -> None:
    for needle in ("# fxls: x = (B, 4)", "@some_decorator", "class Net", "return x"):
        found = trace.class_at(TEXT, _line(needle) if needle != "return x" else 12)
        assert found is not None and found.name == "Net", needle
    assert trace.class_at(TEXT, _line("def helper")) is None
    assert trace.class_at(TEXT, _line("class Plain")) is None  # not an nn.Module class
    child = trace.class_at(TEXT, _line("class Child"))
    assert child is not None and child.name == "Child"
    assert trace.class_at("class Broken(nn.Module:\n", 1) is None  # does not parse


def _tensor(*shape: object) -> Value:
    return Value(kind="tensor", shape=list(shape), dtype="torch.float32")  # type: ignore[arg-type]


def test_the_answer_is_plain_clipped_text() -> None:
    hostile = "bad\x1b[31m]\n(command:x)" + "y" * 5_000
    module = ModuleResult(
        name="Net",
        line=10,
        status="failed",
        strategy=Strategy("none"),
        constructed=Construction("assumed", "Net(dim=64)", {"dim": "64"}, pin="dim=64"),
        params=1234,
        inputs=[InputValue("x", _tensor("B", 4), assumed=True, origin="assumed")],
        error=ErrorInfo(kind="exception", phase="trace", type="RuntimeError", message=hostile),
    )
    error = Diagnostic("FX201", "error", hostile, Span(12, 4, 12, 9))
    answer = trace.report(
        module, [module], [error], version=3, mapper=lambda line: line + 1, isolation=["seccomp"]
    )
    assert answer["kind"] == "failed" and answer["className"] == "Net"
    assert answer["line"] == 10  # 0-based, one line further down in the current text
    assert answer["summary"].startswith("Net: failed · FX201 bad")
    assert answer["assumed"] == ["dim=64", "input x [B, 4] float32"]
    assert answer["pin"] == "# fxls: init(dim=64)"
    (diag,) = answer["diagnostics"]
    assert diag == {
        "code": "FX201",
        "severity": "error",
        "message": "bad\x20[31m]",
        "line": 12,
    }
    strings = [answer["summary"], answer["message"], *answer["details"], diag["message"]]
    assert all(len(s) <= trace.MAX_LINE for s in strings)
    assert not any(ch in s for s in strings for ch in "\x1b\n\r")
    assert answer["graph"] is False
    assert trace.problem("noClass", "x\ny")["message"] == "x y"
