"""The model corpus (tests/corpus): eager runs, plain torch.fx, and fxls's capture against both.

For every entry of tests/corpus/manifest.py:
- the manifest and the file's ``# fxls:`` directives agree, and every marker has an entry,
- the class runs eagerly on small random inputs (the corpus itself is sound),
- plain ``torch.fx`` tracing (buffers as graph values) traces, or raises the recorded exception
  at the line marked ``# fxls-expect: FXnnn`` (this pins what stock torch.fx does),
- ``run_capture`` gives the eager output shapes and dtypes (symbols evaluated at the example
  sizes), reports each marked diagnostic on its marked line, and reports no errors for what
  plain FX traces,
- (slow) the real sandboxed worker, fed the requests built from the directives, agrees.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from fxls.analysis.classes import parse
from fxls.protocol.codec import from_dict, to_dict
from fxls.protocol.labels import strategy_label
from fxls.protocol.model import CaptureJob, CaptureResult, Limits, ModuleResult
from fxls.worker.capture.pipeline import run_capture

CORPUS = Path(__file__).resolve().parents[2] / "corpus"


def _load_manifest() -> ModuleType:
    name = "fxls_corpus_manifest"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, CORPUS / "manifest.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


manifest = _load_manifest()
ENTRIES = manifest.entries()
PRIMARY = manifest.primary_entries()


def _params(entries: list, *, capture: bool = False, xfail: str = "") -> list:  # type: ignore[type-arg]
    """pytest params: capture tests of slow entries are marked slow; ``xfail`` names the
    entry field (``capture_xfail``, ``errors_xfail``) whose reason marks a known gap."""
    out = []
    for entry in entries:
        marks: list[pytest.MarkDecorator] = []
        if capture and entry.slow:
            marks.append(pytest.mark.slow)
        reason = getattr(entry, xfail) if xfail else None
        if reason:
            marks.append(pytest.mark.xfail(reason=reason, strict=False))
        out.append(pytest.param(entry, id=entry.id, marks=marks))
    return out


# ---------------------------------------------------------------------------------------
# The corpus and its manifest agree
# ---------------------------------------------------------------------------------------


def test_manifest_lists_every_module_class_once() -> None:
    listed = [(e.file, e.cls) for e in PRIMARY]
    assert len(listed) == len(set(listed))
    found: list[tuple[str, str]] = []
    for path in manifest.corpus_files():
        result = parse(path.read_text(encoding="utf-8"))
        assert result.syntax_error is None, path.name
        assert result.diagnostics == [], (path.name, result.diagnostics)
        found.extend((path.name, c.name) for c in result.classes)
    assert sorted(found) == sorted(listed)


def test_every_marker_belongs_to_an_entry() -> None:
    claimed: set[tuple[str, int]] = set()
    for entry in ENTRIES:
        for code in {*entry.diagnostics, *([entry.fx_at] if entry.fx_at else [])}:
            claimed.add((entry.file, entry.marker_line(code)))
    marked = {
        (file, line)
        for file, codes in manifest.all_markers().items()
        for lines in codes.values()
        for line in lines
    }
    assert marked == claimed


def test_symbol_sizes_are_distinct_and_not_one() -> None:
    """Equal example sizes would merge two names into one symbol, and 1 gets specialized."""
    for entry in ENTRIES:
        sizes = entry.sizes()
        assert all(size >= 2 for size in sizes.values()), (entry.id, sizes)
        assert len(set(sizes.values())) == len(sizes), (entry.id, sizes)


@pytest.mark.parametrize("entry", _params(PRIMARY))
def test_directives_match_manifest(entry) -> None:  # type: ignore[no-untyped-def]
    """The file's ``# fxls:`` lines say what the manifest says (sizes may be left out)."""
    info = parse(entry.source()).find(entry.cls)
    assert info is not None
    assert info.directives.init == entry.init
    declared = {spec.name: spec for spec in info.inputs}
    assert sorted(declared) == sorted(i.name for i in entry.inputs)
    for inp in entry.inputs:
        spec = declared[inp.name]
        assert spec.kind == "shape"
        assert (spec.dtype or "float32") == inp.dtype
        assert [d.name for d in spec.dims] == [name for name, _ in inp.shape()]
        for dim, (_, size) in zip(spec.dims, inp.shape(), strict=True):
            assert dim.size in (None, size)


# ---------------------------------------------------------------------------------------
# Eager execution and plain torch.fx
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("entry", _params(ENTRIES))
def test_eager_run_and_plain_fx_outcome(entry) -> None:  # type: ignore[no-untyped-def]
    outputs = manifest.eager_outputs(entry)
    assert outputs and any(o is not None for o in outputs)

    outcome = manifest.plain_fx(entry)
    assert outcome.error == entry.fx_error, outcome.message
    if entry.fx_error is None:
        return
    expected = entry.marker_line(entry.fx_at)
    # a failure entirely inside torch has no frame of the file: it belongs to the class line
    assert (outcome.line or entry.class_range()[0]) == expected, outcome.frames


