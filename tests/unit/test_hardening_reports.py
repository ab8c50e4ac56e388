"""Hostile text in every report format of ``fxls check``: terminal escapes, bidirectional
controls, line breaks that would start a GitHub workflow command, encoded secrets, size. The
formats are called directly on a result a model could have produced; tests/e2e/
test_hardening_cli.py runs the same through the real worker and CLI."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from fxls.analysis import parse
from fxls.cli.report.escape import BLOB_RUN, MAX_TEXT, escape_text
from fxls.cli.report.github import format_github
from fxls.cli.report.jsondoc import to_json
from fxls.cli.report.sarif import sarif_log
from fxls.cli.report.text import format_text
from fxls.engine.analyze import FileAnalysis
from fxls.protocol.model import Arg, Diagnostic, ModuleResult, NodeInfo, Span, Value

SOURCE = """from torch import nn

class Net(nn.Module):
    def forward(self, x):
        return self.fc(x)
"""

ESCAPES = (
    "\x1b]52;c;aGVsbG8=\x07 \x1b]0;title\x07 \x1b[2K \x9b2J \x07\x00\x7f "
    "\u202eevil\u202c \u2066x\u2069 \u2028"
)
COMMANDS = "\n::add-mask::s3cr3t\r\n  ::stop-commands::tok ##[error]fake ##[stop-commands]x"
BLOB = "QUJD" * 500
"""2,000 characters of base64: the shape of a token encoded past log masking."""
HOSTILE = f"boom {ESCAPES}{COMMANDS} {BLOB} " + "word " * 2_000

FORBIDDEN = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
"""What no report may contain (the line feeds fxls writes between lines are allowed)."""


def _hostile(path: str) -> FileAnalysis:
    d = Diagnostic(
        code="FX199", severity="warning", message=HOSTILE, span=Span(5, 8, 5, 18), fix=HOSTILE
    )
    node = NodeInfo(
        name="fc",
        op="call_module",
        target=f"fc{ESCAPES}",
        args=[Arg(name="input", value=HOSTILE)],
        outputs=[Value(kind="other", text=HOSTILE)],
        span=Span(5, 15, 5, 25),
    )
    module = ModuleResult(
        name="Net", line=3, status="partial", nodes=[node], diagnostics=[d], outputs=[]
    )
    return FileAnalysis(
        path=path,
        version=None,
        modules=[module],
        diagnostics=[d],
        classes=parse(SOURCE).classes,
    )


def _long_runs(text: str) -> list[str]:
    return re.findall(f"[A-Za-z0-9+/=_-]{{{BLOB_RUN + 1},}}", text)


def _reports(tmp_path: Path) -> dict[str, str]:
    path = str(tmp_path / "m\x1b[31m\n::add-mask::x.py")
    analysis = _hostile(path)
    return {
        "text": format_text(analysis, None, SOURCE),
        "github": format_github(analysis, str(tmp_path)),
        "json": json.dumps(to_json(analysis), ensure_ascii=False),
        "sarif": json.dumps(sarif_log([(analysis, SOURCE)], str(tmp_path)), ensure_ascii=False),
    }


def test_no_report_carries_controls_commands_or_blobs(tmp_path: Path) -> None:
    for fmt, out in _reports(tmp_path).items():
        assert FORBIDDEN.findall(out) == [], fmt
        assert "\\x1b]52;c;" in out and "\\u202e" in out, fmt  # shown, not sent
        assert _long_runs(out) == [], fmt
        assert "<blob of 2000 characters removed>" in out, fmt
        for line in out.splitlines():
            if fmt == "github":
                assert re.match(r"::(error|warning|notice) file=", line), line
            else:
                assert not line.lstrip().startswith("::"), (fmt, line)
            assert "##[" not in line, (fmt, line)


def test_each_string_is_capped(tmp_path: Path) -> None:
    reports = _reports(tmp_path)
    for line in reports["text"].splitlines() + reports["github"].splitlines():
        assert len(line) < 2 * MAX_TEXT + 200, len(line)
    document = json.loads(reports["json"])
    message = document["modules"][0]["diagnostics"][0]["message"]
    assert len(message) <= MAX_TEXT and message.endswith("…")
    assert json.loads(reports["sarif"])["runs"][0]["results"][0]["message"]["text"].endswith("…")


def test_escape_text_shows_what_it_escaped() -> None:
    assert escape_text("a\x1bb\nc\td\x9b\u202e") == "a\\x1bb\\nc\\td\\x9b\\u202e"
    assert escape_text("  ::add-mask::x") == "  \\x3a:add-mask::x"
    assert escape_text("see ##[error]x") == "see ##\\x5berror]x"
    assert escape_text("a" * BLOB_RUN) == "a" * BLOB_RUN
    assert escape_text("=" + "a" * BLOB_RUN) == f"<blob of {BLOB_RUN + 1} characters removed>"
    assert escape_text("x" * 400, path=True) == "x" * 400  # a file's name is the repository's
    assert escape_text("line\nnext", newlines=True) == "line\nnext"


@pytest.mark.timeout(10)
def test_escape_text_is_linear() -> None:
    started = time.monotonic()
    for hostile in ("A" * 20_000_000, "\x1b" * 20_000_000, "a " * 10_000_000):
        assert len(escape_text(hostile)) <= MAX_TEXT
    assert time.monotonic() - started < 5
