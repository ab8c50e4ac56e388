"""Shapes for modules torch.fx cannot trace: run ``forward`` for real on fake tensors.

``fake_run(module, inputs, path)`` calls the module on fake tensors (``FakeTensorMode``, with a
``ShapeEnv`` when inputs name dimensions) and records what ran into a ``torch.fx.Graph``. Python
control flow in ``forward`` runs for real on fake values, so everything fake tensors support works
where symbolic tracing fails: asserts on sizes, ``int()``/``range()`` on sizes, iterating a tensor
or a shape, ``torch.zeros(*sizes)``, einops, branches on optional arguments.

What is recorded:

- a ``placeholder`` per example input;
- a ``call_module`` node per call of a ``torch.nn`` built-in submodule (``Linear``, ``Conv2d``,
  ``MultiheadAttention``...; not ``Sequential``) or of a class named in ``leaf_classes``; nothing
  that runs inside such a call is recorded;
- a ``call_function`` / ``call_method`` node per torch function or Tensor method called while a
  frame of the document (``co_filename == path``) is on the stack; user-defined submodules and
  helpers are recorded through. Operators keep FX's conventions: ``x[i]`` is
  ``operator.getitem``, ``x.T`` is ``getattr(x, "T")``, ``a + b`` is the method ``add``;
- ``get_attr`` nodes for parameters, buffers and tensor attributes the code reads, and for other
  tensors that reach an operation without being produced by one (``_fxls_constant<N>``); they
  take the span of the first operation that uses them;
- ``operator.getitem`` nodes for elements of tuple results that are used (``q, k, v = x.split()``);
- calls that return no tensor (``x.size(1)``, ``x.shape``, ``x.dim()``) become nodes only when
  their result is passed to a recorded operation (a symbolic ``SymInt``), so size queries made for
  Python control flow (and by einops) leave no unused nodes;
- the ``output`` node when ``forward`` returns.

Each node's meta holds ``fxls_span`` (where the call is written: innermost frame of the document),
``fxls_call_site`` (outermost frame: the root ``forward`` line) and ``nn_module_stack``. A line
that runs N times (a loop over layers) records N nodes with one span.

When ``forward`` raises, the graph keeps the nodes recorded up to the failure and has **no**
``output`` node; ``FakeRun.error`` holds the exception and ``error_span`` the innermost line of the
document in its traceback. Python arithmetic on sizes (``T // 2``) is not an operation: symbolic
results of it stay constants in node arguments. ``int()``/``range()`` on a symbolic size pins that
symbol to its example size from then on (the ShapeEnv specializes it), as in ``torch.compile``.

No real memory is used for activations: parameters built on the meta device become fake CPU
tensors for the duration of the call (real CPU parameters are wrapped as fakes, sharing storage),
so the code sees ``x.device == cpu`` exactly as in eager CPU execution.
"""

from __future__ import annotations

import contextlib
import inspect
import linecache
import operator
import re
import sys
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from types import FrameType, TracebackType
from typing import Any

import torch
import torch.fx
from torch._subclasses.fake_tensor import FakeTensor
from torch.overrides import TorchFunctionMode

from fxls.protocol.model import Span, Value
from fxls.protocol.positions import SourceText
from fxls.worker.capture import cpulimit
from fxls.worker.capture.shapes import propagation as shapes
from fxls.worker.capture.shapes import shortcuts, sizes
from fxls.worker.capture.shapes import state as module_state
from fxls.worker.capture.shapes.values import Namer
from fxls.worker.capture.spans import (
    CALL_SITE_KEY,
    SPAN_KEY,
    call_site_frame,
    element_span,
    method_codes,
)
from fxls.worker.capture.trace.branches import TENSOR_BOOL, Branches, Decision

__all__ = [
    "NOT_AGAIN",
    "FakeRun",
    "Hooks",
    "Watch",
    "fake_run",
    "fixed_sizes",
    "generalize",
    "meta_outputs",
]

ExampleInput = shapes.ExampleInput

_SYM_TYPES = (torch.SymInt, torch.SymFloat, torch.SymBool)
_CPU = torch.device("cpu")

_DUNDER_OPERATORS: dict[str, tuple[Callable[..., Any], bool]] = {
    # Tensor dunder -> (operator function, reflected)
    "__getitem__": (operator.getitem, False),
    "__setitem__": (operator.setitem, False),
    "__rsub__": (operator.sub, True),
    "__rtruediv__": (operator.truediv, True),
    "__rdiv__": (operator.truediv, True),
    "__rfloordiv__": (operator.floordiv, True),
    "__rpow__": (operator.pow, True),
    "__rmatmul__": (operator.matmul, True),
    "__rmod__": (operator.mod, True),
    "__floordiv__": (operator.floordiv, False),
    "__mod__": (operator.mod, False),
    "__matmul__": (operator.matmul, False),
    "__pow__": (operator.pow, False),
    "__neg__": (operator.neg, False),
    "__eq__": (operator.eq, False),
    "__ne__": (operator.ne, False),
    "__lt__": (operator.lt, False),
    "__le__": (operator.le, False),
    "__gt__": (operator.gt, False),
    "__ge__": (operator.ge, False),
    "__and__": (operator.and_, False),
    "__or__": (operator.or_, False),
    "__xor__": (operator.xor, False),
    "__rand__": (operator.and_, True),
    "__ror__": (operator.or_, True),
    "__rxor__": (operator.xor, True),
    "__invert__": (operator.invert, False),
}


