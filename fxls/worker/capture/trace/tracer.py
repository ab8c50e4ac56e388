"""A torch.fx tracer that records where in the user's file each node was written.

``SpanTracer`` overrides ``create_node``: it walks the Python stack outwards, keeps frames whose
code object belongs to the document being captured, and reads the executing instruction's
source range from ``co_positions()``. The innermost user frame is where the operation is
written (``node.meta["fxls_span"]``); the outermost is where the root ``forward`` calls into it
(``node.meta["fxls_call_site"]``). Spans use 1-based lines and 0-based code point columns.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import inspect
import operator
import sys
from collections.abc import Callable, Iterable, Iterator
from types import CodeType, FrameType, FunctionType, ModuleType
from typing import Any, Literal, TypeVar

import torch
import torch.fx

from fxls.protocol.positions import SourceText
from fxls.worker.capture.spans import CALL_SITE_KEY, SPAN_KEY, call_site_frame, method_codes
from fxls.worker.capture.trace import decided, passthrough, reuse, unpacked

_T = TypeVar("_T")


def document_frames(
    frame: FrameType | None, path: str, outer: FrameType | None = None
) -> list[tuple[CodeType, int]]:
    """``(code, instruction)`` of each frame of the document ``path`` from ``frame`` outwards,
    innermost first, up to ``outer`` (the frame a trace started in: the frames outside it are
    fxls's, never the document's code that the trace runs)."""
    found = []
    while frame is not None and frame is not outer:
        code = frame.f_code
        if code.co_filename == path:
            found.append((code, frame.f_lasti))
        frame = frame.f_back
    return found


class SpanTracer(torch.fx.Tracer):
    """``torch.fx.Tracer`` that stores the user's source span on every node it creates.

    Args:
        path: filename of the document's code objects (``CaptureJob.path``).
        source: the document text.
        leaf_classes: class names of submodules not to trace into.
        autowrap_functions: functions recorded as one ``call_function`` node wherever the
            document (or a module in ``autowrap_modules``) refers to them by a global name.
        autowrap_modules: modules whose global names of ``autowrap_functions`` are patched too
            (``einops.rearrange`` written with the module prefix).
        leaf_predicate: another leaf rule (library layers such as ``einops.layers.torch``).

    While tracing, ``traced_params`` collects, per code object of the document that created a
    node, the names of its parameters that held a ``Proxy`` (for FX108 in helpers and
    submodules traced through).
    """

    proxy_buffer_attributes = True

    def __init__(
        self,
        path: str,
        source: SourceText,
        leaf_classes: Iterable[str] = (),
        autowrap_functions: Iterable[Callable[..., Any]] = (),
        autowrap_modules: Iterable[ModuleType] = (),
        leaf_predicate: Callable[[torch.nn.Module], bool] | None = None,
        reuse_blocks: bool = False,
    ):
        super().__init__(autowrap_functions=tuple(autowrap_functions))
        self.module_stack = _ModuleStack()
        search = getattr(self, "_autowrap_search", None)
        if isinstance(search, list):  # torch's list of module dicts to patch at trace start
            search.extend(m for m in autowrap_modules if m not in search)
        self.path = path
        self.source = source
        self.leaf_classes = set(leaf_classes)
        self.leaf_predicate = leaf_predicate
        self.traced_params: dict[CodeType, set[str]] = {}
        self.module_calls: dict[type, list[tuple[Any, tuple[Any, ...], dict[str, Any]]]] = {}
        """Per class, each call of a submodule the trace saw (the module, its arguments with
        proxies), in order; a replayed block's own submodules are not called."""
        self.root_codes: set[CodeType] = set()
        self.reuse_blocks = reuse_blocks
        self.replayer: reuse.Replayer | None = None
        """Set while tracing with ``reuse_blocks``: the calls replayed (``replayer.segments``)."""
        self.decider: decided.Decider | None = None
        """Answers rank and dtype checks on traced values (:mod:`.decided`); set by the capture."""
        self.deciding = False
        """While the decider runs the graph so far: module calls and attributes are plain."""
        self.split_frames: dict[torch.fx.Node, list[tuple[CodeType, int]]] = {}
        """The document's frames where each split (``chunk``, ``split``...) was made."""
        self.placed: list[tuple[CodeType, int]] | None = None
        """Set while the pieces of a split are taken: the frames their nodes are written at."""
        self.outer: FrameType | None = None
        """While tracing: the frame the trace started in (frames outside it are not read)."""

    def trace(self, root: Any, concrete_args: dict[str, Any] | None = None) -> torch.fx.Graph:
        outer, self.outer = self.outer, sys._getframe()
        try:
            with _wrappers_kept():
                return self._trace(root, concrete_args)
        finally:
            self.outer = outer

    def _trace(self, root: Any, concrete_args: dict[str, Any] | None) -> torch.fx.Graph:
        if isinstance(root, torch.nn.Module):
            self.root_codes = method_codes(type(root), self.path)
        self.replayer = None
        self.module_calls = {}
        self.split_frames = {}
        if self.reuse_blocks and isinstance(root, torch.nn.Module):
            self.replayer = reuse.Replayer(
                self,
                self.path,
                lambda: tuple(document_frames(sys._getframe(1), self.path, self.outer)),
            )
        undecorated = passthrough.traced_class(root) or _undecorated_class(root)
        concrete_args = _without_var_arguments(root, undecorated, concrete_args)
        if undecorated is None:
            return super().trace(root, concrete_args)
        decorated, root.__class__ = root.__class__, undecorated
        try:
            return super().trace(root, concrete_args)
        finally:
            root.__class__ = decorated

    def call_module(
        self,
        m: torch.nn.Module,
        forward: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        if self.deciding:
            return forward(*args, **kwargs)
        try:
            self.path_of_module(m)
        except NameError:
            # a module made while ``forward`` runs (``ACT2FN[self.conv_act](x)`` makes the
            # activation's module on each call): not one of the root's, so traced through,
            # as torch.fx does with any module it does not keep whole (its class is noted as
            # called, with no call that can be recorded)
            self.module_calls.setdefault(type(m), [])
            return forward(*args, **kwargs)
        self.module_calls.setdefault(type(m), []).append((m, *call_as_made(args, kwargs)))
        inner = _undecorated_forward(type(m))
        if inner is not None and getattr(forward, "__func__", None) is type(m).forward:
            forward = inner.__get__(m)  # the submodule's own forward, as for the root
        replayer = self.replayer
        if replayer is None or self.is_leaf_module(m, self.path_of_module(m)):
            return super().call_module(m, forward, args, kwargs)
        return replayer.call_module(
            m,
            forward,
            args,
            kwargs,
            lambda: super(SpanTracer, self).call_module(m, forward, args, kwargs),
        )

    def create_arg(self, a: Any) -> Any:
        handler = _PLAIN_ARGS.get(type(a))
        return handler(self, a) if handler is not None else super().create_arg(a)

    def getattr(self, attr: str, attr_val: Any, parameter_proxy_cache: dict[str, Any]) -> Any:
        if self.deciding:
            return attr_val
        if self.replayer is not None:
            self.replayer.parameter_cache = parameter_proxy_cache
        return super().getattr(attr, attr_val, parameter_proxy_cache)

    def is_leaf_module(self, m: torch.nn.Module, module_qualified_name: str) -> bool:
        if type(m).__name__ in self.leaf_classes:
            return True
        if self.leaf_predicate is not None and self.leaf_predicate(m):
            return True
        return super().is_leaf_module(m, module_qualified_name)

    def create_node(
        self,
        kind: str,
        target: Any,
        args: Any,
        kwargs: Any,
        name: Any = None,
        type_expr: Any = None,
    ) -> torch.fx.Node:
        node = super().create_node(kind, target, args, kwargs, name, type_expr)
        frame = sys._getframe(1)
        frames = self.placed if self.placed is not None else self._document_frames(frame)
        if decided.is_split(node):
            self.split_frames[node] = frames
        if self.replayer is not None and self.replayer.recordings:
            self.replayer.note_created(node, name, tuple(frames))
        if frames:
            span = self.source.code_span(*frames[0])
            if span is not None:
                node.meta[SPAN_KEY] = span
                site = self.source.code_span(*call_site_frame(frames, self.root_codes))
                node.meta[CALL_SITE_KEY] = site or span
            self.note_params(frame)
        return node

    def to_bool(self, obj: torch.fx.Proxy) -> bool:
        """A rank or dtype check the decider answers (its line recorded); else torch.fx's
        refusal of a traced value in control flow."""
        found = self._ask(lambda decider: decider.decide(obj.node))
        if found is None:
            return super().to_bool(obj)
        self._decided(decided.Decision(obj.node, found, self._innermost_span()))
        return found

    def iter(self, obj: torch.fx.Proxy) -> Iterator[torch.fx.Proxy]:
        """The pieces of a traced value whose count its operation fixes (``chunk(3)``,
        ``tensor_split(2)``, ``split([a, b])``), one ``getitem`` node each as they are taken:
        what ``q, k, v = map(f, qkv.chunk(3, dim=-1))``, a generator over it or
        ``(q, *kv.chunk(2))`` iterate; as many values as the code that unpacks a starred
        value asks of it (``b, n, _, h = *x.shape, self.heads``: three, :mod:`.unpacked`).
        Else torch.fx's refusal (a count that depends on a size is not known while
        tracing)."""
        count = decided.fixed_length(obj.node)
        if count is None:
            caller = sys._getframe(2)  # the code that iterates: Proxy.__iter__'s caller
            count = unpacked.starred_count(caller.f_code, caller.f_lasti)
            if count is None:
                count = self._rank_unpacked(
                    obj, unpacked.least_count(caller.f_code, caller.f_lasti)
                )
            if count is None:
                count = self._sizes_sliced(obj)
        if count is None:
            return super().iter(obj)
        return self._pieces(obj, count)

    def _sizes_sliced(self, obj: torch.fx.Proxy) -> int | None:
        """For a slice of ``x.shape`` (or of ``x.size()``) by constants, iterated
        (transformers' attention layers build ``(*input_shape, -1, self.head_dim)`` from
        ``input_shape = hidden_states.shape[:-1]``): as many values as the slice takes of the
        rank of ``x`` the decider finds, its line recorded as a decided unpacking; None when
        it finds none."""
        node = obj.node
        if node.op != "call_function" or node.target is not operator.getitem or node.kwargs:
            return None
        base, index = node.args if len(node.args) == 2 else (None, None)
        if not isinstance(base, torch.fx.Node) or not isinstance(index, slice):
            return None
        if any(v is not None and type(v) is not int for v in (index.start, index.stop, index.step)):
            return None
        tensor = decided.size_read(base)
        if tensor is None or index.step == 0:
            return None
        rank = self.decide_rank(tensor, base, kind="unpacked")
        return None if rank is None else len(range(rank)[index])

    def _rank_unpacked(self, obj: torch.fx.Proxy, least: int | None) -> int | None:
        """For ``x.shape`` (or ``x.size()``) unpacked into a starred name, which takes any
        count of at least ``least`` values (``batch, n, *_ = x.shape``, ``*_, n, dtype =
        *x.shape, x.dtype``): the rank of ``x`` the decider finds, its line recorded as a
        decided unpacking; None when it finds none or a rank the statement cannot take."""
        if least is None:
            return None
        tensor = decided.size_read(obj.node)
        if tensor is None:
            return None
        rank = self._ask(lambda decider: decider.rank(tensor))
        if rank is None or rank < least:
            return None
        self._decided(decided.Decision(obj.node, rank, self._innermost_span(), kind="unpacked"))
        return rank

    def _pieces(self, obj: torch.fx.Proxy, count: int) -> Iterator[torch.fx.Proxy]:
        """``obj[0]`` ... ``obj[count - 1]``, written where the split was when it was made in
        the same call of the same function: a piece is the split's value, as when it is
        unpacked on its own line (``q, k, v = qkv.chunk(3)``), not one of the values made
        where it is iterated (the hint of ``q, k, v = map(f, qkv)`` names ``f``'s)."""
        made = self.split_frames.get(obj.node)
        here = self._document_frames(sys._getframe(1))
        if here and here[0][0].co_name in _COMPREHENSIONS:
            here = here[1:]  # ``(f(t) for t in x.chunk(2))``: taken in the function that has it
        place = None
        if made and here and here[0][0] is made[0][0] and here[1:] == made[1:]:
            place = made
        items: Any = obj  # torch.fx makes ``Proxy.__getitem__`` at import
        for i in range(count):
            self.placed = place
            try:
                piece = items[i]
            finally:
                self.placed = None
            yield piece

    def _document_frames(self, frame: FrameType | None) -> list[tuple[CodeType, int]]:
        return document_frames(frame, self.path, self.outer)

    def decide_rank(
        self,
        tensor: torch.fx.Node,
        read: torch.fx.Node | None,
        kind: Literal["rank", "unpacked"] = "rank",
    ) -> int | None:
        """``len(x.shape)`` (or of ``x.size()``, the node ``read``), or with ``kind``
        ``unpacked`` the sizes a slice of it gives: the rank of ``tensor`` the decider finds
        (its line recorded); None when it finds none."""
        rank = self._ask(lambda decider: decider.rank(tensor))
        if rank is not None:
            self._decided(decided.Decision(read, rank, self._innermost_span(), kind=kind))
        return rank

    def ranks_and_dtypes(self, nodes: list[torch.fx.Node]) -> tuple[Any, ...] | None:
        """The rank and dtype of each node's value (for replaying a block whose call decided
        a check); None when one is not known."""
        return self._ask(lambda decider: decider.ranks_and_dtypes(nodes))

    def _ask(self, question: Callable[[decided.Decider], _T | None]) -> _T | None:
        """``question``'s answer from the decider (None without one); module calls and
        attributes are plain while it runs the graph so far."""
        decider = self.decider
        if decider is None:
            return None
        self.deciding = True
        try:
            return question(decider)
        finally:
            self.deciding = False

    def _decided(self, decision: decided.Decision) -> None:
        """Keep ``decision``; the calls being recorded replay only for the same ranks and
        dtypes."""
        if self.decider is not None:  # it answered
            self.decider.decisions.append(decision)
        if self.replayer is not None:
            self.replayer.note_decided()

    def _innermost_span(self) -> Any:
        """The span of the document's innermost frame on the stack (where a check is)."""
        frame = sys._getframe(1)
        found = document_frames(frame, self.path, self.outer)
        first = found[0] if found else None
        return self.source.code_span(*first) if first is not None else None

    def proxy(self, node: torch.fx.Node) -> torch.fx.Proxy:
        return decided.TracedProxy(node, self)

    def create_proxy(self, kind: str, target: Any, args: Any, *rest: Any, **more: Any) -> Any:
        kwargs = rest[0] if rest else more.get("kwargs")
        if kind == "call_method" and target == "__call__" and _called_after_callable(args, kwargs):
            return args[0]  # what eager gives: a tensor is not callable
        return super().create_proxy(kind, target, args, *rest, **more)

    def note_params(self, frame: FrameType | None) -> None:
        """Record which parameters of each document frame on the stack are proxies."""
        outer = self.outer
        while frame is not None and frame is not outer:
            code = frame.f_code
            if code.co_filename == self.path and code not in self.traced_params:
                count = code.co_argcount + code.co_kwonlyargcount
                names = code.co_varnames[:count]
                local = frame.f_locals
                self.traced_params[code] = {
                    n for n in names if isinstance(local.get(n), torch.fx.Proxy)
                }
            frame = frame.f_back


class _ModuleStack(collections.OrderedDict[str, Any]):
    """torch.fx's stack of the module calls being traced, whose copy (each node's
    ``nn_module_stack``, copied by ``TracerBase.create_node``) is the plain ``OrderedDict``
    that ``copy.copy`` makes of one, made directly instead of through ``__reduce_ex__`` (a
    tenth of a ResNet-50's trace)."""

    def __copy__(self) -> collections.OrderedDict[str, Any]:
        return collections.OrderedDict(self)


_WRAPPERS: dict[int, tuple[Callable[..., Any], Callable[..., Any]]] = {}
"""``id(function)`` -> the function and the wrapper torch.fx made of it (see
:func:`_wrappers_kept`)."""


@contextlib.contextmanager
def _wrappers_kept() -> Iterator[None]:
    """While a trace runs: the wrapper torch.fx puts in place of a function it records as
    one node (``math.sqrt``, a ``torch.fx.wrap``-ed or autowrapped function) is made once
    per function and kept for the next traces, instead of once per trace (every function of
    ``math`` is wrapped at the start of each: a twelfth of a ResNet-50's trace). The wrapper
    holds nothing but the function; the trace still puts it in place and takes it away."""
    from torch.fx import _symbolic_trace

    make = getattr(_symbolic_trace, "_create_wrapped_func", None)
    if make is None:
        yield
        return

    def kept(function: Callable[..., Any]) -> Callable[..., Any]:
        entry = _WRAPPERS.get(id(function))
        if entry is None or entry[0] is not function:
            entry = _WRAPPERS[id(function)] = (function, make(function))
        return entry[1]

    _symbolic_trace._create_wrapped_func = kept  # type: ignore[assignment]
    try:
        yield
    finally:
        _symbolic_trace._create_wrapped_func = make


def _plain_args() -> dict[type, Callable[[Any, Any], Any]]:
    """The argument types whose value ``torch.fx.Tracer.create_arg`` lowers without asking
    what it is (numbers, strings, ``None``, dtypes, containers, proxies: its own table of them,
    without ``Tensor``, which may be a buffer or a constant), with fxls's proxy: ``create_arg``
    reaches them only after asking whether each argument is a parameter, a tensor, a module, a
    named tuple or a registered class, about a sixth of a ResNet-50's trace."""
    from torch.fx import proxy

    table: dict[type, Callable[[Any, Any], Any]] = {
        kind: handler
        for kind, handler in getattr(proxy, "_create_arg_bypass", {}).items()
        if not issubclass(kind, torch.Tensor)
    }
    table[decided.TracedProxy] = lambda tracer, a: a.node
    return table


_PLAIN_ARGS = _plain_args()

_COMPREHENSIONS = frozenset({"<genexpr>", "<listcomp>", "<setcomp>", "<dictcomp>"})

_FX_FOLDER = torch.fx.__file__.rsplit("/", 1)[0]


def _called_after_callable(args: Any, kwargs: Any) -> bool:
    """Whether a traced value is being called with no arguments by code that asks
    ``callable()`` first (``return arg() if callable(arg) else arg``, x-transformers'
    ``default``). ``torch.fx.Proxy`` defines ``__call__``, so ``callable(proxy)`` is true while
    tracing and the call is recorded (``x.__call__()``, which fails when the graph runs); a
    traced value is a tensor, which in eager is not callable and is returned as it is."""
    if len(args) != 1 or kwargs or not isinstance(args[0], torch.fx.Proxy):
        return False
    frame: FrameType | None = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith(_FX_FOLDER):
        frame = frame.f_back
    return frame is not None and "callable" in frame.f_code.co_names


def _without_var_arguments(
    root: Any, undecorated: type | None, concrete_args: dict[str, Any] | None
) -> dict[str, Any] | None:
    """``concrete_args`` with ``forward``'s ``*args`` empty and ``**kwargs`` empty (torch.fx
    names them ``*args``/``**kwargs``): as a Proxy, ``**kwargs`` passed on to a submodule
    (``self.model(input_ids=input_ids, **kwargs)``) cannot be unpacked, and the call fxls
    makes passes nothing there anyway."""
    if not isinstance(root, torch.nn.Module):
        return concrete_args
    forward = getattr(undecorated or type(root), "forward", None)
    if not callable(forward):
        return concrete_args
    try:
        params = inspect.signature(forward).parameters.values()
    except (TypeError, ValueError):
        return concrete_args
    extra: dict[str, Any] = {}
    for param in params:
        if param.kind is param.VAR_POSITIONAL:
            extra["*" + param.name] = ()
        elif param.kind is param.VAR_KEYWORD:
            extra["**" + param.name] = {}
    if not extra:
        return concrete_args
    return {**extra, **(concrete_args or {})}


def _undecorated_forward(cls: type) -> FunctionType | None:
    """The function a decorator on ``cls.forward`` wraps (``functools.wraps``), or None when
    ``forward`` is not decorated."""
    forward = getattr(cls, "forward", None)
    try:
        inner = inspect.unwrap(forward) if forward is not None else None
    except ValueError:
        return None
    if inner is None or inner is forward or not isinstance(inner, FunctionType):
        return None
    return inner


def _undecorated_class(root: Any) -> type | None:
    """For a module whose ``forward`` is wrapped by a decorator (``functools.wraps``:
    ``@can_return_tuple``, ``@auto_docstring``, ``@torch.no_grad()``), a subclass whose
    ``forward`` is the function the user wrote, or None. torch.fx traces the class's
    ``forward`` by its code object, and a wrapper's ``(*args, **kwargs)`` code cannot take
    the real parameters ("co_varnames is too small"): the trace goes through the user's own
    ``forward`` instead, and what the decorator does around it is left out."""
    if not isinstance(root, torch.nn.Module):
        return None
    inner = _undecorated_forward(type(root))
    return passthrough.with_forward(type(root), inner) if inner is not None else None


def graph_module(root: torch.nn.Module, graph: torch.fx.Graph, name: str) -> torch.fx.GraphModule:
    """A GraphModule whose Python code is generated when first needed (running it, ``.code``),
    not when it is made: most captures only read the graph, and generating the code of a
    2000-node graph costs as much as propagating its shapes."""
    try:
        from torch.fx._lazy_graph_module import _LazyGraphModule
    except ImportError:  # pragma: no cover - torch without lazy graph modules
        return torch.fx.GraphModule(root, graph, name)
    return _LazyGraphModule(root, graph, name)


def trace(
    root: torch.nn.Module,
    path: str,
    source: SourceText,
    leaf_classes: Iterable[str] = (),
    concrete_args: dict[str, Any] | None = None,
) -> torch.fx.GraphModule:
    """Trace ``root`` with a ``SpanTracer``; raises what tracing raises."""
    tracer = SpanTracer(path, source, leaf_classes)
    graph = tracer.trace(root, concrete_args=concrete_args)
    name = type(root).__name__
    return graph_module(tracer.root, graph, name)


MAPPINGS = (dict, collections.OrderedDict, collections.UserDict)
"""The mappings a call's arguments are copied of (:func:`as_called`) and a parent's call passes
again (``build.parents``): a model's ``UserDict`` that its layers share keys and values
through (Gemma 4's ``shared_kv_states``)."""


def as_called(value: _T) -> _T:
    """``value`` as it is now: a mapping (a dict, an OrderedDict, a UserDict) copied, anything
    else itself. What a call writes into a mapping it was given (Gemma 4's layers share keys
    and values through one) is then neither in a recorded earlier call nor in the next run
    given the same value."""
    return copy.copy(value) if type(value) in MAPPINGS else value


def call_as_made(
    args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """A call's arguments as they are when it is made (:func:`as_called` each)."""
    return tuple(as_called(a) for a in args), {k: as_called(v) for k, v in kwargs.items()}
