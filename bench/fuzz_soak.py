"""A long fuzzing run against the real server: random editing sessions until N messages.

The same operations and checks as tests/e2e/test_fuzz.py (which runs a bounded version in
CI), driven by a seeded ``random.Random`` instead of hypothesis so that a long run is cheap
and repeatable. Reports the number of messages, failed checks (with the first few), error
messages the server showed or logged, whether it still answers, and the time taken.

Usage: .venv/bin/python bench/fuzz_soak.py [--messages 10000] [--seed 0] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from lsprotocol import types
from pytest_lsp import client_capabilities
from pytest_lsp.client import make_test_lsp_client

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
from test_fuzz import FAST, FIXTURES, FRAGMENTS, Doc, Session, check_publishes, run_operation  # noqa: E402

SERVER = [sys.executable, "-m", "fxls", "serve"]


def random_ops(rng: random.Random, count: int) -> list[tuple[Any, ...]]:
    """Operations with the distribution of test_fuzz's strategy."""
    ops: list[tuple[Any, ...]] = []
    for _ in range(count):
        kind = rng.choice(["change"] * 4 + ["hover", "hints", "lens", "reopen", "check", "wait"])
        small = [rng.randint(0, 200) for _ in range(3)]
        if kind == "change":
            text = "".join(rng.choice(FRAGMENTS) for _ in range(rng.randint(0, 6)))
            ops.append(("change", small[0], small[1], rng.randint(0, 3), small[2], text))
        elif kind in ("hover", "hints"):
            ops.append((kind, small[0], small[1]))
        elif kind == "wait":
            ops.append(("wait", rng.randint(0, 60)))
        else:
            ops.append((kind,))
    if rng.random() < 0.2:
        ops.append(("settle",))
    return ops


async def soak(messages: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    client = make_test_lsp_client()
    await client.start_io(*SERVER)
    session = Session(client)
    session.install()
    await client.initialize_session(
        types.InitializeParams(
            capabilities=client_capabilities("visual-studio-code"),
            root_uri=FIXTURES.as_uri(),
            initialization_options=FAST,
        )
    )
    failures: list[str] = []
    sessions = 0
    started = time.perf_counter()
    try:
        warm = Doc(session)
        warm.do_open()
        await warm.settle(timeout=120)
        warm.do_close()
        started = time.perf_counter()
        while session.messages < messages:
            doc = Doc(session)
            sessions += 1
            try:
                doc.do_open()
                for op in random_ops(rng, rng.randint(1, 40)):
                    await run_operation(doc, op)
                await doc.check_text()
                doc.do_close()
                await doc.check_text()
                check_publishes(session, doc.uri)
            except Exception as exc:
                failures.append(f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}")
                if doc.open:
                    doc.do_close()
        elapsed = time.perf_counter() - started
        await asyncio.sleep(0.3)
        final = Doc(session, (FIXTURES / "shape_error.py").read_text())
        final.do_open()
        await final.settle()
        lines = final.text.split("\n")
        line = next(i for i, s in enumerate(lines) if "self.fc(x)" in s)
        hover = await client.text_document_hover_async(
            types.HoverParams(
                text_document=types.TextDocumentIdentifier(uri=final.uri),
                position=types.Position(line=line, character=lines[line].index("self.fc") + 5),
            )
        )
        answers = hover is not None and "→" in str(hover.contents)
    finally:
        await asyncio.wait_for(client.shutdown_session(), timeout=60)
        await client.stop()
    return {
        "messages": session.messages,
        "sessions": sessions,
        "seconds": elapsed,
        "messages_per_s": session.messages / elapsed,
        "failed_checks": len(failures),
        "first_failures": failures[:5],
        "server_errors": session.errors(),
        "still_answers": answers,
        "publishes": sum(kind == "publish" for kind, _ in session.events),
        "load": os.getloadavg(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "fuzz_soak.json"))
    args = parser.parse_args()
    report = asyncio.run(soak(args.messages, args.seed))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2))
    print(
        f"{report['messages']} messages in {report['sessions']} sessions, "
        f"{report['seconds']:.1f} s ({report['messages_per_s']:.0f}/s); "
        f"failed checks: {report['failed_checks']}; server errors: "
        f"{len(report['server_errors'])}; diagnostics published: {report['publishes']}; "
        f"still answers a hover: {report['still_answers']}; load {report['load'][0]:.2f}"
    )
    for failure in report["first_failures"]:
        print("\n" + failure)
    sys.exit(0 if report["still_answers"] and not report["failed_checks"] else 1)


if __name__ == "__main__":
    main()