Watch = Callable[[torch.nn.Module, tuple[Any, ...], dict[str, Any], Any], bool]
"""``watch(submodule, args, kwargs, namer) -> stop?``: sees every submodule call of a run."""


@dataclass
class Hooks:
    """What watches a run of :func:`fake_run`."""

    watch: Watch | None = None
    """Sees every submodule call (with the namer of the run's dimension names) and may stop
    the run by returning True; the run then ends without ``error``."""
    branches: Branches | None = None
    """Takes conditions on tensor values one way (:mod:`branches`); without it, ``bool()`` of
    a fake tensor raises as torch makes it."""


class Enough(Exception):
    """Raised by a watch that has seen what it wanted: the run stops there, without error."""


@dataclass
class FakeRun:
    """What one fake execution of ``forward`` recorded."""

    graph_module: torch.fx.GraphModule | None
    """The recorded graph; ``None`` only when no GraphModule could be made of it. Its code is
    generated (``gm.code``) but running it is not the point: constants are baked in."""
    spans: dict[str, tuple[Span | None, Span | None]]
    """Node name -> (innermost user span, call-site span); placeholders/output have none
    (``tracer.assign_ast_spans`` gives them the ``def`` parameters and the ``return``)."""
    examples: dict[str, Any]
    """Node name -> the fake value it produced (fake tensor, SymInt, tuple...)."""
    error: BaseException | None
    """What ``forward`` (or setting up the run) raised; the graph holds what ran before."""
    error_span: Span | None
    """Innermost line of the document in the error's traceback."""
    error_target: str | None = None
    """The operation that raised (``torch.matmul``, ``view``, ``fc``), when one of the recorded
    kind did; None when plain Python in ``forward`` raised (an ``assert``, a ``TypeError``)."""
    values: dict[str, list[Value]] = field(default_factory=dict)
    """Node name -> outputs rendered in the user's dimension names (tuples flattened)."""
    names: dict[Any, str] = field(default_factory=dict)
    """sympy Symbol -> the user's dimension name, for rendering other values."""
    mode: str = "fake"
    """``symbolic`` (named dims kept as symbols) or ``fake`` (static sizes)."""
    specialized: dict[str, int] = field(default_factory=dict)
    """Named dimensions the run had to fix to their example size (``len(x)``, ``int(n)``)."""
    guards: list[Any] = field(default_factory=list)
    """The expressions in named dimensions the run required to equal a number (sympy; the
    side that is not a number): ``TruncToInt(0.5*T)`` of ``int(x.size(1) * 0.5)``."""
    decided: list[tuple[Decision, Any]] = field(default_factory=list)
    """The conditions on tensor values this run took one way (``Hooks.branches``), each with
    the tensor whose truth it took."""
    asked: list[Any] = field(default_factory=list)
    """The tensors whose truth this run asked (what computed them is used)."""

    def rename(self, text: str) -> str:
        """Raw symbols in a text (``s26*s49`` in an argument) -> the user's names (``B*T``)."""
        return Namer(self.names).text(text)


# ---------------------------------------------------------------------------------------
# Source positions
# ---------------------------------------------------------------------------------------


_UNPACKING = re.compile(r"\s*\(?\s*\*?\w+\s*(,\s*\*?\w+\s*)+,?\s*\)?\s*=\s*$")
"""The text before an unpacked value on its line: ``B, T, C = `` (``(a, *rest) = ``)."""


class _Spans:
    """Innermost and outermost document frames of the current stack, as spans."""

    def __init__(self, path: str, source: SourceText) -> None:
        self.path = path
        self.source = source
        self.root_codes: set[Any] = set()
        """Code objects of the root module's methods (``tracer.method_codes``)."""

    def of_stack(self, frame: FrameType | None) -> tuple[Span, Span] | None:
        frames: list[tuple[Any, int]] = []
        while frame is not None:
            if frame.f_code.co_filename == self.path:
                frames.append((frame.f_code, frame.f_lasti))
            frame = frame.f_back
        if not frames:
            return None
        span = self.source.code_span(*frames[0])
        call_site = self.source.code_span(*call_site_frame(frames, self.root_codes))
        if span is None:
            return None
        return span, call_site or span

    def of_traceback(self, exc: BaseException) -> Span | None:
        """Innermost document line in the traceback of ``exc`` (or its causes)."""
        seen: set[int] = set()
        current: BaseException | None = exc
        while current is not None and id(current) not in seen:
            seen.add(id(current))
            found: Span | None = None
            tb: TracebackType | None = current.__traceback__
            while tb is not None:
                if tb.tb_frame.f_code.co_filename == self.path:
                    found = self.source.code_span(tb.tb_frame.f_code, tb.tb_lasti) or found
                tb = tb.tb_next
            if found is not None:
                return found
            current = current.__cause__ or current.__context__
        return None


