"""User passes: functions of the document that take and return a ``GraphModule``.

A function marked ``# fxls: pass Net`` above its ``def`` runs, in the sandboxed child, on a deep
copy of ``Net``'s traced module, after the capture of the file (``capture`` jobs only: files
without pass directives pay nothing). While it runs, the graph edits it makes are observed —
``Graph.create_node`` (and so ``node_copy`` and ``call_function``...), ``Graph.erase_node``,
``Node.replace_all_uses_with``, ``Node.replace_input_with``, the ``args``/``kwargs`` setters and
``prepend``/``append`` — and each records the innermost frame of the document on the stack, the
same way the tracer maps nodes to ``forward``. The graph it returns is then checked, and every
problem is reported at the line of the pass that created or broke the node (FX351-FX358):

- ``erase_node`` of a node that still has users (FX352, at the ``erase_node`` call);
- a node that reads a node of another graph: ``node_copy`` without ``arg_transform`` (FX354);
- a node used before its definition (FX353, where the used node was created or the use made);
- no output node, or two (FX355);
- any other ``Graph.lint()`` failure (FX351);
- the pass raising (FX356, at the raising line; when it is the pass's own ``graph.lint()``
  that raises, the graph is checked as above and the problem blamed on the edit that made it,
  as if the pass had returned the graph) or returning something that is not a
  ``GraphModule``/``Graph`` (FX357, at the ``return``); a pass that runs longer than its budget
  (:data:`PASS_SECONDS`) is stopped and reported as raising, at the line it was running.

The graph before and after (nodes added, removed, replaced) travels as ``PassResult``.
"""

from __future__ import annotations

import copy
import resource
import signal
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import CodeType, FrameType, FunctionType
from typing import Any

import torch
import torch.fx

from fxls.protocol import catalogue
from fxls.protocol.labels import strategy_label
from fxls.protocol.model import (
    ClassRequest,
    Diagnostic,
    ModuleResult,
    PassChange,
    PassRequest,
    PassResult,
    Phase,
    Related,
    Span,
)
from fxls.protocol.positions import SourceText
from fxls.worker.capture.document import ExecutedDocument
from fxls.worker.capture.records.nodes import readable_target
from fxls.worker.capture.reporting import line_span, one_line, safe_str, user_span
from fxls.worker.capture.spans import SPAN_KEY

PASS_SECONDS = 5.0
"""Longest a pass may run; less when the capture already used most of the job's CPU limit (a
third of what is left, at least half a second), so that a pass that hangs is reported at its
line (FX356) instead of losing the capture of the file to the job's time-out."""
MAX_CHANGES = 200
"""Changes listed per pass (all are counted)."""
MAX_ERROR = 500
"""Characters of a lint message kept."""


@dataclass
class Edits:
    """What a pass did to graphs while it ran, each edit with the pass's line that made it."""

    path: str
    source: SourceText
    created: dict[torch.fx.Node, Span | None] = field(default_factory=dict)
    touched: dict[torch.fx.Node, Span | None] = field(default_factory=dict)
    """Nodes whose inputs were changed, with the last place it happened."""
    moved: dict[torch.fx.Node, Span | None] = field(default_factory=dict)
    """Nodes moved with ``prepend``/``append``, with the last place it happened."""
    replaced: dict[torch.fx.Node, torch.fx.Node] = field(default_factory=dict)
    """``old.replace_all_uses_with(new)``: old -> new."""
    erased: dict[torch.fx.Node, Span | None] = field(default_factory=dict)
    erase_failed: tuple[BaseException | None, torch.fx.Node, str, Span | None] | None = None
    """The last ``erase_node`` of a node with users: (exception, node, its users, where)."""

    def where(self) -> Span | None:
        """The innermost frame of the document on the current stack."""
        frame: FrameType | None = sys._getframe(2)
        while frame is not None:
            if frame.f_code.co_filename == self.path:
                return self.source.code_span(frame.f_code, frame.f_lasti)
            frame = frame.f_back
        return None


