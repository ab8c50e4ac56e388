"""Capture: execute a document, build its nn.Module classes, trace them, report what was found.

Entry point for the sandboxed child: ``run_capture(job, report_phase) -> CaptureResult``.

For each requested class: build it on the meta device (CPU when ``__init__`` needs real values),
plan example inputs (declared, evaluated, or inferred from the first layer), capture it with the
strategies of :mod:`fxls.worker.capture.strategies` in order (``fx`` with einops auto-wrapped; FX with
automatic repairs ``fx+leaf``/``fx+wrap``/``fx+concrete``; the ``fake-run`` recording of
:mod:`fxls.worker.capture.fakerun` when no FX graph can be had), propagate shapes, name every call's
arguments, lint the graph, find unused computations, warn about checks baked in while tracing
(FX108) and compare the traced graph with eager execution on fake inputs (FX109). The first FX
failure stays visible as its FX1xx diagnostic whatever strategy succeeds. Every failure is
caught per class, so one class never hides the others.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import linecache
import sys
import time
import traceback
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx
from torch import nn

from fxls.protocol import catalogue as m
from fxls.protocol.model import (
    Arg,
    CaptureJob,
    CaptureResult,
    ClassRequest,
    Diagnostic,
    ErrorInfo,
    ErrorKind,
    ModuleResult,
    NodeInfo,
    NodeOp,
    Phase,
    Related,
    Span,
    Value,
)
from fxls.protocol.positions import SourceText
from fxls.worker.capture import (
    arguments,
    failures,
    fakerun,
    graphcheck,
    inputs,
    shapes,
    strategies,
)
from fxls.worker.capture.tracer import (
    CALL_SITE_KEY,
    SPAN_KEY,
    SpanTracer,
    assign_ast_spans,
    find_function,
)

PhaseReporter = Callable[[Phase, "str | None"], None]

MAX_AUTO_LEAVES = 8
"""Submodule classes fxls keeps as leaves on its own when tracing through them fails."""

COMPARE_MAX_NODES = 60
"""Graphs up to this size are always compared with eager execution (FX109); larger ones only
when a check was specialized or a repair was applied (the comparison runs `forward` twice on
fake tensors, which costs several times the shape propagation)."""

MODULE_NAME = "__fxls_document__"
"""``__name__`` of the executed document (never ``"__main__"``)."""


# ---------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------


def _kind(exc: BaseException) -> ErrorKind:
    if isinstance(exc, SystemExit):
        return "system_exit"
    if isinstance(exc, RecursionError):
        return "recursion"
    return "exception"


def _error(phase: Phase, exc: BaseException) -> ErrorInfo:
    try:
        tb = "".join(traceback.format_exception(exc))
    except BaseException:
        tb = ""
    return ErrorInfo(kind=_kind(exc), phase=phase, type=type(exc).__name__,
                     message=_safe_str(exc), traceback=tb[-20000:])  # fmt: skip


def _safe_str(exc: BaseException) -> str:
    try:
        text = str(exc)
    except BaseException:
        text = ""
    if isinstance(exc, SystemExit):
        text = f"SystemExit({text})" if text else "SystemExit"
    return text


def _one_line(exc: BaseException) -> str:
    text = _safe_str(exc).strip().splitlines()
    first = text[0] if text else ""
    name = type(exc).__name__
    return f"{name}: {first}" if first and not first.startswith(name) else (first or name)


def _line_span(source: SourceText, line: int) -> Span:
    """The stripped text of a whole line."""
    text = source.line(line)
    start = len(text) - len(text.lstrip())
    return Span(line, start, line, len(text.rstrip()))


def _class_span(source: SourceText, line: int, name: str) -> Span:
    """The class name on its ``class`` line (the whole line when not found)."""
    text = source.line(line)
    col = text.find(f"class {name}")
    if col >= 0:
        start = col + len("class ")
        return Span(line, start, line, start + len(name))
    return _line_span(source, line)


def _user_span(exc: BaseException, path: str, source: SourceText) -> Span | None:
    spans, _, _ = failures.locate(exc, path, source)
    return spans[0] if spans else None


# ---------------------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------------------


def run_capture(job: CaptureJob, report_phase: PhaseReporter) -> CaptureResult:
    """Execute ``job.source`` and capture each requested class.

    Args:
        job: the document and the classes the server's AST pass found.
        report_phase: called with ``("import", None)``, ``("init", cls)`` and ``("trace", cls)``
            before each step, so a parent can tell where a crash or timeout happened.

    Returns:
        A ``CaptureResult`` with one ``ModuleResult`` per requested class; ``error`` is set
        (with an FX404 diagnostic) when the file itself failed to execute.
    """
    result = CaptureResult(torch_version=torch.__version__)
    source = SourceText(job.source)
    for entry in reversed(job.sys_path):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    linecache.cache[job.path] = (
        len(job.source),
        None,
        job.source.splitlines(keepends=True),
        job.path,
    )
    document = types.ModuleType(MODULE_NAME)
    document.__file__ = job.path
    namespace: dict[str, Any] = document.__dict__
    namespace["__builtins__"] = builtins
    sys.modules[MODULE_NAME] = document

    report_phase("import", None)
    try:
        code = compile(job.source, job.path, "exec")
        exec(code, namespace)
    except BaseException as exc:
        result.error = _error("import", exc)
        result.diagnostics.append(_import_diagnostic(exc, job.path, source))
        return result

    try:
        tree: ast.Module | None = ast.parse(job.source)
    except SyntaxError:
        tree = None
    ctx = _Context(job=job, source=source, namespace=namespace, tree=tree)
    for req in job.classes:
        if req.skip:
            result.modules.append(
                ModuleResult(
                    name=req.name, line=req.line, status="skipped", notes=["skipped by directive"]
                )
            )
            continue
        mod = ModuleResult(name=req.name, line=req.line, status="failed")
        try:
            _capture_class(ctx, req, mod, report_phase)
        except BaseException as exc:
            mod.status = "failed"
            mod.error = mod.error or _error("trace", exc)
        _soften_worked_around(mod)
        result.modules.append(mod)
    return result


_TRACE_FAILURE_CODES = frozenset(
    {"FX101", "FX102", "FX103", "FX104", "FX105", "FX106", "FX107", "FX199"}
)


def _soften_worked_around(mod: ModuleResult) -> None:
    """A trace failure that a fallback capture worked around becomes a warning.

    The code is still not traceable by torch.fx (which matters to FX-based tools), but the
    module itself works and fxls shows its shapes, so it is not an error of the program.
    """
    if mod.status != "partial" or not mod.outputs:
        return
    for diag in mod.diagnostics:
        if diag.code in _TRACE_FAILURE_CODES and diag.severity == "error":
            diag.severity = "warning"
            diag.data["worked_around"] = mod.strategy
            note = f"fxls worked around it and still shows shapes (strategy `{mod.strategy}`)."
            diag.fix = f"{note} {diag.fix}" if diag.fix else note


def _import_diagnostic(exc: BaseException, path: str, source: SourceText) -> Diagnostic:
    span: Span | None = None
    if isinstance(exc, SyntaxError) and exc.filename == path and exc.lineno:
        col = max((exc.offset or 1) - 1, 0)
        end_line = exc.end_lineno or exc.lineno
        end_col = (
            max((exc.end_offset or 0) - 1, col + 1)
            if end_line == exc.lineno
            else (exc.end_offset or 1) - 1
        )
        span = Span(exc.lineno, col, end_line, end_col)
    if span is None:
        span = _user_span(exc, path, source)
    if span is None:
        span = _line_span(source, 1)
    return m.FX404(span, error=_one_line(exc)).diagnostic({"type": type(exc).__name__})


# ---------------------------------------------------------------------------------------
# One class
# ---------------------------------------------------------------------------------------


@dataclass
class _Context:
    job: CaptureJob
    source: SourceText
    namespace: dict[str, Any]
    tree: ast.Module | None


@dataclass
class _Plan:
    """What is known about ``forward``'s inputs before tracing."""

    params: list[inspect.Parameter]
    symbols: inputs.Symbols
    planned: dict[str, inputs.PlannedInput] = field(default_factory=dict)
    """Declared inputs and plain-value defaults, by parameter name."""
    pending: list[str] = field(default_factory=list)
    """Parameters to infer from the traced graph."""

    declared: set[str] = field(default_factory=set)
    """Parameters given by a directive, an annotation or the CLI."""

    def concrete(self) -> dict[str, Any]:
        """Declared plain values (``# fxls: flag = True``): always passed as concrete_args."""
        return {
            name: p.value
            for name, p in self.planned.items()
            if p.kind == "value" and name in self.declared and not _has_tensor(p.value)
        }

    def defaults(self) -> dict[str, Any]:
        """Plain-value defaults not declared: placeholders unless a repair fixes them."""
        return {
            name: p.value
            for name, p in self.planned.items()
            if p.kind == "value" and name not in self.declared
        }

    def traced_names(self) -> list[str]:
        return self.pending + [n for n, p in self.planned.items() if p.kind == "tensor"]


