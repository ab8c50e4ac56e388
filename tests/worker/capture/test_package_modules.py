"""Files of a package run as the module Python imports them as, through the real worker:
relative imports, ``__name__``-keyed registries and lazily loaded packages work, and the
editor's text is what runs, not the file on disk.

The package is ``tests/fixtures/packages/tinylib``, laid out like the model libraries."""

from __future__ import annotations

import shutil
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from fxls.engine.analyze import AnalysisRequest, analyze
from fxls.engine.workerclient import WorkerClient
from fxls.protocol.labels import strategy_label
from fxls.protocol.model import ModuleResult

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "packages"

pytestmark = pytest.mark.worker  # `worker`: the module's zygote (tests/worker/conftest.py)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    shutil.copytree(FIXTURES / "tinylib", tmp_path / "tinylib")
    return tmp_path


def _by_name(modules: list[ModuleResult]) -> dict[str, ModuleResult]:
    return {m.name: m for m in modules}


EDITOR_ONLY = textwrap.dedent(
    """

    class EditorOnly(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = nn.Linear(48, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.proj(x)


    import tinylib

    assert __name__ == "tinylib.models.tiny.modeling_tiny", __name__
    assert __package__ == "tinylib.models.tiny", __package__
    assert "tinylib.models.tiny.modeling_tiny.TinyModel" in tinylib.MODELS, tinylib.MODELS
    """
)


@pytest.mark.asyncio(loop_scope="module")
async def test_a_model_file_of_a_package_runs_as_its_module(
    worker: WorkerClient, workspace: Path
) -> None:
    """The editor's text (with a class the file on disk lacks) runs as
    ``tinylib.models.tiny.modeling_tiny``: its three levels of relative imports resolve, the
    registry sees the package's module name, and every class shows shapes. ``TinyModel(config)``
    is built from the ``config_class`` its base names (``TinyConfig``, hidden size 48), not from
    the first configuration the file imports (``TinyVisionConfig``, 16); ``TinyBlock(config)``
    from a configuration imported from the package. ``TinyModel.forward`` is decorated, all its
    inputs default to ``None`` and it raises unless exactly one is given, as transformers'
    ``*Model`` classes do; ``TinyForLM`` passes its ``**kwargs`` on to it."""
    path = workspace / "tinylib" / "models" / "tiny" / "modeling_tiny.py"
    text = path.read_text() + EDITOR_ONLY
    analysis = await analyze(worker, AnalysisRequest(str(path), text, root=str(workspace)))
    assert not [d for d in analysis.diagnostics if d.code == "FX404"], analysis.diagnostics
    modules = _by_name(analysis.modules)
    assert set(modules) == {
        "TinyBlock", "TinyPreTrainedModel", "TinyModel", "TinyForLM", "EditorOnly"
    }  # fmt: skip
    for name in ("TinyBlock", "EditorOnly"):
        assert modules[name].status == "traced", (name, modules[name].status, modules[name].error)
    # traced with `inputs_embeds is None` fixed to its default (fx+concrete)
    assert modules["TinyModel"].status in ("traced", "partial"), modules["TinyModel"].error
    # a base class without a forward of its own is passed over, not reported as failing
    assert modules["TinyPreTrainedModel"].status == "skipped"
    assert not [d for d in analysis.diagnostics if d.severity == "error"], analysis.diagnostics
    warned = {d.code for d in analysis.diagnostics if d.severity == "warning"}
    assert warned <= {"FX108"}, analysis.diagnostics  # `input_ids is None` decided when traced
    assert modules["EditorOnly"].outputs[0].shape[-1] == 8, modules["EditorOnly"].outputs
    assert modules["TinyModel"].outputs[0].shape[-1] == 48, modules["TinyModel"].outputs
    # decorated forwards whose inputs all default to None: traced through the user's own
    # forward, the main input (input_ids) built from the layer it reaches inside the
    # decorated submodule that `**kwargs` are passed on to; TinyModel then as TinyForLM calls it
    lm = modules["TinyForLM"]
    assert lm.status == "traced" and strategy_label(lm.strategy) == "fx", (
        lm.status,
        strategy_label(lm.strategy),
        lm.notes,
    )
    assert lm.inputs[0].name == "input_ids" and lm.inputs[0].value.dtype == "int64", lm.inputs
    assert lm.inputs[0].assumed and lm.outputs[0].shape[-1] == 100, lm.outputs
    tiny = modules["TinyModel"]
    assert strategy_label(tiny.strategy).startswith("fx"), strategy_label(tiny.strategy)
    assert tiny.inputs[0].name == "input_ids" and tiny.inputs[0].value.dtype == "int64", tiny.inputs


