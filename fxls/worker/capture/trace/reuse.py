"""Identical sub-blocks traced once: the first call is recorded, the others replay it.

A 48-block GPT calls 48 instances of one ``Block`` class built with one configuration. Tracing
each of them runs the same Python code on the same kind of proxies and records the same nodes;
only the module paths differ (``h.0.attn.c_attn`` … ``h.47.attn.c_attn``). So while tracing,
:class:`Replayer` records the nodes the first call of a configuration creates (its *template*),
and a later call of an instance with the same :func:`fingerprint` and the same kind of
arguments creates copies of those nodes instead of running ``forward``: the same operations,
targets under the instance's own path, the same spans (recomputed from the frames recorded for
the template and the frames of the new call), the same ``nn_module_stack`` entries under the
new path, in the order a trace would have created them, so nodes get the names a trace gives
them. The graph is the graph a full trace produces; every later step (shapes, named arguments,
checks, node records) runs on it unchanged.

Shape propagation then reuses the template's results for a copy whose inputs have the same
metadata (shapes with the user's dimension names, dtype, strides): :class:`Segment` maps each
copied node to its template node (see :func:`fxls.worker.capture.shapes.propagation.propagate`).

Reuse is exact or it does not happen. A configuration is the module's class, its submodule
tree, parameter and buffer shapes, dtypes, devices and ``requires_grad``, its plain attributes
(numbers, strings, dtypes, devices, tuples of them, functions by identity) and its training
flag; anything else (a tensor attribute that is no buffer, an object, a hook, a shared or tied
submodule or parameter) makes the instance unfingerprintable and it is traced as always. A
template is refused (and the configuration traced through every time) when its nodes read
anything but the call's arguments, refer to attributes outside the instance, return anything
but proxies, or when ``forward`` changed the instance's attributes.
"""

from __future__ import annotations

import enum
import functools
import os
import sys
import types
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from types import CodeType, FrameType
from typing import Any, Protocol

import torch
import torch.fx

from fxls.protocol.copies import block_gives, node_matches
from fxls.protocol.model import BlockCopy, NodeCopy, NodeInfo
from fxls.protocol.positions import SourceText
from fxls.worker.capture.records.blocks import whole_record
from fxls.worker.capture.spans import CALL_SITE_KEY, SPAN_KEY, call_site_frame
from fxls.worker.capture.trace.decided import PROXIES

REUSE_ENV = "FXLS_REUSE_BLOCKS"
"""Set to ``0`` to trace every block (the job's ``reuse_blocks`` says the same)."""

MODULE_STACK_KEY = "nn_module_stack"


def enabled(job_flag: bool) -> bool:
    """Whether reuse is on: the job asks for it and the environment does not turn it off."""
    return job_flag and os.environ.get(REUSE_ENV, "1") != "0"


class _Unfingerprintable(Exception):
    pass


_HOOK_FREE = (
    "_forward_hooks",
    "_forward_pre_hooks",
    "_forward_hooks_with_kwargs",
    "_forward_pre_hooks_with_kwargs",
    "_backward_hooks",
    "_backward_pre_hooks",
)
_IGNORED = frozenset(
    {
        "_parameters",
        "_buffers",
        "_modules",
        "_state_dict_hooks",
        "_state_dict_pre_hooks",
        "_load_state_dict_pre_hooks",
        "_load_state_dict_post_hooks",
        "_forward_hooks_always_called",
        "_is_full_backward_hook",
        *_HOOK_FREE,
    }
)


def plain(
    value: Any,
    depth: int = 0,
    *,
    limit: int = 4,
    other: Callable[[Any, int], Any] | None = None,
) -> Any:
    """A hashable description of a plain value (numbers, strings, dtypes, devices, enums,
    functions and classes by identity, and tuples, lists, sets and dicts of them, nested up
    to ``limit``): equal for values that behave alike. Anything else is ``other(value,
    depth)``'s description, or raises ``_Unfingerprintable`` without ``other``."""
    if value is None or isinstance(value, (bool, int, float, complex, str, bytes)):
        return (type(value).__name__, value)
    if isinstance(value, (torch.dtype, torch.device, torch.memory_format, torch.layout)):
        return (type(value).__name__, str(value))
    if isinstance(value, enum.Enum):
        return ("enum", type(value), value.name)
    if isinstance(value, (types.FunctionType, types.BuiltinFunctionType, type)):
        return ("id", id(value))  # the same function object behaves the same
    inner = functools.partial(plain, limit=limit, other=other)
    if depth < limit and isinstance(value, (tuple, list, torch.Size)):
        kind = one_kind_of_atoms(value)
        if kind is not None:  # described and compared in C (LeViT keeps a million indices)
            return (type(value).__name__, kind.__name__, tuple(value))
        return (type(value).__name__, tuple(inner(v, depth + 1) for v in value))
    if depth < limit and isinstance(value, (set, frozenset)):
        return (type(value).__name__, tuple(sorted(repr(inner(v, depth + 1)) for v in value)))
    if depth < limit and isinstance(value, dict) and type(value) is dict:
        items = [(inner(k, depth + 1), inner(v, depth + 1)) for k, v in value.items()]
        return ("dict", tuple(items))
    if other is not None:
        return other(value, depth)
    raise _Unfingerprintable(type(value).__name__)


