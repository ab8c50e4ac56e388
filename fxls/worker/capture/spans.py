"""Where in the user's file a node was written: span keys, call sites, AST spans.

Every FX node fxls makes carries two spans in ``node.meta``: ``SPAN_KEY``, the innermost frame
of the document on the stack (where the operation is written), and ``CALL_SITE_KEY``, the
frame in the root module's own methods that led to it (where ``forward`` calls into a helper
or a submodule). The tracer, the replay of identical blocks, the fake run and the rewrites all
read and write them through this module.
"""

from __future__ import annotations

import ast
import inspect
import re
import textwrap
from collections.abc import Iterable, Iterator
from types import CodeType

import torch.fx

from fxls.protocol.model import Span
from fxls.protocol.positions import SourceText
from fxls.worker.capture.syntax import nodes_of

SPAN_KEY = "fxls_span"
CALL_SITE_KEY = "fxls_call_site"


def user_spans(frames: Iterable[tuple[CodeType, int]], path: str, source: SourceText) -> list[Span]:
    """Spans of the (code, lasti) pairs that belong to ``path``, in the given order."""
    spans = []
    for code, lasti in frames:
        if code.co_filename == path:
            span = source.code_span(code, lasti)
            if span is not None:
                spans.append(span)
    return spans


def method_codes(cls: type, path: str) -> set[CodeType]:
    """Code objects of the methods of ``cls`` (and its bases) written in the document: the
    frames where a call of the root module's own code is written (``forward``, and helpers such
    as ``_forward_impl`` that it delegates to)."""
    codes: set[CodeType] = set()
    for klass in cls.__mro__:
        for value in vars(klass).values():
            func = getattr(value, "__func__", value)
            try:
                func = inspect.unwrap(func)
            except ValueError:
                continue
            code = getattr(func, "__code__", None)
            if isinstance(code, CodeType) and code.co_filename == path:
                codes.add(code)
    return codes


def module_stack(node: torch.fx.Node) -> Iterator[tuple[str, type]]:
    """``(qualified name, class)`` of each module ``node`` was made inside, outermost first
    (its ``nn_module_stack``; a ``call_module`` node's own module is the last)."""
    stack = node.meta.get("nn_module_stack") or {}
    for entry in stack.values():
        try:
            qualified, kind = entry
        except (TypeError, ValueError):
            continue
        if isinstance(kind, type):
            yield str(qualified), kind


def document_forward(kind: type, path: str) -> bool:
    """Whether ``kind.forward`` (undecorated) is code of the document at ``path``."""
    forward = getattr(kind, "forward", None)
    try:
        forward = inspect.unwrap(forward) if forward is not None else None
    except ValueError:
        return False
    code = getattr(forward, "__code__", None)
    return code is not None and code.co_filename == path


_DEFINITIONS: dict[tuple[type, str], ast.FunctionDef | None] = {}
MAX_DEFINITIONS = 64


def forward_definition(cls: type) -> ast.FunctionDef | None:
    """The parsed ``forward`` of ``cls`` (undecorated, its source dedented), or None; parsed
    once per class."""
    return method_definition(cls, "forward")


def method_definition(cls: type, name: str) -> ast.FunctionDef | None:
    """The parsed method ``name`` of ``cls`` (undecorated, its source dedented), or None;
    parsed once per class and name."""
    key = (cls, name)
    if key in _DEFINITIONS:
        return _DEFINITIONS[key]
    found: ast.FunctionDef | None = None
    try:
        source = inspect.getsource(inspect.unwrap(getattr(cls, name)))
        tree = ast.parse(textwrap.dedent(source))
        first = tree.body[0] if tree.body else None
        found = first if isinstance(first, ast.FunctionDef) else None
    except (OSError, TypeError, SyntaxError, ValueError, AttributeError):
        found = None
    if len(_DEFINITIONS) >= MAX_DEFINITIONS:
        _DEFINITIONS.clear()
    _DEFINITIONS[key] = found
    return found


def call_site_frame(
    frames: list[tuple[CodeType, int]], root_codes: set[CodeType]
) -> tuple[CodeType, int]:
    """Of the document frames (innermost first), the innermost one in a method of the root
    module, else the outermost: where the user wrote the call that led to the operation."""
    for code, lasti in frames:
        if code in root_codes:
            return code, lasti
    return frames[-1]


