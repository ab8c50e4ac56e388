"""Adversarial cases for ``fxls check`` and ``fxls graph`` as CI runs them: the real CLI in a
subprocess (and the real worker where a capture is involved), on a repository whose author
is hostile. Numbered as in docs/security.md.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HOSTILE_PATTERN = "*a" * 14 + "*b"
"""As a regular expression (``[^/]*a[^/]*a...b``), its time doubles with each character of a
name of ``a``s: seconds at 30 characters, longer than the universe at 200."""


def _env(home: Path, **extra: str) -> dict[str, str]:
    """The environment of a CI job with no user-level fxls configuration of its own."""
    env = {k: v for k, v in os.environ.items() if k != "FXLS_PYTHON"}
    env.update(XDG_CONFIG_HOME=str(home / "xdg"), HOME=str(home), **extra)
    return env


def _fxls(
    cwd: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fxls", *args],
        cwd=cwd,
        env=env if env is not None else _env(cwd.parent),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.timeout(30)
def test_81_a_backtracking_gitignore_pattern_does_not_hang_check(tmp_path: Path) -> None:
    project = tmp_path / "repo"
    (project / "models").mkdir(parents=True)
    (project / ".gitignore").write_text(f"{HOSTILE_PATTERN}\n")
    (project / "pyproject.toml").write_text(f"[tool.fxls]\nexclude = ['{HOSTILE_PATTERN}']\n")
    long_name = "a" * 200
    (project / "models" / f"{long_name}.py").write_text("x = 1\n")
    (project / "models" / long_name).mkdir()
    broken = "x = (\n"  # a file that does not parse is reported, with no worker needed
    (project / "models" / "kept_ab.py").write_text(broken)
    (project / "models" / ("a" * 14 + "b")).mkdir()
    (project / "models" / ("a" * 14 + "b") / "ignored.py").write_text(broken)

    proc = _fxls(project, "check", ".", "--json", timeout=20)

    assert proc.returncode == 1, proc.stderr
    # the pattern still means what git means: a name ending in b after 14 a's is ignored
    assert '"file": "models/kept_ab.py"' in proc.stdout
    assert "ignored.py" not in proc.stdout