_ATOM_TYPES = frozenset({type(None), bool, int, float, complex, str, bytes})

LONG_SEQUENCE = 64
"""From this length on, a sequence of numbers or strings of one type is compared whole."""


def one_kind_of_atoms(value: tuple[Any, ...] | list[Any]) -> type | None:
    """The type of every item of a long sequence when they all have the same one and it is a
    number, string, bytes or ``None`` (such sequences are equal when ``==`` says so); else
    None."""
    if len(value) < LONG_SEQUENCE:
        return None
    kinds = set(map(type, value))
    if len(kinds) == 1 and kinds <= _ATOM_TYPES:
        return kinds.pop()
    return None


def _tensor(t: torch.Tensor | None) -> Any:
    if t is None:
        return None
    if type(t) not in (torch.Tensor, torch.nn.Parameter, torch.nn.Buffer):
        raise _Unfingerprintable(type(t).__name__)
    return (tuple(t.shape), t.dtype, t.device.type, t.requires_grad, type(t).__name__)


_VALUES_ONLY: dict[type, frozenset[str]] = {
    torch.nn.Embedding: frozenset(
        {"padding_idx", "max_norm", "norm_type", "scale_grad_by_freq", "sparse"}
    ),
}
"""Attributes of torch layers that change only the values of their output (or its
gradients), never its sizes, strides or dtype: a head's configuration gives the base model's
token embedding its ``pad_token_id``, another head's none."""


def _own(
    module: torch.nn.Module,
    other: Callable[[Any, int], Any] | None = None,
    public: bool = True,
    shapes_only: bool = False,
) -> Any:
    """The module's own configuration, without its children (objects described by ``other``,
    see :func:`plain`); without its public attributes unless ``public``, and, for what
    decides the output's metadata alone (``shapes_only``), without the attributes of a torch
    layer that change only values (:data:`_VALUES_ONLY`)."""
    attrs = []
    atoms = _ATOM_TYPES
    values_only = _VALUES_ONLY.get(type(module), frozenset()) if shapes_only else frozenset()
    for name, value in module.__dict__.items():
        if name in _IGNORED or name in values_only:
            if name in _HOOK_FREE and value:
                raise _Unfingerprintable("hook")
            continue
        if not public and not name.startswith("_"):
            if other is not None and type(value) not in atoms:
                plain(value, other=other)  # the objects it holds are placed all the same
            continue
        kind = type(value)
        if kind in atoms:  # what plain gives, without the call
            attrs.append((name, (kind.__name__, value)))
        elif kind is tuple and all(type(v) in atoms for v in value):
            attrs.append((name, ("tuple", tuple((type(v).__name__, v) for v in value))))
        else:
            attrs.append((name, plain(value, other=other)))
    params = tuple((n, _tensor(p)) for n, p in module._parameters.items())
    buffers = tuple((n, _tensor(b)) for n, b in module._buffers.items())
    return (type(module), tuple(attrs), params, buffers)


def fingerprint(module: torch.nn.Module) -> Any:
    """What makes two instances trace identically; None when it cannot be said safely."""
    try:
        return _fingerprint(module, 0)
    except (_Unfingerprintable, RecursionError):
        return None


def configured(module: torch.nn.Module) -> tuple[Any, list[Any]] | None:
    """:func:`fingerprint`, where an attribute that is a plain object (a library's
    configuration, :func:`object_state`) is described by its class and the order in which
    the walk first met it, and those objects in that order: what ``forward`` reads of them
    is compared by whoever needs it. The module itself is the first object, its public
    attributes (no leading underscore, in its ``__dict__``) left out of the description:
    what ``forward`` reads of them is compared too (``LlamaModel.padding_idx``, which a
    head's configuration sets and ``forward`` never reads). None when it cannot be said
    safely."""
    objects: list[Any] = [module]
    index: dict[int, int] = {id(module): 0}

    def placed(value: Any, depth: int) -> Any:
        _plain_object(value)
        at = index.setdefault(id(value), len(objects))
        if at == len(objects):
            objects.append(value)
        return ("object", type(value), at)

    try:
        return _fingerprint(module, 0, placed, shapes_only=True, public=False), objects
    except (_Unfingerprintable, RecursionError):
        return None


def _plain_object(value: Any) -> dict[str, Any]:
    """The attributes of an object of a plain class; ``_Unfingerprintable`` for anything
    else (a module, a tensor, a container, a callable, an object with slots)."""
    attributes = getattr(value, "__dict__", None)
    kind = type(value)
    if attributes is None or kind.__module__ == "builtins" or callable(value):
        raise _Unfingerprintable(kind.__name__)
    if isinstance(value, (torch.nn.Module, torch.Tensor)):
        raise _Unfingerprintable(kind.__name__)
    if any(getattr(c, "__slots__", ()) for c in kind.__mro__):  # ABCs declare empty ones
        raise _Unfingerprintable(f"{kind.__name__} has slots")
    return typing.cast(dict[str, Any], attributes)


def described(value: Any, known: Callable[[Any], Any] | None = None) -> Any:
    """:func:`plain`'s description of ``value``, objects of plain classes by their class and
    attributes (:func:`object_state`), and any object ``known`` describes (not None) by
    that; ``ValueError`` when it cannot be described."""

    def other(obj: Any, depth: int) -> Any:
        said = known(obj) if known is not None else None
        return said if said is not None else object_state(obj, depth, other)

    try:
        return plain(value, other=other)
    except (_Unfingerprintable, RecursionError) as exc:
        raise ValueError(str(exc)) from None


