"""What the editor shows from one analysis, for the tests that compare analyses of every
example, corpus and bench file with a speed-up on and off (``test_reuse.py``,
``test_reuse_switches.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fxls.engine.analyze import FileAnalysis
from fxls.lsp.features import code_lens, hover, inlay_hints
from fxls.protocol.codec import to_dict
from fxls.protocol.model import Limits

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


def seen(analysis: FileAnalysis, text: str) -> dict[str, Any]:
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


WITH_ALL: dict[Path, dict[str, Any]] = {}
"""What the editor shows for each file with every speed-up on (the defaults), made once per
process."""
