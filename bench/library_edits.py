"""An edit inside one class of an installed library's model file, through a real LSP client.

What someone reading transformers' code feels: the file is opened from site-packages (it runs
as its module, `transformers.models.llama.modeling_llama`), the worker is warm (its warm-up
finished), and each edit inserts a new line of code at the top of the class's `forward`
(`_edit = N`, a new N each time, so no cache answers); the unit the edit captures is the class,
its parents (the base model and every head) and its children. Measured: didChange ->
publishDiagnostics for that version, debounce 0, the compile check off (as in depth_sweep.py).

With `--before` the same edits go to a server of another fxls checkout too (PYTHONPATH), the
two alternating file by file, round by round.

Usage: .venv/bin/python bench/library_edits.py [--runs 8] [--rounds 2]
       [--before /path/to/other/checkout] [--out FILE]
       [--case transformers/models/llama/modeling_llama.py:LlamaMLP ...]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from depth_sweep import _server
from engine_bench import machine
from lsp_bench import Bench

ROOT = Path(__file__).resolve().parents[1]
CASES = [
    "transformers/models/gpt2/modeling_gpt2.py:GPT2MLP",
    "transformers/models/llama/modeling_llama.py:LlamaMLP",
    "transformers/models/bert/modeling_bert.py:BertIntermediate",
]
"""`library/path/inside/it.py:Class`: the file, and the class whose forward is edited."""


def case_file(case: str) -> tuple[Path, str]:
    """The installed file of ``case`` and the class to edit."""
    relative, cls = case.rsplit(":", 1)
    library, inside = relative.split("/", 1)
    package = importlib.import_module(library)
    assert package.__file__ is not None
    return Path(package.__file__).parent / inside, cls


def forward_body(lines: list[str], cls: str) -> tuple[int, str]:
    """The first line of the body of ``cls``'s ``forward`` (0-based) and its indentation."""
    start = next(i for i, line in enumerate(lines) if re.match(rf"class {cls}\b", line))
    at = next(i for i in range(start, len(lines)) if re.match(r"\s+def forward\(", lines[i]))
    while not lines[at].rstrip().endswith(":"):
        at += 1
    body = at + 1
    indent = re.match(r"\s*", lines[body])
    return body, indent.group(0) if indent else "        "


async def edits(bench: Bench, path: Path, cls: str, runs: int, first: int) -> list[float]:
    """``runs`` edits of ``cls`` in a server that has ``path`` open at ``first``; ms each."""
    text = path.read_text()
    uri = bench.open(path, text)
    await bench.published(uri, 1, 600)
    await bench.warmed()
    line, indent = forward_body(text.splitlines(), cls)
    spent = []
    for n in range(runs):
        version = n + 2
        bench.change(uri, version, line, f"{indent}_edit = {first + n}\n")
        started = time.perf_counter()
        await bench.published(uri, version, 600)
        spent.append((time.perf_counter() - started) * 1000)
        await asyncio.sleep(0.3)
    return spent


async def one(case: str, runs: int, pythonpath: str | None, first: int) -> list[float]:
    path, cls = case_file(case)
    bench = await _server(True, pythonpath)
    try:
        return await edits(bench, path, cls, runs, first)
    finally:
        await bench.stop()


async def run(args: argparse.Namespace) -> dict[str, Any]:
    variants = {"this": str(ROOT)}
    if args.before:
        variants["before"] = args.before
    found: dict[str, dict[str, list[float]]] = {}
    for round_ in range(args.rounds):
        for case in args.case or CASES:
            for name, pythonpath in variants.items():
                spent = await one(case, args.runs, pythonpath, round_ * 1000)
                found.setdefault(case, {}).setdefault(name, []).extend(spent)
                print(f"round {round_ + 1} {name} {case}: {min(spent):.0f} ms", flush=True)
    return {"machine": machine(), "runs": args.runs, "rounds": args.rounds, "edits": found}


def render(report: dict[str, Any]) -> str:
    names = list(next(iter(report["edits"].values())))
    head = " | ".join(f"{n} min / median ms" for n in names)
    lines = [f"| file : class | {head} |", "| --- |" + " ---: |" * len(names)]
    for case, by_name in report["edits"].items():
        cells = []
        for name in names:
            spent = sorted(by_name[name])
            cells.append(f"{spent[0]:.0f} / {spent[len(spent) // 2]:.0f}")
        lines.append(f"| {case} | {' | '.join(cells)} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--case", action="append", help="library/path.py:Class (repeatable)")
    parser.add_argument("--before", help="a server of the fxls in this folder too, alternating")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "library_edits.json"))
    args = parser.parse_args()
    here = os.getcwd()
    # `python -m fxls` imports the fxls of its working folder first: the servers start in a
    # folder of their own, so each takes the checkout its PYTHONPATH names
    with tempfile.TemporaryDirectory(prefix="fxls-library-edits-") as folder:
        os.chdir(folder)
        try:
            report = asyncio.run(run(args))
        finally:
            os.chdir(here)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2))
    print(report["machine"])
    print(render(report))


if __name__ == "__main__":
    main()