def _has_tensor(value: Any, depth: int = 0) -> bool:
    """Tensors cannot be ``concrete_args`` (FX flattens them into broken code)."""
    if isinstance(value, torch.Tensor):
        return True
    if depth < 4 and isinstance(value, (tuple, list)):
        return any(_has_tensor(v, depth + 1) for v in value)
    if depth < 4 and isinstance(value, dict):
        return any(_has_tensor(v, depth + 1) for v in value.values())
    return False


@dataclass
class _Traced:
    """What the FX strategies produced."""

    gm: torch.fx.GraphModule | None
    partial: torch.fx.Graph
    """The graph recorded so far (the full graph on success)."""
    leaves: list[str]
    """Every leaf class used (declared, library and automatic)."""
    traced_params: dict[types.CodeType, set[str]] = field(default_factory=dict)
    """Per document function the last trace went through: parameters that held a Proxy."""


def _capture_class(
    ctx: _Context, req: ClassRequest, mod: ModuleResult, report_phase: PhaseReporter
) -> None:
    cls = ctx.namespace.get(req.name)
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        mod.status = "skipped"
        what = "not defined" if cls is None else "not an nn.Module subclass"
        mod.notes.append(f"`{req.name}` is {what} when the file runs")
        return
    class_span = _class_span(ctx.source, req.line, req.name)

    report_phase("init", req.name)
    started = time.perf_counter()
    module = _build(ctx, req, cls, mod, class_span)
    mod.timings["build"] = time.perf_counter() - started
    if module is None:
        return
    mod.params = sum(p.numel() for p in module.parameters())
    mod.buffers = sum(b.numel() for b in module.buffers())
    plan = _plan_inputs(ctx, req, module, mod, class_span)

    report_phase("trace", req.name)
    started = time.perf_counter()
    forward_def = _forward_def(ctx, module)
    traced = _trace(ctx, req, module, mod, plan, class_span, forward_def)
    mod.timings["trace"] = time.perf_counter() - started
    checks = failures.specialized_checks(forward_def, plan.traced_names(), ctx.source)
    root_code = getattr(inspect.unwrap(type(module).forward), "__code__", None)
    checks += strategies.traced_through_checks(
        traced.traced_params, ctx.tree, ctx.source, skip=[root_code] if root_code else []
    )
    specialized = _dedupe([w.diagnostic() for w in checks])
    mod.diagnostics.extend(specialized)
    gm = traced.gm
    if gm is None:
        assign_ast_spans(traced.partial, forward_def, ctx.source)
        started = time.perf_counter()
        _fake_run(ctx, req, module, mod, plan, traced, class_span, forward_def)
        mod.timings["shapes"] = time.perf_counter() - started
        return
    assign_ast_spans(gm.graph, forward_def, ctx.source)

    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    ordered = _complete_inputs(gm, placeholders, plan, req, mod, class_span)

    values: dict[str, list[Value]] = {}
    examples: dict[str, Any] = {}
    if ordered is None:
        mod.status = "partial"
        mod.notes.append("shapes unavailable: some inputs are unknown")
    else:
        started = time.perf_counter()
        targets = [str(n.target) for n in placeholders]
        values, examples = _shapes(ctx, gm, ordered, targets, mod)
        mod.timings["shapes"] = time.perf_counter() - started
        suspicious = bool(specialized) or mod.strategy != "fx"
        cheap = len(gm.graph.nodes) <= COMPARE_MAX_NODES
        if (suspicious or cheap) and not any(d.code == "FX201" for d in mod.diagnostics):
            started = time.perf_counter()
            _compare_with_eager(ctx, module, mod, gm, ordered, targets, traced, specialized)
            mod.timings["compare"] = time.perf_counter() - started

    mod.diagnostics.extend(d.diagnostic() for d in graphcheck.lint(gm.graph, class_span))
    mod.diagnostics.extend(d.diagnostic() for d in graphcheck.unused(gm.graph, ctx.source))
    mod.nodes = [_node_info(gm, node, values, examples) for node in gm.graph.nodes]
    output = next((n for n in gm.graph.nodes if n.op == "output"), None)
    if output is not None:
        mod.outputs = values.get(output.name) or _output_values(output, values)


