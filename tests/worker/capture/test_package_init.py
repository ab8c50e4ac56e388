"""A file of a package whose ``__init__.py`` imports an optional dependency the interpreter
lacks: the file runs without its packages' ``__init__.py`` and shows its shapes (FX412, a note);
a file that needs the dependency itself is FX409. Through the real worker, on
``tests/fixtures/packages/optlib``."""

from __future__ import annotations

import inspect
import shutil
import sys
from pathlib import Path

import pytest

from fxls.engine.analyze import AnalysisRequest, analyze
from fxls.engine.workerclient import WorkerClient
from fxls.protocol.model import CaptureJob, ClassRequest
from fxls.worker.capture.pipeline import run_capture

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


async def test_the_package_that_stands_in_for_its_init_says_where_it_is(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``inspect.getmodule`` (which TorchDynamo reaches when torch registers an operator while
    compiling) asks every module in ``sys.modules`` for its file: the package that stands in
    for the ``__init__.py`` that did not run answers with that file, instead of raising
    "is a built-in module" and failing the compile check of every class of the file."""
    path = workspace / "optlib" / "blocks.py"
    text = path.read_text()
    monkeypatch.setattr(sys, "path", list(sys.path))
    for name in [m for m in sys.modules if m == "optlib" or m.startswith("optlib.")]:
        monkeypatch.delitem(sys.modules, name)
    job = CaptureJob(
        path=str(path),
        source=text,
        classes=[ClassRequest("MLPBlock", 6)],
        sys_path=[str(workspace)],
        module="optlib.blocks",
    )
    result = run_capture(job, lambda *_: None)
    assert [d.code for d in result.diagnostics] == ["FX412"], result.diagnostics
    stand_in = sys.modules["optlib"]
    for name in [m for m in sys.modules if m == "optlib" or m.startswith("optlib.")]:
        sys.modules.pop(name)
    assert inspect.getfile(stand_in) == str(workspace / "optlib" / "__init__.py")
