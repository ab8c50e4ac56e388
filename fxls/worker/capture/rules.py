"""User rules: ``pattern_<name>`` / ``replacement_<name>`` function pairs of the workspace.

The rules file (``CaptureJob.rules``, default ``fxls_rules.py`` at the workspace root) is
workspace code: it is executed here, in the sandboxed job child, and nowhere else. Each pair
has ``torch.fx.subgraph_rewriter.replace_pattern`` semantics: the pattern is traced with
``torch.fx.symbolic_trace`` and matched on a class's traced graph with ``SubgraphMatcher``
(literals compared, placeholders match any value, intermediate values used only inside the
match); the replacement, traced the same way, takes its place.

- :func:`report` (the capture job): every match in a class's own ``forward`` becomes an FX360
  diagnostic at the matched span, with the rule's name in ``data``; when the document is the
  rules file itself, what keeps it from loading is reported at its own lines (FX361 the file
  raises or does not parse, FX362 a pattern without its replacement or the reverse, FX363 a
  function that does not trace or a pair whose parameters differ).
- applying one match is the ``rule`` fix of a rewrite job (:mod:`fxls.worker.rewrite.fixes.rule`).
"""

from __future__ import annotations

import inspect
import linecache
import os
import signal
import types
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx
from torch.fx.passes.utils.matcher_utils import InternalMatch, SubgraphMatcher

from fxls.protocol import catalogue
from fxls.protocol.model import (
    CaptureResult,
    Diagnostic,
    RulesFile,
    Span,
)
from fxls.protocol.positions import SourceText, contains
from fxls.worker.capture import failures
from fxls.worker.capture.document import ExecutedDocument
from fxls.worker.capture.reporting import one_line
from fxls.worker.capture.spans import SPAN_KEY

PATTERN = "pattern_"
REPLACEMENT = "replacement_"
MODULE_NAME = "__fxls_rules__"
MAX_NAME = 100
"""Longer function names are not rules."""
MAX_MATCHES = 50
"""Matches reported per rule and class."""


@dataclass
class Rule:
    name: str
    pattern: Callable[..., Any]
    replacement: Callable[..., Any]
    graph: torch.fx.Graph
    """The traced pattern."""


@dataclass
class Loaded:
    rules: list[Rule] = field(default_factory=list)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    """Why rules did not load, at lines of the rules file."""
    too_slow: bool = False


LOAD_SECONDS = 3.0
"""Executing the rules file and tracing its pairs may take this long; a file that hangs is
an FX361 instead of costing every capture its whole time limit."""


class RulesTooSlow(BaseException):
    """Raised by the alarm in the middle of the rules' own code (not an ``Exception``, so
    nothing in between catches it)."""


def load(rules: RulesFile) -> Loaded:
    """Execute the rules file and trace each pair (never raises for problems in the file)."""
    out = Loaded()
    src = SourceText(rules.source)

    def on_alarm(signum: int, frame: Any) -> None:
        raise RulesTooSlow(f"executing and tracing the rules took longer than {LOAD_SECONDS:g} s")

    try:
        previous = signal.signal(signal.SIGALRM, on_alarm)
    except ValueError:  # not the main thread: no time limit of its own
        _load(rules, src, out)
        return out
    signal.setitimer(signal.ITIMER_REAL, LOAD_SECONDS)
    try:
        _load(rules, src, out)
    except RulesTooSlow as exc:
        where = _where(exc, rules.path, src) or src.line_span(1)
        out.rules = []
        out.too_slow = True
        out.diagnostics.append(catalogue.FX361(where, error=str(exc)).diagnostic())
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    return out


def _load(rules: RulesFile, src: SourceText, out: Loaded) -> None:
    linecache.cache[rules.path] = (
        len(rules.source),
        None,
        rules.source.splitlines(keepends=True),
        rules.path,
    )
    try:
        code = compile(rules.source, rules.path, "exec", dont_inherit=True)
    except SyntaxError as exc:
        line = max(1, min(exc.lineno or 1, max(1, len(src.lines))))
        out.diagnostics.append(
            catalogue.FX361(src.line_span(line), error=f"SyntaxError: {exc.msg}").diagnostic()
        )
        return
    module = types.ModuleType(MODULE_NAME)
    module.__file__ = rules.path
    try:
        exec(code, module.__dict__)
    except RulesTooSlow:
        raise
    except BaseException as exc:  # user code: SystemExit and friends too
        where = _where(exc, rules.path, src) or src.line_span(1)
        out.diagnostics.append(catalogue.FX361(where, error=one_line(exc)).diagnostic())
        return
    functions = {
        name: value
        for name, value in vars(module).items()
        if callable(value) and (name.startswith(PATTERN) or name.startswith(REPLACEMENT))
    }
    for name, fn in functions.items():
        is_pattern = name.startswith(PATTERN)
        rule = name[len(PATTERN) :] if is_pattern else name[len(REPLACEMENT) :]
        other = f"{REPLACEMENT if is_pattern else PATTERN}{rule}"
        if not rule or not name.isidentifier() or len(name) > MAX_NAME:
            continue  # only plain function names (a name put in globals() could be anything)
        if other not in functions:
            out.diagnostics.append(
                catalogue.FX362(_def_span(fn, rules.path, src), function=name, missing=other)
                .diagnostic({"rule": rule})
            )  # fmt: skip
            continue
        if not is_pattern:
            continue
        replacement = functions[other]
        traced = _trace_pair(rule, fn, replacement, rules.path, src, out)
        if traced is not None:
            out.rules.append(Rule(rule, fn, replacement, traced))