@pytest.mark.asyncio(loop_scope="module")
async def test_the_package_importing_the_file_gets_the_editor_text(
    worker: WorkerClient, workspace: Path
) -> None:
    """``tinylib/models/tiny/__init__.py`` imports ``TinyModel`` from the file being edited:
    with ``TinyModel`` renamed in the editor (not on disk), that import fails as it would
    for the user, naming the editor's text, not silently using the file on disk."""
    path = workspace / "tinylib" / "models" / "tiny" / "modeling_tiny.py"
    text = path.read_text().replace("class TinyModel(", "class TinyModelRenamed(")
    analysis = await analyze(worker, AnalysisRequest(str(path), text, root=str(workspace)))
    errors = [d for d in analysis.diagnostics if d.code == "FX404"]
    assert errors and "TinyModel" in errors[0].message, analysis.diagnostics


@pytest.mark.asyncio(loop_scope="module")
async def test_a_file_outside_a_package_runs_as_a_script(
    worker: WorkerClient, tmp_path: Path
) -> None:
    """A lone file keeps running as before: from its own folder, importing its neighbours by
    their plain names."""
    (tmp_path / "helpers.py").write_text("WIDTH = 12\n")
    path = tmp_path / "model.py"
    text = textwrap.dedent(
        """
        import torch
        from torch import nn

        from helpers import WIDTH


        class Net(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.fc = nn.Linear(4, WIDTH)

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                return self.fc(x)
        """
    )
    analysis = await analyze(worker, AnalysisRequest(str(path), text, root=str(tmp_path)))
    (net,) = analysis.modules
    assert net.status == "traced", net.error
    assert net.outputs[0].shape[-1] == 12, net.outputs


@pytest.mark.asyncio(loop_scope="module")
async def test_a_package_that_cannot_be_imported_is_a_warning_naming_the_module(
    worker: WorkerClient, workspace: Path
) -> None:
    """The package's ``__init__.py`` imports a module the interpreter lacks: one warning
    (FX409, the environment, not the model) at the file's import of its package, naming the module;
    no FX404 error."""
    init = workspace / "tinylib" / "__init__.py"
    init.write_text("import fxls_missing_dependency.sub\n" + init.read_text())
    path = workspace / "tinylib" / "models" / "tiny" / "modeling_tiny.py"
    text = path.read_text()
    analysis = await analyze(worker, AnalysisRequest(str(path), text, root=str(workspace)))
    codes = [d.code for d in analysis.diagnostics]
    assert "FX404" not in codes, analysis.diagnostics
    (missing,) = [d for d in analysis.diagnostics if d.code == "FX409"]
    assert missing.severity == "warning"
    assert "fxls_missing_dependency" in missing.message
    # the file's first import of its package, which runs the package's __init__.py first
    package_import = next(
        i for i, line in enumerate(text.splitlines(), 1) if line.startswith("from ... import")
    )
    assert missing.span.line == package_import


@pytest.mark.asyncio(loop_scope="module")
async def test_a_wrapper_input_is_read_off_the_model_it_wraps_in_another_file(
    worker: WorkerClient, tmp_path: Path
) -> None:
    """``NextToken`` (``arlib/wrapper.py``) passes its ``x`` to ``TokenLM`` of ``arlib/lm.py``
    after ``inp, target = x, x[:, 1:]`` and ``torch.where(inp == ignore_index, ...)``. The
    search for the layer an input reaches read ``TokenLM.forward`` in the wrapper's own file
    (not there), lost ``x`` at the tuple assignment and stopped at the comparison: FX402, no
    shapes. Now ``x`` is token ids for ``net.token_emb``, and the loss is a scalar, as eager
    at two sizes."""
    shutil.copytree(FIXTURES / "arlib", tmp_path / "arlib")
    path = tmp_path / "arlib" / "wrapper.py"
    analysis = await analyze(
        worker, AnalysisRequest(str(path), path.read_text(), root=str(tmp_path))
    )
    (wrapper,) = analysis.modules
    assert wrapper.status == "traced", wrapper.diagnostics
    assert [(i.name, i.value.shape, i.value.dtype) for i in wrapper.inputs] == [
        ("x", ["B", "T"], "int64")
    ], wrapper.inputs
    (fx405,) = [d for d in wrapper.diagnostics if d.code == "FX405"]
    assert "net.token_emb" in fx405.message, fx405.message
    assert [o.shape for o in wrapper.outputs] == [[]], wrapper.outputs
    sys.path.insert(0, str(tmp_path))
    try:
        from arlib.wrapper import NextToken  # type: ignore[import-not-found]

        for batch, length in ((2, 5), (3, 7)):
            loss = NextToken()(torch.randint(0, 256, (batch, length)))
            assert loss.shape == ()
    finally:
        sys.path.remove(str(tmp_path))
        for name in [n for n in sys.modules if n == "arlib" or n.startswith("arlib.")]:
            del sys.modules[name]
