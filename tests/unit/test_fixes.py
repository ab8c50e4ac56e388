"""The pure parts of code actions: edits, minimal diffs, which fixes an analysis offers, and
their LSP form (ranges in the client's encoding, data, kinds, resolve results)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lsprotocol import types

from fxls.analysis import parse
from fxls.engine.analyze import FileAnalysis
from fxls.engine.fixes import Candidate, candidates, minimal_edits, moved, recheck, refactors_at
from fxls.lsp.features import code_actions
from fxls.lsp.features.convert import UTF8, UTF16, apply_change
from fxls.protocol.edits import EditError, apply_edits, overlaps
from fxls.protocol.model import (
    Arg,
    Diagnostic,
    FixOutcome,
    ModuleResult,
    NodeInfo,
    OutputSample,
    OutputValues,
    Span,
    TextEdit,
)
from fxls.protocol.outputs import pack

# ---------------------------------------------------------------------------------------
# Protocol edits
# ---------------------------------------------------------------------------------------


def test_apply_edits_replaces_inserts_and_deletes() -> None:
    text = "a = 1\nb = 2\nc = 3\n"
    edits = [
        TextEdit(Span(2, 0, 3, 0), ""),  # delete line 2
        TextEdit(Span(1, 4, 1, 5), "10"),
        TextEdit(Span(1, 0, 1, 0), "# top\n"),
        TextEdit(Span(1, 0, 1, 0), "# second\n"),  # same point: kept in order
    ]
    assert apply_edits(text, edits) == "# top\n# second\na = 10\nc = 3\n"


def test_apply_edits_code_points_and_crlf() -> None:
    text = "s = 'größe 😀'; x = 1\r\ny = 2\r\n"
    col = text.index("x")
    out = apply_edits(text, [TextEdit(Span(1, col, 1, col + 1), "z")])
    assert out == "s = 'größe 😀'; z = 1\r\ny = 2\r\n"
    assert apply_edits(text, [TextEdit(Span(2, 0, 3, 0), "")]) == "s = 'größe 😀'; x = 1\r\n"


def test_overlapping_edits_are_rejected() -> None:
    text = "abcdef\n"
    edits = [TextEdit(Span(1, 0, 1, 3), "x"), TextEdit(Span(1, 2, 1, 4), "y")]
    assert overlaps(text, edits)
    with pytest.raises(EditError):
        apply_edits(text, edits)
    assert not overlaps(text, [TextEdit(Span(1, 0, 1, 2), "x"), TextEdit(Span(1, 2, 1, 2), "y")])


# ---------------------------------------------------------------------------------------
# Minimal edits
# ---------------------------------------------------------------------------------------

LINES = st.lists(
    st.sampled_from(["x = 1", "    y = f(x)", "", "# c", "z = 'größe 😀'", "\treturn y"]),
    max_size=12,
)


@settings(max_examples=200, deadline=None)
@given(LINES, LINES, st.sampled_from(["\n", "\r\n"]))
def test_minimal_edits_reproduce_the_new_text(a: list[str], b: list[str], nl: str) -> None:
    old, new = nl.join(a) + nl, nl.join(b) + nl
    edits = minimal_edits(old, new)
    assert apply_edits(old, edits) == new
    assert not overlaps(old, edits)


def test_minimal_edits_touch_only_what_changed() -> None:
    old = "def f(x):\n    h = a(x)\n    wasted = b(x)\n    return h\n"
    new = "def f(x):\n    h = a(x)\n    return h\n"
    (edit,) = minimal_edits(old, new)
    assert edit == TextEdit(Span(3, 0, 4, 0), "")
    old = "    return y.sum(0) / len(y)  # note\n"
    new = "    return y.sum(0) / y.size(0)  # note\n"
    (edit,) = minimal_edits(old, new)
    assert old[edit.span.col : edit.span.end_col] in ("len(y", "len(y)")
    assert apply_edits(old, [edit]) == new
    assert minimal_edits(old, old) == []


# ---------------------------------------------------------------------------------------
# Which fixes an analysis offers
# ---------------------------------------------------------------------------------------

SOURCE = """import torch
from torch import nn


