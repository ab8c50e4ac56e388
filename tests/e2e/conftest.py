"""Shared end-to-end helpers: the repository paths and a runner for ``python -m fxls``."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "docs" / "examples"
HAS_WORKER_CLIENT = (ROOT / "fxls" / "workerclient.py").exists()

needs_worker = pytest.mark.skipif(
    not HAS_WORKER_CLIENT, reason="fxls/workerclient.py (the worker client) is not available"
)
"""Mark tests that start the real worker."""

RunFxls = Callable[..., subprocess.CompletedProcess[str]]


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
