"""Fixtures of the end-to-end tests (the helpers they share are in ``harness.py``)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from harness import ROOT, RunFxls


@pytest.fixture(scope="session")
def run_fxls() -> RunFxls:
    """``run_fxls("check", "file.py", "--json")`` -> CompletedProcess (text, from the repo root)."""

    def run(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "fxls", *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    return run
