"""Sub-blocks captured as their parent builds and calls them.

``Block(config)`` is built by ``GPT.__init__`` and called by ``GPT.forward`` with ``[B, T, 768]``:
that instance, with those inputs in the parent's dimension names, is the best answer to "how
is ``Block`` built and what does it receive". After a parent is captured, the first call of
each watched class is read off its FX trace (:func:`from_trace`: the calls the tracer saw, the
arguments' examples from the propagation of the traced graph) when the trace saw every call;
otherwise :func:`record` runs its ``forward`` once more on fake tensors and, at the first call
of each watched class, keeps the instance and its arguments; the run stops as soon as every
watched class was seen (one block of a 48-block stack, not 48). The class's own capture then
uses that instance and those inputs, so its hovers and hints agree with the parent's.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import inspect
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx
from torch import nn
from torch._subclasses.fake_tensor import unset_fake_temporarily

from fxls.worker.capture.build import inputs
from fxls.worker.capture.shapes import propagation as shapes
from fxls.worker.capture.shapes import sizes
from fxls.worker.capture.shapes.values import Namer
from fxls.worker.capture.trace import fakerun
from fxls.worker.capture.trace.tracer import MAPPINGS, call_as_made

MAX_VALUE_DEPTH = 3


@dataclass
class Recorded:
    """The first instance of a class that a parent called, and what it was called with."""

    instance: nn.Module
    path: str
    """Qualified name inside the parent (``transformer.h.0``)."""
    parent: str
    """The parent's class name."""
    parent_expr: str | None
    """An expression that rebuilds the parent, when known."""
    inputs: dict[str, inputs.PlannedInput] = field(default_factory=dict)
    """By ``forward`` parameter name; parameters left to their defaults are absent."""
    called: bool = True
    """False for an instance the parent built but whose ``forward`` never ran (no inputs)."""
    left_out: list[str] = field(default_factory=list)
    """Arguments the parent passed that are not passed again (a cache object where the
    parameter defaults to ``None``, what ``**kwargs`` received), described for a note."""
    within: Any = None
    """When read off the parent's trace: the parent's propagation (a
    ``shapes.propagation.Propagation``), in which the class's shapes may be computed."""
    examples: dict[str, Any] = field(default_factory=dict)
    """With ``within``: the parent's example of each argument, by ``forward`` parameter name."""

    @property
    def text(self) -> str:
        return f"{self.parent}.{self.path}"

    @property
    def expr(self) -> str | None:
        if self.parent_expr is None:
            return None
        return f"{self.parent_expr}.get_submodule({self.path!r})"


def _tensors(planned: inputs.PlannedInput) -> list[list[tuple[str | None, int]]]:
    """The dimensions of each tensor of an input (one, or those inside a value)."""
    if planned.kind == "tensor":
        return [planned.dims]
    return list(planned.inner_dims or [])


def guessed(rec: Recorded) -> bool:
    """Whether the inputs the parent called the class with follow from a guess: fxls assumed
    them, or the parent's own inputs (or an ancestor's)."""
    return any(p.assumed or p.upstream for p in rec.inputs.values())


def generality(rec: Recorded) -> tuple[bool, bool, int]:
    """How much a record of a class says of it in general, compared between the records of two
    parents that build it: a call over a build alone, inputs that follow from what was declared
    over inputs that follow from a guess, then more of the user's dimension names (an encoder's
    ``[B, T, 64]`` from a language model over ``[B, 64, 64]`` from a vision wrapper's 64
    patches)."""
    named = sum(1 for p in rec.inputs.values() for dims in _tensors(p) for name, _ in dims if name)
    return rec.called, not guessed(rec), named


def may_name_more(rec: Recorded) -> bool:
    """Whether another parent could give the class more dimension names than ``rec``: some
    tensor it received has a dimension without a name that is not its last (features,
    channels and the like are numbers in every parent)."""
    return not rec.called or any(
        name is None
        for planned in rec.inputs.values()
        for dims in _tensors(planned)
        for name, _ in dims[:-1]
    )