def _dedupe(diagnostics: list[Diagnostic]) -> list[Diagnostic]:
    seen: set[tuple[Any, ...]] = set()
    out = []
    for d in diagnostics:
        key = (d.code, d.span.line, d.span.col, d.span.end_line, d.span.end_col)
        if key not in seen:
            seen.add(key)
            out.append(d)
    return out


def _compare_with_eager(
    ctx: _Context,
    module: nn.Module,
    mod: ModuleResult,
    gm: torch.fx.GraphModule,
    ordered: list[inputs.PlannedInput],
    targets: list[str],
    traced: _Traced,
    specialized: list[Diagnostic],
) -> None:
    """FX109 when the traced graph and eager execution on fake inputs give other outputs."""
    feeds = [
        shapes.ExampleInput(name=t, kind=p.kind, dims=p.dims, dtype=p.dtype, value=p.value)
        for p, t in zip(ordered, targets)
    ]
    try:
        found = strategies.eager_divergence(
            gm, module, feeds, ctx.job.path, ctx.job.source, traced.leaves
        )
    except Exception as exc:  # the comparison is a bonus: never lose the capture over it
        mod.notes.append(f"comparing with eager execution failed: {_one_line(exc)}")
        return
    if found is None:
        return
    class_span = _class_span(ctx.source, mod.line, mod.name)
    span = specialized[0].span if specialized else class_span
    related = [Related(d.span, "decided once while tracing") for d in specialized[1:]]
    if specialized:
        related.insert(0, Related(class_span, f"`{mod.name}` traced with inputs {found.sizes}"))
    diag = m.FX109(span, related, traced=found.traced, eager=found.eager)
    mod.diagnostics.append(diag.diagnostic({"sizes": found.sizes}))
    mod.status = "partial"


