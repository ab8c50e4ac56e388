"""What the compile check (FX6xx) costs, per class, through the real worker.

For each file: the capture job (``analyze``, as the server runs it) and then the ``compile``
job (``check_compile``), each timed from the server's side, with the CPU time the compile job's
child reported (``JobResult.cpu_s``: steadier than wall time on a shared machine) and the part
of the job outside the classes' checks (fork, running the file, and before the compile job
built classes from their capture's result, the capture it repeated); per class, the time the
child spent compiling and running ``forward`` (``CompileCheck.duration_s``: the build on the
CPU, TorchDynamo and three calls), its graphs and breaks. The anchor, ``python -c "import
torch"``, is measured in the same run. Medians over ``--runs``.

Usage: .venv/bin/python bench/compile_bench.py [--runs 3] [FILE ...]
(default: docs/examples/cnn.py, docs/examples/gpt.py, tests/fixtures/compile/breaks.py)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fxls.engine.analyze import AnalysisRequest, EngineOptions, analyze  # noqa: E402
from fxls.engine.compilecheck import check_compile  # noqa: E402
from fxls.engine.workerclient import WorkerClient  # noqa: E402

DEFAULT = ["docs/examples/cnn.py", "docs/examples/gpt.py", "tests/fixtures/compile/breaks.py"]


def import_torch_s() -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import torch"], check=True)
    return time.perf_counter() - started


class CompileCpu:
    """The client, keeping the CPU time each compile job's child reported."""

    def __init__(self, client: WorkerClient) -> None:
        self.client = client
        self.cpu_s: list[float] = []

    async def run(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        result = await self.client.run(*args, **kwargs)
        self.cpu_s.append(result.cpu_s)
        return result


async def one_file(client: WorkerClient, path: str) -> tuple[float, float, dict[str, tuple], float]:
    text = Path(path).read_text()
    options = EngineOptions(compile_check=True)
    request = AnalysisRequest(os.path.abspath(path), text)
    started = time.perf_counter()
    analysis = await analyze(client, request, options)
    captured = time.perf_counter() - started
    counting = CompileCpu(client)
    started = time.perf_counter()
    await check_compile(counting, analysis, request, options)
    compiled = time.perf_counter() - started
    classes = {}
    for m in analysis.modules:
        c = m.compile
        if c is not None:
            classes[m.name] = (c.status, c.tensors, c.graphs, len(c.breaks), c.duration_s)
    return captured, compiled, classes, sum(counting.cpu_s)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("files", nargs="*", default=DEFAULT)
    args = parser.parse_args()
    anchors = [import_torch_s() for _ in range(args.runs)]
    client = WorkerClient()
    await client.start()
    try:
        await one_file(client, args.files[0])  # warm the zygote's later steps
        for path in args.files:
            runs = [await one_file(client, path) for _ in range(args.runs)]
            capture = statistics.median(r[0] for r in runs)
            compile_job = statistics.median(r[1] for r in runs)
            cpu = statistics.median(r[3] for r in runs)
            rest = statistics.median(r[1] - sum(c[4] for c in r[2].values()) for r in runs)
            print(
                f"{path}: capture job {capture:.2f} s, compile job {compile_job:.2f} s "
                f"({cpu:.2f} s CPU; outside the classes' checks {rest:.2f} s)"
            )
            for name, first in runs[0][2].items():
                spent = statistics.median(r[2][name][4] for r in runs if name in r[2])
                status, tensors, graphs, breaks = first[:4]
                print(
                    f"  {name}: {status} on {tensors or '-'}, {graphs} graphs, {breaks} breaks, "
                    f"check {spent:.2f} s"
                )
    finally:
        await client.close()
    print(f"import torch: {statistics.median(anchors):.2f} s (median of {args.runs})")


if __name__ == "__main__":
    asyncio.run(main())
