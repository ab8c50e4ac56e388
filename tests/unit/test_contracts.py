"""The import contracts cover modules that do not exist yet: a new module placed in no layer,
or placed in a layer and importing upwards, breaks ``lint-imports``. Each case runs the real
import-linter on a copy of the package with one new file."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")

pytestmark = pytest.mark.skipif(not LINT_IMPORTS.exists(), reason="import-linter is not installed")


def _lint(tmp_path: Path, new_files: dict[str, str]) -> subprocess.CompletedProcess[str]:
    shutil.copytree(ROOT / "fxls", tmp_path / "fxls", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    for rel, text in new_files.items():
        (tmp_path / rel).write_text(text)
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--no-logo", "pyproject.toml"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )


def test_the_tree_as_it_is_keeps_every_contract(tmp_path: Path) -> None:
    done = _lint(tmp_path, {})
    assert done.returncode == 0, done.stdout[-3000:]


@pytest.mark.parametrize(
    ("path", "text", "broken"),
    [
        # a module at the top of fxls belongs to no layer
        ("fxls/newmod.py", "X = 1\n", "Packages of fxls in layers"),
        # the engine reaching up into the language server
        ("fxls/engine/newmod.py", "import fxls.lsp.session\n", "Packages of fxls in layers"),
        # the protocol importing torch
        ("fxls/protocol/newmod.py", "import torch\n", "imports only the standard library"),
        # the command line's report importing the language server
        (
            "fxls/cli/report/newmod.py",
            "import fxls.lsp.features\n",
            "never imports the language server",
        ),
    ],
)
def test_a_misplaced_new_module_breaks_a_contract(
    tmp_path: Path, path: str, text: str, broken: str
) -> None:
    done = _lint(tmp_path, {path: text})
    assert done.returncode != 0, done.stdout[-3000:]
    assert any(broken in name for name in _broken(done.stdout)), done.stdout[-3000:]


def _broken(report: str) -> list[str]:
    """The names of the contracts import-linter reports as broken (names wrap over lines)."""
    listing = " ".join(report.split("Contracts:")[0].split())
    names, rest = [], listing.split("-------------------------------------", 1)[-1]
    for piece in re.split(r"(KEPT(?: \(\d+ ignored imports?\))?|BROKEN)", rest):
        if piece == "BROKEN" and names:
            names[-1] = "BROKEN " + names[-1]
        elif piece.strip() and not piece.startswith("KEPT"):
            names.append(piece.strip())
    return [n.removeprefix("BROKEN ") for n in names if n.startswith("BROKEN ")]


def test_no_test_module_imports_a_conftest_by_name() -> None:
    """Three folders have a ``conftest.py``; ``from conftest import`` gets whichever pytest
    loaded first, so a run of one folder passes and a run of all fails. Shared helpers live in
    ``tests/e2e/harness.py``."""
    tests = Path(__file__).resolve().parents[1]
    pattern = re.compile(r"^\s*(from conftest import|import conftest)", re.M)
    offenders = [
        str(p.relative_to(tests))
        for p in tests.rglob("test_*.py")
        if pattern.search(p.read_text(encoding="utf-8"))
    ]
    assert offenders == []
