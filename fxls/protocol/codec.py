"""Dataclass trees to JSON-ready values and back, with type checks on the way in.

``to_dict`` is fast on large results (field names looked up once per class); ``from_dict``
builds a checking converter once per type and raises ``ProtocolError`` naming the field that
does not match. Standard library only.
"""

from __future__ import annotations

import dataclasses
import sys
import types
import typing
from typing import Any, Literal, TypeVar, Union

T = TypeVar("T")


_SCALARS = (str, int, float, bool, type(None))
_PLAIN = frozenset(_SCALARS)
"""Exactly these types are returned as they are without a call (subclasses by ``_SCALARS``)."""
_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def to_dict(obj: Any) -> Any:
    """Dataclass tree -> JSON-ready dict (recursively).

    Results of large models hold tens of thousands of dataclasses, so field names are looked up
    once per class, and plain values (and lists) are taken without a call of their own.
    """
    kind = type(obj)
    if kind in _PLAIN:
        return obj
    names = _FIELD_NAMES.get(kind)
    if names is not None:
        out = {}
        for name in names:
            value = getattr(obj, name)
            out[name] = value if type(value) in _PLAIN else to_dict(value)
        return out
    if kind is list:
        return [v if type(v) in _PLAIN else to_dict(v) for v in obj]
    if isinstance(obj, _SCALARS):
        return obj
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        _FIELD_NAMES[kind] = tuple(f.name for f in dataclasses.fields(obj))
        return to_dict(obj)
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    if isinstance(obj, dict):
        return {str(k): to_dict(v) for k, v in obj.items()}
    return obj


class ProtocolError(ValueError):
    """A frame or object that does not match the contract."""


_HINTS_CACHE: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    hints = _HINTS_CACHE.get(cls)
    if hints is None:
        hints = typing.get_type_hints(cls, vars(sys.modules[cls.__module__]))
        _HINTS_CACHE[cls] = hints
    return hints


Converter = typing.Callable[[Any], Any]
_CONVERTERS: dict[Any, Converter] = {}


class _FieldError(ProtocolError):
    """A conversion error; ``path`` is filled in on the way out, so the hot path builds no text."""

    def __init__(self, message: str, path: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.path = path

    def at(self, segment: str) -> _FieldError:
        return _FieldError(self.message, segment + self.path)

    def __str__(self) -> str:
        return f"{self.path.lstrip('.')}: {self.message}" if self.path else self.message


def _converter(tp: Any) -> Converter:
    """A checking converter for type ``tp``, built once per type and cached."""
    conv = _CONVERTERS.get(tp)
    if conv is None:
        conv = _build_converter(tp)
        _CONVERTERS[tp] = conv
    return conv


_SCALAR_TESTS: dict[Any, typing.Callable[[Any], bool]] = {
    int: lambda v: isinstance(v, int) and not isinstance(v, bool),
    float: lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    str: lambda v: isinstance(v, str),
    bool: lambda v: isinstance(v, bool),
}
"""For scalar options of a union: whether the option's converter accepts the value."""


MAX_ANY_DEPTH = 32
"""Deepest nesting accepted in an untyped (``Any``) field; typed fields bound the rest."""


def _any_value(value: Any) -> Any:
    """An untyped field: any JSON value, nested at most ``MAX_ANY_DEPTH`` levels.

    A result frame can come from hostile code; without a bound a deep value passes here and
    fails later, when it is encoded again or decoded by the server.
    """
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (list, dict)):
            if depth >= MAX_ANY_DEPTH:
                raise _FieldError(f"nested deeper than {MAX_ANY_DEPTH} levels")
            stack.extend(
                (v, depth + 1) for v in (item.values() if isinstance(item, dict) else item)
            )
    return value


def _item_error(item: Converter, value: list[Any]) -> _FieldError:
    """The error of the first item of ``value`` that ``item`` refuses, with its place."""
    for i, v in enumerate(value):
        try:
            item(v)
        except _FieldError as exc:
            return exc.at(f"[{i}]")
    return _FieldError("an item was refused once and accepted again")


