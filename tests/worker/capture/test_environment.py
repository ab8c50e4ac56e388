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
    path = tmp_path / "train.py"
    text = textwrap.dedent(source)
    path.write_text(text)
    return await analyze(worker, AnalysisRequest(str(path), text, root=str(tmp_path)))


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
