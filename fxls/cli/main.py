"""Command line: ``fxls check`` (the engine without an editor), ``fxls graph``, ``fxls serve``.

Argument parsing and wiring only: discovery, configuration and running live in
``fxls.cli.check``, the output formats in ``fxls.cli.report``, graphs in ``fxls.graph``.
``fxls check`` prints results to stdout (text, JSON version 1, GitHub workflow commands or
SARIF; see docs/cli.md) and everything else to stderr. Exit codes: 0 no error diagnostics,
1 error diagnostics, 2 usage error or unreadable file, 3 the worker could not run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Sequence
from typing import Any, Literal, TextIO

from fxls import __version__
from fxls.cli.check.run import UsageError
from fxls.cli.report import FORMATS
from fxls.cli.report.escape import MAX_PATH, escape_text

EXIT_OK = 0
EXIT_ERRORS = 1
EXIT_USAGE = 2
EXIT_WORKER = 3


def _add_capture_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--input",
        dest="inputs",
        action="append",
        default=[],
        metavar="NAME=SHAPE",
        help="input of forward, e.g. 'x=(B, 3, 224, 224)' or 'tokens=(B=2, T) int64' "
        "(repeatable; overrides directives)",
    )
    p.add_argument("--init", metavar="ARGS", help="constructor arguments, e.g. 'n_layer=2'")
    p.add_argument(
        "--timeout",
        type=float,
        metavar="S",
        help="CPU seconds per capture job (default 10; wall clock twice that)",
    )
    p.add_argument("--python", metavar="PATH", help="interpreter that runs the worker")
    p.add_argument("-v", "--verbose", action="store_true", help="log messages on stderr")


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
        description="Capture every nn.Module class of each PATH (a file, a directory or a "
        "glob) in the sandboxed worker and print its graph, shapes and diagnostics.",
    )
    check.add_argument("files", nargs="+", metavar="PATH")
    check.add_argument(
        "--class",
        dest="classes",
        action="append",
        metavar="NAME",
        help="only this class (repeatable)",
    )
    check.add_argument(
        "--output-format",
        choices=FORMATS,
        help="text (default), json (schema version 1), github (workflow commands), sarif",
    )
    check.add_argument("--json", action="store_true", help="the same as --output-format json")
    check.add_argument(
        "--annotate-info",
        action="store_true",
        help="with --output-format github: also annotate information and hint diagnostics "
        "(default: errors and warnings only)",
    )
    check.add_argument(
        "--select",
        action="append",
        metavar="CODES",
        help="report only these codes or prefixes, e.g. FX1,FX201 (repeatable)",
    )
    check.add_argument(
        "--ignore",
        action="append",
        metavar="CODES",
        help="never report these codes or prefixes, e.g. FX302 (repeatable)",
    )
    check.add_argument(
        "--exclude",
        action="append",
        metavar="PATTERN",
        help="skip paths matching this gitignore-style pattern (repeatable; replaces "
        "[tool.fxls] exclude)",
    )
    check.add_argument(
        "--exit-zero", action="store_true", help="exit 0 even when errors are reported"
    )
    check.add_argument(
        "--fail-on",
        choices=("error", "warning", "information"),
        default="error",
        help="exit 1 for diagnostics of this severity or worse (default error); with "
        "--select FX6, a gate for graph breaks of torch.compile",
    )
    check.add_argument(
        "--no-compile-check",
        action="store_true",
        help="skip the torch.compile check (FX6xx) after the capture",
    )
    check.add_argument(
        "--jobs", type=int, default=2, metavar="N", help="files captured at once (default 2)"
    )
    check.add_argument(
        "--fix",
        action="store_true",
        help="apply the fixes verified safe in the sandbox and report what is left",
    )
    check.add_argument(
        "--unsafe-fixes",
        action="store_true",
        help="with --fix or --diff: also apply fixes that could not be verified safe",
    )
    check.add_argument(
        "--pin",
        action="store_true",
        help="with --fix or --diff: also write the `# fxls:` directives that pin what fxls "
        "assumed (inputs, constructor arguments, flag values)",
    )
    check.add_argument(
        "--diff",
        action="store_true",
        help="print the fixes as a unified diff instead of writing them (exit 1 when any "
        "would apply)",
    )
    _add_capture_options(check)

    graph = sub.add_parser(
        "graph",
        help="draw the graph of a module class (SVG, HTML or Graphviz dot)",
        description="Capture one nn.Module class and write its graph: nodes with op, target, "
        "output shape and source line, data-flow edges, submodules as clusters, repeated "
        "blocks collapsed (×N).",
    )
    graph.add_argument("target", metavar="FILE[:CLASS]")
    graph.add_argument(
        "-o", "--output", required=True, metavar="OUT", help="out.svg, out.html or out.dot"
    )
    graph.add_argument(
        "--format", choices=("svg", "html", "dot"), help="default: from the output's extension"
    )
    graph.add_argument("--no-collapse", action="store_true", help="draw every repeated block")
    _add_capture_options(graph)

    serve = sub.add_parser("serve", help="run the language server")
    mode = serve.add_mutually_exclusive_group()
    mode.add_argument("--stdio", action="store_true", help="speak LSP on stdin/stdout (default)")
    mode.add_argument(
        "--socket",
        metavar="PATH",
        help="listen on a UNIX socket (mode 0600, in a folder only you can use; made if missing)",
    )
    mode.add_argument(
        "--tcp",
        metavar="HOST:PORT",
        help="listen on a loopback TCP address; needs a token (--token-file or $FXLS_TOKEN)",
    )
    serve.add_argument(
        "--token-file",
        metavar="FILE",
        help="the token clients send as initializationOptions.token (a file only you can "
        "read); default: $FXLS_TOKEN. Required by --tcp, optional with --socket",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``fxls`` script; returns the exit code."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command in ("check", "graph"):
        runner = check if args.command == "check" else graph
        try:
            return asyncio.run(runner(args))
        except UsageError as exc:
            _say(str(exc))
            return EXIT_USAGE
        except KeyboardInterrupt:
            return 130
        except BrokenPipeError:
            # the reader went away (``fxls check . | head``): no traceback; stdout is pointed
            # at /dev/null so that flushing it at exit does not raise again
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            return 141
    if args.command == "serve":
        return serve(args)
    parser.print_help(sys.stderr)
    return EXIT_USAGE


def serve(args: argparse.Namespace) -> int:
    """``fxls serve``: one client on stdio, or at a UNIX socket or loopback TCP port (checked
    before anything starts: ``fxls.lsp.rpc.listener``)."""
    where = None
    if args.tcp is not None or args.socket is not None:
        from fxls.lsp import rpc

        try:
            where = rpc.listener(args.tcp, args.socket, args.token_file)
        except rpc.ListenError as exc:
            print(f"fxls: {exc}", file=sys.stderr)
            return EXIT_USAGE
    elif args.token_file is not None:
        print("fxls: --token-file is for --tcp and --socket", file=sys.stderr)
        return EXIT_USAGE
    early = _prestart_worker()
    from fxls.lsp import server  # the LSP libraries load while the worker imports torch

    if where is not None:
        return int(server.main_listen(where, early) or EXIT_OK)
    return int(server.main_stdio(early) or EXIT_OK)


def _prestart_worker() -> Any:
    """The worker zygote in this interpreter, started before the server's imports (~0.5 s of
    a cold start): the session adopts it when the workspace is trusted and ``fxls.python``
    names no other interpreter, and stops it otherwise. It imports torch and fxls only, from
    a private folder; nothing of the workspace runs before ``initialize`` says it is trusted.
    ``FXLS_EARLY_WORKER=0`` turns it off."""
    if os.environ.get("FXLS_EARLY_WORKER", "1") == "0":
        return None
    from fxls.engine.workerclient import WorkerClient

    early = WorkerClient()
    try:
        early.prestart()
    except OSError:
        return None
    return early


# ---------------------------------------------------------------------------------------
# Shared by check and graph
# ---------------------------------------------------------------------------------------


def _say(message: str) -> None:
    """``fxls: message`` on stderr, escaped as a whole: the messages of ``fxls check`` and
    ``fxls graph`` carry paths, settings and results of the checked repository, and a line
    break or ``::`` in them must not start a line (a workflow command in CI) nor a control
    sequence act on the terminal."""
    print("fxls: " + escape_text(message, MAX_PATH), file=sys.stderr)


def _warn(message: str) -> None:
    _say(f"warning: {message}")


def _capture_settings(args: argparse.Namespace, paths: list[str]) -> tuple[Any, Any, Any]:
    """(project config, EngineOptions, python) from the command line, ``FXLS_PYTHON``, the
    project's ``[tool.fxls]`` and the user's ``config.toml``; the interpreter, limits and
    isolation never from the project (``fxls.cli.check.config``)."""
    from fxls.analysis import DirectiveError, parse_init, parse_input_spec
    from fxls.cli.check.config import load_config
    from fxls.engine.analyze import EngineOptions, read_rules, rules_path
    from fxls.engine.settings import interpreter_path
    from fxls.protocol.files import Refused
    from fxls.protocol.model import Limits

    try:
        args.specs = [parse_input_spec(text) for text in args.inputs]
        if args.init is not None:
            args.init = parse_init(args.init)
    except DirectiveError as exc:
        raise UsageError(str(exc)) from exc
    config = load_config(paths)
    for warning in config.warnings:
        _warn(warning)
    settings = config.settings
    limits = settings.limits.to_protocol()
    if args.timeout is not None:
        if args.timeout <= 0:
            raise UsageError("--timeout must be positive")
        limits = Limits(
            timeout_s=2 * args.timeout,
            cpu_s=args.timeout,
            memory_mb=limits.memory_mb,
            file_size_mb=limits.file_size_mb,
        )
    rules_file = rules_path(config.root, settings.code_actions.rules_file)
    rules = read_rules(rules_file)
    if isinstance(rules, Refused):
        _warn(f"the rules file {rules_file} is not used: {rules}")
        rules = None
    options = EngineOptions(
        limits=limits,
        isolation=settings.isolation.to_protocol(),
        meta_init=settings.capture.meta_init,
        symbolic=settings.capture.symbolic,
        rules=rules,
        compile_check=settings.compile_check.enabled
        and not getattr(args, "no_compile_check", False),
        compile_max_params=settings.code_actions.max_params,
    )
    python = args.python or os.environ.get("FXLS_PYTHON") or settings.python or None
    return config, options, interpreter_path(python, os.getcwd())


# ---------------------------------------------------------------------------------------
# fxls check
# ---------------------------------------------------------------------------------------

_SEVERITY_RANK = {"error": 0, "warning": 1, "information": 2, "hint": 3}


def fails(analysis: Any, fail_on: str) -> bool:
    """Whether ``analysis`` has a diagnostic of severity ``fail_on`` or worse (``--fail-on``)."""
    worst = _SEVERITY_RANK.get(fail_on, 0)
    return any(_SEVERITY_RANK.get(d.severity, 3) <= worst for d in analysis.diagnostics)


def _output_format(args: argparse.Namespace) -> str:
    if args.json and args.output_format not in (None, "json"):
        raise UsageError(f"--json contradicts --output-format {args.output_format}")
    return "json" if args.json else (args.output_format or "text")


def _code_filter(args: argparse.Namespace, config: Any) -> Any:
    from fxls.cli.check.config import CodeFilter, parse_codes

    select, ignore = config.select, config.ignore
    for name in ("select", "ignore"):
        values = getattr(args, name)
        if values is None:
            continue
        codes, problems = parse_codes(values)
        if problems:
            raise UsageError(f"--{name}: " + "; ".join(problems))
        if name == "select":
            select = codes
        else:
            ignore = codes
    return CodeFilter(select, ignore)


async def check(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Run ``fxls check``; returns the exit code."""
    from fxls.cli.check.discovery import discover, exclude_rules
    from fxls.cli.check.run import Checked, Progress, Summary, read_worklist, run_worklist, validate
    from fxls.cli.report.github import format_github
    from fxls.cli.report.jsondoc import to_json
    from fxls.cli.report.paths import report_base
    from fxls.cli.report.sarif import sarif_log
    from fxls.cli.report.text import format_text, not_made_line
    from fxls.engine.analyze import is_rules_file

    out = out or sys.stdout
    started = time.monotonic()
    fmt = _output_format(args)
    if args.jobs < 1:
        raise UsageError("--jobs must be at least 1")
    config, options, python = _capture_settings(args, args.files)
    codes = _code_filter(args, config)
    fix_mode: Literal["fix", "diff"] | None = (
        "diff" if args.diff else ("fix" if args.fix or args.unsafe_fixes else None)
    )
    if args.diff and fmt != "text":
        raise UsageError("--diff prints a diff: it cannot be combined with --output-format")
    if args.pin and fix_mode is None:
        raise UsageError("--pin goes with --fix, --unsafe-fixes or --diff")
    if args.annotate_info and fmt != "github":
        raise UsageError("--annotate-info goes with --output-format github")
    if args.exclude is not None:
        excludes = exclude_rules(args.exclude, os.getcwd())
    else:
        excludes = exclude_rules(config.exclude, config.root)

    found = discover(args.files, excludes)
    exit_code = EXIT_OK
    for error in found.errors:
        _say(error)
        exit_code = EXIT_USAGE
    for note in found.notes:
        _say(note)
    read_errors: list[str] = []
    worklist = read_worklist(found.targets, args.classes, args.specs, args.init, read_errors)
    for work in worklist:  # the rules file is checked by loading it in the worker
        if is_rules_file(work.path, options) and not args.classes:
            work.needs_worker = True
    for error in read_errors:
        _say(error)
        exit_code = EXIT_USAGE
    if not found.targets and not found.errors:
        _say(f"no Python files found in {' '.join(args.files)}")
    if worklist:
        validate(worklist, args.classes, args.specs)
    elif found.targets or found.errors:
        return exit_code

    from fxls.engine.workerclient import WorkerClient

    progress = Progress(len(worklist))

    def log(message: str) -> None:
        if args.verbose:
            progress.write(sys.stderr, "fxls: " + escape_text(message, MAX_PATH) + "\n")

    summary = Summary(skipped_paths=found.skipped)
    documents: list[dict[str, Any]] = []
    sarif_files = []
    notebooks: dict[str, Any] = {}
    base = report_base()
    client = WorkerClient(python=python, log=log)
    fixer = None
    if fix_mode is not None:
        from fxls.cli.check.fix import Fixer

        fixer = Fixer(
            client,
            options,
            codes,
            mode=fix_mode,
            unsafe=args.unsafe_fixes,
            pin=args.pin,
            max_params=config.settings.code_actions.max_params,
            diff_out=out,
            root=config.root,
        )

    def emit(checked: Checked) -> None:
        summary.add(checked)
        if not checked.reported:
            return
        analysis, notebook = checked.analysis, checked.work.notebook
        if fmt == "text":
            report = format_text(analysis, checked.work.inputs, checked.work.text, notebook)
            progress.write(out, report)
        elif fmt == "github":
            report = format_github(
                analysis, base, annotate_info=args.annotate_info, notebook=notebook
            )
            progress.write(out, report)
        elif fmt == "json":
            documents.append(to_json(analysis, checked.work.inputs, checked.not_made, notebook))
        else:
            sarif_files.append((analysis, checked.work.text))
            notebooks[analysis.path] = notebook  # None for a plain file

    try:
        with progress:
            if any(work.needs_worker for work in worklist):
                progress.begin("starting the worker")
                try:
                    ready = await client.start()
                except Exception as exc:
                    progress.hide()
                    _say(f"the worker could not start: {exc}")
                    return EXIT_WORKER
                log(f"worker ready: torch {ready.torch_version} ({ready.python})")

            def begin(work: Any) -> None:
                log(f"checking {work.path}")
                progress.begin(escape_text(work.path, path=True))

            async for checked in run_worklist(
                client,
                worklist,
                options,
                codes,
                concurrency=args.jobs,
                started=begin,
                import_root=config.root,
            ):
                if fixer is not None:
                    checked = await fixer.apply(checked)
                progress.finish_one()
                analysis = checked.analysis
                if analysis.outcome in ("worker_died", "sandbox_setup"):
                    exit_code = max(exit_code, EXIT_WORKER)
                elif fails(analysis, args.fail_on) and not args.exit_zero:
                    exit_code = max(exit_code, EXIT_ERRORS)
                if fix_mode != "diff":
                    emit(checked)
                else:
                    summary.add(checked)
    finally:
        await client.close()

    summary.seconds = time.monotonic() - started
    if fmt == "json":
        single = len(args.files) == 1 and len(documents) == 1 and found.targets[0].explicit
        doc: Any = documents[0] if single else documents
        out.write(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
    elif fmt == "sarif":
        log_doc = sarif_log(
            sarif_files, base, successful=exit_code != EXIT_WORKER, notebooks=notebooks
        )
        out.write(json.dumps(log_doc, indent=2, ensure_ascii=False) + "\n")
    out.flush()
    if fixer is not None and fix_mode == "diff":
        print(summary.text(), file=sys.stderr)
        for path, fix in fixer.not_made:
            print("fxls: " + not_made_line(path, fix), file=sys.stderr)
        print(fixer.counts.text("diff"), file=sys.stderr)
        worker_failed = exit_code == EXIT_WORKER
        return exit_code if worker_failed else (EXIT_ERRORS if fixer.counts.applied else EXIT_OK)
    print(summary.text(), file=out if fmt == "text" else sys.stderr)
    notices = summary.severities["information"] + summary.severities["hint"]
    if fmt == "github" and not args.annotate_info and notices:
        _say(
            f"{notices} information and hint diagnostic{'s' if notices != 1 else ''} not "
            "annotated (--annotate-info annotates them)"
        )
    if fixer is not None:
        for message in fixer.counts.messages:
            _say(message)
        for path, fix in fixer.not_made:
            print("fxls: " + not_made_line(path, fix), file=sys.stderr)
        print(fixer.counts.text("fix"), file=sys.stderr)
    return exit_code


# ---------------------------------------------------------------------------------------
# fxls graph
# ---------------------------------------------------------------------------------------


def _graph_target(target: str) -> tuple[str, str | None]:
    """``model.py:GPT`` -> (``model.py``, ``GPT``); ``model.py`` -> (``model.py``, None)."""
    path, sep, cls = target.rpartition(":")
    if sep and cls.isidentifier() and path and not os.path.exists(target):
        return path, cls
    return target, None


async def graph(args: argparse.Namespace) -> int:
    """Run ``fxls graph``; returns the exit code."""
    from fxls.cli.check.discovery import Target
    from fxls.cli.check.run import file_work, validate
    from fxls.cli.report.text import diagnostic_line
    from fxls.engine.analyze import AnalysisRequest, analyze
    from fxls.engine.workerclient import WorkerClient
    from fxls.graph import FORMATS as GRAPH_FORMATS
    from fxls.graph import build_graph, render_graph
    from fxls.graph.dot import NO_DOT, GraphvizMissing, dot_binary
    from fxls.protocol.files import MAX_SOURCE_BYTES, Refused, read_source

    path, cls = _graph_target(args.target)
    fmt = args.format or os.path.splitext(args.output)[1].lstrip(".").lower()
    if fmt not in GRAPH_FORMATS:
        raise UsageError(f"cannot tell the format of {args.output}: use .svg, .html or .dot")
    if fmt == "svg" and dot_binary() is None:
        raise UsageError(NO_DOT)
    config, options, python = _capture_settings(args, [path])
    text = read_source(path, cap=MAX_SOURCE_BYTES, follow_links=True)
    if isinstance(text, Refused):
        raise UsageError(f"cannot read {path}: {text}")
    work = file_work(Target(path, True), text, [cls] if cls else None, args.specs, args.init)
    if cls is None:
        if len(work.found) != 1:
            found = ", ".join(work.found) or "none"
            raise UsageError(
                f"{path} has {len(work.found)} module classes ({found}); name one: {path}:CLASS"
            )
        cls = work.found[0]
        work = file_work(Target(path, True), text, [cls], args.specs, args.init)
    validate([work], [cls], args.specs)

    def log(message: str) -> None:
        if args.verbose:
            _say(message)

    client = WorkerClient(python=python, log=log)
    try:
        try:
            await client.start()
        except Exception as exc:
            _say(f"the worker could not start: {exc}")
            return EXIT_WORKER
        analysis = await analyze(
            client,
            AnalysisRequest(
                path,
                text,
                only=[cls],
                extra_inputs=work.inputs,
                init_override=work.init,
                import_root=config.root,
            ),
            options=options,
        )
    finally:
        await client.close()
    for d in analysis.diagnostics:
        if d.severity == "error":
            print(diagnostic_line(path, d), file=sys.stderr)
    module = analysis.module(cls)
    if analysis.outcome in ("worker_died", "sandbox_setup"):
        return EXIT_WORKER
    if module is None or not module.nodes:
        _say(f"no graph for {cls}: it could not be captured")
        return EXIT_ERRORS
    started = time.monotonic()
    drawn = build_graph(path, module, collapse=not args.no_collapse)
    try:
        output = render_graph(drawn, fmt)
    except GraphvizMissing as exc:
        raise UsageError(str(exc)) from exc
    if args.output == "-":
        sys.stdout.write(output)
    else:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(output)
    collapsed = ", ".join(f"{c.path} ×{c.repeat}" for c in drawn.collapsed)
    _say(
        f"{cls}: {drawn.total_nodes} nodes, {len(drawn.nodes)} drawn"
        + (f" (collapsed {collapsed})" if collapsed else "")
        + f", {len(drawn.clusters)} clusters, {len(drawn.edges)} edges"
        + f" → {args.output} ({time.monotonic() - started:.1f} s)"
    )
    return EXIT_ERRORS if module.status == "failed" else EXIT_OK
