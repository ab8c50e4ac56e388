"""Identical sub-blocks traced once (fxls/worker/capture/reuse.py) change nothing a user sees.

Every file of docs/examples, tests/corpus (with zeroconfig) and bench/models is analysed twice
through the real sandboxed worker, with ``EngineOptions.reuse_blocks`` off and on (and, the
same way, with torch's fake-tensor dispatch cache on and off: ``EngineOptions.fake_cache``,
:func:`fxls.worker.capture.shapes.propagation.new_fake_mode`, with sub-blocks read off the parent's
trace or not, with the eager comparison of FX109 on meta or fake tensors, with a
sub-block's shapes computed inside its parent's run or on their own: ``FXLS_PARENT_SHAPES``,
a second zygote, and with the runs of submodules kept whole shared by a job's classes or
not: ``FXLS_KEPT_RUNS``); the results
must agree on every node (names, spans, named arguments, shapes), every diagnostic, the hover
at every node span and class name, the inlay hints and the class summaries (code lens titles
and class hovers). The convolution shape rule is checked against the kernel on every
convolution of those files. In-process tests check that reuse really happens on deep models, that the
replayed graph is the traced graph node for node, and that anything that would make copies
differ from a trace is refused.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import tracemalloc
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import torch
import torch.fx
from torch import nn

from fxls.analysis.classes import parse
from fxls.engine.analyze import (
    AnalysisRequest,
    EngineOptions,
    FileAnalysis,
    analyze,
    build_requests,
    capture_job,
)
from fxls.engine.workerclient import WorkerClient
from fxls.lsp.features import code_lens, hover, inlay_hints
from fxls.protocol.codec import ProtocolError, from_dict, to_dict
from fxls.protocol.copies import (
    block_gives,
    block_node_copies,
    check_received,
    expand_block,
    expand_copies,
    expand_node,
    expanded,
    expanded_bytes,
    node_matches,
)
from fxls.protocol.model import (
    Arg,
    BlockCopy,
    CaptureResult,
    Limits,
    ModuleResult,
    NodeCopy,
    NodeInfo,
    Span,
    Value,
)
from fxls.protocol.positions import SourceText
from fxls.worker.capture.build.repeats import COPY_ENV
from fxls.worker.capture.pipeline import capture_document
from fxls.worker.capture.records import blocks as block_records
from fxls.worker.capture.records.blocks import BLOCK_RECORDS_ENV
from fxls.worker.capture.shapes.keptruns import KEPT_RUNS_ENV
from fxls.worker.capture.shapes.propagation import (
    ELEMENTWISE_ENV,
    PARENT_SHAPES_ENV,
    ZERO_ONE_ENV,
)
from fxls.worker.capture.spans import CALL_SITE_KEY, SPAN_KEY
from fxls.worker.capture.trace import reuse
from fxls.worker.capture.trace.tracer import SpanTracer

ROOT = Path(__file__).resolve().parents[3]
FILES = sorted(
    [
        *(ROOT / "docs" / "examples").glob("*.py"),
        *(ROOT / "tests" / "corpus").glob("*.py"),
        *(ROOT / "tests" / "corpus" / "zeroconfig").glob("*.py"),
        *(ROOT / "bench" / "models").glob("*.py"),
    ]
)
LIMITS = Limits(timeout_s=120, cpu_s=120, memory_mb=8192)


def _seen(analysis: FileAnalysis, text: str) -> dict[str, Any]:
    """Everything the editor shows from one analysis (and the wire data it comes from)."""
    lines = text.splitlines()
    modules = analysis.modules
    for module in modules:
        module.timings = {}  # how long each step took differs from run to run
    results = [to_dict(module) for module in modules]
    hovers = {}
    positions = set()
    for module in modules:
        name = hover.class_name_span(module, lines)
        if name is not None:
            positions.add((name.line, name.col))
        for node in module.nodes:
            for span in (node.span, node.call_site):
                if span is not None:
                    positions.add((span.line, span.col))
                    positions.add((span.end_line, max(span.end_col - 1, 0)))
    for line, col in sorted(positions):
        found = hover.hover_text(modules, lines, line, col)
        hovers[(line, col)] = None if found is None else (found.markdown, found.span)
    starts = sorted({m.line for m in modules})
    lenses = []
    for module in modules:
        following = [s for s in starts if s > module.line]
        found_diags = code_lens.module_diagnostics(
            module, analysis.diagnostics, following[0] if following else None
        )
        lenses.append(code_lens.lens_title(module, found_diags))
    return {
        "modules": results,
        "diagnostics": [to_dict(d) for d in analysis.diagnostics],
        "hovers": hovers,
        "hints": [(h.line, h.label, h.node) for h in inlay_hints.shape_hints(modules, text)],
        "lenses": lenses,
        "classes": [hover.class_markdown(m) for m in modules],
        "outcome": analysis.outcome,
    }


_WITH_ALL: dict[Path, dict[str, Any]] = {}
"""What the editor shows for each file with every speed-up on (the defaults)."""


@pytest.mark.slow
@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(ROOT)) for p in FILES])
@pytest.mark.parametrize(
    "speedup", ["reuse_blocks", "no_fake_cache", "children_from_trace", "eager_on_meta"]
)
async def test_results_are_the_same_with_and_without_the_speedup(
    worker, path: Path, speedup: str
) -> None:  # type: ignore[no-untyped-def]
    text = path.read_text()
    if speedup == "no_fake_cache":  # the speed-up is leaving the cache out
        without = EngineOptions(limits=LIMITS, fake_cache=True)
    else:
        without = dataclasses.replace(EngineOptions(limits=LIMITS), **{speedup: False})
    off = _seen(await analyze(worker, AnalysisRequest(str(path), text), options=without), text)
    # every speed-up is on by default: the analysis with all of them is made once per file
    if path not in _WITH_ALL:
        analysis = await analyze(
            worker, AnalysisRequest(str(path), text), options=EngineOptions(limits=LIMITS)
        )
        _WITH_ALL[path] = _seen(analysis, text)
    on = _WITH_ALL[path]
    assert on["modules"] == off["modules"]
    assert on["diagnostics"] == off["diagnostics"]
    assert on["hints"] == off["hints"]
    assert on["lenses"] == off["lenses"]
    assert on["classes"] == off["classes"]
    assert on["outcome"] == off["outcome"]
    differ = [pos for pos in off["hovers"] if on["hovers"].get(pos) != off["hovers"][pos]]
    assert not differ, differ[:5]


async def _worker_with(switch: str, scratch: Path) -> AsyncIterator[WorkerClient]:
    """A zygote made with the environment variable ``switch`` set to ``0`` (the worker takes
    ``FXLS_*`` when it is made)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(switch, "0")
        client = WorkerClient(scratch_dir=str(scratch))
    await client.start()
    yield client
    await client.close()


