"""Name every argument of an FX call node.

``named_arguments(root, node, examples)`` returns one :class:`~fxls.protocol.model.Arg`
per parameter of the called thing, in signature order, plus where the signature came from:

- ``module.forward``: ``call_module`` nodes, from ``inspect.signature`` of the submodule's
  ``forward``;
- ``python``: Python functions and methods (``F.relu``, ``torch.split``, ``Tensor.split``,
  ``operator.add``, ``math.sqrt``, functions wrapped with ``torch.fx.wrap``), through
  ``inspect.signature``; ``boolean_dispatch`` functions (``F.max_pool2d``) use the branch
  the flag selects;
- ``aten``: C builtins (``torch.add``, ``torch.cat``) and Tensor methods (``x.view``), from
  the TorchScript schemas of the ATen operator, choosing the overload that binds and whose
  parameter types match the argument types (from ``examples``, node metadata, or a guess);
- ``approximate``: the lambdas of ``torch.overrides.get_testing_overrides()``;
- ``none``: nothing better was found; arguments are listed as ``arg0``, ``arg1``...

Default rule: ``Arg.default`` is True when the call did not pass the parameter, so the
signature's default applies. Python functions defined in ``torch`` (``torch.nn.functional``,
``torch.functional``) forward every argument through ``handle_torch_function``, so FX records
their defaults as if the user had written them; for those functions a recorded value equal to
``param.default`` (same type, equal value) also counts as default. A user who writes the default
value explicitly (``F.relu(x, inplace=False)``) therefore sees it marked default as well.

Parameters users never write are not listed: ``out`` (unless given), ``implicit`` of
``Tensor.expand``, and underscore-prefixed parameters of torch functions at their default
(``_stacklevel``).
"""

from __future__ import annotations

import builtins
import inspect
import keyword
import math
import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx

from fxls.protocol.model import Arg

__all__ = [
    "Choice",
    "float_literal",
    "format_value",
    "named_arguments",
    "named_like",
]

_EMPTY = inspect.Parameter.empty
_MISSING = object()

# ---------------------------------------------------------------------------------------
# Formatting
# ---------------------------------------------------------------------------------------

_MEMORY_FORMATS = {
    0: "torch.contiguous_format",
    1: "torch.preserve_format",
    2: "torch.channels_last",
    3: "torch.channels_last_3d",
}
_LAYOUTS = {0: "torch.strided", 1: "torch.sparse_coo"}
_SCALAR_TYPES = {
    0: "torch.uint8",
    1: "torch.int8",
    2: "torch.int16",
    3: "torch.int32",
    4: "torch.int64",
    5: "torch.float16",
    6: "torch.float32",
    7: "torch.float64",
    8: "torch.complex32",
    9: "torch.complex64",
    10: "torch.complex128",
    11: "torch.bool",
    15: "torch.bfloat16",
}
_MAX_TEXT = 120


def format_value(value: Any) -> str:
    """Source-like text for an FX argument.

    Nodes print as their names, containers recursively (``(2, 2)``, ``[a, b]``), slices in
    subscript form (``:T``, ``0:2``, ``::2``), ``...`` for Ellipsis, dtypes and other torch
    enums qualified (``torch.float32``, ``torch.contiguous_format``).
    """
    text = _format(value)
    if len(text) > _MAX_TEXT:
        text = text[: _MAX_TEXT - 3] + "..."
    return text


def float_literal(value: float, quote: str = "'") -> str:
    """Python source for a float: ``repr``, and ``float('inf')``, ``float('-inf')``,
    ``float('nan')`` (with ``quote``) for the values ``repr`` cannot write back."""
    if math.isinf(value):
        return f"float({quote}{'inf' if value > 0 else '-inf'}{quote})"
    if math.isnan(value):
        return f"float({quote}nan{quote})"
    return repr(value)


