"""Locate and explain trace failures at the exact span of the user code that caused them.

``explain(exc, ...)`` walks the exception's traceback (and its ``__cause__``/``__context__``
chain) for frames of the document, innermost first, and reads the failing instruction's range
from ``co_positions``. When the error happens inside ``torch.nn`` code, the user's call into it
is blamed. The exception type, message and the source text of the span select the FX1xx
message with a plain-language cause and fix. ``specialized_checks`` finds ``isinstance`` and
``isinstance`` checks on traced parameters (FX108): they never fail, they silently pick a branch.
"""

from __future__ import annotations

import ast
import linecache
import os
import re
from collections.abc import Collection
from dataclasses import dataclass
from types import CodeType, TracebackType

import fxls
from fxls.protocol import catalogue
from fxls.protocol.fixkinds import length_written
from fxls.protocol.model import Related, Span
from fxls.protocol.positions import SourceText
from fxls.worker.capture.spans import short_source, user_spans
from fxls.worker.capture.syntax import nodes_of

_FACTORIES = (
    "zeros|ones|empty|full|rand|randn|randint|randperm|arange|eye|linspace|tensor|zeros_like"
)
_FACTORY_CALL = re.compile(rf"^\s*torch\.({_FACTORIES})\s*\(")
_LEN_CALL = re.compile(r"^\s*len\s*\(\s*(.+?)\s*\)\s*$", re.S)
_NAME = re.compile(r"^\s*(?:not\s+)?([A-Za-z_]\w*)\s*$")


@dataclass
class Failure:
    """A located, explained trace failure."""

    message: catalogue.Message
    span: Span | None
    """None when no frame of the document was involved (the class line is used instead)."""
    in_torch: bool = False
    outer: Span | None = None
    """The outermost line of the document in the traceback, when it is not ``span`` (the
    captured class's own call of the submodule whose code raised)."""


def _chain(exc: BaseException) -> list[BaseException]:
    """The exception and its causes/contexts, outermost first, without cycles."""
    out: list[BaseException] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        out.append(current)
        current = current.__cause__ or current.__context__
    return out


def _frames(tb: TracebackType | None) -> list[tuple[CodeType, int, TracebackType]]:
    frames = []
    while tb is not None:
        frames.append((tb.tb_frame.f_code, tb.tb_lasti, tb))
        tb = tb.tb_next
    return frames


def _is_torch_nn(code: CodeType) -> bool:
    filename = code.co_filename.replace("\\", "/")
    return "/torch/nn/" in filename or "/torch/ao/nn/" in filename


def _torch_module_name(frames: list[tuple[CodeType, int, TracebackType]]) -> str | None:
    """Class name of the innermost module whose ``forward`` raised (the ``self`` of its
    frame): a torch.nn layer, or a library's module that the document's code called."""
    for code, _, tb in reversed(frames):
        if code.co_name == "forward":
            owner = tb.tb_frame.f_locals.get("self")
            if owner is not None and hasattr(owner, "_modules"):
                return type(owner).__name__
    return None


def locate(
    exc: BaseException, path: str, source: SourceText
) -> tuple[list[Span], bool, str | None]:
    """User spans of the failure (innermost first), whether it happened inside torch.nn code,
    and the class name of that torch module."""
    for e in _chain(exc):
        frames = _frames(e.__traceback__)
        pairs = [(code, lasti) for code, lasti, _ in frames]
        spans = user_spans(pairs, path, source)
        if not spans:
            continue
        last_user = max(i for i, (code, _) in enumerate(pairs) if code.co_filename == path)
        after = frames[last_user + 1 :]
        in_torch = any(_is_torch_nn(code) for code, _, _ in after)
        return list(reversed(spans)), in_torch, _torch_module_name(after) if in_torch else None
    for e in _chain(exc):
        frames = _frames(e.__traceback__)
        if any(_is_torch_nn(code) for code, _, _ in frames):
            return [], True, _torch_module_name(frames)
    return [], False, None


_PLACE_CHARS = 80
"""Longest file path quoted where a failure's code is outside the document."""