@contextmanager
def observed(edits: Edits) -> Iterator[None]:
    """Record the graph edits made inside the block into ``edits``."""
    Graph, Node = torch.fx.Graph, torch.fx.Node
    create_node = Graph.create_node
    erase_node = Graph.erase_node
    replace_all = Node.replace_all_uses_with
    replace_input = Node.replace_input_with
    prepend, append = Node.prepend, Node.append
    args_prop, kwargs_prop = Node.__dict__["args"], Node.__dict__["kwargs"]

    def touch(node: Any) -> None:
        if isinstance(node, Node):
            edits.touched[node] = edits.where()

    def create(self: Any, op: str, *args: Any, **kwargs: Any) -> Any:
        node = create_node(self, op, *args, **kwargs)
        edits.created[node] = edits.where()
        return node

    def erase(self: Any, to_erase: Any) -> None:
        span = edits.where()
        users = [str(getattr(u, "name", "?")) for u in getattr(to_erase, "users", {})]
        try:
            erase_node(self, to_erase)
        except BaseException as exc:
            if users:
                edits.erase_failed = (exc, to_erase, _listed(users), span)
            raise
        edits.erased[to_erase] = span

    def replace_all_uses_with(self: Any, replace_with: Any, *args: Any, **kwargs: Any) -> Any:
        changed = replace_all(self, replace_with, *args, **kwargs)
        span = edits.where()
        if isinstance(replace_with, Node):
            edits.replaced[self] = replace_with
        for user in changed:
            edits.touched[user] = span
        return changed

    def replace_input_with(self: Any, old: Any, new: Any) -> None:
        replace_input(self, old, new)
        touch(self)

    def node_prepend(self: Any, x: Any) -> None:
        prepend(self, x)
        if isinstance(x, Node):
            edits.moved[x] = edits.where()

    def node_append(self: Any, x: Any) -> None:
        append(self, x)  # torch's append does not go through prepend
        if isinstance(x, Node):
            edits.moved[x] = edits.where()

    def set_args(self: Any, value: Any) -> None:
        args_prop.fset(self, value)
        touch(self)

    def set_kwargs(self: Any, value: Any) -> None:
        kwargs_prop.fset(self, value)
        touch(self)

    patches: list[tuple[type, str, Any]] = [
        (Graph, "create_node", create),
        (Graph, "erase_node", erase),
        (Node, "replace_all_uses_with", replace_all_uses_with),
        (Node, "replace_input_with", replace_input_with),
        (Node, "prepend", node_prepend),
        (Node, "append", node_append),
        (Node, "args", property(args_prop.fget, set_args, doc=args_prop.__doc__)),
        (Node, "kwargs", property(kwargs_prop.fget, set_kwargs, doc=kwargs_prop.__doc__)),
    ]
    saved = [(owner, name, owner.__dict__[name]) for owner, name, _ in patches]
    try:
        for owner, name, value in patches:
            setattr(owner, name, value)
        yield
    finally:
        for owner, name, value in saved:
            setattr(owner, name, value)


@contextmanager
def returns_of(code: CodeType, lines: list[int]) -> Iterator[None]:
    """Append to ``lines`` the line of each ``return`` executed by ``code`` (not raises)."""
    previous = sys.gettrace()

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "return" and frame.f_lineno is not None:
            lines.append(frame.f_lineno)
        return local

    def trace(frame: FrameType, event: str, arg: Any) -> Any:
        if frame.f_code is code:
            frame.f_trace_lines = False
            return local
        return None

    sys.settrace(trace)
    try:
        yield
    finally:
        sys.settrace(previous)


class PassTimeout(Exception):
    """A pass ran longer than its budget (raised inside the pass by an alarm)."""


