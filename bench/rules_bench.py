"""User rules: what matching costs a capture, and how long applying one rule takes.

  capture  - engine.analyze() of a 48-layer GPT (bench/models/gpt48.py) through the warm worker,
             without a rules file (the anchor, same run) and with tests/fixtures/rules'
             fxls_rules.py plus a rule that matches the attention's softmax: the difference
             is executing the rules file, tracing its patterns and matching them on every
             traced class;
  resolve  - one `rule` fix (rewrite job: capture, replace the match in a copy of the graph,
             write `forward` back, verify on real tensors): the GELU rule on the MLP fixture,
             and the softmax rule on the attention class of a 12-layer GPT-2.

Usage: .venv/bin/python bench/rules_bench.py [--runs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from code_actions_bench import gpt12  # noqa: E402

from fxls.engine import analyze as engine  # noqa: E402
from fxls.engine import fixes  # noqa: E402
from fxls.engine.workerclient import WorkerClient  # noqa: E402

SOFTMAX_RULE = """

def pattern_softmax_last(x):
    return F.softmax(x, dim=-1)


def replacement_softmax_last(x):
    return torch.softmax(x, dim=-1)
"""


def _ms(samples: list[float]) -> str:
    ordered = sorted(samples)
    return " / ".join(
        f"{v * 1000:.0f}" for v in (ordered[0], statistics.median(ordered), ordered[-1])
    )


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="fxls-rules-bench-"))
    rules_path = scratch / "fxls_rules.py"
    rules_path.write_text((ROOT / "tests/fixtures/rules/fxls_rules.py").read_text() + SOFTMAX_RULE)
    rules = engine.read_rules(str(rules_path))
    worker = WorkerClient()
    await worker.start()
    try:
        path = ROOT / "bench/models/gpt48.py"
        text = path.read_text()
        plain = engine.EngineOptions()
        plain.limits.timeout_s = 60
        with_rules = engine.EngineOptions(limits=plain.limits, rules=rules)
        times: dict[str, list[float]] = {"without rules": [], "with rules": []}
        matches = 0
        await engine.analyze(
            worker, engine.AnalysisRequest(str(path), text), options=plain
        )  # warm the page cache
        for _ in range(args.runs):
            for label, options in (("without rules", plain), ("with rules", with_rules)):
                started = time.perf_counter()
                analysis = await engine.analyze(
                    worker, engine.AnalysisRequest(str(path), text), options=options
                )
                times[label].append(time.perf_counter() - started)
                if options is with_rules:
                    matches = sum(1 for d in analysis.diagnostics if d.code == "FX360")
        nodes = sum(len(m.nodes) for m in analysis.modules)
        for label, samples in times.items():
            print(f"capture gpt48 ({nodes} nodes) {label}: ms min / median / max {_ms(samples)}")
        print(f"  FX360 matches with rules: {matches}")

        cases = [
            (ROOT / "tests/fixtures/rules/mlp_before.py", "gelu_tanh"),
            (gpt12(scratch), "softmax_last"),
        ]
        for case, rule in cases:
            text = case.read_text()
            analysis = await engine.analyze(
                worker, engine.AnalysisRequest(str(case), text), options=with_rules
            )
            wanted = [
                c for c in fixes.candidates(analysis, text)
                if c.kind == "rule" and c.params.get("rule") == rule
            ][:1]  # fmt: skip
            samples = []
            result = None
            for _ in range(args.runs):
                started = time.perf_counter()
                result = await fixes.compute(
                    worker, str(case), text, [c.request() for c in wanted], options=with_rules
                )
                samples.append(time.perf_counter() - started)
            outcome = result.outcomes[0] if result and result.outcomes else None
            state = outcome.applicability if outcome else "none"
            print(
                f"resolve rule {rule} on {case.name} ({state}): "
                f"median {statistics.median(samples):.2f} s, min {min(samples):.2f} s"
            )
    finally:
        await worker.close()


if __name__ == "__main__":
    asyncio.run(main())