# ---------------------------------------------------------------------------------------
# The recorder
# ---------------------------------------------------------------------------------------


class _Lazy:
    """A node made on first use (a size query, a tuple element)."""

    __slots__ = ("build", "node")

    def __init__(self, build: Callable[[], torch.fx.Node] | None = None) -> None:
        self.build = build
        self.node: torch.fx.Node | None = None

    def get(self) -> torch.fx.Node:
        if self.node is None:
            assert self.build is not None
            self.node = self.build()
            self.build = None
        return self.node


def _done(node: torch.fx.Node) -> _Lazy:
    lazy = _Lazy()
    lazy.node = node
    return lazy


def _has_tensor(obj: Any, depth: int = 0) -> bool:
    if isinstance(obj, torch.Tensor):
        return True
    if depth > 4:
        return False
    if isinstance(obj, (tuple, list)):
        return any(_has_tensor(v, depth + 1) for v in obj)
    if isinstance(obj, dict):
        return any(_has_tensor(v, depth + 1) for v in obj.values())
    return False


class _Recorder:
    """Builds the graph: maps live objects to the nodes that produced them."""

    def __init__(self, spans: _Spans, leaf_classes: Sequence[str]) -> None:
        self.graph = torch.fx.Graph()
        self.spans = spans
        self.leaf_classes = list(leaf_classes)
        self.objects: dict[int, _Lazy] = {}
        self.keep: list[Any] = []
        """Every mapped object stays alive so that ids are never reused during the run."""
        self.attrs: dict[int, str] = {}
        """id(fake parameter/buffer/attribute) -> qualified name."""
        self.owners: dict[str, Any] = {}
        """get_attr/call_module target -> the original object, for the GraphModule."""
        self.module_names: dict[int, str] = {}
        self.examples: dict[str, Any] = {}
        self.values: dict[str, list[Value]] = {}
        self.namer = Namer({})
        self.node_spans: dict[str, tuple[Span | None, Span | None]] = {}
        self.suppress = 0
        self.root: torch.nn.Module | None = None
        self.module_stack: list[tuple[str, type]] = []
        self.failed: str | None = None
        """Readable target of the recorded operation that raised, if one did."""
        self.using: tuple[Span, Span] | None = None
        """Spans of the call whose node is being made (given to attributes it reads)."""
        self._constants = 0
        self._anonymous = 0
        self.watch: Watch | None = None
        """Called before each submodule call; True stops the run (``Enough``)."""
        self.branches: Branches | None = None
        """Conditions on tensor values taken one way (``bool()`` of a fake tensor)."""

    # -- objects -> nodes ---------------------------------------------------------------

    def bind(self, obj: Any, lazy: _Lazy, depth: int = 0) -> None:
        """Map ``obj`` (and the elements of containers) to ``lazy``."""
        if isinstance(obj, (torch.Tensor, *_SYM_TYPES)) or (
            isinstance(obj, (tuple, list, dict)) and depth == 0
        ):
            self.objects[id(obj)] = lazy
            self.keep.append(obj)
        if depth > 4:
            return
        items: Iterable[tuple[Any, Any]]
        if isinstance(obj, (tuple, list)):
            items = enumerate(obj)
        elif isinstance(obj, dict):
            items = obj.items()
        else:
            return
        for key, item in items:
            if isinstance(item, (torch.Tensor, *_SYM_TYPES, tuple, list, dict)):
                self.bind(item, self._element(lazy, key, item), depth + 1)

    def _element(self, parent: _Lazy, key: Any, value: Any) -> _Lazy:
        def build() -> torch.fx.Node:
            base = parent.get()
            node = self.graph.call_function(operator.getitem, (base, key))
            self._annotate(node, value, self._element_spans(base, key))
            return node

        return _Lazy(build)

    def _element_spans(
        self, base: torch.fx.Node, key: Any
    ) -> tuple[Span | None, Span | None] | None:
        """Where an element of ``base``'s value is taken (indexing a tuple is no call, so no
        frame says): at the subscript taking it in the call that uses it, when that call has
        exactly one such subscript (``shape = x.size()`` … ``x.view(-1, shape[-1])``: the
        element is neither ``x.size()``'s value nor ``view``'s); else where ``base`` is made
        (``q, k, v = x.split(d)``, ``map(f, x.chunk(3))``)."""
        spans = self.node_spans.get(base.name)
        using = self.using
        if spans is None or spans[0] is None or using is None or self._unpacks(spans[0]):
            return spans
        whole = self.examples.get(base.name)
        if isinstance(key, int) and isinstance(whole, (tuple, list)):
            found = element_span(self.spans.source, using[0], key, len(whole))
            if found is not None:  # called from forward's line, as the call using it is
                return found, (found if using[1] == using[0] else using[1])
        return spans

    def _unpacks(self, span: Span) -> bool:
        """Whether the statement of ``span`` assigns its value to a tuple of names."""
        before = self.spans.source.line(span.line)[: span.col]
        return _UNPACKING.match(before) is not None

    def node_of(self, obj: Any) -> torch.fx.Node | None:
        lazy = self.objects.get(id(obj))
        if lazy is not None:
            return lazy.get()
        if isinstance(obj, torch.Tensor):
            return self._attribute(obj)
        return None

    def _attribute(self, t: torch.Tensor) -> torch.fx.Node:
        name = self.attrs.get(id(t))
        original: Any = t
        if name is None:
            name = f"_fxls_constant{self._constants}"
            self._constants += 1
        else:
            original = self.owners.get(name, t)
        self.owners.setdefault(name, original)
        node = self.graph.get_attr(name)
        self._annotate(node, t, self.using)  # the span of the first operation using it
        lazy = _done(node)
        self.objects[id(t)] = lazy
        self.keep.append(t)
        return node

    def to_arg(self, obj: Any, depth: int = 0) -> Any:
        """Replace tensors and symbolic scalars known to the graph by their nodes."""
        if isinstance(obj, (torch.Tensor, *_SYM_TYPES)):
            node = self.node_of(obj)
            return obj if node is None else node
        if depth > 6:
            return obj
        if isinstance(obj, (tuple, list, dict)) and id(obj) in self.objects:
            return self.objects[id(obj)].get()
        if isinstance(obj, tuple):
            items = tuple(self.to_arg(v, depth + 1) for v in obj)
            return type(obj)(*items) if hasattr(obj, "_fields") else items
        if isinstance(obj, list):
            return [self.to_arg(v, depth + 1) for v in obj]
        if isinstance(obj, dict):
            return {k: self.to_arg(v, depth + 1) for k, v in obj.items()}
        if isinstance(obj, slice):
            return slice(
                self.to_arg(obj.start, depth + 1),
                self.to_arg(obj.stop, depth + 1),
                self.to_arg(obj.step, depth + 1),
            )
        return obj

    # -- nodes ----------------------------------------------------------------------------

    def _annotate(
        self, node: torch.fx.Node, value: Any, spans: tuple[Span | None, Span | None] | None
    ) -> None:
        span, call_site = spans if spans is not None else (None, None)
        if span is not None:
            node.meta[SPAN_KEY] = span
            node.meta[CALL_SITE_KEY] = call_site or span
        node.meta["nn_module_stack"] = {path: (path, cls) for path, cls in self.module_stack}
        self.node_spans[node.name] = (span, call_site)
        self.examples[node.name] = value
        self.keep.append(value)
        self.render(node.name, value)

    def render(self, name: str, value: Any) -> None:
        """Values as they are now: a later ``int(size)`` pins symbols for later nodes only."""
        try:
            self.values[name] = shapes.values_of(value, self.namer)
        except Exception:  # rendering is best effort
            self.values[name] = []

    def placeholder(self, name: str, value: Any) -> None:
        node = self.graph.placeholder(name)
        self._annotate(node, value, None)
        self.bind(value, _done(node))

    def record(
        self,
        op: str,
        target: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        out: Any,
        spans: tuple[Span, Span],
    ) -> None:
        """Add the node for one call; calls returning no tensor are added when first used."""
        stack = list(self.module_stack)

        def build() -> torch.fx.Node:
            saved = self.module_stack, self.using
            self.module_stack, self.using = stack, spans
            try:
                node_args = self.to_arg(args)
                node_kwargs = self.to_arg(kwargs)
                node = self.graph.create_node(op, target, node_args, node_kwargs)
                self._annotate(node, out, spans)
            finally:
                self.module_stack, self.using = saved
            return node

        lazy = _Lazy(build)
        if out is None or _has_tensor(out):
            lazy.get()
        self.bind(out, lazy)

    def call_module(
        self, module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any
    ) -> None:
        spans = self.spans.of_stack(sys._getframe(2))
        if spans is None:
            return
        name = self.module_names.get(id(module))
        if name is None:
            name = f"_fxls_module{self._anonymous}"
            self._anonymous += 1
            self.module_names[id(module)] = name
        self.owners.setdefault(name, module)
        self.record("call_module", name, args, kwargs, out, spans)

    def output(self, value: Any) -> None:
        node = self.graph.output(self.to_arg(value))
        self.examples[node.name] = value
        self.render(node.name, value)
        self.node_spans[node.name] = (None, None)