def budget() -> float:
    """Seconds the next pass may run (see :data:`PASS_SECONDS`)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_CPU)
    if soft == resource.RLIM_INFINITY:
        return PASS_SECONDS
    usage = resource.getrusage(resource.RUSAGE_SELF)
    left = soft - (usage.ru_utime + usage.ru_stime)
    return min(PASS_SECONDS, max(0.5, left / 3))


@contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise :class:`PassTimeout` in the block after ``seconds`` (main thread only)."""

    def on_alarm(signum: int, frame: Any) -> None:
        raise PassTimeout(f"the pass ran longer than {seconds:.1f} s")

    try:
        previous = signal.signal(signal.SIGALRM, on_alarm)
    except ValueError:  # not the main thread: the job's limits still apply
        yield
        return
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def run_passes(
    doc: ExecutedDocument,
    requests: list[ClassRequest],
    modules: list[ModuleResult],
    report_phase: Callable[[Phase, str | None], None],
) -> None:
    """Run the passes of each request on its class's traced module; results into ``modules``
    (in the order of ``requests``). A pass that hangs is the class's timeout (FX501)."""
    for req, mod in zip(requests, modules):
        for spec in req.passes:
            report_phase("trace", req.name)
            started = time.perf_counter()
            result = PassResult(function=spec.function, line=spec.line, status="not run")
            try:
                PassRun(doc, req, mod, spec, result).run()
            except Exception as exc:  # a bug here must not lose the capture
                result.status = "failed"
                result.message = f"fxls failed: {one_line(exc)}"
            result.duration_s = time.perf_counter() - started
            mod.passes.append(result)