def _plan_inputs(
    ctx: _Context, req: ClassRequest, module: nn.Module, mod: ModuleResult, class_span: Span
) -> _Plan:
    """Declared inputs (FX403 when invalid), plain-value defaults, and what is left to infer."""
    try:
        params = inputs.forward_parameters(module)
    except (TypeError, ValueError):
        params = []
    plan = _Plan(params=params, symbols=inputs.Symbols(req.inputs))
    specs = {spec.name: spec for spec in req.inputs}
    for param in params:
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        spec = specs.get(param.name)
        if spec is not None:
            try:
                plan.planned[param.name] = inputs.from_spec(spec, plan.symbols, ctx.namespace)
                plan.declared.add(param.name)
                continue
            except inputs.InputError as exc:
                span = _line_span(ctx.source, spec.line) if spec.line else class_span
                error = f"`{param.name}`: {exc}"
                mod.diagnostics.append(m.FX403(span, error=error).diagnostic({"arg": param.name}))
        if inputs.keeps_default(param):
            plan.planned[param.name] = inputs.PlannedInput(param.name, "value", value=param.default)
        else:
            plan.pending.append(param.name)
    names = {p.name for p in params}
    for spec in req.inputs:
        if spec.name not in names:
            span = _line_span(ctx.source, spec.line) if spec.line else class_span
            error = f"`{req.name}.forward` has no parameter `{spec.name}`"
            mod.diagnostics.append(m.FX403(span, error=error).diagnostic({"arg": spec.name}))
    return plan


