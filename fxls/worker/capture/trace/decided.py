"""Rank and dtype checks on traced values, decided while tracing.

``if input_ndim == 4:`` (diffusers' attention processors, after ``input_ndim =
hidden_states.ndim``) or ``if x.dtype == torch.float16:`` stop torch.fx: a traced value is used
where Python needs a ``bool``. Yet the answer follows from the inputs alone: a tensor's rank and
dtype do not depend on the values of its sizes. :class:`Decider` answers such a check when the
condition is made only of ranks and dtypes (``.ndim``, ``.dim()``, ``.dtype``,
``.is_floating_point()``) of traced tensors, comparisons and boolean operators of them, and
constants; it finds those tensors' ranks and dtypes by running the graph recorded so far on
tensors of the inputs' example sizes, on the module's device (meta, as fxls builds modules). A check on sizes (``x.shape[1] == 3``) or
on values is never decided: it would hold for the example only.

The graph then holds the branch these inputs take; the strategy says so (``fx+decided``) and
each decided check is FX101 information at its line. The check's own nodes, which nothing uses
once it is decided, are removed after the trace (:func:`drop_checks`).

``len(x.shape)`` (``elif len(timesteps.shape) == 0:`` in diffusers' UNets) is a rank too, but
torch.fx refuses ``len`` of a traced value before any check: the tracer's proxies
(:class:`TracedProxy`) ask the decider for the rank there, and the trace goes on with the number
(FX102 information at its line).
"""

from __future__ import annotations

import itertools
import operator
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from types import FrameType
from typing import Any, Literal

import torch
import torch.fx

from fxls.protocol.labels import SPLITS
from fxls.protocol.model import Span
from fxls.worker.capture.trace import unpacked

_OPERATORS = frozenset(
    {
        operator.eq, operator.ne, operator.lt, operator.le, operator.gt, operator.ge,
        operator.not_, operator.truth, operator.and_, operator.or_, operator.xor,
        operator.contains,
    }
)  # fmt: skip
"""Functions a decidable condition may apply to ranks, dtypes and constants."""

_ATTRIBUTES = frozenset({"ndim", "dtype"})
_METHODS = frozenset({"dim", "ndimension", "is_floating_point", "is_complex"})
_CONSTANTS = (bool, int, float, str, torch.dtype, type(None))
_MAX_DEPTH = 12

_MISSING = object()
"""A value that needs an input fxls does not know yet."""
_BROKEN = object()
"""A value running the graph on meta tensors could not give."""


class _Undecidable(Exception):
    pass


@dataclass
class Decision:
    node: torch.fx.Node | None
    """The condition's node (for a rank: the ``x.size()`` read, None for ``x.shape``)."""
    value: bool | int
    span: Span | None
    """Where the check is written (the innermost line of the document on the stack)."""
    kind: Literal["check", "rank", "unpacked"] = "check"
    """A condition (FX101), the rank ``len(x.shape)`` asked for (FX102), or the rank as the
    count of sizes unpacked into a starred name (``*_, h, w = x.shape``, FX103)."""