class FirstCalls:
    """A ``fakerun`` watch: the first call of each of ``wanted``'s classes in a run of
    ``parent``'s forward, with its arguments (``found``, by class). With ``stop`` the run ends
    at the next call of a watched class once every one was seen; without, the run goes on
    (a run made for its own shapes that records the children on the way)."""

    def __init__(self, parent: nn.Module, wanted: Iterable[type], *, stop: bool) -> None:
        self.wanted = frozenset(wanted)
        self.stop = stop
        self.names = {id(m): n for n, m in parent.named_modules()}
        self.found: dict[type, tuple[nn.Module, str, Any]] = {}

    def __call__(
        self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], namer: Any
    ) -> bool:
        cls = type(module)
        if cls in self.wanted and cls not in self.found:
            got = _arguments(module, args, kwargs, namer)
            if got is not None:
                self.found[cls] = (module, self.names.get(id(module), "?"), got)
            return False
        return self.stop and len(self.found) == len(self.wanted) and cls in self.wanted

    def recorded(
        self, wanted: dict[type, str], parent: nn.Module, parent_expr: str | None
    ) -> dict[str, Recorded]:
        """What was found of ``wanted``'s classes (class -> name), by name."""
        return {
            wanted[cls]: Recorded(module, path, type(parent).__name__, parent_expr, *got)
            for cls, (module, path, got) in self.found.items()
            if cls in wanted
        }


@dataclass
class Watches:
    """The runs of a parent's ``forward`` on fake tensors made for its own shapes, each
    watched for the first calls of ``wanted``'s classes (:class:`FirstCalls`): the run kept
    gives its children's records without a run of its own (:meth:`of`)."""

    parent: nn.Module
    wanted: frozenset[type]
    made: list[tuple[fakerun.FakeRun, FirstCalls, bool]] = field(default_factory=list)

    def run(
        self, symbolic: bool, run: Callable[[fakerun.Watch | None], fakerun.FakeRun]
    ) -> fakerun.FakeRun:
        """``run(watch)``, the run on fake tensors ``symbolic`` says, watched."""
        if not self.wanted:
            return run(None)
        watch = FirstCalls(self.parent, self.wanted, stop=False)
        made = run(watch)
        self.made.append((made, watch, symbolic))
        return made

    def of(self, kept: fakerun.FakeRun, symbolic: bool) -> tuple[FirstCalls, dict[str, int]] | None:
        """The watch of ``kept`` and the named dimensions it fixed, when it ran as
        :func:`record` runs (``symbolic`` as asked)."""
        return next(
            (
                (w, made.specialized)
                for made, w, was in self.made
                if made is kept and was == symbolic
            ),
            None,
        )


@dataclass
class RunSettings:
    """How :func:`record` runs a parent's ``forward``: the document (its path and text), and
    whether named dimensions stay symbolic; ``parent_expr`` rebuilds the parent, when known."""

    path: str
    source: str
    symbolic: bool
    parent_expr: str | None


def record(
    parent: nn.Module,
    feeds: Sequence[shapes.ExampleInput],
    wanted: dict[type, str],
    how: RunSettings,
    ran: tuple[FirstCalls, dict[str, int]] | None = None,
) -> dict[str, Recorded]:
    """Run ``parent``'s forward on fake tensors; the first called instance of each class in
    ``wanted`` (class -> name) with its arguments. ``ran``: what a run of the same
    ``forward`` with the same ``feeds`` as ``how`` runs it found already (its watch, and the
    named dimensions it fixed), in place of the first run (:meth:`Watches.of`). Never raises
    for user code problems."""
    parent_expr = how.parent_expr

    def run(feeds: list[shapes.ExampleInput]) -> tuple[dict[str, Recorded], dict[str, int]]:
        watch = FirstCalls(parent, wanted, stop=True)
        try:
            made = fakerun.fake_run(
                parent,
                feeds,
                how.path,
                symbolic=how.symbolic,
                source=how.source,
                hooks=fakerun.Hooks(watch),
            )
        except Exception:  # recording is a bonus: the classes fall back to their own recipes
            return watch.recorded(wanted, parent, parent_expr), {}
        return watch.recorded(wanted, parent, parent_expr), made.specialized

    if ran is not None:
        found, fixed = ran[0].recorded(wanted, parent, parent_expr), ran[1]
    else:
        found, fixed = run(list(feeds))
    if fixed and found:
        _renamed(found, fixed, run, list(feeds))
    return found


