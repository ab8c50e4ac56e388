"""Source segments and tokens of fxls.protocol.positions against the standard library's."""

from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

import pytest

from fxls.protocol import positions
from fxls.protocol.positions import SourceText, tokens

ROOT = Path(__file__).resolve().parents[2]
ODD = [
    "a = 1; b = 2\nclass A:\n  x = 1\n",
    "x = (1 +\n 2)\n# c\n\n@dec\n# between\nclass B: pass\n# tail",
    "s = '''\n# not a comment\n'''\n",
    "x = 1 \\\n  + 2\ny = 3",
    "if x:\n    pass\n# end\n",
    "x = 1\r\ny = 2\r\n# c\r\n",
    "def f(a: 'é' = 1, *b: int, c: list[int] = []) -> None:\n\treturn 1\n\f\nz = f('ü', ñ)\n",
    "class Z(Base['ü'],\n        metaclass=M): pass\n",
]


def _texts() -> list[str]:
    files = sorted((ROOT / "tests" / "corpus").rglob("*.py")) + sorted(
        (ROOT / "docs" / "examples").glob("*.py")
    )
    return ODD + [f.read_text(encoding="utf-8") for f in files]


def _whole(text: str) -> list[tuple[object, ...]]:
    toks = tokenize.generate_tokens(io.StringIO(text).readline)
    return [(t.type, t.string, t.start, t.end) for t in toks if t.type not in positions._NOT_CODE]


def test_segment_is_the_standard_source_segment() -> None:
    examples = sorted((ROOT / "docs" / "examples").glob("*.py"))
    for text in ODD + [f.read_text(encoding="utf-8") for f in examples]:
        src = SourceText(text)
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.expr):
                assert src.segment(node) == ast.get_source_segment(text, node)


def test_tokens_by_statement_are_the_tokens_of_the_whole_text() -> None:
    for text in _texts():
        body = ast.parse(text).body
        assert [(t.type, t.string, t.start, t.end) for t in tokens(text, body)] == _whole(text)


def test_an_edit_inside_one_statement_tokenizes_that_statement_only() -> None:
    text = ODD[1]
    tokens(text, ast.parse(text).body)
    before = set(positions._CHUNKS)
    edited = text.replace("class B: pass", "class B: x = 2")
    body = ast.parse(edited).body
    assert [(t.type, t.string, t.start, t.end) for t in tokens(edited, body)] == _whole(edited)
    assert len(set(positions._CHUNKS) - before) == 1


def test_statements_moved_by_lines_added_above_them_are_not_tokenized_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    text = ODD[1]
    tokens(text, ast.parse(text).body)
    tokenized: list[str] = []
    real = positions._tokenize

    def counting(source: str, offset: int) -> tuple[tokenize.TokenInfo, ...]:
        tokenized.append(source)
        return real(source, offset)

    monkeypatch.setattr(positions, "_tokenize", counting)
    for edited in ("# new\n\n" + text, "_e = 1\n" + text.replace("x = (1 +\n 2)", "x = 3")):
        body = ast.parse(edited).body
        assert [(t.type, t.string, t.start, t.end) for t in tokens(edited, body)] == _whole(edited)
    # the first edit moved every statement; the second changed the first one only
    assert tokenized == ["# new\n\nx = (1 +\n 2)\n", "_e = 1\n", "x = 3\n"]
