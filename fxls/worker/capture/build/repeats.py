"""Repeated constructions on the meta device: the third identical block onwards is a copy.

``nn.ModuleList([Block(config) for _ in range(48)])`` runs ``Block.__init__`` 48 times with the
same arguments, and on the meta device every run builds the same tree: the same submodules,
parameter shapes and attributes, with no values to differ. While a meta build runs
(:func:`copies_of_repeats`), each ``__init__`` of a module class the document defines is
wrapped: the first two calls with equal arguments run for real, and when the two instances they
built are alike (:func:`_plan`), later calls with equal arguments give their instance a copy
of the first one's tree instead of running ``__init__``: new module objects, new parameters
and buffers of the same shapes, strides, dtypes and ``requires_grad``, containers copied,
and the objects both real runs shared (the configuration, a function, a class) shared again.

Copying is exact or it does not happen. Arguments are equal when they are the same numbers,
strings, dtypes, classes and functions, or the same objects with the same plain attributes
(a configuration changed between two calls is not equal to itself); a module, a tensor or
anything else among them runs ``__init__`` every time. Two real instances are alike when
their trees match node by node: module classes, attribute names in order, tensors of equal
metadata that are their own (on a device with values, equal values too), ties inside the
tree in the same places, equal plain values, and the same object wherever an attribute is not
a plain value; any hook, ``__slots__`` class or attribute that is neither makes every call
run ``__init__`` (a counter read in ``__init__`` differs between the two and does too).
``FXLS_COPY_REPEATS=0`` turns it off.
"""

from __future__ import annotations

import collections
import contextlib
import enum
import functools
import os
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from fxls.worker.capture.trace import reuse

COPY_ENV = "FXLS_COPY_REPEATS"
"""Set to ``0`` to run every ``__init__`` of a meta build."""

_MAX_DEPTH = 8
_HOOKS = (
    "_forward_hooks",
    "_forward_pre_hooks",
    "_forward_hooks_with_kwargs",
    "_forward_pre_hooks_with_kwargs",
    "_forward_hooks_always_called",
    "_backward_hooks",
    "_backward_pre_hooks",
    "_state_dict_hooks",
    "_state_dict_pre_hooks",
    "_load_state_dict_pre_hooks",
    "_load_state_dict_post_hooks",
)
_ATOMS = (type(None), bool, int, float, complex, str, bytes)
_ATOM_TYPES = frozenset(_ATOMS)
_TENSORS = (torch.Tensor, nn.Parameter)
_CONTAINERS = frozenset({dict, collections.OrderedDict, list, set})


class _Unequal(Exception):
    """The two instances differ, or hold something a copy could not give."""


def enabled() -> bool:
    return os.environ.get(COPY_ENV, "1") != "0"


@contextlib.contextmanager
def copies_of_repeats(namespace: dict[str, Any]) -> Iterator[None]:
    """While a meta build runs: repeated constructions of the module classes defined in
    ``namespace`` (the document's) are copies of the first (see the module's docstring)."""
    if not enabled():
        yield
        return
    name = namespace.get("__name__")
    classes = [
        value
        for value in list(namespace.values())
        if isinstance(value, type)
        and issubclass(value, nn.Module)
        and value.__module__ == name
        and "__init__" in vars(value)
        and not _slotted(value)
    ]
    seen: dict[Any, Any] = {}
    originals = [(cls, vars(cls)["__init__"]) for cls in classes]
    for cls, init in originals:
        type.__setattr__(cls, "__init__", _wrapped(cls, init, seen))
    try:
        yield
    finally:
        for cls, init in originals:
            type.__setattr__(cls, "__init__", init)


def _slotted(cls: type) -> bool:
    return any("__slots__" in vars(base) for base in cls.__mro__ if base is not object)


_NEVER = object()


def _wrapped(cls: type, init: Any, seen: dict[Any, Any]) -> Any:
    @functools.wraps(init)
    def __init__(self: nn.Module, *args: Any, **kwargs: Any) -> None:
        if type(self) is not cls:  # a subclass's ``super().__init__``: its own tree
            init(self, *args, **kwargs)
            return
        key = _key(cls, args, kwargs)
        # per key: nothing yet, the first instance, a plan to copy it, or _NEVER
        state = seen.get(key) if key is not None else _NEVER
        if isinstance(state, _Plan):
            self.__dict__.update(state.copy())
            return
        init(self, *args, **kwargs)
        if state is None:
            seen[key] = self
        elif isinstance(state, nn.Module):
            try:
                seen[key] = _Plan(state, _plan(state, self))
            except (_Unequal, RecursionError):
                seen[key] = _NEVER

    return __init__