def find_function(
    tree: ast.Module, code: CodeType
) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The ``def`` in ``tree`` whose compiled code object is ``code``."""
    for node in nodes_of(tree, ast.FunctionDef, ast.AsyncFunctionDef):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == code.co_name:
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            if first == code.co_firstlineno:
                return node
    return None


def _own_returns(func: ast.AST) -> list[ast.Return]:
    found: list[ast.Return] = []
    stack = list(ast.iter_child_nodes(func))
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Return):
            found.append(node)
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            stack.extend(ast.iter_child_nodes(node))
    return sorted(found, key=lambda r: (r.lineno, r.col_offset))


def assign_ast_spans(
    graph: torch.fx.Graph,
    func: ast.FunctionDef | ast.AsyncFunctionDef | None,
    source: SourceText,
) -> None:
    """Give placeholders, the output and lazy attribute nodes a span.

    Placeholders take the span of their parameter in ``def forward``, the output takes the last
    ``return`` statement, and nodes still without a span take their first user's span.
    """
    params: dict[str, ast.arg] = {}
    if func is not None:
        a = func.args
        for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs]:
            params[arg.arg] = arg
        for extra_arg in (a.vararg, a.kwarg):
            if extra_arg is not None:
                params[extra_arg.arg] = extra_arg
    returns = _own_returns(func) if func is not None else []
    for node in graph.nodes:
        if node.op == "placeholder":
            target = str(node.target).lstrip("*")
            param = params.get(target) or params.get(re.sub(r"_\d+$", "", target))
            if param is not None:
                span = source.node_span(param)
                node.meta[SPAN_KEY] = node.meta[CALL_SITE_KEY] = span
        elif node.op == "output" and returns:
            span = source.node_span(returns[-1])
            node.meta[SPAN_KEY] = node.meta[CALL_SITE_KEY] = span
    for node in reversed(list(graph.nodes)):
        if SPAN_KEY not in node.meta:
            for user in node.users:
                if SPAN_KEY in user.meta:
                    node.meta[SPAN_KEY] = user.meta[SPAN_KEY]
                    node.meta[CALL_SITE_KEY] = user.meta.get(CALL_SITE_KEY, user.meta[SPAN_KEY])
                    break


def element_span(source: SourceText, within: Span, key: int, length: int) -> Span | None:
    """The span of the one subscript in the code at ``within`` that takes element ``key`` of a
    tuple of ``length`` by a constant index (``shape[-1]`` in ``x.view(-1, shape[-1])``), or
    None when there is not exactly one."""
    text = source.text(within)
    if len(text) > MAX_ELEMENT_SOURCE:
        return None
    try:
        tree = ast.parse("(" + text + "\n)", mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    found = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Subscript) and _constant_index(n.slice) in (key, key - length)
    ]
    if len(found) != 1:
        return None
    node = found[0]
    end_line, end_col = node.end_lineno, node.end_col_offset
    if end_line is None or end_col is None:
        return None
    lines = text.split("\n")

    def at(lineno: int, byte_col: int) -> tuple[int, int]:
        row = lineno - 1  # line 1 starts with the added "("
        line = lines[row] if row < len(lines) else ""
        col = len(line.encode()[: byte_col - (row == 0)].decode(errors="ignore"))
        return within.line + row, (within.col + col if row == 0 else col)

    start, end = at(node.lineno, node.col_offset), at(end_line, end_col)
    return Span(start[0], start[1], end[0], end[1])


MAX_ELEMENT_SOURCE = 2000
"""Characters of a call searched for the subscript of an element (longer: not searched)."""


def _constant_index(index: ast.expr) -> int | None:
    """``2`` for ``[2]``, ``-1`` for ``[-1]``; None for anything else."""
    if isinstance(index, ast.Constant) and type(index.value) is int:
        return index.value
    if (
        isinstance(index, ast.UnaryOp)
        and isinstance(index.op, ast.USub)
        and isinstance(index.operand, ast.Constant)
        and type(index.operand.value) is int
    ):
        return -index.operand.value
    return None


_CALLEE = re.compile(r"[A-Za-z_][\w.]*")
SHORT_SOURCE = 60
"""Characters of code a message quotes at most."""


def short_source(text: str, fallback: str = "") -> str:
    """Code quoted in a message, on one line: whitespace runs made one space, and a call
    longer than :data:`SHORT_SOURCE` shown as ``self.attn1(…)``; ``fallback`` when empty."""
    flat = " ".join(text.split())
    if not flat:
        return fallback
    if len(flat) <= SHORT_SOURCE:
        return flat
    head = flat.split("(", 1)[0]
    if "(" in flat and 0 < len(head) <= SHORT_SOURCE - 3 and _CALLEE.fullmatch(head):
        return f"{head}(…)"
    return flat[: SHORT_SOURCE - 1] + "…"
