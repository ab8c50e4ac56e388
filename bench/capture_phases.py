"""Where a capture's time goes, step by step, in a child forked from a warmed process.

Like the worker: this process imports torch and runs the zygote's whole warm-up once (what
the zygote has done once it was idle for a moment), then forks one
child per capture, which runs the small capture a child forked ahead runs before its job
(``FXLS_SPARE_WARM=0``: not), so every capture starts with the caches a job child starts with (a capture
repeated in one process runs several times faster: fake tensor and sympy caches stay warm).
Per model (bench/models/, the root class only, as engine_bench.py captures it), with identical
sub-blocks traced once and without, it prints the median over the runs of each step the
capture times itself (build, trace, shapes, compare, record), of making the node records, of
encoding the result (to_dict + json.dumps, in the child), of decoding it as the server
does (json.loads + from_dict + the check of its copies) and of expanding its copied records
(which the server does after publishing the diagnostics), with the result's size as sent
(copied sub-blocks as copies of their template's records, as the worker sends them).

With ``--file`` it captures every class of a model file instead (what an edit inside one of
its classes captures when the classes form one unit: the edited class, its parents and its
children), with the file's depth set by ``--depth`` (GPT ``n_layer``, ResNet ``layers``),
and prints each class's steps and the whole capture's wall and CPU time; ``--profile N`` writes cProfile's top N functions of one
such child (cumulative and own time) to stderr, and its whole profile to the file that
``FXLS_PROFILE_DUMP`` names, if set (for ``pstats``: callers, callees).

Usage: .venv/bin/python bench/capture_phases.py [--runs 3] [--models gpt48,llama7b,resnet50]
       .venv/bin/python bench/capture_phases.py --file gpt48 --depth 2 [--profile 40]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MODELS = {"gpt48": ("gpt48.py", "GPT48"), "llama7b": ("llama7b.py", "Llama7B"),
          "resnet50": ("resnet50.py", "ResNet50")}  # fmt: skip


DEPTHS = {"gpt48": ("n_layer: int = 48", "n_layer: int = {}"),
          "llama7b": ("n_layers: int = 32", "n_layers: int = {}"),
          "resnet50": ("layers=(3, 4, 6, 3)", "layers={}")}  # fmt: skip


def model_text(name: str, depth: str | None) -> str:
    """The model file's text, with its depth replaced when ``depth`` is given."""
    text = (ROOT / "bench" / "models" / MODELS[name][0]).read_text()
    if depth is None:
        return text
    old, new = DEPTHS[name]
    return text.replace(old, new.format(depth))


def file_child(path: Path, text: str, profile: int, out: int) -> None:
    """Capture every class of ``text`` (as the worker's job child does) and write each
    class's step timings and the whole capture's time to ``out``."""
    from fxls.analysis import parse
    from fxls.engine.analyze import EngineOptions, build_requests, capture_job
    from fxls.worker.capture.pipeline import run_capture_for_wire

    job = capture_job(str(path), text, build_requests(parse(text).classes), EngineOptions())
    profiler = None
    if profile:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    started, cpu = time.perf_counter(), time.process_time()
    result = run_capture_for_wire(job, lambda *_: None)
    spent = {"capture": time.perf_counter() - started, "capture CPU": time.process_time() - cpu}
    if profiler is not None:
        import pstats

        profiler.disable()
        stats = pstats.Stats(profiler, stream=sys.stderr)
        stats.sort_stats("cumulative").print_stats(profile)
        stats.sort_stats("tottime").print_stats(profile)
        if os.environ.get("FXLS_PROFILE_DUMP"):
            stats.dump_stats(os.environ["FXLS_PROFILE_DUMP"])
    for mod in result.modules:
        for step, seconds in mod.timings.items():
            spent[f"{mod.name}.{step}"] = seconds
    os.write(out, json.dumps({"spent": spent}).encode())
    os.close(out)


