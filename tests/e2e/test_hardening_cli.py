"""Adversarial cases for ``fxls check`` and ``fxls graph`` as CI runs them: the real CLI in a
subprocess (and the real worker where a capture is involved), on a repository whose author
is hostile. Numbered as in docs/security.md.
"""

from __future__ import annotations

import json
import os
import re
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


UNUSED = """\
from torch import nn


# fxls: x = (B=2, 8)
class Good(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        unused = x * 2
        return self.fc(x)
"""
"""A module with a fix verified safe: the unused statement (FX302) is removed."""


def test_77_fix_never_writes_through_a_directory_symlink(tmp_path: Path) -> None:
    other = tmp_path / "other"  # another project next to the checked one
    other.mkdir()
    (other / "pyproject.toml").write_text("[project]\nname = 'other'\n")
    (other / "victim.py").write_text(UNUSED)
    project = tmp_path / "repo"
    (project / "models").mkdir(parents=True)
    (project / "pyproject.toml").write_text("[project]\nname = 'repo'\n")
    (project / "models" / "own.py").write_text(UNUSED)
    (project / "linked").symlink_to(other, target_is_directory=True)
    (project / "models" / "alias.py").symlink_to(other / "victim.py")

    # the glob's folder is the link: the other project's pyproject.toml is found through it
    through_link = _fxls(project, "check", "linked/*.py", "--fix")
    # the project's root is the repository; a file named on the command line is a link
    both = _fxls(project, "check", "models/own.py", "models/alias.py", "linked/*.py", "--fix")

    assert (other / "victim.py").read_text() == UNUSED
    assert (project / "models" / "alias.py").is_symlink()
    assert "linked/victim.py: fixes not written" in through_link.stderr, through_link.stderr
    assert "through the symbolic link" in through_link.stderr
    assert "linked/victim.py: fixes not written" in both.stderr, both.stderr
    assert "models/alias.py: fixes not written" in both.stderr
    assert "outside the project root" in both.stderr
    # the project's own file is fixed in the same run: fixes work, only the link is refused
    fixed = (project / "models" / "own.py").read_text()
    assert "unused = x * 2" not in fixed and "self.fc(x)" in fixed


def _wrapper(path: Path, marker: Path) -> Path:
    """An interpreter that leaves ``marker`` when it runs, then runs the real one."""
    path.write_text(f'#!/bin/sh\ntouch "{marker}"\nexec "{sys.executable}" "$@"\n')
    path.chmod(0o755)
    return path


TRIVIAL = """\
import torch
from torch import nn

try:  # outside the job folder: denied by Landlock
    open({escaped!r}, "w").write("written outside the sandbox")
except OSError:
    pass


# fxls: x = (2, 3)
class Net(nn.Module):
    def forward(self, x):
        return x * 2
"""


def test_76_a_project_file_cannot_choose_the_interpreter_limits_or_isolation(
    tmp_path: Path,
) -> None:
    project = tmp_path / "repo"
    project.mkdir()
    ran = tmp_path / "project-python-ran"
    escaped = tmp_path / "escaped"
    _wrapper(project / "evil-python", ran)
    (project / "pyproject.toml").write_text(
        "[tool.fxls]\n"
        'python = "./evil-python"\n'
        'select = ["FX4"]\n'
        "[tool.fxls.isolation]\n"
        "seccomp = false\n"
        "landlock = false\n"
        "[tool.fxls.limits]\n"
        "timeoutSeconds = 600\n"
    )
    (project / "model.py").write_text(TRIVIAL.format(escaped=str(escaped)))

    proc = _fxls(project, "check", "model.py", "--json")

    assert proc.returncode == 0, proc.stderr
    assert not ran.exists()  # the project's program never ran
    isolation = json.loads(proc.stdout)["modules"][0]["isolation"]
    assert "seccomp" in isolation
    if "landlock" in isolation:  # where the kernel has it
        assert not escaped.exists()
    said = [line for line in proc.stderr.splitlines() if "may not choose" in line]
    assert len(said) == 1, proc.stderr
    for name in (
        "`python`",
        "`isolation.seccomp`",
        "`isolation.landlock`",
        "`limits.timeoutSeconds`",
    ):
        assert name in said[0]
    assert "config.toml" in said[0] and "FXLS_PYTHON" in said[0]
    github = _fxls(project, "check", "model.py", "--output-format", "github")
    assert "may not choose" not in github.stdout and "may not choose" in github.stderr


def test_82_interpreter_and_limits_come_from_the_user_the_environment_or_the_command_line(
    tmp_path: Path,
) -> None:
    project = tmp_path / "repo"
    project.mkdir()
    (project / "model.py").write_text(TRIVIAL.format(escaped=str(tmp_path / "escaped")))
    markers = {name: tmp_path / f"{name}-ran" for name in ("user", "environment", "option")}
    config = tmp_path / "xdg" / "fxls" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(
        f'python = "{_wrapper(tmp_path / "user-python", markers["user"])}"\n'
        "[limits]\ntimeoutSeconds = 30\n"
    )
    from_env = str(_wrapper(tmp_path / "env-python", markers["environment"]))
    option = str(_wrapper(tmp_path / "option-python", markers["option"]))

    def ran(*args: str, **env: str) -> set[str]:
        for marker in markers.values():
            marker.unlink(missing_ok=True)
        proc = _fxls(project, "check", "model.py", *args, env=_env(tmp_path, **env))
        assert proc.returncode == 0, proc.stderr
        assert "may not choose" not in proc.stderr
        return {name for name, marker in markers.items() if marker.exists()}

    assert ran() == {"user"}
    assert ran(FXLS_PYTHON=from_env) == {"environment"}
    assert ran("--python", option, FXLS_PYTHON=from_env) == {"option"}


