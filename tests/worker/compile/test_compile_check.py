"""The compile check (``compile`` job): TorchDynamo graph breaks at the document's lines.

``run_compile`` executes user code, as the sandboxed child does; here it runs in the test process
on ``tests/fixtures/compile/breaks.py``. One test sends the job through the real zygote; the
last ones compare with ``torch._dynamo.explain`` on the bundled examples and the corpus.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from fxls.analysis import parse
from fxls.engine.analyze import AnalysisRequest, EngineOptions, analyze
from fxls.engine.compilecheck import CompileCache, as_built, check_compile
from fxls.engine.render import compile_text
from fxls.protocol.codec import from_dict, to_dict
from fxls.protocol.model import CaptureJob, CaptureResult, CompileJob, Limits, ModuleResult
from fxls.worker.capture.pipeline import capture_document
from fxls.worker.compile import kinds
from fxls.worker.compile import run as compile_run
from fxls.worker.compile.dynamo import parse_break_record
from fxls.worker.compile.run import built, instance, run_compile, split_submodule
from fxls.worker.rewrite.base import Original

ROOT = Path(__file__).parents[3]
FIXTURES = ROOT / "tests" / "fixtures" / "compile"
BREAKS = FIXTURES / "breaks.py"


def _job(path: Path) -> CaptureJob:
    text = path.read_text()
    classes = [c.request() for c in parse(text).classes]
    return CaptureJob(path=str(path), source=text, classes=classes, sys_path=[str(path.parent)])


def _line(path: Path, fragment: str) -> int:
    lines = path.read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if fragment in line)


def _check(path: Path, **rewrite: int) -> dict[str, ModuleResult]:
    result = run_compile(_job(path), CompileJob(**rewrite), lambda *a: None)  # type: ignore[arg-type]
    assert from_dict(CaptureResult, to_dict(result)) == result  # survives the wire
    return {m.name: m for m in result.modules}


@pytest.fixture(scope="module")
def checked() -> dict[str, ModuleResult]:
    return _check(BREAKS)


def _codes(mod: ModuleResult) -> list[tuple[str, int]]:
    return [(d.code, d.span.line) for d in mod.diagnostics if d.code.startswith("FX6")]


def test_each_break_is_reported_at_its_own_line_with_its_kind(checked) -> None:  # type: ignore[no-untyped-def]
    mod = checked["Breaks"]
    assert _codes(mod) == [
        ("FX601", _line(BREAKS, 'print("shape"')),  # inside the helper forward calls
        ("FX602", _line(BREAKS, ".item()")),
        ("FX605", _line(BREAKS, "graph_break()")),
    ]
    check = mod.compile
    assert check is not None and check.status == "ok" and check.tensors == "cpu"
    # a break inside a helper leaves the helper's rest a graph of its own: 3 breaks, 5 graphs
    assert (len(check.breaks), check.graphs) == (3, 5)
    assert check.breaks[0].function == "debug_shape"
    for d in mod.diagnostics:
        if d.code.startswith("FX6"):
            assert d.severity == "warning" and d.fix and "(" in d.message


def test_a_branch_on_tensor_values_is_reported_even_where_fx_cannot_trace(checked) -> None:  # type: ignore[no-untyped-def]
    mod = checked["Branches"]
    assert _codes(mod) == [("FX603", _line(BREAKS, "if x.sum() > 0"))]
    assert mod.compile is not None and mod.compile.graphs == 2


def test_a_clean_class_compiles_whole(checked) -> None:  # type: ignore[no-untyped-def]
    mod = checked["Clean"]
    assert _codes(mod) == []
    assert mod.compile is not None
    assert (mod.compile.status, mod.compile.graphs, mod.compile.breaks) == ("ok", 1, [])


def test_on_meta_tensors_the_check_stops_where_a_value_is_needed() -> None:
    # max_params=0: too large for the CPU, so the captured meta build runs
    mod = _check(BREAKS, max_params=0)["Breaks"]
    assert mod.compile is not None
    assert (mod.compile.status, mod.compile.tensors) == ("stopped", "meta")
    # the break at `.item()` is known; running past it needs the value meta tensors lack
    assert _codes(mod) == [
        ("FX601", _line(BREAKS, 'print("shape"')),
        ("FX602", _line(BREAKS, ".item()")),
        ("FX607", _line(BREAKS, ".item()")),
    ]
    assert next(d for d in mod.diagnostics if d.code == "FX607").severity == "information"


def test_break_kinds_from_torch_reasons() -> None:
    assert (
        kinds.code_of("Failed to trace builtin operator\n  Explanation: ... `print` ...") == "FX601"
    )
    assert kinds.code_of("logging.Logger method not supported for non-export cases") == "FX601"
    assert (
        kinds.code_of("Unsupported Tensor.item() call with capture_scalar_outputs=False") == "FX602"
    )
    assert kinds.code_of("Tensor.tolist() with non-integer tensor") == "FX602"
    assert kinds.code_of("generic_jump TensorVariable()") == "FX603"
    assert kinds.code_of("Call to `torch._dynamo.graph_break()`") == "FX605"
    assert kinds.code_of("Attempted to call function marked as skipped") == "FX604"
    assert kinds.code_of("Attempted to wrap RNN, GRU, or LSTM: Dynamo does not support") == "FX604"
    assert kinds.code_of("something torch says one day") == "FX699"
    assert len(kinds.short_reason("x" * 10_000)) == kinds.MAX_REASON


@pytest.mark.worker
@pytest.mark.asyncio(loop_scope="module")
async def test_the_job_through_the_real_worker_merges_into_the_analysis(worker) -> None:  # type: ignore[no-untyped-def]
    options = EngineOptions(compile_check=True)
    request = AnalysisRequest(str(BREAKS), BREAKS.read_text())
    analysis = await analyze(worker, request, options)
    assert not [d for d in analysis.diagnostics if d.code.startswith("FX6")]
    sent: list[list[ModuleResult]] = []

    class Recording:
        async def run(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            sent.append(kwargs["compile"].modules)
            return await worker.run(*args, **kwargs)

    await check_compile(Recording(), analysis, request, options)
    # each class goes with how its capture built and fed it, without its nodes
    assert [(m.name, m.input_sizes, len(m.nodes)) for m in sent[0]] == [
        ("Breaks", {"B": 2}, 0),
        ("Branches", {"B": 2}, 0),
        ("Clean", {"B": 2}, 0),
    ]
    codes = [d.code for d in analysis.diagnostics if d.code.startswith("FX6")]
    assert codes == ["FX601", "FX602", "FX605", "FX603"]
    graphs = {m.name: m.compile.graphs for m in analysis.modules if m.compile}
    assert graphs == {"Breaks": 5, "Branches": 2, "Clean": 1}


@pytest.mark.worker
@pytest.mark.asyncio(loop_scope="module")
async def test_the_same_job_is_taken_from_the_cache_not_sent_again(worker) -> None:  # type: ignore[no-untyped-def]
    """The same text, settings and captured classes: the result of the first job, no second
    job; another setting of the check (or another text) sends one."""
    sent: list[int] = []

    class Counting:
        async def run(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            sent.append(1)
            return await worker.run(*args, **kwargs)

    cache = CompileCache()
    options = EngineOptions(compile_check=True)
    request = AnalysisRequest(str(BREAKS), BREAKS.read_text())

    async def fx6(options: EngineOptions, request: AnalysisRequest) -> list[str]:
        done = await analyze(worker, request, options)
        await check_compile(Counting(), done, request, options, cache)
        return [d.code for d in done.diagnostics if d.code.startswith("FX6")]

    first = await fx6(options, request)
    assert first == ["FX601", "FX602", "FX605", "FX603"] and len(sent) == 1
    assert await fx6(options, request) == first and len(sent) == 1  # from the cache
    assert (cache.hits, cache.jobs) == (1, 1)
    meta = EngineOptions(compile_check=True, compile_max_params=0)
    await fx6(meta, request)
    assert len(sent) == 2  # another setting: another job
    edited = AnalysisRequest(str(BREAKS), BREAKS.read_text() + "\n# a comment\n")
    await fx6(options, edited)
    assert len(sent) == 3  # another text


@pytest.mark.worker
@pytest.mark.asyncio(loop_scope="module")
async def test_a_job_that_hits_its_time_limit_says_so_for_each_class(worker) -> None:  # type: ignore[no-untyped-def]
    path = FIXTURES / "slow.py"
    request = AnalysisRequest(str(path), path.read_text())
    analysis = await analyze(worker, request, EngineOptions())
    (slow,) = analysis.modules
    assert slow.status == "traced"  # the capture runs on the meta device: quick
    short = EngineOptions(compile_check=True, limits=Limits(timeout_s=3.0))
    await check_compile(worker, analysis, request, short)
    assert slow.compile is not None
    assert (slow.compile.status, slow.compile.message) == ("limit", "time limit")
    assert compile_text(slow.compile) == "compile check stopped: time limit"
    (info,) = [d for d in analysis.diagnostics if d.code.startswith("FX6")]
    assert (info.code, info.severity) == ("FX609", "information")
    assert "`Slow` did not finish (it hit its time limit)" in info.message


def _without_duration(mod: ModuleResult) -> tuple[object, ...]:
    check = mod.compile
    assert check is not None
    return (check.status, check.graphs, check.breaks, check.tensors, check.message, mod.diagnostics)


MINGPT = ROOT / "tests" / "corpus" / "zeroconfig" / "mingpt.py"


@pytest.mark.parametrize(
    ("path", "max_params"),
    [(BREAKS, 20_000_000), (BREAKS, 0), (MINGPT, 20_000_000)],
    ids=["cpu", "meta", "blocks-of-a-parent-built-by-a-recipe"],
)
def test_classes_are_built_from_their_capture_result_without_capturing_again(
    monkeypatch: pytest.MonkeyPatch, path: Path, max_params: int
) -> None:
    """With the capture's results, the job executes the file and builds each class as the
    result says, never capturing it again, and finds what a job that captures first finds
    (minGPT's ``GPT`` is built with arguments fxls assumed, which no expression writes down:
    its blocks are rebuilt inside it by their path, ``GPT.transformer.h.0``)."""
    job = _job(path)
    _, captured = capture_document(job, lambda *a: None)
    sent = [as_built(m) for m in captured.modules if m.build is not None and m.inputs]
    assert sent[0].input_sizes and not sent[0].nodes
    full = {
        m.name: m
        for m in run_compile(job, CompileJob(max_params=max_params), lambda *a: None).modules
    }

    def no_capture(*args: object, **kwargs: object) -> None:
        raise AssertionError("the compile job captured the document again")

    monkeypatch.setattr(compile_run, "capture_document", no_capture)
    phases: list[tuple[str, object]] = []
    result = run_compile(
        job,
        CompileJob(sent, max_params=max_params),
        lambda *a: phases.append(a),
    )
    assert from_dict(CaptureResult, to_dict(result)) == result
    assert {p for p, _ in phases} == {"import", "trace"}  # no build, no trace of its own
    light = {m.name: m for m in result.modules}
    assert set(light) == {m.name for m in sent} and len(light) >= 3
    for name, mod in light.items():
        assert _without_duration(mod) == _without_duration(full[name]), name


@pytest.mark.parametrize(
    ("max_params", "tensors"),
    [(20_000_000, "cpu"), (100, "cpu"), (0, "meta")],
    ids=["with-its-parent", "alone", "meta"],
)
def test_a_block_only_its_parent_builds_is_checked_as_its_capture_built_it(
    monkeypatch: pytest.MonkeyPatch, max_params: int, tensors: str
) -> None:
    """``Scaled(layer, scale)`` is built by ``Net`` only: rebuilt from
    ``Net().get_submodule('blocks.0')``, on the CPU with its parent when the parent is small
    enough, alone on the CPU inside a parent on the meta device when only the block is
    (``Net`` has 216 parameters, ``Scaled`` 72), else on the meta device."""
    path = FIXTURES / "parent_built.py"
    job = _job(path)
    _, captured = capture_document(job, lambda *a: None)
    sent = [as_built(m) for m in captured.modules]
    assert sent[0].constructed is not None and sent[0].constructed.source == "parent"

    def no_capture(*args: object, **kwargs: object) -> None:
        raise AssertionError("the compile job captured the document again")

    monkeypatch.setattr(compile_run, "capture_document", no_capture)
    result = run_compile(job, CompileJob(sent, max_params=max_params), lambda *a: None)
    block = next(m for m in result.modules if m.name == "Scaled")
    assert block.compile is not None
    assert (block.compile.status, block.compile.tensors) == ("ok", tensors)
    assert _codes(block) == [("FX601", _line(path, 'print("scaled"'))]


def test_the_expression_of_a_block_built_by_its_parent_names_the_parent_and_the_path() -> None:
    expr = "GPT(GPTConfig()).get_submodule('transformer').get_submodule('h.0')"
    assert split_submodule(expr) == ("GPT(GPTConfig())", "transformer.h.0")
    assert split_submodule("resnet18()") == ("resnet18()", "")


# --- against torch._dynamo.explain on real tensors ------------------------------------

EXAMPLES = sorted((ROOT / "docs" / "examples").glob("*.py"))
NOT_BREAKS = {"FX607", "FX608"}
"""Codes of the check that are no graph break: where it stopped, what recompiles."""
CORPUS = [
    ROOT / "tests" / "corpus" / n for n in ("gpt.py", "lstm_lm.py", "mobilenet.py", "misc.py")
]


@pytest.mark.slow
@pytest.mark.parametrize("path", EXAMPLES + CORPUS + [BREAKS], ids=lambda p: p.name)
def test_no_break_reported_where_explain_on_real_tensors_reports_none(path: Path) -> None:
    """Each class the check ran on real tensors: the same number of graphs as ``explain`` on
    the same module and inputs, a break at the line of each break explain reports, and no
    FX6xx where explain reports no break (the check also reads TorchDynamo's graph-break log,
    which names breaks explain misses: one with no graph before it)."""
    job = _job(path)
    doc, captured = capture_document(job, lambda *a: None)
    original = Original(doc, captured)
    sent = [as_built(m) for m in captured.modules if m.build is not None and m.inputs]
    result = run_compile(job, CompileJob(sent), lambda *a: None)  # as the engine sends it
    compared = 0
    for mod in result.modules:
        check = mod.compile
        if check is None or check.tensors != "cpu" or not built(doc.captures.get(mod.name)):
            continue
        module, calls, _ = instance(original, mod.name, CompileJob())
        with torch.no_grad():
            try:
                explained = torch._dynamo.explain(module)(*calls[0])
            except Exception:
                continue  # forward itself raises: nothing to compare
        ours = [d for d in mod.diagnostics if d.code.startswith("FX6") and d.code not in NOT_BREAKS]
        if not explained.break_reasons:
            assert ours == [], f"{path.name}:{mod.name}: FX6 where explain reports no break"
        assert check.graphs == explained.graph_count, mod.name
        lines = {d.span.line for d in ours}
        assert lines == {b.span.line for b in check.breaks}, mod.name
        for reason in explained.break_reasons:  # each break explain reports is reported
            mine = [f.lineno for f in reason.user_stack if f.filename == str(path)]
            assert not mine or mine[-1] in lines, (mod.name, reason.reason)
        compared += 1
    assert compared or path.name == "broken.py"


def test_a_size_fixed_by_a_python_loop_recompiles_at_every_size() -> None:
    path = FIXTURES / "recompiles.py"
    mod = _check(path)["PerRow"]
    assert mod.compile is not None and mod.compile.graphs == 1 and not mod.compile.breaks
    if mod.compile.recompiles is None:  # the first compilation took over a second: not measured
        pytest.skip("recompiles not measured on this (busy) machine")
    assert mod.compile.recompiles >= 1
    (fx608,) = [d for d in mod.diagnostics if d.code == "FX608"]
    assert fx608.span.line == _line(path, "def forward") and "size mismatch" in fx608.message
    assert fx608.severity == "information"
    assert _check(BREAKS)["Clean"].compile.recompiles in (0, None)  # type: ignore[union-attr]


def _sleeper(tmp_path: Path, name: str, seconds: float) -> CaptureJob:
    path = tmp_path / f"{name}.py"
    path.write_text(
        f"import time\nfrom torch import nn\ntime.sleep({seconds})\n\n\n"
        "# fxls: x = (B=2, 4)\nclass Net(nn.Module):\n    def __init__(self):\n"
        "        super().__init__()\n        self.fc = nn.Linear(4, 4)\n\n"
        "    def forward(self, x):\n        return self.fc(x)\n"
    )
    return _job(path)


@pytest.mark.worker
@pytest.mark.asyncio(loop_scope="module")
async def test_queued_captures_start_before_queued_compile_checks(worker, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Two jobs fill the worker's slots; a compile check and then a capture wait. When the
    first slot frees, the capture starts first, so it ends first."""
    import asyncio

    order: list[str] = []

    async def run(label: str, job: CaptureJob, kind: str | None = None) -> None:
        result = await worker.run(job, compile=CompileJob() if kind == "compile" else None)
        assert result.kind == "ok", (label, result.message)
        order.append(label)

    blockers = [
        asyncio.ensure_future(run("short", _sleeper(tmp_path, "short", 1.0))),
        asyncio.ensure_future(run("long", _sleeper(tmp_path, "long", 4.0))),
    ]
    await asyncio.sleep(0.3)  # both blockers are running
    waiting = [
        asyncio.ensure_future(run("compile", _sleeper(tmp_path, "check", 1.0), "compile")),
        asyncio.ensure_future(run("capture", _sleeper(tmp_path, "quick", 0.0))),
    ]
    await asyncio.gather(*blockers, *waiting)
    assert order.index("capture") < order.index("compile"), order


