"""A file stopped by its environment (a script's command line, a library that is not built) is
a warning naming the cause and what to do, never an error: through the real worker."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from fxls.engine.analyze import AnalysisRequest, analyze
from fxls.engine.workerclient import WorkerClient

pytestmark = [pytest.mark.worker, pytest.mark.asyncio(loop_scope="module")]

NET = """
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)

    def forward(self, x):
        return self.fc(x)
"""


async def _analyze(worker: WorkerClient, tmp_path: Path, source: str):  # type: ignore[no-untyped-def]
    return await _analyze_at(worker, tmp_path / "train.py", tmp_path, source)


def _line_of(source: str, needle: str) -> int:
    return next(
        i for i, line in enumerate(textwrap.dedent(source).splitlines(), 1) if needle in line
    )


async def test_a_script_that_parses_its_command_line_at_import(
    worker: WorkerClient, tmp_path: Path
) -> None:
    source = (
        "import argparse\nfrom torch import nn\n\nparser = argparse.ArgumentParser()\n"
        'parser.add_argument("--data", required=True)\nargs = parser.parse_args()\n' + NET
    )
    analysis = await _analyze(worker, tmp_path, source)
    assert not [d for d in analysis.diagnostics if d.severity == "error"], analysis.diagnostics
    (script,) = [d for d in analysis.diagnostics if d.code == "FX410"]
    assert script.severity == "warning"
    assert script.span.line == _line_of(source, "parse_args()")
    assert "command-line arguments" in script.message
    assert "status 2" in script.message


async def test_sys_exit_at_import_keeps_the_classes_defined_before_it(
    worker: WorkerClient, tmp_path: Path
) -> None:
    source = "import sys\nfrom torch import nn\n" + NET + '\nsys.exit("usage: train.py DATA")\n'
    analysis = await _analyze(worker, tmp_path, source)
    assert not [d for d in analysis.diagnostics if d.severity == "error"], analysis.diagnostics
    (script,) = [d for d in analysis.diagnostics if d.code == "FX410"]
    assert script.span.line == _line_of(source, "sys.exit(")
    assert "sys.exit('usage: train.py DATA')" in script.message
    net = analysis.module("Net")
    assert net is not None and net.status == "traced", analysis.modules
    assert net.outputs[0].shape[-1] == 2


async def test_a_native_library_that_is_not_there(worker: WorkerClient, tmp_path: Path) -> None:
    source = (
        'import ctypes\nfrom torch import nn\n\nctypes.CDLL("libfxls_not_built_ext.so")\n' + NET
    )
    analysis = await _analyze(worker, tmp_path, source)
    assert not [d for d in analysis.diagnostics if d.severity == "error"], analysis.diagnostics
    (native,) = [d for d in analysis.diagnostics if d.code == "FX411"]
    assert native.severity == "warning"
    assert native.span.line == _line_of(source, "CDLL")
    assert "libfxls_not_built_ext.so" in native.message


def _site_packages(tmp_path: Path) -> Path:
    """A ``site-packages`` folder holding ``fxls_broken_dep``: installed (with its metadata,
    asking for a torch that does not exist) and raising when imported, as torchvision built for
    another torch does (``operator torchvision::nms does not exist``)."""
    site = tmp_path / "lib" / "site-packages"
    package = site / "fxls_broken_dep"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("from fxls_broken_dep import _ops\n")
    (package / "_ops.py").write_text(
        "def register(name):\n"
        '    raise RuntimeError(f"operator fxls_broken_dep::{name} does not exist")\n\n\n'
        'register("nms")\n'
    )
    info = site / "fxls_broken_dep-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: fxls-broken-dep\nVersion: 0.1\n"
        "Requires-Dist: torch (>=99.0)\nRequires-Dist: numpy ; extra == 'np'\n"
    )
    (info / "top_level.txt").write_text("fxls_broken_dep\n")
    return site


async def _analyze_at(worker: WorkerClient, path: Path, root: Path, source: str):  # type: ignore[no-untyped-def]
    text = textwrap.dedent(source)
    path.write_text(text)
    return await analyze(worker, AnalysisRequest(str(path), text, root=str(root)))


async def test_an_installed_package_that_raises_when_imported_is_a_warning_naming_it(
    worker: WorkerClient, tmp_path: Path
) -> None:
    site = _site_packages(tmp_path)
    source = "import torch\nfrom torch import nn\nimport fxls_broken_dep\n" + NET
    analysis = await _analyze_at(worker, site / "model.py", site, source)
    assert not [d for d in analysis.diagnostics if d.severity == "error"], analysis.diagnostics
    (broken,) = [d for d in analysis.diagnostics if d.code == "FX413"]
    assert broken.severity == "warning"
    assert broken.span.line == 3
    assert "`fxls_broken_dep`" in broken.message
    assert "operator fxls_broken_dep::nms does not exist" in broken.message
    assert "fxls-broken-dep 0.1 asks for torch>=99.0;" in broken.message, broken.message
    assert "numpy" not in broken.message


async def test_an_error_of_the_files_own_call_at_import_stays_an_error(
    worker: WorkerClient, tmp_path: Path
) -> None:
    """A torch function (installed code) raising because of the file's own call is the file's
    error, not the environment's."""
    site = _site_packages(tmp_path)
    source = "import torch\nfrom torch import nn\nx = torch.ones(2) @ torch.ones(3)\n" + NET
    analysis = await _analyze_at(worker, site / "model.py", site, source)
    assert not [d for d in analysis.diagnostics if d.code == "FX413"], analysis.diagnostics
    (failed,) = [d for d in analysis.diagnostics if d.code == "FX404"]
    assert failed.severity == "error"
    assert failed.span.line == 3


async def test_a_package_whose_init_imports_a_broken_install_still_shows_its_other_files(
    worker: WorkerClient, tmp_path: Path
) -> None:
    """``vit_pytorch/__init__.py`` imports a model that needs torchvision: with a torchvision
    built for another torch, a file that does not need it runs without the package's
    ``__init__.py`` (FX412 says so and why), as with a missing torchvision."""
    site = _site_packages(tmp_path)
    lib = site / "mylib"
    lib.mkdir()
    (lib / "__init__.py").write_text("from mylib import vision\nfrom mylib import blocks\n")
    (lib / "vision.py").write_text("import fxls_broken_dep\n")
    source = "from torch import nn\n" + NET
    analysis = await _analyze_at(worker, lib / "blocks.py", site, source)
    assert not [d for d in analysis.diagnostics if d.severity in ("error", "warning")], (
        analysis.diagnostics
    )
    (note,) = [d for d in analysis.diagnostics if d.code == "FX412"]
    assert "`fxls_broken_dep`" in note.message and "raised while importing" in note.message
    net = analysis.module("Net")
    assert net is not None and net.outputs and net.outputs[0].shape[-1] == 2, analysis.modules
