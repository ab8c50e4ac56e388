"""Capture speed and memory through the real client path, with anchors measured in the same run.

For each model in bench/models/ it measures, warm:
  fxls     - engine.analyze() through WorkerClient: fork, sandbox, exec, meta build, trace, shapes,
             named arguments, lint, serialization and JSON transfer (what an editor waits for);
  floor    - the bare in-process floor: exec the file, build on meta, torch.fx.symbolic_trace,
             meta-tensor ShapeProp, in this process, no sandbox, no argument naming;
  torchinfo- torchinfo.summary, a real forward pass on real weights (skipped where the weights do
             not fit in memory).
plus cold `fxls check` of a small file (a new process, zygote start-up included).

Usage: .venv/bin/python bench/engine_bench.py [--runs 5] [--models resnet50,gpt48,llama7b] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import resource
import runpy
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MODELS = {
    # name: (file, class, input shape, input dtype, goal seconds)
    "resnet50": ("resnet50.py", "ResNet50", (1, 3, 224, 224), "float32", 0.150),
    "gpt48": ("gpt48.py", "GPT48", (2, 128), "int64", 1.0),
    "llama7b": ("llama7b.py", "Llama7B", (1, 64), "int64", 2.0),
}


def stats(samples: list[float]) -> dict[str, float]:
    return {
        "min": min(samples),
        "median": statistics.median(samples),
        "max": max(samples),
        "n": len(samples),
    }


def machine() -> dict[str, Any]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    import torch

    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": round(mem_gib, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "torch": torch.__version__,
    }


async def bench_fxls(names: list[str], runs: int) -> dict[str, Any]:
    from fxls.engine.analyze import AnalysisRequest, EngineOptions, analyze
    from fxls.engine.workerclient import WorkerClient
    from fxls.protocol.model import Limits

    out: dict[str, Any] = {}
    client = WorkerClient()
    ready = await client.start()
    out["_zygote"] = {"warm_s": ready.warm_s, "isolation": ready.isolation_available}
    options = EngineOptions(limits=Limits(timeout_s=120, cpu_s=120, memory_mb=8192))
    try:
        for name in names:
            file, cls, *_ = MODELS[name]
            path = str(ROOT / "bench" / "models" / file)
            text = Path(path).read_text()
            # One untimed run warms the page cache and the zygote's lazily loaded modules.
            first = await analyze(client, AnalysisRequest(path, text, only=[cls]), options=options)
            mod = first.module(cls)
            assert mod is not None and mod.status in ("traced", "partial"), (
                name,
                first.diagnostics,
            )
            samples = []
            for _ in range(runs):
                started = time.perf_counter()
                result = await analyze(
                    client, AnalysisRequest(path, text, only=[cls]), options=options
                )
                samples.append(time.perf_counter() - started)
            m = result.module(cls)
            assert m is not None
            out[name] = {
                "seconds": stats(samples),
                "nodes": len(m.nodes),
                "status": m.status,
                "output": [v.shape for v in m.outputs],
                "timings": m.timings,
            }
    finally:
        await client.close()
    return out


def bench_floor(name: str, runs: int) -> dict[str, Any]:
    import torch
    import torch.fx
    from torch.fx.passes.shape_prop import ShapeProp

    file, cls, shape, dtype, _ = MODELS[name]
    path = ROOT / "bench" / "models" / file
    samples = []
    for _ in range(runs + 1):
        started = time.perf_counter()
        ns = runpy.run_path(str(path))
        with torch.device("meta"):
            model = ns[cls]()
        tracer = torch.fx.Tracer()
        tracer.proxy_buffer_attributes = True
        graph = tracer.trace(model)
        gm = torch.fx.GraphModule(model, graph)
        if dtype == "int64":
            x = torch.zeros(shape, dtype=torch.int64, device="meta")
        else:
            x = torch.empty(shape, device="meta")
        ShapeProp(gm).propagate(x)
        samples.append(time.perf_counter() - started)
        del ns, model, gm
        gc.collect()
    return {"seconds": stats(samples[1:])}


def bench_torchinfo(name: str, runs: int) -> dict[str, Any]:
    import torch

    file, cls, shape, dtype, _ = MODELS[name]
    if name == "llama7b":
        return {"skipped": "real fp32 weights need ~27 GB; this machine has 24 GiB"}
    try:
        import torchinfo
    except ImportError:
        return {"skipped": "torchinfo is not installed (pip install torchinfo)"}
    ns = runpy.run_path(str(ROOT / "bench" / "models" / file))
    torch.manual_seed(0)
    model = ns[cls]().eval()
    x = torch.zeros(shape, dtype=torch.int64) if dtype == "int64" else torch.randn(shape)
    samples = []
    for _ in range(runs + 1):
        started = time.perf_counter()
        torchinfo.summary(model, input_data=[x], verbose=0, depth=10)
        samples.append(time.perf_counter() - started)
    del model
    gc.collect()
    return {"seconds": stats(samples[1:])}


def bench_cold_check(runs: int) -> dict[str, Any]:
    fxls = ROOT / ".venv" / "bin" / "fxls"
    cmd = [
        str(fxls) if fxls.exists() else sys.executable,
        "check",
        str(ROOT / "docs" / "examples" / "cnn.py"),
    ]
    if not fxls.exists():
        cmd = [sys.executable, "-m", "fxls", "check", str(ROOT / "docs" / "examples" / "cnn.py")]
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        samples.append(time.perf_counter() - started)
        assert proc.returncode in (0, 1), proc.stderr
    return {"seconds": stats(samples)}


def worker_peak_rss(name: str) -> int:
    """Peak RSS (KiB) of a single capture of ``name`` in a fresh job child, via `fxls check`."""
    file, cls, *_ = MODELS[name]
    code = (
        "import asyncio, sys\n"
        "from fxls.engine.analyze import EngineOptions, analyze\n"
        "from fxls.protocol.model import Limits\n"
        "from fxls.engine.workerclient import WorkerClient\n"
        "async def main():\n"
        "    c = WorkerClient(); await c.start()\n"
        f"    job_path = {str(ROOT / 'bench' / 'models' / file)!r}\n"
        "    from fxls.protocol.model import CaptureJob\n"
        "    from fxls.engine.analyze import build_requests\n"
        "    from fxls.analysis import parse\n"
        "    text = open(job_path).read()\n"
        f"    reqs = [r for r in build_requests(parse(text).classes) if r.name == {cls!r}]\n"
        "    res = await c.run(CaptureJob(path=job_path, source=text, classes=reqs), "
        "Limits(timeout_s=120, cpu_s=120, memory_mb=8192))\n"
        "    print(res.kind, res.max_rss_kb)\n"
        "    await c.close()\n"
        "asyncio.run(main())\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    kind, kb = proc.stdout.split()[-2:]
    assert kind == "ok", proc.stdout + proc.stderr
    return int(kb)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "engine.json"))
    args = parser.parse_args()
    names = [n for n in args.models.split(",") if n]

    report: dict[str, Any] = {"machine": machine(), "runs": args.runs}
    report["fxls"] = asyncio.run(bench_fxls(names, args.runs))
    report["peak_rss_kib"] = {n: worker_peak_rss(n) for n in names}
    report["floor"] = {n: bench_floor(n, args.runs) for n in names}
    report["torchinfo"] = {n: bench_torchinfo(n, args.runs) for n in names}
    report["cold_check"] = bench_cold_check(args.runs)
    report["self_rss_kib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2))
    print(render(report, names))


def fmt(s: dict[str, float]) -> str:
    return f"{s['min'] * 1000:.0f} / {s['median'] * 1000:.0f} / {s['max'] * 1000:.0f}"


def render(report: dict[str, Any], names: list[str]) -> str:
    m = report["machine"]
    lines = [
        f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, Linux {m['kernel']}, "
        f"Python {m['python']}, torch {m['torch']}. Runs per number: {report['runs']} (warm).",
        "",
        "| model | nodes | fxls ms (min / median / max) | floor ms | fxls / floor | torchinfo ms | "
        "worker peak RSS | goal |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for n in names:
        fx = report["fxls"][n]
        fl = report["floor"][n]["seconds"]
        ti = report["torchinfo"][n]
        ti_text = fmt(ti["seconds"]) if "seconds" in ti else f"n/a ({ti['skipped']})"
        ratio = fx["seconds"]["median"] / fl["median"]
        goal = MODELS[n][4]
        met = "met" if fx["seconds"]["median"] <= goal else "missed"
        lines.append(
            f"| {n} | {fx['nodes']} | {fmt(fx['seconds'])} | {fmt(fl)} | {ratio:.2f}× | {ti_text} | "
            f"{report['peak_rss_kib'][n] / 1024:.0f} MiB | ≤ {goal * 1000:.0f} ms: {met} |"
        )
    cold = report["cold_check"]["seconds"]
    lines += [
        "",
        f"Cold `fxls check docs/examples/cnn.py` (new process, zygote start-up included): "
        f"{fmt(cold)} ms (goal ≤ 4000 ms).",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
