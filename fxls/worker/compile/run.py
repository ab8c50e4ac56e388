"""The ``compile`` job: capture the document once (the same builds and inputs as its capture job),
then compile each captured class's ``forward`` with TorchDynamo and report its graph breaks.

A class of at most ``RewriteJob.max_params`` parameters is built again on the CPU the way its
capture built it (:mod:`fxls.worker.rewrite.verify`) and runs on small random inputs of its
captured sizes, as the verification of a fix does; a larger one runs as captured, on the meta
device, and the check stops (FX607) at the first point that needs a value.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.utils._pytree import tree_map

from fxls.protocol import catalogue
from fxls.protocol.model import (
    CaptureJob,
    CaptureResult,
    CompileCheck,
    Diagnostic,
    GraphBreak,
    ModuleResult,
    Phase,
    RewriteJob,
    Span,
)
from fxls.worker.capture.pipeline import capture_document
from fxls.worker.capture.reporting import one_line, user_span
from fxls.worker.compile import kinds
from fxls.worker.compile.dynamo import Break, compile_run
from fxls.worker.rewrite.base import Original
from fxls.worker.rewrite.verify import INT_HIGH, make_inputs, randomize, rebuild_plan

PhaseReporter = Callable[[Phase, "str | None"], None]

MAX_BREAKS = 50
"""Breaks reported per class (each is one diagnostic)."""


def run_compile(job: CaptureJob, rewrite: RewriteJob, report: PhaseReporter) -> CaptureResult:
    """Compile check of every class of ``job`` that its capture built: one ``ModuleResult`` per
    class with ``compile`` set and its FX6xx diagnostics (nothing else of the capture)."""
    doc, captured = capture_document(job, report)
    result = CaptureResult(torch_version=torch.__version__)
    if captured.error is not None:
        what = captured.error.type
        reason = f"a cell raised {what}" if job.notebook else f"the file does not run: {what}"
        result.modules = [_skipped(m, reason) for m in captured.modules]
        return result
    original = Original(doc, captured)
    for mod in captured.modules:
        if not built(doc.captures.get(mod.name)):
            result.modules.append(
                _skipped(mod, "the class was not built or its inputs are unknown")
            )
            continue
        report("trace", mod.name)
        started = time.monotonic()
        try:
            out = check_class(original, mod, rewrite)
        except Exception as exc:  # fxls's own failure for one class never hides the others
            out = _skipped(mod, f"fxls failed: {one_line(exc)}", status="failed")
        if out.compile is not None:
            out.compile.duration_s = time.monotonic() - started
        result.modules.append(out)
    return result


def built(capture: Any) -> bool:
    """Whether a class's capture built an instance and knows its inputs (a class torch.fx
    cannot trace is checked too: TorchDynamo may compile it)."""
    return (
        capture is not None
        and getattr(capture, "module", None) is not None
        and getattr(capture, "feeds", None) is not None
    )


def _skipped(mod: ModuleResult, message: str, status: str = "skipped") -> ModuleResult:
    if len(message) > kinds.MAX_REASON:
        message = message[: kinds.MAX_REASON - 1] + "…"
    check = CompileCheck("failed" if status == "failed" else "skipped", message=message)
    return ModuleResult(name=mod.name, line=mod.line, status=mod.status, compile=check)


def check_class(original: Original, mod: ModuleResult, rewrite: RewriteJob) -> ModuleResult:
    """The compile check of one captured class."""
    module, calls, tensors = instance(original, mod.name, rewrite)
    run = compile_run(module, calls if tensors == "cpu" else calls[:1])
    source, path = original.doc.source, original.doc.path
    check = CompileCheck("ok", graphs=run.graphs, recompiles=run.recompiles, tensors=tensors)
    out = ModuleResult(name=mod.name, line=mod.line, status=mod.status, compile=check)
    class_span = original.capture(mod.name).span
    check.breaks = _located(run.breaks, path, source, class_span)
    check.breaks.sort(key=lambda b: (b.span.line, b.span.col))
    out.diagnostics.extend(_break_diagnostic(found) for found in check.breaks)
    if run.error is not None:
        _stopped(out, check, run.error, (path, source, class_span))
    if run.recompiles:
        frame = run.recompile_frame
        at = source.line_span(frame.line) if frame and frame.filename == path else class_span
        reason = kinds.short_reason(run.recompile_reason or "a guard on a size failed")
        out.diagnostics.append(catalogue.FX608(at, cls=mod.name, reason=reason).diagnostic())
    return out


def _stopped(
    out: ModuleResult, check: CompileCheck, error: BaseException, where: tuple[str, Any, Span]
) -> None:
    """The first call raised: at a point that needs a value the tensors do not have, the
    check ``stopped`` there (FX607); any other error is the module's own (the capture reports
    it), so the check ``failed`` without a diagnostic. Breaks found before it stay."""
    path, source, class_span = where
    text = one_line(error)
    if len(text) > kinds.MAX_REASON:
        text = text[: kinds.MAX_REASON - 1] + "…"
    check.message = f"running `forward` on {check.tensors} tensors raised {text}"
    if not kinds.needs_values(text):
        check.status = "failed"
        return
    check.status = "stopped"
    at = user_span(error, path, source) or class_span
    stopped = catalogue.FX607(at, cls=out.name, reason=check.message, tensors=check.tensors)
    out.diagnostics.append(stopped.diagnostic())


def _located(breaks: list[Break], path: str, source: Any, class_span: Span) -> list[GraphBreak]:
    """One break per line (the first record of it says most), at most ``MAX_BREAKS``; a break
    with no frame in the document (inside torch's own modules, seen again through a resume
    function) goes on the class line only when no break of its kind has a line of its own."""
    out: list[GraphBreak] = []
    homeless: list[GraphBreak] = []
    seen: set[int] = set()
    for brk in breaks:
        found = _graph_break(brk, path, source, class_span)
        if found.span is class_span:
            homeless.append(found)
        elif found.span.line not in seen:
            seen.add(found.span.line)
            out.append(found)
    kinds_seen = {b.code for b in out}
    for found in homeless:
        if found.code not in kinds_seen:
            kinds_seen.add(found.code)
            out.append(found)
    return out[:MAX_BREAKS]


def _graph_break(brk: Break, path: str, source: Any, class_span: Span) -> GraphBreak:
    """The break at the innermost frame of the document (class line when it has none)."""
    mine = [f for f in brk.frames if f.filename == path and f.line >= 1]
    reason = kinds.short_reason(brk.reason)
    code = kinds.code_of(brk.reason)
    if not mine:
        return GraphBreak(code, reason, class_span)
    frame = mine[-1]
    function = frame.function
    if function.startswith("torch_dynamo_resume_in_"):
        function = function.removeprefix("torch_dynamo_resume_in_").rsplit("_at_", 1)[0]
    return GraphBreak(code, reason, source.line_span(frame.line), function)


_MESSAGES: dict[str, Callable[[Span, str], catalogue.Message]] = {
    "FX601": lambda span, reason: catalogue.FX601(span, reason=reason),
    "FX602": lambda span, reason: catalogue.FX602(span, reason=reason),
    "FX603": lambda span, reason: catalogue.FX603(span, reason=reason),
    "FX604": lambda span, reason: catalogue.FX604(span, reason=reason),
    "FX605": lambda span, reason: catalogue.FX605(span, reason=reason),
    "FX606": lambda span, reason: catalogue.FX606(span, reason=reason),
    "FX699": lambda span, reason: catalogue.FX699(span, reason=reason),
}
"""The message of each kind of break (:func:`fxls.worker.compile.kinds.code_of`)."""


def _break_diagnostic(found: GraphBreak) -> Diagnostic:
    make = _MESSAGES.get(found.code, _MESSAGES["FX699"])
    return make(found.span, found.reason).diagnostic({"function": found.function})


def instance(
    original: Original, name: str, rewrite: RewriteJob
) -> tuple[nn.Module, list[list[Any]], str]:
    """The module, three calls' arguments (the captured sizes, then two other batch sizes)
    and the kind of tensors: a CPU build when it is small enough, else the captured one."""
    capture = original.capture(name)
    feeds = capture.feeds or []
    plan = rebuild_plan(original, name)
    small = not isinstance(plan, str) and (plan.root_params or 0) <= rewrite.max_params
    if small and not isinstance(plan, str):
        try:
            torch.manual_seed(rewrite.seed)
            module = plan.build(original.doc, "cpu")
            with torch.no_grad():
                randomize(module, rewrite.seed)
            module.eval()
            return module, _calls(feeds, module, rewrite.seed), "cpu"
        except Exception:  # not buildable on the CPU: run it as captured
            pass
    captured: nn.Module | None = capture.module
    if captured is None:
        raise ValueError(f"`{name}` has no built instance")
    calls = [[tree_map(_to_meta, a) for a in args] for args in _calls(feeds, None, rewrite.seed)]
    return captured, calls, "meta"


def _to_meta(value: Any) -> Any:
    return value.to("meta") if isinstance(value, torch.Tensor) else value


def _calls(feeds: list[Any], module: nn.Module | None, seed: int) -> list[list[Any]]:
    high = _int_high(module) if module is not None else INT_HIGH
    first = next((f for f in feeds if f.kind == "tensor" and f.dims), None)
    batch = first.dims[0][1] if first is not None else None
    out = [make_inputs(feeds, None, seed, high)]
    if batch is not None:
        out += [make_inputs(feeds, batch + k, seed + k, high) for k in (1, 2)]
    return out


def _int_high(module: nn.Module) -> int:
    sizes = [m.num_embeddings for m in module.modules() if isinstance(m, nn.Embedding)]
    return min(sizes) if sizes else INT_HIGH