def elsewhere(exc: BaseException) -> tuple[str, str] | None:
    """For a failure in code outside the document (an inherited ``forward`` of a library):
    the line that raised, and where it is (`` in `GenericForSequenceClassification.forward`
    (transformers/modeling_layers.py, line 140)``): the innermost frame that is neither torch
    nor fxls. None when there is no such frame."""
    for e in _chain(exc):
        for code, _, tb in reversed(_frames(e.__traceback__)):
            filename = code.co_filename.replace("\\", "/")
            if filename.startswith("<") or "/torch/" in filename or filename.startswith(_FXLS):
                continue
            text = linecache.getline(code.co_filename, tb.tb_lineno).strip()
            if not text:
                continue
            place = "/".join(filename.split("/")[-2:])[-_PLACE_CHARS:]
            name = getattr(code, "co_qualname", code.co_name)
            return text, f" in `{short_source(name)}` ({place}, line {tb.tb_lineno})"
    return None


MAX_CALL_LINES = 40
"""Longest call (in lines) :func:`inherited_call` quotes."""


def inherited_call(exc: BaseException, root: object) -> str:
    """For a failure of a class whose ``forward`` is inherited from a library (transformers'
    ``LlamaForSequenceClassification`` runs ``GenericForSequenceClassification.forward``): the
    call that ``forward`` was making when it failed (``self.loss_function(logits=logits,
    labels=labels, ...)``), as written; empty when no frame of ``root``'s ``forward`` is in
    the traceback."""
    for e in _chain(exc):
        for code, lasti, tb in _frames(e.__traceback__):
            if code.co_name == "forward" and tb.tb_frame.f_locals.get("self") is root:
                return _source_at(code, lasti)
    return ""


def _source_at(code: CodeType, lasti: int) -> str:
    """The source of the instruction at byte offset ``lasti`` of ``code`` ("" when unknown)."""
    source = SourceText("".join(linecache.getlines(code.co_filename)))
    span = source.code_span(code, lasti)
    if span is None or not 0 <= span.end_line - span.line < MAX_CALL_LINES:
        return ""
    return source.text(span)


def _quoted(exc: BaseException, source: SourceText, span: Span | None) -> tuple[str, str]:
    """The code a message quotes and where it is (empty: the span, in the document)."""
    if span is not None:
        return source.text(span).strip(), ""
    return elsewhere(exc) or ("", "")


_FXLS = os.path.dirname(os.path.abspath(fxls.__file__)).replace("\\", "/")
"""The fxls package folder (its frames are never the user's code)."""


def explain(
    exc: BaseException,
    path: str,
    source: SourceText,
    cls: str,
    class_span: Span,
    tree: ast.Module | None = None,
) -> Failure:
    """The FX1xx message for an exception raised while tracing ``cls``.

    ``tree`` (the document's AST) narrows a span that covers a whole ``if``/``while``/``assert``
    statement to its condition.
    """
    spans, in_torch, torch_module = locate(exc, path, source)
    span = spans[0] if spans else None
    if span is not None and tree is not None:
        span = _narrow(span, tree, source)
    related = []
    if len(spans) > 1 and spans[-1] != span:
        related.append(Related(spans[-1], f"called from `{cls}.forward` here"))
    at = span or class_span
    text, where = _quoted(exc, source, span)
    error = f"{type(exc).__name__}: {exc}".strip()
    first_line = error.splitlines()[0] if error else type(exc).__name__
    msg = str(exc)

    def build(kind: type[catalogue.Message], **kwargs: str) -> Failure:
        fields = {"source": short_source(text), "where": where, "cls": cls, **kwargs}
        outer = spans[-1] if len(spans) > 1 and spans[-1] != span else None
        return Failure(kind(at, related, **fields), span, in_torch, outer)

    if in_torch and torch_module is not None:
        reason = next((words for cue, words in _TRACE_REASONS if cue in msg), first_line)
        return build(catalogue.FX107, module=torch_module, reason=reason, cls=torch_module)
    if "cannot be used as inputs to control flow" in msg:
        return build(catalogue.FX101, arg=flag_name(text) or "flag")
    if "'len' is not supported" in msg:
        arg, use, meaning = length_fields(text)
        return build(catalogue.FX102, arg=arg, use=use, meaning=meaning)
    if "cannot be iterated" in msg:
        return build(catalogue.FX103)
    if isinstance(exc, TypeError) and "slice indices must be integers" in msg:
        return build(catalogue.FX106)
    factory = _FACTORY_CALL.match(text)
    if isinstance(exc, TypeError) and factory:
        return build(catalogue.FX105, func=f"torch.{factory.group(1)}")
    if isinstance(exc, TypeError) and (
        "'Proxy'" in msg or "cannot be interpreted as an integer" in msg
    ):
        return build(catalogue.FX104)
    return build(catalogue.FX199, error=first_line)


