"""What a user pass (``# fxls: pass Class``) adds to a capture, through the real worker client.

For each model of bench/models/ it captures the file warm, as the editor does, twice per round
in alternation: as it is (the anchor) and with a pass appended that rewrites every
``call_function``/``call_method`` node (inserting a copy after it, redirecting its uses,
erasing it). It reports both times, the pass's own time as the worker measured it (deep copy of
the traced module, the observed run, the checks and the before -> after diff), and the nodes the
pass touched.

Usage: .venv/bin/python bench/passes_bench.py [--runs 5] [--models resnet50,gpt48,llama7b]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from pathlib import Path

from engine_bench import MODELS, ROOT, machine

PASS = """

# fxls: pass {cls}
def rewrite_every_call(gm):
    for node in list(gm.graph.nodes):
        if node.op in ("call_function", "call_method"):
            with gm.graph.inserting_after(node):
                new = gm.graph.create_node(node.op, node.target, node.args, node.kwargs)
            node.replace_all_uses_with(new)
            gm.graph.erase_node(node)
    gm.graph.lint()
    gm.recompile()
    return gm
"""


async def bench(names: list[str], runs: int) -> None:
    from fxls.engine.analyze import AnalysisRequest, EngineOptions, analyze
    from fxls.engine.workerclient import WorkerClient
    from fxls.protocol.model import Limits

    client = WorkerClient()
    await client.start()
    options = EngineOptions(limits=Limits(timeout_s=120, cpu_s=120, memory_mb=8192))
    rows = []
    try:
        for name in names:
            file, cls, *_ = MODELS[name]
            path = str(ROOT / "bench" / "models" / file)
            plain = Path(path).read_text()
            with_pass = plain + PASS.format(cls=cls)
            for text in (plain, with_pass):  # warm-up
                await analyze(client, AnalysisRequest(path, text, only=[cls]), options=options)
            anchor, passed, own = [], [], []
            replaced = nodes = 0
            for _ in range(runs):
                for text, into in ((plain, anchor), (with_pass, passed)):
                    started = time.perf_counter()
                    result = await analyze(
                        client, AnalysisRequest(path, text, only=[cls]), options=options
                    )
                    into.append(time.perf_counter() - started)
                mod = result.module(cls)
                assert mod is not None and mod.passes, result.diagnostics
                run = mod.passes[0]
                assert run.status == "ok", (run.message, [d.message for d in mod.diagnostics])
                own.append(run.duration_s)
                replaced, nodes = run.replaced, run.before
            rows.append((name, nodes, replaced, anchor, passed, own))
    finally:
        await client.close()
    m = machine()
    print(f"{m.get('cpu')} · {m.get('cores')} cores · torch {m.get('torch')} · runs {runs}")
    print(
        "| model | nodes | nodes replaced | capture ms (anchor, median) | capture with pass ms "
        "(median) | pass ms in the worker (min / median / max) |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for name, nodes, replaced, anchor, passed, own in rows:
        ms = [f"{v * 1000:.0f}" for v in (min(own), statistics.median(own), max(own))]
        print(
            f"| {name} | {nodes} | {replaced} | {statistics.median(anchor) * 1000:.0f} | "
            f"{statistics.median(passed) * 1000:.0f} | {' / '.join(ms)} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--models", default=",".join(MODELS))
    args = parser.parse_args()
    asyncio.run(bench([n for n in args.models.split(",") if n], args.runs))


if __name__ == "__main__":
    main()