# -- arguments ------------------------------------------------------------------------------


def _key(cls: type, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """What makes two calls of ``cls(...)`` equal; None when that cannot be said."""
    try:
        values = tuple(_value(a, 0) for a in args)
        named = tuple(sorted((k, _value(v, 0)) for k, v in kwargs.items()))
        key = (cls, values, named)
        hash(key)
    except (_Unequal, TypeError, RecursionError):
        return None
    return key


def _value(value: Any, depth: int) -> Any:
    """A hashable description of an argument: equal for arguments a build cannot tell
    apart (plain values as a replay's fingerprint describes them, objects by
    :func:`_object`)."""
    return reuse.plain(value, depth, limit=_MAX_DEPTH, other=_object)


def _object(value: Any, depth: int) -> Any:
    """An object (a configuration): itself, as it is now. Raises for a module, a tensor and
    anything without plain attributes."""
    if depth >= _MAX_DEPTH or isinstance(value, (nn.Module, torch.Tensor)):
        raise _Unequal
    attributes = getattr(value, "__dict__", None)
    if type(attributes) is not dict or _slotted(type(value)):
        raise _Unequal
    return ("object", id(value), _value(attributes, depth + 1))


# -- comparing two real instances -----------------------------------------------------------


class _Plan:
    """How to copy ``first``: which of the objects in its tree are shared, not copied."""

    def __init__(self, first: nn.Module, shared: set[int]) -> None:
        self.shared = shared
        self.state = self._dict(first.__dict__)
        """``first``'s tree as it was when the plan was made (nothing else holds it: what
        the program later does to ``first`` is not copied)."""

    def copy(self) -> dict[str, Any]:
        """A new ``__dict__`` for an instance alike ``first``."""
        return self._dict(self.state)

    def _dict(self, state: dict[str, Any]) -> dict[str, Any]:
        memo: dict[int, Any] = {}
        # torch's function modes (the meta build's) have nothing to say about a copy
        with torch.no_grad(), torch._C.DisableTorchFunction():
            return self._items(state.copy(), memo)

    def _items(self, made: dict[Any, Any], memo: dict[int, Any]) -> dict[Any, Any]:
        """``made`` (a copy of a dict) with its values copied; inline for the values of a
        module's ``__dict__``, mostly plain values and empty hook dicts."""
        shared, atoms, containers = self.shared, _ATOM_TYPES, _CONTAINERS
        for key, value in made.items():
            kind = type(value)
            if kind in atoms or id(value) in shared:
                continue
            if kind in containers and not value and id(value) not in memo:
                made[key] = memo[id(value)] = value.copy()
            else:
                made[key] = self._copy(value, memo)
        return made

    def _copy(self, value: Any, memo: dict[int, Any]) -> Any:
        if type(value) in _ATOM_TYPES or id(value) in self.shared:
            return value
        made = memo.get(id(value))
        if made is not None:
            return made
        if isinstance(value, nn.Module):
            made = object.__new__(type(value))
            memo[id(value)] = made
            made.__dict__.update(self._items(value.__dict__.copy(), memo))
        elif isinstance(value, torch.Tensor):
            made = _new_tensor(value)
        elif isinstance(value, dict):
            made = self._items(value.copy(), memo)
        elif isinstance(value, list):
            whole = reuse.one_kind_of_atoms(value) is not None
            made = value.copy() if whole else [self._copy(v, memo) for v in value]
        elif isinstance(value, set):
            made = value.copy()  # of atoms (``_plan``)
        elif type(value) is tuple:
            made = tuple(self._copy(v, memo) for v in value)
        else:  # torch.Size, a named tuple of atoms, or an object ``_plan`` found shared
            return value
        memo[id(value)] = made
        return made


def _new_tensor(tensor: torch.Tensor) -> torch.Tensor:
    if tensor.is_meta:
        made = torch.empty_strided(tensor.shape, tensor.stride(), dtype=tensor.dtype, device="meta")
    else:
        made = tensor.detach().clone()
    if type(tensor) is nn.Parameter:
        return nn.Parameter(made, requires_grad=tensor.requires_grad)
    return made.requires_grad_(tensor.requires_grad) if tensor.requires_grad else made


def _plan(first: nn.Module, second: nn.Module) -> set[int]:
    """The ``id`` of each object both trees hold (shared, not copied); raises ``_Unequal``
    unless the trees are alike."""
    walk = _Walk()
    with torch._C.DisableTorchFunction():
        walk.alike(first, second, 0)
    return walk.shared


def _require(condition: bool) -> None:
    if not condition:
        raise _Unequal


_VALUES = (torch.dtype, torch.device, torch.memory_format, torch.layout, enum.Enum)


class _Walk:
    def __init__(self) -> None:
        self.pairs: dict[int, int] = {}
        """``id`` in the first tree -> ``id`` of its counterpart in the second."""
        self.seconds: set[int] = set()
        self.shared: set[int] = set()

    def alike(self, a: Any, b: Any, depth: int) -> None:
        if depth > 32:
            raise _Unequal
        if a is b:
            self._same(a)
        elif type(a) is not type(b):
            raise _Unequal
        elif isinstance(a, (*_ATOMS, *_VALUES)):
            _require(a == b)
        elif self._paired(a, b):
            self._contents(a, b, depth)

    def _same(self, value: Any) -> None:
        """One object in both trees: shared by the copies too, unless it is a module or a
        tensor (from outside the tree: ``__init__`` keeps running, simpler than telling)."""
        if isinstance(value, (nn.Module, torch.Tensor)):
            raise _Unequal
        if not isinstance(value, _ATOMS):
            self.shared.add(id(value))

    def _paired(self, a: Any, b: Any) -> bool:
        """Whether ``a`` and ``b`` are met for the first time (their contents still to
        compare); raises when ties differ between the trees."""
        known = self.pairs.get(id(a))
        if known is not None:
            _require(known == id(b))  # tied in one tree, not in the other
            return False
        _require(id(b) not in self.seconds)  # two objects of the first tree are one here
        self.pairs[id(a)] = id(b)
        self.seconds.add(id(b))
        return True

    def _contents(self, a: Any, b: Any, depth: int) -> None:
        kind = type(a)
        if isinstance(a, nn.Module):
            self._modules(a, b, depth)
        elif isinstance(a, torch.Tensor):
            self._tensors(a, b)
        elif kind in (list, tuple):
            _require(len(a) == len(b))
            atoms = reuse.one_kind_of_atoms(a)
            if atoms is not None:  # compared in C: equal items of the same type
                _require(reuse.one_kind_of_atoms(b) is atoms and a == b)
                return
            for x, y in zip(a, b, strict=True):
                self.alike(x, y, depth + 1)
        elif kind in (dict, collections.OrderedDict):
            _require(list(a) == list(b))
            for k in a:
                self.alike(a[k], b[k], depth + 1)
        elif kind is set or isinstance(a, tuple):  # torch.Size, a named tuple: shared
            _require(a == b and all(isinstance(v, _ATOMS) for v in a))
        else:  # a new object of each run (a helper, a bound method): not copied
            raise _Unequal

    def _modules(self, a: nn.Module, b: nn.Module, depth: int) -> None:
        if _slotted(type(a)) or list(a.__dict__) != list(b.__dict__):
            raise _Unequal
        for name in _HOOKS:
            if a.__dict__.get(name) or b.__dict__.get(name):
                raise _Unequal
        for name, value in a.__dict__.items():
            self.alike(value, b.__dict__[name], depth + 1)

    @staticmethod
    def _tensors(a: torch.Tensor, b: torch.Tensor) -> None:
        if type(a) not in _TENSORS:
            raise _Unequal
        if (
            a.shape != b.shape
            or a.stride() != b.stride()
            or a.dtype != b.dtype
            or a.device != b.device
            or a.requires_grad != b.requires_grad
            or a.storage_offset() != 0
            or b.storage_offset() != 0
            or a.layout != torch.strided
            or a.is_quantized
        ):
            raise _Unequal
        if not a.is_meta and not torch.equal(a, b):
            raise _Unequal
