"""``fxls check`` on project layouts as people write them, as a subprocess: a library package
(relative imports, a lazily loaded package) and a research repository whose model folder
imports a helper package at the repository's root."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "packages"

pytestmark = pytest.mark.worker


def _check(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fxls", "check", "--json", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=240,
        stdin=subprocess.DEVNULL,
    )


def _classes(done: subprocess.CompletedProcess[str]) -> dict[str, dict]:
    report = json.loads(done.stdout)
    documents = report if isinstance(report, list) else [report]
    return {m["class"]: m for d in documents for m in d["modules"]}


def test_a_library_package_is_checked_file_by_file_as_its_modules(tmp_path: Path) -> None:
    shutil.copytree(FIXTURES / "tinylib", tmp_path / "tinylib")
    done = _check(tmp_path, ".")
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:])
    classes = _classes(done)
    for name in ("TinyBlock", "Mlp"):
        assert classes[name]["status"] == "traced", (name, classes[name])
    assert classes["TinyModel"]["outputs"][0]["shape"][-1] == 48, classes["TinyModel"]
    assert "FX404" not in done.stdout


def test_a_model_folder_imports_the_repository_root_package(tmp_path: Path) -> None:
    """``models/detr.py`` imports ``util.misc`` from the repository's root, as the project's
    scripts do when run from there."""
    (tmp_path / "util").mkdir()
    (tmp_path / "util" / "__init__.py").write_text("")
    (tmp_path / "util" / "misc.py").write_text("WIDTH = 24\n")
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "detr.py").write_text(
        textwrap.dedent(
            """
            import torch
            from torch import nn

            from util.misc import WIDTH


            class Head(nn.Module):
                def __init__(self) -> None:
                    super().__init__()
                    self.fc = nn.Linear(8, WIDTH)

                def forward(self, x: torch.Tensor) -> torch.Tensor:
                    return self.fc(x)
            """
        )
    )
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'detr'\n")
    done = _check(tmp_path / "models", "detr.py")
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:])
    head = _classes(done)["Head"]
    assert head["status"] == "traced", head
