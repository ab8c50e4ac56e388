"""How capture time grows with model depth, through a real LSP client, with anchors in the same run.

For GPT-2-style decoders of 2/4/12/48/96 blocks (bench/models/gpt48.py with another
``n_layer``), ResNets of Bottleneck blocks [2,2,2,2] / [3,4,6,3] / [3,8,36,3] (the depths of
ResNet-26, -50 and -152; bench/models/resnet50.py with other ``layers``) and Llama-7B-width
decoders of 2 and 32 layers (bench/models/llama7b.py), it measures:
  edit      - didChange -> publishDiagnostics for that version, warm server and worker
              (its warm-up finished),
              debounce 0, every class of the file captured (what an editor waits for), with
              identical sub-blocks traced once (default) and, in a second server started with
              FXLS_REUSE_BLOCKS=0, every block traced;
  floor     - the bare in-process floor for the root class (exec, meta build,
              torch.fx.symbolic_trace, meta-tensor ShapeProp; engine_bench.bench_floor's recipe);
              The CPU time the server, its worker and the job spent per edit is recorded too:
              on a shared machine it moves less than the wall time;
  torchinfo - torchinfo.summary, a real forward on real weights, where the fp32 weights take at
              most 2 GB (skipped otherwise, and when torchinfo is not installed).
Per family: the ratio deepest / shallowest and the cost per added block (the slope between them).

Usage: .venv/bin/python bench/depth_sweep.py [--runs 3] [--families gpt,resnet,llama] [--out FILE]
       [--no-off] [--before /path/to/other/checkout]  (an A/B against another fxls, alternating)
       [--spacing 300]  (a server's edits start at least 300 ms apart, as an editor's captures
                         do with the default debounce; by default 50 ms after each result)
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import re
import runpy
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine_bench import machine, stats
from lsp_bench import SETTINGS, Bench, descendants

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "bench" / "models"
MAX_WEIGHT_BYTES = 2 * 2**30
compile_check = False
"""Servers keep the compile check on (``--compile-check``)."""
spacing = 0.0
"""Seconds at least between the starts of two edits of one server (``--spacing``)."""


@dataclass
class Variant:
    family: str
    label: str
    blocks: int
    """Repeated blocks (decoder layers, Bottlenecks)."""
    file: str
    cls: str
    replace: tuple[str, str]
    shape: tuple[int, ...]
    dtype: str

    def text(self) -> str:
        source = (MODELS / self.file).read_text()
        old, new = self.replace
        assert old in source, (self.file, old)
        return source.replace(old, new)


def _gpt(n: int) -> Variant:
    return Variant(
        "gpt", f"GPT {n} blocks", n, "gpt48.py", "GPT48",
        ("n_layer: int = 48", f"n_layer: int = {n}"), (2, 128), "int64",
    )  # fmt: skip


def _resnet(label: str, layers: tuple[int, ...]) -> Variant:
    return Variant(
        "resnet", f"ResNet {label} {list(layers)}", sum(layers), "resnet50.py", "ResNet50",
        ("layers=(3, 4, 6, 3)", f"layers={layers}"), (1, 3, 224, 224), "float32",
    )  # fmt: skip


def _llama(n: int) -> Variant:
    return Variant(
        "llama", f"Llama-7B width, {n} layers", n, "llama7b.py", "Llama7B",
        ("n_layers: int = 32", f"n_layers: int = {n}"), (1, 64), "int64",
    )  # fmt: skip


FAMILIES = {
    "gpt": [_gpt(n) for n in (2, 4, 12, 48, 96)],
    "resnet": [
        _resnet("26-style", (2, 2, 2, 2)),
        _resnet("50", (3, 4, 6, 3)),
        _resnet("152-style", (3, 8, 36, 3)),
    ],
    "llama": [_llama(2), _llama(32)],
}


def cpu_seconds(root: int) -> float:
    """CPU time of a server, its worker and the worker's finished jobs (reaped children count in
    their parent's ``cutime``/``cstime``): what an edit costs, whatever else loads the machine."""
    ticks = 0
    for pid in [root, *(p for p, _ in descendants(root))]:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks += sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
    return ticks / os.sysconf("SC_CLK_TCK")