def _build_converter(tp: Any) -> Converter:
    origin = typing.get_origin(tp)
    if tp is Any:
        return _any_value
    if origin in (Union, types.UnionType):
        options = [o for o in typing.get_args(tp) if o is not type(None)]
        nullable = len(options) < len(typing.get_args(tp))
        option_convs = [_converter(o) for o in options]
        if len(option_convs) == 1:
            (only,) = option_convs

            def optional(value: Any) -> Any:
                return None if value is None and nullable else only(value)

            return optional

        # scalar options are tried by type first: a failed conversion raises, which costs
        # more than the conversion (a shape's dimensions are ``int | str``)
        accepts = [_SCALAR_TESTS.get(o) for o in options]

        def union(value: Any) -> Any:
            if value is None and nullable:
                return None
            errors = []
            for accept, conv in zip(accepts, option_convs):
                if accept is not None and not accept(value):
                    continue
                try:
                    return conv(value)
                except _FieldError as exc:
                    errors.append(str(exc))
            for accept, conv in zip(accepts, option_convs):
                if accept is not None and not accept(value):
                    try:
                        conv(value)
                    except _FieldError as exc:
                        errors.append(str(exc))
            raise _FieldError(f"{value!r:.80} matches no option ({'; '.join(errors)})")

        return union
    if origin is Literal:
        allowed = typing.get_args(tp)

        def literal(value: Any) -> Any:
            if value not in allowed:
                raise _FieldError(f"{value!r:.80} is not one of {allowed}")
            return value

        return literal
    if origin is list:
        (item_tp,) = typing.get_args(tp) or (Any,)
        item = _converter(item_tp)

        def as_list(value: Any) -> Any:
            if not isinstance(value, list):
                raise _FieldError(f"expected a list, got {type(value).__name__}")
            try:
                return [item(v) for v in value]
            except _FieldError:
                raise _item_error(item, value) from None

        return as_list
    if origin is dict:
        _, val_tp = typing.get_args(tp) or (str, Any)
        val = _converter(val_tp)

        def as_dict(value: Any) -> Any:
            if not isinstance(value, dict):
                raise _FieldError(f"expected an object, got {type(value).__name__}")
            out = {}
            for k, v in value.items():
                try:
                    out[str(k)] = val(v)
                except _FieldError as exc:
                    raise exc.at(f".{k}") from None
            return out

        return as_dict
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _dataclass_converter(tp)
    if tp is float:

        def as_float(value: Any) -> Any:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise _FieldError(f"expected a number, got {value!r:.80}")
            return float(value)

        return as_float
    if tp is int:

        def as_int(value: Any) -> Any:
            if isinstance(value, bool) or not isinstance(value, int):
                raise _FieldError(f"expected an int, got {value!r:.80}")
            return value

        return as_int
    if tp in (str, bool):

        def exact(value: Any) -> Any:
            if not isinstance(value, tp):
                raise _FieldError(f"expected {tp.__name__}, got {value!r:.80}")
            return value

        return exact
    return lambda value: value


def _dataclass_converter(cls: type) -> Converter:
    hints = _hints(cls)
    fields = []
    required = []
    for f in dataclasses.fields(cls):
        fields.append((f.name, f"{f.name}"))
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            required.append(f.name)
    # Field converters are looked up lazily: dataclasses may refer to each other.
    convs: list[tuple[str, Converter]] = []

    def convert(value: Any) -> Any:
        if not isinstance(value, dict):
            raise _FieldError(f"expected an object, got {type(value).__name__}")
        if not convs:
            convs.extend([(name, _converter(hints[name])) for name, _ in fields])
        kwargs = {}
        for name, conv in convs:
            if name in value:
                try:
                    kwargs[name] = conv(value[name])
                except _FieldError as exc:
                    raise exc.at(f".{name}") from None
        for name in required:
            if name not in kwargs:
                raise _FieldError(f"missing field {name!r}")
        try:
            return cls(**kwargs)
        except ValueError as exc:  # a check of the class itself (``__post_init__``)
            raise _FieldError(str(exc)) from None

    return convert


def from_dict(cls: type[T], data: Any, where: str | None = None) -> T:
    """JSON-decoded dict -> dataclass ``cls``, checking types; raises ProtocolError."""
    try:
        return typing.cast(T, _converter(cls)(data))
    except _FieldError as exc:
        raise ProtocolError(f"{where or cls.__name__}{exc.at('').path}: {exc.message}") from None
