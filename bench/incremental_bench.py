"""Cold start, incremental captures and memory, through a real LSP client and the real worker.
Numbers are recorded, not asserted.

  cold    - `python -c "import torch"` (the anchor) and, in the same run, a new server process
            -> first diagnostics of docs/examples/cnn.py and of a three-class file (server
            start-up, zygote start-up and torch import included); the zygote's warm-up steps
            (before ready / while idle) from a separate worker start;
  session - a scripted editing session of a three-class file (typing a comment, blank lines and
            trailing spaces, typing code inside one class, a module-level edit), debounce 0,
            every version waited for: capture jobs, classes captured and taken from the cache
            (the hit rate), time to diagnostics, with the cache and without
            (FXLS_CAPTURE_CACHE=0), in the same run;
  memory  - the job child's peak RSS capturing bench/models/llama7b.py (the zygote's RSS next
            to it), and the server's RSS after 500 edits inside one class (each a new cache
            key: the cache's bound is what keeps the server small).

Usage: .venv/bin/python bench/incremental_bench.py [--runs 5] [--edits 500] [--fill 600]
       [--only-fill] [--out FILE]
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine_bench import machine, stats
from lsp_bench import SETTINGS, SMALL, Bench, rss_kib

ROOT = Path(__file__).resolve().parents[1]
LLAMA = ROOT / "bench" / "models" / "llama7b.py"

THREE = """\
import torch
from torch import nn

SCALE = 2


class Gate(nn.Module):
    def __init__(self, dim: int = 64):
        super().__init__()
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        return torch.sigmoid(self.proj(x)) * x


class Mixer(nn.Module):
    def __init__(self, dim: int = 64):
        super().__init__()
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


class Stack(nn.Module):
    def __init__(self, dim: int = 64, depth: int = 4):
        super().__init__()
        self.blocks = nn.ModuleList([Mixer(dim) for _ in range(depth)])
        self.head = nn.Linear(dim, 10)

    def forward(self, x):
        for block in self.blocks:
            x = x + block(x)
        return self.head(x)
