"""The language server as an editor sees it: a real client talking to `python -m fxls serve`
over stdio. Numbers are recorded, not asserted.

  hover     - cached hover latency over many hovers on one call in resnet50's forward: round trip
              (client send -> answer) and server side (the hover handler's own time, which the
              server keeps and reports through its `fxls/stats` request; JSON-RPC parsing and
              serialization are not in it);
  edit      - didChange -> publishDiagnostics for that version, warm worker, debounce 0, for each
              model in bench/models/, next to the in-process floor (engine_bench.bench_floor:
              exec, meta build, trace, meta ShapeProp in this process);
  cold      - a new server process -> first diagnostics of docs/examples/cnn.py (zygote
              start-up and torch import included);
  soak      - 500 edits of a small model: server and zygote RSS before/after, zombies.

Usage: .venv/bin/python bench/lsp_bench.py [--runs 5] [--hovers 500] [--edits 500]
       [--models resnet50,gpt48,llama7b] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from lsprotocol import types
from pytest_lsp import LanguageClient, client_capabilities
from pytest_lsp.client import make_test_lsp_client

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine_bench import MODELS, bench_floor, machine, stats

ROOT = Path(__file__).resolve().parents[1]
SERVER = [sys.executable, "-m", "fxls", "serve"]
SETTINGS = {
    "debounceMs": 0,
    "limits": {"timeoutSeconds": 120, "cpuSeconds": 120, "memoryMB": 8192},
}
SMALL = ROOT / "docs" / "examples" / "cnn.py"
WARMED = "warm-up of common operators finished"
"""What the worker logs when its last warm-up step is done."""


class Bench:
    """One server process and a client that timestamps every publishDiagnostics."""

    def __init__(self, settings: dict[str, Any]) -> None:
        self.settings = settings
        self.client: LanguageClient = make_test_lsp_client()
        self.arrivals: dict[tuple[str, int | None], float] = {}
        self.arrived = asyncio.Event()
        features = self.client.protocol.fm.features

        def record(params: types.PublishDiagnosticsParams) -> None:
            self.arrivals[(params.uri, params.version)] = time.perf_counter()
            self.arrived.set()

        features[types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS] = record
        self.logs: list[str] = []

        def logged(params: types.LogMessageParams) -> None:
            self.logs.append(params.message)
            self.arrived.set()

        features[types.WINDOW_LOG_MESSAGE] = logged
        for method in (types.WORKSPACE_INLAY_HINT_REFRESH, types.WORKSPACE_CODE_LENS_REFRESH):
            features[method] = lambda params: None

    async def start(self) -> float:
        """Start the server and initialize; returns the time the process was started."""
        started = time.perf_counter()
        await self.client.start_io(*SERVER)
        await self.client.initialize_session(
            types.InitializeParams(
                capabilities=client_capabilities("visual-studio-code"),
                root_uri=ROOT.as_uri(),
                initialization_options=self.settings,
            )
        )
        return started

    @property
    def pid(self) -> int:
        assert self.client._server is not None
        return self.client._server.pid

    async def stop(self) -> None:
        try:
            await asyncio.wait_for(self.client.shutdown_session(), timeout=60)
        finally:
            await self.client.stop()

    def open(self, path: Path, text: str | None = None) -> str:
        uri = path.as_uri()
        self.client.text_document_did_open(
            types.DidOpenTextDocumentParams(
                text_document=types.TextDocumentItem(
                    uri=uri,
                    language_id="python",
                    version=1,
                    text=path.read_text() if text is None else text,
                )
            )
        )
        return uri

    def change(self, uri: str, version: int, line: int, text: str) -> None:
        at = types.Position(line=line, character=0)
        self.client.text_document_did_change(
            types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
                content_changes=[
                    types.TextDocumentContentChangePartial(range=types.Range(at, at), text=text)
                ],
            )
        )

    async def published(self, uri: str, version: int, timeout: float = 300.0) -> float:
        deadline = time.monotonic() + timeout
        while (uri, version) not in self.arrivals:
            self.arrived.clear()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no diagnostics for {uri} v{version}")
            try:
                await asyncio.wait_for(self.arrived.wait(), timeout=remaining)
            except asyncio.TimeoutError:
                pass
        return self.arrivals[(uri, version)]

    async def warmed(self, timeout: float = 120.0) -> bool:
        """Wait until the worker says its warm-up is done (the zygote's last background step,
        which runs once no job has run for a moment: an editor's steady state); False when it
        did not say so within ``timeout``."""
        deadline = time.monotonic() + timeout
        while not any(WARMED in line for line in self.logs):
            self.arrived.clear()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            try:
                await asyncio.wait_for(self.arrived.wait(), timeout=min(remaining, 1.0))
            except asyncio.TimeoutError:
                pass
        return True

    async def stats(self) -> Any:
        return await self.client.protocol.send_request_async("fxls/stats", None)


# -- /proc --------------------------------------------------------------------------------


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def descendants(root: int) -> list[tuple[int, str]]:
    """(pid, state) of every descendant of ``root``."""
    parents: dict[int, list[tuple[int, str]]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        parents.setdefault(int(fields[1]), []).append((int(entry), fields[0]))
    out, stack = [], [root]
    while stack:
        for child in parents.get(stack.pop(), []):
            out.append(child)
            stack.append(child[0])
    return out


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    q = statistics.quantiles(ordered, n=100)
    return {"p50": q[49], "p95": q[94], "max": ordered[-1], "n": len(ordered)}


# -- the benchmarks -------------------------------------------------------------------------


def _hover_position(text: str) -> types.Position:
    lines = text.split("\n")
    line = next(i for i, s in enumerate(lines) if "self.fc(x)" in s)
    return types.Position(line=line, character=lines[line].index("self.fc") + 5)


async def bench_hover(count: int) -> dict[str, Any]:
    bench = Bench(SETTINGS)
    await bench.start()
    try:
        path = ROOT / "bench" / "models" / "resnet50.py"
        text = path.read_text()
        uri = bench.open(path, text)
        await bench.published(uri, 1)
        params = types.HoverParams(
            text_document=types.TextDocumentIdentifier(uri=uri), position=_hover_position(text)
        )
        first = await bench.client.text_document_hover_async(params)
        assert first is not None, "no hover on resnet50's self.fc(x)"
        for _ in range(20):  # warm-up
            await bench.client.text_document_hover_async(params)
        round_trip = []
        for _ in range(count):
            started = time.perf_counter()
            result = await bench.client.text_document_hover_async(params)
            round_trip.append(time.perf_counter() - started)
            assert result is not None
        server_side = list((await bench.stats()).hoverSeconds)[-count:]
        return {
            "round_trip_s": percentiles(round_trip),
            "server_s": percentiles(server_side),
            "hover_chars": len(first.contents.value),  # type: ignore[union-attr]
        }
    finally:
        await bench.stop()


async def bench_edits(names: list[str], runs: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    bench = Bench(SETTINGS)
    await bench.start()
    try:
        for name in names:
            path = ROOT / "bench" / "models" / MODELS[name][0]
            uri = bench.open(path)
            await bench.published(uri, 1)  # warm: worker up, file in the page cache
            await bench.warmed()
            samples = []
            for run in range(runs):
                version = run + 2
                started = time.perf_counter()
                bench.change(uri, version, 0, f"# edit {run}\n")
                samples.append(await bench.published(uri, version) - started)
            out[name] = {"seconds": stats(samples)}
            bench.client.text_document_did_close(
                types.DidCloseTextDocumentParams(types.TextDocumentIdentifier(uri=uri))
            )
    finally:
        await bench.stop()
    return out


async def bench_cold(runs: int) -> dict[str, Any]:
    samples = []
    for _ in range(runs):
        bench = Bench(SETTINGS)
        started = await bench.start()
        try:
            uri = bench.open(SMALL)
            samples.append(await bench.published(uri, 1) - started)
        finally:
            await bench.stop()
    return {"seconds": stats(samples)}


async def bench_soak(edits: int) -> dict[str, Any]:
    bench = Bench({**SETTINGS, "debounceMs": 50})
    await bench.start()
    try:
        text = SMALL.read_text()
        uri = bench.open(SMALL, text)
        await bench.published(uri, 1)
        zygote = (await bench.stats()).workerPid
        before = {"server_kib": rss_kib(bench.pid), "zygote_kib": rss_kib(zygote)}
        started = time.perf_counter()
        for i in range(edits):
            bench.change(uri, i + 2, 0, f"# {i}\n")
            if i % 10 == 0:
                await asyncio.sleep(0.1)  # let some captures finish, cancel the others
            else:
                await asyncio.sleep(0.005)
        await bench.published(uri, edits + 1)
        elapsed = time.perf_counter() - started
        await asyncio.sleep(0.5)
        procs = descendants(bench.pid)
        after = {"server_kib": rss_kib(bench.pid), "zygote_kib": rss_kib(zygote)}
        return {
            "edits": edits,
            "seconds": elapsed,
            "before": before,
            "after": after,
            "zombies": sum(state == "Z" for _, state in procs),
            "processes_after": len(procs),
            "same_zygote": (await bench.stats()).workerPid == zygote,
        }
    finally:
        await bench.stop()


# -- report ---------------------------------------------------------------------------------


def ms(value: float) -> str:
    return f"{value * 1000:.1f}" if value < 0.1 else f"{value * 1000:.0f}"


def fmt(s: dict[str, float]) -> str:
    return f"{ms(s['min'])} / {ms(s['median'])} / {ms(s['max'])}"


def render(report: dict[str, Any], names: list[str]) -> str:
    m = report["machine"]
    load = report["load"]
    lines = [
        f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, Linux {m['kernel']}, "
        f"Python {m['python']}, torch {m['torch']}. Load average (1 min) at start / end: "
        f"{load['start'][0]:.2f} / {load['end'][0]:.2f}"
        + (" — shared and loaded; numbers are pessimistic." if load["start"][0] > 1.0 else "."),
        "",
        "| measure | result | goal |",
        "| --- | --- | --- |",
    ]
    hover = report["hover"]
    server, trip = hover["server_s"], hover["round_trip_s"]
    lines.append(
        f"| cached hover, server side (handler), p50 / p95 over {server['n']} | "
        f"{ms(server['p50'])} / {ms(server['p95'])} ms | p95 ≤ 5 ms: "
        f"{'met' if server['p95'] <= 0.005 else 'missed'} |"
    )
    lines.append(
        f"| cached hover, round trip, p50 / p95 over {trip['n']} | "
        f"{ms(trip['p50'])} / {ms(trip['p95'])} ms | — |"
    )
    for name in names:
        edit = report["edit"][name]["seconds"]
        floor = report["floor"][name]["seconds"]
        lines.append(
            f"| edit → diagnostics, {name} (min / median / max, {edit['n']} runs) | "
            f"{fmt(edit)} ms; in-process floor {fmt(floor)} ms; "
            f"{edit['median'] / floor['median']:.2f}× | — |"
        )
    cold = report["cold"]["seconds"]
    lines.append(
        f"| cold start → first diagnostics, cnn.py (min / median / max, {cold['n']} runs) | "
        f"{fmt(cold)} ms | ≤ 4000 ms: {'met' if cold['median'] <= 4.0 else 'missed'} |"
    )
    soak = report["soak"]
    b, a = soak["before"], soak["after"]
    lines.append(
        f"| {soak['edits']}-edit soak ({soak['seconds']:.1f} s): server RSS before → after | "
        f"{b['server_kib'] / 1024:.1f} → {a['server_kib'] / 1024:.1f} MiB; zygote "
        f"{b['zygote_kib'] / 1024:.0f} → {a['zygote_kib'] / 1024:.0f} MiB; zombies "
        f"{soak['zombies']}; same zygote: {soak['same_zygote']} | flat, 0 zombies |"
    )
    return "\n".join(lines)


async def run(args: argparse.Namespace, names: list[str]) -> dict[str, Any]:
    report: dict[str, Any] = {"machine": machine(), "load": {"start": os.getloadavg()}}
    report["hover"] = await bench_hover(args.hovers)
    report["edit"] = await bench_edits(names, args.runs)
    report["cold"] = await bench_cold(args.runs)
    report["soak"] = await bench_soak(args.edits)
    report["floor"] = {n: bench_floor(n, args.runs) for n in names}
    report["load"]["end"] = os.getloadavg()
    return report


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--hovers", type=int, default=500)
    parser.add_argument("--edits", type=int, default=500)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "lsp.json"))
    args = parser.parse_args()
    names = [n for n in args.models.split(",") if n]
    report = asyncio.run(run(args, names))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2))
    print(render(report, names))


if __name__ == "__main__":
    main()