# ---------------------------------------------------------------------------------------
# fxls capture
# ---------------------------------------------------------------------------------------

_CAPTURES: dict[str, ModuleResult] = {}


def _capture(entry) -> ModuleResult:  # type: ignore[no-untyped-def]
    if entry.id not in _CAPTURES:
        result = run_capture(manifest.capture_job(entry), lambda *a: None)
        assert result.error is None, result.error
        assert from_dict(CaptureResult, to_dict(result)) == result
        (mod,) = result.modules
        _CAPTURES[entry.id] = mod
    return _CAPTURES[entry.id]


def test_captured_dimensions_are_evaluated_at_the_example_sizes() -> None:
    sizes = {"B": 2, "S": 12, "N": 17, "Q": 7, "H": 6, "W": 5, "T": 16}
    assert manifest.concrete_dim(48, sizes) == 48
    assert manifest.concrete_dim("S", sizes) == 12  # sympy's S, N, Q are names here
    assert manifest.concrete_dim("N", sizes) == 17
    assert manifest.concrete_dim("Q", sizes) == 7
    assert manifest.concrete_dim("H*W", sizes) == 30
    assert manifest.concrete_dim("B*T - 1", sizes) == 31
    assert manifest.concrete_dim("(T//2)", sizes) == 8
    with pytest.raises(ValueError):
        manifest.concrete_dim("C", sizes)


@pytest.mark.parametrize("entry", _params(ENTRIES, capture=True, xfail="capture_xfail"))
def test_capture_output_shapes_match_eager(entry) -> None:  # type: ignore[no-untyped-def]
    mod = _capture(entry)
    assert mod.status in ("traced", "partial"), (mod.status, mod.error, mod.diagnostics)
    captured = manifest.captured_outputs(mod.outputs, entry.sizes())
    assert captured == manifest.eager_outputs(entry), [d.message for d in mod.diagnostics]


DIAGNOSED = [e for e in ENTRIES if e.diagnostics]


@pytest.mark.parametrize("entry", _params(DIAGNOSED, capture=True))
def test_capture_reports_marked_diagnostics(entry) -> None:  # type: ignore[no-untyped-def]
    mod = _capture(entry)
    found = sorted((d.span.line, d.code) for d in mod.diagnostics)
    for code in entry.diagnostics:
        assert (entry.marker_line(code), code) in found, found


TRACEABLE = [e for e in ENTRIES if e.fx_error is None]


@pytest.mark.parametrize("entry", _params(TRACEABLE, capture=True, xfail="errors_xfail"))
def test_capture_of_traceable_classes_has_no_errors(entry) -> None:  # type: ignore[no-untyped-def]
    """What plain FX traces, fxls traces with FX too (not a fallback), without errors."""
    mod = _capture(entry)
    errors = [(d.code, d.message) for d in mod.diagnostics if d.severity == "error"]
    assert errors == []
    assert strategy_label(mod.strategy) in ("fx", "fx+concrete", "fx+wrap"), (
        strategy_label(mod.strategy),
        mod.notes,
    )


# ---------------------------------------------------------------------------------------
# The real sandboxed worker, driven by the files' own directives
# ---------------------------------------------------------------------------------------

FILES = sorted({e.file for e in ENTRIES})


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("file", FILES)
async def test_sandboxed_capture_from_directives(worker, file: str) -> None:  # type: ignore[no-untyped-def]
    """One job per file, with the requests the server's AST pass builds from the directives
    (sizes left out in a directive are chosen by fxls), through the sandboxed zygote."""
    path = CORPUS / file
    text = path.read_text(encoding="utf-8")
    job = CaptureJob(
        path=str(path),
        source=text,
        classes=[c.request() for c in parse(text).classes],
        sys_path=[str(CORPUS)],
    )
    result = await worker.run(job, Limits(timeout_s=300, cpu_s=300))
    assert result.kind == "ok", (result.kind, result.message, result.output_head[-2000:])
    assert result.payload is not None and result.payload.error is None
    modules = {m.name: m for m in result.payload.modules}
    for entry in (e for e in PRIMARY if e.file == file):
        mod = modules[entry.cls]
        found = [(d.span.line, d.code) for d in mod.diagnostics]
        for code in entry.diagnostics:
            assert (entry.marker_line(code), code) in found, (entry.id, found)
        if entry.capture_xfail:
            continue
        captured = manifest.captured_outputs(mod.outputs, entry.sizes())
        assert captured == manifest.eager_outputs(entry), (entry.id, mod.status, mod.notes)