def object_state(value: Any, depth: int, other: Callable[[Any, int], Any] | None = None) -> Any:
    """An object of a plain class (no module, tensor, container or callable) by its class
    and the plain values of its attributes (objects in them described by ``other``, by
    default this function), nested up to :func:`plain`'s limit: equal for two configuration
    objects built alike."""
    items = sorted(_plain_object(value).items())
    inner = other or object_state
    return (
        "object",
        type(value),
        tuple((k, plain(v, depth + 1, other=inner)) for k, v in items),
    )


def _fingerprint(
    module: torch.nn.Module,
    depth: int,
    other: Callable[[Any, int], Any] | None = None,
    shapes_only: bool = False,
    public: bool = True,
) -> Any:
    """``module``'s :func:`_own` description and its children's (theirs always with their
    public attributes: ``public`` is the module's own)."""
    if depth > 32:
        raise _Unfingerprintable("depth")
    children = tuple(
        (name, _fingerprint(child, depth + 1, other, shapes_only) if child is not None else None)
        for name, child in module._modules.items()
    )
    return (_own(module, other, public, shapes_only), children)


def _owned_fingerprint(
    module: torch.nn.Module,
    path: str,
    paths: dict[torch.nn.Module, str],
    names: dict[int, str],
    depth: int,
) -> Any:
    """:func:`fingerprint` of ``module`` (at ``path``), in the same walk checking that every
    submodule, parameter and buffer of it is found at its own path: a shared or tied one is
    named by its first path, which differs between instances (raises ``_Unfingerprintable``)."""
    if depth > 32:
        raise _Unfingerprintable("depth")
    if paths.get(module) != path:
        raise _Unfingerprintable("a shared submodule")
    for store in (module._parameters, module._buffers):
        for name, tensor in store.items():
            if tensor is not None and names.get(id(tensor)) != f"{path}.{name}":
                raise _Unfingerprintable("a shared tensor")
    children = tuple(
        (name, _owned_fingerprint(child, f"{path}.{name}", paths, names, depth + 1))
        if child is not None
        else (name, None)
        for name, child in module._modules.items()
    )
    return (_own(module), children)


def repeated(root: torch.nn.Module) -> set[int]:
    """``id`` of each module under ``root`` (``root`` too) that may have an identical twin in
    the tree: another instance of its class with parameters, buffers and children of the same
    names and shapes, before tracing. Identical fingerprints need that, so the calls of the
    other modules cannot be replayed and are not recorded. Each module is visited once."""
    signatures: dict[int, Any] = {}

    def visit(module: torch.nn.Module, depth: int) -> Any:
        known = signatures.get(id(module), _MISSING)
        if known is not _MISSING:
            return known
        signatures[id(module)] = None  # a cycle has no signature
        found = None
        if depth <= 32:
            children = tuple(
                (name, visit(child, depth + 1) if child is not None else None)
                for name, child in module._modules.items()
            )
            found = (
                type(module),
                tuple((n, _shape(t)) for n, t in module._parameters.items()),
                tuple((n, _shape(t)) for n, t in module._buffers.items()),
                children,
            )
        signatures[id(module)] = found
        return found

    visit(root, 0)
    counts: dict[Any, int] = {}
    for value in signatures.values():
        counts[value] = counts.get(value, 0) + 1
    return {key for key, value in signatures.items() if value is None or counts[value] > 1}


def _shape(tensor: Any) -> Any:
    return tuple(tensor.shape) if isinstance(tensor, torch.Tensor) else None


_MISSING = object()


def _global_hooks() -> bool:
    hooks = torch.nn.modules.module
    return any(
        getattr(hooks, name, None)
        for name in (
            "_global_forward_hooks",
            "_global_forward_pre_hooks",
            "_global_backward_hooks",
            "_global_backward_pre_hooks",
            "_global_module_registration_hooks",
        )
    )


Frames = tuple[tuple[types.CodeType, int], ...]


@dataclass
class _Recorded:
    """One node of a template: how it was created."""

    node: torch.fx.Node
    name: str | None
    """The name the tracer asked for (usually None: derived from the target)."""
    inner: Frames
    """Document frames inside the block's call when the node was created, innermost first."""
    target: str | None = None
    """For call_module/get_attr: the target after the template's path (``.attn.c_attn``)."""
    stack: int = -1
    """Index of the node's module stack (inside the call) in ``Template.stacks``; -1: none."""
    scope: tuple[str, Any] | None = None
    """The tracer's scope of the node, its path after the template's path."""
    spans: int = -1
    """Index of ``inner`` in ``Template.inner``."""
    cached: bool = False
    """A get_attr node the tracer keeps in its parameter cache."""
    candidate: str | None = None
    """The name a copy asks the graph for when its target is the template's (the graph makes
    it unique); None: derived from the copy's own target."""


