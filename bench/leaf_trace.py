"""What a trace that keeps copied blocks whole would cost: plain torch.fx, in process.

For the GPT of bench/models/gpt48.py at several depths it times ``torch.fx.Tracer.trace`` +
``GraphModule`` of the root on the meta device (``proxy_buffer_attributes``, as the floor of
depth_sweep.py) twice: tracing through every block, and with every block but the first of
each ``ModuleList`` kept as a leaf module (one ``call_module`` node a block), with the graph's
node count. The difference per added block bounds what a capture saves by not making, naming,
checking and recording a copied block's nodes one by one.

Usage: .venv/bin/python bench/leaf_trace.py [--runs 7] [--depths 4,48]
"""

from __future__ import annotations

import argparse
import runpy
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.fx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine_bench import machine

MODEL = Path(__file__).resolve().parent / "models" / "gpt48.py"


class _LaterBlocksWhole(torch.fx.Tracer):
    """Every child but the first of a ``ModuleList`` is a leaf."""

    def __init__(self, lists: set[str]) -> None:
        super().__init__()
        self.lists = lists

    def is_leaf_module(self, m: torch.nn.Module, module_qualified_name: str) -> bool:
        parent, _, index = module_qualified_name.rpartition(".")
        if parent in self.lists and index.isdigit() and index != "0":
            return True
        return super().is_leaf_module(m, module_qualified_name)


def _model(depth: int, folder: Path) -> torch.nn.Module:
    text = MODEL.read_text().replace("n_layer: int = 48", f"n_layer: int = {depth}")
    path = folder / f"gpt_{depth}.py"
    path.write_text(text)
    namespace = runpy.run_path(str(path))
    with torch.device("meta"):
        return namespace["GPT48"]()


def _trace(model: torch.nn.Module, leaves: bool, runs: int) -> tuple[float, int]:
    lists = {n for n, m in model.named_modules() if isinstance(m, torch.nn.ModuleList)}
    best, count = float("inf"), 0
    for _ in range(runs + 1):
        started = time.perf_counter()
        tracer = _LaterBlocksWhole(lists) if leaves else torch.fx.Tracer()
        tracer.proxy_buffer_attributes = True
        graph = tracer.trace(model)
        torch.fx.GraphModule(model, graph)
        best = min(best, time.perf_counter() - started)
        count = len(graph.nodes)
    return best, count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--depths", default="4,48")
    args = parser.parse_args()
    depths = [int(d) for d in args.depths.split(",")]
    m = machine()
    print(
        f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, Linux {m['kernel']}, "
        f"Python {m['python']}, torch {m['torch']}; min of {args.runs} runs, ms"
    )
    print("| blocks | every block traced | nodes | later blocks whole | nodes |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for depth in depths:
            model = _model(depth, Path(folder))
            full, full_nodes = _trace(model, False, args.runs)
            whole, whole_nodes = _trace(model, True, args.runs)
            rows.append((depth, full, whole))
            print(
                f"| {depth} | {full * 1e3:.1f} | {full_nodes} | {whole * 1e3:.1f} | "
                f"{whole_nodes} |",
                flush=True,
            )
    (a, full_a, whole_a), (b, full_b, whole_b) = rows[0], rows[-1]
    if b > a:
        per = 1e3 / (b - a)
        print(
            f"per added block: every block traced {(full_b - full_a) * per:.2f} ms, "
            f"later blocks whole {(whole_b - whole_a) * per:.2f} ms"
        )


if __name__ == "__main__":
    main()
