"""Graph checks: ``Graph.lint()`` plus an exactly-one-output check (FX301), unused nodes (FX302)."""

from __future__ import annotations

import inspect
import operator
import typing
from collections.abc import Callable, Collection

import torch.fx

from fxls.protocol import catalogue
from fxls.protocol.model import Span
from fxls.protocol.positions import SourceText
from fxls.worker.capture.spans import SPAN_KEY, document_forward, module_stack, short_source


def lint(graph: torch.fx.Graph, fallback: Span) -> list[catalogue.Message]:
    """FX301 when the graph is invalid; ``fallback`` is used when no node span applies."""
    problems: list[catalogue.Message] = []
    try:
        graph.lint()
    except Exception as exc:  # lint raises RuntimeError, AssertionError, ...
        problems.append(
            catalogue.FX301(fallback, error=str(exc).splitlines()[0] if str(exc) else repr(exc))
        )
    outputs = [n for n in graph.nodes if n.op == "output"]
    if len(outputs) != 1:
        problems.append(
            catalogue.FX301(
                fallback, error=f"expected exactly one output node, found {len(outputs)}"
            )
        )
    return problems


def unused_nodes(graph: torch.fx.Graph, live: Collection[str] = frozenset()) -> list[torch.fx.Node]:
    """Nodes ``eliminate_dead_code`` would remove: no users, not impure, not placeholder/output.
    Nodes named in ``live`` are used whatever the graph's edges say (and so their inputs)."""
    dead: set[torch.fx.Node] = set()
    for n in reversed(list(graph.nodes)):
        if n.op in ("placeholder", "output") or n.name in live:
            continue
        if not all(user in dead for user in n.users):
            continue
        if not n.is_impure():  # asked last: most nodes have a live user
            dead.add(n)
    return [n for n in graph.nodes if n in dead]


def works_in_place(node: torch.fx.Node) -> bool:
    """Whether ``node`` changes a tensor it is given, so that it matters without users: an
    in-place method or function (``x.mul_(2)``, ``torch.relu_(x)``), ``inplace=True``
    (``F.relu(x, inplace=True)``), an ``out=`` tensor, or a call of a submodule built with
    ``inplace=True`` (``nn.ReLU(inplace=True)``)."""
    if node.op == "call_module":
        owner = node.graph.owning_module
        try:
            module = owner.get_submodule(str(node.target)) if owner is not None else None
        except AttributeError:
            return False
        return getattr(module, "inplace", False) is True
    if node.op not in ("call_method", "call_function"):
        return False
    name = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", "")
    if isinstance(name, str) and name.endswith("_") and not name.endswith("__"):
        return True
    if node.kwargs.get("inplace") is True or node.kwargs.get("out") is not None:
        return True
    if node.op == "call_function" and any(arg is True for arg in node.args[1:]):
        try:
            params = list(inspect.signature(node.target).parameters)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return False
        return any(
            i < len(params) and params[i] == "inplace" and arg is True
            for i, arg in enumerate(node.args)
        )
    return False


_QUERY_METHODS = frozenset({"size", "dim", "numel", "stride", "type", "is_contiguous"})
_QUERY_ATTRS = frozenset({"shape", "dtype", "device", "ndim", "is_cuda", "requires_grad"})


def _is_bookkeeping(node: torch.fx.Node) -> bool:
    """Unpacking and size queries: ``b, n, _ = x.shape`` or ``out, _ = self.attn(...)`` leave
    unused ``getitem``/``size`` nodes behind that are not computations anyone wrote."""
    if node.op == "call_function" and node.target is operator.getitem:
        return True
    if node.op == "call_method" and node.target in _QUERY_METHODS:
        return True
    return (
        node.op == "call_function"
        and node.target is getattr
        and len(node.args) > 1
        and node.args[1] in _QUERY_ATTRS
    )


def _contains(outer: Span, inner: Span) -> bool:
    return (outer.line, outer.col) <= (inner.line, inner.col) and (
        inner.end_line,
        inner.end_col,
    ) <= (
        outer.end_line,
        outer.end_col,
    )


