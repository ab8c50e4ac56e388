"""The first shapes a user sees after opening a file, measured from a new server process, next
to the anchor measured in the same run (``python -c "import torch"``). Numbers are recorded,
not asserted.

  stored    - a new server -> the first diagnostics of a file whose analysis an earlier session
              stored (fxls.storeResults), and -> the worker's own diagnostics after them;
  fresh     - the same with an empty store: the first shapes (inlay hints, asked for at each
              inlay-hint refresh and publish) are a preview job's (fxls.preliminaryShapes: one
              run on meta tensors at example sizes, before the worker has imported
              torch._dynamo; shown with a refresh, no publish), then the first diagnostics the
              capture's; and the same with fxls.preliminaryShapes off;
  workspace - a new server on a workspace of N generated Python files -> the first diagnostics
              of one model file in it, next to the same file alone in a folder (the first
              capture must not wait for the workspace to be read).

Usage: .venv/bin/python bench/first_results.py [--runs 5] [--files 4000] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from lsprotocol import types
from pytest_lsp import LanguageClient, client_capabilities
from pytest_lsp.client import make_test_lsp_client

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine_bench import machine, stats

ROOT = Path(__file__).resolve().parents[1]
SERVER = [sys.executable, "-m", "fxls", "serve"]
MODEL = ROOT / "docs" / "examples" / "cnn.py"
FILLER = "".join(f"def f{i}(x):\n    return helper(x, {i}, key='k{i}')\n\n" for i in range(40))


def import_torch() -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import torch"], check=True)
    return time.perf_counter() - started


async def first_publishes(
    root: Path, path: Path, env: dict[str, str], count: int, options: dict[str, Any] | None = None
) -> tuple[float, list[float]]:
    """Seconds from starting a server to the first shapes of ``path`` (the first inlay-hint
    or code-lens refresh or publish after which the inlay hints of the file are not empty:
    preliminary shapes come with a refresh and no publish), and to each of its first ``count`` publishes."""
    client: LanguageClient = make_test_lsp_client()
    arrivals: list[float] = []
    events: list[float] = []
    uri = path.as_uri()
    features = client.protocol.fm.features

    def record(params: types.PublishDiagnosticsParams) -> None:
        if params.uri == uri:
            arrivals.append(time.perf_counter())
            events.append(arrivals[-1])

    features[types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS] = record
    for method in (types.WORKSPACE_INLAY_HINT_REFRESH, types.WORKSPACE_CODE_LENS_REFRESH):
        # pytest-lsp's VS Code capabilities refresh code lenses only (VS Code both)
        features[method] = lambda params: events.append(time.perf_counter())
    saved = dict(os.environ)
    os.environ.update(env)
    try:
        started = time.perf_counter()
        await client.start_io(*SERVER)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    try:
        await client.initialize_session(
            types.InitializeParams(
                capabilities=client_capabilities("visual-studio-code"),
                root_uri=root.as_uri(),
                initialization_options={"debounceMs": 0, **(options or {})},
            )
        )
        client.text_document_did_open(
            types.DidOpenTextDocumentParams(
                text_document=types.TextDocumentItem(
                    uri=uri, language_id="python", version=1, text=path.read_text()
                )
            )
        )
        deadline = time.monotonic() + 300
        shapes: float | None = None
        seen = 0
        while (len(arrivals) < count or shapes is None) and time.monotonic() < deadline:
            if shapes is None and len(events) > seen:
                seen = len(events)
                if await _hints(client, uri):
                    shapes = events[seen - 1]
            await asyncio.sleep(0.01)
        if shapes is None:
            raise RuntimeError(f"no shapes for {path.name}")
        stored = Path(env.get("XDG_CACHE_HOME", "-")) / "fxls" / "results"
        while env.get("FXLS_STORE") == "1" and time.monotonic() < deadline:
            if list(stored.glob("*.json")):  # written after the compile check: wait for it
                break
            await asyncio.sleep(0.05)
        return shapes - started, [t - started for t in arrivals[:count]]
    finally:
        await asyncio.wait_for(client.shutdown_session(), timeout=60)
        await client.stop()


async def _hints(client: LanguageClient, uri: str) -> list[types.InlayHint]:
    found = await client.text_document_inlay_hint_async(
        types.InlayHintParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            range=types.Range(types.Position(0, 0), types.Position(10_000, 0)),
        )
    )
    return list(found or [])


async def bench_store(runs: int, scratch: Path) -> dict[str, Any]:
    folder = scratch / "store"
    folder.mkdir()
    model = folder / MODEL.name
    shutil.copy(MODEL, model)
    cache = scratch / "cache"
    env = {"FXLS_STORE": "1", "XDG_CACHE_HOME": str(cache)}
    fresh, captured, plain, plain_shapes, stored, confirmed = [], [], [], [], [], []
    off = {"preliminaryShapes": False}
    for _ in range(runs):
        shutil.rmtree(cache, ignore_errors=True)
        shapes, (first,) = await first_publishes(folder, model, {**env, "FXLS_STORE": "0"}, 1, off)
        plain.append(first)
        plain_shapes.append(shapes)
        shapes, (capture,) = await first_publishes(folder, model, env, 1)
        fresh.append(shapes)
        captured.append(capture)
        shapes, (shown, replaced) = await first_publishes(folder, model, env, 2)
        stored.append(shown)
        confirmed.append(replaced)
    return {
        "fresh": stats(fresh),
        "fresh_captured": stats(captured),
        "fresh_without_preliminary": stats(plain),
        "fresh_without_preliminary_shapes": stats(plain_shapes),
        "stored": stats(stored),
        "confirmed": stats(confirmed),
    }


async def bench_workspace(runs: int, files: int, scratch: Path) -> dict[str, Any]:
    alone = scratch / "alone"
    alone.mkdir()
    shutil.copy(MODEL, alone / MODEL.name)
    big = scratch / "big"
    big.mkdir()
    shutil.copy(MODEL, big / MODEL.name)
    for i in range(files):
        folder = big / f"pkg{i // 200}"
        folder.mkdir(exist_ok=True)
        (folder / f"mod{i}.py").write_text(FILLER)
    env = {"FXLS_STORE": "0"}
    small, large = [], []
    for _ in range(runs):
        small.extend((await first_publishes(alone, alone / MODEL.name, env, 1))[1])
        large.extend((await first_publishes(big, big / MODEL.name, env, 1))[1])
    return {"files": files, "alone": stats(small), "in_workspace": stats(large)}


def render(report: dict[str, Any]) -> str:
    m, load = report["machine"], report["load"]
    anchor = report["import_torch"]["median"]
    lines = [
        f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, Python {m['python']}, "
        f"torch {m['torch']}. Load average (1 min) at start / end: {load['start'][0]:.2f} / "
        f"{load['end'][0]:.2f}.",
        "",
        "| measure (median of runs) | seconds | × `import torch` |",
        "| --- | --- | --- |",
        f'| `python -c "import torch"` (the anchor) | {anchor:.2f} | 1.00 |',
    ]
    for label, key in (
        ("new server → first shapes, empty store (preliminary)", ("store", "fresh")),
        (
            "new server → first diagnostics, empty store (the capture's)",
            ("store", "fresh_captured"),
        ),
        (
            "new server → first shapes, empty store, `fxls.preliminaryShapes` off",
            ("store", "fresh_without_preliminary_shapes"),
        ),
        (
            "new server → first diagnostics, empty store, `fxls.preliminaryShapes` off",
            ("store", "fresh_without_preliminary"),
        ),
        ("new server → first diagnostics, stored analysis", ("store", "stored")),
        ("new server → the worker's diagnostics after the stored ones", ("store", "confirmed")),
        ("new server → first diagnostics, file alone in a folder", ("workspace", "alone")),
        (
            f"new server → first diagnostics, file in {report['workspace']['files']} files",
            ("workspace", "in_workspace"),
        ),
    ):
        value = report[key[0]][key[1]]["median"]
        lines.append(f"| {label} | {value:.2f} | {value / anchor:.2f} |")
    return "\n".join(lines)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    report: dict[str, Any] = {"machine": machine(), "load": {"start": os.getloadavg()}}
    report["import_torch"] = stats([import_torch() for _ in range(args.runs)])
    with tempfile.TemporaryDirectory() as scratch:
        report["store"] = await bench_store(args.runs, Path(scratch))
        report["workspace"] = await bench_workspace(args.runs, args.files, Path(scratch))
    report["load"]["end"] = os.getloadavg()
    return report


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--files", type=int, default=4000)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "first_results.json"))
    args = parser.parse_args()
    report = asyncio.run(run(args))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2))
    print(render(report))


if __name__ == "__main__":
    main()
