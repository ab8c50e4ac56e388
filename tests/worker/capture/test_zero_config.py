"""Zero config: popular model files opened with no directives, through the real sandboxed worker.

tests/corpus/zeroconfig/ holds model files written in the style of popular ones, without any
``# fxls:`` directive, and ``truth.py``, which says how a person builds and calls each module
class (never given to fxls). These tests:

- check the corpus itself: no directives, only the allowed imports, the truth lists exactly the
  module classes fxls's AST pass finds, and every class runs eagerly as the truth says;
- check the checker: a shape that eager execution contradicts is reported as wrong;
- analyse every file as the server does (``engine.analyze``, default options, the real worker)
  and compare everything fxls shows with eager execution on the inputs fxls reports: **no
  shape fxls shows may be wrong**, whatever fxls assumed;
- hold a ratchet on how much fxls shows and how many false errors it reports.

``bench/zero_config.py`` reports the same numbers per file, with LSP timings.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import pytest_asyncio

from fxls.analysis.classes import parse
from fxls.engine.analyze import AnalysisRequest, EngineOptions, FileAnalysis, analyze
from fxls.protocol.model import InputValue, Limits, ModuleResult, NodeInfo, Span, Strategy, Value

ROOT = Path(__file__).resolve().parents[3]
ZEROCONFIG = ROOT / "tests" / "corpus" / "zeroconfig"

# The ratchet. Measured on the corpus as it is; the goal of issue #9 is that at least 90 % of
# the module classes show shapes (51 of 56) and that no error diagnostic appears on these files
# (all of them run). Whoever improves the numbers raises CLASSES_WITH_SHAPES / CORRECT_OUTPUTS
# and lowers ERRORS here, in the same change, so that they never slide back.
CLASSES_WITH_SHAPES = 55
"""Classes where some node shows a tensor shape (all but DETR's Transformer, whose inputs nothing
in the file describes; its encoder and decoder stacks are captured as it builds them)."""
CORRECT_OUTPUTS = 51
"""Classes whose output shapes are shown and equal eager execution of the same build (the
minGPT classes are built from a configuration fxls fills in, which the checker cannot rebuild)."""
ERRORS = 0
"""Error-severity diagnostics over all files: none (every file runs)."""

ALLOWED_IMPORTS = {
    "torch",
    "einops",
    "math",
    "dataclasses",
    "typing",
    "functools",
    "collections",
    "copy",
    "inspect",
    "argparse",
}

KNOWN_WRONG: dict[str, str] = {}
"""Class id -> why fxls shows a wrong shape there (a bug to fix: the test is strict xfail)."""


def _load_truth() -> ModuleType:
    name = "zeroconfig_truth"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ZEROCONFIG / "truth.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


truth = _load_truth()
TRUTH = truth.entries()
FILES = truth.files()


def _params(entries: list[Any]) -> list[Any]:
    out = []
    for t in entries:
        reason = KNOWN_WRONG.get(t.id)
        marks = [pytest.mark.xfail(reason=reason, strict=True)] if reason else []
        out.append(pytest.param(t, id=t.id, marks=marks))
    return out


# ---------------------------------------------------------------------------------------
# The corpus and its truth
# ---------------------------------------------------------------------------------------


def test_at_least_fifteen_files() -> None:
    assert len(FILES) >= 15


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_file_has_no_directives_and_plain_imports(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    result = parse(text)
    assert result.syntax_error is None
    assert all(c.directives.init is None and not c.inputs for c in result.classes)
    assert "# fxls" not in text
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        else:
            continue
        assert {n.split(".")[0] for n in names} <= ALLOWED_IMPORTS, (path.name, names)


def test_truth_lists_exactly_the_classes_fxls_finds() -> None:
    listed = [(t.file, t.cls) for t in TRUTH]
    assert len(listed) == len(set(listed))
    found = [(path.name, c.name) for path in FILES for c in parse(path.read_text("utf-8")).classes]
    assert sorted(found) == sorted(listed)


@pytest.mark.parametrize("t", [pytest.param(t, id=t.id) for t in TRUTH])
def test_every_class_runs_eagerly_as_the_truth_says(t: Any) -> None:
    run = truth.run(t)
    assert run.error is None
    assert run.outputs and any(o is not None for o in run.outputs)


# ---------------------------------------------------------------------------------------
# The checker finds wrong shapes
# ---------------------------------------------------------------------------------------


def _tensor(*dims: int | str, dtype: str = "float32") -> Value:
    return Value(kind="tensor", shape=list(dims), dtype=dtype)


def _mnist_result(output: Value, fc1: Value, relu: Value) -> ModuleResult:
    lines = (ZEROCONFIG / "mnist.py").read_text().split("\n")

    def line_of(text: str) -> Span:
        number = next(i for i, s in enumerate(lines, 1) if text in s)
        return Span(number, 0, number, len(lines[number - 1]))

    return ModuleResult(
        name="Net",
        line=line_of("class Net").line,
        status="traced",
        strategy=Strategy("fx"),
        inputs=[InputValue("x", _tensor("B", 1, 28, 28))],
        outputs=[output],
        nodes=[
            NodeInfo("x", "placeholder", "x", outputs=[_tensor("B", 1, 28, 28)]),
            NodeInfo("conv1", "call_module", "conv1", outputs=[_tensor("B", 32, 26, 26)]),
            NodeInfo(
                "relu",
                "call_function",
                "torch.nn.functional.relu",
                span=line_of("x = F.relu(x)"),
                outputs=[relu],
            ),
            NodeInfo("fc1", "call_module", "fc1", outputs=[fc1]),
            NodeInfo("fc2_weight", "get_attr", "fc2.weight", outputs=[_tensor(10, 128)]),
            NodeInfo("output", "output", "output", outputs=[output]),
        ],
    )


def test_checker_accepts_true_shapes_and_reports_wrong_ones() -> None:
    t = truth.find("mnist.py", "Net")
    good = truth.compare(
        t, _mnist_result(_tensor("B", 10), _tensor("B", 128), _tensor("B", 32, 26, 26))
    )
    assert good.correct and good.inputs_match_truth and good.wrong == []
    assert good.checked == 4 and good.sizes == {"B": 8}

    bad_output = truth.compare(
        t, _mnist_result(_tensor("B", 11), _tensor("B", 128), _tensor("B", 32, 26, 26))
    )
    assert not bad_output.correct and bad_output.wrong[0].startswith("outputs:")

    bad_module = truth.compare(
        t, _mnist_result(_tensor("B", 10), _tensor("B", 127), _tensor("B", 32, 26, 26))
    )
    assert len(bad_module.wrong) == 1 and "`fc1`" in bad_module.wrong[0]

    bad_line = truth.compare(
        t,
        _mnist_result(_tensor("B", 10), _tensor("B", 128), _tensor("B", 32, 26, 26, dtype="int64")),
    )
    assert len(bad_line.wrong) == 1 and "`relu`" in bad_line.wrong[0]

    # fxls's own (assumed) input sizes are checked by running eagerly on them: a 32x32 image
    # runs up to fc1, where the real model raises
    assumed = _mnist_result(_tensor("B", 10), _tensor("B", 128), _tensor("B", 32, 30, 30))
    assumed.inputs = [InputValue("x", _tensor("B", 1, 32, 32), assumed=True, origin="assumed")]
    assumed.nodes[1].outputs = [_tensor("B", 32, 30, 30)]
    assumed.outputs = []
    verdict = truth.compare(t, assumed)
    assert not verdict.inputs_match_truth and "mat1 and mat2" in (verdict.eager_error or "")
    assert verdict.wrong == [] and verdict.outputs_correct is None
    assert verdict.checked == 3 and verdict.unchecked == 1  # fc1 never ran
    assumed.nodes[1].outputs = [_tensor("B", 32, 26, 26)]  # what a 28x28 input would give
    assert len(truth.compare(t, assumed).wrong) == 1
    assumed.outputs = [_tensor("B", 10)]  # an output for inputs the model rejects
    assert any("raises on these inputs" in w for w in truth.compare(t, assumed).wrong)


# ---------------------------------------------------------------------------------------
# Through the real worker, as the server analyses an opened file
# ---------------------------------------------------------------------------------------


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def analyses(worker) -> dict[str, FileAnalysis]:  # type: ignore[no-untyped-def]
    """Every file analysed once, as it is, with the server's default options but for the time
    limits: what fxls shows is asserted here, not how fast (bench/ measures that); on a loaded
    machine the largest files come close to the default 10 s and would fail as FX501."""
    out = {}
    for path in FILES:
        out[path.name] = await analyze(
            worker,
            AnalysisRequest(str(path), path.read_text(encoding="utf-8"), root=str(ROOT)),
            options=EngineOptions(limits=Limits(timeout_s=60.0, cpu_s=60.0)),
        )
    return out


_VERDICTS: dict[str, Any] = {}


def _verdict(analyses: dict[str, FileAnalysis], t: Any) -> Any:
    if t.id not in _VERDICTS:
        mod = analyses[t.file].module(t.cls)
        _VERDICTS[t.id] = None if mod is None else truth.compare(t, mod)
    return _VERDICTS[t.id]


@pytest.mark.slow
@pytest.mark.asyncio(loop_scope="module")
async def test_every_class_is_reported(analyses) -> None:  # type: ignore[no-untyped-def]
    for path in FILES:
        analysis = analyses[path.name]
        assert analysis.syntax_error is None
        assert not [d for d in analysis.diagnostics if d.code == "FX404"], path.name  # file runs
        names = sorted(m.name for m in analysis.modules)
        assert names == sorted(t.cls for t in TRUTH if t.file == path.name), path.name


@pytest.mark.slow
@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("t", _params(TRUTH))
async def test_no_shape_shown_is_wrong(analyses, t) -> None:  # type: ignore[no-untyped-def]
    """Every tensor shape fxls shows for the class (outputs, nodes, parameters) agrees with an
    eager run of the real model on the inputs fxls says it used."""
    verdict = _verdict(analyses, t)
    assert verdict is not None
    assert verdict.wrong == [], "\n".join(verdict.wrong)


@pytest.mark.slow
@pytest.mark.asyncio(loop_scope="module")
async def test_ratchet(analyses) -> None:  # type: ignore[no-untyped-def]
    verdicts = [_verdict(analyses, t) for t in TRUTH]
    with_shapes = sum(bool(v and v.has_shapes) for v in verdicts)
    correct = sum(bool(v and v.correct) for v in verdicts)
    errors = [
        (name, d.code, d.span.line)
        for name, analysis in analyses.items()
        for d in analysis.diagnostics
        if d.severity == "error"
    ]
    assert with_shapes >= CLASSES_WITH_SHAPES, f"{with_shapes} classes with shapes"
    assert correct >= CORRECT_OUTPUTS, f"{correct} classes with correct output shapes"
    assert len(errors) <= ERRORS, errors
    if with_shapes > CLASSES_WITH_SHAPES or len(errors) < ERRORS or correct > CORRECT_OUTPUTS:
        print(
            f"zero-config ratchet can move: {with_shapes} classes with shapes, {correct} correct,"
            f" {len(errors)} errors (raise the constants in {Path(__file__).name})"
        )