def _outermost(node: torch.fx.Node) -> str | None:
    """The submodule of the traced class that ``node`` was made inside, at its top (the first
    entry of its module stack; a ``call_module`` node's own module counts), or None."""
    for qualified, _ in module_stack(node):
        return qualified
    return None


_K = typing.TypeVar("_K")


def _used_parts(
    graph: torch.fx.Graph,
    dead: Collection[torch.fx.Node],
    part: Callable[[torch.fx.Node], _K | None],
    live: Collection[str] = frozenset(),
) -> set[_K]:
    """The parts (``part`` of a node: the call it was made in, its span) some of whose nodes
    feed a used node (not in ``dead``) of another part, the output, or are ``live``: the
    calls and expressions whose results the class uses."""
    used: set[_K] = set()
    for node in graph.nodes:
        key = part(node)
        if key is None or key in used or node in dead:
            continue
        if node.name in live or any(u not in dead and part(u) != key for u in node.users):
            used.add(key)
    return used


def _left_to_the_block(
    node: torch.fx.Node, path: str, verdicts: dict[type, bool], used: set[str]
) -> bool:
    """Whether ``node``, unused, is for a block to answer for, not the traced class: it was made
    inside a submodule whose ``forward`` is document code, or inside a submodule of other code
    (a library's) whose call's result the class uses (what a library computes and leaves
    unused is not the user's to remove, and its span is only the call site)."""
    stack = [(q, k) for q, k in module_stack(node) if node.op != "call_module" or q != node.target]
    for _, kind in stack:
        own = verdicts.get(kind)
        if own is None:
            own = verdicts[kind] = document_forward(kind, path)
        if own:
            return True
    return bool(stack) and _outermost(node) in used


def _span_key(node: torch.fx.Node) -> tuple[int, int, int, int] | None:
    span = node.meta.get(SPAN_KEY)
    return None if span is None else (span.line, span.col, span.end_line, span.end_col)


def unused(
    graph: torch.fx.Graph, source: SourceText, path: str, live: Collection[str] = frozenset()
) -> list[catalogue.Message]:
    """One FX302 hint per unused expression: spans inside another unused span are folded in.
    ``live``: nodes known to be used although no edge says so (see :func:`unused_nodes`).

    A node made inside the ``forward`` of another class of the document (``path``), traced
    through, is left out: what a caller leaves unused of a block's results (a backbone that
    reads Swin's stages and not its final norm) is used by the block's other callers, and the
    block's own capture reports what it never uses itself. Left out as well: a node made
    inside a library's module whose call's result is used (:func:`_left_to_the_block`), and
    one of an expression part of whose result is used (:func:`_used_parts` by span). A
    library call whose result nothing uses is reported at the call."""
    spans: dict[tuple[int, int, int, int], tuple[Span, torch.fx.Node]] = {}
    verdicts: dict[type, bool] = {}
    used: tuple[set[str], set[tuple[int, int, int, int]]] | None = None
    dead = unused_nodes(graph, live)
    for node in dead:
        if _is_bookkeeping(node) or works_in_place(node):
            continue  # an in-place call has no users, yet its tensor is the one used later
        if used is None:
            gone = set(dead)
            # calls: the top submodule a node was made in (:func:`_outermost`); spans: a
            # library function's call gives all its nodes the call's span, and what it
            # computes and does not return is not for the caller to remove (``unpack(embed,
            # ...)`` used for one of its three parts)
            used = _used_parts(graph, gone, _outermost), _used_parts(graph, gone, _span_key, live)
        if _left_to_the_block(node, path, verdicts, used[0]):
            continue
        key = _span_key(node)
        if key is not None and key not in used[1]:
            spans.setdefault(key, (node.meta[SPAN_KEY], node))
    hints: list[catalogue.Message] = []
    for key, (span, node) in spans.items():
        if any(other != key and _contains(s, span) for other, (s, _) in spans.items()):
            continue
        text = source.text(span).strip()
        hints.append(catalogue.FX302(span, node=short_source(text, node.name)))
    return hints
