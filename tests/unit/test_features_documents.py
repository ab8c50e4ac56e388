"""Document bookkeeping: line maps between an analysed version and the current text."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from fxls.lsp.documents import Analysed, Document, DocumentStore, LineMap, line_edits

BASE = "\n".join(f"line {i}" for i in range(1, 11))


def _doc() -> Document:
    doc = DocumentStore().open("file:///tmp/a.py", BASE, 1)
    doc.set_result(Analysed(version=1, text=BASE, analysis=None))
    return doc


def test_insert_above_shifts_lines_below() -> None:
    doc = _doc()
    doc.update("new\nnew\n" + BASE, 2)
    m = doc.line_map()
    assert m.to_current(1) == 3
    assert m.to_current(10) == 12
    assert m.to_analysed(3) == 1
    assert m.to_analysed(1) is None
    assert doc.stale


def test_edit_inside_a_line_drops_only_that_line() -> None:
    doc = _doc()
    doc.update(BASE.replace("line 5", "line 5 + typing"), 2)
    m = doc.line_map()
    assert m.to_current(5) is None
    assert m.to_current(4) == 4 and m.to_current(6) == 6
    assert m.to_analysed(5) is None


def test_several_edits_compose_and_new_result_resets() -> None:
    doc = _doc()
    lines = BASE.split("\n")
    doc.update("\n".join(["top", *lines]), 2)  # insert above line 1
    lines2 = ["top", *lines[:7], *lines[8:]]  # delete original line 8
    doc.update("\n".join(lines2), 3)
    m = doc.line_map()
    assert m.to_current(7) == 8
    assert m.to_current(8) is None
    assert m.to_current(9) == 9
    assert m.to_analysed(9) == 9
    doc.set_result(Analysed(version=2, text="\n".join(["top", *lines]), analysis=None))
    m = doc.line_map()
    assert m.to_current(1) == 1 and m.to_current(9) is None and m.to_current(10) == 9
    doc.set_result(Analysed(version=3, text=doc.text, analysis=None))
    assert doc.line_map().identity and not doc.stale


def test_older_result_never_replaces_newer_text_mapping() -> None:
    doc = _doc()
    doc.update(BASE + "\nmore", 5)
    doc.set_result(Analysed(version=6, text="future", analysis=None))
    assert doc.result is not None and doc.result.version == 1


def test_line_edits_none_for_equal_texts() -> None:
    assert line_edits("a\nb", "a\nb") == []
    (edit,) = line_edits("a\nb\nc", "a\nx\ny\nc")
    assert (edit.start, edit.end, edit.new_count) == (2, 2, 2)


texts = st.lists(st.sampled_from(["a", "b", "c", "d"]), min_size=1, max_size=8)


@given(texts, texts, texts)
def test_mapped_lines_keep_their_content(a: list[str], b: list[str], c: list[str]) -> None:
    """Whatever two edits happen, a line that maps has the same text at both ends."""
    doc = DocumentStore().open("file:///x.py", "\n".join(a), 1)
    doc.set_result(Analysed(version=1, text="\n".join(a), analysis=None))
    doc.update("\n".join(b), 2)
    doc.update("\n".join(c), 3)
    m: LineMap = doc.line_map()
    for line in range(1, len(a) + 1):
        cur = m.to_current(line)
        if cur is not None:
            assert c[cur - 1] == a[line - 1]
            assert m.to_analysed(cur) == line


def test_two_separate_edits_in_one_change_keep_the_lines_between() -> None:
    doc = _doc()
    lines = BASE.split("\n")
    lines[7] = "line 8 edited"
    doc.update("\n".join(["inserted", *lines]), 2)
    m = doc.line_map()
    assert m.to_current(1) == 2
    assert m.to_current(7) == 8
    assert m.to_current(8) is None
    assert m.to_current(10) == 11
    assert m.to_analysed(8) == 7