class Decider:
    """Decides rank and dtype checks for one trace of ``root``.

    ``feeds``: placeholder name -> its example on the meta device, for the inputs known before
    the trace; a check that reads a tensor made from another input is not decided, and
    ``needs_inputs`` says that knowing the inputs would decide it.
    """

    def __init__(self, root: torch.nn.Module, feeds: Mapping[str, Any]) -> None:
        self.root = root
        self.device = _device_of(root)
        """Where the graph runs: the module's own device (meta, as fxls builds modules, or
        the CPU where a module could not be built on meta), the inputs made there."""
        self.feeds = {name: _moved(value, self.device) for name, value in feeds.items()}
        self.decisions: list[Decision] = []
        self.needs_inputs = False
        self.missing: set[str] = set()
        """The inputs (placeholder names) not known yet that a check left undecided read."""
        self.read_inputs: set[str] = set()
        """The inputs (placeholder names) the decided checks read the rank or dtype of."""
        self._interpreter: torch.fx.Interpreter | None = None
        self._env: dict[torch.fx.Node, Any] = {}
        self._inputs_of: dict[torch.fx.Node, frozenset[str]] = {}
        self._last: torch.fx.Node | None = None

    def decide(self, node: torch.fx.Node) -> bool | None:
        """The value of the condition ``node``, or None when it is not a rank or dtype check
        fxls can answer."""
        try:
            tensors = self._read(node, 0)
        except _Undecidable:
            return None
        examples = {t: self._example(t) for t in tensors}
        if any(e is _MISSING for e in examples.values()):
            self._needs([t for t, e in examples.items() if e is _MISSING])
            return None
        if any(not isinstance(e, torch.Tensor) for e in examples.values()):
            return None
        try:
            value = self._value(node, examples)
        except Exception:  # an operator refused its operands: the check stays a trace failure
            return None
        if type(value) not in (bool, int):
            return None
        for tensor in tensors:
            self.read_inputs |= self._inputs_of.get(tensor, frozenset())
        return bool(value)

    def rank(self, tensor: torch.fx.Node) -> int | None:
        """The rank of ``tensor``'s value, or None when it is not a known tensor."""
        example = self._example(tensor)
        if example is _MISSING:
            self._needs([tensor])
            return None
        if not isinstance(example, torch.Tensor):
            return None
        self.read_inputs |= self._inputs_of.get(tensor, frozenset())
        return example.ndim

    def _needs(self, tensors: list[torch.fx.Node]) -> None:
        """A check read ``tensors``, made from inputs not known yet: note those inputs."""
        self.needs_inputs = True
        for tensor in tensors:
            self.missing |= {n for n in self._inputs_of.get(tensor, ()) if n not in self.feeds}

    def ranks_and_dtypes(self, nodes: list[torch.fx.Node]) -> tuple[Any, ...] | None:
        """The rank and dtype of each node's value, None when one is not a known tensor."""
        out = []
        for node in nodes:
            example = self._example(node)
            if not isinstance(example, torch.Tensor):
                return None
            out.append((example.ndim, example.dtype))
        return tuple(out)

    # -- the condition's form ------------------------------------------------------------

    def _read(self, node: torch.fx.Node, depth: int) -> set[torch.fx.Node]:
        """The tensor nodes whose rank or dtype the condition ``node`` reads; raises when
        it reads anything else."""
        if depth > _MAX_DEPTH:
            raise _Undecidable
        tensor = _metadata_of(node)
        if tensor is not None:
            return {tensor}
        if node.op != "call_function" or node.target not in _OPERATORS or node.kwargs:
            raise _Undecidable
        found: set[torch.fx.Node] = set()
        for arg in node.args:
            found |= self._operand_reads(arg, depth + 1)
        return found

    def _operand_reads(self, arg: Any, depth: int) -> set[torch.fx.Node]:
        if isinstance(arg, torch.fx.Node):
            return self._read(arg, depth)
        if isinstance(arg, _CONSTANTS):
            return set()
        if isinstance(arg, (tuple, list)) and depth <= _MAX_DEPTH and len(arg) <= 16:
            found: set[torch.fx.Node] = set()
            for item in arg:
                found |= self._operand_reads(item, depth + 1)
            return found
        raise _Undecidable

    def _value(self, node: torch.fx.Node, examples: dict[torch.fx.Node, Any]) -> Any:
        """The condition's value (its form checked by :meth:`_read`)."""
        tensor = _metadata_of(node)
        if tensor is not None:
            example = examples[tensor]
            if node.op == "call_method":
                return getattr(example, str(node.target))()
            return getattr(example, str(node.args[1]))
        args = torch.fx.node.map_arg(node.args, lambda n: self._value(n, examples))
        return node.target(*args)  # type: ignore[operator]

    # -- the graph so far, on meta tensors -----------------------------------------------

    def _example(self, target: torch.fx.Node) -> Any:
        """``target``'s value from running the graph recorded so far on meta tensors (the
        nodes after the last run only)."""
        env = self._env
        if target in env:
            return env[target]
        node = self._last.next if self._last is not None else target.graph._root.next
        inputs_of = self._inputs_of
        while node.op != "root":
            env[node] = self._run(node)
            if node.op == "placeholder":
                inputs_of[node] = frozenset([str(node.target)])
            else:
                inputs_of[node] = frozenset().union(
                    *(inputs_of.get(n, frozenset()) for n in node.all_input_nodes)
                )
            self._last = node
            if node is target:
                break
            node = node.next
        return env.get(target, _BROKEN)

    def _run(self, node: torch.fx.Node) -> Any:
        if node.op == "placeholder":
            return self.feeds.get(str(node.target), _MISSING)
        inputs = node.all_input_nodes
        found = [self._env.get(n, _BROKEN) for n in inputs]
        if any(v is _MISSING for v in found):
            return _MISSING
        if any(v is _BROKEN for v in found):
            return _BROKEN
        if self._interpreter is None:  # torch's own way to run a node, on this env
            self._interpreter = torch.fx.Interpreter(
                self.root, garbage_collect_values=False, graph=node.graph
            )
            self._interpreter.env = self._env
        try:
            with torch.device(self.device), torch.no_grad():
                return self._interpreter.run_node(node)
        except Exception:  # data-dependent, or a kernel without a meta version
            return _BROKEN