async def _settled(root: int, limit: float = 2.0) -> None:
    """Wait (at most ``limit`` seconds) until a server, its worker and the worker's children
    use no CPU for 40 ms: the spare child a worker forks after a job warms its memory while it
    waits, and with two servers alternating, that would load the other server's edit."""
    end = time.perf_counter() + limit
    used = cpu_seconds(root)
    while time.perf_counter() < end:
        await asyncio.sleep(0.04)
        now = cpu_seconds(root)
        if now == used:
            return
        used = now


async def _server(reuse: bool, pythonpath: str | None = None) -> Bench:
    """A server (its worker inherits FXLS_*), of the fxls found on ``pythonpath`` if given;
    without the compile check (its job follows each capture's diagnostics and would load the
    machine during the next edit) unless ``--compile-check`` is given."""
    # `python -m fxls` imports the fxls of its working folder first: main() works in a
    # folder of its own, and each server is given its checkout (this one by default)
    changed = {"FXLS_REUSE_BLOCKS": "1" if reuse else "0", "PYTHONPATH": pythonpath or str(ROOT)}
    saved = {name: os.environ.get(name) for name in changed}
    os.environ.update(changed)
    bench = Bench(SETTINGS if compile_check else {**SETTINGS, "compileCheck": {"enabled": False}})
    try:
        await bench.start()
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    return bench


async def bench_edits(
    variants: list[Variant], folder: Path, runs: int, off: bool, before: str | None = None
) -> dict[str, dict[str, Any]]:
    """Warm edit -> diagnostics of each variant: one server with reuse (and one without, and
    one of the fxls at ``before``), every variant open in each; the runs go round-robin over
    variants and servers, so a change of the machine's load hits all of them alike."""
    servers = {"edit": await _server(True)}
    if off:
        servers["edit_off"] = await _server(False)
    if before is not None:
        servers["edit_before"] = await _server(True, before)
    out: dict[str, dict[str, Any]] = {key: {} for key in servers}
    try:
        uris: dict[tuple[str, str], str] = {}
        for key, bench in servers.items():
            for variant in variants:
                path = folder / f"{variant.family}_{variant.blocks}.py"
                uri = uris[(key, variant.label)] = bench.open(path, variant.text())
                await bench.published(uri, 1)  # warm: worker up, lazily loaded parts loaded
        for key, bench in servers.items():  # the worker's warm-up done: an editor's steady state
            if not await bench.warmed():
                print(f"  {key}: the worker's warm-up did not finish", file=sys.stderr)
        samples: dict[tuple[str, str], list[float]] = {k: [] for k in uris}
        cpu: dict[tuple[str, str], list[float]] = {k: [] for k in uris}
        last: dict[str, float] = {}
        for run in range(runs):
            for variant in variants:
                for key, bench in servers.items():
                    uri = uris[(key, variant.label)]
                    version = run + 2
                    wait = last.get(key, 0.0) + spacing - time.perf_counter()
                    if wait > 0:  # an editor's debounce starts captures at least this far apart
                        await asyncio.sleep(wait)
                    cpu_before = cpu_seconds(bench.pid)
                    started = last[key] = time.perf_counter()
                    # module-level code: every class of the file is captured again (a comment
                    # would cost no capture at all: the capture cache keeps every class)
                    bench.change(uri, version, 0, f"_edit = {run}\n")
                    samples[(key, variant.label)].append(
                        await bench.published(uri, version) - started
                    )
                    await asyncio.sleep(0.05)  # let the zygote reap the job child
                    if len(servers) > 1:  # its work after the result is not the next one's load
                        await _settled(bench.pid)
                    cpu[(key, variant.label)].append(cpu_seconds(bench.pid) - cpu_before)
            print(f"  run {run + 1}/{runs} done", file=sys.stderr, flush=True)
        for (key, label), values in samples.items():
            out[key][label] = {"seconds": stats(values), "cpu": stats(cpu[(key, label)])}
    finally:
        for bench in servers.values():
            await bench.stop()
    return out


