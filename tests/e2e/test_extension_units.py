"""The VS Code extension's unit tests (``npm test`` in vscode-extension: Node's test runner over
the pure modules of src/common: launch, probe, graph), run as part of the test command."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

EXTENSION = Path(__file__).resolve().parents[2] / "vscode-extension"

pytestmark = pytest.mark.slow


def test_extension_unit_tests() -> None:
    if shutil.which("npm") is None or shutil.which("node") is None:
        pytest.skip("needs Node.js and npm")
    if not (EXTENSION / "node_modules" / ".bin" / "esbuild").exists():
        proc = subprocess.run(
            ["npm", "ci", "--no-audit", "--no-fund"],
            cwd=EXTENSION,
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            pytest.skip(f"npm ci failed in vscode-extension: {proc.stderr[-2000:]}")
    proc = subprocess.run(
        ["npm", "test", "--silent"], cwd=EXTENSION, capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-3000:]
    assert "# fail 0" in proc.stdout, proc.stdout[-3000:]
