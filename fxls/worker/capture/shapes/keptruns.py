"""Runs of a submodule kept whole, shared by the class captures of one job.

transformers' head models each keep the same base model whole (``GPT2Model`` in the five heads
of ``modeling_gpt2.py``, ``BertModel`` in the eight of ``modeling_bert.py``) and run its
``forward`` on fake tensors in their own propagation: 60–70 ms each for GPT-2, the same
operators on the same sizes. :class:`KeptRuns` keeps the output of such a run; a later call
of a module with the same configuration, on inputs with the same metadata, in a ``ShapeEnv``
that knows nothing more about their sizes than their ranges and examples, takes new fake
tensors of the same sizes, strides and dtypes (in its own fake mode) in a copy of that output
instead of running ``forward`` again.

Exact or not at all. A call is answered only when

- the module has a configuration (the ``configured`` function given: its class, submodule
  tree, parameter and buffer metadata and plain attributes, with its configuration objects
  apart, the module itself the first of them: its public attributes are compared by the
  reads of the run), and every attribute of a configuration object that the kept run read
  (or failed to read) has the same value (or is missing) in this module's: the heads of one
  file build their base model from configurations that differ in what the base model never
  reads (``id2label``, ``pad_token_id``); a run that copies such an object
  (``copy.deepcopy``) read every attribute it holds;
- every argument (bound to ``forward``'s parameters, defaults filled in) is a fake tensor, a
  plain value or a tuple, list or dict of them; the symbolic sizes of the tensors are
  compared as expressions of their symbols, numbered in the order the arguments show them,
  with each symbol's range and example;
- no guard, replacement or deferred assertion of the ``ShapeEnv`` mentions those symbols
  (but a guard its replacements make true: two symbols made one are one canonical symbol);

and a run is kept only when it added nothing to its ``ShapeEnv`` but guards on the
arguments' sizes (no replacement, deferred assertion or new symbol; a later call's
``ShapeEnv`` is asked those guards again, as the run asked them, and must then know the same
ranges), and its output holds only fake tensors of its mode (none of them an argument, no
size but of the arguments' symbols) inside tuples, lists, dicts and plain objects
(``ModelOutput``, a ``DynamicCache``), which are copied; where the output holds the module's
configuration object, the copy holds the later caller's own.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import inspect
import types
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torch.fx.immutable_collections import immutable_dict, immutable_list

if TYPE_CHECKING:  # imported when a job runs (the meta run of a preview never loads sympy)
    import sympy

KEPT_RUNS_ENV = "FXLS_KEPT_RUNS"
"""Set to ``0`` to run every call of a submodule kept whole."""

MISSING: Any = object()
"""What :meth:`KeptRuns.recall` gives for a call it cannot answer."""

MAX_DEPTH = 8
MAX_ITEMS = 10_000
"""Most objects one output may hold to be kept (a cache of 48 layers holds ~150)."""


class _NotKept(Exception):
    pass


_ATOMS = (
    type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device, torch.layout,
    torch.memory_format,
)  # fmt: skip


_SEQUENCES = (tuple, list, immutable_list)
_MAPPINGS = (dict, immutable_dict)
"""Containers of arguments (FX hands a node's ``args`` and ``kwargs`` on as immutable ones)."""


@dataclass(frozen=True)
class Call:
    """What decides the output of one call: :meth:`KeptRuns.key` made it."""

    key: Any
    objects: list[Any]
    """The module's configuration objects (``configured``'s order)."""
    symbols: tuple[Any, ...]
    """The ``ShapeEnv``'s symbols in the order of the canonical ones (``k0``, ``k1``…)."""
    sizes: dict[Any, torch.SymInt]
    """A ``SymInt`` of the arguments for each of their symbols."""
    tensors: tuple[torch.Tensor, ...]
    """The tensor arguments in the order the description met them."""
    shape_env: Any
    mode: Any


_ABSENT: Any = object()
"""A configuration attribute the run failed to read."""

_WHOLE_READS = frozenset(
    {"__reduce_ex__", "__reduce__", "__getstate__", "__copy__", "__deepcopy__"}
)
"""What ``copy.copy``, ``copy.deepcopy`` and ``pickle`` read of an object they copy with its
state: a run that copies a configuration (transformers' ``get_text_config`` deep-copies it
for each ``DynamicCache`` a T5 decoder makes) read every attribute the object holds, not a
bound method (a new object at each read, which no later call's would equal)."""


def _recording(
    watched: dict[int, int], reads: dict[tuple[int, str], Any], original: Callable[[Any, str], Any]
) -> Callable[[Any, str], Any]:
    """A ``__getattribute__`` for a class of a call's objects (:meth:`KeptRuns.reading`):
    ``original``'s answer, each read of a ``watched`` object recorded into ``reads`` (its
    first value, ``_ABSENT`` for a failed read; every attribute for a read that copies it)."""

    def recording(obj: Any, name: str) -> Any:
        at = watched.get(id(obj))
        if at is None:
            return original(obj, name)
        if issubclass(type(obj), torch.nn.Module) and not _compared(obj, name, original):
            return original(obj, name)
        try:
            value = original(obj, name)
        except AttributeError:
            reads.setdefault((at, name), _ABSENT)
            raise
        if name in _WHOLE_READS:
            for attribute, item in _instance_state(obj, original).items():
                reads.setdefault((at, attribute), item)
        else:
            reads.setdefault((at, name), value)
        return value

    return recording


def _compared(module: torch.nn.Module, name: str, getattribute: Callable[[Any, str], Any]) -> bool:
    """Whether a read of ``name`` of a module among a call's objects (the called module
    itself: ``configured`` leaves its public attributes out of its description) is compared:
    a public attribute, or a public name it does not have (not its submodules, parameters
    and buffers, which the description holds, nor its private state)."""
    if name.startswith("_"):
        return False
    if name in getattribute(module, "__dict__"):
        return True
    return not any(name in getattribute(module, store) for store in _MODULE_STORES)


_MODULE_STORES = ("_modules", "_parameters", "_buffers")


def _instance_state(obj: Any, getattribute: Callable[[Any, str], Any]) -> dict[str, Any]:
    """The attributes ``obj`` holds itself (its ``__dict__``; empty when it has none)."""
    try:
        state = getattribute(obj, "__dict__")
    except AttributeError:
        return {}
    return dict(state) if isinstance(state, dict) else {}


@dataclass
class _Stored:
    output: Any
    made: dict[int, tuple[Any, ...]]
    """``id`` of each tensor of ``output`` -> (sizes, strides, dtype, device, requires_grad),
    sizes and strides in the canonical symbols."""
    reads: tuple[tuple[int, str, Any], ...]
    """(configuration object, attribute, described value) of each attribute the run read."""
    learned: tuple[Any, ...] = ()
    """The guards the run added, on the arguments' symbols (canonical): BERT's position
    embeddings make ``T <= 512``."""
    ranges: tuple[str, ...] = ()
    """The arguments' symbols' ranges after the run (canonical order)."""
    objects: list[Any] = field(default_factory=list)
    """The configuration objects of the call that made it: an output that holds one of them
    holds the later call's own in its copy."""
    calls: list[tuple[type, str, Any, Any]] | None = None
    """The calls inside the module the watch of the run recorded (class, path inside the
    module, arguments, keyword arguments), copied with the output; None when there was no
    watch or they hold what a copy could not make."""
    arguments: dict[int, int] = field(default_factory=dict)
    """``id`` of each tensor argument of the run ``calls`` hold -> its place in
    ``Call.tensors``."""
    calls_made: dict[int, tuple[Any, ...]] = field(default_factory=dict)
    """As ``made``, for the tensors the run made that only ``calls`` hold (made again only
    for a copy that hands them on)."""


class KeptRuns:
    """The outputs of runs of submodules kept whole (one job's classes share it)."""

    def __init__(
        self,
        configured: Callable[[torch.nn.Module], tuple[Any, list[Any]] | None],
        describe: Callable[[Any, Callable[[Any], Any]], Any],
    ) -> None:
        """``configured(module)``: the module's configuration and its configuration objects
        (None: it has none that can be said); ``describe(value, known)``: a hashable
        description of a plain value, equal for values that behave alike, with the objects
        ``known`` describes (not None) described so (raises for anything else)."""
        self._configured = configured
        self._describe = describe
        self._configurations: dict[int, tuple[torch.nn.Module, Any]] = {}
        self._stored: dict[Any, list[_Stored]] = {}
        self._signatures: dict[type, Any] = {}
        self.watch: Callable[[torch.nn.Module], contextlib.AbstractContextManager[Any]] | None = (
            None
        )
        """While one class's propagation runs: what each run of a submodule kept whole runs
        in (the class's capture records the calls of the classes it watches inside it)."""
        self.replay: Callable[[torch.nn.Module, list[tuple[type, str, Any, Any]]], None] | None = (
            None
        )
        """Set with ``watch``: given the calls the watch of a kept run recorded inside its
        module, copied in the later call's terms, when that call is answered without running
        ``forward``."""

    def key(
        self, module: torch.nn.Module, args: Any, kwargs: Any, shape_env: Any, mode: Any
    ) -> Call | None:
        """What decides the output of ``module(*args, **kwargs)`` in ``shape_env``; None when
        it cannot be said (see the module's docstring). A run at static sizes has no
        ``shape_env``; a run on meta tensors has no ``mode`` either. Never raises: what the
        user's objects do when described only means the module runs."""
        try:
            return self._key(module, args, kwargs, shape_env, mode)
        except Exception:
            return None

    def _key(
        self, module: torch.nn.Module, args: Any, kwargs: Any, shape_env: Any, mode: Any
    ) -> Call | None:
        configured = self.configuration(module)
        if configured is None:
            return None
        configuration, objects = configured
        reader = _Reader(mode)
        try:
            described = reader.described(self._bound(module, args, kwargs))
            facts = _facts(shape_env, reader.canon) if shape_env is not None else ()
        except _NotKept:
            return None
        if facts is None or (shape_env is None and reader.canon):
            return None
        run = (mode is not None, shape_env is not None)  # fake or meta, symbolic or static
        key = (type(module), configuration, described, facts, run)
        try:
            hash(key)
        except TypeError:
            return None
        symbols = tuple(reader.canon)
        return Call(key, objects, symbols, reader.sizes, tuple(reader.inputs), shape_env, mode)

    def configuration(self, module: torch.nn.Module) -> tuple[Any, list[Any]] | None:
        """``module``'s configuration and configuration objects, worked out once per instance
        (None when it has none that can be said)."""
        known = self._configurations.get(id(module))
        if known is None or known[0] is not module:
            known = (module, self._configured(module))
            self._configurations[id(module)] = known
        return known[1]

    def _bound(self, module: torch.nn.Module, args: Any, kwargs: Any) -> Any:
        """The call's arguments by ``forward`` parameter, defaults filled in: the heads of a
        file pass their base model different keywords left at their defaults."""
        kind = type(module)
        signature = self._signatures.get(kind, MISSING)
        if signature is MISSING:
            try:
                signature = inspect.signature(module.forward)
            except (TypeError, ValueError):
                signature = None
            self._signatures[kind] = signature
        if signature is None:
            return (args, kwargs)
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError:
            return (args, kwargs)
        bound.apply_defaults()
        return dict(bound.arguments)

    def through(
        self,
        call: Call | None,
        run: Callable[[], Any],
        module: torch.nn.Module | None = None,
        seen: list[tuple[type, str, Any, Any]] | None = None,
    ) -> Any:
        """The output of ``call``: a copy of a kept run's, else what ``run()`` returns (kept
        for later calls when it may be). ``call`` None (:meth:`key` could not say): ``run()``.
        ``seen`` fills, while ``run()`` runs, with the calls inside ``module`` that ``watch``
        records (kept with the output); a copy hands its own to ``replay``."""
        if call is None:
            return run()
        replay = self.replay if module is not None else None
        out = self.recall(call, want_calls=replay is not None)
        if out is not MISSING:
            if replay is None:
                return out
            out, calls = out
            if calls is not None and module is not None:
                replay(module, calls)
            return out
        before = self.state(call)
        with self.reading(call) as reads:
            out = run()
        self.keep(call, before, reads, out, seen)
        return out

    def recall(self, call: Call, want_calls: bool = False) -> Any:
        """The output of a kept run of ``call`` made again in its fake mode, or
        :data:`MISSING`; with ``want_calls``, the pair (output, the run's first calls inside
        the module made again as well, or None)."""
        stored = next((s for s in self._stored.get(call.key, ()) if self._reads(s, call)), None)
        if stored is None:
            return MISSING
        back = {canonical: symbol for symbol, canonical in zip(call.symbols, _canonical(call))}
        if stored.learned and not self._learn(stored, call, back):
            return MISSING
        memo: dict[int, Any] = {id(a): b for a, b in zip(stored.objects, call.objects)}
        made: set[int] = set()
        calls = stored.calls if want_calls else None
        kept = stored.made
        if calls is not None:  # the arguments the calls hold are this call's (same places)
            for ident, at in stored.arguments.items():
                memo[ident] = call.tensors[at]
                made.add(id(call.tensors[at]))
            kept = {**kept, **stored.calls_made}
        try:
            for ident, (size, stride, dtype, device, grad) in kept.items():
                tensor = torch.empty_strided(
                    [_size(s, back, call) for s in size],
                    [_size(s, back, call) for s in stride],
                    dtype=dtype,
                    device=device,
                    requires_grad=grad,
                )
                memo[ident] = tensor
                made.add(id(tensor))
            output, calls = copy.deepcopy((stored.output, calls), memo)
            walk = _Walk({id(o) for o in call.objects})
            _tensors((output, calls), walk, 0)
            found = walk.found
        except Exception:  # an object that cannot be copied: the module runs
            return MISSING
        if set(found) - made:  # a tensor the copy did not take from ``memo``
            return MISSING
        return (output, calls) if want_calls else output

    def _learn(self, stored: _Stored, call: Call, back: dict[sympy.Symbol, Any]) -> bool:
        """Make ``call``'s ``ShapeEnv`` learn what the kept run's learned, as the run would
        (each guard asked as a condition: ``bool`` of it); whether it then knows the same of
        the arguments' sizes (else the module runs: what it learned holds for the run)."""
        env = call.shape_env
        start = self.state(call)
        try:
            for expr in stored.learned:
                if not bool(env.create_symboolnode(expr.xreplace(back))):
                    return False
        except Exception:
            return False
        now = self.state(call)
        return _changes(start, now) == (len(stored.learned), stored.ranges)

    def _reads(self, stored: _Stored, call: Call) -> bool:
        """Whether ``call``'s configuration objects give what the kept run read."""
        known = _known(call.objects)
        for at, name, value in stored.reads:
            try:
                now = getattr(call.objects[at], name, _ABSENT)
                if (now is _ABSENT) != (value is _ABSENT):
                    return False
                if now is not _ABSENT and self._describe(now, known) != value:
                    return False
            except Exception:
                return False
        return True

    @contextlib.contextmanager
    def reading(self, call: Call) -> Iterator[dict[tuple[int, str], Any] | None]:
        """While it lasts, the attributes read of ``call``'s configuration objects (the first
        value read, or ``_ABSENT`` for a failed read), by (object, attribute); None when
        their classes cannot be watched (the run is then not kept)."""
        reads: dict[tuple[int, str], Any] = {}
        watched = {id(o): at for at, o in enumerate(call.objects)}
        patched: list[tuple[type, bool, Any]] = []
        for kind in dict.fromkeys(type(o) for o in call.objects):
            original: Any = kind.__getattribute__
            recording = _recording(watched, reads, original)
            own = "__getattribute__" in vars(kind)
            try:
                setattr(kind, "__getattribute__", recording)  # noqa: B010 (a method of the class)
            except Exception:  # a class that takes no new attribute (its metaclass refuses)
                watched.clear()
                break
            patched.append((kind, own, original))
        try:
            yield reads if watched or not call.objects else None
        finally:
            for kind, own, original in reversed(patched):
                if own:
                    kind.__getattribute__ = original
                else:
                    del kind.__getattribute__

    def state(self, call: Call) -> Any:
        """What a run may change in the ``ShapeEnv`` for its output to be kept (guards on
        the arguments' sizes, which narrow their ranges: :func:`_changes`)."""
        env = call.shape_env
        if env is None:
            return ()
        return (
            len(env.guards),
            len(env.replacements),
            sum(len(v) for v in env.deferred_runtime_asserts.values()),
            len(env.var_to_range),
            len(_examples(env)),
            tuple(str(env.var_to_range.get(s)) for s in call.symbols),
            len(env.divisible),
        )

    def keep(
        self,
        call: Call,
        before: Any,
        reads: dict[tuple[int, str], Any] | None,
        output: Any,
        calls: list[tuple[type, str, Any, Any]] | None = None,
    ) -> None:
        """Keep ``output`` of the run of ``call`` when the run changed nothing in its
        ``ShapeEnv`` (``before``: :meth:`state` when it started) but guards on the arguments'
        sizes, and its output can be made again; ``reads``: what it read of the
        configuration objects (:meth:`reading`); ``calls``: the first call of each class
        inside the module (kept with it when they can be made again too). Never raises."""
        if reads is None:
            return
        try:
            stored = self._kept(call, before, reads, output)
        except Exception:  # what the user's objects do when described: not kept
            return
        if stored is None:
            return
        if calls is not None:
            with contextlib.suppress(Exception):  # kept without them
                self._keep_calls(call, stored, calls)
        self._stored.setdefault(call.key, []).append(stored)

    def _keep_calls(
        self, call: Call, stored: _Stored, calls: list[tuple[type, str, Any, Any]]
    ) -> None:
        """``calls`` into ``stored`` when every tensor they hold is an argument of ``call``
        or one the run made that a copy can make again."""
        canon = dict(zip(call.symbols, _canonical(call)))
        walk = _Walk({id(o) for o in call.objects})
        try:
            _tensors(calls, walk, 0)
            places = {id(t): at for at, t in enumerate(call.tensors)}
            made = {}
            for ident, tensor in walk.found.items():
                if ident not in places and ident not in stored.made:
                    made[ident] = _made(tensor, call, canon)
        except _NotKept:
            return
        stored.calls_made = made
        stored.arguments = {i: places[i] for i in walk.found if i in places}
        stored.calls = calls

    def _kept(
        self, call: Call, before: Any, reads: dict[tuple[int, str], Any], output: Any
    ) -> _Stored | None:
        after = self.state(call)
        changes = _changes(before, after)
        if changes is None:
            return None
        env = call.shape_env
        canon = dict(zip(call.symbols, _canonical(call)))
        learned = tuple(g.expr for g in env.guards[before[0] : after[0]]) if env else ()
        if any(not expr.free_symbols <= set(canon) for expr in learned):
            return None
        learned = tuple(expr.xreplace(canon) for expr in learned)
        known = _known(call.objects)
        try:
            read = tuple(
                (at, name, value if value is _ABSENT else self._describe(value, known))
                for (at, name), value in reads.items()
            )
        except Exception:  # a method of the configuration, an object: not kept
            return None
        walk = _Walk({id(o) for o in call.objects})
        try:
            _tensors(output, walk, 0)
            made = {}
            inputs = {id(t) for t in call.tensors}
            for ident, tensor in walk.found.items():
                if ident in inputs:
                    return None
                made[ident] = _made(tensor, call, canon)
        except _NotKept:
            return None
        return _Stored(output, made, read, learned, changes[1], list(call.objects))


@contextlib.contextmanager
def answering(runs: KeptRuns, modules: Iterable[torch.nn.Module]) -> Iterator[None]:
    """While it lasts, a call of ``forward`` of one of ``modules`` on meta tensors at static
    sizes is answered by ``runs`` (:meth:`KeptRuns.through`): an attribute ``forward`` of the
    instance, in front of its class's, keyed by the arguments ``forward`` gets (after any
    pre-hook). The eager side of a comparison runs a head's ``forward`` in which the base
    model it keeps whole is called as in every other head. The instance's configuration is
    worked out before (it holds its attributes); one that has a ``forward`` of its own is
    left alone."""
    placed: list[torch.nn.Module] = []
    try:
        for module in dict.fromkeys(modules):
            if "forward" not in vars(module):
                with contextlib.suppress(Exception):  # what the user's objects do: runs
                    runs.configuration(module)
                vars(module)["forward"] = _answered(runs, module, module.forward)
                placed.append(module)
        yield
    finally:
        for module in placed:
            vars(module).pop("forward", None)


def _answered(runs: KeptRuns, module: torch.nn.Module, forward: Callable[..., Any]) -> Any:
    @functools.wraps(forward)  # its signature binds the arguments of the key
    def answered(*args: Any, **kwargs: Any) -> Any:
        call = runs.key(module, args, kwargs, None, None)
        return runs.through(call, lambda: forward(*args, **kwargs))

    return answered


def _made(tensor: torch.Tensor, call: Call, canon: dict[Any, sympy.Symbol]) -> tuple[Any, ...]:
    """What makes ``tensor`` (a tensor a run of ``call`` made) again: sizes and strides in
    the canonical symbols, dtype, device, ``requires_grad``; ``_NotKept`` for another mode's
    tensor or a view into another tensor's storage."""
    if not _of_the_run(tensor, call.mode) or not _same(tensor.storage_offset(), 0):
        raise _NotKept("not a whole tensor of the run")
    return (
        tuple(_kept_size(s, canon) for s in tensor.shape),
        tuple(_kept_size(s, canon) for s in tensor.stride()),
        tensor.dtype,
        tensor.device,
        tensor.requires_grad,
    )


def _changes(before: Any, after: Any) -> tuple[int, tuple[str, ...]] | None:
    """Between two :meth:`KeptRuns.state`: the number of guards added and the arguments'
    symbols' ranges after; None when anything else changed (a replacement, a deferred
    assertion, a new symbol or range, a divisibility)."""
    if not before:  # no ShapeEnv: nothing to learn
        return 0, ()
    if after[1:5] != before[1:5] or after[6] != before[6] or after[0] < before[0]:
        return None
    return after[0] - before[0], after[5]


def _known(objects: list[Any]) -> Callable[[Any], Any]:
    """Descriptions of a call's configuration objects by their place, and of their bound
    methods by place and function: what those read of the object is recorded as it is read
    (a configuration's ``get_text_config()``, a view of it that a property makes)."""
    places = {id(o): at for at, o in enumerate(objects)}

    def known(obj: Any) -> Any:
        at = places.get(id(obj))
        if at is not None:
            return ("configuration", at)
        if isinstance(obj, types.MethodType) and id(obj.__self__) in places:
            return ("method", places[id(obj.__self__)], obj.__func__)
        return None

    return known


def _canonical(call: Call) -> list[sympy.Symbol]:
    import sympy

    return [sympy.Symbol(f"k{i}", integer=True) for i in range(len(call.symbols))]


def _examples(env: Any) -> dict[Any, Any]:
    examples = getattr(env, "backed_var_to_val", None)
    return examples if examples is not None else env.var_to_val  # type: ignore[no-any-return]


def _of_the_run(tensor: torch.Tensor, mode: Any) -> bool:
    """A fake tensor of ``mode``, or without a mode a meta tensor (a run on meta tensors)."""
    if getattr(tensor, "fake_mode", None) is not mode:
        return False
    return mode is not None or (tensor.device.type == "meta" and type(tensor) is torch.Tensor)


def _same(value: Any, number: int) -> bool:
    return not isinstance(value, torch.SymInt) and value == number


class _Reader:
    """Describes a call's arguments: tensors by metadata, their sizes in canonical symbols
    (``k0``, ``k1``… in the order the arguments show them)."""

    def __init__(self, mode: Any) -> None:
        self.mode = mode
        self.canon: dict[Any, sympy.Symbol] = {}
        self.sizes: dict[Any, torch.SymInt] = {}
        """A ``SymInt`` of the arguments for each of their symbols."""
        self.inputs: list[torch.Tensor] = []
        """Each tensor argument, in the order met."""

    def size(self, value: Any) -> Any:
        """A size in the canonical symbols, adding its new symbols (by name, for an order
        the same in every ``ShapeEnv`` that numbers its symbols alike)."""
        import sympy

        if not isinstance(value, torch.SymInt):
            if isinstance(value, (torch.SymFloat, torch.SymBool)):
                raise _NotKept("a symbolic float or bool")
            return value
        expr = value.node.expr
        for symbol in sorted(expr.free_symbols, key=str):
            if symbol not in self.canon:
                self.canon[symbol] = sympy.Symbol(f"k{len(self.canon)}", integer=True)
        if expr.is_Symbol:
            self.sizes.setdefault(expr, value)
        return ("sym", expr.xreplace(self.canon))

    def described(self, obj: Any, depth: int = 0) -> Any:
        """A hashable description of an argument; ``_NotKept`` for anything but fake tensors
        of the run, plain values and tuples, lists and dicts of them."""
        if isinstance(obj, torch.Tensor):
            if not _of_the_run(obj, self.mode) or obj.layout != torch.strided:
                raise _NotKept("not a tensor of the run")
            self.inputs.append(obj)
            return (
                "T",
                obj.dtype,
                obj.device,
                obj.requires_grad,
                tuple(self.size(d) for d in obj.shape),
                tuple(self.size(d) for d in obj.stride()),
                self.size(obj.storage_offset()),
            )
        if isinstance(obj, _ATOMS):
            return (type(obj).__name__, obj if not isinstance(obj, torch.dtype) else str(obj))
        if isinstance(obj, torch.SymInt):
            return self.size(obj)
        if depth > MAX_DEPTH:
            raise _NotKept("too deep")
        if type(obj) in _SEQUENCES:
            return (type(obj).__name__, tuple(self.described(v, depth + 1) for v in obj))
        if type(obj) in _MAPPINGS:
            return ("dict", tuple((k, self.described(v, depth + 1)) for k, v in obj.items()))
        raise _NotKept(type(obj).__name__)


def _facts(shape_env: Any, canon: dict[Any, sympy.Symbol]) -> Any:
    """Each symbol's range and example, in canonical order; None when a guard, replacement
    or deferred assertion says more of one of them."""
    if not canon:
        return ()
    symbols = set(canon)
    if symbols & set(shape_env.replacements):
        return None
    for guard in shape_env.guards:
        if symbols & guard.expr.free_symbols and not _explained(shape_env, guard.expr):
            return None
    for asserts in shape_env.deferred_runtime_asserts.values():
        for ra in asserts:
            if symbols & ra.expr.free_symbols:
                return None
    for divisible in shape_env.divisible:
        if symbols & divisible.free_symbols:
            return None
    examples = _examples(shape_env)
    return tuple((str(shape_env.var_to_range.get(s)), examples.get(s)) for s in canon)


def _explained(shape_env: Any, expr: Any) -> bool:
    """Whether ``expr`` holds by the ``ShapeEnv``'s replacements alone: ``Eq(s93, s26)`` once
    ``s93`` is replaced by ``s26`` (an encoder's batch and a decoder's, the same dimension),
    which the arguments' description already says (both sizes are one canonical symbol)."""
    import sympy

    try:
        return bool(shape_env.replace(expr) == sympy.true)
    except Exception:  # an expression replacement cannot simplify
        return False


def _kept_size(value: Any, canon: dict[Any, sympy.Symbol]) -> Any:
    if not isinstance(value, torch.SymInt):
        return value
    expr = value.node.expr
    if not expr.free_symbols <= set(canon):
        raise _NotKept("a size of a symbol the arguments do not have")
    return expr.xreplace(canon)


def _size(kept: Any, back: dict[sympy.Symbol, Any], call: Call) -> Any:
    """A kept size in ``call``'s ``ShapeEnv``: the argument's own ``SymInt`` for a symbol,
    a new one for an expression."""
    import sympy

    if not isinstance(kept, sympy.Expr):
        return kept
    expr = kept.xreplace(back)
    if expr.is_Symbol and expr in call.sizes:
        return call.sizes[expr]
    if expr.is_Integer:
        return int(expr)
    examples = _examples(call.shape_env)
    hint = expr.xreplace({s: examples[s] for s in expr.free_symbols})
    return call.shape_env.create_symintnode(expr, hint=int(hint))


@dataclass
class _Walk:
    """A walk through an output: the configuration objects it passes over (a copy takes the
    later call's own), the tensors found by ``id``, the objects seen."""

    configurations: set[int]
    found: dict[int, torch.Tensor] = field(default_factory=dict)
    seen: int = 0


def _tensors(obj: Any, walk: _Walk, depth: int) -> None:
    """Every tensor inside an output, into ``walk.found``; ``_NotKept`` for anything a copy
    of it could not be trusted to hold only copies of them."""
    walk.seen += 1
    if walk.seen > MAX_ITEMS or depth > MAX_DEPTH:
        raise _NotKept("too large")
    if isinstance(obj, torch.Tensor):
        walk.found[id(obj)] = obj
        return
    if isinstance(obj, (*_ATOMS, type, types.FunctionType)) or id(obj) in walk.configurations:
        return
    if isinstance(obj, (torch.nn.Module, torch.SymInt, torch.SymFloat, torch.SymBool)):
        raise _NotKept(type(obj).__name__)
    for value in _inside(obj):
        _tensors(value, walk, depth + 1)


def _inside(obj: Any) -> Iterable[Any]:
    """What a deep copy copies of a container or object: the items of a tuple or list, the
    values of a dict (whose keys must be plain), and the attributes of any other object
    (``ModelOutput``, a ``DynamicCache``); ``_NotKept`` for one that copies itself or keeps
    slots."""
    items: list[Any] = []
    if isinstance(obj, (tuple, list)):
        items = list(obj)
    elif isinstance(obj, dict):
        if not all(isinstance(k, _ATOMS) for k in obj):
            raise _NotKept("a key that is not plain")
        items = list(obj.values())
    if type(obj) in (tuple, list, dict):
        return items
    attributes = getattr(obj, "__dict__", None)
    kind = type(obj)
    if attributes is None or kind.__module__ == "builtins":
        raise _NotKept(kind.__name__)
    if hasattr(kind, "__deepcopy__") or any(getattr(c, "__slots__", ()) for c in kind.__mro__):
        raise _NotKept(f"{kind.__name__} copies itself")
    return items + list(attributes.values())