@dataclass
class Template:
    path: str
    """The recorded instance's qualified name (``h.0``)."""
    inputs: list[torch.fx.Node]
    """The nodes of the call's proxy arguments, in argument order."""
    nodes: list[_Recorded]
    output: Any
    """The return value with nodes in place of proxies."""
    stack_depth: int
    """Entries of the tracer's module stack outside the call."""
    calls: dict[str, int]
    """Calls of each module path under ``path`` while the template ran."""
    stacks: list[list[tuple[str, str, Any]]] = field(default_factory=list)
    """Distinct module stack entries inside the call: (key, path, class), paths after
    ``path``."""
    inner: list[Frames] = field(default_factory=list)
    """Distinct inner frames of the nodes."""
    inner_spans: list[tuple[Any, Any, Any]] = field(default_factory=list)
    """Per distinct inner frames: the innermost one's span, the call site when a root method's
    frame is among them (else ``_BY_OUTER``), the outermost one's span."""
    decided_for: tuple[Any, ...] | None = None
    """When the call decided a check from ranks and dtypes: its arguments' ranks and dtypes
    (a call replays it only with the same)."""


@dataclass
class Segment:
    """The nodes one replayed call created: copies of a template's nodes."""

    inputs: list[str]
    """Names of the nodes passed to the call, in argument order."""
    template_inputs: list[str]
    template_path: str = ""
    """The template's instance (``h.0``)."""
    path: str = ""
    """The instance called (``h.7``)."""
    copies: dict[str, str] = field(default_factory=dict)
    """Copied node name -> template node name, in graph order."""


@dataclass
class _Recording:
    key: Any
    path: str
    start: torch.fx.Node
    outer: int
    """Document frames outside the call."""
    stack_depth: int
    calls_before: dict[str, int]
    fingerprint: Any
    frames: dict[torch.fx.Node, tuple[str | None, Frames]] = field(default_factory=dict)
    decided: bool = False
    """A rank or dtype check was decided inside the call: for these arguments' ranks and
    dtypes, which the key does not hold (``Template.decided_for`` does)."""


_NOT_REPLAYABLE = object()
_BY_OUTER = object()


class TracerHooks(Protocol):
    """What the replayer reads and calls of the tracer that holds it (``SpanTracer``)."""

    @property
    def root(self) -> torch.nn.Module: ...
    @property
    def graph(self) -> torch.fx.Graph: ...
    @property
    def module_stack(self) -> Any: ...
    @property
    def num_calls(self) -> dict[str, int]: ...
    @property
    def submodule_paths(self) -> dict[torch.nn.Module, str] | None: ...
    @property
    def node_name_to_scope(self) -> dict[str, tuple[str, type]]: ...
    @property
    def source(self) -> SourceText: ...
    @property
    def root_codes(self) -> set[CodeType]: ...
    def path_of_module(self, mod: torch.nn.Module) -> str: ...
    def proxy(self, node: torch.fx.Node) -> torch.fx.Proxy: ...
    def note_params(self, frame: FrameType | None) -> None:
        """Record which parameters of each document frame on the stack are proxies."""

    def ranks_and_dtypes(self, nodes: list[torch.fx.Node]) -> tuple[Any, ...] | None:
        """The rank and dtype of each node's value, None when one is not known."""