def _device_of(root: torch.nn.Module) -> torch.device:
    """The device of the module's first parameter or buffer (one lookup: the decider is
    made for every trace)."""
    first = next(itertools.chain(root.parameters(), root.buffers()), None)
    return first.device if first is not None else torch.device("meta")


def _moved(value: Any, device: torch.device) -> Any:
    """An input example on ``device``: zeros there (sizes and dtype kept) for a tensor on
    another device."""
    if isinstance(value, torch.Tensor) and value.device != device:
        return torch.zeros_like(value, device=device)
    return value


def _metadata_of(node: torch.fx.Node) -> torch.fx.Node | None:
    """The tensor node whose rank or dtype ``node`` reads (``x.ndim``, ``x.dtype``,
    ``x.dim()``), else None."""
    args = node.args
    if node.kwargs or not args or not isinstance(args[0], torch.fx.Node):
        return None
    if node.op == "call_function" and node.target is getattr and len(args) == 2:
        return args[0] if args[1] in _ATTRIBUTES else None
    if node.op == "call_method" and node.target in _METHODS and len(args) == 1:
        return args[0]
    return None


def drop_checks(graph: torch.fx.Graph, decisions: list[Decision]) -> None:
    """Remove each decided condition's nodes that nothing uses (the condition, then what it
    read, while unused): a decided check leaves no trace in the graph."""
    pending = [d.node for d in decisions if d.node is not None]
    while pending:
        node = pending.pop()
        if getattr(node, "_erased", False) or node.users or not _pure(node):
            continue
        inputs = node.all_input_nodes
        graph.erase_node(node)
        pending.extend(inputs)


def _pure(node: torch.fx.Node) -> bool:
    if _metadata_of(node) is not None or node.op == "get_attr":  # `self.proj.weight.dtype`
        return True
    if size_read(node) is not None:  # `len(x.size())`
        return True
    return node.op == "call_function" and node.target in _OPERATORS


def size_read(node: torch.fx.Node) -> torch.fx.Node | None:
    """The tensor node whose whole size ``node`` reads (``x.size()``, ``x.shape``), else
    None."""
    args = node.args
    if node.kwargs or len(args) not in (1, 2) or not isinstance(args[0], torch.fx.Node):
        return None
    if node.op == "call_method" and node.target == "size" and len(args) == 1:
        return args[0]
    if node.op == "call_function" and node.target is getattr and args[1:] == ("shape",):
        return args[0]
    return None


