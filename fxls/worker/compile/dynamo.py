"""One module's ``forward`` under TorchDynamo with an eager backend: its graphs, the reasons
for each break with their user frames, and the frames compiled again at other sizes.

The backend counts the graphs TorchDynamo hands it and keeps ``compile_subgraph_reason`` of
each graph that ends at a break (what ``torch._dynamo.explain`` reports), then runs the graph
as it is. The module runs for real between graphs, so it needs values: real CPU tensors in a
job child (never in the zygote: OpenMP after fork), or meta tensors, which stop at the first
point that needs one (``.item()``, a branch on a tensor).
"""

from __future__ import annotations

import contextlib
import logging
import re
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch._dynamo
from torch import nn


@dataclass
class Frame:
    """A user frame of a break, outermost first in ``Break.frames``."""

    filename: str
    line: int
    function: str


@dataclass
class Break:
    reason: str
    frames: list[Frame]


@dataclass
class DynamoRun:
    graphs: int = 0
    breaks: list[Break] = field(default_factory=list)
    recompiles: int | None = None
    recompile_reason: str = ""
    """The first guard that failed on the third call (``tensor 'x' size mismatch at index 0``)."""
    recompile_frame: Frame | None = None
    """The function whose guard failed (its ``def`` line)."""
    error: BaseException | None = None
    """What stopped the first call (its breaks before it are kept)."""


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """TorchDynamo logs every break as a warning; the run reports them itself."""
    logger = logging.getLogger("torch._dynamo")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


GRAPH_BREAK_LOG = "torch._dynamo.symbolic_convert.__graph_breaks"
"""TorchDynamo's ``graph_breaks`` artifact logger (``TORCH_LOGS=graph_breaks``): one record per
break, also for a break after which no graph is compiled (``explain`` misses those)."""
_AT = re.compile(r"in user code at (?P<file>.+):(?P<line>\d+)\n")
_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<name>\S+)')
_REASON = re.compile(r"Graph Break Reason: (?P<reason>.*?)(?:\n\nUser code traceback:|\Z)", re.S)


class _BreakRecords(logging.Handler):
    """Keeps the graph-break records of the ``graph_breaks`` artifact logger as ``Break``s."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.breaks: list[Break] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            parsed = parse_break_record(record.getMessage())
        except Exception:  # a record torch words differently: the backend still counts
            return
        if parsed is not None:
            self.breaks.append(parsed)


def parse_break_record(text: str) -> Break | None:
    """A ``Break`` from one graph-break log record (its reason without torch's preamble
    ``Encountered graph break when attempting to trace ...``); None when it names no place."""
    at = _AT.search(text)
    found = _REASON.search(text)
    if at is None or found is None:
        return None
    reason = found.group("reason").strip()
    if reason.startswith("Encountered graph break") and "\n\n" in reason:
        reason = reason.split("\n\n", 1)[1].strip()
    frames = [Frame(m["file"], int(m["line"]), m["name"]) for m in _FRAME.finditer(text)]
    innermost = Frame(at["file"], int(at["line"]), "")
    if not frames or (frames[-1].filename, frames[-1].line) != (innermost.filename, innermost.line):
        frames.append(innermost)
    return Break(reason, frames)


@contextlib.contextmanager
def _break_records() -> Iterator[_BreakRecords]:
    """Records of every graph break while the block runs (the artifact logger enabled on its
    own, without torch's stderr handler)."""
    logger = logging.getLogger(GRAPH_BREAK_LOG)
    handler = _BreakRecords()
    saved = (logger.level, logger.propagate, logger.disabled)
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    logger.disabled = False
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(saved[0])
        logger.propagate, logger.disabled = saved[1], saved[2]


def _frames(reason: Any) -> list[Frame]:
    out = []
    for summary in getattr(reason, "user_stack", None) or []:
        out.append(Frame(str(summary.filename), int(summary.lineno or 0), str(summary.name or "")))
    return out


class _Backend:
    """An eager backend that counts graphs and keeps the break reasons of the first call."""

    def __init__(self) -> None:
        self.graphs = 0
        self.breaks: list[Break] = []
        self.recording = True

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: Any) -> Callable[..., Any]:
        self.graphs += 1
        reason = getattr(gm, "compile_subgraph_reason", None)
        if self.recording and reason is not None and getattr(reason, "graph_break", False):
            self.breaks.append(Break(str(reason.reason), _frames(reason)))
        return gm.forward


RECOMPILE_CHECK_MAX_S = 1.0
"""Recompiles are measured only after a first call that took less than this much CPU time (not
wall clock, which a busy machine stretches): the second call compiles every frame again with
dynamic sizes, which costs about as much as the first."""


def compile_run(module: nn.Module, calls: Sequence[Sequence[Any]]) -> DynamoRun:
    """Compile ``module`` and call it on ``calls[0]``; with three calls (and a first call
    quicker than ``RECOMPILE_CHECK_MAX_S``), the frames compiled on the third (sizes the
    second already made dynamic) are ``recompiles``. Resets TorchDynamo before and after, so
    classes never share compiled code."""
    torch._dynamo.reset()
    backend = _Backend()
    run = DynamoRun()
    try:
        with _quiet(), _break_records() as records, torch.no_grad():
            compiled = torch.compile(module, backend=backend)
            started = time.process_time()  # CPU time: the same answer on a busy machine
            try:
                compiled(*calls[0])
            except Exception as exc:
                run.error = exc
            quick = time.process_time() - started < RECOMPILE_CHECK_MAX_S
            backend.recording = False
            run.graphs = backend.graphs
            # the log's records first: their reasons are torch's whole message
            run.breaks = list(records.breaks) + list(backend.breaks)
            records.breaks.clear()  # the later calls' records say nothing new
            if run.error is None and len(calls) >= 3 and quick:
                _recompiles(run, compiled, backend, calls[1], calls[2])
    finally:
        torch._dynamo.reset()
    return run


def _recompiles(
    run: DynamoRun,
    compiled: Callable[..., Any],
    backend: _Backend,
    second: Sequence[Any],
    third: Sequence[Any],
) -> None:
    """Call at the second size (automatic dynamic shapes recompile once), then count the
    graphs the third size compiles, with the first guard that failed."""
    failures = torch._dynamo.utils.guard_failures
    try:
        compiled(*second)
        before = backend.graphs
        seen = {code: len(reasons) for code, reasons in failures.items()}
        compiled(*third)
    except Exception:  # another size may not run at all: nothing to say about recompiling
        return
    run.recompiles = backend.graphs - before
    for code, reasons in list(failures.items()):
        fresh = reasons[seen.get(code, 0) :]
        if fresh and run.recompiles:
            text = str(fresh[0])
            run.recompile_reason = text.split(": ", 1)[1] if ": " in text else text
            run.recompile_frame = Frame(code.co_filename, code.co_firstlineno, code.co_name)
            return
