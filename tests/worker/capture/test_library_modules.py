"""Classes of the document that hold modules of another package (a library's), through the
real worker: the library's own annotations say what to build its modules with, a wrapper that
reads attributes of the module it wraps gets a module of its package that has them, and what
the library's modules compute and leave unused is not reported at the user's call.

The library is a small package written by the test next to the document, imported by name as
a model library is."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from fxls.engine.analyze import AnalysisRequest, analyze
from fxls.engine.workerclient import WorkerClient
from fxls.protocol.model import ModuleResult

pytestmark = pytest.mark.worker  # `worker`: the module's zygote (tests/worker/conftest.py)

LIBRARY = textwrap.dedent(
    """
    from __future__ import annotations

    from torch import nn


    class Mixer(nn.Module):
        def __init__(self, dim: int = 16) -> None:
            super().__init__()
            self.proj = nn.Linear(dim, dim)

        def forward(self, x):
            aux = x.mean(-1) * 2  # kept for a caller that asks for it; unused here
            return self.proj(x)


    def halve(x):
        doubled = x * 2  # computed for nothing
        return x / 2


    class Backbone(nn.Module):
        def __init__(self, vocab: int = 32, dim: int = 16) -> None:
            super().__init__()
            self.dim = dim
            self.emb = nn.Embedding(vocab, dim)

        def forward(self, tokens):
            return self.emb(tokens)


    class Gate(nn.Module):
        def forward(self, x):
            value, gate = x.chunk(2, dim=-1)
            return value * gate.sigmoid()


    class Layer(nn.Module):
        def __init__(self, dim: int = 16) -> None:
            super().__init__()
            self.norm = nn.LayerNorm(dim)
            self.net = nn.ModuleList([nn.Linear(dim, 2 * dim), Gate(), nn.Linear(dim, dim)])

        def forward(self, x):
            h = self.norm(x)
            for layer in self.net:
                h = layer(h)
            return x + h


    class Nested(nn.Module):
        def __init__(self, dim: int = 16, depth: int = 2) -> None:
            super().__init__()
            self.layers = nn.ModuleList(
                nn.ModuleList([nn.ModuleList([nn.LayerNorm(dim)]), Mixer(dim)])
                for _ in range(depth)
            )

        def forward(self, x):
            for (norms, mixer) in self.layers:
                x = x + mixer(norms[0](x))
            return x


    class Stack(nn.Module):
        def __init__(self, mixer: Mixer, depth: int = 2) -> None:
            super().__init__()
            self.layers = nn.ModuleList([mixer for _ in range(depth)])

        def forward(self, x):
            for layer in self.layers:
                x = layer(x)
            return x
    """
)

WRAPPERS = textwrap.dedent(
    """
    from torch import nn


    class Wrapper(nn.Module):
        def __init__(self, net, heads=2) -> None:
            super().__init__()
            self.net = net
            self.head = nn.Linear(net.dim, heads)

        def forward(self, tokens):
            return self.head(self.net(tokens))
    """
)

DOCUMENT = textwrap.dedent(
    """
    import torch
    from torch import nn

    from vendorlib.blocks import Layer, Nested, Stack, halve
    from vendorlib.wrappers import Wrapper


    class Tower(nn.Module):
        def __init__(self, depth=3) -> None:
            super().__init__()
            self.proj = nn.Linear(8, 16)
            self.layers = nn.ModuleList(Layer() for _ in range(depth))

        def forward(self, x):
            x = self.proj(x)
            for layer in self.layers:
                x = layer(x)
            return x


    class Deep(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = nn.Linear(8, 16)
            self.nested = Nested()

        def forward(self, x):
            return self.nested(self.proj(x))


    class Model(nn.Module):
        def __init__(self, stack: Stack) -> None:
            super().__init__()
            self.stack = stack

        def forward(self, x):
            return self.stack(x)


    class Scorer(nn.Module):
        def __init__(self, wrapper: Wrapper) -> None:
            super().__init__()
            self.wrapper = wrapper

        def forward(self, tokens):
            return self.wrapper(tokens).softmax(-1)


    class Probe(nn.Module):
        def __init__(self, encoder, classes=3) -> None:
            super().__init__()
            self.encoder = encoder
            self.head = nn.Linear(encoder.dim, classes)

        def forward(self, tokens):
            return self.head(self.encoder.emb(tokens))


    class Halver(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = nn.Linear(16, 16)

        def forward(self, x):
            return halve(self.proj(x))


    class Careless(nn.Module):
        def __init__(self, stack: Stack) -> None:
            super().__init__()
            self.stack = stack

        def forward(self, x):
            self.stack(x)
            return x * 2
    """
)


@pytest.fixture
def document(tmp_path: Path) -> Path:
    package = tmp_path / "vendorlib"
    package.mkdir()
    (package / "__init__.py").write_text("from . import blocks, wrappers\n")
    (package / "blocks.py").write_text(LIBRARY)
    (package / "wrappers.py").write_text(WRAPPERS)
    path = tmp_path / "model.py"
    path.write_text(DOCUMENT)
    return path


async def _modules(worker: WorkerClient, path: Path) -> dict[str, ModuleResult]:
    analysis = await analyze(
        worker, AnalysisRequest(str(path), path.read_text(), root=str(path.parent))
    )
    return {m.name: m for m in analysis.modules}


@pytest.mark.asyncio(loop_scope="module")
async def test_a_library_class_is_built_from_its_own_annotations(
    worker: WorkerClient, document: Path
) -> None:
    """``Stack(mixer: Mixer)`` is written under ``from __future__ import annotations`` in the
    library, and the document imports only ``Stack``: ``Mixer`` is found where ``Stack`` was
    written, so ``Model(stack)`` is built with a ``Stack`` of ``Mixer``s and traced (it could
    not be built: nothing said what ``mixer`` is)."""
    model = (await _modules(worker, document))["Model"]
    assert model.status == "traced", (model.status, model.error, model.diagnostics)
    built = [d.message for d in model.diagnostics if d.code == "FX408"]
    assert built and "stack=Stack(mixer=Mixer(" in built[0], model.diagnostics
    assert model.outputs[0].shape is not None and model.outputs[0].shape[-1] == 16, model.outputs


@pytest.mark.asyncio(loop_scope="module")
async def test_what_a_library_module_leaves_unused_is_not_the_callers(
    worker: WorkerClient, document: Path
) -> None:
    """``Mixer`` computes ``aux`` and does not return it. ``Model`` uses what ``self.stack(x)``
    returns: no FX302 says "`self.stack(x)` is computed but never used" at its line (the span
    of the library's code is the call). Nor for the library's function ``halve``, which computes
    ``doubled`` for nothing, at ``halve(self.proj(x))`` in ``Halver``. ``Careless`` drops the
    whole result of its call: that is reported, at the call."""
    modules = await _modules(worker, document)
    hints = {
        name: [d.message for d in mod.diagnostics if d.code == "FX302"]
        for name, mod in modules.items()
    }
    assert modules["Careless"].status == "traced", modules["Careless"].diagnostics
    assert hints == {
        "Tower": [],
        "Deep": [],
        "Model": [],
        "Scorer": [],
        "Halver": [],
        "Probe": [],
        "Careless": ["`self.stack(x)` is computed but never used"],
    }, hints


@pytest.mark.asyncio(loop_scope="module")
async def test_a_wrapper_gets_a_module_that_has_what_it_reads(
    worker: WorkerClient, document: Path
) -> None:
    """``Wrapper(net)`` keeps and calls ``net`` and reads ``net.dim`` in ``__init__``, which
    ``nn.Identity()`` lacks (it could not be built: "'Identity' object has no attribute
    'dim'"). ``Backbone``, of the same package and not imported by ``wrappers.py``, sets
    ``self.dim``: ``Scorer`` is built with ``Wrapper(net=Backbone())`` and traced, its tokens
    found from ``Backbone``'s embedding."""
    scorer = (await _modules(worker, document))["Scorer"]
    assert scorer.status == "traced", (scorer.status, scorer.error, scorer.diagnostics)
    built = [d.message for d in scorer.diagnostics if d.code == "FX408"]
    assert built and "wrapper=Wrapper(net=Backbone()" in built[0], scorer.diagnostics
    assert scorer.inputs[0].value.dtype == "int64", scorer.inputs
    assert scorer.outputs[0].shape is not None and scorer.outputs[0].shape[-1] == 2, scorer.outputs


@pytest.mark.asyncio(loop_scope="module")
async def test_a_module_argument_gets_a_module_that_has_what_is_read_of_it(
    worker: WorkerClient, document: Path
) -> None:
    """``Probe(encoder, classes=3)`` reads ``encoder.dim`` in ``__init__`` and
    ``self.encoder.emb`` in ``forward``; nothing says what ``encoder`` is, and a number (what
    an unannotated parameter is guessed as) has neither (it could not be built: "'int' object
    has no attribute 'dim'"). ``Backbone``, of the library module the document imports from,
    sets both: ``Probe`` is built with it and traced."""
    probe = (await _modules(worker, document))["Probe"]
    assert probe.status == "traced", (probe.status, probe.error, probe.diagnostics)
    built = [d.message for d in probe.diagnostics if d.code == "FX408"]
    assert built and "encoder=Backbone()" in built[0], probe.diagnostics
    assert probe.inputs[0].value.dtype == "int64", probe.inputs
    assert probe.outputs[0].shape is not None and probe.outputs[0].shape[-1] == 3, probe.outputs


@pytest.mark.asyncio(loop_scope="module")
async def test_each_library_layer_a_loop_calls_is_one_run_of_the_line(
    worker: WorkerClient, document: Path
) -> None:
    """``Tower`` calls three library ``Layer``s in a loop; each holds a list of layers that its
    own ``forward`` loops over (``self.net``). The line ``x = layer(x)`` ran three times, one
    run per layer (hovers and hints say "1 of 3 runs"): the runs were cut inside each layer,
    where its list's ``Gate`` ran, and each one held the end of one layer and the start of the
    next."""
    from fxls.engine.render import executions

    tower = (await _modules(worker, document))["Tower"]
    assert tower.status == "traced", (tower.status, tower.diagnostics)
    line = next(n.span.line for n in tower.nodes if n.target == "layers.0.norm" and n.span)
    group = [n for n in tower.nodes if n.span is not None and n.span.line == line]
    runs = executions(group, tower.containers, lambda n: n.span is not None, tower)
    per_run = [{(n.module_path or "").split(".")[1] for n in run.nodes} for run in runs]
    assert per_run == [{"0"}, {"1"}, {"2"}], per_run


@pytest.mark.asyncio(loop_scope="module")
async def test_a_library_module_with_lists_in_lists_is_one_run_of_its_call(
    worker: WorkerClient, document: Path
) -> None:
    """``Deep`` calls the library's ``Nested`` once; ``Nested`` keeps its layers in lists
    inside a list (``layers.0.0``, as x-transformers' ``AttentionLayers``). Only the outer
    list was known to hold the library's code, so each inner list's layers were told apart
    as another instance: the hover of the call said "1 of 6 runs"."""
    from fxls.engine.render import executions

    deep = (await _modules(worker, document))["Deep"]
    assert deep.status == "traced", (deep.status, deep.diagnostics)
    line = next(n.span.line for n in deep.nodes if n.target.startswith("nested.") and n.span)
    group = [n for n in deep.nodes if n.span is not None and n.span.line == line]
    group = [n for n in group if (n.module_path or "").startswith("nested")]
    runs = executions(group, deep.containers, lambda n: n.span is not None, deep)
    assert len(runs) == 1, [(r.label, [n.target for n in r.nodes]) for r in runs]