def flag_name(text: str) -> str | None:
    """The name a failing source text is, negated or not (``flag`` of ``not flag``): the
    argument a flag directive would fix."""
    found = _NAME.match(text)
    return found.group(1) if found else None


def none_given(error: str, text: str, names: Collection[str]) -> str | None:
    """The parameter a ``'NoneType'`` error is about: of ``names`` (parameters left at their
    default ``None``), the one the failing code ``text`` reads, the one whose attribute the
    error names first (``timestep.to(...)`` for "'NoneType' object has no attribute 'to'");
    None when it is not such an error or the code reads none of them, or several alike."""
    msg = error[:2000]
    if "'NoneType'" not in msg or not text:
        return None
    read = [n for n in names if re.search(rf"(?<![\w.]){re.escape(n)}(?!\w)", text)]
    attribute = re.search(r"has no attribute '(\w+)'", msg)
    if attribute is not None:
        for name in read:
            if re.search(rf"(?<![\w.]){re.escape(name)}\s*\.\s*{attribute.group(1)}\b", text):
                return name
    return read[0] if len(read) == 1 else None


_TRACE_REASONS = (
    ("cannot be used as inputs to control flow", "its code branches on a traced value (`if`)"),
    ("does not support item assignment", "its code assigns into a traced value (`x[i] = ...`)"),
    ("cannot be iterated", "its code iterates over or unpacks a traced value"),
    ("'len' is not supported", "its code calls `len()` on a traced value"),
    ("cannot be interpreted as an integer", "its code uses a traced value as a Python int"),
)
"""FX's own words for why code cannot be traced, and the same in the user's terms."""


def _narrow(span: Span, tree: ast.Module, source: SourceText) -> Span:
    """The condition of the statement a span starts, when it starts one."""
    for node in nodes_of(tree, ast.If, ast.While, ast.Assert, ast.IfExp):
        if (
            isinstance(node, (ast.If, ast.While, ast.Assert, ast.IfExp))
            and node.lineno == span.line
        ):
            whole = source.node_span(node)
            if whole.col == span.col and whole.end_line >= span.end_line:
                return source.node_span(node.test)
    return span


def specialized_checks(
    func: ast.FunctionDef | ast.AsyncFunctionDef | None,
    traced: Collection[str],
    source: SourceText,
) -> list[catalogue.Message]:
    """FX108 warnings for ``isinstance(p, ...)`` checks on traced parameters.

    ``p is None`` is not one: an optional tensor argument (``pos=None``) checked for ``None``
    takes the branch every call with a tensor takes, so the graph is right for the inputs it
    was traced with, and the idiom is correct code."""
    if func is None:
        return []
    found: list[catalogue.Message] = []
    for node in ast.walk(func):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "isinstance"
            and node.args
            and isinstance(node.args[0], ast.Name)
            and node.args[0].id in traced
        ):
            span = source.node_span(node)
            found.append(catalogue.FX108(span, source=source.text(span), where=""))
    found.sort(key=lambda msg: (msg.span.line, msg.span.col))
    return found


def length_fields(text: str) -> tuple[str, str, str]:
    """FX102's fields for the source ``text`` of a ``len(...)`` call: its argument, what to
    write instead and what that is (``x.dim()``, the number of dimensions, for
    ``len(x.shape)``)."""
    inner = _LEN_CALL.match(text)
    arg = inner.group(1) if inner else "x"
    use = _length_as(arg)
    meaning = "the number of dimensions" if use.endswith(".dim()") else "the size of dim 0"
    return arg, use, meaning


def _length_as(arg: str) -> str:
    """What the ``length`` fix writes for ``len(arg)`` (``x.dim()`` for ``len(x.shape)``)."""
    try:
        tree = ast.parse(arg.strip(), mode="eval").body
    except (SyntaxError, ValueError, RecursionError):  # a cut text, a null byte
        return f"{arg}.size(0)"
    return length_written(tree, ast.unparse)