"""


def _typed(text: str, anchor: str, typed: str) -> list[str]:
    """The versions of ``text`` while ``typed`` is typed one character at a time after
    ``anchor``."""
    at = text.index(anchor) + len(anchor)
    return [text[:at] + typed[:i] + text[at:] for i in range(1, len(typed) + 1)]


def session_script() -> list[tuple[str, str]]:
    """(kind, text) for every version after the first."""
    out: list[tuple[str, str]] = []
    text = THREE
    text = text.replace("class Mixer(nn.Module):\n", "class Mixer(nn.Module):\n\n")
    out.append(("whitespace", text))
    for version in _typed(text, "class Mixer(nn.Module):\n", "    # two layers"):
        out.append(("comment", version))
    text = out[-1][1]
    for i in range(1, 4):
        out.append(
            ("whitespace", text.replace("\n\n\nclass Stack", "\n" * (2 + i) + "class Stack"))
        )
    text = out[-1][1]
    out.append(
        (
            "whitespace",
            text.replace("self.proj = nn.Linear(dim, dim)", "self.proj = nn.Linear(dim, dim)   "),
        )
    )
    text = out[-1][1]
    for version in _typed(text, "return torch.sigmoid(self.proj(x)) * x", " * 2"):
        out.append(("code in one class", version))
    text = out[-1][1]
    for version in _typed(text, "self.fc2(torch.relu(self.fc1(x))", " + x"):
        out.append(("code in one class", version))
    text = out[-1][1]
    out.append(("module level", text.replace("SCALE = 2", "SCALE = 3")))
    return out


async def bench_cold(runs: int) -> dict[str, Any]:
    anchor, cnn, three, before = [], [], [], []
    three_path = ROOT / "bench" / ".three.py"
    three_path.write_text(THREE)
    try:
        for _ in range(runs):
            started = time.perf_counter()
            subprocess.run([sys.executable, "-c", "import torch"], check=True)
            anchor.append(time.perf_counter() - started)
            for path, samples, env in (
                (SMALL, cnn, None),
                (three_path, three, None),
                (SMALL, before, "1"),
            ):
                if env:
                    os.environ["FXLS_WARM_BEFORE_READY"] = env
                else:
                    os.environ.pop("FXLS_WARM_BEFORE_READY", None)
                bench = Bench(SETTINGS)
                begun = await bench.start()
                try:
                    uri = bench.open(path)
                    samples.append(await bench.published(uri, 1) - begun)
                finally:
                    await bench.stop()
    finally:
        three_path.unlink(missing_ok=True)
        os.environ.pop("FXLS_WARM_BEFORE_READY", None)
    out: dict[str, Any] = {
        "import_torch": stats(anchor),
        "cnn": stats(cnn),
        "three": stats(three),
        "cnn_whole_warm_up_first": stats(before),
    }
    out["ratio_cnn"] = out["cnn"]["median"] / out["import_torch"]["median"]
    out["ratio_three"] = out["three"]["median"] / out["import_torch"]["median"]
    out["warm_steps"] = await _warm_steps()
    return out


async def _warm_steps() -> dict[str, Any]:
    from fxls.engine.workerclient import WorkerClient

    logs: list[str] = []
    client = WorkerClient(
        log=lambda message, *args: logs.append(message % args if args else message)
    )
    ready = await client.start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not any("warm-up finished" in m for m in logs):
        await asyncio.sleep(0.1)
    await client.close()
    return {
        "ready_s": ready.warm_s,
        "before_ready": ready.warm_steps,
        "while_idle": next((m for m in logs if "warm-up finished" in m), ""),
    }


async def bench_session(cache: bool) -> dict[str, Any]:
    os.environ["FXLS_CAPTURE_CACHE"] = "1" if cache else "0"
    path = ROOT / "bench" / ".session.py"
    path.write_text(THREE)
    bench = Bench(SETTINGS)
    try:
        await bench.start()
        uri = bench.open(path, THREE)
        await bench.published(uri, 1)
        by_kind: dict[str, dict[str, Any]] = {}
        before = _cache(await bench.stats())
        for version, (kind, text) in enumerate(session_script(), start=2):
            sent = time.perf_counter()
            bench.client.text_document_did_change(_whole(uri, version, text))
            arrived = await bench.published(uri, version)
            after = _cache(await bench.stats())
            row = by_kind.setdefault(
                kind,
                {"versions": 0, "parsed": 0, "jobs": 0, "captured": 0, "reused": 0, "seconds": []},
            )
            row["versions"] += 1
            row["parsed"] += _parses(text)
            if after is not None and before is not None:
                row["jobs"] += after["jobs"] - before["jobs"]
                row["captured"] += after["misses"] - before["misses"]
                row["reused"] += after["hits"] - before["hits"]
            row["seconds"].append(arrived - sent)
            before = after
        for row in by_kind.values():
            row["median_s"] = statistics.median(row.pop("seconds"))
            total = row["captured"] + row["reused"]
            row["hit_rate"] = row["reused"] / total if total else None
        return by_kind
    finally:
        await bench.stop()
        path.unlink(missing_ok=True)
        os.environ.pop("FXLS_CAPTURE_CACHE", None)


def _parses(text: str) -> bool:
    """Whether the version parses: without a cache, each such version is one capture job of
    every class (a version with a syntax error keeps the previous result, no job)."""
    try:
        ast.parse(text)
    except SyntaxError:
        return False
    return True


def _cache(stats: Any) -> dict[str, Any] | None:
    cache = getattr(stats, "cache", None)
    if cache is None:
        return None
    return {k: getattr(cache, k) for k in ("jobs", "misses", "hits", "entries", "bytes")}


def _whole(uri: str, version: int, text: str) -> Any:
    from lsprotocol import types

    return types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
        content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)],
    )


async def bench_llama() -> dict[str, Any]:
    from fxls.analysis import parse
    from fxls.engine import analyze as engine
    from fxls.engine.workerclient import WorkerClient
    from fxls.protocol.model import Limits

    client = WorkerClient()
    await client.start()
    try:
        text = LLAMA.read_text()
        requests = engine.build_requests([c for c in parse(text).classes if c.name == "Llama7B"])
        options = engine.EngineOptions(limits=Limits(timeout_s=120, cpu_s=120, memory_mb=8192))
        job = engine.capture_job(str(LLAMA), text, requests, options)
        runs = []
        for _ in range(2):
            result = await client.run(job, options.limits, options.isolation)
            payload = result.payload
            module = payload.modules[0] if payload and payload.modules else None
            runs.append(
                {
                    "kind": result.kind,
                    "status": module.status if module else None,
                    "params": module.params if module else None,
                    "child_peak_rss_mib": round(result.max_rss_kb / 1024, 1),
                    "seconds": round(result.duration_s, 2),
                }
            )
        assert client.pid is not None
        zygote = rss_kib(client.pid)
    finally:
        await client.close()
    return {"runs": runs, "zygote_rss_mib": round(zygote / 1024, 1)}


async def bench_soak(edits: int) -> dict[str, Any]:
    path = ROOT / "bench" / ".soak.py"
    path.write_text(THREE)
    bench = Bench({**SETTINGS, "debounceMs": 50})
    try:
        await bench.start()
        uri = bench.open(path, THREE)
        await bench.published(uri, 1)
        start_kib = rss_kib(bench.pid)
        started = time.perf_counter()
        for i in range(edits):
            text = THREE.replace("nn.Linear(dim, 10)", f"nn.Linear(dim, {10 + i})")
            bench.client.text_document_did_change(_whole(uri, i + 2, text))
            await asyncio.sleep(0.1 if i % 10 == 0 else 0.005)
        await bench.published(uri, edits + 1)
        elapsed = time.perf_counter() - started
        await asyncio.sleep(0.5)
        cache = _cache(await bench.stats())
        return {
            "edits": edits,
            "seconds": round(elapsed, 1),
            "server_rss_mib_before": round(start_kib / 1024, 1),
            "server_rss_mib_after": round(rss_kib(bench.pid) / 1024, 1),
            "cache": cache,
        }
    finally:
        await bench.stop()
        path.unlink(missing_ok=True)


async def bench_fill(edits: int) -> dict[str, Any]:
    """``edits`` versions, each waited for, each a new key of the same unit: the cache fills to
    its bound and the server's RSS shows what a full cache costs."""
    path = ROOT / "bench" / ".fill.py"
    path.write_text(THREE)
    bench = Bench(SETTINGS)
    try:
        await bench.start()
        uri = bench.open(path, THREE)
        await bench.published(uri, 1)
        start_kib = rss_kib(bench.pid)
        for i in range(edits):
            text = THREE.replace("nn.Linear(dim, 10)", f"nn.Linear(dim, {11 + i})")
            bench.client.text_document_did_change(_whole(uri, i + 2, text))
            await bench.published(uri, i + 2)
        return {
            "edits": edits,
            "server_rss_mib_before": round(start_kib / 1024, 1),
            "server_rss_mib_after": round(rss_kib(bench.pid) / 1024, 1),
            "cache": _cache(await bench.stats()),
        }
    finally:
        await bench.stop()
        path.unlink(missing_ok=True)