def bench_floor(variant: Variant, path: Path, runs: int) -> dict[str, Any]:
    import torch
    import torch.fx
    from torch.fx.passes.shape_prop import ShapeProp

    samples = []
    for _ in range(runs + 1):
        started = time.perf_counter()
        ns = runpy.run_path(str(path))
        with torch.device("meta"):
            model = ns[variant.cls]()
        tracer = torch.fx.Tracer()
        tracer.proxy_buffer_attributes = True
        graph = tracer.trace(model)
        gm = torch.fx.GraphModule(model, graph)
        if variant.dtype == "int64":
            x = torch.zeros(variant.shape, dtype=torch.int64, device="meta")
        else:
            x = torch.empty(variant.shape, device="meta")
        ShapeProp(gm).propagate(x)
        samples.append(time.perf_counter() - started)
        del ns, model, gm
        gc.collect()
    return {"seconds": stats(samples[1:])}


def bench_torchinfo(variant: Variant, path: Path, runs: int) -> dict[str, Any]:
    import torch

    try:
        import torchinfo
    except ImportError:
        return {"skipped": "torchinfo is not installed (pip install torchinfo)"}
    ns = runpy.run_path(str(path))
    with torch.device("meta"):
        size = sum(p.numel() * p.element_size() for p in ns[variant.cls]().parameters())
    if size > MAX_WEIGHT_BYTES:
        return {"skipped": f"real fp32 weights need {size / 2**30:.1f} GiB"}
    torch.manual_seed(0)
    model = ns[variant.cls]().eval()
    if variant.dtype == "int64":
        x = torch.zeros(variant.shape, dtype=torch.int64)
    else:
        x = torch.randn(variant.shape)
    samples = []
    for _ in range(runs + 1):
        started = time.perf_counter()
        torchinfo.summary(model, input_data=[x], verbose=0, depth=10)
        samples.append(time.perf_counter() - started)
    del model
    gc.collect()
    return {"seconds": stats(samples[1:])}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--families", default=",".join(FAMILIES))
    parser.add_argument("--no-off", action="store_true", help="skip the server without reuse")
    parser.add_argument("--only", help="a regular expression: only the models it finds")
    parser.add_argument(
        "--compile-check", action="store_true", help="keep the compile check (FX6xx) on"
    )
    parser.add_argument(
        "--before", help="also a server of the fxls in this folder (PYTHONPATH), alternating"
    )
    parser.add_argument(
        "--spacing",
        type=float,
        default=0.0,
        help="ms at least between the starts of two edits of a server (300: the quickest an "
        "editor's captures come with the default debounce); 0: 50 ms after each result",
    )
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "depth_sweep.json"))
    args = parser.parse_args()
    global compile_check, spacing
    compile_check = args.compile_check
    spacing = args.spacing / 1000
    variants = [v for f in args.families.split(",") if f for v in FAMILIES[f]]
    if args.only:
        variants = [v for v in variants if re.search(args.only, v.label)]

    report: dict[str, Any] = {"machine": machine(), "runs": args.runs, "spacing_ms": args.spacing,
                              "before": args.before}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="fxls-depth-") as tmp:
        folder = Path(tmp)
        for v in variants:
            (folder / f"{v.family}_{v.blocks}.py").write_text(v.text())
        here = os.getcwd()
        os.chdir(folder)
        report["load_before"] = os.getloadavg()
        edits = bench_edits(variants, folder, args.runs, not args.no_off, args.before)
        report.update(asyncio.run(edits))
        report["load_after_edits"] = os.getloadavg()
        report["floor"] = {}
        report["torchinfo"] = {}
        for v in variants:
            path = folder / f"{v.family}_{v.blocks}.py"
            report["floor"][v.label] = bench_floor(v, path, args.runs)
            report["torchinfo"][v.label] = bench_torchinfo(v, path, args.runs)
        report["load_after"] = os.getloadavg()
        os.chdir(here)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2))
    print(render(report, variants))