SWITCHES = {
    PARENT_SHAPES_ENV: "each class's shapes on its own (no shapes.propagate_within)",
    ZERO_ONE_ENV: "a symbolic run whose named dimensions are all 0 or 1 in a ShapeEnv",
    ELEMENTWISE_ENV: "every elementwise operator dispatched (no shapes.elementwise)",
    COPY_ENV: "every __init__ of a meta build run (no build.repeats)",
    BLOCK_RECORDS_ENV: "every replayed node recorded on its own (no records.blocks)",
    KEPT_RUNS_ENV: "every call of a submodule kept whole run (no shapes.keptruns)",
}
"""The worker's speed-up switches compared here, and what the worker does with one at ``0``."""


@pytest_asyncio.fixture(scope="module", loop_scope="module", params=list(SWITCHES))
async def worker_switched_off(request, tmp_path_factory) -> AsyncIterator[WorkerClient]:  # type: ignore[no-untyped-def]
    """A zygote made with one switch of ``SWITCHES`` at ``0``."""
    scratch = tmp_path_factory.mktemp("switched-off")
    async for client in _worker_with(request.param, scratch):
        yield client


@pytest.mark.slow
@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(ROOT)) for p in FILES])
async def test_results_are_the_same_with_each_speedup_switched_off(
    worker, worker_switched_off, path: Path
) -> None:  # type: ignore[no-untyped-def]
    await _same_as_the_defaults(worker, worker_switched_off, path)


async def _same_as_the_defaults(worker: WorkerClient, other: WorkerClient, path: Path) -> None:
    """What ``other`` shows for ``path`` is what the default worker shows."""
    text = path.read_text()
    options = EngineOptions(limits=LIMITS)
    request = AnalysisRequest(str(path), text)
    off = _seen(await analyze(other, request, options=options), text)
    if path not in _WITH_ALL:
        _WITH_ALL[path] = _seen(await analyze(worker, request, options=options), text)
    on = _WITH_ALL[path]
    for key in ("modules", "diagnostics", "hints", "lenses", "classes", "outcome"):
        assert on[key] == off[key], key
    differ = [pos for pos in off["hovers"] if on["hovers"].get(pos) != off["hovers"][pos]]
    assert not differ, differ[:5]


def test_a_sub_blocks_shapes_come_from_its_parents_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GPT48's trace records each class's call: Block and CausalSelfAttention are computed
    # inside GPT48's run (nothing is dispatched again), and the same without it
    from fxls.worker.capture.shapes import propagation

    inside: list[str] = []
    original = propagation.propagate_within

    def spy(*args: Any, **kwargs: Any) -> Any:
        found = original(*args, **kwargs)
        inside.append("inside" if found is not None else "alone")
        return found

    monkeypatch.setattr(propagation, "propagate_within", spy)
    text = (
        (ROOT / "bench" / "models" / "gpt48.py")
        .read_text()
        .replace("n_layer: int = 48", "n_layer: int = 2")
    )
    path = tmp_path / "gpt2.py"
    path.write_text(text)
    job = capture_job(str(path), text, build_requests(parse(text).classes), EngineOptions())
    _, result = capture_document(job, lambda *_: None)
    assert inside == ["inside", "inside"]
    monkeypatch.setenv(PARENT_SHAPES_ENV, "0")
    _, alone = capture_document(job, lambda *_: None)
    assert inside == ["inside", "inside", "alone", "alone"]
    for a, b in zip(result.modules, alone.modules, strict=True):
        a.timings, b.timings = {}, {}
        assert to_dict(a) == to_dict(b)


