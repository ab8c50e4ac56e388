"""A stand-in for the language server: runs noisy jobs through WorkerClient.

Its stdout must contain exactly one line, the JSON report printed at the end; everything the
zygote or a job writes must go elsewhere (the JSON-RPC stream of the real server is stdout).
Usage: python noisy_jobs.py SCRATCH_DIR
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

from fxls.engine.workerclient import WorkerClient
from fxls.protocol.model import CaptureJob

FAKE_RPC = 'Content-Length: 40\\r\\n\\r\\n{"jsonrpc":"2.0","method":"fake","id":1}'
JOBS = [
    "print('x' * 50_000_000)",
    "import ctypes, os\n"
    "libc = ctypes.CDLL(None)\n"
    f"libc.puts(b'{FAKE_RPC}')\n"
    f"os.write(1, b'{FAKE_RPC}')\n"
    "os.write(2, b'stderr noise\\n')\n",
    "import sys\nsys.__stdout__.write('to the original stdout\\n')\n"
    "print('x', file=sys.__stderr__)",
    "import ctypes\nctypes.string_at(0)",
]


def _children(pid: int) -> set[int]:
    found: set[int] = set()
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/children") as f:
            found.update(int(p) for p in f.read().split())
    return found


async def main(scratch: str) -> None:
    client = WorkerClient(log=lambda line: print(line, file=sys.stderr), scratch_dir=scratch)
    await client.start()
    results = [await client.run(CaptureJob(path="noisy.py", source=code)) for code in JOBS]

    # close() while a job runs: the job ends and its process is gone afterwards.
    zygote = client.pid
    sleeper = asyncio.ensure_future(
        client.run(CaptureJob("sleep.py", "import time\ntime.sleep(60)"))
    )
    children: set[int] = set()
    for _ in range(200):
        await asyncio.sleep(0.05)
        children = _children(zygote or 0)
        if children:
            break
    await client.close()
    pending = await sleeper
    report = {
        "kinds": [r.kind for r in results],
        "output_bytes": [r.output_bytes for r in results],
        "heads": [r.output_head[:200] for r in results],
        "close": {
            "had_child": bool(children),
            "pending_kind": pending.kind,
            "survivors": [
                pid for pid in children | {zygote or 0} if os.path.exists(f"/proc/{pid}")
            ],
            "state": client.state,
        },
    }
    sys.stdout.write(json.dumps(report) + "\n")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
