"""Capture coverage of the model corpus (tests/corpus) through the real worker.

For every entry of ``tests/corpus/manifest.py`` it runs ``fxls.engine.analyze.analyze`` through a real
``WorkerClient`` (zygote, fork, sandbox; the entry's constructor text and inputs are passed as
CLI-style overrides), then:

- runs the module eagerly on small real CPU inputs (``manifest.eager_outputs``) and compares the
  captured output shapes/dtypes (symbols replaced by the example sizes) with it;
- for every module whose plain ``fx`` strategy failed (a repair, the fake-run, or nothing), checks
  that an FX1xx diagnostic is located on a line of the file inside the class's code or a
  function it calls (``located``) and names a specific cause, not the generic FX199
  (``explained``), and counts fix texts.

Prints a markdown table (for bench/BENCHMARKS.md) and, with ``--json FILE``, the raw rows.

Usage: .venv/bin/python bench/corpus_coverage.py [--only gpt.py,misc.py] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import importlib.util
import json
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SPECIFIC = {f"FX10{i}" for i in range(1, 8)}
"""FX1xx codes that name the cause (FX199 is the generic "tracing failed")."""


def _manifest() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "corpus_manifest", ROOT / "tests" / "corpus" / "manifest.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["corpus_manifest"] = module
    spec.loader.exec_module(module)
    return module


async def _capture(entries: list[Any], manifest: ModuleType) -> list[tuple[Any, Any, float]]:
    from fxls.engine.analyze import AnalysisRequest, EngineOptions, analyze
    from fxls.engine.workerclient import WorkerClient
    from fxls.protocol.model import Limits

    options = EngineOptions(limits=Limits(timeout_s=120.0, cpu_s=120.0, memory_mb=4096))
    client = WorkerClient()
    await client.start()
    out = []
    try:
        for entry in entries:
            job = manifest.capture_job(entry)
            request = job.classes[0]
            started = time.perf_counter()
            analysis = await analyze(
                client,
                AnalysisRequest(
                    str(entry.path),
                    entry.source(),
                    only=[entry.cls],
                    extra_inputs={entry.cls: request.inputs},
                    init_override={entry.cls: entry.init} if entry.init else None,
                ),
                options=options,
            )
            out.append((entry, analysis, time.perf_counter() - started))
    finally:
        await client.close()
    return out


def _row(entry: Any, analysis: Any, seconds: float, manifest: ModuleType) -> dict[str, Any]:
    mod = analysis.module(entry.cls)
    row: dict[str, Any] = {"id": entry.id, "seconds": round(seconds, 2)}
    if mod is None:
        row.update(capture="none", status="missing", correct=False, fx_failed=True)
        row.update(located=False, explained=False, fix=False, reason=analysis.outcome)
        return row
    row["capture"] = mod.strategy
    row["status"] = mod.status
    try:
        eager = manifest.eager_outputs(entry)
        captured = manifest.captured_outputs(mod.outputs, entry.sizes())
        row["correct"] = bool(mod.outputs) and captured == eager
        if not row["correct"]:
            row["reason"] = f"captured {captured} vs eager {eager}"
    except Exception as exc:  # a symbolic dim that does not evaluate, an eager failure
        row["correct"] = False
        row["reason"] = f"{type(exc).__name__}: {exc}"
    fx1 = [
        d for d in mod.diagnostics if d.code.startswith("FX1") and d.code not in ("FX108", "FX109")
    ]
    # a failure of the plain strategy: a repair made after an exception, or no FX graph at all
    # (``fx+concrete`` alone can also come from a None default used as a tensor: no failure)
    row["fx_failed"] = bool(fx1) or mod.strategy in ("fake-run", "none")
    n_lines = len(entry.source().splitlines())
    located = [d for d in fx1 if 1 <= d.span.line <= n_lines]
    row["fx_codes"] = sorted({f"{d.code}:{d.span.line}" for d in fx1})
    row["located"] = bool(located)
    row["explained"] = any(d.code in SPECIFIC for d in located)
    row["fix"] = any(d.fix for d in located)
    if entry.fx_at:
        try:
            marker = entry.marker_line(entry.fx_at)
            row["plain_fx_marker"] = any(
                d.code == entry.fx_at and d.span.line == marker for d in fx1
            )
        except LookupError:
            row["plain_fx_marker"] = None
    return row


def _table(rows: list[dict[str, Any]]) -> str:
    lines = ["| strategy | modules | correct shapes |", "|---|---:|---:|"]
    by = collections.defaultdict(list)
    for r in rows:
        by[r["capture"]].append(r)
    order = ["fx", "fx+leaf", "fx+wrap", "fx+concrete", "fake-run"]
    for key in order + sorted(k for k in by if k not in order):
        if key in by:
            group = by[key]
            lines.append(f"| {key} | {len(group)} | {sum(r['correct'] for r in group)} |")
    correct = sum(r["correct"] for r in rows)
    lines.append(
        f"| **all** | **{len(rows)}** | **{correct} ({100 * correct / max(len(rows), 1):.1f} %)** |"
    )
    failed = [r for r in rows if r["fx_failed"]]
    n = max(len(failed), 1)
    located = sum(r["located"] for r in failed)
    explained = sum(r["explained"] for r in failed)
    fix = sum(r["fix"] for r in failed)
    lines += [
        "",
        "| FX failures (plain `fx` strategy failed) | count | share |",
        "|---|---:|---:|",
        f"| modules | {len(failed)} | |",
        f"| located FX1xx diagnostic in the file | {located} | {100 * located / n:.0f} % |",
        f"| explained (specific FX101-FX107, not FX199) | {explained} | {100 * explained / n:.0f} % |",
        f"| with a fix text | {fix} | {100 * fix / n:.0f} % |",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="comma-separated corpus file names")
    parser.add_argument("--json", help="write the rows to this file")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    manifest = _manifest()
    entries = manifest.entries()
    if args.only:
        files = set(args.only.split(","))
        entries = [e for e in entries if e.file in files]
    started = time.perf_counter()
    results = asyncio.run(_capture(entries, manifest))
    rows = [_row(entry, analysis, s, manifest) for entry, analysis, s in results]
    for r in rows:
        mark = "ok " if r["correct"] else "BAD"
        extra = "" if r["correct"] else f"  ({r.get('reason', '')[:140]})"
        codes = ",".join(r.get("fx_codes", []))
        print(f"{mark} {r['id']:<40} {r['capture']:<12} {r['seconds']:>6.2f}s {codes}{extra}")
    print()
    print(_table(rows))
    print(f"\n{len(rows)} entries in {time.perf_counter() - started:.1f} s (through the worker)")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