def test_a_parents_run_is_not_used_where_the_class_would_run_otherwise() -> None:
    # propagate_within refuses what the class's own run would not make the same way: a
    # parent run that fixed a name, a transposed (non-contiguous) argument, a dimension the
    # parent has as an expression, another dtype
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    from fxls.worker.capture.shapes.propagation import (
        ExampleInput,
        Propagation,
        Run,
        named_fake,
        new_fake_mode,
        propagate_within,
    )
    from fxls.worker.capture.shapes.values import Namer

    with torch.device("meta"):
        gm = torch.fx.symbolic_trace(nn.Sequential(nn.Linear(8, 8)))
    env = ShapeEnv()
    mode = new_fake_mode(env)
    names: dict[Any, str] = {}

    def fake(dims: list[tuple[str | None, int]]) -> torch.Tensor:
        def to_fake(t: torch.Tensor, ctx: Any = None) -> torch.Tensor:
            return mode.from_tensor(t, symbolic_context=ctx)

        return named_fake(dims, torch.float32, to_fake, env, (names, {}))

    x = fake([("B", 2), ("T", 3), (None, 8)])
    run = Run(torch.device("meta"), mode, env, lambda t: t, {})
    parent = Propagation({}, {}, None, "symbolic", namer=Namer(names), run=run)
    wanted = [ExampleInput("input", "tensor", [("B", 2), ("T", 3), (None, 8)])]
    found = propagate_within(parent, gm, [(wanted[0], x)])
    assert found is not None and found.values["_0"][0].shape == ["B", "T", 8]
    with mode:
        transposed = x.transpose(0, 1).contiguous().transpose(0, 1)
        doubled = x.repeat(2, 1, 1)
    assert propagate_within(parent, gm, [(wanted[0], transposed)]) is None
    assert propagate_within(parent, gm, [(wanted[0], doubled)]) is None
    half = ExampleInput("input", "tensor", wanted[0].dims, dtype=torch.float16)
    assert propagate_within(parent, gm, [(half, x)]) is None
    fixed = dataclasses.replace(parent, fixed={"B": 2})
    assert propagate_within(fixed, gm, [(wanted[0], x)]) is None
    # a run inside the parent's that fails leaves its ShapeEnv to no other run
    wrong = ExampleInput("input", "tensor", [("B", 2), ("T", 3), (None, 5)])
    with mode:
        narrow = x[:, :, :5]
    assert propagate_within(parent, gm, [(wrong, narrow.contiguous())]) is None
    assert run.spoiled
    assert propagate_within(parent, gm, [(wanted[0], x)]) is None


# -- in process: reuse happens, and is refused where a copy could differ ------------------------


def _capture(path: Path, name: str, flag: bool) -> Any:
    text = path.read_text()
    requests = [r for r in build_requests(parse(text).classes) if r.name == name]
    job = capture_job(str(path), text, requests, EngineOptions(reuse_blocks=flag))
    doc, result = capture_document(job, lambda *_: None)
    return doc.captures[name], result.modules[0]


def _graph(capture: Any) -> list[tuple[Any, ...]]:
    gm = capture.traced.gm
    assert gm is not None
    return [
        (
            n.name,
            n.op,
            n.target if isinstance(n.target, str) else id(n.target),
            str(n.args),
            str(n.kwargs),
            n.meta.get(SPAN_KEY),
            n.meta.get(CALL_SITE_KEY),
            [
                (key, path, kind.__qualname__)
                for key, (path, kind) in (n.meta.get("nn_module_stack") or {}).items()
            ],
        )
        for n in gm.graph.nodes
    ]


@pytest.mark.parametrize(
    ("file", "name", "copies"),
    [("gpt48.py", "GPT48", 47), ("llama7b.py", "Llama7B", 33), ("resnet50.py", "ResNet50", 8)],
)
def test_deep_models_trace_each_configuration_once(file: str, name: str, copies: int) -> None:
    path = ROOT / "bench" / "models" / file
    on, on_result = _capture(path, name, True)
    off, off_result = _capture(path, name, False)
    # every block but the first of each configuration is one copy (ResNet-50: the first block
    # of each of its 4 stages downsamples, the second is the template of the others; Llama:
    # the second norm of the first block and the final norm are copies of the block's first
    # norm, and the first block, that copy inside, is the template of the 31 others)
    assert len(on.traced.segments) == copies
    assert not off.traced.segments
    assert _graph(on) == _graph(off)
    assert to_dict(on_result.nodes) == to_dict(off_result.nodes)


def test_turned_off_by_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(reuse.REUSE_ENV, "0")
    capture, _ = _capture(ROOT / "bench" / "models" / "gpt48.py", "GPT48", True)
    assert not capture.traced.segments


SOURCE = """
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, width, scale=1.0):
        super().__init__()
        self.fc = nn.Linear(width, width)
        self.scale = scale

    def forward(self, x):
        return torch.relu(self.fc(x)) * self.scale


class Named(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.fc = nn.Linear(width, width)

    def forward(self, x):
        torch._assert(x.dim() == 2, f"got {x.shape}")
        return self.fc(x)


class Stack(nn.Module):
    def __init__(self, blocks):
        super().__init__()
        self.blocks = nn.ModuleList(blocks)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x
"""


def _trace(stack: nn.Module, namespace_path: str) -> tuple[torch.fx.Graph, list[reuse.Segment]]:
    tracer = SpanTracer(namespace_path, SourceText(SOURCE), reuse_blocks=True)
    graph = tracer.trace(stack)
    assert tracer.replayer is not None
    plain = SpanTracer(namespace_path, SourceText(SOURCE)).trace(stack)
    assert [(n.name, n.op, str(n.target), str(n.args)) for n in graph.nodes] == [
        (n.name, n.op, str(n.target), str(n.args)) for n in plain.nodes
    ]
    return graph, tracer.replayer.segments


def _namespace(tmp_path: Path) -> tuple[dict[str, Any], str]:
    path = str(tmp_path / "blocks.py")
    namespace: dict[str, Any] = {"__name__": "blocks"}
    exec(compile(SOURCE, path, "exec"), namespace)
    return namespace, path


def test_identical_blocks_are_replayed(tmp_path: Path) -> None:
    ns, path = _namespace(tmp_path)
    stack = ns["Stack"]([ns["Block"](4) for _ in range(5)])
    _, segments = _trace(stack, path)
    assert len(segments) == 4


