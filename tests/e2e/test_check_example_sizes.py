"""``fxls check`` says which values hold for the example sizes only, as the editor does: the
JSON's ``holds_for`` on the module and on each such node, and ``(holds for B = 2)`` after the
class's outputs in the text output."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "capture" / "example_sizes.py"

pytestmark = pytest.mark.worker


def _check(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "fxls", "check", *args, str(FIXTURE)],
        capture_output=True,
        text=True,
        timeout=240,
        stdin=subprocess.DEVNULL,
    )
    return done.stdout


def test_values_that_hold_for_the_example_sizes_only_say_so_in_json_and_text() -> None:
    modules = {m["class"]: m for m in json.loads(_check("--json"))["modules"]}
    two_rows = modules["TwoRows"]
    assert two_rows["outputs"][0]["shape"] == [2, 4, 2]
    assert two_rows["holds_for"] == {"B": 2}, two_rows["holds_for"]
    held = [n for n in two_rows["nodes"] if n["holds_for"] is not None]
    assert held and all(n["holds_for"] == {"B": 2} for n in held), held
    # a class whose every value follows the batch: nothing to say
    upsample = modules["Upsample"]
    assert upsample["outputs"][0]["shape"][0] == "B"
    assert upsample["holds_for"] is None
    assert all(n["holds_for"] is None for n in upsample["nodes"])

    text = _check()
    line = next(t for t in text.splitlines() if "class TwoRows" in t)
    assert line.endswith("→ [2, 4, 2] (holds for B = 2)"), line


def test_a_reader_that_goes_away_ends_the_check_without_a_traceback() -> None:
    """``fxls check . | head -1``: the reader has closed the pipe before fxls writes (here
    at once, so that every write fails); fxls stops with exit code 141 (as a shell reports
    SIGPIPE) and prints no traceback."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "fxls", "check", str(FIXTURE)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    stderr = proc.stderr.read().decode()
    code = proc.wait(timeout=240)
    assert "Traceback" not in stderr, stderr
    assert code == 141, (code, stderr)
