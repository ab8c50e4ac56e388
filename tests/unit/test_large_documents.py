"""Large documents: edits apply without a Python loop over every character or line (counted as
lines of Python code run, which a busy machine does not change); documents over the size limit
are kept but never diffed."""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from lsprotocol import types

from fxls.lsp.documents import MAX_DOCUMENT_CHARS, Analysed, Document
from fxls.lsp.features import convert, diagnostics
from fxls.lsp.features.convert import UTF16


def _reference(text: str, change: types.TextDocumentContentChangePartial, enc: str) -> str:
    """The specification, spelled out slowly: split at \\r\\n, \\r and \\n."""
    lines: list[tuple[int, int]] = []
    start = index = 0
    while index < len(text):
        ch = text[index]
        if ch in "\r\n":
            lines.append((start, index))
            index += 2 if ch == "\r" and text.startswith("\n", index + 1) else 1
            start = index
        else:
            index += 1
    lines.append((start, len(text)))

    def offset(pos: types.Position) -> int:
        if pos.line >= len(lines):
            return len(text)
        s, e = lines[pos.line]
        return s + convert.from_units(text[s:e], pos.character, enc)

    a, b = sorted((offset(change.range.start), offset(change.range.end)))
    return text[:a] + change.text + text[b:]


position = st.builds(types.Position, line=st.integers(0, 8), character=st.integers(0, 6))


@settings(max_examples=400, deadline=None)
@given(
    st.text(alphabet=st.sampled_from(list("ab\r\n😀é")), max_size=40),
    position,
    position,
    st.text(alphabet="xy\n", max_size=3),
    st.sampled_from([convert.UTF8, convert.UTF16, convert.UTF32]),
)
def test_apply_change_follows_the_specification(
    text: str, start: types.Position, end: types.Position, new: str, enc: str
) -> None:
    change = types.TextDocumentContentChangePartial(
        range=types.Range(start=start, end=end), text=new
    )
    assert convert.apply_change(text, change, enc) == _reference(text, change, enc)


def _python_lines(work: Callable[[], object]) -> int:
    """How many lines of Python code ``work()`` runs (C code such as ``str.find`` runs
    none): a count that a busy machine does not change, unlike a time."""
    count = 0

    def tracer(frame: FrameType, event: str, arg: object) -> Callable[..., object]:
        nonlocal count
        count += event == "line"
        return tracer

    sys.settrace(tracer)
    try:
        work()
    finally:
        sys.settrace(None)
    return count


def test_edits_near_the_end_of_a_huge_document_are_fast() -> None:
    lines = 400_000
    for terminator in ("\n", "\r\n"):
        text = terminator.join(f"x = {i}  # a line of code" for i in range(lines))
        change = types.TextDocumentContentChangePartial(
            range=types.Range(types.Position(lines - 2, 0), types.Position(lines - 2, 1)),
            text="y",
        )
        # the lines and characters are counted by C code, a block at a time: a Python loop
        # over every line would run 400,000 lines of code at least, one over the ~11 MB of
        # characters millions (it took seconds per edit)
        edited: list[str] = []

        def edit(text: str = text, change: Any = change, edited: list[str] = edited) -> None:
            edited.append(convert.apply_change(text, change, UTF16))

        ran = _python_lines(edit)
        assert ran < 20_000, ran
        assert edited[0].split(terminator)[lines - 2].startswith("y = ")


def test_a_document_over_the_limit_drops_its_result_and_is_not_diffed() -> None:
    doc = Document(uri="file:///m.py", path="/m.py", text="a\n", version=1)
    doc.set_result(Analysed(version=1, text="a\n", analysis=None))
    huge = "b\n" * (MAX_DOCUMENT_CHARS // 2 + 1)
    doc.update(huge, 2)
    assert doc.too_large and doc.result is None and doc.edits == []

    def edits() -> None:
        doc.update(huge + "c\n", 3)  # would be a line diff of a million lines otherwise
        doc.update("small\n", 4)

    assert _python_lines(edits) < 5_000  # a diff of the lines runs millions of lines of code
    assert not doc.too_large and doc.edits == []


def test_too_large_is_one_information_diagnostic_at_the_start() -> None:
    found = diagnostics.too_large(50_000_000, MAX_DOCUMENT_CHARS)
    assert found.code == "FX407"
    assert found.severity == types.DiagnosticSeverity.Information
    assert found.range.start == found.range.end == types.Position(0, 0)
    assert "50,000,000" in found.message