class PassRun:
    """One pass on one class: copy, run observed, check, diff."""

    def __init__(
        self,
        doc: ExecutedDocument,
        req: ClassRequest,
        mod: ModuleResult,
        spec: PassRequest,
        result: PassResult,
    ) -> None:
        self.doc, self.req, self.mod, self.spec, self.result = doc, req, mod, spec, result
        self.edits = Edits(doc.path, doc.source)
        self.def_span = self._def_span()
        self.output: torch.fx.GraphModule | None = None
        """The module the pass returned, when its graph passed every check."""

    def _def_span(self) -> Span:
        text = self.doc.source.line(self.spec.line)
        col = text.find(self.spec.function)
        if col < 0:
            return line_span(self.doc.source, self.spec.line)
        return Span(self.spec.line, col, self.spec.line, col + len(self.spec.function))

    def report(self, message: catalogue.Message, **data: Any) -> None:
        diagnostic: Diagnostic = message.diagnostic(
            {"pass": self.spec.function, "class": self.req.name, **data}
        )
        self.mod.diagnostics.append(diagnostic)

    def not_run(self, reason: str) -> None:
        self.result.status = "not run"
        self.result.message = reason
        self.report(
            catalogue.FX358(self.def_span, fn=self.spec.function, cls=self.req.name, reason=reason)
        )

    def run(self) -> None:
        fn = self.doc.namespace.get(self.spec.function)
        code = getattr(fn, "__code__", None)
        if not isinstance(fn, FunctionType) or code is None or code.co_filename != self.doc.path:
            self.not_run(f"`{self.spec.function}` is not a function of this file when it runs")
            return
        capture = self.doc.captures.get(self.req.name)
        traced = getattr(capture, "traced", None)
        gm = getattr(traced, "gm", None)
        if not isinstance(gm, torch.fx.GraphModule):
            if self.mod.status == "skipped":
                self.not_run("the class is skipped")
            elif self.mod.strategy.method == "none":
                self.not_run("the class was not captured")
            else:
                captured = strategy_label(self.mod.strategy)
                self.not_run(f"it has no torch.fx graph (captured with {captured})")
            return
        try:
            work = copy.deepcopy(gm)
        except Exception as exc:
            self.not_run(f"its traced module cannot be copied: {one_line(exc)}")
            return
        before = list(work.graph.nodes)
        spans = {n.name: n.meta.get(SPAN_KEY) for n in gm.graph.nodes}
        self.result.before = len(before)
        returned = self._call(fn, code, work)
        if returned is None:
            return
        graph = returned.graph if isinstance(returned, torch.fx.GraphModule) else returned
        self.result.after = len(graph.nodes)
        problems = self._check(graph)
        self.result.status = "failed" if problems else "ok"
        self._diff(before, graph, spans)
        if not problems:
            if isinstance(returned, torch.fx.GraphModule):
                self.output = returned
            else:
                self.output = torch.fx.GraphModule(work, returned, self.req.name)

    def _call(
        self, fn: Callable[..., Any], code: CodeType, work: torch.fx.GraphModule
    ) -> torch.fx.GraphModule | torch.fx.Graph | None:
        """Run the pass observed; what it returned, or None after reporting why there is
        nothing to check."""
        lines: list[int] = []
        name, cls = self.spec.function, self.req.name
        try:
            with observed(self.edits), returns_of(code, lines), time_limit(budget()):
                out = fn(work)
        except BaseException as exc:  # SystemExit too: the pass must not end the capture
            self.result.status = "failed"
            self.result.message = one_line(exc)
            failed = self.edits.erase_failed
            if failed is not None and _caused_by(exc, failed[0]):
                _, node, users, span = failed
                self.report(
                    catalogue.FX352(
                        span or self.def_span, fn=name, cls=cls, node=node.name, users=users
                    ),
                    node=node.name,
                )
                return None
            linted = _linted_graph(exc)
            if linted is not None and self._check(linted):
                return None  # its own ``graph.lint()`` found what the pass broke: blame the edit
            span = user_span(exc, self.doc.path, self.doc.source) or self.def_span
            self.report(catalogue.FX356(span, fn=name, cls=cls, error=one_line(exc)))
            return None
        if isinstance(out, (torch.fx.GraphModule, torch.fx.Graph)):
            return out
        self.result.status = "failed"
        kind = "None" if out is None else f"a `{type(out).__name__}`"
        self.result.message = f"returned {kind}"
        span = line_span(self.doc.source, lines[-1]) if lines else self.def_span
        self.report(catalogue.FX357(span, fn=name, cls=cls, returned=kind))
        return None

    def _where(self, node: torch.fx.Node) -> Span | None:
        """The last edit of ``node`` the pass made: its inputs changed, moved, or created."""
        edits = self.edits
        return edits.touched.get(node) or edits.moved.get(node) or edits.created.get(node)

    def _check(self, graph: torch.fx.Graph) -> int:
        """Report what is wrong with the returned graph; how many problems were found."""
        name, cls = self.spec.function, self.req.name
        count = 0
        seen: set[torch.fx.Node] = set()
        foreign: set[tuple[int, int, int, int]] = set()
        for node in graph.nodes:
            for arg in node.all_input_nodes:
                if arg.graph is not graph:
                    span = self._where(node) or self.def_span
                    key = (span.line, span.col, span.end_line, span.end_col)
                    if key not in foreign:  # once per line of the pass (node_copy in a loop)
                        foreign.add(key)
                        message = catalogue.FX354(
                            span, fn=name, cls=cls, node=node.name, arg=arg.name
                        )
                        self.report(message, node=node.name)
                    count += 1
                elif arg not in seen:
                    self._before_definition(node, arg)
                    count += 1
            seen.add(node)
        outputs = [n for n in graph.nodes if n.op == "output"]
        if len(outputs) != 1:
            where: Span | None
            if outputs:  # where the pass made an output node
                made = [self.edits.created.get(n) for n in outputs]
                where = next((s for s in reversed(made) if s is not None), None)
            else:  # where the pass erased one
                erased = self.edits.erased.items()
                where = next((s for n, s in erased if n.op == "output" and s), None)
            self.report(
                catalogue.FX355(where or self.def_span, fn=name, cls=cls, count=len(outputs))
            )
            count += 1
        if count:
            return count
        try:
            graph.lint()
        except Exception as exc:
            error = " ".join(safe_str(exc).split())[:MAX_ERROR] or type(exc).__name__
            self.report(
                catalogue.FX351(self._lint_span(graph, error), fn=name, cls=cls, error=error)
            )
            return 1
        return 0

    def _before_definition(self, node: torch.fx.Node, arg: torch.fx.Node) -> None:
        """FX353: where the pass created ``arg`` (it went to the end of the graph) or moved it,
        else where ``node`` was moved or made to use it."""
        edits = self.edits
        made = edits.created.get(arg) or edits.moved.get(arg)
        used = edits.moved.get(node) or edits.touched.get(node) or edits.created.get(node)
        span = made or used or self.def_span
        related = []
        if made is not None and used is not None and used != made:
            related.append(Related(used, f"`{node.name}` is made to use `{arg.name}` here"))
        message = catalogue.FX353(
            span, related, fn=self.spec.function, cls=self.req.name, node=node.name, arg=arg.name
        )
        self.report(message, node=node.name)

    def _lint_span(self, graph: torch.fx.Graph, error: str) -> Span:
        """The edit of the first node the lint message names, else the pass's name."""
        for node in graph.nodes:
            span = self._where(node)
            if span is not None and _names(error, node.name):
                return span
        return self.def_span

    def _diff(
        self, before: list[torch.fx.Node], graph: torch.fx.Graph, spans: dict[str, Span | None]
    ) -> None:
        after = list(graph.nodes)
        kept = set(before) & set(after)
        if not kept:  # a new graph: nodes copied keep their names
            old = {(n.name, n.op): n for n in before}
            matched = {n for n in after if (n.name, n.op) in old}
            kept_names = {(n.name, n.op) for n in matched}
            gone = [n for n in before if (n.name, n.op) not in kept_names]
            new = [n for n in after if n not in matched]
        else:
            gone = [n for n in before if n not in kept]
            new = [n for n in after if n not in kept]
        changes: list[PassChange] = []
        result = self.result
        for node in new:
            result.added += 1
            changes.append(
                PassChange(
                    "added", node.name, node.op, _target(node), None, self.edits.created.get(node)
                )
            )
        for node in gone:
            by = self.edits.replaced.get(node)
            if by is not None:
                result.replaced += 1
                changes.append(
                    PassChange(
                        "replaced", node.name, node.op, _target(node), by.name, spans.get(node.name)
                    )
                )
            else:
                result.removed += 1
                changes.append(
                    PassChange(
                        "removed", node.name, node.op, _target(node), None, spans.get(node.name)
                    )
                )
        result.changes = changes[:MAX_CHANGES]


def _listed(names: list[str], most: int = 5) -> str:
    """```a`, `b` and 3 more``."""
    shown = ", ".join(f"`{n}`" for n in names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")


def _target(node: torch.fx.Node) -> str:
    try:
        return readable_target(node)
    except Exception:
        return node.op


def _names(text: str, name: str) -> bool:
    """Whether ``name`` appears in ``text`` as a whole word."""
    start = text.find(name)
    while start >= 0:
        before = text[start - 1] if start > 0 else " "
        end = start + len(name)
        after = text[end] if end < len(text) else " "
        if not (before.isalnum() or before == "_") and not (after.isalnum() or after == "_"):
            return True
        start = text.find(name, start + 1)
    return False


def _linted_graph(exc: BaseException) -> torch.fx.Graph | None:
    """The graph whose ``Graph.lint()`` raised ``exc``, when it did."""
    lint = torch.fx.Graph.lint.__code__
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code is lint:
            graph = tb.tb_frame.f_locals.get("self")
            return graph if isinstance(graph, torch.fx.Graph) else None
        tb = tb.tb_next
    return None


def _caused_by(exc: BaseException, cause: BaseException | None) -> bool:
    """``exc`` is ``cause`` or was raised while handling it (chained)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if current is cause:
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False
