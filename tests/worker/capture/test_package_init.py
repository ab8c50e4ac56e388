"""A file of a package whose ``__init__.py`` imports an optional dependency the interpreter
lacks: the file runs without its packages' ``__init__.py`` and shows its shapes (FX412, a note);
a file that needs the dependency itself is FX409. Through the real worker, on
``tests/fixtures/packages/optlib``."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from fxls.engine.analyze import AnalysisRequest, analyze
from fxls.engine.workerclient import WorkerClient

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "packages"

pytestmark = [pytest.mark.worker, pytest.mark.asyncio(loop_scope="module")]


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    shutil.copytree(FIXTURES / "optlib", tmp_path / "optlib")
    return tmp_path


async def test_a_file_that_does_not_need_the_missing_module_shows_its_shapes(
    worker: WorkerClient, workspace: Path
) -> None:
    path = workspace / "optlib" / "blocks.py"
    text = path.read_text()
    analysis = await analyze(worker, AnalysisRequest(str(path), text, root=str(workspace)))
    assert not [d for d in analysis.diagnostics if d.severity in ("error", "warning")], (
        analysis.diagnostics
    )
    (note,) = [d for d in analysis.diagnostics if d.code == "FX412"]
    assert note.severity == "information"
    assert "fxls_missing_optional_dep" in note.message and "optlib" in note.message
    block = analysis.module("MLPBlock")
    assert block is not None and block.outputs, analysis.modules
    assert block.outputs[0].shape[-1] == 32  # the relative import of .layers worked


async def test_a_file_that_needs_the_missing_module_is_a_warning_naming_it(
    worker: WorkerClient, workspace: Path
) -> None:
    path = workspace / "optlib" / "vision.py"
    analysis = await analyze(
        worker, AnalysisRequest(str(path), path.read_text(), root=str(workspace))
    )
    (missing,) = [d for d in analysis.diagnostics if d.code == "FX409"]
    assert missing.severity == "warning"
    assert "fxls_missing_optional_dep" in missing.message
    assert missing.span.line == 1
    assert not [d for d in analysis.diagnostics if d.code == "FX412"]


async def test_a_file_that_needs_the_missing_module_through_its_package_names_that_import(
    worker: WorkerClient, workspace: Path
) -> None:
    """The file imports the standard library and torch, then a module of its package that
    needs the missing one (as timm's model files need torchvision through ``timm.layers``):
    one warning, at that import, not at the file's first."""
    path = workspace / "optlib" / "heads.py"
    analysis = await analyze(
        worker, AnalysisRequest(str(path), path.read_text(), root=str(workspace))
    )
    (missing,) = [d for d in analysis.diagnostics if d.code == "FX409"]
    assert missing.severity == "warning"
    assert "fxls_missing_optional_dep" in missing.message
    assert missing.span.line == 5, missing.span
    assert not [d for d in analysis.diagnostics if d.severity == "error"], analysis.diagnostics