def _format(value: Any) -> str:
    if isinstance(value, torch.fx.Node):
        return value.name
    if value is None or isinstance(value, (bool, int, str)):
        return repr(value)
    if isinstance(value, float):
        return float_literal(value)
    if value is Ellipsis:
        return "..."
    if isinstance(value, slice):
        parts = ["" if p is None else _format(p) for p in (value.start, value.stop)]
        text = ":".join(parts)
        if value.step is not None:
            text += ":" + _format(value.step)
        return text
    if isinstance(value, torch.Size):
        return "torch.Size([" + ", ".join(_format(v) for v in value) + "])"
    if isinstance(value, tuple):
        items = [_format(v) for v in value]
        return "(" + items[0] + ",)" if len(items) == 1 else "(" + ", ".join(items) + ")"
    if isinstance(value, list):
        return "[" + ", ".join(_format(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_format(k)}: {_format(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (torch.dtype, torch.memory_format, torch.layout)):
        return str(value)  # torch.float32, torch.contiguous_format, torch.strided
    if isinstance(value, torch.device):
        return f"torch.device({str(value)!r})"
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return str(value)
    if isinstance(value, torch.Tensor):
        dims = ", ".join(str(d) for d in value.shape)
        return f"Tensor([{dims}], {str(value.dtype).removeprefix('torch.')})"
    if isinstance(value, complex):
        return repr(value)
    if callable(value) and hasattr(value, "__qualname__"):
        module = getattr(value, "__module__", None) or ""
        return f"{module}.{value.__qualname__}" if module else value.__qualname__
    try:
        return repr(value)
    except Exception:
        return f"<{type(value).__name__}>"


# ---------------------------------------------------------------------------------------
# Signatures
# ---------------------------------------------------------------------------------------


@dataclass
class _Sig:
    """A signature plus how to display and bind it."""

    signature: inspect.Signature
    source: str
    default_text: dict[str, str] = field(default_factory=dict)
    """Display text of defaults that ``format_value(param.default)`` gets wrong."""
    types: dict[str, Any] = field(default_factory=dict)
    """Parameter name -> TorchScript type (aten signatures), for overload choice."""
    fixed: dict[str, int] = field(default_factory=dict)
    """Fixed-size list parameters (``int[2]``), which also accept one scalar."""
    hidden: frozenset[str] = frozenset()
    fills_defaults: bool = False
    """FX records defaults as explicit values (torch Python functions)."""
    pack: str | None = None
    """Int-list parameter that also takes its items as varargs (``x.view(2, -1)``)."""


_fn_cache: dict[Any, list[_Sig]] = {}
_method_cache: dict[tuple[type, str], list[_Sig]] = {}
_module_cache: dict[type, _Sig | None] = {}
_overrides: dict[Any, Callable[..., Any]] | None = None

_HIDDEN_ATEN = frozenset({"out", "implicit"})
_BUILTIN_SIGNATURES: dict[Any, inspect.Signature] = {
    builtins.getattr: inspect.Signature(
        [
            inspect.Parameter("obj", inspect.Parameter.POSITIONAL_ONLY),
            inspect.Parameter("name", inspect.Parameter.POSITIONAL_ONLY),
        ]
    ),
}


def _is_generic(sig: inspect.Signature) -> bool:
    """``(*args, **kwargs)``: a wrapper that tells nothing."""
    kinds = [p.kind for p in sig.parameters.values()]
    return kinds == [inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD]


def _python_signature(fn: Any) -> inspect.Signature | None:
    if fn in _BUILTIN_SIGNATURES:
        return _BUILTIN_SIGNATURES[fn]
    try:
        sig = inspect.signature(inspect.unwrap(fn))
    except (TypeError, ValueError):
        return None
    return None if _is_generic(sig) else sig


def _is_torch_python(fn: Any) -> bool:
    module = getattr(fn, "__module__", None) or ""
    try:
        return inspect.isfunction(inspect.unwrap(fn)) and module.split(".")[0] == "torch"
    except ValueError:  # a __wrapped__ cycle
        return False


def _python_sig(fn: Any) -> _Sig | None:
    sig = _python_signature(fn)
    if sig is None:
        return None
    return _Sig(sig, "python", fills_defaults=_is_torch_python(fn))


def _schema_default_text(arg: Any) -> str:
    value = arg.default_value
    kind = _base_type(arg.real_type).kind()
    if value is None:
        return "None"
    if kind == "MemoryFormatType" and isinstance(value, int):
        return _MEMORY_FORMATS.get(value, repr(value))
    if kind == "LayoutType" and isinstance(value, int):
        return _LAYOUTS.get(value, repr(value))
    if kind == "ScalarTypeType" and isinstance(value, int):
        return _SCALAR_TYPES.get(value, repr(value))
    if isinstance(value, list) and arg.N is not None:
        if not value:
            return "None"
        if all(v == value[0] for v in value):
            return format_value(value[0])
    return format_value(value)


def _base_type(t: Any) -> Any:
    while t.kind() == "OptionalType":
        t = t.getElementType()
    return t


def _schema_sig(schema: Any, self_name: str) -> _Sig | None:
    """TorchScript schema -> _Sig, with ``self`` renamed to ``self_name``."""
    params: list[inspect.Parameter] = []
    sig = _Sig(inspect.Signature(), "aten", hidden=_HIDDEN_ATEN)
    arguments = list(schema.arguments)
    for arg in arguments:
        name = self_name if arg.name == "self" else arg.name
        if not name.isidentifier() or keyword.iskeyword(name):
            return None
        kind = (
            inspect.Parameter.KEYWORD_ONLY
            if arg.kwarg_only
            else inspect.Parameter.POSITIONAL_OR_KEYWORD
        )
        default = arg.default_value if arg.has_default_value() else _EMPTY
        if default is not _EMPTY:
            sig.default_text[name] = _schema_default_text(arg)
        params.append(inspect.Parameter(name, kind, default=default))
        sig.types[name] = arg.real_type
        if arg.N is not None:
            sig.fixed[name] = arg.N
    try:
        sig.signature = inspect.Signature(params)
    except ValueError:
        return None
    positional = [p for p in params if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
    if arguments and arguments[0].name == "self":
        positional = positional[1:]
    if len(positional) == 1 and positional[0].name not in sig.fixed:
        base = _base_type(sig.types[positional[0].name])
        if base.kind() == "ListType" and base.getElementType().kind() in ("IntType", "SymIntType"):
            sig.pack = positional[0].name
    return sig


def _aten_sigs(qualified: str, self_name: str) -> list[_Sig]:
    try:
        schemas = torch._C._jit_get_schemas_for_operator(qualified)
    except RuntimeError:
        return []
    sigs = [_schema_sig(s, self_name) for s in schemas]
    return [s for s in sigs if s is not None]


def _approximate_sig(fn: Any) -> _Sig | None:
    global _overrides
    if _overrides is None:
        try:
            _overrides = dict(torch.overrides.get_testing_overrides())
        except Exception:
            _overrides = {}
    lam = _overrides.get(fn)
    if lam is None:
        return None
    try:
        sig = inspect.signature(lam)
    except (TypeError, ValueError):
        return None
    return _Sig(sig, "approximate")


def _function_sigs(fn: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> list[_Sig]:
    dispatch = _boolean_dispatch(fn)
    if dispatch is not None:
        flag = kwargs.get(dispatch["arg_name"], _MISSING)
        if flag is _MISSING:
            index = dispatch["index"]
            flag = args[index] if index < len(args) else dispatch["default"]
        fn = dispatch["if_true"] if flag is True else dispatch["if_false"]
    try:
        cached = _fn_cache.get(fn)
    except TypeError:  # unhashable callable
        cached = None
    if cached is not None:
        return cached
    sig = _python_sig(fn)
    sigs = [sig] if sig else []
    if not sigs:
        try:
            qualified = torch.jit._builtins._find_builtin(fn)  # type: ignore[no-untyped-call]
        except Exception:
            qualified = None
        if qualified:
            sigs = _aten_sigs(qualified, "input")
    if not sigs:
        approx = _approximate_sig(fn)
        sigs = [approx] if approx else []
    try:
        _fn_cache[fn] = sigs
    except TypeError:
        pass
    return sigs


def _boolean_dispatch(fn: Any) -> dict[str, Any] | None:
    try:
        from torch._jit_internal import boolean_dispatched
    except ImportError:
        return None
    try:
        return boolean_dispatched.get(fn)
    except TypeError:
        return None


def _method_sigs(receiver_type: type, name: str) -> list[_Sig]:
    key = (receiver_type, name)
    cached = _method_cache.get(key)
    if cached is not None:
        return cached
    attr = inspect.getattr_static(receiver_type, name, None)
    method = getattr(receiver_type, name, None)
    sigs: list[_Sig] = []
    if method is not None and inspect.isfunction(inspect.unwrap(method)):
        sig = _python_sig(method)
        if sig is not None:
            sigs = [sig]
    if not sigs and issubclass(receiver_type, torch.Tensor):
        sigs = _aten_sigs(f"aten::{name}", "self")
    if not sigs and method is not None:
        approx = _approximate_sig(method) or _approximate_sig(attr)
        if approx is not None:
            sigs = [approx]
    if not sigs and method is not None:
        plain = _python_signature(method)
        if plain is not None:
            sigs = [_Sig(plain, "python")]
    _method_cache[key] = sigs
    return sigs


def _module_sig(module: torch.nn.Module) -> _Sig | None:
    cls = type(module)
    per_instance = "forward" in vars(module)
    if not per_instance and cls in _module_cache:
        return _module_cache[cls]
    try:
        sig: _Sig | None = _Sig(inspect.signature(module.forward), "module.forward")
    except (TypeError, ValueError):
        sig = None
    if not per_instance:
        _module_cache[cls] = sig
    return sig


# ---------------------------------------------------------------------------------------
# Argument kinds (for overload choice)
# ---------------------------------------------------------------------------------------

_INT_OPS = frozenset(
    {
        operator.add,
        operator.sub,
        operator.mul,
        operator.floordiv,
        operator.mod,
        operator.neg,
        operator.pow,
    }
)


class _Kinds:
    """Classifies argument values: ``Tensor``, ``int``, ``float``, ``list``, ... or ``?``."""

    def __init__(self, examples: Mapping[str, Any]) -> None:
        self.examples = examples

    def of(self, value: Any, depth: int = 0) -> str:
        if isinstance(value, torch.fx.Node):
            return self.node(value, depth)
        return _constant_kind(value)

    def node(self, node: torch.fx.Node, depth: int = 0) -> str:
        example = self.examples.get(node.name, _MISSING)
        if example is _MISSING:
            example = node.meta.get("val", _MISSING)
        if example is not _MISSING:
            return _constant_kind(example)
        if "tensor_meta" in node.meta:
            return "Tensor"
        if isinstance(node.type, type):
            return _constant_kind_of_type(node.type)
        if depth > 8:
            return "?"
        return self._guess(node, depth + 1)

    def _guess(self, node: torch.fx.Node, depth: int) -> str:
        target, args = node.target, node.args
        if node.op == "placeholder":
            return "Tensor" if node.type is None else "?"
        if node.op == "call_method":
            if target == "size":
                return "int" if len(args) > 1 or "dim" in node.kwargs else "list"
            if target in ("dim", "numel", "ndimension", "nelement", "get_device"):
                return "int"
            if target in ("item", "tolist"):
                return "?"
            return "Tensor"
        if node.op == "call_function":
            if target is builtins.getattr:
                attr = args[1] if len(args) > 1 else None
                if attr == "shape":
                    return "list"
                if attr in ("ndim",):
                    return "int"
                if attr == "dtype":
                    return "dtype"
                if attr == "device":
                    return "device"
                return (
                    "?"
                    if attr not in ("T", "mT", "H", "data", "grad", "real", "imag")
                    else "Tensor"
                )
            if target is operator.getitem and args:
                base = self.of(args[0], depth)
                if base == "list":
                    return "list" if isinstance(args[1], slice) else "int"
                return "?" if base in ("?", "tuple") else base
            if getattr(target, "__module__", None) == "math":
                return "float"
            if target in _INT_OPS or target is operator.truediv:
                kinds = {self.of(a, depth) for a in args}
                if "Tensor" in kinds:
                    return "Tensor"
                if kinds <= {"int", "bool"}:
                    return "float" if target is operator.truediv else "int"
                return "?"
        if node.op == "call_module":
            return "?"
        return "Tensor"


def _constant_kind(value: Any) -> str:
    if value is None:
        return "None"
    if isinstance(value, (bool, torch.SymBool)):
        return "bool"
    if isinstance(value, (int, torch.SymInt)):
        return "int"
    if isinstance(value, (float, torch.SymFloat)):
        return "float"
    if isinstance(value, complex):
        return "complex"
    if isinstance(value, str):
        return "str"
    if isinstance(value, torch.Tensor):
        return "Tensor"
    if isinstance(value, torch.Size):
        return "list"
    if isinstance(value, (list, tuple)):
        return "list"
    if isinstance(value, torch.dtype):
        return "dtype"
    if isinstance(value, torch.device):
        return "device"
    if isinstance(value, torch.memory_format):
        return "memory_format"
    if isinstance(value, torch.layout):
        return "layout"
    return "?"


def _constant_kind_of_type(tp: type) -> str:
    for cls, kind in (
        (bool, "bool"),
        (int, "int"),
        (float, "float"),
        (str, "str"),
        (torch.Tensor, "Tensor"),
        (torch.Size, "list"),
        (tuple, "list"),
        (list, "list"),
    ):
        if issubclass(tp, cls):
            return kind
    return "?"


_SCALAR_MATCH = {
    "TensorType": {"Tensor"},
    "IntType": {"int"},
    "SymIntType": {"int"},
    "FloatType": {"float", "int"},
    "NumberType": {"int", "float", "bool", "complex"},
    "ComplexType": {"complex", "float", "int"},
    "BoolType": {"bool"},
    "StringType": {"str"},
    "DeviceObjType": {"device", "str", "int"},
    "ScalarTypeType": {"dtype"},
    "MemoryFormatType": {"memory_format"},
    "LayoutType": {"layout"},
}


def _matches(t: Any, value: Any, kinds: _Kinds, fixed: bool = False) -> bool:
    kind = t.kind()
    if kind == "OptionalType":
        return value is None or _matches(t.getElementType(), value, kinds, fixed)
    if kind in ("AnyType", "VarType"):
        return True
    value_kind = kinds.of(value)
    if value_kind == "?":
        return True
    if kind == "ListType":
        element = t.getElementType()
        if isinstance(value, (list, tuple)):
            return all(_matches(element, v, kinds) for v in value)
        if value_kind == "list":
            return element.kind() in ("IntType", "SymIntType", "VarType")
        return fixed and _matches(element, value, kinds)
    allowed = _SCALAR_MATCH.get(kind)
    return allowed is not None and value_kind in allowed


# ---------------------------------------------------------------------------------------
# Binding
# ---------------------------------------------------------------------------------------


def _pack(sig: _Sig, args: tuple[Any, ...], kinds: _Kinds) -> tuple[Any, ...] | None:
    """Varargs for an int-list parameter: ``view(x, 2, -1)`` -> ``view(x, [2, -1])``."""
    if sig.pack is None:
        return None
    names = [
        p.name
        for p in sig.signature.parameters.values()
        if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
    ]
    index = names.index(sig.pack)
    rest = args[index:]
    if not rest:
        return None
    if len(rest) == 1 and kinds.of(rest[0]) != "int":
        return None
    if not all(kinds.of(v) in ("int", "?") for v in rest):
        return None
    return (*args[:index], list(rest))


def _type_ok(sig: _Sig, bound: inspect.BoundArguments, kinds: _Kinds) -> bool:
    for name, value in bound.arguments.items():
        t = sig.types.get(name)
        if t is not None and not _matches(t, value, kinds, name in sig.fixed):
            return False
    return True


def _choose(
    sigs: Sequence[_Sig], args: tuple[Any, ...], kwargs: Mapping[str, Any], kinds: _Kinds
) -> tuple[_Sig, inspect.BoundArguments, bool] | None:
    """The first signature (and binding) whose types the arguments match, else the first that
    binds; and whether the binding packed int varargs into a list (:func:`_pack`)."""
    fallback: tuple[_Sig, inspect.BoundArguments, bool] | None = None
    wants_out = "out" in kwargs
    for sig in sigs:
        if not wants_out and "out" in sig.types:
            continue
        attempts = [(args, False)]
        packed = _pack(sig, args, kinds)
        if packed is not None:
            attempts.insert(0, (packed, True))
        for attempt, was_packed in attempts:
            try:
                bound = sig.signature.bind(*attempt, **kwargs)
            except TypeError:
                continue
            if not sig.types or _type_ok(sig, bound, kinds):
                return sig, bound, was_packed
            if fallback is None:
                fallback = (sig, bound, was_packed)
    return fallback


def _same(value: Any, default: Any) -> bool:
    if isinstance(value, torch.fx.Node) or default is _EMPTY:
        return False
    if value is None or default is None:
        return value is default
    if type(value) is not type(default):
        return False
    try:
        return bool(value == default)
    except Exception:
        return False


def _to_args(sig: _Sig, bound: inspect.BoundArguments) -> list[Arg]:
    out: list[Arg] = []
    for name, param in sig.signature.parameters.items():
        given = name in bound.arguments
        if name in sig.hidden and not given:
            continue
        kind = param.kind.name.lower()
        if param.kind is inspect.Parameter.VAR_POSITIONAL:
            value = bound.arguments.get(name, ())
            out.append(Arg(name, format_value(tuple(value)), not value, None, kind))
            continue
        if param.kind is inspect.Parameter.VAR_KEYWORD:
            value = bound.arguments.get(name, {})
            out.append(Arg(name, format_value(dict(value)), not value, None, kind))
            continue
        if given:
            value = bound.arguments[name]
            default = sig.fills_defaults and _same(value, param.default)
            text = format_value(value)
        else:
            value = param.default
            default = True
            text = sig.default_text.get(name) or format_value(value)
        if default and (name == "out" or (sig.fills_defaults and name.startswith("_"))):
            continue
        node = value.name if isinstance(value, torch.fx.Node) else None
        out.append(Arg(name, text, default, node, kind))
    return out


def _unnamed(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> list[Arg]:
    result = [
        Arg(
            f"arg{i}",
            format_value(v),
            False,
            v.name if isinstance(v, torch.fx.Node) else None,
            "positional_only",
        )
        for i, v in enumerate(args)
    ]
    for k, v in kwargs.items():
        node = v.name if isinstance(v, torch.fx.Node) else None
        result.append(Arg(k, format_value(v), False, node, "keyword_only"))
    return result


# ---------------------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------------------


def _receiver_type(node: torch.fx.Node, kinds: _Kinds) -> type:
    receiver = node.args[0] if node.args else None
    if not isinstance(receiver, torch.fx.Node):
        return type(receiver)
    example = kinds.examples.get(receiver.name, _MISSING)
    if example is _MISSING:
        example = receiver.meta.get("val", _MISSING)
    if example is not _MISSING and not isinstance(example, torch.Tensor):
        return type(example)
    return torch.Tensor


def _signatures(
    root: torch.nn.Module, node: torch.fx.Node, kinds: _Kinds
) -> tuple[list[_Sig], tuple[Any, ...], dict[str, Any]]:
    args, kwargs = tuple(node.args), dict(node.kwargs)
    if node.op == "call_module":
        try:
            module = root.get_submodule(str(node.target))
        except AttributeError:
            return [], args, kwargs
        sig = _module_sig(module)
        return ([sig] if sig else []), args, kwargs
    if node.op == "call_function":
        return _function_sigs(node.target, args, kwargs), args, kwargs
    if node.op == "call_method":
        name = str(node.target)
        receiver_type = _receiver_type(node, kinds)
        sigs = _method_sigs(receiver_type, name)
        if not sigs and receiver_type is not torch.Tensor:
            sigs = _method_sigs(torch.Tensor, name)
        return sigs, args, kwargs
    return [], args, kwargs


Choice = tuple[Any, bool]
"""The signature :func:`named_arguments` chose for a node and whether it packed varargs."""


def named_arguments(
    root: torch.nn.Module,
    node: torch.fx.Node,
    examples: Mapping[str, Any],
    chosen: dict[str, Choice] | None = None,
) -> tuple[list[Arg], str]:
    """Every parameter of the called thing, in signature order.

    Args:
        root: the traced module (``call_module`` targets are resolved in it).
        node: a ``call_function``, ``call_method`` or ``call_module`` node.
        examples: node name -> example value (fake/meta tensor, int, SymInt, ...); may be
            empty or partial.

    Returns:
        ``(args, signature_source)``; the source is ``module.forward``, ``python``, ``aten``,
        ``approximate`` or ``none`` (arguments then named ``arg0``, ``arg1``...). Other ops
        (placeholder, get_attr, output) give ``([], "none")``.

    Example:
        >>> args, source = named_arguments(gm, node, {})  # node: x.view(2, -1)
        >>> [(a.name, a.value) for a in args], source
        ([('self', 'x'), ('size', '[2, -1]')], 'aten')
    """
    if node.op not in ("call_function", "call_method", "call_module"):
        return [], "none"
    try:
        kinds = _Kinds(examples)
        sigs, args, kwargs = _signatures(root, node, kinds)
        found = _choose(sigs, args, kwargs, kinds)
        if found is not None:
            sig, bound, packed = found
            if chosen is not None:
                chosen[node.name] = (sig, packed)
            return _to_args(sig, bound), sig.source
    except Exception:
        pass
    return _unnamed(tuple(node.args), dict(node.kwargs)), "none"


def named_like(
    node: torch.fx.Node,
    template: torch.fx.Node,
    choice: Choice,
    examples: Mapping[str, Any],
) -> tuple[list[Arg], str] | None:
    """:func:`named_arguments` of ``node``, a copy of ``template`` (the same operation and
    arguments, other nodes in them) for which ``choice`` was made, when the nodes it reads
    are of the same kinds as the template's: the choice depends only on the arguments'
    structure, their constants and the kinds of their nodes, so it is the same, and the
    copy's texts come from its own arguments. None when that cannot be said."""
    old, new = template.all_input_nodes, node.all_input_nodes
    if node.op != template.op or node.target != template.target or len(old) != len(new):
        return None

    def blank(n: torch.fx.Node) -> None:
        return None

    map_arg = torch.fx.node.map_arg
    if map_arg((node.args, node.kwargs), blank) != map_arg((template.args, template.kwargs), blank):
        return None  # other constants or another structure
    kinds = _Kinds(examples)
    if any(kinds.node(a) != kinds.node(b) for a, b in zip(old, new)):
        return None
    sig, packed = choice
    args, kwargs = tuple(node.args), dict(node.kwargs)
    attempt = _pack(sig, args, kinds) if packed else args
    if attempt is None:
        return None
    try:
        bound = sig.signature.bind(*attempt, **kwargs)
    except TypeError:
        return None
    return _to_args(sig, bound), sig.source