def in_child(work: Callable[[int], None]) -> Any:
    """Fork a child that runs ``work(fd)``, writing its JSON answer to ``fd``; the answer."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            if os.environ.get("FXLS_SPARE_WARM") != "0":  # as the worker's child forked ahead
                from fxls.worker.process.warmup import warm_spare

                warm_spare()
            work(write)
        finally:
            os._exit(0)
    os.close(write)
    chunks = []
    while chunk := os.read(read, 1 << 20):
        chunks.append(chunk)
    os.close(read)
    os.waitpid(pid, 0)
    return json.loads(b"".join(chunks))


def measure_file(path: Path, text: str, profile: int) -> dict[str, float]:
    spent: dict[str, float] = in_child(lambda out: file_child(path, text, profile, out))["spent"]
    return spent


def child(path: Path, cls: str, reuse: bool, out: int) -> None:
    from fxls.analysis import parse
    from fxls.engine.analyze import EngineOptions, build_requests, capture_job
    from fxls.protocol.codec import to_dict
    from fxls.worker.capture import classcapture
    from fxls.worker.capture.pipeline import run_capture_for_wire

    spent: dict[str, float] = {}
    record = classcapture.ClassCapture._record

    def timed_record(self: Any, *args: Any, **kwargs: Any) -> None:
        started = time.perf_counter()
        record(self, *args, **kwargs)
        spent["records"] = spent.get("records", 0.0) + time.perf_counter() - started

    classcapture.ClassCapture._record = timed_record  # type: ignore[method-assign]
    text = path.read_text()
    requests = [r for r in build_requests(parse(text).classes) if r.name == cls]
    job = capture_job(str(path), text, requests, EngineOptions(reuse_blocks=reuse))
    started = time.perf_counter()
    result = run_capture_for_wire(job, lambda *_: None)
    spent["capture"] = time.perf_counter() - started
    started = time.perf_counter()
    body = json.dumps(to_dict(result))
    spent["encode"] = time.perf_counter() - started
    for step, seconds in result.modules[0].timings.items():
        spent[step] = seconds
    spent["nodes"] = sum(
        len(m.nodes) + len(m.node_copies) + sum(len(b.names) for b in m.block_copies)
        for m in result.modules
    )
    os.write(out, json.dumps({"spent": spent, "body": body}).encode())
    os.close(out)


def measure(path: Path, cls: str, reuse: bool) -> dict[str, float]:
    from fxls.protocol.codec import from_dict
    from fxls.protocol.copies import check_received, expanded
    from fxls.protocol.model import CaptureResult

    data = in_child(lambda out: child(path, cls, reuse, out))
    spent: dict[str, float] = data["spent"]
    body = data["body"]
    started = time.perf_counter()
    result = from_dict(CaptureResult, json.loads(body))
    check_received(result.modules, len(body))
    spent["decode"] = time.perf_counter() - started
    started = time.perf_counter()
    for module in result.modules:
        expanded(module)
    spent["expand"] = time.perf_counter() - started
    spent["bytes"] = len(body)
    return spent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--file", choices=sorted(MODELS), help="capture every class of a file")
    parser.add_argument("--depth", help="the file's depth: n_layer(s), or ResNet layers")
    parser.add_argument("--profile", type=int, default=0, help="cProfile's top N (with --file)")
    args = parser.parse_args()
    from fxls.worker.process.warmup import warm_all

    warm_all()
    # what the children import, loaded once here (the worker's children find it loaded too)
    import fxls.analysis
    import fxls.engine.analyze
    import fxls.protocol.codec  # noqa: F401

    gc.collect()
    gc.freeze()  # as the zygote does before it forks
    if args.file:
        whole_file(args.file, args.depth, args.runs, args.profile)
        return
    keys = ["build", "trace", "shapes", "compare", "record", "records", "capture", "encode",
            "decode", "expand"]  # fmt: skip
    print(f"1-minute load average {os.getloadavg()[0]:.1f}; medians of {args.runs} runs, ms")
    print("| model | reuse | " + " | ".join(keys) + " | nodes | result bytes |")
    print("| --- | --- |" + " ---: |" * (len(keys) + 2))
    for name in args.models.split(","):
        file, cls = MODELS[name]
        for reuse in (False, True):
            runs = [measure(ROOT / "bench" / "models" / file, cls, reuse) for _ in range(args.runs)]
            med = {k: statistics.median(r.get(k, 0.0) for r in runs) for k in runs[0]}
            cells = [f"{med.get(k, 0.0) * 1000:.0f}" for k in keys]
            print(f"| {name} | {'on' if reuse else 'off'} | " + " | ".join(cells) +
                  f" | {med['nodes']:.0f} | {med['bytes'] / 1e6:.2f} MB |", flush=True)  # fmt: skip
    sys.stdout.flush()


def whole_file(name: str, depth: str | None, runs: int, profile: int) -> None:
    """Every class of one model file, ``runs`` times (the first with cProfile when asked)."""
    text = model_text(name, depth)
    path = Path(f"/tmp/fxls-phases-{name}.py")
    path.write_text(text)
    if profile:
        measure_file(path, text, profile)
    samples = [measure_file(path, text, 0) for _ in range(runs)]
    print(f"1-minute load average {os.getloadavg()[0]:.1f}; {name} depth {depth}; ms")
    print("| step | min | median |")
    print("| --- | ---: | ---: |")
    for key in samples[0]:
        values = [s.get(key, 0.0) for s in samples]
        print(f"| {key} | {min(values) * 1000:.1f} | {statistics.median(values) * 1000:.1f} |")


if __name__ == "__main__":
    main()
