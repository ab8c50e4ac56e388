"""Command line: ``fxls check`` (the engine without an editor), ``fxls serve``, ``--version``.

``fxls check`` prints results to stdout (text, or JSON version 1 with ``--json``; see
docs/cli.md) and everything else to stderr. Exit codes: 0 no error diagnostics, 1 error
diagnostics, 2 usage error or unreadable file, 3 the worker could not run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from fxls import __version__, render
from fxls.engine import FileAnalysis
from fxls.protocol.model import Diagnostic, InputSpec, Value

JSON_VERSION = 1

EXIT_OK = 0
EXIT_ERRORS = 1
EXIT_USAGE = 2
EXIT_WORKER = 3


class UsageError(Exception):
    """Bad command line (exit code 2)."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fxls",
        description="A language server for PyTorch built on torch.fx.",
    )
    parser.add_argument("--version", action="version", version=f"fxls {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    check = sub.add_parser(
        "check",
        help="capture the nn.Module classes of files and print shapes and diagnostics",
        description="Capture every nn.Module class of each FILE in the sandboxed worker and "
        "print its graph (one line per call), shapes and diagnostics.",
    )
    check.add_argument("files", nargs="+", metavar="FILE")
    check.add_argument(
        "--class",
        dest="classes",
        action="append",
        metavar="NAME",
        help="only this class (repeatable)",
    )
    check.add_argument("--json", action="store_true", help="print JSON (schema version 1)")
    check.add_argument(
        "--input",
        dest="inputs",
        action="append",
        default=[],
        metavar="NAME=SHAPE",
        help="input of forward, e.g. 'x=(B, 3, 224, 224)' or 'tokens=(B=2, T) int64' "
        "(repeatable; overrides directives)",
    )
    check.add_argument("--init", metavar="ARGS", help="constructor arguments, e.g. 'n_layer=2'")
    check.add_argument(
        "--timeout", type=float, metavar="S", help="seconds per capture job (default 10)"
    )
    check.add_argument("--python", metavar="PATH", help="interpreter that runs the worker")
    check.add_argument("-v", "--verbose", action="store_true", help="progress on stderr")

    serve = sub.add_parser("serve", help="run the language server")
    mode = serve.add_mutually_exclusive_group()
    mode.add_argument("--stdio", action="store_true", help="speak LSP on stdin/stdout (default)")
    mode.add_argument("--tcp", metavar="HOST:PORT", help="listen on a TCP address")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``fxls`` script; returns the exit code."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "check":
        try:
            return asyncio.run(check(args))
        except UsageError as exc:
            print(f"fxls: {exc}", file=sys.stderr)
            return EXIT_USAGE
        except KeyboardInterrupt:
            return 130
    if args.command == "serve":
        return serve(args.tcp)
    parser.print_help(sys.stderr)
    return EXIT_USAGE


def serve(tcp: str | None) -> int:
    from fxls import server

    if tcp:
        host, _, port = tcp.rpartition(":")
        if not host or not port.isdigit():
            print(f"fxls: --tcp expects HOST:PORT, got {tcp!r}", file=sys.stderr)
            return EXIT_USAGE
        return int(server.main_tcp(host, int(port)) or EXIT_OK)
    return int(server.main_stdio() or EXIT_OK)


# ---------------------------------------------------------------------------------------
# fxls check
# ---------------------------------------------------------------------------------------


@dataclass
class _Plan:
    """What to capture in one file."""

    path: str
    text: str
    only: list[str] | None
    inputs: dict[str, list[InputSpec]] = field(default_factory=dict)
    init: dict[str, str] = field(default_factory=dict)
    needs_worker: bool = True
    found: list[str] = field(default_factory=list)
    inputs_taken: set[str] = field(default_factory=set)
    """Module classes of the file (to check ``--class`` names)."""
    """False when there is nothing to capture (syntax error, no module classes)."""


def _plan(path: str, text: str, args: argparse.Namespace, specs: list[InputSpec]) -> _Plan:
    from fxls.analysis import parse

    parsed = parse(text)
    names = [c.name for c in parsed.classes]
    only = list(args.classes) if args.classes else None
    selected = [c for c in parsed.classes if only is None or c.name in only]
    plan = _Plan(path, text, only, needs_worker=parsed.syntax_error is None and bool(selected))
    plan.found = names
    for spec in specs:
        takers = []
        for c in selected:
            fwd = c.effective_forward
            if fwd is None or fwd.accepts_any_keyword or spec.name in [p.name for p in fwd.params]:
                takers.append(c.name)
                plan.inputs.setdefault(c.name, []).append(spec)
        if takers:
            plan.inputs_taken.add(spec.name)
    if args.init is not None:
        if len(selected) > 1:
            raise UsageError(f"{path}: --init needs --class NAME when a file has several classes")
        for c in selected:
            plan.init[c.name] = args.init
    return plan