def _trace(
    ctx: _Context,
    req: ClassRequest,
    module: nn.Module,
    mod: ModuleResult,
    plan: _Plan,
    class_span: Span,
    forward_def: ast.FunctionDef | ast.AsyncFunctionDef | None,
) -> _Traced:
    """Trace ``module`` with the FX strategies (see :mod:`fxls.worker.capture.strategies`).

    Each failed attempt is explained (FX1xx at its span) and, when a repair applies (leaf,
    wrap, concrete), the trace is retried with it, at most ``MAX_AUTO_LEAVES`` leaves
    and ``strategies.MAX_ATTEMPTS`` attempts in all. Sets ``mod.status``/``capture``/``notes``
    on success, ``mod.error`` and status ``failed`` when no FX graph could be had.
    """
    functions, library_modules = strategies.library_autowrap()
    library_leaves = strategies.library_leaf_classes(module)
    repairs = strategies.Repairs()
    defaults = plan.defaults()
    param_names = [p.name for p in plan.params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    reported: set[tuple[str, int, int]] = set()
    auto_leaves = 0

    def leaves() -> list[str]:
        return [*req.leaf, *repairs.leaves]

    tracer = SpanTracer(ctx.job.path, ctx.source)
    for _attempt in range(strategies.MAX_ATTEMPTS):
        tracer = SpanTracer(
            ctx.job.path,
            ctx.source,
            leaves(),
            autowrap_functions=[*functions, *repairs.wraps],
            autowrap_modules=library_modules,
            leaf_predicate=strategies.is_library_leaf,
        )
        concrete = plan.concrete()
        concrete.update({name: defaults[name] for name in repairs.concrete})
        try:
            graph = tracer.trace(module, concrete_args=concrete or None)
            gm = torch.fx.GraphModule(tracer.root, graph, type(module).__name__)
        except BaseException as exc:
            failure = failures.explain(
                exc, ctx.job.path, ctx.source, req.name, class_span, ctx.tree
            )
            text = ctx.source.text(failure.span) if failure.span is not None else ""
            repair = strategies.next_repair(
                exc, module, ctx.namespace, ctx.job.path, repairs, leaves(), defaults, text
            )
            if repair is not None and repair.kind == "leaf" and auto_leaves >= MAX_AUTO_LEAVES:
                repair = None
            data: dict[str, Any] = {"exception": type(exc).__name__}
            if repair is not None:
                data[repair.kind] = repair.target
            diag = failure.message.diagnostic(data)
            key = (diag.code, diag.span.line, diag.span.col)
            if key not in reported:
                reported.add(key)
                mod.diagnostics.append(diag)
            if repair is None:
                mod.error = _error("trace", exc)
                mod.status = "failed"
                return _Traced(
                    None, tracer.graph, [*req.leaf, *library_leaves], tracer.traced_params
                )
            auto_leaves += repair.kind == "leaf"
            repairs.add(repair)
            continue
        used = strategies.used_value_placeholders(
            gm, [n for n in defaults if n not in repairs.concrete], param_names
        )
        if used:
            repairs.add(strategies.Repair("concrete", ", ".join(used), names=used))
            continue
        break
    else:
        mod.status = "failed"
        mod.notes.append(f"gave up tracing after {strategies.MAX_ATTEMPTS} attempts")
        return _Traced(None, tracer.graph, [*req.leaf, *library_leaves], tracer.traced_params)
    if concrete:
        _drop_concrete_guards(gm)
    mod.status = "partial" if repairs.applied else "traced"
    mod.strategy = repairs.label(declared_leaves=bool(req.leaf))
    mod.notes.extend(repairs.notes(defaults))
    return _Traced(gm, gm.graph, leaves() + library_leaves, tracer.traced_params)


def _drop_concrete_guards(gm: torch.fx.GraphModule) -> None:
    """Remove the ``_assert(flag == False, "... has been specialized ...")`` nodes FX adds for
    ``concrete_args``: they have no source line and only guard against other values."""
    changed = False
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target is not torch._assert or node.users:
            continue
        if "has been specialized to have value" not in str(node.args[1:2]):
            continue
        condition = node.args[0]
        gm.graph.erase_node(node)
        if isinstance(condition, torch.fx.Node) and not condition.users:
            gm.graph.erase_node(condition)
        changed = True
    if changed:
        gm.recompile()


def _fake_run(
    ctx: _Context,
    req: ClassRequest,
    module: nn.Module,
    mod: ModuleResult,
    plan: _Plan,
    traced: _Traced,
    class_span: Span,
    forward_def: ast.FunctionDef | ast.AsyncFunctionDef | None,
) -> None:
    """Strategy 3: run ``forward`` on fake tensors and record every torch call it makes.

    Inputs not declared are inferred from the graph FX recorded before it failed. The recorded
    graph gives per-line nodes with named arguments and shapes (strategy ``fake-run``, status
    ``partial``; graph rewrites are not offered for it). When ``forward`` raises on fake tensors
    too (a data-dependent branch), the nodes recorded before the failure are kept and the FX
    failure diagnostic stays.
    """
    partial = traced.partial
    placeholders = [n for n in partial.nodes if n.op == "placeholder"]
    by_param = dict(zip(_placeholder_params(placeholders, plan.params), placeholders))
    params = [p for p in plan.params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    ordered: list[inputs.PlannedInput] = []
    for param in params:
        planned = plan.planned.get(param.name)
        node = by_param.get(param.name)
        span = node.meta.get(SPAN_KEY, class_span) if node is not None else class_span
        if planned is None:
            planned = inputs.infer(module, node, plan.symbols) if node is not None else None
            if planned is None:
                diag = m.FX402(span, arg=param.name, cls=req.name)
                mod.diagnostics.append(diag.diagnostic({"arg": param.name}))
                return
            planned.name = param.name
            shape = planned.shape_text()
            info = m.FX405(span, arg=f"`{param.name}`", shape=shape, reason=planned.reason)
            mod.diagnostics.append(info.diagnostic({"arg": param.name, "shape": shape}))
        ordered.append(planned)
    mod.input_names = [p.name for p in ordered]
    mod.inputs = [p.protocol_value() for p in ordered]
    mod.inputs_assumed = [p.assumed for p in ordered]

    example_inputs = [
        shapes.ExampleInput(name=p.name, kind=p.kind, dims=p.dims, dtype=p.dtype, value=p.value)
        for p in ordered
    ]
    try:
        run = fakerun.fake_run(
            module,
            example_inputs,
            ctx.job.path,
            symbolic=ctx.job.symbolic,
            leaf_classes=traced.leaves,
            source=ctx.job.source,
        )
        if run.error is not None and run.mode == "symbolic":
            # some kernels refuse symbolic sizes; static sizes still give the shapes
            static = fakerun.fake_run(
                module,
                example_inputs,
                ctx.job.path,
                symbolic=False,
                leaf_classes=traced.leaves,
                source=ctx.job.source,
            )
            if static.error is None:
                run = static
                mod.notes.append(
                    "named dimensions could not stay symbolic while running `forward`; the "
                    "shapes are for the example sizes"
                )
    except Exception as exc:
        mod.notes.append(f"running forward on fake tensors failed: {_one_line(exc)}")
        return
    gm = run.graph_module
    if gm is None:
        mod.notes.append("running forward on fake tensors recorded no usable graph")
        return
    assign_ast_spans(gm.graph, forward_def, ctx.source)
    mod.nodes = [
        _node_info(gm, node, run.values, run.examples, rename=run.rename) for node in gm.graph.nodes
    ]
    mod.strategy = "fake-run"
    output = next((n for n in gm.graph.nodes if n.op == "output"), None)
    if run.error is None and output is not None:
        mod.outputs = list(run.values.get(output.name, []))
        mod.status = "partial"
        mod.error = None
        mod.diagnostics.extend(d.diagnostic() for d in graphcheck.unused(gm.graph, ctx.source))
        mod.notes.append(
            "torch.fx could not trace `forward`; its nodes and shapes come from running it on "
            "fake tensors (no FX graph: graph rewrites are not offered)"
        )
        return
    where = f" at line {run.error_span.line}" if run.error_span is not None else ""
    error = _one_line(run.error) if run.error is not None else "no output"
    if run.error is not None and "DataDependent" in type(run.error).__name__:
        error = "a Python decision depends on tensor values, which fake tensors do not have"
    mod.status = "failed"  # no outputs: the FX error stays, the nodes before it are shown
    mod.notes.append(
        f"torch.fx could not trace `forward`, and running it on fake tensors stopped{where} "
        f"({error}); only the operations before that point are shown"
    )


def _complete_inputs(
    gm: torch.fx.GraphModule,
    placeholders: list[torch.fx.Node],
    plan: _Plan,
    req: ClassRequest,
    mod: ModuleResult,
    class_span: Span,
) -> list[inputs.PlannedInput] | None:
    """Inputs in placeholder order, undeclared tensors inferred from their first layer (FX405);
    None when one cannot be inferred (FX402)."""
    ordered: list[inputs.PlannedInput] = []
    missing = False
    for node, param_name in zip(placeholders, _placeholder_params(placeholders, plan.params)):
        span = node.meta.get(SPAN_KEY, class_span)
        planned = plan.planned.get(param_name)
        if planned is None:
            planned = inputs.infer(gm, node, plan.symbols)
            if planned is None:
                missing = True
                diag = m.FX402(span, arg=param_name, cls=req.name)
                mod.diagnostics.append(diag.diagnostic({"arg": param_name}))
                continue
            planned.name = param_name
            shape = planned.shape_text()
            info = m.FX405(span, arg=f"`{param_name}`", shape=shape, reason=planned.reason)
            mod.diagnostics.append(info.diagnostic({"arg": param_name, "shape": shape}))
        ordered.append(planned)
    mod.input_names = [p.name for p in ordered]
    mod.inputs = [p.protocol_value() for p in ordered]
    mod.inputs_assumed = [p.assumed for p in ordered]
    return None if missing else ordered


def _placeholder_params(
    placeholders: list[torch.fx.Node], params: list[inspect.Parameter]
) -> list[str]:
    """The forward parameter each placeholder stands for (fx renames concrete ones ``flag_1``)."""
    names = [p.name for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    out = []
    for i, node in enumerate(placeholders):
        target = str(node.target).lstrip("*")
        if target in names:
            out.append(target)
        elif i < len(names):
            out.append(names[i])
        else:
            out.append(target)
    return out


def _forward_def(ctx: _Context, module: nn.Module) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    if ctx.tree is None:
        return None
    fn = inspect.unwrap(getattr(type(module), "forward", None))  # type: ignore[arg-type]
    code = getattr(fn, "__code__", None)
    if code is None or code.co_filename != ctx.job.path:
        return None
    return find_function(ctx.tree, code)


def _build(
    ctx: _Context, req: ClassRequest, cls: type, mod: ModuleResult, class_span: Span
) -> nn.Module | None:
    """Build ``cls`` (meta device first, then CPU); diagnostics FX401/FX406 on the way."""

    def construct() -> Any:
        if req.init and req.init.strip():
            return eval(f"_fxls_class({req.init})", ctx.namespace, {"_fxls_class": cls})
        return cls()

    meta_error: BaseException | None = None
    if ctx.job.meta_init:
        try:
            with torch.device("meta"):
                module = construct()
            mod.build = "meta"
            return _checked(module, req, mod, class_span)
        except BaseException as exc:
            meta_error = exc
            if isinstance(exc, SystemExit):
                mod.error = _error("init", exc)
                mod.diagnostics.append(_build_failed(ctx, req, cls, exc, class_span))
                return None
    try:
        module = construct()
    except BaseException as exc:
        mod.error = _error("init", exc)
        mod.diagnostics.append(_build_failed(ctx, req, cls, exc, class_span))
        return None
    mod.build = "cpu"
    if meta_error is not None:
        mod.diagnostics.append(
            m.FX406(class_span, cls=req.name, error=_one_line(meta_error)).diagnostic()
        )
    return _checked(module, req, mod, class_span)


def _checked(
    module: Any, req: ClassRequest, mod: ModuleResult, class_span: Span
) -> nn.Module | None:
    if not isinstance(module, nn.Module):
        mod.diagnostics.append(
            m.FX401(
                class_span,
                cls=req.name,
                error=f"the constructor returned {type(module).__name__}",
                example="...",
            ).diagnostic()
        )
        return None
    return module.eval()


def _build_failed(
    ctx: _Context, req: ClassRequest, cls: type, exc: BaseException, class_span: Span
) -> Diagnostic:
    example = _init_example(cls)
    span = class_span
    if req.init and req.init_line:
        span = _line_span(ctx.source, req.init_line)
    related = []
    inner = _user_span(exc, ctx.job.path, ctx.source)
    if inner is not None and inner != span:
        related.append(Related(inner, f"raised here: {_one_line(exc)}"))
    return m.FX401(span, related, cls=req.name, error=_one_line(exc), example=example).diagnostic(
        {"example": example}
    )


def _init_example(cls: type) -> str:
    """``dim=..., heads=...`` for the required constructor parameters."""
    try:
        sig = inspect.signature(cls.__init__)  # type: ignore[misc]
    except (TypeError, ValueError):
        return "..."
    required = [
        f"{p.name}=..."
        for p in list(sig.parameters.values())[1:]
        if p.default is p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    ]
    return ", ".join(required) or "..."


# ---------------------------------------------------------------------------------------
# Shapes and arguments
# ---------------------------------------------------------------------------------------


def _shapes(
    ctx: _Context,
    gm: torch.fx.GraphModule,
    ordered: list[inputs.PlannedInput],
    targets: list[str],
    mod: ModuleResult,
) -> tuple[dict[str, list[Value]], dict[str, Any]]:
    """Propagate shapes; FX201 at the failing node. Returns (values, examples).

    ``targets`` are the placeholders' targets, in order (fx renames concrete ones ``flag_1``).
    """
    example_inputs = [
        shapes.ExampleInput(name=t, kind=p.kind, dims=p.dims, dtype=p.dtype, value=p.value)
        for p, t in zip(ordered, targets)
    ]
    try:
        prop = shapes.propagate(gm, example_inputs, symbolic=ctx.job.symbolic)
    except Exception as exc:
        mod.status = "partial"
        at = _class_span(ctx.source, mod.line, mod.name)
        mod.diagnostics.append(m.FX202(at, node=mod.name, error=_one_line(exc)).diagnostic())
        return {}, {}
    values, examples = dict(prop.values), dict(prop.examples)
    failed_node = prop.error.node if prop.error is not None else None
    message = prop.error.message if prop.error is not None else ""
    if failed_node is not None:
        mod.status = "partial"
        node = next((n for n in gm.graph.nodes if n.name == failed_node), None)
        span = node.meta.get(SPAN_KEY) if node is not None else None
        call_site = node.meta.get(CALL_SITE_KEY) if node is not None else None
        related = []
        if call_site is not None and call_site != span:
            related.append(Related(call_site, f"called from `{mod.name}.forward` here"))
        text = ctx.source.text(span).strip() if span is not None else ""
        shown = text if 0 < len(text) <= 60 and "\n" not in text else failed_node
        diag = m.FX201(
            span or _class_span(ctx.source, mod.line, mod.name), related, node=shown, error=message
        )
        mod.diagnostics.append(diag.diagnostic({"node": failed_node}))
    return values, examples


def _output_values(output: torch.fx.Node, values: Mapping[str, list[Value]]) -> list[Value]:
    found: list[Value] = []

    def collect(n: torch.fx.Node) -> torch.fx.Node:
        found.extend(values.get(n.name, []))
        return n

    torch.fx.node.map_arg(output.args, collect)
    return found


def _named_arguments(
    gm: torch.fx.GraphModule, node: torch.fx.Node, examples: Mapping[str, Any]
) -> tuple[list[Arg], str | None]:
    if node.op not in ("call_function", "call_method", "call_module"):
        return [], None
    try:
        args, signature = arguments.named_arguments(gm, node, examples)
    except Exception:
        return [], None
    return list(args), signature


# ---------------------------------------------------------------------------------------
# Node infos
# ---------------------------------------------------------------------------------------

_TARGET_NAMES: dict[int, str] = {}


def _target_names() -> dict[int, str]:
    if not _TARGET_NAMES:
        import operator

        for prefix, namespace in (
            ("operator", operator),
            ("torch", torch),
            ("torch.nn.functional", torch.nn.functional),
        ):
            for name in dir(namespace):
                if name.startswith("_"):
                    continue
                obj = getattr(namespace, name, None)
                if callable(obj) and not isinstance(obj, type):
                    _TARGET_NAMES.setdefault(id(obj), f"{prefix}.{name}")
    return _TARGET_NAMES


def readable_target(node: torch.fx.Node) -> str:
    """``conv1``, ``torch.nn.functional.relu``, ``operator.add``, ``view``."""
    target = node.target
    if node.op == "call_function":
        name = _target_names().get(id(target))
        if name is not None:
            return name
        try:
            return torch.fx.node._get_qualified_name(target)  # type: ignore[arg-type]
        except Exception:
            return getattr(target, "__name__", str(target))
    if node.op == "output":
        return "output"
    return str(target)


def _module_type(gm: torch.fx.GraphModule, target: str) -> str | None:
    try:
        sub = gm.get_submodule(target)
    except AttributeError:
        return None
    try:
        extra = sub.extra_repr()
    except Exception:
        extra = ""
    text = f"{type(sub).__name__}({extra})"
    return text if len(text) <= 200 else text[:196] + "...)"


def _module_path(node: torch.fx.Node) -> str:
    stack = node.meta.get("nn_module_stack") or {}
    paths = [path for path, _ in stack.values()]
    if node.op == "call_module" and paths and paths[-1] == node.target:
        paths = paths[:-1]
    return paths[-1] if paths else ""


def _node_info(
    gm: torch.fx.GraphModule,
    node: torch.fx.Node,
    values: Mapping[str, list[Value]],
    examples: Mapping[str, Any],
    rename: Callable[[str], str] | None = None,
) -> NodeInfo:
    args, signature = _named_arguments(gm, node, examples)
    if rename is not None:
        for arg in args:
            arg.value = rename(arg.value)
    return NodeInfo(
        name=node.name,
        op=typing.cast(NodeOp, node.op),
        target=readable_target(node),
        span=node.meta.get(SPAN_KEY),
        call_site=node.meta.get(CALL_SITE_KEY),
        args=args,
        signature=signature,
        outputs=list(values.get(node.name, [])),
        module_type=_module_type(gm, str(node.target)) if node.op == "call_module" else None,
        module_path=_module_path(node),
        users=len(node.users),
    )