SECRET = "c2VjcmV0LXRva2VuLWZyb20tLmdpdC9jb25maWc=" * 40
"""1,600 characters of base64: what a job would print to get a token past log masking."""
LEAKY = f"""\
import torch
from torch import nn


# fxls: x = (2, 4)
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        raise ValueError(
            "clipboard \\x1b]52;c;{SECRET}\\x07 title \\x1b]0;pwned\\x07 erase \\x1b[2K"
            " c1 \\x9b2J del \\x7f bidi \\u202eevil\\u202c \\u2066x\\u2069"
            " ##[stop-commands]tok " + "padding " * 1_000
        )
"""
CONTROLS = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
"""What no output of fxls may contain from user text (the line feeds between lines excepted)."""
LONG_BLOB = re.compile(r"[A-Za-z0-9+/=_-]{257,}")


@pytest.fixture(scope="module")
def leaky_reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """stdout of ``fxls check`` in every format, on a model whose exception carries terminal
    escapes, bidi controls, an old-style workflow command and an encoded secret."""
    project = tmp_path_factory.mktemp("leaky")
    (project / "model.py").write_text(LEAKY)
    outputs = {}
    for fmt in ("text", "github", "json", "sarif"):
        proc = _fxls(project, "check", "model.py", "--output-format", fmt)
        assert proc.returncode in (0, 1), proc.stderr
        assert "ValueError" in proc.stdout, proc.stdout  # the message is there, made inert
        outputs[fmt] = proc.stdout
    return outputs


@pytest.mark.slow
def test_78_a_report_carries_no_encoded_secret_and_no_unbounded_text(
    leaky_reports: dict[str, str],
) -> None:
    for fmt, out in leaky_reports.items():
        assert LONG_BLOB.findall(out) == [], fmt
        assert "characters removed>" in out, fmt
        assert "padding padding" in out, fmt
    for line in leaky_reports["text"].splitlines() + leaky_reports["github"].splitlines():
        assert len(line) < 5_000, line[:200]
    for result in json.loads(leaky_reports["sarif"])["runs"][0]["results"]:
        assert len(result["message"]["text"]) < 5_000
    document = json.loads(leaky_reports["json"])
    for d in document["modules"][0]["diagnostics"] + document["diagnostics"]:
        assert len(d["message"]) <= 2_000


@pytest.mark.slow
def test_79_terminal_escapes_and_bidi_controls_are_shown_not_sent(
    leaky_reports: dict[str, str],
) -> None:
    for fmt, out in leaky_reports.items():
        assert CONTROLS.findall(out) == [], fmt
        assert "##[" not in out, fmt
        shown = _messages(fmt, out)
        assert "\\x1b]52;c;" in shown and "\\x1b[2K" in shown and "\\x9b" in shown, fmt
        assert "\\u202e" in shown and "\\u2066" in shown, fmt


def _messages(fmt: str, out: str) -> str:
    """The diagnostic messages of a report as their text (JSON's string escapes undone)."""
    if fmt in ("text", "github"):
        return out
    if fmt == "json":
        document = json.loads(out)
        diagnostics = document["modules"][0]["diagnostics"] + document["diagnostics"]
        return "\n".join(d["message"] for d in diagnostics)
    results = json.loads(out)["runs"][0]["results"]
    return "\n".join(r["message"]["text"] for r in results)


def _workflow_commands(output: str) -> list[str]:
    """Lines the GitHub Actions runner would take as a command other than fxls's own
    annotations: ``::name`` after blanks, or ``##[`` anywhere (its older syntax)."""
    own = re.compile(r"::(error|warning|notice) file=")
    return [
        line
        for line in output.splitlines()
        if "##[" in line or (line.lstrip().startswith("::") and not own.match(line))
    ]


def test_80_repository_text_in_warnings_and_paths_starts_no_workflow_command(
    tmp_path: Path,
) -> None:
    project = tmp_path / "repo"
    project.mkdir()
    (project / "pyproject.toml").write_text(
        "[tool.fxls]\n"
        '"colour\\n::stop-commands::pwned" = 1\n'
        'select = ["FX1\\n::add-mask::secret", "FX4"]\n'
        'ignore = "FX9\\r\\n##[stop-commands]pwned2"\n'
    )
    evil_name = "broken\n::add-mask::x ##[stop-commands]y.py"
    (project / evil_name).write_text("x = (\n")  # does not parse: reported, no worker

    for fmt in ("text", "github", "json", "sarif"):
        proc = _fxls(project, "check", ".", "--output-format", fmt)
        assert proc.returncode == 1, proc.stderr
        assert _workflow_commands(proc.stdout) == [], fmt
        assert _workflow_commands(proc.stderr) == [], fmt
        # still said, on fxls's own lines
        assert "unknown key `tool.fxls.colour\\n::stop-commands::pwned`" in proc.stderr
        assert "`FX1\\n::add-mask::secret` is not a diagnostic code" in proc.stderr
        assert "`FX9\\r\\n##\\x5bstop-commands]pwned2` is not a diagnostic code" in proc.stderr
        if fmt == "text":
            assert "broken\\n::add-mask::x ##\\x5bstop-commands]y.py:1:" in proc.stdout