async def check(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Run ``fxls check``; returns the exit code."""
    from fxls.analysis import DirectiveError, parse_init, parse_input_spec
    from fxls.engine import EngineOptions, analyze
    from fxls.protocol.model import Limits

    out = out or sys.stdout
    try:
        specs = [parse_input_spec(text) for text in args.inputs]
        if args.init is not None:
            args.init = parse_init(args.init)
    except DirectiveError as exc:
        raise UsageError(str(exc)) from exc
    limits = Limits()
    if args.timeout is not None:
        if args.timeout <= 0:
            raise UsageError("--timeout must be positive")
        limits = Limits(timeout_s=args.timeout, cpu_s=max(args.timeout + 2, 1.0))

    plans: list[_Plan] = []
    exit_code = EXIT_OK
    for path in args.files:
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError) as exc:
            print(f"fxls: cannot read {path}: {exc}", file=sys.stderr)
            exit_code = EXIT_USAGE
            continue
        plans.append(_plan(path, text, args, specs))
    if not plans:
        return exit_code
    for name in args.classes or []:
        if not any(name in plan.found for plan in plans):
            found = sorted({n for plan in plans for n in plan.found})
            raise UsageError(f"no module class {name} (found: {', '.join(found) or 'none'})")
    for spec in specs:
        if not any(spec.name in plan.inputs_taken for plan in plans):
            raise UsageError(f"--input {spec.name}: no selected class takes an input of that name")

    from fxls.workerclient import WorkerClient

    def log(message: str) -> None:
        if args.verbose:
            print(f"fxls: {message}", file=sys.stderr)

    client = WorkerClient(python=args.python, log=log)
    try:
        if any(plan.needs_worker for plan in plans):
            try:
                ready = await client.start()
            except Exception as exc:
                print(f"fxls: the worker could not start: {exc}", file=sys.stderr)
                return EXIT_WORKER
            log(f"worker ready: torch {ready.torch_version} ({ready.python})")
        options = EngineOptions(limits=limits)
        documents = []
        for plan in plans:
            log(f"checking {plan.path}")
            analysis = await analyze(
                client,
                plan.path,
                plan.text,
                options=options,
                only=plan.only,
                extra_inputs=plan.inputs,
                init_override=plan.init,
            )
            if analysis.outcome in ("worker_died", "sandbox_setup"):
                exit_code = max(exit_code, EXIT_WORKER)
            elif analysis.has_errors:
                exit_code = max(exit_code, EXIT_ERRORS)
            if args.json:
                documents.append(to_json(analysis, plan.inputs))
            else:
                out.write(format_text(analysis, plan.inputs))
                out.flush()
        if args.json:
            doc: Any = documents[0] if len(args.files) == 1 else documents
            out.write(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
    finally:
        await client.close()
    return exit_code


# ---------------------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------------------


def _shape_only(v: Value) -> str:
    """Only the shape of a tensor value (``[B, 1000]``); other values as text."""
    return render.value_text(v, dtype=False)


def _input_specs(
    analysis: FileAnalysis, cls: str, extra: dict[str, list[InputSpec]]
) -> dict[str, InputSpec]:
    info = next((c for c in analysis.classes if c.name == cls), None)
    specs = {s.name: s for s in (info.inputs if info else [])}
    specs.update({s.name: s for s in extra.get(cls, [])})
    return specs


def _input_text(name: str, value: Value, spec: InputSpec | None, assumed: bool) -> str:
    if spec is not None and spec.kind == "shape" and value.kind == "tensor" and value.shape:
        if len(spec.dims) == len(value.shape):
            parts = [
                f"{d.name}={d.size}" if d.name and d.size is not None else str(s)
                for d, s in zip(spec.dims, value.shape)
            ]
            shown = "[" + ", ".join(parts) + "]"
        else:
            shown = _shape_only(value)
    elif value.kind == "tensor":
        shown = _shape_only(value)
    else:
        shown = render.value_text(value)
    if value.kind == "tensor" and value.dtype and value.dtype != "float32":
        shown += f" {value.dtype}"
    return f"{name} {shown}" + (" (assumed)" if assumed else "")


def format_text(
    analysis: FileAnalysis, extra_inputs: dict[str, list[InputSpec]] | None = None
) -> str:
    """The human-readable report of one file (columns 1-based, like compilers print them)."""
    lines: list[str] = []
    path = analysis.path
    for m in analysis.modules:
        parts = [m.status + (f" ({m.strategy})" if m.strategy and m.strategy != "none" else "")]
        if m.nodes:
            parts.append(f"{len(m.nodes)} nodes")
        params = render.params_text(m.params)
        if params:
            parts.append(params)
        specs = _input_specs(analysis, m.name, extra_inputs or {})
        if m.inputs:
            names = m.input_names or [f"arg{i}" for i in range(len(m.inputs))]
            assumed = m.inputs_assumed or [False] * len(m.inputs)
            shown = ", ".join(
                _input_text(n, v, specs.get(n), a) for n, v, a in zip(names, m.inputs, assumed)
            )
            if m.outputs:
                shown += " → " + ", ".join(_shape_only(v) for v in m.outputs)
            parts.append(shown)
        lines.append(f"{path}:{m.line} class {m.name}  " + " · ".join(parts))
        rows = []
        for n in m.nodes:
            if not n.op.startswith("call_"):
                continue
            span = n.span or n.call_site
            loc = f"{span.line}:{span.col + 1}" if span else "-"
            outputs = ", ".join(render.value_text(v) for v in n.outputs)
            rows.append((loc, n.name, n.op, render.call_text(n), outputs))
        if rows:
            widths = [max(len(r[i]) for r in rows) for i in range(4)]
            for r in rows:
                row = "  " + "  ".join(r[i].ljust(widths[i]) for i in range(4))
                lines.append(f"{row}  → {r[4]}" if r[4] else row.rstrip())
    for d in analysis.diagnostics:
        s = d.span
        lines.append(f"{path}:{s.line}:{s.col + 1}: {d.severity} {d.code} {d.message}")
    if not analysis.modules and not analysis.diagnostics:
        lines.append(f"{path}: no nn.Module classes found")
    return "\n".join(lines) + "\n"


def _json_diag(d: Diagnostic) -> dict[str, Any]:
    s = d.span
    return {
        "code": d.code,
        "severity": d.severity,
        "message": d.message,
        "line": s.line,
        "col": s.col,
        "end_line": s.end_line,
        "end_col": s.end_col,
    }


def _json_value(v: Value) -> dict[str, Any]:
    return {"kind": v.kind, "shape": v.shape, "dtype": v.dtype, "text": v.text}


def to_json(
    analysis: FileAnalysis, extra_inputs: dict[str, list[InputSpec]] | None = None
) -> dict[str, Any]:
    """One file's result as the version-1 JSON document (docs/cli.md)."""
    by_class = {c.name: c for c in analysis.classes}
    claimed: set[int] = set()
    modules = []
    for m in analysis.modules:
        info = by_class.get(m.name)
        own = list(m.diagnostics)
        for i, d in enumerate(analysis.diagnostics):
            inside = info is not None and info.span.line <= d.span.line <= info.span.end_line
            directive = info is not None and any(
                x.line == d.span.line for x in info.directives.items
            )
            if d in m.diagnostics or inside or directive:
                claimed.add(i)
                if d not in own:
                    own.append(d)
        names = m.input_names or [f"arg{i}" for i in range(len(m.inputs))]
        assumed = m.inputs_assumed or [False] * len(m.inputs)
        nodes = []
        for n in m.nodes:
            span = n.span
            nodes.append(
                {
                    "name": n.name,
                    "op": n.op,
                    "target": n.target,
                    "line": span.line if span else None,
                    "col": span.col if span else None,
                    "end_line": span.end_line if span else None,
                    "end_col": span.end_col if span else None,
                    "call_site_line": n.call_site.line if n.call_site else None,
                    "args": [
                        {"name": a.name, "value": a.value, "default": a.default} for a in n.args
                    ],
                    "outputs": [_json_value(v) for v in n.outputs],
                }
            )
        modules.append(
            {
                "class": m.name,
                "line": m.line,
                "status": m.status,
                "capture": m.strategy,
                "build": m.build,
                "isolation": list(analysis.isolation),
                "params": m.params,
                "inputs": [
                    {"name": n, **_json_value(v), "assumed": a}
                    for n, v, a in zip(names, m.inputs, assumed)
                ],
                "outputs": [_json_value(v) for v in m.outputs],
                "nodes": nodes,
                "diagnostics": [_json_diag(d) for d in sorted(own, key=_pos)],
            }
        )
    rest = [d for i, d in enumerate(analysis.diagnostics) if i not in claimed]
    return {
        "version": JSON_VERSION,
        "file": analysis.path,
        "outcome": analysis.outcome,
        "torch_version": analysis.torch_version,
        "modules": modules,
        "diagnostics": [_json_diag(d) for d in rest],
    }


def _pos(d: Diagnostic) -> tuple[int, int, str]:
    return (d.span.line, d.span.col, d.code)
