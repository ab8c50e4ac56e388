"""Code actions: how long listing takes on the server, and how long a resolve takes in the worker.

  list     - server-side time to list the actions at a position (fixes.candidates on the cached
             analysis, refactors at the cursor, the LSP objects), at every line of a 48-layer GPT
             (bench/models/gpt48.py) and of the corpus GPT; p50/p95/max; the first call per
             analysis (which indexes the AST) is reported apart;
  resolve  - one rewrite job in the warm worker (capture, edit, verify: re-capture and real
             tensors): the `assert` fix-it of tests/corpus/gpt.py, the FX302 fix of the fixture,
             fix-all of tests/corpus/zeroconfig/nanogpt.py (directives pinned), and the attention
             rewrite on a 12-layer GPT-2 (bench/models/gpt48.py with 12 layers and a directive on
             its attention class, so that the class is built and verified on its own).

Usage: .venv/bin/python bench/code_actions_bench.py [--runs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

from lsprotocol import types

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fxls.engine import analyze as engine  # noqa: E402
from fxls.engine import fixes  # noqa: E402
from fxls.engine.workerclient import WorkerClient  # noqa: E402
from fxls.lsp.features import code_actions  # noqa: E402
from fxls.lsp.features.convert import UTF16  # noqa: E402

GPT12_DIRECTIVES = (
    "# fxls: init(n_embd=768, n_head=12, block_size=1024)\n# fxls: x = (B=2, T=128, 768)\n"
)


def gpt12(folder: Path) -> Path:
    """bench/models/gpt48.py with 12 layers (GPT-2 small) and its attention class pinned."""
    text = (ROOT / "bench/models/gpt48.py").read_text()
    text = text.replace("n_layer: int = 48", "n_layer: int = 12")
    text = text.replace(
        "class CausalSelfAttention(", GPT12_DIRECTIVES + "class CausalSelfAttention(", 1
    )
    path = folder / "gpt12.py"
    path.write_text(text)
    return path


def _stats(samples: list[float]) -> str:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]
    return (
        f"p50 {statistics.median(ordered) * 1000:.2f} ms · p95 {p95 * 1000:.2f} ms · "
        f"max {ordered[-1] * 1000:.2f} ms (n={len(ordered)})"
    )


def list_at(analysis: engine.FileAnalysis, text: str, line: int) -> list[types.CodeAction]:
    lines = text.split("\n")
    offered = [code_actions.Offered(c, c.span) for c in fixes.candidates(analysis, text)]
    col = len(lines[line - 1]) // 2
    for cand in fixes.refactors_at(analysis, text, line, col):
        offered.append(code_actions.Offered(cand, cand.span))
    rng = types.Range(types.Position(line - 1, col), types.Position(line - 1, col))
    return code_actions.lsp_code_actions(
        offered, "file:///x.py", 1, lines, UTF16, rng,
        types.CodeActionContext(diagnostics=[]), mapper=lambda n: n, fix_all=True,
    )  # fmt: skip


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    worker = WorkerClient()
    await worker.start()
    try:
        for path in (ROOT / "bench/models/gpt48.py", ROOT / "tests/corpus/gpt.py"):
            text = path.read_text()
            options = engine.EngineOptions()
            options.limits.timeout_s = 60
            analysis = await engine.analyze(
                worker, engine.AnalysisRequest(str(path), text), options=options
            )
            nodes = sum(len(m.nodes) for m in analysis.modules)
            fixes._index.cache_clear()
            started = time.perf_counter()
            list_at(analysis, text, 1)
            first = time.perf_counter() - started
            samples = []
            for _ in range(args.runs):
                for line in range(1, text.count("\n") + 1):
                    started = time.perf_counter()
                    list_at(analysis, text, line)
                    samples.append(time.perf_counter() - started)
            print(
                f"list {path.name} ({nodes} nodes): first {first * 1000:.1f} ms; {_stats(samples)}"
            )

        import tempfile

        scratch = Path(tempfile.mkdtemp(prefix="fxls-bench-"))
        cases = [
            (ROOT / "tests/corpus/gpt.py", "assert", False),
            (ROOT / "tests/fixtures/rewrites/dead_code_before.py", "dead-code", False),
            (ROOT / "tests/corpus/zeroconfig/nanogpt.py", None, True),
            (gpt12(scratch), "attention", False),
        ]
        for path, kind, combine in cases:
            text = path.read_text()
            analysis = await engine.analyze(worker, engine.AnalysisRequest(str(path), text))
            wanted = [
                c for c in fixes.candidates(analysis, text)
                if (kind is None and c.fix_all) or c.kind == kind
            ][: None if combine else 1]  # fmt: skip
            if kind == "attention":
                line = text.split("\n").index("        att = F.softmax(att, dim=-1)") + 1
                wanted = [
                    c for c in fixes.refactors_at(analysis, text, line, 12)
                    if c.kind == "attention"
                ]  # fmt: skip
            times = []
            for _ in range(args.runs):
                started = time.perf_counter()
                result = await fixes.compute(
                    worker, str(path), text, [c.request() for c in wanted], combine=combine
                )
                times.append(time.perf_counter() - started)
            outcome = result.combined if combine else result.outcomes[0]
            what = "fix all" if combine else kind
            state = outcome.applicability if outcome else "none"
            print(
                f"resolve {path.name} {what} ({len(wanted)} fixes, {state}): "
                f"median {statistics.median(times):.2f} s, min {min(times):.2f} s"
            )
    finally:
        await worker.close()


if __name__ == "__main__":
    asyncio.run(main())