def _spacing(report: dict[str, Any]) -> str:
    ms = report.get("spacing_ms", 0.0)
    settled = " (servers alternating: each edit once the other server was idle)"
    if not ms:
        return f"Each edit 50 ms after the server's last result{settled if report.get('before') else ''}."
    after = f"and 50 ms after its last result{settled if report.get('before') else ''}"
    return f"A server's edits start at least {ms:.0f} ms apart ({after})."


def _cpu(entry: dict[str, Any]) -> str:
    return f"{entry['cpu']['median'] * 1000:.0f}" if "cpu" in entry else "—"


def _ms(s: dict[str, float]) -> str:
    return f"{s['min'] * 1000:.0f} / {s['median'] * 1000:.0f}"


def render(report: dict[str, Any], variants: list[Variant]) -> str:
    m = report["machine"]
    load = report.get("load_before", [0, 0, 0])
    lines = [
        f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, Linux {m['kernel']}, "
        f"Python {m['python']}, torch {m['torch']}; 1-minute load average {load[0]:.1f} at the "
        f"start. Min / median of {report['runs']} warm edits (round-robin over models and both "
        "servers), median CPU time of the server, worker and job per edit; floor and torchinfo "
        f"(min / median) in the same run. {_spacing(report)}",
        "",
        "| model | blocks | edit → diagnostics ms | without reuse ms | before ms | "
        "CPU per edit ms | without reuse | floor ms | torchinfo ms |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for v in variants:
        on = report["edit"][v.label]["seconds"]
        off = report.get("edit_off", {}).get(v.label)
        old = report.get("edit_before", {}).get(v.label)
        ti = report["torchinfo"][v.label]
        lines.append(
            f"| {v.label} | {v.blocks} | {_ms(on)} | {_ms(off['seconds']) if off else '—'} | "
            f"{_ms(old['seconds']) if old else '—'} | "
            f"{_cpu(report['edit'][v.label])} | {_cpu(off) if off else '—'} | "
            f"{_ms(report['floor'][v.label]['seconds'])} | "
            f"{_ms(ti['seconds']) if 'seconds' in ti else 'n/a (' + ti['skipped'] + ')'} |"
        )
    lines += ["", "Ratios and slopes use the minimum of each model's edits (the least disturbed by other "
              "load on the machine).", "",
              "| family | deepest / shallowest | per added block, ms (reuse · without) | "
              "CPU: deepest / shallowest | CPU per added block, ms (reuse · without) |",
              "| --- | ---: | --- | ---: | --- |"]  # fmt: skip
    for family in dict.fromkeys(v.family for v in variants):
        members = [v for v in variants if v.family == family]
        if len(members) < 2:
            continue
        small, large = members[0], members[-1]

        def slope(
            key: str, what: str = "seconds", at: str = "min",
            small: Variant = small, large: Variant = large,
        ) -> str:  # fmt: skip
            if key not in report or what not in report[key][small.label]:
                return "—"
            a = report[key][small.label][what][at]
            b = report[key][large.label][what][at]
            return f"{(b - a) * 1000 / (large.blocks - small.blocks):.1f}"

        cpu_a = report["edit"][small.label].get("cpu", {}).get("median")
        cpu_b = report["edit"][large.label].get("cpu", {}).get("median")
        cpu_ratio = f"{cpu_b / cpu_a:.2f}×" if cpu_a and cpu_b else "—"

        a = report["edit"][small.label]["seconds"]["min"]
        b = report["edit"][large.label]["seconds"]["min"]
        lines.append(
            f"| {large.label} vs {small.label} | {b / a:.2f}× | "
            f"{slope('edit')} · {slope('edit_off')} | {cpu_ratio} | "
            f"{slope('edit', 'cpu', 'median')} · {slope('edit_off', 'cpu', 'median')} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