def render(report: dict[str, Any]) -> str:
    m = report["machine"]
    cold = report["cold"]
    lines = [
        f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, Linux {m['kernel']}, "
        f"Python {m['python']}, torch {m['torch']}; load average at start "
        f"{report['load_start']}, at end {report['load_end']}.",
        "",
        "| cold start (median of runs) | seconds | × import torch |",
        "| --- | --- | --- |",
        f'| `python -c "import torch"` (anchor) | {cold["import_torch"]["median"]:.2f} | 1.0 |',
        f"| new server → first diagnostics, cnn.py | {cold['cnn']['median']:.2f} | "
        f"{cold['ratio_cnn']:.2f} |",
        f"| new server → first diagnostics, three classes | {cold['three']['median']:.2f} | "
        f"{cold['ratio_three']:.2f} |",
        f"| the same for cnn.py, whole warm-up before ready (`FXLS_WARM_BEFORE_READY=1`) | "
        f"{cold['cnn_whole_warm_up_first']['median']:.2f} | "
        f"{cold['cnn_whole_warm_up_first']['median'] / cold['import_torch']['median']:.2f} |",
        "",
        f"Zygote ready after {cold['warm_steps']['ready_s']:.2f} s: "
        + ", ".join(f"{k} {v:.2f} s" for k, v in cold["warm_steps"]["before_ready"].items())
        + f"; then {cold['warm_steps']['while_idle'] or 'no idle warm-up reported'}.",
        "",
        "| editing session | versions (parse) | jobs (cache / none) | classes captured "
        "(cache / none) | hit rate | median to diagnostics (cache / none) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    on, off = report["session_cache"], report["session_plain"]
    for kind, row in on.items():
        other = off.get(kind, {})
        rate = "–" if row["hit_rate"] is None else f"{row['hit_rate']:.0%}"
        lines.append(
            f"| {kind} | {row['versions']} ({row['parsed']}) | {row['jobs']} / {row['parsed']} | "
            f"{row['captured']} / {3 * row['parsed']} | {rate} | "
            f"{row['median_s'] * 1000:.0f} ms / {other.get('median_s', 0) * 1000:.0f} ms |"
        )
    llama = report["llama"]
    soak = report["soak"]
    peaks = ", ".join(f"{r['child_peak_rss_mib']:.0f}" for r in llama["runs"])
    lines += [
        "",
        f"Memory: capturing Llama7B ({llama['runs'][0]['params']:,} parameters, "
        f"{llama['runs'][0]['status']}) the job child peaks at {peaks} MiB RSS (two runs); the "
        f"zygote holds {llama['zygote_rss_mib']:.0f} MiB. Server RSS "
        f"{soak['server_rss_mib_before']:.0f} MiB after opening the file, "
        f"{soak['server_rss_mib_after']:.0f} MiB after {soak['edits']} edits inside one class "
        f"(cache: {soak['cache']['entries'] if soak['cache'] else '–'} entries, "
        f"{(soak['cache']['bytes'] if soak['cache'] else 0) / 1024:.0f} KiB).",
    ]
    fill = report.get("fill")
    if fill:
        lines.append(
            f"Filling the cache: {fill['edits']} versions each waited for, each a new key: "
            f"{fill['cache']['entries']} entries, {fill['cache']['bytes'] / 1024:.0f} KiB; server "
            f"RSS {fill['server_rss_mib_before']:.0f} MiB before, "
            f"{fill['server_rss_mib_after']:.0f} MiB after."
        )
    return "\n".join(lines)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    report: dict[str, Any] = {"machine": machine(), "load_start": _load()}
    if args.only_fill:
        report["fill"] = await bench_fill(args.fill)
        return report
    report["cold"] = await bench_cold(args.runs)
    if args.only_cold:
        return report
    report["session_cache"] = await bench_session(cache=True)
    report["session_plain"] = await bench_session(cache=False)
    report["llama"] = await bench_llama()
    report["soak"] = await bench_soak(args.edits)
    if args.fill:
        report["fill"] = await bench_fill(args.fill)
    report["load_end"] = _load()
    return report


def _load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--edits", type=int, default=500)
    parser.add_argument("--out", default=None)
    parser.add_argument("--fill", type=int, default=0, help="versions to fill the cache with")
    parser.add_argument("--only-fill", action="store_true", help="only the cache fill")
    parser.add_argument("--only-cold", action="store_true", help="only the cold start")
    args = parser.parse_args()
    report = asyncio.run(run(args))
    if args.only_fill or args.only_cold:
        print(json.dumps(report, indent=2, default=str))
        return
    text = render(report)
    print(text)
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2, default=str))


if __name__ == "__main__":
    main()