def test_a_different_configuration_is_traced(tmp_path: Path) -> None:
    ns, path = _namespace(tmp_path)
    blocks = [ns["Block"](4), ns["Block"](4, scale=2.0), ns["Block"](4)]
    blocks[2].fc.weight.requires_grad_(False)
    _, segments = _trace(ns["Stack"](blocks), path)
    assert segments == []  # other attribute; other requires_grad


def test_shared_submodules_and_hooks_are_not_replayed(tmp_path: Path) -> None:
    ns, path = _namespace(tmp_path)
    blocks = [ns["Block"](4) for _ in range(3)]
    blocks[2].fc = blocks[1].fc  # tied: traced under its first path, blocks.1.fc
    _, segments = _trace(ns["Stack"](blocks), path)
    assert [list(s.copies) for s in segments] == [["blocks_1_fc", "relu_1", "mul_1"]]
    hooked = [ns["Block"](4) for _ in range(3)]
    for block in hooked:
        block.register_forward_hook(lambda *_: None)
    _, segments = _trace(ns["Stack"](hooked), path)
    assert segments == []


def test_node_names_baked_into_strings_are_not_replayed(tmp_path: Path) -> None:
    ns, path = _namespace(tmp_path)
    _, segments = _trace(ns["Stack"]([ns["Named"](4) for _ in range(3)]), path)
    assert segments == []


def test_only_modules_with_a_twin_are_candidates_for_replay() -> None:
    # reuse.repeated: the calls of a module without a possible twin (same class, parameter,
    # buffer and child shapes) are neither recorded nor replayed
    from torch import nn

    twins = [nn.Linear(4, 4), nn.Linear(4, 4)]
    other = nn.Linear(4, 5)
    root = nn.Sequential(nn.Sequential(*twins), other, nn.Sequential(nn.ReLU(), nn.ReLU()))
    found = reuse.repeated(root)
    assert {id(t) for t in twins} <= found
    assert id(other) not in found and id(root) not in found and id(root[0]) not in found
    assert id(root[2][0]) in found and id(root[2]) not in found
    shared = nn.Linear(2, 2)
    assert id(shared) not in reuse.repeated(nn.Sequential(shared, shared))  # one instance


def test_fingerprint_refuses_what_it_cannot_compare() -> None:
    block = nn.Linear(2, 2)
    assert reuse.fingerprint(block) == reuse.fingerprint(nn.Linear(2, 2))
    assert reuse.fingerprint(block) != reuse.fingerprint(nn.Linear(2, 3))
    block.train(False)
    assert reuse.fingerprint(block) != reuse.fingerprint(nn.Linear(2, 2))
    odd = nn.Linear(2, 2)
    odd.table = object()  # type: ignore[assignment]
    assert reuse.fingerprint(odd) is None
    tensor = nn.Linear(2, 2)
    tensor.mask = torch.ones(2)  # a tensor that is no buffer: its values could matter
    assert reuse.fingerprint(tensor) is None


def test_long_sequences_of_plain_values_are_described_whole() -> None:
    """A long list of numbers is described as one sequence; equal values of another type (or
    of mixed types) are not the same description, as item by item."""
    ints = list(range(100))
    assert reuse.plain(ints) == reuse.plain(list(range(100)))
    assert reuse.plain(ints) != reuse.plain([*range(99), 100])
    assert reuse.plain(ints) != reuse.plain([float(i) for i in range(100)])
    assert reuse.plain(ints) != reuse.plain([*range(99), 99.0])
    assert reuse.plain(tuple(ints)) != reuse.plain(ints)
    block, other = nn.Linear(2, 2), nn.Linear(2, 2)
    block.table, other.table = list(range(4096)), list(range(4096))  # type: ignore[assignment]
    assert reuse.fingerprint(block) == reuse.fingerprint(other)
    other.table[-1] = -1
    assert reuse.fingerprint(block) != reuse.fingerprint(other)


def test_copied_records_travel_as_copies_and_arrive_whole() -> None:
    path = ROOT / "bench" / "models" / "gpt48.py"
    text = path.read_text()
    job = capture_job(str(path), text, build_requests(parse(text).classes), EngineOptions())
    doc, result = capture_document(job, lambda *_: None)
    whole = [to_dict(m.nodes) for m in result.modules]
    assert all(not m.node_copies for m in result.modules)  # expanded unless kept
    doc, result = capture_document(job, lambda *_: None, keep_copies=True)
    reuse.compact(result.modules, doc.copied_nodes)
    gpt = next(m for m in result.modules if m.name == "GPT48")
    copies = len(gpt.node_copies) + sum(len(b.names) for b in gpt.block_copies)
    assert copies > 1500  # 47 copied blocks of 41 nodes
    assert {b.path for b in gpt.block_copies} == {f"h.{i}" for i in range(1, 48)}
    assert len(gpt.block_copies) < copies / 5  # runs, not single nodes
    wire = json.dumps(to_dict(result))
    assert len(wire) < 0.3 * len(json.dumps(whole))
    back = from_dict(CaptureResult, json.loads(wire))
    assert to_dict(back) == to_dict(result)  # decoded as sent
    check_received(back.modules, len(wire))
    whole_again = [expanded(m) for m in back.modules]
    assert [to_dict(m.nodes) for m in whole_again] == whole
    assert all(not m.node_copies and not m.block_copies for m in whole_again)


