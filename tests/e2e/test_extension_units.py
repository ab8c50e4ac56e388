"""The VS Code extension's unit tests (``npm test`` in vscode-extension: Node's test runner over
the pure modules of src/common, and over the activation and server start with stand-ins for the
``vscode`` module and the language client, see vscode-extension/test/fakes), run as part of the
test command.

The numbered cases run the extension's Restricted Mode tests one by one (``--test-name-pattern``):
in an untrusted workspace no program the workspace chose is started, by the probe or as the
server, until trust is granted; each spawns real programs that log their command lines.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

EXTENSION = Path(__file__).resolve().parents[2] / "vscode-extension"

pytestmark = pytest.mark.slow


def _npm_test(*node_args: str) -> str:
    """Runs ``npm test`` (after ``npm ci`` when needed) with ``node_args`` and returns its output;
    fails the test when a Node test failed."""
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
    command = ["npm", "test", "--silent"]
    if node_args:
        command += ["--", *node_args]
    proc = subprocess.run(command, cwd=EXTENSION, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-3000:]
    assert "# fail 0" in proc.stdout, proc.stdout[-3000:]
    return proc.stdout


def _run_numbered(number: int) -> None:
    """Runs the extension's test named ``test_<number>_...``, which must exist and pass."""
    out = _npm_test(f"--test-name-pattern=^test_{number}_")
    assert re.search(rf"^ok \d+ - test_{number}_\w+$", out, re.MULTILINE), out[-3000:]


def test_extension_unit_tests() -> None:
    _npm_test()


def test_101_untrusted_workspace_folder_interpreter_waits_for_trust() -> None:
    """``fxls.python`` set with ``${workspaceFolder}``: neither probed nor started while the
    workspace is untrusted; both after trust is granted."""
    _run_numbered(101)


def test_102_untrusted_workspace_python_extension_selection_not_consulted() -> None:
    """The Python extension's selection (the workspace's ``.venv``) is not asked for while the
    workspace is untrusted (the user's ``python3`` runs); after trust it is, and it runs."""
    _run_numbered(102)


def test_103_untrusted_workspace_program_reached_by_path_link_or_argument_waits() -> None:
    """User-level settings that still land in the workspace (a PATH lookup, a symlinked
    interpreter or folder, a script argument, a PYTHONPATH entry) start nothing before trust."""
    _run_numbered(103)
