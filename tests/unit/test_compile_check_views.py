"""The compile check's results in the views (no worker): the lens, the class hover, the text and
JSON reports, and how the engine merges a compile job's result. Strings from the worker are
hostile: escaped and capped on their way out."""

from __future__ import annotations

from fxls.cli.report.jsondoc import to_json
from fxls.cli.report.text import format_text
from fxls.engine.analyze import FileAnalysis
from fxls.engine.compilecheck import merge
from fxls.engine.render import compile_text
from fxls.lsp.features import markdown as md
from fxls.lsp.features.code_lens import lens_title
from fxls.lsp.features.hover import MAX_BREAK_ROWS, class_markdown
from fxls.protocol import catalogue
from fxls.protocol.model import (
    CaptureResult,
    CompileCheck,
    Diagnostic,
    GraphBreak,
    InputValue,
    JobResult,
    ModuleResult,
    Span,
    Strategy,
    Value,
)

HOSTILE = "`](http://x.invalid) <img src=x> \x1b[31m\u202e" + "x" * 5000


def _module(check: CompileCheck | None) -> ModuleResult:
    return ModuleResult(
        name="Net",
        line=3,
        status="traced",
        strategy=Strategy("fx"),
        build="meta",
        inputs=[InputValue("x", Value(kind="tensor", shape=["B", 8], dtype="torch.float32"))],
        compile=check,
    )


def _break(line: int, reason: str = "why") -> GraphBreak:
    return GraphBreak("FX601", reason, Span(line, 4, line, 20), "helper")


def test_compile_text() -> None:
    assert compile_text(None) is None
    assert compile_text(CompileCheck("ok", graphs=1)) == "compiles whole"
    two = CompileCheck("ok", graphs=3, breaks=[_break(5), _break(6)])
    assert compile_text(two) == "compiles to 3 graphs (2 breaks)"
    assert compile_text(CompileCheck("stopped", breaks=[_break(5)])) == (
        "compile check stopped after 1 break"
    )
    assert compile_text(CompileCheck("failed", message="timeout")) is None


def test_lens_and_hover_escape_and_cap_what_the_worker_sent() -> None:
    breaks = [_break(10 + i, HOSTILE) for i in range(MAX_BREAK_ROWS + 3)]
    module = _module(CompileCheck("ok", graphs=14, breaks=breaks))
    title = lens_title(module)
    assert title.endswith(f"compiles to 14 graphs ({MAX_BREAK_ROWS + 3} breaks)")
    shown = class_markdown(module)
    # in a code span that its own backtick cannot close: no link, no HTML; controls escaped
    assert "``line 11 in helper: FX601 `](http://x.invalid) <img" in shown
    assert "\x1b" not in shown and "\u202e" not in shown
    assert shown.count("graph break") == MAX_BREAK_ROWS + 1  # the last row: "… 3 more"
    assert "… 3 more" in shown
    assert len(shown) < md.MAX_MARKDOWN
    block = class_markdown(module, style="block")
    assert "\x1b" not in block


def test_reports_carry_the_compile_check() -> None:
    module = _module(CompileCheck("ok", graphs=2, breaks=[_break(5, HOSTILE)], tensors="cpu"))
    analysis = FileAnalysis(path="/p/m.py", version=None, modules=[module])
    doc = to_json(analysis)
    assert doc["modules"][0]["compile"] == {
        "status": "ok",
        "graphs": 2,
        "breaks": 1,
        "recompiles": None,
        "tensors": "cpu",
        "message": None,
    }
    assert "torch.compile: compiles to 2 graphs (1 break)" in format_text(analysis)
    assert to_json(FileAnalysis("/p/m.py", None, [_module(None)]))["modules"][0]["compile"] is None


def _fx601(line: int) -> Diagnostic:
    return catalogue.FX601(Span(line, 4, line, 20), reason="r").diagnostic()


def test_merge_puts_breaks_on_the_modules_and_the_file() -> None:
    analysis = FileAnalysis(path="/p/m.py", version=1, modules=[_module(None)])
    analysis.diagnostics = [
        catalogue.FX405(Span(4, 0, 4, 1), arg="x", shape="(B, 8)", reason="l").diagnostic()
    ]
    sent = ModuleResult(
        name="Net",
        line=3,
        status="traced",
        compile=CompileCheck("ok", graphs=2, breaks=[_break(5)]),
        diagnostics=[_fx601(5)],
    )
    merge(analysis, JobResult(id=1, kind="ok", payload=CaptureResult(modules=[sent])))
    assert analysis.modules[0].compile is not None and analysis.modules[0].compile.graphs == 2
    assert [d.code for d in analysis.diagnostics] == ["FX405", "FX601"]
    assert [d.code for d in analysis.modules[0].diagnostics] == ["FX601"]
    merge(analysis, JobResult(id=2, kind="ok", payload=CaptureResult(modules=[sent])))
    assert [d.code for d in analysis.diagnostics] == ["FX405", "FX601"]  # not twice


def test_a_failed_job_leaves_a_failed_check_that_says_it_did_not_finish() -> None:
    analysis = FileAnalysis(path="/p/m.py", version=1, modules=[_module(None)])
    merge(analysis, JobResult(id=1, kind="worker_died", message="the worker is gone"))
    check = analysis.modules[0].compile
    assert check is not None and check.status == "failed" and "worker is gone" in check.message
    (info,) = analysis.diagnostics
    assert (info.code, info.severity, info.span.line) == ("FX609", "information", 3)
    assert "`Net` did not finish (the worker is gone)" in info.message
    assert analysis.modules[0].diagnostics == [info]
    merge(analysis, JobResult(id=2, kind="cancelled"))  # a newer version comes: nothing changes
    assert analysis.modules[0].compile is check and analysis.diagnostics == [info]
    sent = ModuleResult(name="Net", line=3, status="traced", compile=CompileCheck("ok", graphs=1))
    merge(analysis, JobResult(id=3, kind="ok", payload=CaptureResult(modules=[sent])))
    assert analysis.diagnostics == [] and analysis.modules[0].diagnostics == []


def test_a_job_at_its_limit_says_which_limit_stopped_the_check() -> None:
    for kind, limit in [("timeout", "time limit"), ("cpu_limit", "time limit"),
                        ("oom", "memory limit")]:  # fmt: skip
        analysis = FileAnalysis(path="/p/m.py", version=1, modules=[_module(None)])
        merge(analysis, JobResult(id=1, kind=kind, message="took too long"))  # type: ignore[arg-type]
        check = analysis.modules[0].compile
        assert check is not None and (check.status, check.message) == ("limit", limit)
        assert compile_text(check) == f"compile check stopped: {limit}"
        assert [d.code for d in analysis.diagnostics] == ["FX609"]
        assert f"(it hit its {limit})" in analysis.diagnostics[0].message