def _renamed(
    found: dict[str, Recorded],
    fixed: dict[str, int],
    run: Callable[[list[shapes.ExampleInput]], tuple[dict[str, Recorded], dict[str, int]]],
    feeds: list[shapes.ExampleInput],
) -> None:
    """A parent's run fixed named dimensions to their example size before calling a child:
    the child's inputs got numbers where the names belong. The parent runs again with other
    sizes for them; a dimension that is the fixed name's size in both runs gets the name
    back (``[2, 24, 56, 56]`` -> ``[B, 24, 56, 56]``)."""
    other = sizes.other_sizes(fixed, 1)
    resized = [sizes.resized(f, other) for f in feeds]
    again, _ = run(resized)
    for cls_name, rec in found.items():
        second = again.get(cls_name)
        if second is None or second.path != rec.path:
            continue
        for param, planned in rec.inputs.items():
            theirs = second.inputs.get(param)
            if planned.kind != "tensor" or theirs is None or len(theirs.dims) != len(planned.dims):
                continue
            planned.dims = [
                (name or _fixed_name(fixed, other, size, size2), size)
                for (name, size), (_, size2) in zip(planned.dims, theirs.dims)
            ]


def _fixed_name(fixed: dict[str, int], other: dict[str, int], size: int, size2: int) -> str | None:
    """The one name whose sizes in the two runs are ``size`` and ``size2``, or else the one
    product of two names (``B*T``), or else of a name and a whole number (``64*B``: the
    windows of a batch); None when there is none or more than one."""
    matches = [n for n in fixed if fixed[n] == size and other[n] == size2]
    ordered = sorted(fixed)
    if not matches:
        matches = [
            f"{a}*{b}"
            for i, a in enumerate(ordered)
            for b in ordered[i + 1 :]
            if fixed[a] * fixed[b] == size and other[a] * other[b] == size2
        ]
    if not matches:
        matches = [
            f"{size // fixed[n]}*{n}"
            for n in ordered
            if fixed[n] > 0 and size % fixed[n] == 0 and size > fixed[n]
            and other[n] * (size // fixed[n]) == size2
        ]  # fmt: skip
    return matches[0] if len(matches) == 1 else None


Calls = dict[type, list[tuple[nn.Module, tuple[Any, ...], dict[str, Any]]]]


def from_trace(
    parent: nn.Module,
    calls: Calls,
    prop: Any,
    wanted: dict[type, str],
    *,
    parent_expr: str | None,
) -> dict[str, Recorded] | None:
    """What :func:`record` finds, read off the parent's FX trace instead of a second run:
    ``calls`` are the submodule calls the trace saw (arguments holding proxies), ``prop``
    the propagation of the traced graph (a ``shapes.propagation.Propagation``), whose
    example values are those the run would compute. None when the trace cannot say: a
    wanted class that was not called with recordable arguments (it may be called where the
    trace does not look: inside a leaf or a wrapped function, or in a copied block), or an
    argument without an example."""
    names = {id(m): n for n, m in parent.named_modules()}
    found: dict[str, Recorded] = {}
    for cls, cls_name in wanted.items():
        for module, args, kwargs in calls.get(cls, []):
            try:
                values = _examples((args, kwargs), prop.examples, 0)
            except LookupError:
                return None
            got = _arguments(module, values[0], values[1], prop.namer)
            if got is not None:
                found[cls_name] = Recorded(
                    module, names.get(id(module), "?"), type(parent).__name__, parent_expr, *got
                )
                found[cls_name].within = prop
                found[cls_name].examples = _bound(module, values[0], values[1])
                break
        else:
            return None
    return found


class InnerCalls:
    """The first call of each of ``classes`` inside the submodules a propagation runs whole
    (a forward pre-hook on each of their instances while one runs): what :func:`record`
    finds there, without a run of its own."""

    def __init__(self, classes: Iterable[type]) -> None:
        self.classes = frozenset(classes)
        self.calls: dict[type, tuple[nn.Module, tuple[Any, ...], dict[str, Any]]] = {}
        self.blind = False
        """Whether a class may have been called where this did not see it: a submodule
        kept whole whose output came without running its ``forward`` (a kept run's copy),
        or an instance of a watched class that is no submodule of the module running (one
        made in ``forward``, or handed to it). Until then, a class not in ``calls`` was not
        called."""

    @contextlib.contextmanager
    def around(self, module: nn.Module) -> Iterator[list[tuple[type, str, Any, Any]]]:
        """While ``module`` runs: the first calls of the classes not seen yet inside it; the
        list given fills with them as (class, path inside ``module``, arguments, keyword
        arguments)."""
        handles = []
        seen: list[tuple[type, str, Any, Any]] = []
        ran: list[bool] = []
        inside = {id(module)}
        try:
            for path, sub in module.named_modules():
                inside.add(id(sub))
                if type(sub) in self.classes and type(sub) not in self.calls:
                    called = functools.partial(self._called, seen, path)
                    handles.append(sub.register_forward_pre_hook(called, with_kwargs=True))
            handles.append(module.register_forward_pre_hook(lambda *_: ran.append(True)))
            handles.append(
                torch.nn.modules.module.register_module_forward_pre_hook(
                    functools.partial(self._any_call, inside)
                )
            )
            yield seen
        finally:
            for handle in handles:
                handle.remove()
        if not ran:
            self.blind = True  # answered by a copy of a kept run: its calls are not known

    def _any_call(self, inside: set[int], module: nn.Module, args: Any) -> None:
        if type(module) in self.classes and id(module) not in inside:
            self.blind = True

    def _called(
        self,
        seen: list[tuple[type, str, Any, Any]],
        path: str,
        module: nn.Module,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> None:
        if type(module) not in self.calls:
            args, kwargs = call_as_made(args, kwargs)
            self.calls[type(module)] = (module, args, kwargs)
            seen.append((type(module), path, args, dict(kwargs)))

    def replayed(self, module: nn.Module, calls: list[tuple[type, str, Any, Any]]) -> None:
        """The first calls of a run of ``module`` that was not run again (its output came
        from a kept run of an identical module on the same kind of inputs): (class, path
        inside ``module``, arguments, keyword arguments), in the order they were made."""
        for kind, path, args, kwargs in calls:
            if kind in self.classes and kind not in self.calls:
                self.calls[kind] = (module.get_submodule(path), args, kwargs)


def from_calls(
    parent: nn.Module, prop: Any, wanted: dict[type, str], *, parent_expr: str | None
) -> dict[str, Recorded] | None:
    """What :func:`record` finds, from the first call of each ``wanted`` class that the
    propagation ``prop`` of ``parent``'s graph made inside a submodule it ran whole
    (``inner_calls``, :class:`InnerCalls`), in that run's dimension names. A class not
    called there was not called by the run, unless the watch was blind (``inner_blind``).
    None when a class was called with an argument that cannot be passed again, or may have
    been called unseen."""
    names = {id(m): n for n, m in parent.named_modules()}
    found: dict[str, Recorded] = {}
    calls = prop.inner_calls
    for cls, cls_name in wanted.items():
        if cls not in calls:
            if prop.inner_blind:
                return None
            continue
        module, args, kwargs = calls[cls]
        got = _arguments(module, args, kwargs, prop.namer)
        if got is None:
            return None
        found[cls_name] = Recorded(
            module, names.get(id(module), "?"), type(parent).__name__, parent_expr, *got
        )
    return found


def _bound(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The call's argument values by ``forward`` parameter name (``_arguments`` bound them)."""
    return dict(inspect.signature(module.forward).bind(*args, **kwargs).arguments)


def _examples(value: Any, examples: dict[str, Any], depth: int) -> Any:
    """``value`` with each proxy replaced by its node's example (LookupError when missing)."""
    if isinstance(value, torch.fx.Proxy):
        if isinstance(value, torch.fx.proxy.Attribute) and value._node is None:
            raise LookupError("an attribute proxy no node was made for")
        return examples[value.node.name]
    if depth > 8:
        raise LookupError("too deep")
    if type(value) in (tuple, list):
        return type(value)(_examples(v, examples, depth + 1) for v in value)
    if type(value) in MAPPINGS:
        return type(value)({k: _examples(v, examples, depth + 1) for k, v in value.items()})
    if isinstance(value, (tuple, list, dict)):
        raise LookupError("a container fxls does not rebuild")
    return value


def _arguments(
    module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], namer: Any
) -> tuple[dict[str, inputs.PlannedInput], bool, list[str]] | None:
    """The call's arguments by parameter name, ``called`` (True) and what is left out: the
    values ``**kwargs`` received (the capture passes it nothing), and objects fxls cannot
    pass again (a ``DynamicCache``) to a parameter that defaults to ``None``: its default is
    used, as in a first call with an empty cache. None when another argument cannot be."""
    try:
        signature = inspect.signature(module.forward)
        bound = signature.bind(*args, **kwargs)
    except (TypeError, ValueError):
        return None
    out: dict[str, inputs.PlannedInput] = {}
    left_out: list[str] = []
    for name, value in bound.arguments.items():
        param = signature.parameters[name]
        if param.kind == param.VAR_KEYWORD:
            left_out.extend(f"`{key}`" for key, item in value.items() if item is not None)
            continue
        planned = _planned(name, value, namer)
        if planned is None and param.default is None:
            left_out.append(f"`{name}` ({type(value).__name__})")
            continue
        if planned is None:
            return None
        out[name] = planned
    return out, True, left_out


def _planned(name: str, value: Any, namer: Any) -> inputs.PlannedInput | None:
    if isinstance(value, torch.Tensor):
        dims = [_dim(d, namer) for d in value.shape]
        return inputs.PlannedInput(name, "tensor", dims, value.dtype, origin="parent")
    portable = _portable(value, 0)
    if portable is _UNPORTABLE:
        return None
    inner: list[list[tuple[str | None, int]]] = []

    def collect(t: torch.Tensor) -> torch.Tensor:
        inner.append([_dim(d, namer) for d in t.shape])
        return t

    shapes.map_tensors(value, collect)
    named = inner if any(n for dims in inner for n, _ in dims) else None
    return inputs.PlannedInput(name, "value", value=portable, origin="parent", inner_dims=named)


def _dim(d: Any, namer: Any) -> tuple[str | None, int]:
    if isinstance(d, torch.SymInt):
        hint = d.node.hint
        size = int(hint) if hint is not None else 2
        shown = namer.dim(d)
        if isinstance(shown, str) and _of_names(shown, namer.names.values()):
            return shown, size
        return None, size
    return None, int(d)


def _of_names(shown: str, names: Iterable[str]) -> bool:
    """Whether a dimension shown as ``shown`` is one of ``names``, a product of them and
    whole numbers (``B*T``: the tokens of a batch of sequences flattened before a block is
    called; ``64*B``: the windows of a batch of images), or a sum of such products (``S + T``:
    a text's and an image's tokens joined before a block is called)."""
    known = set(names)
    terms = shown.split(" + ")
    return all(_product_of_names(term, known) for term in terms)


def _product_of_names(term: str, known: set[str]) -> bool:
    parts = term.split("*")
    return any(p in known for p in parts) and all(
        (p.isidentifier() and p in known) or (p.isdecimal() and len(p) < 7) for p in parts
    )


_UNPORTABLE = object()


def _portable(value: Any, depth: int) -> Any:
    """A value to pass again in another run: tensors become meta tensors of the same size."""
    if value is None or isinstance(value, (bool, int, float, str, torch.dtype, torch.device)):
        return value
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        hint = value.node.hint
        return _UNPORTABLE if hint is None else hint
    if isinstance(value, torch.Tensor):
        sizes = [_dim(d, Namer({}))[1] for d in value.shape]
        # made outside the parent's run: under its fake mode this would be one of its fake
        # tensors (on the meta device), which a later run cannot mix with its own
        with unset_fake_temporarily(), torch._C.DisableTorchFunction():
            return torch.empty(sizes, dtype=value.dtype, device="meta")
    if depth < MAX_VALUE_DEPTH and isinstance(value, (tuple, list)):
        items = [_portable(v, depth + 1) for v in value]
        if any(v is _UNPORTABLE for v in items):
            return _UNPORTABLE
        return type(value)(items) if isinstance(value, list) else tuple(items)
    if depth < MAX_VALUE_DEPTH and type(value) in MAPPINGS:
        return _portable_mapping(value, depth)
    return _UNPORTABLE


_KEYS = (str, int, bool, type(None))


def _portable_mapping(value: Any, depth: int) -> Any:
    """A dict, OrderedDict or UserDict of plain keys, its values portable (the mapping as it
    was when the block was called: recorded calls copy it then, ``call_as_made``)."""
    items = {}
    for key, item in value.items():
        if type(key) not in _KEYS:
            return _UNPORTABLE
        items[key] = _portable(item, depth + 1)
        if items[key] is _UNPORTABLE:
            return _UNPORTABLE
    return type(value)(items)


def _mentions(names: Sequence[str], tree: ast.Module) -> dict[str, set[str]]:
    """For each class of ``names``, the others of ``names`` its body mentions."""
    wanted = set(names)
    mentions: dict[str, set[str]] = {n: set() for n in names}
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name in wanted:
            for sub in ast.walk(node):
                if isinstance(sub, ast.Name) and sub.id in wanted and sub.id != node.name:
                    mentions[node.name].add(sub.id)
    return mentions


def users_of(used: set[str], names: Sequence[str], tree: ast.Module | None) -> set[str]:
    """The classes of ``names`` that mention one of ``used`` in their body, directly or
    through others (the parents whose capture records the instances of ``used``)."""
    if tree is None:
        return set()
    mentions = _mentions(names, tree)
    found: set[str] = set()
    todo = set(used)
    while todo:
        name = todo.pop()
        for user, mentioned in mentions.items():
            if name in mentioned and user not in found:
                found.add(user)
                todo.add(user)
    return found - used


def parent_first(names: Sequence[str], tree: ast.Module | None) -> list[str]:
    """Class names ordered so that a class that mentions another in its body comes first."""
    if tree is None:
        return list(names)
    mentions = _mentions(names, tree)
    order: list[str] = []
    state: dict[str, int] = {}

    def visit(name: str) -> None:  # users before what they use
        if state.get(name):
            return
        state[name] = 1
        for user in names:
            if name in mentions.get(user, ()) and not state.get(user):
                visit(user)
        order.append(name)

    for name in names:
        visit(name)
    # visit() appends a class after its users: that is already parents first
    return order
