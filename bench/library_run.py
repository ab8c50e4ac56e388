"""Library benchmark: model files of installed libraries, checked with no directives.

Each file is checked by ``fxls check --json`` as CI would, in the interpreter that has the
libraries (``--python``), straight from its site-packages: the file runs as its module
(``transformers.models.llama.modeling_llama``). Per file: the ``nn.Module`` classes with a
``forward`` of their own, how many show output shapes, error and warning diagnostics, and
the wall time of the check (one new worker per file, so it includes the worker's start).

Make the interpreter once (the versions are the ones BENCHMARKS.md reports):

    python3 -m venv /tmp/libs && /tmp/libs/bin/pip install torch==2.13.0 \\
        transformers==5.22.2 diffusers==0.42.1

Usage: .venv/bin/python bench/library_run.py --python /tmp/libs/bin/python [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

FILES = [
    "transformers/models/llama/modeling_llama.py",
    "transformers/models/gpt2/modeling_gpt2.py",
    "transformers/models/bert/modeling_bert.py",
    "transformers/models/t5/modeling_t5.py",
    "transformers/models/vit/modeling_vit.py",
    "transformers/models/mistral/modeling_mistral.py",
    "diffusers/models/unets/unet_2d_blocks.py",
    "diffusers/models/resnet.py",
    "diffusers/models/attention_processor.py",
    "transformers/models/whisper/modeling_whisper.py",
    "transformers/models/clip/modeling_clip.py",
    "diffusers/models/attention.py",
    "diffusers/models/autoencoders/vae.py",
    "diffusers/models/autoencoders/autoencoder_kl.py",
    "transformers/models/wav2vec2/modeling_wav2vec2.py",
    "transformers/models/swin/modeling_swin.py",
    "transformers/models/mixtral/modeling_mixtral.py",
]
"""The files measured; the first nine are the ones of the first library run."""


def site_packages(python: str) -> Path:
    out = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(out.stdout.strip())


def check(python: str, path: Path) -> tuple[list[dict], float, str]:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "fxls", "check", "--json", "--python", python, str(path)],
        capture_output=True,
        text=True,
        timeout=900,
        stdin=subprocess.DEVNULL,
    )
    elapsed = time.monotonic() - started
    try:
        report = json.loads(done.stdout)
    except json.JSONDecodeError:
        return [], elapsed, done.stderr[-500:]
    documents = report if isinstance(report, list) else [report]
    return documents, elapsed, ""


def summarize(documents: list[dict]) -> dict[str, object]:
    modules = [m for d in documents for m in d.get("modules", [])]
    with_forward = [m for m in modules if m.get("status") != "skipped"]
    shaped = [
        m for m in with_forward if any(o.get("shape") is not None for o in m.get("outputs", []))
    ]
    diagnostics = [x for d in documents for x in d.get("diagnostics", [])]
    diagnostics += [x for m in modules for x in m.get("diagnostics", [])]
    return {
        "classes": len(with_forward),
        "with_shapes": len(shaped),
        "errors": sum(1 for x in diagnostics if x.get("severity") == "error"),
        "warnings": sum(1 for x in diagnostics if x.get("severity") == "warning"),
        "fx404": sum(1 for x in diagnostics if x.get("code") == "FX404"),
        "failed": sorted(m["class"] for m in with_forward if m not in shaped),
        "why": {
            m["class"]: [
                f"{x['code']} {x['severity']}: {x['message'][:160]}"
                for x in m.get("diagnostics", [])
                if x.get("severity") in ("error", "warning")
            ]
            for m in with_forward
            if m not in shaped
        },
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", required=True, help="the interpreter with the libraries")
    parser.add_argument("--json", help="write the results here")
    parser.add_argument(
        "--file",
        action="append",
        help="check only this file (relative to site-packages, or a part of its path; repeatable)",
    )
    parser.add_argument(
        "--why", action="store_true", help="print the warnings of the classes without shapes"
    )
    args = parser.parse_args()
    root = site_packages(args.python)
    rows = []
    files = FILES
    if args.file:
        files = [f for f in FILES if any(part in f for part in args.file)]
        files += [f for f in args.file if f.endswith(".py") and f not in files]
    for rel in files:
        path = root / rel
        if not path.exists():
            print(f"missing: {rel}", file=sys.stderr)
            continue
        documents, elapsed, error = check(args.python, path)
        row = {"file": rel, "seconds": round(elapsed, 1), **summarize(documents)}
        if error:
            row["error"] = error
        rows.append(row)
        why = row["why"]
        print(json.dumps(row), file=sys.stderr)
        if args.why:
            for name, lines in why.items():
                print(f"  {name}: " + (" | ".join(lines) or "no warning"), file=sys.stderr)
    total = sum(int(r["classes"]) for r in rows)
    shaped = sum(int(r["with_shapes"]) for r in rows)
    print("| file | classes | with shapes | errors | warnings | s |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(
            f"| {r['file']} | {r['classes']} | {r['with_shapes']} | {r['errors']} "
            f"| {r['warnings']} | {r['seconds']} |"
        )
    print(
        f"| **total** | {total} | {shaped} | {sum(int(r['errors']) for r in rows)} "
        f"| {sum(int(r['warnings']) for r in rows)} | {sum(float(r['seconds']) for r in rows):.1f} |"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
