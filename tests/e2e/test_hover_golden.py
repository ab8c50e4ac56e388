"""Golden hover text: every call hover of the bundled examples and a few corpus files, in both
styles (``table`` for VS Code, ``block`` for Neovim), captured by the real worker.

One golden file per case under ``tests/fixtures/hover_golden/``. Regenerate them with
``FXLS_UPDATE_GOLDEN=1 pytest tests/e2e/test_hover_golden.py`` and read the diff by eye before
committing: the files are the review of what a user sees.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
from pathlib import Path

import pytest

from fxls.engine.analyze import AnalysisRequest, analyze
from fxls.lsp.features import hover
from fxls.protocol.model import ModuleResult, Span

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "fixtures" / "hover_golden"
UPDATE = os.environ.get("FXLS_UPDATE_GOLDEN") == "1"
CASES = {
    "example_gpt": ROOT / "docs" / "examples" / "gpt.py",
    "example_cnn": ROOT / "docs" / "examples" / "cnn.py",
    "example_resnet": ROOT / "docs" / "examples" / "resnet.py",
    "corpus_llama": ROOT / "tests" / "corpus" / "llama.py",
    "corpus_transformer_torch": ROOT / "tests" / "corpus" / "transformer_torch.py",
    "corpus_squeezenet": ROOT / "tests" / "corpus" / "squeezenet.py",
    "corpus_lstm_lm": ROOT / "tests" / "corpus" / "lstm_lm.py",
}
MAX_LINES = 14
"""Most lines of a call hover: output, callee, up to 12 rows (the last one "… N more")."""

pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch"),
    pytest.mark.slow,
]


def _capture(path: Path) -> list[ModuleResult]:
    from fxls.engine.workerclient import WorkerClient

    async def run() -> list[ModuleResult]:
        client = WorkerClient()
        await client.start()
        try:
            analysis = await analyze(client, AnalysisRequest(str(path), path.read_text()))
        finally:
            await client.close()
        return analysis.modules

    return asyncio.run(run())


def _spans(module: ModuleResult) -> list[Span]:
    seen: dict[tuple[int, int, int, int], Span] = {}
    for node in module.nodes:
        for span in (node.span, node.call_site):
            if span is not None:
                seen[(span.line, span.col, span.end_line, span.end_col)] = span
    return [seen[key] for key in sorted(seen)]


def hover_document(path: Path, modules: list[ModuleResult]) -> str:
    """Every distinct call hover of the file (hovered on the span's last character) and every
    class hover, in both styles."""
    lines = path.read_text().split("\n")
    for module in modules:
        module.timings = {}  # capture times vary from run to run
    out: list[str] = []
    done: set[tuple[int, int, int, int]] = set()
    for module in modules:
        name = hover.class_name_span(module, lines)
        if name is not None:
            for style in ("table", "block"):
                text = hover.hover_text(modules, lines, name.line, name.col, style=style)
                out += [f"## class {module.name} ({style})", text.markdown if text else "-", ""]
        for span in _spans(module):
            for line, col in _positions(lines, span):
                out += _call_hover(modules, lines, line, col, module.name, done)
    return "\n".join(out) + "\n"


def _positions(lines: list[str], span: Span) -> list[tuple[int, int]]:
    """Where to hover a span: the last character of the callee's name, and the span's last
    character (spans are inclusive of their end, so one before)."""
    positions = []
    text = hover.span_text(lines, span) or ""
    paren = text.find("(")
    if paren > 0 and "\n" not in text[:paren]:
        positions.append((span.line, span.col + paren - 1))
    positions.append((span.end_line, max(span.end_col - 2, span.col)))
    return positions


def _call_hover(
    modules: list[ModuleResult],
    lines: list[str],
    line: int,
    col: int,
    name: str,
    done: set[tuple[int, int, int, int]],
) -> list[str]:
    out: list[str] = []
    result = hover.hover_text(modules, lines, line, col)
    if result is not None:
        key = (result.span.line, result.span.col, result.span.end_line, result.span.end_col)
        if key in done:
            return []
        done.add(key)
        source = hover.span_text(lines, result.span) or "?"
        out.append(f"## {name} L{key[0]}:{key[1]} {' '.join(source.split())[:80]}")
        out += ["### table", result.markdown]
        block = hover.hover_text(modules, lines, line, col, style="block")
        out += ["### block", block.markdown if block else "-", ""]
    return out


@pytest.mark.parametrize("case", sorted(CASES))
def test_hover_text_matches_golden(case: str) -> None:
    path = CASES[case]
    modules = _capture(path)
    text = hover_document(path, modules)
    golden = GOLDEN / f"{case}.md"
    if UPDATE or not golden.exists():
        golden.write_text(text)
        if not UPDATE:
            pytest.fail(f"wrote {golden}; review it and run again")
    assert text == golden.read_text()
    for section in text.split("\n## ")[1:]:
        if section.startswith("class "):
            continue
        block = section.split("### block\n", 1)[1].strip()
        assert block.count("\n") + 1 <= MAX_LINES + 2, section  # + the two fence lines
        assert block.split("\n")[1].startswith("→"), section  # the output first


PATCHES = """import torch
from torch import nn


class Patches(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Conv2d(3, 8, 4, stride=4)

    def forward(self, x):
        return self.proj(x).flatten(2).transpose(1, 2)


class Embed(nn.Module):
    def __init__(self):
        super().__init__()
        self.patches = Patches()
        self.drop = nn.Dropout(0.0)

    def forward(self, x):
        return self.drop(self.patches(x))


# fxls: x = (B, 3, 32, 32)
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = Embed()

    def forward(self, x):
        return self.embed(x)
"""


def test_a_layer_row_shows_what_the_child_returns(tmp_path: Path) -> None:
    """In the hover of ``self.embed(x)``, the ``patches`` row shows what ``Patches`` returns
    (``[B, 64, 8]``, after its flatten and transpose), not its one layer's output
    (``[B, 8, 8, 8]``, the convolution's)."""
    path = tmp_path / "patches.py"
    path.write_text(PATCHES)
    modules = _capture(path)
    lines = PATCHES.split("\n")
    line = next(i for i, text in enumerate(lines, 1) if "return self.embed(x)" in text)
    col = lines[line - 1].index("embed") + 2
    result = hover.hover_text([m for m in modules if m.name == "Net"], lines, line, col)
    assert result is not None
    row = next(r for r in result.markdown.split("\n") if "patches" in r)
    assert "[B, 64, 8]" in row and "[B, 8, 8, 8]" not in row, result.markdown