def test_a_graph_break_log_record_names_the_innermost_frame_and_the_reason() -> None:
    record = (
        "Graph break in user code at /w/m.py:22\n"
        "Graph Break Reason: Encountered graph break when attempting to trace CALL: a call:\n\n"
        "logging.Logger method not supported for non-export cases\n"
        "  Explanation: logging.Logger methods are not supported.\n\n"
        "User code traceback:\n"
        '  File "/w/m.py", line 20, in forward\n    x = helper(x)\n'
        '  File "/w/m.py", line 22, in helper\n    logger.info("x")\n'
    )
    found = parse_break_record(record)
    assert found is not None
    assert [(f.line, f.function) for f in found.frames] == [(20, "forward"), (22, "helper")]
    assert found.reason.startswith("logging.Logger method not supported")
    assert kinds.code_of(found.reason) == "FX601"
    assert parse_break_record("something else entirely") is None


def test_an_exception_the_code_raises_is_no_graph_break(tmp_path: Path) -> None:
    """``forward`` raising (a keyword argument it reads is not passed) makes TorchDynamo log
    "no exception handler": the check failed with the code's error, no FX6xx break is shown."""
    path = tmp_path / "raises.py"
    path.write_text(
        "import torch\nfrom torch import nn\n\n\n"
        "class Needs(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.norm = nn.LayerNorm(8)\n\n"
        "    def forward(self, x, **kwargs):\n"
        "        x = self.norm(x)\n"
        "        return x + kwargs['context']\n"
    )
    mod = _check(path)["Needs"]
    assert mod.compile is not None and mod.compile.status == "failed", mod.compile
    assert "KeyError" in mod.compile.message, mod.compile
    assert _codes(mod) == []