class Replayer:
    """Records templates and replays them for one trace (held by the tracer)."""

    def __init__(self, tracer: TracerHooks, path: str, frames_of: Callable[[], Frames]) -> None:
        self.tracer = tracer
        self.path = path
        self.frames_of = frames_of
        self.templates: dict[Any, Template | object] = {}
        self.segments: list[Segment] = []
        self.recordings: list[_Recording] = []
        self.parameter_cache: dict[str, Any] | None = None
        self.root_names: dict[int, str] | None = None
        self.active = not _global_hooks()
        self.repeated: set[int] | None = None

    # -- what the tracer calls --------------------------------------------------------------

    def note_created(self, node: torch.fx.Node, name: str | None, frames: Frames) -> None:
        """Called for every node the tracer creates while a template is being recorded."""
        for rec in self.recordings:
            inner = frames[: len(frames) - rec.outer] if rec.outer else frames
            rec.frames[node] = (name, inner)

    def note_decided(self) -> None:
        """A check was decided from the ranks and dtypes of the values at hand: the calls
        being recorded replay only for arguments of the same ranks and dtypes."""
        for rec in self.recordings:
            rec.decided = True

    def call_module(
        self,
        module: torch.nn.Module,
        forward: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        call: Callable[[], Any],
    ) -> Any:
        """``call()`` runs the tracer's own ``call_module``; a replay does not."""
        if not self.active:
            return call()
        if self.repeated is None:
            self.repeated = repeated(self.tracer.root)
        if id(module) not in self.repeated and self._in_tree(module):
            return call()  # one of a kind: nothing to replay it from, nothing to record
        key = self._key(module, args, kwargs)
        if key is None:
            return call()
        path = self.tracer.path_of_module(module)
        template = self.templates.get(key)
        if isinstance(template, Template):
            if self._fresh(path, template) and self._same_decisions(template, args, kwargs):
                return self._replay(path, template, args, kwargs)
            return call()
        if template is _NOT_REPLAYABLE or self.tracer.num_calls.get(path, 0):
            return call()
        return self._record(key, path, module, args, kwargs, call)

    def _same_decisions(
        self, template: Template, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> bool:
        """Whether the checks the template's call decided go the same way for this call: it
        decided none, or this call's arguments have the same ranks and dtypes."""
        if template.decided_for is None:
            return True
        nodes = [v.node for v in [*args, *kwargs.values()] if type(v) in PROXIES]
        return self.tracer.ranks_and_dtypes(nodes) == template.decided_for

    def _in_tree(self, module: torch.nn.Module) -> bool:
        paths = self.tracer.submodule_paths
        return paths is not None and module in paths

    # -- keys -------------------------------------------------------------------------------

    def _key(self, module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        signature = self._arguments(args, kwargs)
        if signature is None:
            return None
        path = self.tracer.path_of_module(module)
        paths = self.tracer.submodule_paths
        if not path or paths is None:
            return None
        try:
            found = _owned_fingerprint(module, path, paths, self._root_names(), 0)
        except (_Unfingerprintable, RecursionError):
            return None
        return (found, signature)

    def _arguments(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Which arguments are proxies (and which of them are the same) and the plain ones."""
        seen: dict[int, int] = {}
        out = []
        for value in [*args, *kwargs.values()]:
            if type(value) in PROXIES:
                out.append(("proxy", seen.setdefault(id(value.node), len(seen))))
                continue
            try:
                out.append(("value", plain(value)))
            except _Unfingerprintable:
                return None
        return (len(args), tuple(kwargs), tuple(out))

    def _root_names(self) -> dict[int, str]:
        if self.root_names is None:
            root = self.tracer.root
            self.root_names = {}
            for name, tensor in [*root.named_parameters(), *root.named_buffers()]:
                self.root_names.setdefault(id(tensor), name)
        return self.root_names

    # -- recording --------------------------------------------------------------------------

    def _record(
        self,
        key: Any,
        path: str,
        module: torch.nn.Module,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        call: Callable[[], Any],
    ) -> Any:
        graph = self.tracer.graph
        rec = _Recording(
            key=key,
            path=path,
            start=graph._root.prev,
            outer=len(self.frames_of()),
            stack_depth=len(self.tracer.module_stack),
            calls_before=dict(self.tracer.num_calls),
            fingerprint=key[0],
        )
        self.recordings.append(rec)
        try:
            result = call()
        finally:
            self.recordings.remove(rec)
        if key not in self.templates:  # a nested call of the same configuration may have
            template = self._template(rec, module, args, kwargs, result)
            if template is not None and rec.decided:
                template = self._decided_for(template)
            self.templates[key] = template if template is not None else _NOT_REPLAYABLE
        return result

    def _decided_for(self, template: Template) -> Template | None:
        """``template`` of a call that decided a check, with its arguments' ranks and
        dtypes; None when they are not known (it is not replayed)."""
        template.decided_for = self.tracer.ranks_and_dtypes(template.inputs)
        return template if template.decided_for is not None else None

    def _template(
        self,
        rec: _Recording,
        module: torch.nn.Module,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        result: Any,
    ) -> Template | None:
        if fingerprint(module) != rec.fingerprint:
            return None  # forward changed the instance
        nodes: list[_Recorded] = []
        node = rec.start.next
        while node is not self.tracer.graph._root:
            created = rec.frames.get(node)
            if created is None:
                return None
            nodes.append(_Recorded(node, created[0], created[1]))
            node = node.next
        inputs = [v.node for v in [*args, *kwargs.values()] if type(v) in PROXIES]
        inside = {r.node for r in nodes} | set(inputs)
        prefix = rec.path + "."
        for r in nodes:
            n = r.node
            if any(i not in inside for i in n.all_input_nodes):
                return None
            if n.op in ("call_module", "get_attr") and not str(n.target).startswith(prefix):
                return None
            if n.op in ("placeholder", "output"):
                return None
            if _names_a_proxy((n.args, n.kwargs)):
                return None  # f"{x.shape}" bakes a node's name into a string
        output = _unproxy(result, inside)
        if output is _NOT_REPLAYABLE:
            return None
        calls = {
            p: c - rec.calls_before.get(p, 0)
            for p, c in self.tracer.num_calls.items()
            if c != rec.calls_before.get(p, 0)
        }
        if any(p != rec.path and not p.startswith(prefix) for p in calls):
            return None
        if any(rec.calls_before.get(p, 0) for p in calls):
            return None
        cache = self.parameter_cache or {}
        template = Template(
            path=rec.path, inputs=inputs, nodes=nodes, output=output,
            stack_depth=rec.stack_depth, calls=calls,
        )  # fmt: skip
        stacks: dict[tuple[tuple[str, str, Any], ...], int] = {}
        inner: dict[Frames, int] = {}
        cut = len(rec.path)
        for r in nodes:
            n = r.node
            if n.op in ("call_module", "get_attr"):
                r.target = str(n.target)[cut:]
            entries = n.meta.get(MODULE_STACK_KEY)
            if entries is not None:
                moved = []
                for key, (qualified, kind) in list(entries.items())[rec.stack_depth :]:
                    if (
                        _moved(key, rec.path, "") == key
                        or _moved(qualified, rec.path, "") == qualified
                    ):
                        return None  # not under the call's path
                    moved.append((key[cut:], qualified[cut:], kind))
                r.stack = stacks.setdefault(tuple(moved), len(stacks))
            scope = self.tracer.node_name_to_scope.get(n.name)
            if scope is not None:
                if _moved(scope[0], rec.path, "") == scope[0]:
                    return None
                r.scope = (scope[0][cut:], scope[1])
            r.spans = inner.setdefault(r.inner, len(inner))
            if r.name is not None:
                r.candidate = r.name
            elif n.op not in ("call_module", "get_attr"):
                r.candidate = self.tracer.graph._target_to_str(n.target)
            proxy = cache.get(str(n.target)) if n.op == "get_attr" else None
            r.cached = proxy is not None and proxy.node is n
        template.stacks = [list(k) for k in stacks]
        template.inner = list(inner)
        source, roots = self.tracer.source, self.tracer.root_codes
        for frames in template.inner:
            if not frames:
                template.inner_spans.append((None, _BY_OUTER, None))
                continue
            root = next((f for f in frames if f[0] in roots), None)
            template.inner_spans.append(
                (
                    source.code_span(*frames[0]),
                    source.code_span(*root) if root is not None else _BY_OUTER,
                    source.code_span(*frames[-1]),
                )
            )
        return template

    # -- replaying --------------------------------------------------------------------------

    def _fresh(self, path: str, template: Template) -> bool:
        """The new instance and the modules under it were not called yet (as for the template)."""
        num_calls = self.tracer.num_calls
        return not any(num_calls.get(_moved(p, template.path, path), 0) for p in template.calls)

    def _replay(
        self, path: str, template: Template, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        tracer = self.tracer
        graph = tracer.graph
        inputs = [v.node for v in [*args, *kwargs.values()] if type(v) in PROXIES]
        env: dict[torch.fx.Node, torch.fx.Node] = dict(zip(template.inputs, inputs))
        outer = self.frames_of()
        stack = dict(tracer.module_stack)
        stacks = []  # each module stack of the template, moved under ``path``, made once
        for entries in template.stacks:
            moved = dict(stack)
            for key, qualified, kind in entries:
                moved[path + key] = (path + qualified, kind)
            stacks.append(moved)
        # (span, call site) per distinct inner frames, as the tracer's create_node finds them
        # on the stack ``inner + outer``: the innermost frame's span, and the call site in the
        # first frame of a root method (else the outermost frame)
        source = tracer.source
        roots = tracer.root_codes
        outer_root = next((f for f in outer if f[0] in roots), outer[-1] if outer else None)
        outer_site = source.code_span(*outer_root) if outer_root is not None else None
        outer_span = source.code_span(*outer[0]) if outer else None
        spans: list[tuple[Any, Any] | None] = []
        for inner, (span, inner_site, last_site) in zip(template.inner, template.inner_spans):
            if not inner:
                span = outer_span
                site = source.code_span(*call_site_frame(list(outer), roots)) if outer else None
            elif inner_site is not _BY_OUTER:
                site = inner_site
            else:
                site = outer_site if outer_root is not None else last_site
            spans.append((span, site or span) if span is not None else None)
        segment = Segment(
            [n.name for n in inputs], [n.name for n in template.inputs], template.path, path
        )
        cache = self.parameter_cache
        scopes = tracer.node_name_to_scope
        copies = segment.copies
        lookup = env.__getitem__
        map_arg = torch.fx.node.map_arg
        create = _node_maker(graph)
        recording = bool(self.recordings)
        for rec in template.nodes:
            old = rec.node
            target = old.target if rec.target is None else path + rec.target
            new = create(
                old.op,
                target,
                map_arg(old.args, lookup),
                map_arg(old.kwargs, lookup),
                rec.name,
                rec.candidate,
                old.type,
            )
            env[old] = new
            meta = new.meta
            if rec.stack >= 0:
                meta[MODULE_STACK_KEY] = stacks[rec.stack]
            if rec.scope is not None:
                scopes[new.name] = (path + rec.scope[0], rec.scope[1])
            if rec.spans >= 0 and (found := spans[rec.spans]) is not None:
                meta[SPAN_KEY], meta[CALL_SITE_KEY] = found
            if rec.cached and cache is not None:
                cache[str(target)] = tracer.proxy(new)
            copies[new.name] = old.name
            if recording:
                # a replay inside a call being recorded (the second RMSNorm of a Llama
                # block): its nodes are that template's too, made where a trace makes them
                self.note_created(new, rec.name, rec.inner + outer)
        if template.nodes:
            tracer.note_params(sys._getframe(1))
        for p, count in template.calls.items():
            moved_path = _moved(p, template.path, path)
            tracer.num_calls[moved_path] = tracer.num_calls.get(moved_path, 0) + count
        self.segments.append(segment)
        return _reproxy(template.output, env, tracer)


NodeMaker = Callable[
    [str, Any, tuple[Any, ...], dict[str, Any], str | None, str | None, Any], torch.fx.Node
]


def _node_maker(graph: torch.fx.Graph) -> NodeMaker:
    """``graph.create_node`` for copies: the same node, name and place in the graph, without
    the per-node scan of the arguments for raw symbolic sizes (a copy's arguments are its
    template's with other nodes, which passed it) and with the template's name candidate
    (``_snake_case`` of the same target). ``create_node`` itself when the graph lacks the parts
    this uses, has node-creation hooks, or when this torch's ``create_node`` does anything
    more (:func:`fast_path_agrees`)."""
    fast = _fast_maker(graph) if fast_path_agrees() else None
    if fast is not None:
        return fast

    def slow(op, target, args, kwargs, name, candidate, type_expr):  # type: ignore[no-untyped-def]
        return graph.create_node(op, target, args, kwargs, name, type_expr)

    return slow


def _fast_maker(graph: torch.fx.Graph) -> NodeMaker | None:
    namespace = getattr(graph, "_graph_namespace", None)
    insert = getattr(graph, "_insert", None)
    table = getattr(graph, "_find_nodes_lookup_table", None)
    owner = graph.owning_module
    hooks = getattr(owner, "_create_node_hooks", None) if owner is not None else None
    if namespace is None or insert is None or table is None or hooks or not hasattr(graph, "_len"):
        return None
    node_type = torch.fx.Node
    empty = torch.fx.immutable_collections.immutable_dict

    def make(op, target, args, kwargs, name, candidate, type_expr):  # type: ignore[no-untyped-def]
        if candidate is None:
            candidate = name if name is not None else graph._target_to_str(target)
        name = namespace.create_name(candidate, None)
        node = node_type(graph, name, op, target, args, kwargs or empty(), type_expr)
        namespace.associate_name_with_obj(name, node)
        insert(node)
        table.insert(node)
        graph._len += 1
        return node

    return make


@functools.cache
def fast_path_agrees() -> bool:
    """Whether :func:`_fast_maker` leaves a graph as this torch's ``create_node`` does: the
    same nodes (names, order, attributes, users), the same graph attributes and node count,
    and the same answers from ``find_nodes``."""
    import operator

    def build(fast: bool) -> torch.fx.Graph | None:
        graph = torch.fx.Graph()
        x = graph.placeholder("x")
        make = _fast_maker(graph) if fast else None
        if fast and make is None:
            return None
        prev = x
        steps: list[tuple[str, Any]] = [
            ("call_function", operator.add), ("call_method", "relu"),
            ("call_function", operator.add), ("call_module", "block.fc"),
            ("get_attr", "block.weight"),
        ]  # fmt: skip
        for op, target in steps:
            args: tuple[Any, ...] = (prev, [prev, 2]) if op != "get_attr" else ()
            if make is not None:
                prev = make(op, target, args, {}, None, None, None)
            else:
                prev = graph.create_node(op, target, args, {}, None, None)
        graph.output(prev)
        return graph

    def state(graph: torch.fx.Graph) -> Any:
        nodes = [
            (
                n.name,
                n.op,
                n.target,
                str(n.args),
                str(n.kwargs),
                sorted(vars(n)),
                n.meta,
                [u.name for u in n.users],
                [i.name for i in n.all_input_nodes],
            )
            for n in graph.nodes
        ]
        queries: list[tuple[str, Any]] = [("call_function", operator.add), ("call_method", "relu")]
        found = [[n.name for n in graph.find_nodes(op=op, target=target)] for op, target in queries]
        count = graph._len
        return nodes, sorted(vars(graph)), count, found, graph.python_code("self").src

    try:
        fast = build(True)
        return fast is not None and state(fast) == state(build(False))  # type: ignore[arg-type]
    except Exception:
        return False


def _names_a_proxy(value: Any, depth: int = 0) -> bool:
    if isinstance(value, str):
        return "Proxy(" in value
    if depth < 6 and isinstance(value, (tuple, list)):
        return any(_names_a_proxy(v, depth + 1) for v in value)
    if depth < 6 and isinstance(value, dict):
        return any(_names_a_proxy(v, depth + 1) for v in value.values())
    if isinstance(value, slice):
        return _names_a_proxy((value.start, value.stop, value.step), depth + 1)
    return False


def _moved(text: str, old: str, new: str) -> str:
    """``old`` (a module path prefix of ``text``) replaced by ``new``."""
    if text == old:
        return new
    if text.startswith(old + ".") or text.startswith(old + "@"):
        return new + text[len(old) :]
    return text


def _unproxy(value: Any, inside: set[torch.fx.Node], depth: int = 0) -> Any:
    if type(value) in PROXIES:
        return value.node if value.node in inside else _NOT_REPLAYABLE
    if depth < 4 and type(value) in (tuple, list):
        items = [_unproxy(v, inside, depth + 1) for v in value]
        if any(i is _NOT_REPLAYABLE for i in items):
            return _NOT_REPLAYABLE
        return type(value)(items)
    return _NOT_REPLAYABLE


def _reproxy(value: Any, env: dict[torch.fx.Node, torch.fx.Node], tracer: TracerHooks) -> Any:
    if isinstance(value, torch.fx.Node):
        return tracer.proxy(env[value])
    return type(value)(_reproxy(v, env, tracer) for v in value)


def copies(segments: Iterable[Segment]) -> dict[str, tuple[str, Segment]]:
    """Copied node name -> (template node name, its segment), for shape propagation."""
    out: dict[str, tuple[str, Segment]] = {}
    for segment in segments:
        for new, old in segment.copies.items():
            out[new] = (old, segment)
    return out


def compact(modules: Iterable[Any], copied: dict[int, tuple[Any, dict[int, int]]]) -> None:
    """Make the records of copied nodes wire-ready. A result arrives with its whole records in
    ``nodes`` and, in ``node_copies``, the copies the capture made (each expands to its
    record); ``copied`` names the whole records of copies that could not be made so (node
    names inside argument texts). Those are sent as ``NodeCopy`` values with ``texts`` where
    expanding them gives the record exactly, and each run of copies made for one sub-block as
    one ``BlockCopy`` where its copies are those; the engine expands them when it takes the
    result (``fxls.protocol.copies.expanded``), so it sees every record as before."""
    for mod in modules:
        found = copied.get(id(mod))
        listed = found[1] if found is not None and found[0] is mod else {}
        if not listed and not mod.node_copies:
            continue
        made = mod.block_copies  # made from their runs already (``records.blocks``)
        records = _placed(mod)
        total = len(records)
        copies: list[NodeCopy] = list(mod.node_copies)
        for at, of in sorted(listed.items()):
            if not 0 <= of < at < total:
                continue
            node, template = records[at], records[of]
            if not isinstance(node, NodeInfo) or not isinstance(template, NodeInfo):
                continue
            renamed = {}
            for old, new in zip(template.args, node.args):
                if old.node is not None and new.node is not None:
                    renamed[old.node] = new.node
            copy = NodeCopy(
                at=at, of=of, name=node.name, target=node.target,
                module_path=node.module_path, users=node.users, inputs=list(node.inputs),
                renamed=renamed,
            )  # fmt: skip
            if node_matches(copy, template, node):
                copies.append(copy)
                continue
            copy.texts = True  # node names inside lists or tuples of arguments
            if node_matches(copy, template, node):
                copies.append(copy)
        copies.sort(key=lambda c: c.at)
        for copy in copies:
            records[copy.at] = copy
        placed = typing.cast(list[NodeInfo | NodeCopy | BlockCopy], records)
        singles, blocks = _blocks(copies, placed)
        mod.nodes = [r for r in placed if isinstance(r, NodeInfo)]
        mod.node_copies = singles
        mod.block_copies = sorted([*made, *blocks], key=lambda b: b.at)


def _placed(mod: Any) -> list[NodeInfo | NodeCopy | BlockCopy | None]:
    """``mod``'s records in index order: each copy at its index, a block copy at each of its
    copies' indexes, the whole records in the places left."""
    made: list[BlockCopy] = mod.block_copies
    total = len(mod.nodes) + len(mod.node_copies) + sum(len(b.names) for b in made)
    records: list[NodeInfo | NodeCopy | BlockCopy | None] = [None] * total
    for copy in mod.node_copies:
        records[copy.at] = copy
    for block in made:
        records[block.at : block.at + len(block.names)] = [block] * len(block.names)
    whole = iter(mod.nodes)
    for i in range(total):
        if records[i] is None:
            records[i] = next(whole)
    return records


def _blocks(
    copies: list[NodeCopy], nodes: list[NodeInfo | NodeCopy | BlockCopy]
) -> tuple[list[NodeCopy], list[BlockCopy]]:
    """``copies`` (in index order) as runs (``BlockCopy``) where a run's copies are exactly
    what its ``BlockCopy`` gives, and single copies for the rest."""
    singles: list[NodeCopy] = []
    blocks: list[BlockCopy] = []
    start = 0
    while start < len(copies):
        end = start + 1
        while (
            end < len(copies)
            and copies[end].at == copies[end - 1].at + 1
            and copies[end].of == copies[end - 1].of + 1
        ):
            end += 1
        run = copies[start:end]
        block = _block(run, nodes) if len(run) > 1 else None
        if block is not None:
            blocks.append(block)
        else:
            singles.extend(run)
        start = end
    return singles, blocks


def _block(run: list[NodeCopy], nodes: list[NodeInfo | NodeCopy | BlockCopy]) -> BlockCopy | None:
    first = run[0]
    if first.of + len(run) > first.at:
        return None  # a template inside the run
    span = range(first.of, first.of + len(run))
    if any(isinstance(nodes[i], BlockCopy) for i in span):
        return None  # a template inside a block copy made already
    records = typing.cast(list[NodeInfo | NodeCopy], nodes)
    templates = [whole_record(records, i) for i in span]
    old = new = ""
    for copy, template in zip(run, templates):
        if copy.module_path and template.module_path and copy.module_path != template.module_path:
            old, new = _differing_prefix(template.module_path, copy.module_path)
            break
    inside = {t.name for t in templates}
    outer: dict[str, str] = {}
    for copy, template in zip(run, templates):
        for was, now in [*zip(template.inputs, copy.inputs), *copy.renamed.items()]:
            if was not in inside and was != now:
                outer[was] = now
    block = BlockCopy(
        at=first.at, of=first.of, names=[c.name for c in run], template_path=old, path=new,
        users=[c.users for c in run], outer=outer,
        texts=[i for i, c in enumerate(run) if c.texts],
    )  # fmt: skip
    return block if block_gives(block, templates, run) else None


def _differing_prefix(old: str, new: str) -> tuple[str, str]:
    """``("h.0", "h.1")`` for ``"h.0.attn"`` and ``"h.1.attn"``: the paths without the dotted
    parts they end with alike."""
    a, b = old.split("."), new.split(".")
    while len(a) > 1 and len(b) > 1 and a[-1] == b[-1]:
        a.pop()
        b.pop()
    return ".".join(a), ".".join(b)
