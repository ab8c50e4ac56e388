"""The hover on a user pass: pure, on hand-made results (hostile names included)."""

from __future__ import annotations

from fxls.lsp.features import pass_hover
from fxls.protocol.catalogue import FX353
from fxls.protocol.model import ModuleResult, PassChange, PassResult, Span

LINES = [
    "import torch",
    "",
    "# fxls: pass Net",
    "def fuse(gm):",
    "    return gm",
]


def _module(**kwargs: object) -> ModuleResult:
    run = PassResult(
        function="fuse", line=4, status="ok", before=5, after=6, added=2, removed=0, replaced=1,
        changes=[
            PassChange("added", "relu_1", "call_function", "torch.nn.functional.relu",
                       span=Span(4, 4, 4, 10)),
            PassChange("added", "x![img](https://e.x/?q)", "call_function", "<b>|evil|</b>"),
            PassChange("replaced", "relu", "call_function", "torch.relu", by="relu_1",
                       span=Span(9, 8, 9, 20)),
        ],
        duration_s=0.004,
    )  # fmt: skip
    mod = ModuleResult(name="Net", line=10, status="traced", passes=[run])
    for key, value in kwargs.items():
        setattr(mod, key, value)
    return mod


def test_hover_on_the_pass_name_shows_before_after_counts_and_changes() -> None:
    mod = _module()
    text = pass_hover.hover_text([mod], LINES, 4, 5)
    assert text is not None
    assert text.span == Span(4, 4, 4, 8)
    md = text.markdown
    assert "fuse · fxls pass" in md
    assert "on Net · ok · 5 → 6 nodes: 2 added · 0 removed · 1 replaced · 4 ms" in md
    assert "| added | relu_1 | `torch.nn.functional.relu` | 4 |" in md
    assert "| replaced | `relu → relu_1` | `torch.relu` | 9 |" in md
    # hostile strings only ever appear inside code spans, pipes escaped
    assert "`x![img](https://e.x/?q)`" in md and "`<b>\\|evil\\|</b>`" in md
    assert pass_hover.hover_text([mod], LINES, 4, 0) is None  # on `def`, not the name
    assert pass_hover.hover_text([mod], LINES, 5, 5) is None


def test_pass_diagnostics_are_listed_and_other_passes_are_not() -> None:
    ours = FX353(Span(4, 4, 4, 9), fn="fuse", cls="Net", node="mul", arg="sigmoid").diagnostic(
        {"pass": "fuse", "class": "Net"}
    )
    theirs = FX353(Span(9, 4, 9, 9), fn="g", cls="Net", node="a", arg="b").diagnostic(
        {"pass": "g", "class": "Net"}
    )
    mod = _module(diagnostics=[ours, theirs])
    text = pass_hover.hover_text([mod], LINES, 4, 5)
    assert text is not None
    assert "FX353 line 4:" in text.markdown and "FX353 line 9" not in text.markdown
    block = pass_hover.hover_text([mod], LINES, 4, 5, style="block")
    assert block is not None and block.markdown.startswith("```text\nfuse · fxls pass")
    assert "  FX353 line 4: after pass `fuse`" in block.markdown


def test_many_changes_are_capped() -> None:
    mod = _module()
    run = mod.passes[0]
    run.changes = [PassChange("removed", f"n{i}", "call_function", "torch.add") for i in range(500)]
    run.removed = 500
    text = pass_hover.hover_text([mod], LINES, 4, 5)
    assert text is not None
    assert "500 removed" in text.markdown
    assert text.markdown.count("| removed |") == pass_hover.MAX_CHANGE_ROWS
    assert f"| … {500 - pass_hover.MAX_CHANGE_ROWS} more |" in text.markdown
