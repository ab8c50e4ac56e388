"""Zero-config benchmark: popular model files opened with no `# fxls:` directives.

Every file of tests/corpus/zeroconfig/ is opened twice, as it is, with default settings:

  engine - ``fxls.engine.analyze.analyze`` through a real ``WorkerClient`` (zygote, fork, sandbox), the
           same call the server makes. Each module class is checked against eager execution
           of the real model (``zeroconfig/truth.py`` says how a person builds and calls it;
           fxls never sees it): a class *has shapes* when any node shows a tensor shape; its
           shapes are *correct* when the output shapes shown equal an eager run on the inputs
           fxls reports (its own assumed sizes where they differ from the truth's) and no node
           shape is contradicted by eager results on the same source line or submodule call.
           A *wrong* shape is one eager execution contradicts.
  lsp    - a real client over stdio (``python -m fxls serve``, warm worker): didOpen -> first
           publishDiagnostics, the time a user waits; after it, inlay hints for the whole file
           and a hover on every class name say whether shapes are visible. The diagnostics the
           editor receives are counted by severity: every file runs, so each error is a false
           alarm.
  cold   - a new server process -> first publishDiagnostics of one file (``--cold-file``),
           next to the ``python -c "import torch"`` anchor measured in the same run.

Prints a per-class list, a per-file table and totals (markdown, for bench/BENCHMARKS.md);
``--json FILE`` writes everything.

Usage: .venv/bin/python bench/zero_config.py [--only nanogpt.py,mnist.py] [--json out.json]
       [--no-lsp] [--cold-runs 3] [--cold-file mobilenetv2.py]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import importlib.util
import json
import os
import re
import statistics
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from types import ModuleType
from typing import Any

from fxls.protocol.labels import strategy_label

ROOT = Path(__file__).resolve().parents[1]
ZEROCONFIG = ROOT / "tests" / "corpus" / "zeroconfig"
SHAPE = re.compile(r"\[[^\]]*\d[^\]]*\]|\[[A-Z]")
"""A shape in hover or hint text: ``[B, 1000]``, ``[2, 3]``."""


def load_truth() -> ModuleType:
    """``tests/corpus/zeroconfig/truth.py``, loaded by path (standard library at import)."""
    name = "zeroconfig_truth"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ZEROCONFIG / "truth.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


# -- engine pass ------------------------------------------------------------------------------


async def analyze_files(paths: list[Path], client: Any = None) -> dict[str, tuple[Any, float]]:
    """File name -> (FileAnalysis, seconds): each file as it is, default options (the server's
    defaults), workspace root = the repository. Starts (and closes) a WorkerClient unless one
    is given."""
    from fxls.engine.analyze import AnalysisRequest, EngineOptions, analyze
    from fxls.engine.workerclient import WorkerClient

    own = client is None
    if own:
        client = WorkerClient()
        await client.start()
    out: dict[str, tuple[Any, float]] = {}
    try:
        for path in paths:
            started = time.perf_counter()
            analysis = await analyze(
                client,
                AnalysisRequest(str(path), path.read_text(), root=str(ROOT)),
                options=EngineOptions(),
            )
            out[path.name] = (analysis, time.perf_counter() - started)
    finally:
        if own:
            await client.close()
    return out


def severity_counts(diagnostics: list[Any]) -> dict[str, int]:
    counts = collections.Counter(d.severity for d in diagnostics)
    return {k: counts.get(k, 0) for k in ("error", "warning", "information", "hint")}


def class_rows(truth: ModuleType, name: str, analysis: Any) -> list[dict[str, Any]]:
    """One row per module class of the file: what fxls shows, checked against eager truth."""
    rows = []
    for t in truth.by_file()[name]:
        mod = analysis.module(t.cls)
        row: dict[str, Any] = {"id": t.id, "file": name, "class": t.cls}
        if mod is None:
            row.update(status="missing", strategy="none", has_shapes=False, correct=False)
            row["wrong"] = []
            rows.append(row)
            continue
        verdict = truth.compare(t, mod)
        codes = sorted({d.code for d in mod.diagnostics if d.severity == "error"})
        row.update(
            status=mod.status,
            strategy=strategy_label(mod.strategy),
            build=mod.build,
            has_shapes=verdict.has_shapes,
            correct=verdict.correct,
            error_codes=codes,
            **{k: v for k, v in asdict(verdict).items() if k != "id"},
        )
        rows.append(row)
    return rows


def file_summary(rows: list[dict[str, Any]], analysis: Any) -> str:
    """What the file shows, in one line: ``FX401 on every class``, ``shapes on ResNet``..."""
    n = len(rows)
    shaped = [
        r["class"] + ("" if r.get("outputs_shown") else " (up to a failure, no output)")
        for r in rows
        if r["has_shapes"]
    ]
    errors = collections.Counter(d.code for d in analysis.diagnostics if d.severity == "error")
    parts = []
    if shaped:
        complete = all(r.get("outputs_shown") for r in rows)
        parts.append(
            "shapes on every class"
            if len(shaped) == n and complete and n > 1
            else "shapes on " + ", ".join(shaped)
        )
    else:
        parts.append("no shapes")
    for code, count in errors.most_common():
        flagged = {r["class"] for r in rows if code in r.get("error_codes", [])}
        spared = [r["class"] for r in rows if r["class"] not in flagged]
        if len(flagged) == n and n > 1:
            parts.append(f"{code} on every class")
        elif len(flagged) == count and n > 2 and len(spared) <= 2:
            parts.append(f"{code} on every class but " + ", ".join(spared))
        else:
            parts.append(f"{code} ×{count}")
    warnings = collections.Counter(d.code for d in analysis.diagnostics if d.severity == "warning")
    if warnings:
        parts.append(
            "warnings " + ", ".join(f"{code} ×{count}" for code, count in warnings.most_common())
        )
    wrong = [r["class"] for r in rows if r.get("wrong")]
    if wrong:
        parts.append("WRONG shapes on " + ", ".join(wrong))
    return "; ".join(parts)


# -- LSP pass ---------------------------------------------------------------------------------


class Editor:
    """A real LSP client (pytest-lsp) on ``python -m fxls serve`` over stdio, default settings,
    timestamping and keeping every publishDiagnostics."""

    def __init__(self) -> None:
        from lsprotocol import types
        from pytest_lsp.client import make_test_lsp_client

        self.types = types
        self.client = make_test_lsp_client()
        self.published: dict[tuple[str, int | None], tuple[float, list[Any]]] = {}
        self.arrived = asyncio.Event()
        features = self.client.protocol.fm.features

        def record(params: Any) -> None:
            key = (params.uri, params.version)
            self.published.setdefault(key, (time.perf_counter(), list(params.diagnostics)))
            self.arrived.set()

        features[types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS] = record
        for method in (types.WORKSPACE_INLAY_HINT_REFRESH, types.WORKSPACE_CODE_LENS_REFRESH):
            features[method] = lambda params: None

    async def start(self) -> float:
        from pytest_lsp import client_capabilities

        started = time.perf_counter()
        await self.client.start_io(sys.executable, "-m", "fxls", "serve")
        await self.client.initialize_session(
            self.types.InitializeParams(
                capabilities=client_capabilities("visual-studio-code"),
                root_uri=ROOT.as_uri(),
                initialization_options={},
            )
        )
        return started

    async def stop(self) -> None:
        try:
            await asyncio.wait_for(self.client.shutdown_session(), timeout=60)
        finally:
            await self.client.stop()

    def open(self, path: Path) -> tuple[str, float]:
        t = self.types
        uri = path.as_uri()
        sent = time.perf_counter()
        self.client.text_document_did_open(
            t.DidOpenTextDocumentParams(
                text_document=t.TextDocumentItem(
                    uri=uri, language_id="python", version=1, text=path.read_text()
                )
            )
        )
        return uri, sent

    def close(self, uri: str) -> None:
        t = self.types
        self.client.text_document_did_close(
            t.DidCloseTextDocumentParams(text_document=t.TextDocumentIdentifier(uri=uri))
        )

    async def wait(
        self, uri: str, version: int = 1, timeout: float = 300.0
    ) -> tuple[float, list[Any]]:
        deadline = time.monotonic() + timeout
        while (uri, version) not in self.published:
            self.arrived.clear()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no diagnostics for {uri}")
            try:
                await asyncio.wait_for(self.arrived.wait(), timeout=remaining)
            except asyncio.TimeoutError:
                pass
        return self.published[(uri, version)]

    async def shapes_visible(self, uri: str, text: str) -> tuple[int, list[str]]:
        """(inlay hints that show a shape, classes whose name hover shows a shape)."""
        t = self.types
        lines = text.split("\n")
        whole = t.Range(t.Position(0, 0), t.Position(len(lines), 0))
        hints = await self.client.text_document_inlay_hint_async(
            t.InlayHintParams(text_document=t.TextDocumentIdentifier(uri=uri), range=whole)
        )
        shaped_hints = 0
        for hint in hints or []:
            label = (
                hint.label if isinstance(hint.label, str) else "".join(p.value for p in hint.label)
            )
            shaped_hints += bool(SHAPE.search(label))
        classes = []
        for number, line in enumerate(lines):
            m = re.match(r"class\s+(\w+)", line)
            if m is None:
                continue
            hover = await self.client.text_document_hover_async(
                t.HoverParams(
                    text_document=t.TextDocumentIdentifier(uri=uri),
                    position=t.Position(number, m.start(1) + 1),
                )
            )
            value = getattr(getattr(hover, "contents", None), "value", "") if hover else ""
            if SHAPE.search(value or ""):
                classes.append(m.group(1))
        return shaped_hints, classes


_LSP_SEVERITY = {1: "error", 2: "warning", 3: "information", 4: "hint"}


async def lsp_pass(paths: list[Path]) -> dict[str, dict[str, Any]]:
    """Warm server: each file opened, waited for, looked at, closed."""
    editor = Editor()
    await editor.start()
    out: dict[str, dict[str, Any]] = {}
    try:
        # warm-up: the worker is started and the file cache filled before the first timing
        warm = ROOT / "docs" / "examples" / "cnn.py"
        uri, _ = editor.open(warm)
        await editor.wait(uri)
        editor.close(uri)
        for path in paths:
            uri, sent = editor.open(path)
            arrived, diagnostics = await editor.wait(uri)
            hints, classes = await editor.shapes_visible(uri, path.read_text())
            editor.close(uri)
            counts = collections.Counter(
                _LSP_SEVERITY.get(int(d.severity or 1), "error") for d in diagnostics
            )
            out[path.name] = {
                "publish_s": arrived - sent,
                "shape_hints": hints,
                "classes_with_shape_hover": classes,
                "first_shapes_s": (arrived - sent) if (hints or classes) else None,
                "diagnostics": {
                    k: counts.get(k, 0) for k in ("error", "warning", "information", "hint")
                },
            }
    finally:
        await editor.stop()
    return out


async def cold_start(path: Path, runs: int) -> dict[str, Any]:
    """New server process -> first publishDiagnostics of ``path`` (and whether shapes show)."""
    samples, shapes = [], []
    for _ in range(runs):
        editor = Editor()
        started = await editor.start()
        try:
            uri, _ = editor.open(path)
            arrived, _ = await editor.wait(uri)
            samples.append(arrived - started)
            hints, classes = await editor.shapes_visible(uri, path.read_text())
            shapes.append(bool(hints or classes))
        finally:
            await editor.stop()
    return {"file": path.name, "seconds": _stats(samples), "shapes": all(shapes)}


def import_torch_anchor(runs: int = 3) -> dict[str, float]:
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import torch"], check=True)
        samples.append(time.perf_counter() - started)
    return _stats(samples)


def _stats(samples: list[float]) -> dict[str, float]:
    return {
        "min": min(samples),
        "median": statistics.median(samples),
        "max": max(samples),
        "n": len(samples),
    }


# -- report -----------------------------------------------------------------------------------


def _ms(seconds: float | None) -> str:
    return "—" if seconds is None else f"{seconds * 1000:.0f}"


def render(report: dict[str, Any]) -> str:
    files = report["files"]
    lines = [
        "| file | classes | with shapes | correct | wrong | errors | warnings | info "
        "| first shapes, ms | what it shows |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for name, f in files.items():
        lsp = f.get("lsp") or {}
        diag = lsp.get("diagnostics") or f["diagnostics"]
        lines.append(
            f"| `{name}` | {f['classes']} | {f['with_shapes']} | {f['correct']} | {f['wrong']} "
            f"| {diag['error']} | {diag['warning']} | {diag['information']} "
            f"| {_ms(lsp.get('first_shapes_s'))} | {f['summary']} |"
        )
    tot = report["total"]
    lines.append(
        f"| **all {len(files)} files** | **{tot['classes']}** | **{tot['with_shapes']} "
        f"({tot['with_shapes_pct']:.0f} %)** | **{tot['correct']}** | **{tot['wrong']}** "
        f"| **{tot['errors']}** | **{tot['warnings']}** | **{tot['information']}** "
        f"| {tot['files_with_shapes']} files | goal (issue #9): ≥ 90 % with shapes, 0 errors |"
    )
    return "\n".join(lines)


def summarize(report: dict[str, Any]) -> dict[str, Any]:
    rows = report["classes"]
    files = report["files"]
    diag_source = [
        (f.get("lsp") or {}).get("diagnostics") or f["diagnostics"] for f in files.values()
    ]
    with_shapes = sum(r["has_shapes"] for r in rows)
    first = [
        f["lsp"]["first_shapes_s"]
        for f in files.values()
        if f.get("lsp") and f["lsp"]["first_shapes_s"] is not None
    ]
    return {
        "classes": len(rows),
        "with_shapes": with_shapes,
        "with_shapes_pct": 100 * with_shapes / max(len(rows), 1),
        "correct": sum(r["correct"] for r in rows),
        "wrong": sum(bool(r.get("wrong")) for r in rows),
        "errors": sum(d["error"] for d in diag_source),
        "warnings": sum(d["warning"] for d in diag_source),
        "information": sum(d["information"] for d in diag_source),
        "files_with_shapes": sum(f["with_shapes"] > 0 for f in files.values()),
        "first_shapes_s": _stats(first) if first else None,
        "engine_s": sum(f["engine_s"] for f in files.values()),
    }


def machine() -> dict[str, Any]:
    sys.path.insert(0, str(ROOT / "bench"))
    from engine_bench import machine as describe

    return describe()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--only", help="comma-separated file names of tests/corpus/zeroconfig")
    parser.add_argument("--json", help="write the full report to this file")
    parser.add_argument("--no-lsp", action="store_true", help="engine pass only")
    parser.add_argument("--cold-runs", type=int, default=3)
    parser.add_argument("--cold-file", default="mobilenetv2.py")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    truth = load_truth()
    paths = truth.files()
    if args.only:
        wanted = set(args.only.split(","))
        paths = [p for p in paths if p.name in wanted]

    report: dict[str, Any] = {"machine": machine(), "load": {"start": os.getloadavg()}}
    report["date"] = time.strftime("%Y-%m-%d")
    analyses = asyncio.run(analyze_files(paths))
    lsp = {} if args.no_lsp else asyncio.run(lsp_pass(paths))
    report["classes"] = []
    report["files"] = {}
    for path in paths:
        analysis, seconds = analyses[path.name]
        rows = class_rows(truth, path.name, analysis)
        report["classes"].extend(rows)
        report["files"][path.name] = {
            "classes": len(rows),
            "with_shapes": sum(r["has_shapes"] for r in rows),
            "correct": sum(r["correct"] for r in rows),
            "wrong": sum(bool(r.get("wrong")) for r in rows),
            "diagnostics": severity_counts(analysis.diagnostics),
            "engine_s": seconds,
            "outcome": analysis.outcome,
            "summary": file_summary(rows, analysis),
            "lsp": lsp.get(path.name),
        }
    if not args.no_lsp and args.cold_runs > 0:
        report["cold"] = asyncio.run(cold_start(ZEROCONFIG / args.cold_file, args.cold_runs))
    report["import_torch_s"] = import_torch_anchor()
    report["load"]["end"] = os.getloadavg()
    report["total"] = summarize(report)

    for r in report["classes"]:
        mark = (
            "WRONG"
            if r.get("wrong")
            else ("ok   " if r["correct"] else ("shape" if r["has_shapes"] else "-    "))
        )
        codes = ",".join(r.get("error_codes", []))
        print(f"{mark} {r['id']:<42} {r['strategy']:<16} {codes:<12} {r.get('inputs', '')[:70]}")
        for w in r.get("wrong", []):
            print(f"        {w[:200]}")
    print()
    m = report["machine"]
    print(
        f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, Linux {m['kernel']}, "
        f"Python {m['python']}, torch {m['torch']}; load (1 min) {report['load']['start'][0]:.2f} "
        f"/ {report['load']['end'][0]:.2f}; {report['date']}"
    )
    print()
    print(render(report))
    tot = report["total"]
    print()
    if tot["first_shapes_s"]:
        s = tot["first_shapes_s"]
        print(
            f"Warm didOpen -> first shapes (files that show any): min / median / max "
            f"{_ms(s['min'])} / {_ms(s['median'])} / {_ms(s['max'])} ms over {s['n']} files"
        )
    if "cold" in report:
        c = report["cold"]["seconds"]
        print(
            f"Cold (new server) -> first diagnostics of {report['cold']['file']}: "
            f"{_ms(c['min'])} / {_ms(c['median'])} / {_ms(c['max'])} ms "
            f"(shapes visible: {report['cold']['shapes']})"
        )
    a = report["import_torch_s"]
    print(
        f'Anchor `python -c "import torch"`: {_ms(a["min"])} / {_ms(a["median"])} / {_ms(a["max"])} ms'
    )
    print(f"Engine pass: {tot['engine_s']:.1f} s for {len(paths)} files")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2, default=str))


if __name__ == "__main__":
    main()