def _trace_pair(
    rule: str,
    pattern: Callable[..., Any],
    replacement: Callable[..., Any],
    path: str,
    src: SourceText,
    out: Loaded,
) -> torch.fx.Graph | None:
    graphs = []
    for function in (pattern, replacement):
        name = getattr(function, "__name__", "?")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                gm = torch.fx.symbolic_trace(function)
        except Exception as exc:
            where = _where(exc, path, src) or _def_span(function, path, src)
            out.diagnostics.append(
                catalogue.FX363(where, function=name, rule=rule, error=one_line(exc))
                .diagnostic({"rule": rule})
            )  # fmt: skip
            return None
        graphs.append(gm.graph)
    counts = [sum(1 for n in g.nodes if n.op == "placeholder") for g in graphs]
    if counts[0] != counts[1]:
        out.diagnostics.append(
            catalogue.FX363(
                _def_span(replacement, path, src),
                function=getattr(replacement, "__name__", "?"),
                rule=rule,
                error=f"it takes {counts[1]} argument(s), the pattern {counts[0]}",
            ).diagnostic({"rule": rule})
        )
        return None
    if not any(n.op not in ("placeholder", "output") for n in graphs[0].nodes):
        out.diagnostics.append(
            catalogue.FX363(
                _def_span(pattern, path, src),
                function=getattr(pattern, "__name__", "?"),
                rule=rule,
                error="the pattern computes nothing",
            ).diagnostic({"rule": rule})
        )
        return None
    return graphs[0]


def _where(exc: BaseException, path: str, src: SourceText) -> Span | None:
    try:
        spans, _, _ = failures.locate(exc, path, src)
    except Exception:
        return None
    return spans[0] if spans else None


def _def_span(fn: Any, path: str, src: SourceText) -> Span:
    code = getattr(inspect.unwrap(fn), "__code__", None)
    if code is not None and code.co_filename == path:
        line = code.co_firstlineno
        if 1 <= line <= len(src.lines):
            return src.line_span(line)
    return src.line_span(1)


# ---------------------------------------------------------------------------------------
# Matching (the capture job)
# ---------------------------------------------------------------------------------------


def _matcher(rule: Rule) -> SubgraphMatcher:
    return SubgraphMatcher(
        rule.graph,
        match_output=False,
        match_placeholder=False,
        remove_overlapping_matches=True,
        ignore_literals=False,
    )


def match_span(match: InternalMatch, inside: Span) -> Span | None:
    """The span covering a match's nodes, when every one is written inside ``inside``."""
    spans: list[Span] = []
    for pattern_node, node in match.nodes_map.items():
        if pattern_node.op in ("placeholder", "output"):
            continue
        span = node.meta.get(SPAN_KEY)
        if not isinstance(span, Span) or not contains(inside, span):
            return None
        spans.append(span)
    if not spans:
        return None
    first = min(spans, key=lambda s: (s.line, s.col))
    last = max(spans, key=lambda s: (s.end_line, s.end_col))
    return Span(first.line, first.col, last.end_line, last.end_col)


def matches(rule: Rule, gm: torch.fx.GraphModule, inside: Span) -> list[Span]:
    """Where ``rule`` matches ``gm`` in code written inside ``inside`` (once per span)."""
    found: list[Span] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for match in _matcher(rule).match(gm.graph):
            span = match_span(match, inside)
            if span is not None and span not in found:
                found.append(span)
            if len(found) >= MAX_MATCHES:
                break
    return found


def report(doc: ExecutedDocument, result: CaptureResult) -> None:
    """FX360 for every match of every rule in each traced class's own ``forward``; the load
    diagnostics when the document is the rules file."""
    rules = doc.job.rules
    if rules is None:
        return
    own = os.path.abspath(rules.path) == os.path.abspath(doc.job.path)
    loaded = load(RulesFile(rules.path, doc.job.source) if own else rules)
    result.rules_too_slow = loaded.too_slow
    if own:
        result.diagnostics.extend(loaded.diagnostics)
    shown = os.path.basename(rules.path)
    for mod in result.modules:
        capture = doc.captures.get(mod.name)
        traced = getattr(capture, "traced", None)
        forward = getattr(capture, "forward_def", None)
        if traced is None or traced.gm is None or forward is None:
            continue
        inside = doc.source.node_span(forward)
        for rule in loaded.rules:
            try:
                spans = matches(rule, traced.gm, inside)
            except Exception as exc:
                mod.notes.append(f"rule `{rule.name}` could not be matched: {one_line(exc)}")
                continue
            for span in spans:
                mod.diagnostics.append(
                    catalogue.FX360(span, rule=rule.name, rules_file=shown).diagnostic(
                        {"rule": rule.name}
                    )
                )