@pytest.mark.asyncio(loop_scope="module")
async def test_an_analysis_that_keeps_the_copies_publishes_the_same_and_expands_to_the_same(
    worker,
) -> None:  # type: ignore[no-untyped-def]
    # the server's analysis: diagnostics from the records as sent, expanded after publishing
    path = ROOT / "bench" / "models" / "gpt48.py"
    text = path.read_text().replace("n_layer: int = 48", "n_layer: int = 6")
    options = EngineOptions(limits=LIMITS)
    whole = await analyze(worker, AnalysisRequest(str(path), text), options=options)
    kept = await analyze(
        worker, AnalysisRequest(str(path), text, copies_kept=True), options=options
    )
    gpt = kept.module("GPT48")
    assert gpt is not None and {b.path for b in gpt.block_copies} == {f"h.{i}" for i in range(1, 6)}
    assert [to_dict(d) for d in kept.diagnostics] == [to_dict(d) for d in whole.diagnostics]
    kept.expand()

    def shown(module: ModuleResult) -> dict[str, Any]:
        return {k: v for k, v in to_dict(module).items() if k != "timings"}

    assert [shown(m) for m in kept.modules] == [shown(m) for m in whole.modules]
    assert not any(m.block_copies or m.node_copies for m in kept.modules)


def test_a_block_copy_expands_as_its_node_copies_do() -> None:
    # expand_block makes the records without the NodeCopy values; they must be the same
    path = ROOT / "bench" / "models" / "gpt48.py"
    text = path.read_text()
    job = capture_job(str(path), text, build_requests(parse(text).classes), EngineOptions())
    doc, result = capture_document(job, lambda *_: None, keep_copies=True)
    reuse.compact(result.modules, doc.copied_nodes)
    gpt = next(m for m in result.modules if m.name == "GPT48")
    records = expand_copies(gpt.nodes, gpt.node_copies, gpt.block_copies)
    assert any(block.texts for block in gpt.block_copies)  # argument texts renamed too
    for block in gpt.block_copies:
        templates = records[block.of : block.of + len(block.names)]
        by_copies = [
            expand_node(c, t) for c, t in zip(block_node_copies(block, templates), templates)
        ]
        assert expand_block(block, templates) == by_copies
        assert records[block.at : block.at + len(block.names)] == by_copies
    # block_gives is ``block_node_copies(templates) == run``, for a change in any field of a copy
    block = gpt.block_copies[3]
    templates = records[block.of : block.of + len(block.names)]
    run = block_node_copies(block, templates)
    assert block_gives(block, templates, run)
    assert not block_gives(block, templates, run[:-1])
    changes: dict[str, Any] = {
        "at": 0, "of": 1, "name": "x", "target": "h.9.x", "module_path": "h.9", "users": 9,
        "inputs": ["x"], "renamed": {"x": "y"}, "texts": True,
    }  # fmt: skip
    assert set(changes) == {f.name for f in dataclasses.fields(NodeCopy)}, "a new field"
    for index in (0, len(run) // 2, len(run) - 1):
        for name, value in changes.items():
            changed = list(run)
            changed[index] = dataclasses.replace(run[index], **{name: value})
            assert changed != run and not block_gives(block, templates, changed), (index, name)


def test_a_copy_matches_a_record_exactly_when_it_expands_to_it() -> None:
    # node_matches is how the worker decides a record may travel as a copy: it must agree
    # with building the expansion, for a change in any field of the record or of its arguments
    template = NodeInfo(
        name="fc", op="call_module", target="h.0.fc", span=Span(3, 4, 3, 14),
        call_site=Span(9, 8, 9, 20), signature="module.forward",
        args=[Arg("input", "ln", node="ln"), Arg("bias", "True", default=True)],
        outputs=[Value("tensor", shape=["B", 8], dtype="float32")],
        module_type="Linear(8, 8)", module_path="h.0", users=1, inputs=["ln"],
    )  # fmt: skip
    copy = NodeCopy(at=5, of=1, name="fc_1", target="h.1.fc", module_path="h.1", users=2,
                    inputs=["ln_1"], renamed={"ln": "ln_1"})  # fmt: skip
    node = expand_node(copy, template)
    assert node_matches(copy, template, node)
    other: dict[str, Any] = {
        "name": "fc_2", "op": "call_function", "target": "h.2.fc", "span": Span(3, 4, 3, 15),
        "call_site": None, "signature": "aten", "module_type": "Linear(8, 9)",
        "outputs": [Value("tensor", shape=["B", 9], dtype="float32")], "module_path": "h.2",
        "users": 3, "inputs": ["ln"], "args": [Arg("input", "ln", node="ln")],
    }  # fmt: skip
    assert set(other) == {f.name for f in dataclasses.fields(NodeInfo)}, "a new field"
    for name, value in other.items():
        changed = dataclasses.replace(node, **{name: value})
        assert not node_matches(copy, template, changed), name
        assert expand_node(copy, template) != changed
    for index in range(len(node.args)):
        for name, value in {"name": "x", "value": "y", "default": False, "node": "z",
                            "kind": "keyword_only"}.items():  # fmt: skip
            args = list(node.args)
            if getattr(args[index], name) == value:
                value = "w" if isinstance(value, str) else not value
            args[index] = dataclasses.replace(args[index], **{name: value})
            changed = dataclasses.replace(node, args=args)
            assert not node_matches(copy, template, changed), (index, name)
            assert expand_node(copy, template) != changed


def test_a_copy_renames_node_names_inside_argument_texts_only_when_asked() -> None:
    template = NodeInfo(
        name="view", op="call_method", target="view", module_path="h.0", users=1,
        args=[Arg("self", "x", node="x"), Arg("size", "[size, size_1, 12, 'size']")],
        inputs=["x", "size", "size_1"],
    )  # fmt: skip
    plain = NodeCopy(at=9, of=0, name="view_1", target="view", module_path="h.1", users=1,
                     inputs=["x_1", "size_2", "size_3"], renamed={"x": "x_1"})  # fmt: skip
    texts = dataclasses.replace(plain, texts=True)
    assert expand_node(plain, template).args[1].value == "[size, size_1, 12, 'size']"
    node = expand_node(texts, template)
    # whole names only (size_1 is not size + _1); the check that follows is what makes a
    # rename inside a string literal harmless: such a copy does not match and is not sent
    assert node.args[1].value == "[size_2, size_3, 12, 'size_2']"
    assert node_matches(texts, template, node) and not node_matches(plain, template, node)
    assert node_matches(plain, template, expand_node(plain, template))
    assert not node_matches(texts, template, expand_node(plain, template))
    block = BlockCopy(at=9, of=0, names=["view_1"], template_path="h.0", path="h.1",
                      users=[1], outer={"x": "x_1", "size": "size_2", "size_1": "size_3"},
                      texts=[0])  # fmt: skip
    assert block_node_copies(block, [template]) == [texts]


def _refused(data: dict[str, Any]) -> None:
    """``data`` decodes as sent, and its copies are a protocol error both for the reader of a
    frame, before expanding anything (``check_received``), and for the expansion itself."""
    module = from_dict(ModuleResult, data)
    assert len(module.nodes) == len(data["nodes"])  # decoding keeps the copies
    with pytest.raises(ProtocolError):
        check_received([module], 1 << 20)
    with pytest.raises(ProtocolError):
        expanded(module)


def test_copies_that_do_not_fit_are_a_protocol_error() -> None:
    data = {
        "name": "M", "line": 1, "status": "traced",
        "nodes": [{"name": "x", "op": "placeholder", "target": "x"}],
        "node_copies": [{"at": 0, "of": 3, "name": "y", "target": "y", "module_path": None,
                         "users": 0}],
    }  # fmt: skip
    _refused(data)
    template = {"name": "y", "target": "y", "module_path": None, "users": 0}
    twice = dict(data, nodes=data["nodes"] * 2, node_copies=[
        {"at": 2, "of": 0, **template}, {"at": 2, "of": 1, **template}])  # fmt: skip
    _refused(twice)  # two copies at one index
    # copies expand in index order, whatever order they are listed in: a template that is
    # a copy itself is expanded before its own copy
    chained = dict(twice, node_copies=[
        {"at": 3, "of": 2, **template}, {"at": 2, "of": 0, **template}])  # fmt: skip
    kept = from_dict(ModuleResult, chained)
    assert len(kept.nodes) == 2 and len(kept.node_copies) == 2
    check_received([kept], 1 << 20)
    assert [n.name for n in expanded(kept).nodes] == ["x", "x", "y", "y"]
    assert len(kept.nodes) == 2 and len(kept.node_copies) == 2, "expanded() made a new one"
    block = {"at": 2, "of": 0, "names": ["a", "b"], "template_path": "", "path": "",
             "users": [1, 0]}  # fmt: skip
    runs = dict(data, nodes=data["nodes"] * 2, node_copies=[], block_copies=[block])
    assert [n.name for n in expanded(from_dict(ModuleResult, runs)).nodes] == ["x", "x", "a", "b"]
    for wrong in ({"at": 1}, {"of": 1}, {"users": [1]}, {"names": []}, {"at": 3}):
        # outside, over its templates, a user count short
        _refused(dict(runs, block_copies=[dict(block, **wrong)]))
    _refused(dict(runs, node_copies=[{"at": 3, "of": 0, **template}]))  # overlapping


def _expansion_measured(
    nodes: list[NodeInfo], copies: list[NodeCopy], blocks: list[BlockCopy]
) -> tuple[int, int]:
    """(estimated, allocated) bytes of expanding the copies."""
    estimate = expanded_bytes(nodes, copies, blocks)
    tracemalloc.start()
    try:
        records = expand_copies(nodes, copies, blocks)
        allocated = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert len(records) == len(nodes) + len(copies) + sum(len(b.names) for b in blocks)
    return estimate, allocated


def test_the_expansion_estimate_bounds_what_copies_allocate() -> None:
    # what a result may expand to is checked against its frame on this estimate
    path = ROOT / "bench" / "models" / "gpt48.py"
    text = path.read_text()
    job = capture_job(str(path), text, build_requests(parse(text).classes), EngineOptions())
    doc, result = capture_document(job, lambda *_: None, keep_copies=True)
    reuse.compact(result.modules, doc.copied_nodes)
    gpt = next(m for m in result.modules if m.name == "GPT48")
    estimate, allocated = _expansion_measured(gpt.nodes, gpt.node_copies, gpt.block_copies)
    assert allocated * 0.95 <= estimate <= allocated * 2, (estimate, allocated)
    # hostile shapes: renamed texts along a chain of copies whose names are long (the texts
    # do not grow with the chain), and many literal arguments
    texts = [Arg(f"a{i}", "x + x * x") for i in range(200)]
    template = NodeInfo("t", "call_function", "f", args=texts, inputs=["x"])
    long = "n" * 300
    chain = [
        NodeCopy(at=i, of=i - 1, name=f"c{i}", target="f", module_path=None, users=0,
                 inputs=[long + str(i)], texts=True)
        for i in range(1, 30)
    ]  # fmt: skip
    estimate, allocated = _expansion_measured([template], chain, [])
    assert allocated <= estimate <= allocated * 2, (estimate, allocated)
    literal = NodeInfo("t", "call_function", "f", args=[Arg(f"a{i}", "1") for i in range(500)])
    block = BlockCopy(at=1, of=0, names=["b"], template_path="", path="", users=[0])
    estimate, allocated = _expansion_measured([literal], [], [block])
    assert allocated * 0.95 <= estimate <= allocated * 2, (estimate, allocated)


def test_copies_name_nodes_by_identifiers() -> None:
    data = {
        "name": "M", "line": 1, "status": "traced",
        "nodes": [{"name": "x", "op": "placeholder", "target": "x"}],
        "node_copies": [{"at": 1, "of": 0, "name": "y", "target": "y", "module_path": None,
                         "users": 0, "inputs": ["x"]}],
    }  # fmt: skip
    assert [n.name for n in expanded(from_dict(ModuleResult, data)).nodes] == ["x", "y"]
    copy = data["node_copies"][0]  # type: ignore[index]
    for wrong in ({"name": "y y"}, {"inputs": ["x+1"]}, {"renamed": {"x": "1x"}}):
        bad = from_dict(ModuleResult, dict(data, node_copies=[dict(copy, **wrong)]))
        with pytest.raises(ProtocolError, match="not a node"):
            check_received([bad], 1 << 20)
    block = {"at": 1, "of": 0, "names": ["a"], "template_path": "", "path": "", "users": [0]}
    for wrong in ({"names": ["a.b"]}, {"outer": {"x": "x y"}}):
        bad = from_dict(
            ModuleResult, dict(data, node_copies=[], block_copies=[dict(block, **wrong)])
        )
        with pytest.raises(ProtocolError, match="not a node"):
            check_received([bad], 1 << 20)


FIXING = """
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return torch.relu(self.fc(x))


# fxls: x = (B=2, T=3, 4)
class Stack(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Block() for _ in range(3)])

    def forward(self, x):
        x = self.blocks[0](x)
        y = x.view(2, 3, 4)
        x = self.blocks[1](x)
        x = self.blocks[2](x)
        return x + y
"""


def test_a_dimension_fixed_inside_the_template_is_fixed_in_the_copies(tmp_path: Path) -> None:
    # the `view` between the first block and its copies fixes B and T: the copies print 2 and
    # 3 as a trace would, not the names the template printed before the view
    path = tmp_path / "fixing.py"
    path.write_text(FIXING)
    on, on_result = _capture(path, "Stack", True)
    _, off_result = _capture(path, "Stack", False)
    assert on.traced.segments
    assert to_dict(on_result.nodes) == to_dict(off_result.nodes)
    copied_fc = next(n for n in on_result.nodes if n.name == "blocks_1_fc")
    assert copied_fc.outputs[0].shape == [2, 3, 4]


def test_copies_name_their_arguments_with_the_templates_choice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # recorded node by node (not as one block copy per replayed block, below), a copy whose
    # argument texts name nodes (`view(B, T, n_head, C // n_head)`) binds the signature
    # chosen for its template to its own arguments: the records are the ones that naming
    # every argument again gives
    from fxls.worker.capture.records import arguments

    monkeypatch.setenv(BLOCK_RECORDS_ENV, "0")
    path = ROOT / "bench" / "models" / "gpt48.py"
    text = path.read_text()
    job = capture_job(str(path), text, build_requests(parse(text).classes), EngineOptions())
    named_like = arguments.named_like
    bound: list[str] = []

    def counted(node: torch.fx.Node, *args: Any) -> Any:
        found = named_like(node, *args)
        if found is not None:
            bound.append(node.name)
        return found

    def records() -> list[Any]:
        _, result = capture_document(job, lambda *_: None)
        return [to_dict(m.nodes) for m in result.modules]

    monkeypatch.setattr(arguments, "named_like", counted)
    fast = records()
    assert len(bound) > 4 * 47  # the views of q, k, v and y in every copied block
    monkeypatch.setattr(arguments, "named_like", lambda *_: None)
    assert records() == fast


@pytest.mark.parametrize(
    ("file", "count"), [("gpt48.py", 47), ("llama7b.py", 31), ("resnet50.py", 8)]
)
def test_a_replayed_blocks_records_are_made_as_one_block_copy(
    monkeypatch: pytest.MonkeyPatch, file: str, count: int
) -> None:
    # the nodes of a replayed call become one BlockCopy of the template's records without a
    # record or a NodeCopy per node; expanded, they are the records made node by node
    path = ROOT / "bench" / "models" / file
    text = path.read_text()
    job = capture_job(str(path), text, build_requests(parse(text).classes), EngineOptions())
    one_by_one: list[str] = []
    node_copy = block_records.node_copy

    def counted(gm: Any, node: torch.fx.Node, *args: Any) -> Any:
        one_by_one.append(node.name)
        return node_copy(gm, node, *args)

    monkeypatch.setattr(block_records, "node_copy", counted)

    def captured() -> list[Any]:
        one_by_one.clear()
        _, result = capture_document(job, lambda *_: None, keep_copies=True)
        return result.modules

    made = captured()
    root = made[-1]
    assert len(root.block_copies) == count
    assert len(one_by_one) <= 21  # the second RMSNorm of a Llama layer (another call site)
    monkeypatch.setenv(BLOCK_RECORDS_ENV, "0")
    per_node = captured()
    assert len(one_by_one) >= sum(len(b.names) for b in root.block_copies)
    for a, b in zip(made, per_node):
        a_nodes = expand_copies(a.nodes, a.node_copies, a.block_copies)
        b_nodes = expand_copies(b.nodes, b.node_copies, b.block_copies)
        assert to_dict(a_nodes) == to_dict(b_nodes), a.name


def test_a_templates_choice_is_not_used_for_other_constants_or_kinds() -> None:
    from fxls.worker.capture.records import arguments

    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    n = graph.placeholder("n")
    template = graph.call_method("view", (x, [n, 4]))
    same = graph.call_method("view", (x, [n, 4]))
    other = graph.call_method("view", (x, [n, 5]))
    other_kind = graph.call_method("view", (x, [x, 4]))
    examples = {"x": torch.empty(2, 4, device="meta"), "n": 2}
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    chosen: dict[str, Any] = {}
    expected = arguments.named_arguments(gm, template, examples, chosen)
    choice = chosen[template.name]
    assert arguments.named_like(same, template, choice, examples) == expected
    assert arguments.named_like(other, template, choice, examples) is None
    assert arguments.named_like(other_kind, template, choice, examples) is None


def test_copies_skip_create_node_only_where_that_leaves_the_graph_as_it_would(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the fast path makes a copy's nodes with torch's private graph parts; it is used only
    # when this torch's create_node does no more than that (checked once per process)
    assert reuse.fast_path_agrees.__wrapped__()
    create_node = torch.fx.Graph.create_node

    def more(self: torch.fx.Graph, *args: Any, **kwargs: Any) -> torch.fx.Node:
        node = create_node(self, *args, **kwargs)
        node.meta["seen"] = True  # what a later torch might do in create_node
        return node

    monkeypatch.setattr(torch.fx.Graph, "create_node", more)
    assert not reuse.fast_path_agrees.__wrapped__()


def _convolutions_checked(path: Path) -> tuple[int, list[str]]:
    """Capture ``path`` (every class) with each answer of ``shortcuts.fast_conv`` compared
    with the operator's output in the same run: (answers, differences)."""
    from fxls.worker.capture.shapes import shortcuts

    answered = 0
    differ: list[str] = []
    rule = shortcuts.fast_conv

    def checked(module: Any, x: torch.Tensor) -> Any:
        nonlocal answered
        fast = rule(module, x)
        if fast is not None:
            answered += 1
            real = module._conv_forward(x, module.weight, module.bias)
            got = (fast.shape, fast.stride(), fast.dtype, fast.device)
            if got != (real.shape, real.stride(), real.dtype, real.device):
                differ.append(f"{module}: {got} != {real.shape}, {real.stride()}")
        return fast

    shortcuts.fast_conv = checked
    try:
        text = path.read_text()
        job = capture_job(str(path), text, build_requests(parse(text).classes), EngineOptions())
        capture_document(job, lambda *_: None)
    finally:
        shortcuts.fast_conv = rule
    return answered, differ


@pytest.mark.slow
def test_the_convolution_rule_gives_the_kernels_output_on_every_file() -> None:
    # each file is captured in a child process of its own (files run user code and change
    # torch's global state); every convolution the rule answers is run as well and compared
    answered = 0
    for path in FILES:
        count, differ = _in_child(functools.partial(_convolutions_checked, path))
        assert not differ, (path.name, differ[:3])
        answered += count
    assert answered > 100


def _in_child(work: Callable[[], tuple[int, list[str]]]) -> tuple[int, list[str]]:
    """``work()`` in a forked child (a capture runs user code and changes torch's global
    state); its answer."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(read)
        try:
            os.write(write, json.dumps(work()).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        data = pipe.read()
    os.waitpid(pid, 0)
    count, differ = json.loads(data)
    return count, differ


def _elementwise_checked(path: Path) -> tuple[int, list[str]]:
    """Capture ``path`` (every class) with each answer of ``shapes.elementwise`` compared with
    the operator's output in the same run: (answers, differences)."""
    from fxls.worker.capture.shapes import elementwise

    answered = 0
    differ: list[str] = []
    saved = {name: getattr(elementwise, name) for name in _RULES}

    def checked(name: str, run: Callable[..., Any]) -> Callable[..., Any]:
        def rule(*args: Any) -> Any:
            nonlocal answered
            fast = saved[name](*args)
            if fast is not None:
                answered += 1
                real = run(*args)
                got = (fast.shape, fast.stride(), fast.dtype, fast.device, fast.storage_offset())
                want = (real.shape, real.stride(), real.dtype, real.device, real.storage_offset())
                if got != want:
                    differ.append(f"{name} {args[0]}: {got} != {want}")
            return fast

        return rule

    runs = {
        "same_layout_function": lambda target, args, kwargs: target(*args, **kwargs),
        "same_layout_method": lambda name, args, kwargs: getattr(args[0], name)(
            *args[1:], **kwargs
        ),
        "same_layout_module": lambda module, x: module(x),
    }
    for name in _RULES:
        setattr(elementwise, name, checked(name, runs[name]))
    try:
        text = path.read_text()
        job = capture_job(str(path), text, build_requests(parse(text).classes), EngineOptions())
        capture_document(job, lambda *_: None)
    finally:
        for name, rule in saved.items():
            setattr(elementwise, name, rule)
    return answered, differ


_RULES = ("same_layout_function", "same_layout_method", "same_layout_module")


@pytest.mark.slow
def test_the_elementwise_rules_give_the_operators_output_on_every_file() -> None:
    # each file is captured in a child process of its own; every answer of a rule is checked
    # against the operator run on the same fake tensors
    answered = 0
    for path in FILES:
        count, differ = _in_child(functools.partial(_elementwise_checked, path))
        assert not differ, (path.name, differ[:3])
        answered += count
    assert answered > 100