class Net(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.fc = nn.Linear(dim, dim)

    def forward(self, x):
        assert x.dim() == 2
        wasted = self.fc(x).relu()
        n = len(x)
        h = torch.zeros(x.size(0), 4)
        print(h.shape)
        r = len(h.shape)
        return self.fc(x)
"""


def _span(text: str, needle: str) -> Span:
    offset = text.index(needle)
    line = text.count("\n", 0, offset) + 1
    col = offset - (text.rfind("\n", 0, offset) + 1)
    return Span(line, col, line, col + len(needle))


def _analysis(diagnostics: list[Diagnostic], nodes: list[NodeInfo] | None = None) -> FileAnalysis:
    mod = ModuleResult("Net", 5, "traced", diagnostics=diagnostics, nodes=nodes or [])
    return FileAnalysis(path="/x.py", version=1, modules=[mod], classes=parse(SOURCE).classes)


def _diag(code: str, needle: str, **data: object) -> Diagnostic:
    return Diagnostic(code, "hint", "m", _span(SOURCE, needle), data=dict(data))


def test_a_check_on_an_input_to_declare_offers_the_declaration() -> None:
    found = candidates(
        _analysis([_diag("FX101", "x.dim() == 2", arg="x", declare="(B, 64)")]), SOURCE
    )
    assert [(c.kind, c.title) for c in found if c.kind == "directive"] == [
        ("directive", "Declare `x` with `# fxls: x = (B, 64)`")
    ]


def test_the_length_fix_of_a_shape_is_the_rank() -> None:
    found = candidates(_analysis([_diag("FX102", "len(h.shape)")]), SOURCE)
    assert [(c.kind, c.title) for c in found] == [
        ("length", "Replace `len(h.shape)` with `h.dim()` (traceable)")
    ]


def test_candidates_from_diagnostics() -> None:
    found = candidates(
        _analysis(
            [
                _diag("FX101", "x.dim() == 2", exception="TraceError"),
                _diag("FX302", "self.fc(x).relu()"),
                _diag("FX102", "len(x)"),
                _diag("FX105", "torch.zeros(x.size(0), 4)"),
                _diag("FX408", "Net", init="dim=64", assumed={"dim": "64"}),
                _diag("FX405", "x):", arg="x", shape="(B, 64)"),
                _diag("FX101", "x.dim() == 2", leaf="Sub"),
                _diag("FX103", "len(x)", wrap="helper"),
                _diag("FX201", "self.fc(x)"),  # nothing to fix
                _diag("FX601", "print(h.shape)"),
            ]
        ),
        SOURCE,
    )
    got = [(c.kind, c.cls, c.title) for c in found]
    assert got == [
        ("directive", "Net", "Pin the constructor arguments: `# fxls: init(dim=64)`"),
        (
            "directive",
            "Net",
            "Pin the assumed input `x` (B, 64) with `# fxls: x = ...`",
        ),
        ("assertion", "Net", "Replace `assert` with `torch._assert(...)` (traceable)"),
        ("leaf", "Net", "Keep `Sub` as a leaf: `# fxls: leaf Sub`"),
        ("dead-code", "Net", "Remove unused `wasted = self.fc(x).relu()`"),
        ("length", "Net", "Replace `len(x)` with `x.size(0)` (traceable)"),
        ("wrap", "Net", 'Wrap `helper` for torch.fx: `torch.fx.wrap("helper")`'),
        ("new-tensor", "Net", "Replace `torch.zeros(...)` with `x.new_zeros(...)` (traceable)"),
        ("remove-print", "Net", "Remove the debug call `print(h.shape)`"),
    ]
    assert all(c.fix_all for c in found if c.kind != "remove-print")
    assert not next(c for c in found if c.kind == "remove-print").fix_all
    assert len({c.id for c in found}) == len(found)


def test_candidates_need_their_evidence() -> None:
    found = candidates(
        _analysis(
            [
                _diag("FX302", "Linear(dim, dim)"),  # not in forward
                _diag("FX408", "Net", init=None),  # no pin
                _diag("FX101", "len(x)"),  # not an assert, no repair named
                _diag("FX402", "x):", arg="x"),  # an unknown input: no shape to declare
            ]
        ),
        SOURCE,
    )
    assert found == []
    assert candidates(_analysis([_diag("FX302", "self.fc(x).relu()")]), SOURCE + "(") == []


def test_an_input_left_none_is_declared_as_suggested() -> None:
    found = candidates(_analysis([_diag("FX402", "h.shape", arg="h", declare="(B, 4)")]), SOURCE)
    assert [(c.kind, c.cls, c.title, c.params) for c in found] == [
        (
            "directive",
            "Net",
            "Declare `h` with `# fxls: h = (B, 4)`",
            {"what": "declare", "arg": "h", "shape": "(B, 4)"},
        )
    ]


def test_same_fix_from_two_modules_is_listed_once() -> None:
    diag = _diag("FX102", "len(x)")
    analysis = _analysis([diag])
    analysis.modules.append(ModuleResult("Other", 1, "partial", diagnostics=[diag]))
    assert [c.kind for c in candidates(analysis, SOURCE)] == ["length"]


def test_name_every_argument_at_the_cursor() -> None:
    span = _span(SOURCE, "torch.zeros(x.size(0), 4)")
    node = NodeInfo(
        "zeros",
        "call_function",
        "torch.zeros",
        span=span,
        signature="aten",
        args=[Arg("size", "[x, 4]")],
    )
    analysis = _analysis([], [node])
    (found,) = refactors_at(analysis, SOURCE, span.line, span.col + 3)
    assert found.kind == "name-args" and found.category == "refactor"
    assert found.title == "Name every argument of `torch.zeros(...)`"
    assert refactors_at(analysis, SOURCE, span.line - 1, 0) == []
    node.signature = "approximate"
    assert refactors_at(analysis, SOURCE, span.line, span.col + 3) == []


def test_moved_spans() -> None:
    span = Span(3, 1, 4, 2)
    assert moved(span, lambda line: line + 2) == Span(5, 1, 6, 2)
    assert moved(span, lambda line: None if line == 4 else line) is None


# ---------------------------------------------------------------------------------------
# LSP form
# ---------------------------------------------------------------------------------------


def _offered(outcome: FixOutcome | None = None) -> code_actions.Offered:
    cand = Candidate(
        id="FX102:len:Net:13:12",
        kind="length",
        cls="Net",
        span=_span(SOURCE, "len(x)"),
        title="Replace `len(x)` with `x.size(0)` (traceable)",
        code="FX102",
        diagnostic=_diag("FX102", "len(x)"),
    )
    return code_actions.Offered(cand, cand.span, outcome)


def _list(
    offered: list[code_actions.Offered],
    rng: types.Range,
    only: list[str] | None = None,
    unsafe: bool = False,
    disabled: bool = False,
) -> list[types.CodeAction]:
    return code_actions.lsp_code_actions(
        offered,
        "file:///x.py",
        7,
        SOURCE.split("\n"),
        UTF16,
        rng,
        types.CodeActionContext(diagnostics=[], only=only),
        mapper=lambda line: line,
        unsafe=unsafe,
        fix_all=True,
        disabled=disabled,
    )


def _at(line: int, col: int) -> types.Range:
    return types.Range(types.Position(line, col), types.Position(line, col))


def test_actions_at_the_span_with_data_and_kinds() -> None:
    item = _offered()
    line = item.span.line - 1
    actions = _list([item], _at(line, item.span.col + 1))
    fix, fix_all = actions
    assert fix.kind == "quickfix" and fix.edit is None
    assert fix.data == {
        "uri": "file:///x.py",
        "version": 7,
        "fix": "FX102:len:Net:13:12",
        "kind": "length",
        "class": "Net",
        "code": "FX102",
        "span": [item.span.line, item.span.col, item.span.end_line, item.span.end_col],
        "params": {},
    }
    assert fix.diagnostics and fix.diagnostics[0].code == "FX102"
    assert fix_all.kind == "source.fixAll.fxls" and fix_all.data["fix"] == "all"
    assert _list([item], _at(0, 0)) == [fix_all]
    assert _list([item], _at(line, item.span.col), only=["refactor"]) == []
    assert [a.kind for a in _list([item], _at(line, 20), only=["source.fixAll"])] == [
        "source.fixAll.fxls"
    ]
    request = code_actions.fix_request(fix.data)
    assert request is not None and request.span == item.span and request.kind == "length"


def test_known_outcomes_decide_what_is_listed() -> None:
    rng = _at(_offered().span.line - 1, _offered().span.col)
    unavailable = FixOutcome("x", "unavailable", "t", reason="no")
    assert [a.kind for a in _list([_offered(unavailable)], rng, only=["quickfix"])] == []
    edit = [TextEdit(Span(1, 0, 1, 0), "#\n")]
    unsafe = FixOutcome("x", "unsafe", "Title", edit, reason="unsafe: too large to verify")
    assert _list([_offered(unsafe)], rng, only=["quickfix"]) == []
    (shown,) = _list([_offered(unsafe)], rng, only=["quickfix"], unsafe=True)
    assert shown.title == "Title (unsafe: too large to verify)"
    safe = FixOutcome("x", "safe", "Verified title", edit)
    (shown,) = _list([_offered(safe)], rng, only=["quickfix"])
    assert shown.title == "Verified title" and shown.is_preferred is True
    assert shown.disabled is None


def test_known_refusals_are_listed_disabled_with_the_reason_for_clients_that_show_them() -> None:
    """VS Code shows a disabled action greyed out with its reason; a client without
    ``disabledSupport`` (Neovim 0.11) does not get it."""
    item = _offered()
    rng = _at(item.span.line - 1, item.span.col)
    unavailable = FixOutcome("x", "unavailable", "x", reason="`h.mul_` works in place")
    (shown,) = _list([_offered(unavailable)], rng, only=["quickfix"], disabled=True)
    assert shown.title == item.candidate.title  # not the outcome's placeholder title
    assert shown.disabled is not None and shown.edit is None
    assert shown.disabled.reason == "fxls cannot make this fix: `h.mul_` works in place"
    assert shown.data is not None and shown.data["fix"] == item.candidate.id
    edit = [TextEdit(Span(1, 0, 1, 0), "#\n")]
    unsafe = FixOutcome("x", "unsafe", "Title", edit, reason="unsafe: too large\u202e\nto verify")
    (shown,) = _list([_offered(unsafe)], rng, only=["quickfix"], disabled=True)
    assert shown.disabled is not None
    assert shown.disabled.reason == (
        "not verified safe: unsafe: too large\\u202e to verify; "
        "set `fxls.codeActions.unsafe` to apply it anyway"
    )
    (shown,) = _list([_offered(unsafe)], rng, only=["quickfix"], unsafe=True, disabled=True)
    assert shown.disabled is None and shown.title.startswith("Title (unsafe: too large")


def test_resolved_edits_are_minimal_and_in_the_client_encoding() -> None:
    text = "s = 'größe 😀'; n = len(x)\n"
    col = text.index("len(x)")
    outcome = FixOutcome(
        "x", "safe", "t", [TextEdit(Span(1, col, 1, col + len("len(x)")), "x.size(0)")]
    )
    for encoding in (UTF16, UTF8):
        action = types.CodeAction(title="t", data={})
        done = code_actions.resolved(action, outcome, text, "file:///x.py", 3, encoding)
        assert done.edit is not None and done.edit.document_changes
        (change,) = done.edit.document_changes
        assert isinstance(change, types.TextDocumentEdit)
        assert change.text_document.version == 3
        out = text
        for edit in reversed(change.edits):
            assert isinstance(edit, types.TextEdit)
            partial = types.TextDocumentContentChangePartial(range=edit.range, text=edit.new_text)
            out = apply_change(out, partial, encoding)
        assert out == "s = 'größe 😀'; n = x.size(0)\n"
    done = code_actions.resolved(
        types.CodeAction(title="t"), outcome, text, "file:///x.py", 3, UTF16, versioned=False
    )
    assert done.edit is not None and list(done.edit.changes or {}) == ["file:///x.py"]


def test_resolved_refusals_say_why() -> None:
    unavailable = FixOutcome("x", "unavailable", "t", reason="`h.mul_` works in place")
    done = code_actions.resolved(types.CodeAction(title="t"), unavailable, "", "u", 1, UTF16)
    assert done.edit is None and done.disabled is not None
    assert done.disabled.reason == "fxls cannot make this fix: `h.mul_` works in place"
    unsafe = FixOutcome("x", "unsafe", "t", [TextEdit(Span(1, 0, 1, 0), "#")], reason="unsafe: r")
    done = code_actions.resolved(types.CodeAction(title="t"), unsafe, "", "u", 1, UTF16)
    assert done.edit is None and done.disabled is not None
    assert "fxls.codeActions.unsafe" in done.disabled.reason
    done = code_actions.resolved(
        types.CodeAction(title="t"), unsafe, "", "u", 1, UTF16, unsafe=True
    )
    assert done.edit is not None and done.title == "t (unsafe: r)"
    assert code_actions.refused_message(done) is None
    # an action listed disabled, resolved once unsafe fixes are on: no longer disabled
    listed = code_actions.refused(types.CodeAction(title="t"), "not verified safe")
    done = code_actions.resolved(listed, unsafe, "", "u", 1, UTF16, unsafe=True)
    assert done.edit is not None and done.disabled is None


def test_a_refused_resolve_is_also_a_message() -> None:
    """Editors apply a resolved action without reading ``disabled``: the server says the
    reason with ``window/showMessage`` too, as plain text on one line, capped."""
    why = FixOutcome(
        "x", "unavailable", "t", reason="the output shapes of `Net` change\n[evil](command:x)"
    )
    done = code_actions.resolved(types.CodeAction(title="Replace `len(x)`"), why, "", "u", 1, UTF16)
    message = code_actions.refused_message(done)
    assert message == (
        "Replace `len(x)`: fxls cannot make this fix: the output shapes of `Net` change "
        "[evil](command:x)"
    )
    long = FixOutcome("x", "unavailable", "t", reason="x" * 5000)
    done = code_actions.resolved(types.CodeAction(title="t"), long, "", "u", 1, UTF16)
    message = code_actions.refused_message(done)
    assert message is not None and len(message) <= 1000 and message.endswith("…")


def _sample(before: list[float], after: list[float], dtype: str = "torch.float32") -> OutputSample:
    return OutputSample(
        "the output",
        "x [2]",
        OutputValues(dtype, [len(before)], pack(before, dtype)),
        OutputValues(dtype, [len(after)], pack(after, dtype)),
    )


def test_recheck_compares_the_outputs_a_job_found_equal_like_allclose() -> None:
    """Within tolerance, NaN with NaN and equal infinities agree; a difference, an integer
    off by one, another shape or a sample that does not match its shape makes a safe fix
    unsafe; the samples are dropped either way."""
    nan, inf = float("nan"), float("inf")
    agree = [
        _sample([1.0, nan, inf], [1.0 + 1e-6, nan, inf]),
        _sample([3, 4], [3, 4], "torch.int64"),
    ]
    differ = [
        _sample([1.0, 2.0], [1.0, 2.5]),
        _sample([1.0, nan], [1.0, 0.0]),
        _sample([3, 4], [3, 5], "torch.bool"),
        _sample([1.0], [1.0, 2.0]),
    ]
    broken = _sample([1.0, 2.0], [1.0, 2.0])
    broken.after.values = broken.after.values[:-4]
    for samples, verdict in [(agree, "safe"), *(([s], "unsafe") for s in [*differ, broken])]:
        outcome = FixOutcome("f", "safe", "t", samples=samples)
        recheck(outcome)
        assert outcome.applicability == verdict, samples
        assert outcome.samples == []
        if verdict == "unsafe":
            assert "outside the sandbox" in outcome.reason