class _Mode(TorchFunctionMode):
    """Records every torch function / Tensor method called from the document."""

    def __init__(self, recorder: _Recorder) -> None:
        super().__init__()
        self.recorder = recorder

    def __torch_function__(
        self,
        func: Any,
        types: Any,
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        rec = self.recorder
        if rec.branches is not None and func in (TENSOR_BOOL, torch._assert):
            if func is TENSOR_BOOL:
                return rec.branches.bool_of(func, args, kwargs, sys._getframe(1))
            return rec.branches.assertion(args, kwargs, sys._getframe(1))
        if rec.suppress:
            return func(*args, **kwargs)
        spans = rec.spans.of_stack(sys._getframe(1))
        out = shortcuts.function_shortcut(func, args, kwargs)
        op, target, node_args = _describe_call(func, tuple(args))
        if out is None:
            try:
                out = func(*args, **kwargs)
            except BaseException:
                if spans is not None and op is not None and rec.failed is None:
                    rec.failed = _readable(op, target)
                raise
        if spans is not None and op is not None:
            rec.record(op, target, node_args, dict(kwargs), out, spans)
        return out


def _readable(op: str, target: Any) -> str:
    """``view``, ``torch.matmul``, ``operator.getitem``, ``F.softmax``, ``fc``."""
    if isinstance(target, str):
        return target
    name = getattr(target, "__name__", str(target))
    module = getattr(target, "__module__", None) or ""
    if module == "torch.nn.functional":
        return f"F.{name}"
    if module in ("torch", "_operator", "operator", "builtins") or module.startswith("torch._C"):
        prefix = {"_operator": "operator", "builtins": ""}.get(module, "torch")
        return f"{prefix}.{name}" if prefix else name
    return name


def _describe_call(func: Any, args: tuple[Any, ...]) -> tuple[str | None, Any, tuple[Any, ...]]:
    """(op, target, args) of the FX node for a call seen by the torch function mode."""
    name = getattr(func, "__name__", "")
    owner = getattr(func, "__self__", None)
    if name == "__get__" and owner is not None and hasattr(owner, "__name__"):
        # a Tensor property such as x.T or x.shape
        return "call_function", builtins_getattr, (args[0], owner.__name__)
    if torch.overrides.is_tensor_method_or_property(func) or _unlisted_method(func, name):
        if name in _DUNDER_OPERATORS:
            fn, reflected = _DUNDER_OPERATORS[name]
            if reflected and len(args) == 2:
                return "call_function", fn, (args[1], args[0])
            return "call_function", fn, args
        if not name:
            return None, None, args
        return "call_method", name, args
    return "call_function", func, args


def _unlisted_method(func: Any, name: str) -> bool:
    """A method of ``Tensor`` that torch's list of methods leaves out (``unflatten``,
    ``new_zeros`` and the other ``new_*``, ``stride``): its receiver is the first argument,
    as for any method (recorded as a function, its arguments would be named one place off)."""
    return bool(name) and any(getattr(c, name, None) is func for c in _TENSOR_CLASSES)


_TENSOR_CLASSES = (torch.Tensor, torch._C.TensorBase)

builtins_getattr = getattr


# ---------------------------------------------------------------------------------------
# Running
# ---------------------------------------------------------------------------------------


@contextlib.contextmanager
def _patched_module_call(recorder: _Recorder) -> Iterator[None]:
    """Route submodule calls through the recorder while the run lasts."""
    original = torch.nn.Module.__call__

    def call(module: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
        if recorder.suppress or module is recorder.root:
            return original(module, *args, **kwargs)
        if recorder.watch is not None and recorder.watch(module, args, kwargs, recorder.namer):
            raise Enough()
        if shortcuts.is_builtin_leaf(module, recorder.leaf_classes):
            recorder.suppress += 1
            try:
                out = shortcuts.module_shortcut(module, args, kwargs)
                if out is None:
                    out = original(module, *args, **kwargs)
            except BaseException:
                if recorder.failed is None:
                    recorder.failed = recorder.module_names.get(id(module), type(module).__name__)
                raise
            finally:
                recorder.suppress -= 1
            recorder.call_module(module, args, kwargs, out)
            return out
        name = recorder.module_names.get(id(module), f"<{type(module).__name__}>")
        recorder.module_stack.append((name, type(module)))
        try:
            return original(module, *args, **kwargs)
        finally:
            recorder.module_stack.pop()

    torch.nn.Module.__call__ = call  # type: ignore[method-assign]
    try:
        yield
    finally:
        torch.nn.Module.__call__ = original  # type: ignore[method-assign]


class _Swap:
    """Parameters, buffers and tensor attributes replaced by fake CPU tensors for the run."""

    def __init__(self, root: torch.nn.Module, fake_mode: Any, recorder: _Recorder) -> None:
        self.root = root
        self.mode = fake_mode
        self.recorder = recorder
        self.memo: dict[int, torch.Tensor] = {}
        self.saved: list[tuple[dict[str, Any], str, Any]] = []

    def fake(self, t: torch.Tensor) -> torch.Tensor:
        """A fake CPU tensor for ``t`` (memoized by identity, so tied weights stay tied)."""
        fake = self.memo.get(id(t))
        if fake is None:
            if isinstance(t, FakeTensor):
                fake = t
            elif t.device.type == "meta":
                # wraps the meta tensor itself: a tenth of the cost of making a new one under
                # the mode, which adds up over every parameter of a deep model
                fake = FakeTensor(self.mode, t.detach(), _CPU)
            else:
                fake = self.mode.from_tensor(t, static_shapes=True)
            self.memo[id(t)] = fake
        return fake

    def __enter__(self) -> _Swap:
        rec = self.recorder
        for prefix, module in self.root.named_modules(remove_duplicate=True):
            rec.module_names.setdefault(id(module), prefix)
            dot = prefix + "." if prefix else ""
            for store in (module._parameters, module._buffers, module.__dict__):
                for attr, value in list(store.items()):
                    if not isinstance(value, torch.Tensor):
                        continue
                    fake = self.fake(value)
                    qualified = dot + attr
                    if id(fake) not in rec.attrs:
                        rec.attrs[id(fake)] = qualified
                        rec.owners.setdefault(qualified, value)
                    self.saved.append((store, attr, value))
                    store[attr] = fake
        return self

    def __exit__(self, *exc: object) -> None:
        for store, attr, value in reversed(self.saved):
            store[attr] = value
        self.saved.clear()


_RENAMED = re.compile(r"_[0-9]+$")


def _call_arguments(
    module: torch.nn.Module, feeds: list[tuple[str, Any]]
) -> tuple[list[Any], dict[str, Any]]:
    """Pass leading parameters without a default positionally and the rest by keyword, leaving
    out those that are their default (as callers of library models do: a decorated
    ``forward`` may add ``use_cache`` itself, and then a positional one is given twice). A
    feed named as FX names a placeholder it made again (``labels_1`` for the ``labels`` that
    ``concrete_args`` fixed) goes to its parameter, not to ``**kwargs``."""
    try:
        params = list(inspect.signature(module.forward).parameters.values())
    except (TypeError, ValueError):
        return [value for _, value in feeds], {}
    names = {param.name for param in params}
    given = dict(feeds)
    for name in list(given):
        base = _RENAMED.sub("", name)
        if name not in names and base in names and base not in given:
            given[base] = given.pop(name)
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    positional = True
    for param in params:
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            positional = False
            continue
        if param.name not in given:
            positional = False
            continue
        value = given.pop(param.name)
        if param.default is not param.empty:
            positional = False
            if value is param.default:
                continue
        if positional and param.kind != param.KEYWORD_ONLY:
            args.append(value)
        else:
            kwargs[param.name] = value
    kwargs.update(given)  # names the signature does not list go to **kwargs
    return args, kwargs


def _source(path: str, source: str | None) -> SourceText:
    if source is None:
        source = "".join(linecache.getlines(path))
    return SourceText(source)


def _has_names(inputs: Sequence[shapes.ExampleInput]) -> bool:
    """Whether an input names a dimension (a tensor's, or one inside a value's)."""
    tensors = (inp.dims for inp in inputs if inp.kind == "tensor")
    inner = (dims for inp in inputs for dims in inp.inner_dims or [])
    return any(n for dims in [*tensors, *inner] for n, _ in dims)


def _cpu_faker(fake_mode: Any) -> Callable[..., torch.Tensor]:
    """``to_fake`` of :func:`shapes.named_fake` for a fake run: fake CPU tensors (symbolic
    sizes from a meta fake's shape and strides)."""

    def make(base: torch.Tensor, ctx: Any = None) -> torch.Tensor:
        if ctx is None:
            with fake_mode:
                return torch.empty(base.shape, dtype=base.dtype, device="cpu")
        meta_fake = fake_mode.from_tensor(base, symbolic_context=ctx)
        with fake_mode:
            return torch.empty_strided(
                meta_fake.shape, meta_fake.stride(), dtype=base.dtype, device="cpu"
            )

    return make


def fake_run(
    module: torch.nn.Module,
    inputs: Sequence[Any],
    path: str,
    *,
    symbolic: bool = True,
    leaf_classes: Iterable[str] = (),
    source: str | None = None,
    hooks: Hooks | None = None,
) -> FakeRun:
    """Run ``module`` on fake tensors and record what ran into an FX graph.

    Args:
        module: the module, built on the meta device (or on the CPU).
        inputs: one :class:`~fxls.worker.capture.shapes.propagation.ExampleInput` per ``forward`` argument (any
            object with ``name``, ``kind``, ``dims``, ``dtype`` and ``value``). Named dims stay
            symbolic; give each name its own example size of at least 2.
        path: the document's filename (``co_filename`` of its code); spans come from its frames.
        symbolic: keep named dims symbolic; False uses static fake tensors.
        leaf_classes: names of user classes recorded as one ``call_module`` node.
        source: the document text; read from ``linecache`` when omitted.
        hooks: what watches the run (:class:`Hooks`).

    Returns:
        A :class:`FakeRun`. When ``forward`` raises, ``error`` is set and the graph has the nodes
        recorded before the failure (and no output node).

    Example:
        >>> run = fake_run(model, [ExampleInput("x", "tensor", [("B", 2), (None, 16)])], path)
        >>> run.values["fc"][0].shape
        ['B', 10]
    """
    from torch.fx.experimental.symbolic_shapes import (
        ShapeEnv,
    )

    spans = _Spans(path, _source(path, source))
    spans.root_codes = method_codes(type(module), path)
    recorder = _Recorder(spans, list(leaf_classes))
    recorder.root = module
    recorder.watch = hooks.watch if hooks is not None else None
    recorder.branches = branches = hooks.branches if hooks is not None else None
    if branches is not None:
        branches.start()
    use_symbols = symbolic and _has_names(inputs)
    shape_env = ShapeEnv() if use_symbols else None
    fake_mode = shapes.new_fake_mode(shape_env)
    names: dict[Any, str] = {}
    error: BaseException | None = None
    error_span: Span | None = None
    swap = _Swap(module, fake_mode, recorder)

    with shapes.quiet_loggers(), shapes.data_free_torch(), warnings.catch_warnings():
        # symbolic sizes computed in Python (B * T) stay constants of the graph on purpose
        warnings.filterwarnings("ignore", message="Raw SymInt value")
        try:
            to_cpu = _cpu_faker(fake_mode)

            def fake_of(dims: list[tuple[str | None, int]], dtype: torch.dtype) -> Any:
                return shapes.named_fake(dims, dtype, to_cpu, shape_env, (names, None))

            feeds: list[tuple[str, Any]] = []
            for inp in inputs:
                if inp.kind != "tensor":
                    value = shapes.map_named_tensors(inp.value, inp.inner_dims, fake_of, swap.fake)
                    feeds.append((inp.name, value))
                else:
                    feeds.append((inp.name, fake_of(inp.dims, inp.dtype)))
            recorder.namer = Namer(names)
            for name, value in feeds:
                recorder.placeholder(name, value)
            args, kwargs = _call_arguments(module, feeds)
            with (
                module_state.kept(module.modules()),  # what forward assigns (tensors too)
                swap,
                fake_mode,
                torch.no_grad(),
                _patched_module_call(recorder),
                _Mode(recorder),
            ):
                out = module(*args, **kwargs)
            recorder.output(out)
        except Enough:
            pass
        except BaseException as exc:  # user code may raise anything
            if isinstance(exc, (KeyboardInterrupt, cpulimit.OutOfCpu)):
                raise
            error = exc
            error_span = spans.of_traceback(exc)

    specialized, guards = _specialized(shape_env, names, inputs) if shape_env else ({}, [])
    gm = _graph_module(recorder, module)
    return FakeRun(
        graph_module=gm,
        spans=recorder.node_spans,
        examples=recorder.examples,
        error=error,
        error_span=error_span,
        error_target=recorder.failed if error is not None else None,
        values=recorder.values,
        names=names,
        mode="symbolic" if use_symbols else "fake",
        specialized=specialized,
        guards=guards,
        decided=[(d, d.tensor) for d in branches.used] if branches is not None else [],
        asked=list(branches.asked) if branches is not None else [],
    )


def _specialized(
    shape_env: Any, names: dict[Any, str], feeds: Sequence[Any]
) -> tuple[dict[str, int], list[Any]]:
    """The named dimensions the run fixed (name -> example size): replaced by a number, or
    in an expression the run required to equal a number (``sizes.pinned``); and those
    expressions (:attr:`FakeRun.guards`)."""
    example = {n: size for f in feeds if f.kind == "tensor" for n, size in f.dims if n}
    out: dict[str, int] = {}
    for sym, name in names.items():
        value = shape_env.replacements.get(sym)
        if value is not None and getattr(value, "is_number", False):
            out[name] = int(value)
    guarded = []
    for found, expr in sizes.pinned(shape_env.guards, names):
        if all(name in example for name in found):
            guarded.append(expr)
            for name in found:
                out.setdefault(name, example[name])
    return out, guarded


def fixed_sizes(run: FakeRun, inputs: Sequence[Any]) -> dict[str, int]:
    """The named dimensions whose sizes the run's numbers may stand for: those it fixed to
    their example size, or every named one for a run at static sizes (name -> size)."""
    if run.mode == "symbolic":
        return dict(run.specialized)
    return {name: size for inp in inputs if inp.kind == "tensor" for name, size in inp.dims if name}


def generalize(
    run: FakeRun, inputs: Sequence[Any], again: Callable[[list[Any]], FakeRun] | None
) -> sizes.Generalized:
    """``run``'s values with the dimensions that follow its fixed names written in them
    (:func:`fixed_sizes`; :mod:`~fxls.worker.capture.shapes.sizes`): ``again(inputs)`` runs
    ``forward`` the same way with other example sizes, and a node of that run is compared
    with the node of the same name when both call the same target. Without ``again`` (a run
    too long to repeat), every number that may stand for a fixed name is listed as holding
    for the example sizes only."""
    made = _identities(run)

    def rerun(wanted: dict[str, int]) -> sizes.Rerun:
        if again is None:
            return sizes.Rerun(wanted, error=NOT_AGAIN)
        resized = [sizes.resized(inp, wanted) for inp in inputs]
        try:
            other = again(resized)
        except Exception as exc:  # user code may raise anything
            return sizes.Rerun(wanted, error=type(exc).__name__)
        theirs = _identities(other)
        same = {
            name: values
            for name, values in other.values.items()
            if made.get(name) is not None and theirs.get(name) == made[name]
        }
        error = other.error_target or (type(other.error).__name__ if other.error else None)
        return sizes.Rerun(wanted, same, error)

    fixed = fixed_sizes(run, inputs)
    step = sizes.telling_step(run.guards, run.names, fixed)
    return sizes.generalize(run.values, fixed, rerun, first_step=step)


NOT_AGAIN = "not computed again"
"""``Rerun.error`` of a run that was not made (:func:`generalize` without ``again``)."""


def _identities(run: FakeRun) -> dict[str, tuple[str, str]]:
    gm = run.graph_module
    if gm is None:
        return {}
    return {node.name: (node.op, str(node.target)) for node in gm.graph.nodes}


def meta_outputs(
    module: torch.nn.Module,
    inputs: Sequence[Any],
    within: contextlib.AbstractContextManager[None] | None = None,
) -> list[Value] | None:
    """What ``module(*inputs)`` returns, run on meta tensors at static sizes without recording.

    For a module built on the meta device: its parameters and buffers are used as they are,
    the inputs are new meta tensors of the example sizes, and torch's factory functions
    default to the meta device while ``forward`` runs (as :func:`shapes.propagate` runs a
    traced graph at static sizes). About a fifth of the cost of :func:`fake_run` on a
    transformer block, since nothing is recorded and no fake tensors are made. What the
    run assigns to the module (tensors, settings) is put back afterwards. ``within``: a
    context the call runs in (:func:`keptruns.answering` for the submodules kept whole).

    Returns:
        The output values, or None when ``forward`` raised (code that needs data, or a tensor
        on another device): :func:`fake_run` then answers instead.
    """
    args, kwargs = _call_arguments(module, list(shapes.meta_feeds(inputs).items()))
    try:
        with (
            module_state.kept(module.modules()),
            shapes.quiet_loggers(),
            shapes.data_free_torch(),
            warnings.catch_warnings(),
            torch.device("meta"),
            torch.no_grad(),
            shortcuts.builtin_shortcuts(),
            shortcuts.Shortcuts(),
            within or contextlib.nullcontext(),
        ):
            out = module(*args, **kwargs)
    except BaseException as exc:  # user code may raise anything
        if isinstance(exc, (KeyboardInterrupt, cpulimit.OutOfCpu)):
            raise
        return None
    try:
        return shapes.values_of(out)
    except Exception:  # rendering is best effort, as in a recorded run
        return []


def _graph_module(recorder: _Recorder, module: torch.nn.Module) -> torch.fx.GraphModule | None:
    root: dict[str, Any] = {}
    # shorter names first, so a module is assigned before attributes inside it
    for name in sorted(recorder.owners, key=lambda n: n.count(".")):
        root[name] = recorder.owners[name]
    class_name = type(module).__name__
    try:
        return torch.fx.GraphModule(root, recorder.graph, class_name)
    except Exception:  # code generation failed on an odd constant
        pass
    try:
        gm = torch.fx.GraphModule(root, torch.fx.Graph(), class_name)
    except Exception:
        return None
    gm._graph = recorder.graph  # the recorded graph, without generated code for it
    return gm