class TracedProxy(torch.fx.Proxy):
    """torch.fx's proxy, whose ``len`` of a size (``len(x.size())``, ``len(x.shape)``) the
    tracer may answer with the rank (``SpanTracer.decide_rank``); torch.fx's refusal
    otherwise."""

    def __len__(self) -> int:
        pieces = fixed_length(self.node)
        if pieces is not None:  # ``(q, *kv.chunk(2))``: a list extended by it asks first
            return pieces
        _only_a_hint(sys._getframe(1))
        tensor = size_read(self.node)
        rank = _rank(self.tracer, tensor, self.node) if tensor is not None else None
        return super().__len__() if rank is None else rank

    def __getattr__(self, k: str) -> Any:
        if k == "shape":
            return _Shape(self, k)
        return super().__getattr__(k)


class _Shape(torch.fx.proxy.Attribute):
    """``x.shape`` of a traced ``x``, not yet a node: ``len`` of it is ``x``'s rank."""

    def __len__(self) -> int:
        _only_a_hint(sys._getframe(1))
        rank = _rank(self.tracer, self.root.node, None)
        return super().__len__() if rank is None else rank


def _only_a_hint(caller: FrameType) -> None:
    """Raise ``TypeError`` when ``caller`` extends a list by the value (``[*x.shape, h]``):
    Python asks its ``len`` only as a hint of the list's size and goes on without one, to
    iterate it (``SpanTracer.iter``), where the code says how many values it gives. The rank
    a decided check would give here is an assumed input's, which the code may not take."""
    if unpacked.extends_a_list(caller.f_code, caller.f_lasti):
        raise TypeError("no length hint while tracing")


TracedProxy.__name__ = TracedProxy.__qualname__ = "Proxy"
"""Python's errors name a value's type (``int() argument must be ... not 'Proxy'``): they read
as torch.fx's own, which users and FX104 know."""

PROXIES = (torch.fx.Proxy, TracedProxy)
"""The types of a traced value's proxy (an attribute's, ``x.shape``, is none of them)."""


_COUNT_KEYWORDS = (
    "chunks", "sections", "indices", "indices_or_sections", "split_size_or_sections",
    "split_size", "split_sizes",
)  # fmt: skip


def _split_name(node: torch.fx.Node) -> str | None:
    """``chunk``, ``split``... when ``node`` calls one of torch's splits, else None."""
    name: Any
    if node.op == "call_method":
        name = node.target
    elif node.op == "call_function" and getattr(node.target, "__module__", None) in _TORCH:
        name = getattr(node.target, "__name__", None)
    else:
        return None
    return name if isinstance(name, str) and name in SPLITS else None


_TORCH = ("torch", "torch.functional")


def is_split(node: torch.fx.Node) -> bool:
    """Whether ``node`` calls one of the splits :func:`fixed_length` reads."""
    return _split_name(node) is not None


def fixed_length(node: torch.fx.Node) -> int | None:
    """How many tensors ``node`` gives when its operation fixes it whatever the sizes:
    ``chunk`` and ``tensor_split`` into a number of pieces, ``split`` into a list of sizes.
    None otherwise (``split`` by a size, ``unbind``, a size: the count is a size)."""
    name = _split_name(node)
    if name is None:
        return None
    given: Any = node.args[1] if len(node.args) > 1 else None
    if given is None:
        given = next((node.kwargs[k] for k in _COUNT_KEYWORDS if k in node.kwargs), None)
    if type(given) is int:
        return given if given > 0 and name in ("chunk", "tensor_split") else None
    if not isinstance(given, (list, tuple)) or not all(type(i) is int for i in given):
        return None
    if name == "tensor_split":
        return len(given) + 1  # the indices it splits at
    return len(given) if name != "chunk" else None


def _rank(tracer: Any, tensor: torch.fx.Node, read: torch.fx.Node | None) -> int | None:
    decide = getattr(tracer, "decide_rank", None)
    return decide(tensor, read) if decide is not None else None
