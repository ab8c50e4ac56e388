"""Helpers shared by the unit tests."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MKDOCS = ROOT / "docs" / "mkdocs" / "mkdocs.yml"


def _build_docs(site: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``mkdocs build --strict`` of the docs into ``site`` (``env`` added to this process's)."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "-q",
            "-f",
            str(MKDOCS),
            "-d",
            str(site),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1", **(env or {})},
    )


@pytest.fixture
def build_docs() -> Callable[..., subprocess.CompletedProcess[str]]:
    return _build_docs


@pytest.fixture(autouse=True)
def _no_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """Unit tests start no worker: one that tries fails at once, pointing to tests/worker/."""
    from fxls.engine.workerclient import WorkerClient

    async def refuse(self: WorkerClient, *args: object, **kwargs: object) -> None:
        raise AssertionError("a unit test started the worker: it belongs in tests/worker/")

    monkeypatch.setattr(WorkerClient, "start", refuse)
