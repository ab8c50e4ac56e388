"""``fxls check`` and the compile check (FX6xx): the JSON ``compile`` field, every output format,
``--select FX6`` as a gate, and the ways to turn it off. A subprocess with the real worker."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from harness import ROOT, RunFxls, needs_worker

BREAKS = "tests/fixtures/compile/breaks.py"
BREAKS_PATH = ROOT / BREAKS

pytestmark = [needs_worker, pytest.mark.slow]


def _line(fragment: str) -> int:
    lines = BREAKS_PATH.read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if fragment in line)


def _module(doc: dict[str, Any], name: str) -> dict[str, Any]:
    return next(m for m in doc["modules"] if m["class"] == name)


def test_json_compile_field_and_break_diagnostics(run_fxls: RunFxls) -> None:
    proc = run_fxls("check", BREAKS, "--json")
    assert proc.returncode == 0, proc.stderr  # breaks are warnings
    doc = json.loads(proc.stdout)
    breaks = _module(doc, "Breaks")
    recompiles = breaks["compile"].pop("recompiles")
    assert recompiles in (0, None)  # None: the first compilation was too slow to measure them
    assert breaks["compile"] == {
        "status": "ok",
        "graphs": 5,
        "breaks": 3,
        "tensors": "cpu",
        "message": None,
    }
    found = [(d["code"], d["line"]) for d in breaks["diagnostics"] if d["code"].startswith("FX6")]
    assert found == [
        ("FX601", _line('print("shape"')),
        ("FX602", _line(".item()")),
        ("FX605", _line("graph_break()")),
    ]
    clean = _module(doc, "Clean")
    assert clean["compile"]["graphs"] == 1 and clean["compile"]["breaks"] == 0
    assert not [d for d in clean["diagnostics"] if d["code"].startswith("FX6")]


def test_select_fx6_is_a_gate(run_fxls: RunFxls, tmp_path: Path) -> None:
    gate = run_fxls("check", BREAKS, "--select", "FX6", "--fail-on", "warning")
    assert gate.returncode == 1, gate.stdout + gate.stderr
    assert "FX601" in gate.stdout and "FX405" not in gate.stdout  # only FX6 is reported
    assert "torch.compile: compiles to 5 graphs (3 breaks)" in gate.stdout
    clean = tmp_path / "clean.py"
    source = BREAKS_PATH.read_text()
    clean.write_text(source[: source.index("class Breaks")] + source[source.index("class Clean") :])
    passed = run_fxls("check", str(clean), "--select", "FX6", "--fail-on", "warning")
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "torch.compile: compiles whole" in passed.stdout


def test_github_and_sarif_report_the_breaks(run_fxls: RunFxls) -> None:
    github = run_fxls("check", BREAKS, "--output-format", "github", "--select", "FX6")
    assert github.stdout.count("::warning") == 4, github.stdout  # three in Breaks, one in Branches
    sarif = json.loads(
        run_fxls("check", BREAKS, "--output-format", "sarif", "--select", "FX6").stdout
    )
    rules = {r["ruleId"] for run in sarif["runs"] for r in run["results"]}
    assert rules == {"FX601", "FX602", "FX603", "FX605"}


def test_turned_off(run_fxls: RunFxls, tmp_path: Path) -> None:
    off = run_fxls("check", BREAKS, "--json", "--no-compile-check")
    doc = json.loads(off.stdout)
    assert all(m["compile"] is None for m in doc["modules"])
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text("[tool.fxls.compileCheck]\nenabled = false\n")
    (project / "model.py").write_text(BREAKS_PATH.read_text())
    doc = json.loads(run_fxls("check", str(project / "model.py"), "--json").stdout)
    assert all(m["compile"] is None for m in doc["modules"])
