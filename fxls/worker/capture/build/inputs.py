"""Example inputs for a module's ``forward``: declared, evaluated, or inferred from the first layer.

Declared inputs come from ``ClassRequest.inputs`` (directives, jaxtyping annotations, the CLI).
A named dimension is symbolic; its example size is the size given with it, else a distinct
default per name (2, 3, 5, 7, ... skipping sizes already used, never 1, which torch would
specialize). Undeclared tensor inputs are inferred after tracing from the first layer their
placeholder feeds (``Conv2d.in_channels``, ``Linear.in_features``, ...) and marked assumed.
"""

from __future__ import annotations

import ast
import inspect
import linecache
import operator
import re
import sys
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import FrameType
from typing import Any

import torch
import torch.fx
from torch import nn

from fxls.protocol.model import DimSpec, InputOrigin, InputSpec, Value
from fxls.worker.capture.document import ExecutedDocument, resolvable
from fxls.worker.capture.shapes.propagation import ExampleInput
from fxls.worker.capture.spans import forward_definition, short_source
from fxls.worker.capture.syntax import arguments_text, nodes_of
from fxls.worker.capture.trace import passthrough

BATCH = "B"
SEQUENCE = "T"
SOURCE = "S"
"""The length of an encoder's sequence a decoder attends to (``encoder_hidden_states``)."""


@dataclass
class PlannedInput(ExampleInput):
    """One ``forward`` argument as fxls will pass it: the example input, and where it came from."""

    assumed: bool = False
    origin: InputOrigin = "declared"
    """Where it came from when not assumed: a directive or annotation (``declared``), the
    parent's call (``parent``), the parameter's default (``default``)."""
    reason: str | None = None
    """For assumed inputs: where the shape came from (``conv1: Conv2d(3, 64, ...)``)."""
    upstream: str | None = None
    """For an input a parent passed: the parent (or an ancestor) whose own inputs fxls
    assumed, so this one follows from a guess too (shape errors are then hints)."""

    def protocol_value(self) -> Value:
        """The input as a protocol ``Value`` (symbolic dims print as their names)."""
        if self.kind == "tensor":
            shape: list[int | str] = [name or size for name, size in self.dims]
            return Value(kind="tensor", shape=shape, dtype=dtype_name(self.dtype))
        return value_of(self.value, self.inner_dims)

    def shape_text(self) -> str:
        if self.kind == "value":
            return _value_text(self.value, names=iter(self.inner_dims or []))
        inner = ", ".join(name or str(size) for name, size in self.dims)
        if len(self.dims) == 1:
            inner += ","
        return f"({inner})" + ("" if self.dtype == torch.float32 else f" {dtype_name(self.dtype)}")


def _value_text(
    value: Any, depth: int = 0, names: Iterator[list[tuple[str | None, int]]] | None = None
) -> str:
    if isinstance(value, torch.Tensor):
        dims = next(names, None) if names is not None else None
        if dims is None or len(dims) != value.dim():
            dims = [(None, int(s)) for s in value.shape]
        return "[" + ", ".join(name or str(size) for name, size in dims) + "]"
    if depth < 3 and isinstance(value, (tuple, list)):
        inner = ", ".join(_value_text(v, depth + 1, names) for v in value)
        if isinstance(value, tuple):  # one item: ``([B, 64, 8, 8],)``, as Python writes it
            return f"({inner},)" if len(value) == 1 else f"({inner})"
        return f"[{inner}]"
    text = repr(value)
    return text if len(text) <= 40 else text[:39] + "…"


_LITERALS = (type(None), bool, int, float, str)


def directive_expr(value: Any, depth: int = 0) -> str | None:
    """``value`` as a directive's Python expression (``# fxls: hidden = ...``), None when it
    cannot be written: literals, tuples and lists, and tensors as ``torch.zeros(2, 2, 64)``
    (a shape alone would be read as one tensor's, not a tuple's)."""
    if isinstance(value, _LITERALS):
        return repr(value)
    if isinstance(value, torch.Tensor):
        sizes = ", ".join(str(int(s)) for s in value.shape)
        dtype = "" if value.dtype == torch.float32 else f", dtype=torch.{dtype_name(value.dtype)}"
        return f"torch.zeros({sizes}{dtype})" if sizes or not dtype else f"torch.zeros((){dtype})"
    if depth < 3 and isinstance(value, (tuple, list)):
        items = [directive_expr(v, depth + 1) for v in value]
        if any(i is None for i in items):
            return None
        inner = ", ".join(i for i in items if i is not None)
        if isinstance(value, tuple):
            return f"({inner},)" if len(items) == 1 else f"({inner})"
        return f"[{inner}]"
    return None


class InputError(Exception):
    """A declared input could not be made (bad dtype, expression raised)."""

    def __init__(self, name: str, message: str):
        super().__init__(message)
        self.name = name


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def value_of(v: Any, inner_dims: list[list[tuple[str | None, int]]] | None = None) -> Value:
    """A non-tensor Python value as a protocol ``Value`` (``inner_dims``: the dimension names
    of the tensors inside it, see ``PlannedInput.inner_dims``)."""
    if v is None:
        return Value(kind="none", text="None")
    if isinstance(v, bool):
        return Value(kind="bool", text=repr(v))
    if isinstance(v, int):
        return Value(kind="int", text=repr(v))
    if isinstance(v, float):
        return Value(kind="float", text=repr(v))
    if isinstance(v, torch.dtype):
        return Value(kind="dtype", text=str(v))
    if isinstance(v, torch.device):
        return Value(kind="device", text=repr(str(v)))
    if isinstance(v, torch.Tensor):
        return Value(kind="tensor", shape=list(v.shape), dtype=dtype_name(v.dtype))
    if isinstance(v, (tuple, list)) and any(isinstance(t, torch.Tensor) for t in v):
        # ([B, 64, 224, 224], [B, 32, 224, 224]): sizes, not reprs, named where named
        return _other(_value_text(v, names=iter(inner_dims or [])))
    return _other(repr(v))


def _other(text: str) -> Value:
    return Value(kind="other", text=text if len(text) <= 80 else text[:77] + "...")


_DTYPE_ALIASES = {"float": "float32", "double": "float64", "half": "float16", "long": "int64",
                  "int": "int64", "bool": "bool"}  # fmt: skip


def parse_dtype(text: str | None) -> torch.dtype:
    """``"float32"``, ``"torch.int64"``, ``"long"`` ... -> torch.dtype (float32 when None)."""
    if not text:
        return torch.float32
    name = text.strip().removeprefix("torch.")
    name = _DTYPE_ALIASES.get(name, name)
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown dtype {text!r}")
    return dtype


class Symbols:
    """Example sizes for named dimensions, distinct per name and never 1."""

    def __init__(self, specs: list[InputSpec]):
        self.sizes: dict[str, int] = {}
        self.used: set[int] = {1}
        for spec in specs:
            for dim in spec.dims:
                if dim.size is not None:
                    self.used.add(dim.size)
                    if dim.name is not None:
                        self.sizes.setdefault(dim.name, dim.size)

    def size(self, name: str) -> int:
        if name not in self.sizes:
            candidate = 2
            while candidate in self.used or not _is_prime(candidate):
                candidate += 1
            self.sizes[name] = candidate
            self.used.add(candidate)
        return self.sizes[name]

    def dims(self, spec_dims: list[DimSpec]) -> list[tuple[str | None, int]]:
        out: list[tuple[str | None, int]] = []
        for dim in spec_dims:
            if dim.name is None:
                out.append((None, dim.size if dim.size is not None else 1))
            elif dim.size is not None:
                out.append((dim.name, dim.size))
            else:
                out.append((dim.name, self.size(dim.name)))
        return out


def _is_prime(n: int) -> bool:
    return n >= 2 and all(n % k for k in range(2, int(n**0.5) + 1))


def from_spec(spec: InputSpec, symbols: Symbols, namespace: dict[str, Any]) -> PlannedInput:
    """A declared input -> PlannedInput; raises InputError."""
    if spec.kind == "expr":
        try:
            with torch.device("meta"):
                value = eval(spec.expr or "None", namespace)
        except Exception:
            try:
                value = eval(spec.expr or "None", namespace)
            except Exception as exc:
                raise InputError(
                    spec.name, f"`{spec.expr}` raised {type(exc).__name__}: {exc}"
                ) from exc
        if isinstance(value, torch.Tensor):
            dims: list[tuple[str | None, int]] = [(None, int(s)) for s in value.shape]
            return PlannedInput(spec.name, "tensor", dims, value.dtype)
        return PlannedInput(spec.name, "value", value=value)
    try:
        dtype = parse_dtype(spec.dtype)
    except ValueError as exc:
        raise InputError(spec.name, str(exc)) from exc
    return PlannedInput(spec.name, "tensor", symbols.dims(spec.dims), dtype)


def forward_parameters(module: nn.Module) -> list[inspect.Parameter]:
    """``forward``'s parameters (without ``self``); for a wrapper that passes every argument
    to one submodule, that submodule's (:mod:`~fxls.worker.capture.trace.passthrough`)."""
    passed = passthrough.parameters(module)
    if passed is not None:
        return passed
    sig = inspect.signature(module.forward)
    return list(sig.parameters.values())


def keeps_default(param: inspect.Parameter) -> bool:
    """True for a parameter whose default is a plain value (flag, ``None``), passed as is."""
    return param.default is not inspect.Parameter.empty and not isinstance(
        param.default, torch.Tensor
    )


def fed_to_a_layer(param: inspect.Parameter, module: nn.Module) -> bool:
    """Whether ``forward`` hands ``param`` (defaulting to ``None``) to one of torch's layers
    as its only argument (``self.silu(emb)``) and never asks whether it was given (``emb is
    None``, ``if emb``): the default cannot run, the input is needed (diffusers'
    ``AdaLayerNormZero(x, emb=None)``)."""
    if param.default is not None:
        return False
    return _used_unasked(module, lambda node: _layer_call_of(node, param.name, module), param.name)


def _used_unasked(
    module: nn.Module, use: Callable[[ast.AST], bool], name: str, helpers: bool = False
) -> bool:
    """Whether ``forward`` of ``module`` has a node ``use`` accepts and none that asks
    whether ``name`` was given (:func:`_asks`; with ``helpers``, nor a test that hands it to
    a function, :func:`_tested_by_call`)."""
    definition = forward_definition(type(module))
    if definition is None:
        return False
    found = False
    for node in _runs(definition, module):
        if _asks(node, name) or (helpers and _tested_by_call(node, name)):
            return False
        found = found or use(node)
    return found


def _runs(definition: ast.AST, module: nn.Module) -> Iterator[ast.AST]:
    """The nodes of ``definition`` (as ``ast.walk``) but the body of an ``if`` that this
    instance does not run: ``if self.skip_linear is not None:`` where it is ``None``."""
    todo = [definition]
    while todo:
        node = todo.pop()
        yield node
        if isinstance(node, ast.If) and _never_true(node.test, module):
            todo.extend([node.test, *node.orelse])
            continue
        todo.extend(ast.iter_child_nodes(node))


def _never_true(test: ast.expr, module: nn.Module) -> bool:
    """``self.attr is not None`` where the instance's ``attr`` is ``None``; ``self.attr``
    where it is ``False``; an ``and`` of which one is so (``torch.is_grad_enabled() and
    self.gradient_checkpointing``: diffusers' checkpointed branch)."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return any(_never_true(value, module) for value in test.values)
    if _own_attribute(test):
        assert isinstance(test, ast.Attribute)
        try:
            return getattr(module, test.attr) is False
        except Exception:  # a user module's own __getattr__
            return False
    if not (
        isinstance(test, ast.Compare)
        and len(test.ops) == 1
        and isinstance(test.ops[0], ast.IsNot)
        and isinstance(test.comparators[0], ast.Constant)
        and test.comparators[0].value is None
    ):
        return False
    left = test.left
    if not _own_attribute(left):
        return False
    assert isinstance(left, ast.Attribute)
    try:
        return getattr(module, left.attr) is None
    except Exception:  # a user module's own __getattr__
        return False


def _own_attribute(node: ast.expr) -> bool:
    """``self.attr``."""
    return (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
    )


_OPTIONS = re.compile(r"kwargs$|^return_dict$|^output_|^use_|_dtype$|^return_|^training$")
"""Parameters defaulting to ``None`` that select behaviour rather than carry data."""


def needed_unasked(param: inspect.Parameter, module: nn.Module) -> bool:
    """Whether ``param`` (defaulting to ``None``) is data that ``forward`` uses without asking
    whether it was given (``param is None``, ``if param``): tried as an input when ``forward``
    does not run through with the default (diffusers' ``DiTTransformer2DModel`` hands
    ``timestep`` and ``class_labels`` on to its blocks, which need them). Not options
    (``*_kwargs``, ``return_dict``, ``output_*``, ``*_dtype``) nor parameters annotated as
    plain values (``bool``, ``dict[str, Any]``). Handing it on by keyword
    (``self.attn(x, image_rotary_emb=image_rotary_emb)``) is no use: the callee may ask."""
    if param.default is not None or _OPTIONS.search(param.name):
        return False
    if _plain_annotation(param.annotation):
        return False
    name = param.name
    definition = forward_definition(type(module))
    if definition is None:
        return False
    handed_on = {
        id(node.value)
        for node in ast.walk(definition)
        if isinstance(node, ast.keyword) and is_name(node.value, name)
    }
    return _used_unasked(
        module, lambda node: is_name(node, name) and id(node) not in handed_on, name, True
    )


def _tested_by_call(node: ast.AST, name: str) -> bool:
    """Whether ``node`` is a test that hands ``name`` to a function (``if exists(hiddens)``,
    ``x if is_tensor(x) else ...``): a helper that asks whether it was given."""
    if not isinstance(node, (ast.If, ast.While, ast.IfExp, ast.Assert)):
        return False
    return any(
        isinstance(call, ast.Call) and any(is_name(arg, name) for arg in call.args)
        for call in ast.walk(node.test)
    )


def _plain_annotation(annotation: Any) -> bool:
    """An annotation naming no tensor: ``bool``, ``int``, ``dict[str, Any]``, ``str | None``."""
    if annotation is inspect.Parameter.empty:
        return False
    text = annotation if isinstance(annotation, str) else repr(annotation)
    return "Tensor" not in text and "tensor" not in text


def _asks(node: ast.AST, name: str) -> bool:
    """Whether ``node`` asks whether ``name`` was given: ``name is (not) None``, ``if name``,
    ``name or ...``, ``not name``, ``isinstance(name, ...)``."""
    if isinstance(node, ast.Compare):
        sides = [node.left, *node.comparators]
        return any(isinstance(op, (ast.Is, ast.IsNot)) for op in node.ops) and any(
            is_name(side, name) for side in sides
        )
    if isinstance(node, (ast.If, ast.While, ast.IfExp, ast.Assert)):
        return is_name(node.test, name)
    if isinstance(node, ast.BoolOp):
        return any(is_name(value, name) for value in node.values)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return is_name(node.operand, name)
    if isinstance(node, ast.Call) and is_name(node.func, "isinstance") and node.args:
        return is_name(node.args[0], name)
    return False


def is_name(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name


def _layer_call_of(node: ast.AST, name: str, module: nn.Module) -> bool:
    """Whether ``node`` is ``self.<layer>(name)``, a torch layer of ``module``."""
    if not (isinstance(node, ast.Call) and len(node.args) == 1 and not node.keywords):
        return False
    func = node.func
    if not (isinstance(func, ast.Attribute) and is_name(func.value, "self")):
        return False
    layer = module._modules.get(func.attr)
    torch_layer = layer is not None and type(layer).__module__.startswith("torch.nn")
    return torch_layer and is_name(node.args[0], name)


PRIMARY_INPUTS = (
    "input_ids", "pixel_values", "hidden_states", "sample", "input_values", "input_features",
    "x", "input", "inputs", "src", "tokens", "idx", "images", "image",
)  # fmt: skip
"""Names libraries give the main input of a ``forward`` whose every parameter defaults to
``None`` (``input_ids`` or ``inputs_embeds``, ``pixel_values``), first the most telling."""


def primary_input(params: list[inspect.Parameter]) -> inspect.Parameter | None:
    """The parameter to give a tensor when every parameter of ``forward`` has a default: the
    first, by :data:`PRIMARY_INPUTS`, that defaults to ``None``; None when there is none."""
    if not params or any(p.default is inspect.Parameter.empty for p in params):
        return None
    by_name = {p.name: p for p in params if p.default is None}
    return next((by_name[n] for n in PRIMARY_INPUTS if n in by_name), None)


def _describe(name: str, module: nn.Module) -> str:
    extra = module.extra_repr()
    text = f"{type(module).__name__}({extra})"
    if len(text) > 60:
        text = text[:57] + "...)"
    return f"`{name}`: {text}" if name else text


_PASS_THROUGH = (nn.Dropout, nn.Identity, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d)


_CASTS = frozenset({"long", "int", "float", "half", "double", "bfloat16", "bool", "to", "type"})
"""Tensor methods that change only the dtype (or device): ``self.emb(x.long())``."""


def first_layer(root: nn.Module, placeholder: torch.fx.Node) -> tuple[str, nn.Module] | None:
    """The first module a placeholder feeds directly (skipping dropout/identity and casts)."""
    return next(_fed(root, placeholder), None)


def _fed(root: nn.Module, placeholder: torch.fx.Node) -> Iterator[tuple[str, nn.Module]]:
    """The modules a placeholder feeds directly (through dropout, identities and casts)."""
    return _layers_reached(root, placeholder, _PASS_THROUGH, _CASTS)


_SAME_SHAPE_MODULES = (*_PASS_THROUGH, nn.ReLU, nn.GELU, nn.SiLU, nn.Sigmoid, nn.Tanh, nn.Mish,
                       nn.LeakyReLU, nn.ELU, nn.Hardswish)  # fmt: skip
_SAME_SHAPE_CALLS = frozenset(
    {"add", "sub", "mul", "truediv", "div", "relu", "gelu", "silu", "sigmoid", "tanh",
     "group_norm", "instance_norm", "dropout", "contiguous", "float", "clone", "type_as"}
)  # fmt: skip
"""Functions and methods whose output has their input's shape (or, for arithmetic, the
shape it broadcasts to, which the next layer then takes)."""
MAX_DOWNSTREAM = 64
"""Nodes followed at most from an input to the layer it reaches."""


def downstream_layers(
    root: nn.Module, placeholder: torch.fx.Node
) -> Iterator[tuple[str, nn.Module]]:
    """The layers ``placeholder`` reaches through calls that keep its shape (a normalization
    written with ``F.group_norm``, ``x * (1 + scale) + shift``, an activation), nearest first:
    diffusers' ``AdaGroupNorm`` passes a block's ``hidden_states`` to ``conv1`` so."""
    return _layers_reached(root, placeholder, _SAME_SHAPE_MODULES, _SAME_SHAPE_CALLS)


def _layers_reached(
    root: nn.Module,
    placeholder: torch.fx.Node,
    through: tuple[type, ...],
    calls: frozenset[str],
) -> Iterator[tuple[str, nn.Module]]:
    """The modules that take ``placeholder`` (or what it becomes through modules of the
    ``through`` kinds and functions or methods named in ``calls``) as their first argument,
    nearest first; the walk does not go on past them."""
    frontier = [placeholder]
    seen: set[torch.fx.Node] = set()
    while frontier and len(seen) < MAX_DOWNSTREAM:
        node = frontier.pop(0)
        for user in node.users:
            if user in seen:
                continue
            if user.op in ("call_function", "call_method"):
                if _call_name(user) in calls:
                    seen.add(user)
                    frontier.append(user)
                continue
            if user.op != "call_module":
                continue
            seen.add(user)
            if user.args[:1] != (node,):
                continue
            module = root.get_submodule(str(user.target))
            if not isinstance(module, through):
                yield str(user.target), module
                continue
            frontier.append(user)


_ELEMENTWISE = frozenset({"add", "sub", "mul", "truediv", "div", "radd", "rsub", "rmul"})
_WIDTH_KEEPING = _SAME_SHAPE_CALLS | {"normalize", "erf", "exp", "log", "sin", "cos", "neg",
                                      "abs", "softplus", "rsqrt", "sqrt", "square"}  # fmt: skip
"""What keeps a tensor's last dimension on the way to the parameter it meets."""


def meets_parameter(
    root: nn.Module, placeholder: torch.fx.Node, symbols: Symbols
) -> PlannedInput | None:
    """``[B, T, width]`` for an input that reaches, through calls that keep its shape
    (``F.normalize(x, dim=-1)``, an activation, arithmetic with numbers), an elementwise
    operation with a parameter of one dimension (``self.g``, ``self.gamma + 1``): a
    normalization or scale written with its own parameters (``x * gamma + beta``) takes
    vectors of the parameter's width. ``[B]`` for one given a last axis to meet such a
    parameter given a first one (``x[:, None] * self.W[None, :]``: a Fourier projection of
    one value per sample). None when it meets none (or one of another rank)."""
    frontier: list[tuple[torch.fx.Node, bool]] = [(placeholder, False)]
    seen: set[torch.fx.Node] = set()
    while frontier and len(seen) < MAX_DOWNSTREAM:
        node, outer = frontier.pop(0)
        for user in node.users:
            if user in seen or user.op not in ("call_function", "call_method"):
                continue
            seen.add(user)
            planned = _met(root, (user, node, outer), symbols, str(placeholder.target))
            if planned is not None:
                return planned
            frontier.extend(_onward(user, node, outer))
    return None


def _onward(
    user: torch.fx.Node, node: torch.fx.Node, outer: bool
) -> list[tuple[torch.fx.Node, bool]]:
    """Where the search goes on from ``user`` of ``node``: a call that keeps the width, or
    the value given a last axis (``x[:, None]``) once."""
    name = _call_name(user)
    if not outer and _axis_added(user, node, last=True):
        return [(user, True)]
    if name in _WIDTH_KEEPING and (user.args[:1] == (node,) or name in _ELEMENTWISE):
        return [(user, outer)]
    return []


def _met(
    root: nn.Module,
    at: tuple[torch.fx.Node, torch.fx.Node, bool],
    symbols: Symbols,
    name: str,
) -> PlannedInput | None:
    """The input an elementwise ``user`` of ``node`` says, meeting a parameter (``at`` is
    ``(user, node, outer)``: ``outer`` when ``node`` is the input given a last axis)."""
    user, node, outer = at
    if _call_name(user) not in _ELEMENTWISE:
        return None
    others = [a for a in user.args if isinstance(a, torch.fx.Node) and a is not node]
    if len(others) != 1:
        return None
    other = others[0]
    if outer:
        first = other.args[0] if _axis_added(other, None, last=False) else None
        found = _parameter_width(root, first) if isinstance(first, torch.fx.Node) else None
        if found is None or found[2] != 1:
            return None
        why = (
            f"one value per sample, given a last axis to meet `{found[0]}`, a parameter of "
            f"{found[1]} given a first one, in `{user.name}`"
        )
        b = (BATCH, symbols.size(BATCH))
        return PlannedInput(name, "tensor", [b], assumed=True, reason=why)
    found = _parameter_width(root, other)
    if found is None:
        return None
    target, width, rank = found
    dims: list[tuple[str | None, int]] = [
        (BATCH, symbols.size(BATCH)), (SEQUENCE, symbols.size(SEQUENCE))
    ]  # fmt: skip
    if rank == 4:  # ``(1, 1, 1, C)``: an image channels last, ``[B, H, W, C]``
        dims[1:] = [(None, size) for size in spatial_sizes(2) or ()]
    why = f"`{target}`, a parameter of {width} it meets in `{user.name}`"
    return PlannedInput(name, "tensor", [*dims, (None, width)], assumed=True, reason=why)


_LAST_AXIS = (slice(None), None)
_FIRST_AXIS = (None, slice(None))


def _axis_added(node: torch.fx.Node, of: torch.fx.Node | None, last: bool) -> bool:
    """Whether ``node`` gives a vector (``of``, when given) a last axis (``x[:, None]``,
    ``x.unsqueeze(-1)``) or, ``last`` false, a first one (``w[None, :]``, ``w.unsqueeze(0)``)."""
    args = node.args
    if len(args) != 2 or not isinstance(args[0], torch.fx.Node) or node.kwargs:
        return False
    if of is not None and args[0] is not of:
        return False
    if node.op == "call_function" and node.target is operator.getitem:
        return args[1] == (_LAST_AXIS if last else _FIRST_AXIS)
    return (
        node.op == "call_method"
        and node.target == "unsqueeze"
        and args[1] in ((-1, 1) if last else (0,))
    )


def _parameter_of(node: torch.fx.Node, depth: int) -> str | None:
    """The target of the one ``get_attr`` a value is computed from with numbers only
    (``self.gamma + 1.0``); None for anything else."""
    if node.op == "get_attr":
        return str(node.target)
    if depth > 3 or node.op not in ("call_function", "call_method"):
        return None
    if _call_name(node) not in _ELEMENTWISE | {"float", "type_as", "to"}:
        return None
    inputs = node.all_input_nodes
    return _parameter_of(inputs[0], depth + 1) if len(inputs) == 1 else None


def _parameter_width(root: nn.Module, node: torch.fx.Node) -> tuple[str, int, int] | None:
    """The parameter (or buffer) ``node`` is computed from with numbers only
    (:func:`_parameter_of`), the size of its last dimension and its rank, when that size is at
    least 2 and it has one dimension, or three or four whose others are 1 (``(1, 1, 1, C)``:
    ConvNeXt-V2's global response norm)."""
    target = _parameter_of(node, 0)
    if target is None:
        return None
    owner, _, attr = target.rpartition(".")
    try:
        value = getattr(root.get_submodule(owner) if owner else root, attr)
    except AttributeError:
        return None
    if not isinstance(value, torch.Tensor) or value.dim() not in (1, 3, 4):
        return None
    *leading, width = value.shape
    if width < 2 or any(size != 1 for size in leading):
        return None
    return target, int(width), value.dim()


POSITION_NAMES = frozenset({"t", "pos", "positions", "seq", "seq_pos", "pos_ids"})
"""Names a rotary embedding's ``forward`` gives the positions it makes angles for."""


ROTARY_FREQUENCIES = ("inv_freq", "freqs")
"""Attributes a rotary embedding keeps its frequencies in (one dimension: a frequency per
pair of features)."""


def rotary_positions(name: str, module: nn.Module, symbols: Symbols) -> PlannedInput | None:
    """``[T]`` int64 for the positions a rotary embedding takes (``forward(self, t)`` of a
    class with a 1-D ``inv_freq`` or ``freqs``: ``einsum('i , j -> i j',
    t.type_as(self.inv_freq), self.inv_freq)``), when its input has a name such positions
    have (:data:`POSITION_NAMES`); None otherwise."""
    if name not in POSITION_NAMES:
        return None
    found = ((a, getattr(module, a, None)) for a in ROTARY_FREQUENCIES)
    attr, freqs = next(((a, f) for a, f in found if isinstance(f, torch.Tensor)), ("", None))
    if freqs is None or freqs.dim() != 1:
        return None
    why = f"the positions a rotary embedding takes: its `{attr}` has {freqs.shape[0]} frequencies"
    dims: list[tuple[str | None, int]] = [(SEQUENCE, symbols.size(SEQUENCE))]
    return PlannedInput(name, "tensor", dims, torch.int64, assumed=True, reason=why)


def _call_name(node: torch.fx.Node) -> str:
    """``mul`` for ``operator.mul``, ``x.mul(...)`` and ``x.mul_(...)``."""
    target = node.target
    name = target if isinstance(target, str) else getattr(target, "__name__", "")
    return name.rstrip("_")


SPATIAL = 224
"""Image height and width fxls assumes first when nothing says otherwise."""
SPATIAL_ALTERNATIVES = (224, 32, 28, 64, 96, 128, 256, 299, 512, 16)
"""Sizes tried in turn when an assumed image size does not run through ``forward``."""


def infer(
    root: nn.Module, placeholder: torch.fx.Node, symbols: Symbols, spatial: int = SPATIAL
) -> PlannedInput | None:
    """Infer a tensor input from the first layer it reaches that tells its shape; None when
    fxls cannot tell.

    ``root`` resolves ``call_module`` targets: the traced GraphModule, or the module itself
    with the partial graph of a trace that failed.
    """
    for target, m in _fed(root, placeholder):
        planned = _layer_tells(root, placeholder, (target, m), symbols, spatial)
        if planned is not None:
            return planned
    return None


def _layer_tells(
    root: nn.Module,
    placeholder: torch.fx.Node,
    layer: tuple[str, nn.Module],
    symbols: Symbols,
    spatial: int,
) -> PlannedInput | None:
    """The input ``layer`` (a module ``placeholder`` reaches) says it takes, or None: a block
    kept whole (AbsPos reading only ``x.shape[1]``) may say nothing where the next one does."""
    target, m = layer
    if isinstance(m, nn.GroupNorm):
        conv = _conv_after(root, placeholder, target, m.num_channels)
        if conv is not None:
            target, m = conv
    planned = layer_input(str(placeholder.target), target, m, symbols, spatial)
    if planned is None and not type(m).__module__.startswith("torch."):
        # a block kept whole (a leaf): what its own forward passes its first input to
        tree = module_tree(type(m))
        try:
            first = next(iter(inspect.signature(m.forward).parameters))
        except (TypeError, ValueError, StopIteration):
            return None
        inner = _first_in_source(m, "forward", first, f"{target}.", tree, 1) if tree else None
        if inner is not None:
            planned = layer_input(str(placeholder.target), inner[0], inner[1], symbols, spatial)
    return planned


def _conv_after(
    root: nn.Module, placeholder: torch.fx.Node, norm: str, channels: int
) -> tuple[str, nn.Module] | None:
    """The convolution of ``channels`` input channels that the group norm ``norm`` fed by
    ``placeholder`` passes its output to through shape-keeping calls: a group norm takes any
    number of spatial dimensions, the convolution says how many (a video block's ``Conv3d``)."""
    node = next((u for u in placeholder.users if u.op == "call_module" and u.target == norm), None)
    if node is None:
        return None
    for target, module in downstream_layers(root, node):
        if isinstance(module, nn.modules.conv._ConvNd):
            return (target, module) if module.in_channels == channels else None
        return None
    return None


def infer_downstream(
    root: nn.Module, placeholder: torch.fx.Node, symbols: Symbols, spatial: int = SPATIAL
) -> PlannedInput | None:
    """An input inferred from the nearest layer it reaches through shape-keeping calls that
    tells its shape (:func:`downstream_layers`: a block kept whole that the residual path
    reaches first tells nothing, the ``conv1`` after its normalization does); None when none
    does."""
    for target, module in downstream_layers(root, placeholder):
        planned = layer_input(str(placeholder.target), target, module, symbols, spatial)
        if planned is not None:
            return planned
    return None


_TREES: dict[tuple[str, int], ast.Module | None] = {}
MAX_TREES = 16


def module_tree(cls: type) -> ast.Module | None:
    """The parsed source of the module that defines ``cls`` (a library's file), cached by its
    text: the document's module has the same name for every document (and the zygote's
    warm-up capture ran one before any job was forked)."""
    name = getattr(cls, "__module__", "") or ""
    module = sys.modules.get(name)
    try:
        text = inspect.getsource(module) if module is not None else None
    except (OSError, TypeError):
        text = None
    if text is None:
        return None
    key = (name, hash(text))
    if key not in _TREES:
        try:
            tree: ast.Module | None = ast.parse(text)
        except (SyntaxError, ValueError):
            tree = None
        if len(_TREES) >= MAX_TREES:
            _TREES.clear()
        _TREES[key] = tree
    return _TREES[key]


TIMESTEP_NAMES = ("timestep", "timesteps")
"""Diffusion timesteps: one per sample, ``[B]`` (diffusers' ``Timesteps`` asserts a 1-d
tensor)."""
CLASS_LABEL_NAMES = ("class_labels", "class_label")
"""Labels of class-conditional models: one class id per sample, ``[B]``, into an embedding."""


def per_sample(name: str, symbols: Symbols) -> PlannedInput | None:
    """``[B]`` for an input libraries give one value per sample by its name (a diffusion
    timestep), when no layer tells."""
    if name not in TIMESTEP_NAMES:
        return None
    b = (BATCH, symbols.size(BATCH))
    return PlannedInput(
        name, "tensor", [b], torch.int64, assumed=True, reason="one diffusion timestep per sample"
    )


_SEQUENCE_NAMES = re.compile(r"hidden_states$|_embeds$|^tokens$|^context$")
"""Names libraries give a sequence of vectors ``[B, T, D]``: a ``Linear`` takes it whole."""

_MASK_NAMES = re.compile(r"mask$")
"""Names of masks: one value per position of a sequence (``input_mask``, ``caption_mask``)."""

_ENCODER_NAMES = re.compile(r"^encoder_|^context$")
"""Inputs of the sequence an encoder gave, which a decoder or a diffusion model attends to
(``encoder_hidden_states``, ``encoder_attention_mask``, the ``context`` of a cross-attention
block): its length is its own (``S``), not the length of the sequence the model makes
(``T``)."""


def sequence_dim(name: str, symbols: Symbols) -> tuple[str, int]:
    """The sequence dimension of input ``name``: ``S`` for an encoder's sequence
    (:data:`_ENCODER_NAMES`), else ``T``."""
    symbol = SOURCE if _ENCODER_NAMES.search(name) else SEQUENCE
    return (symbol, symbols.size(symbol))


def shaped_like(name: str, known: list[PlannedInput], symbols: Symbols) -> PlannedInput:
    """An input nothing told, shaped after the tensor inputs that are (``known``, at least
    one): a mask one per position of the first sequence among them (``input_mask`` beside
    ``hidden_states [B, T, D]``: ``[B, T]``), a sequence of the first one's width for a name
    libraries give sequences (``hidden_states`` beside ``temb [B, D]``: ``[B, T, D]``), else
    the first one's shape. An encoder's sequence has its own length (:func:`sequence_dim`):
    ``encoder_hidden_states`` beside ``hidden_states [B, T, D]`` is ``[B, S, D]``, and
    ``encoder_attention_mask`` is ``[B, S]`` with no ``S`` sequence known."""
    first = known[0]
    dims, dtype = list(first.dims), first.dtype
    reason = f"the shape of `{first.name}`"
    own = sequence_dim(name, symbols)
    sequences = [p for p in known if len(p.dims) == 3 and _per_sample(p) and p.dims[1][0] == own[0]]
    if _MASK_NAMES.search(name) and sequences:
        dims, dtype = sequences[0].dims[:2], torch.int64
        reason = f"the positions of `{sequences[0].name}`"
    elif _MASK_NAMES.search(name) and own[0] == SOURCE and _per_sample(first):
        dims, dtype = [first.dims[0], own], torch.int64
        reason = "a position of the encoder's sequence each"
    elif (
        _SEQUENCE_NAMES.search(name)
        and len(dims) == 2
        and _per_sample(first)
        and dtype.is_floating_point
    ):
        dims = [dims[0], own, dims[1]]
        reason = f"`{first.name}`'s width, as a sequence"
    elif own[0] == SOURCE and len(dims) == 3 and _per_sample(first) and dims[1][0] == SEQUENCE:
        dims = [dims[0], own, dims[2]]
        reason = f"`{first.name}`'s width, as the encoder's sequence"
    return PlannedInput(name, "tensor", dims, dtype, assumed=True, reason=reason)


POSITION_IDS = {"img_ids": "hidden_states", "txt_ids": "encoder_hidden_states"}
"""Position ids of the image and text tokens of Flux-style diffusion transformers (Flux,
Bria, LongCat-Image, Ovis-Image): one row per token of the sequence named beside it, one column per
axis of the rotary embedding (the configuration's ``axes_dims_rope``). They reach no layer,
so nothing else tells their shape."""


def position_ids(
    name: str, known: list[PlannedInput], module: nn.Module, arguments: dict[str, Any]
) -> PlannedInput | None:
    """``[T, axes]`` for ``img_ids`` / ``txt_ids`` beside a known ``[B, T, D]`` sequence
    (:data:`POSITION_IDS`), ``axes`` the length of the configuration's ``axes_dims_rope``;
    else None."""
    sequence = POSITION_IDS.get(name)
    of = next((p for p in known if p.name == sequence and len(p.dims) == 3), None)
    if of is None:
        return None
    for config in configurations(module, arguments):
        axes = _config_value(config, "axes_dims_rope")
        if isinstance(axes, (tuple, list)) and axes:
            why = f"a position per token of `{of.name}`, one per rotary axis of "
            why += f"{type(config).__name__}.axes_dims_rope={tuple(axes)}"
            dims = [of.dims[1], (None, len(axes))]
            return PlannedInput(name, "tensor", dims, torch.float32, assumed=True, reason=why)
    return None


def _per_sample(planned: PlannedInput) -> bool:
    return bool(planned.dims) and planned.dims[0][0] == BATCH


def _ids(
    name: str, b: tuple[str | None, int], t: tuple[str | None, int], seq_first: bool
) -> list[tuple[str | None, int]]:
    """What an embedding table takes: class labels one per sample, token ids per position."""
    if name in CLASS_LABEL_NAMES:
        return [b]
    return [t, b] if seq_first else [b, t]


def spatial_sizes(rank: int, spatial: int = SPATIAL) -> tuple[int, ...] | None:
    """The sizes fxls assumes for ``rank`` spatial axes: a signal of 128, an image of
    ``spatial`` by ``spatial``, a clip of 16 frames of 112 by 112; None for another rank."""
    return {1: (128,), 2: (spatial, spatial), 3: (16, 112, 112)}.get(rank)


def layer_input(
    name: str,
    target: str,
    m: nn.Module,
    symbols: Symbols,
    spatial: int = SPATIAL,
    seq_first: bool = False,
) -> PlannedInput | None:
    """The input a layer of this kind takes (batch ``B``, sequence ``T``), marked assumed."""
    b: tuple[str | None, int] = (BATCH, symbols.size(BATCH))
    dims: list[tuple[str | None, int]] | None = None
    dtype = torch.float32

    def fixed(*sizes: int) -> list[tuple[str | None, int]]:
        return [(None, int(s)) for s in sizes]

    if isinstance(m, nn.modules.conv._ConvNd):
        sizes = spatial_sizes(len(m.kernel_size), spatial) or ()
        dims = [b, *fixed(m.in_channels, *sizes)]
    elif isinstance(m, nn.Linear):
        sequence = [sequence_dim(name, symbols)] if _SEQUENCE_NAMES.search(name) else []
        dims = [b, *sequence, *fixed(m.in_features)]
    elif isinstance(m, nn.Embedding):
        dims = _ids(name, b, (SEQUENCE, symbols.size(SEQUENCE)), seq_first)
        dtype = torch.int64
    elif isinstance(m, (nn.LayerNorm, nn.RMSNorm)):
        dims = [b, sequence_dim(name, symbols), *fixed(*m.normalized_shape)]
    elif norm_width(m) is not None:
        dims = [b, sequence_dim(name, symbols), *fixed(norm_width(m) or 1)]
    elif isinstance(m, nn.BatchNorm1d):
        dims = [b, *fixed(m.num_features)]
    elif isinstance(m, nn.BatchNorm2d):
        dims = [b, *fixed(m.num_features, spatial, spatial)]
    elif isinstance(m, nn.GroupNorm):
        dims = [b, *fixed(m.num_channels, spatial, spatial)]
    elif isinstance(m, nn.BatchNorm3d):
        dims = [b, *fixed(m.num_features, 16, 112, 112)]
    elif isinstance(m, nn.RNNBase):
        t: tuple[str | None, int] = (SEQUENCE, symbols.size(SEQUENCE))
        dims = [b, t] if m.batch_first else [t, b]
        dims.append((None, m.input_size))
    elif isinstance(m, nn.MultiheadAttention):
        t = (SEQUENCE, symbols.size(SEQUENCE))
        dims = [b, t] if m.batch_first else [t, b]
        dims.append((None, m.embed_dim))
    elif isinstance(m, (nn.TransformerEncoderLayer, nn.TransformerDecoderLayer)):
        attn = m.self_attn
        t = (SEQUENCE, symbols.size(SEQUENCE))
        dims = [b, t] if attn.batch_first else [t, b]
        dims.append((None, attn.embed_dim))
    elif isinstance(m, (nn.TransformerEncoder, nn.TransformerDecoder)) and len(m.layers):
        return layer_input(name, f"{target}.layers.0", m.layers[0], symbols, spatial, seq_first)
    if dims is None:
        return None
    return PlannedInput(name, "tensor", dims, dtype, assumed=True, reason=_describe(target, m))


MAX_NAMED_SIZES = 3
"""Sizes read from one shape error to try an assumed dimension at (each is a propagation)."""


def sizes_named_by(error: str) -> list[int]:
    """The first sizes a shape error names in parentheses, in order (torch writes "The size of
    tensor a (T) must match the size of tensor b (16)"): 16; a name with an offset solved
    first ("tensor a (S + 1) ... tensor b (257)": 256, then 257; a class token put before a
    sequence). At most ``MAX_NAMED_SIZES``."""
    found: list[int] = []
    text = error[:2000]
    numbers = [int(n) for n in re.findall(r"\((\d{1,6})\)", text)]
    offsets = [
        int(k) if sign == "+" else -int(k)
        for sign, k in re.findall(r"\([A-Za-z_]\w{0,40} ([+-]) (\d{1,3})\)", text)
    ]
    solved = [n - k for k in offsets[:1] for n in numbers]
    for size in [*solved, *numbers]:
        if size >= 2 and size not in found:
            found.append(size)
        if len(found) == MAX_NAMED_SIZES:
            break
    return found


def asserted_sizes(exc: BaseException) -> list[int]:
    """The numbers a failed ``assert`` compared with (``assert n == self.max_seq_len`` after
    ``b, n = x.shape``: 16), read in the frame it failed in: the operands of its comparison
    written as names, attributes, subscripts and constants that hold ints of at least 2. Empty
    for any other error, or an ``assert`` not written on one line. At most
    ``MAX_NAMED_SIZES``."""
    if not isinstance(exc, AssertionError):
        return []
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None:
        return []
    frame = tb.tb_frame
    line = linecache.getline(frame.f_code.co_filename, tb.tb_lineno).strip()
    try:
        statement = ast.parse(line).body[0] if line.startswith("assert ") else None
    except (SyntaxError, ValueError, IndexError):
        return []
    test = statement.test if isinstance(statement, ast.Assert) else None
    if not isinstance(test, ast.Compare):
        return []
    found: list[int] = []
    for operand in (test.left, *test.comparators):
        value = _read(operand, frame)
        if type(value) is int and 2 <= value < 2**20 and value not in found:
            found.append(value)
    return found[:MAX_NAMED_SIZES]


_READABLE = (ast.Name, ast.Attribute, ast.Subscript, ast.Constant, ast.Load)


def _read(operand: ast.expr, frame: FrameType) -> Any:
    """``operand`` evaluated in ``frame`` when it only reads (no call, no arithmetic)."""
    if not all(isinstance(n, _READABLE) for n in ast.walk(operand)):
        return None
    try:
        code = compile(ast.Expression(operand), "<assert>", "eval")
        return eval(code, frame.f_globals, dict(frame.f_locals))
    except Exception:  # user code: a property that raises
        return None


def alternatives(
    planned: PlannedInput,
    sizes: list[int] | tuple[int, ...] = (),
    sequence: int | None = None,
    length: int | None = None,
) -> list[PlannedInput]:
    """Other plausible forms of an assumed input, tried in turn when it does not run through:
    other heights/widths for an image ``[B, C, H, W]``, sequence-first ``[T, B]`` token ids,
    features ``[B, F]`` as a sequence ``[B, T, F]`` (``sequence``: the size another input gave
    ``T``; a ``Linear`` takes both) or as one vector ``[F]`` for the batch, then each named
    dimension other than the batch at each of ``sizes`` (what the shape error named: token
    ids ``(B, T)`` at ``T`` = 16 for a model whose positional embedding has 16 rows; the run
    then fixes ``T`` to 16 and says so). An encoder's sequence ``[B, S, D]`` is tried as long
    as the model's, ``[B, T, D]``, when another input has ``T`` (``length``: its size)."""
    if not planned.assumed or planned.kind != "tensor":
        return []

    def like(dims: list[tuple[str | None, int]]) -> PlannedInput:
        return PlannedInput(planned.name, "tensor", dims, planned.dtype, assumed=True,
                            reason=planned.reason)  # fmt: skip

    resized = [
        like([*planned.dims[:i], (name, size), *planned.dims[i + 1 :]])
        for i, (name, current) in enumerate(planned.dims)
        if name is not None and name != BATCH
        for size in sizes
        if size != current
    ]
    forms = _forms(planned, like, sequence) + _as_long(planned, like, length)
    return forms + resized + _pooled(planned, like)


def _as_long(planned: PlannedInput, like: Any, length: int | None) -> list[PlannedInput]:
    """An assumed encoder's sequence ``[B, S, D]`` as long as the model's own, ``[B, T, D]``
    (``length``: the size ``T`` has): code that adds the two needs one length
    (:func:`sequence_dim` gives the encoder's its own)."""
    if length is None or not any(name == SOURCE for name, _ in planned.dims):
        return []
    return [like([(SEQUENCE, length) if n == SOURCE else (n, v) for n, v in planned.dims])]


def _pooled(planned: PlannedInput, like: Any) -> list[PlannedInput]:
    """An assumed sequence ``[B, T, D]`` as one vector per sample ``[B, D]``, tried last:
    libraries name pooled embeddings as they name sequences (diffusers' ``ImageProjection``
    takes CLIP's ``image_embeds [B, 768]``)."""
    dims = planned.dims
    if len(dims) == 3 and dims[0][0] == BATCH and dims[1][0] == SEQUENCE:
        return [like([dims[0], dims[2]])] if planned.dtype.is_floating_point else []
    return []


def _forms(planned: PlannedInput, like: Any, sequence: int | None) -> list[PlannedInput]:
    if len(planned.dims) == 4:
        (_, h), (_, w) = planned.dims[2], planned.dims[3]
        if h != w or planned.dims[2][0] is not None:
            return []
        return [
            like([*planned.dims[:2], (None, size), (None, size)])
            for size in SPATIAL_ALTERNATIVES
            if size != h
        ]
    if len(planned.dims) == 2 and not planned.dtype.is_floating_point:
        return [like([planned.dims[1], planned.dims[0]])]
    if len(planned.dims) == 2 and planned.dims[0][0] == BATCH and planned.dtype.is_floating_point:
        # as a sequence; else one vector for the whole batch (diffusers' ``AdaLayerNorm``
        # splits its conditioning with ``chunk(2, dim=0)`` and broadcasts it over the batch)
        vector = like([planned.dims[1]])
        if sequence is None:
            return [vector]
        return [like([planned.dims[0], (SEQUENCE, sequence), planned.dims[1]]), vector]
    return []


# ---------------------------------------------------------------------------------------
# The first layer, read from the source of ``forward`` (when no graph reached it)
# ---------------------------------------------------------------------------------------

MAX_SOURCE_DEPTH = 4


def infer_from_source(
    module: nn.Module,
    param: str,
    tree: ast.Module | None,
    symbols: Symbols,
    spatial: int = SPATIAL,
) -> PlannedInput | None:
    """The input ``param`` of ``module.forward`` from the first layer its source passes it to.

    Follows ``self.a.b(x)``, ``self.blocks[0](x)``, ``self.features(x)`` into a Sequential's
    first layer, ``self._forward_impl(x)`` into that method and a custom submodule into its own
    ``forward``. Used when tracing stopped before the input reached a layer.
    """
    if tree is None:
        return None
    found = _first_in_source(module, "forward", param, "", tree, 0)
    if found is None:
        return None
    target, layer = found
    return layer_input(param, target, layer, symbols, spatial)


_SIZE_FUNCTIONS = frozenset(
    {"arange", "range", "zeros", "ones", "empty", "full", "rand", "randn", "eye"}
)
"""Functions whose positional arguments are sizes (``torch.arange(seq_len)``, ``range(n)``,
``torch.ones(n, n)``), called as ``torch.arange``, ``arange`` or ``range``."""


def used_as_size(module: nn.Module, name: str) -> str | None:
    """The call in ``forward`` that takes ``name`` as a size (``torch.arange(seq_len)``,
    ``torch.arange(j - i, j)``), quoted, when ``forward`` never uses ``name`` as anything but
    a number: no attribute, method, item or ``len`` of it (a rotary or bias helper given a
    length). None otherwise."""
    fn = forward_definition(type(module))
    if fn is None:
        return None
    found: ast.Call | None = None
    for node in ast.walk(fn):
        if isinstance(node, (ast.Attribute, ast.Subscript)) and is_name(node.value, name):
            return None  # a tensor, a sequence, an object
        if not isinstance(node, ast.Call):
            continue
        callee = node.func.attr if isinstance(node.func, ast.Attribute) else None
        callee = node.func.id if isinstance(node.func, ast.Name) else callee
        sizes = node.args[:1] if callee == "full" else node.args  # ``full(size, value)``
        counted = any(_counts(arg, name) for arg in sizes)
        if callee == "len" and counted:
            return None
        if found is None and callee in _SIZE_FUNCTIONS and counted:
            found = node
    return short_source(ast.unparse(found)) if found is not None else None


def _counts(node: ast.expr, name: str) -> bool:
    """``name`` itself, in arithmetic (``j - i``, ``n * 2``, ``-n``) or in a tuple of sizes."""
    if isinstance(node, (ast.Tuple, ast.List)):
        return any(_counts(e, name) for e in node.elts)
    if isinstance(node, ast.BinOp):
        return _counts(node.left, name) or _counts(node.right, name)
    if isinstance(node, ast.UnaryOp):
        return _counts(node.operand, name)
    return is_name(node, name)


def _class_def(tree: ast.Module, cls: type) -> ast.ClassDef | None:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == cls.__name__:
            return node
    return None


def _method_def(tree: ast.Module, cls: type, name: str) -> ast.FunctionDef | None:
    for klass in cls.__mro__:
        node = _class_def(tree, klass)
        if node is None:
            continue
        for item in node.body:
            if isinstance(item, ast.FunctionDef) and item.name == name:
                return item
    return None


def _first_in_source(
    module: nn.Module, method: str, param: str, prefix: str, tree: ast.Module, depth: int
) -> tuple[str, nn.Module] | None:
    fn = _method_def(tree, type(module), method)
    if fn is None or depth > MAX_SOURCE_DEPTH:
        return None
    return _first_in_function(_Scope(module, frozenset({"self"}), prefix, tree, depth), fn, param)


@dataclass(frozen=True)
class _Scope:
    """Where a function's source is read: the module it is a method of (named ``selves`` in
    it: ``self``, or ``attn`` in an attention processor), the path of that module under the
    class fxls captures, the parsed file and how deep the walk is."""

    module: nn.Module
    selves: frozenset[str]
    prefix: str
    tree: ast.Module
    depth: int

    def resolve(self, func: ast.expr) -> tuple[str, Any] | None:
        return resolve(self.module, func, self.selves)


def _aliases(fn: ast.FunctionDef, param: str, scope: _Scope) -> set[str]:
    """``param`` and the names it is assigned to unchanged (``hidden_states = input_tensor``,
    ``inp, target = x, x[:, 1:]``) or with its shape kept (``masked = torch.where(mask, id,
    x)``, :func:`_carries`)."""
    aliases = {param}
    for node in sorted(
        (n for n in ast.walk(fn) if isinstance(n, ast.Assign)),
        key=lambda n: (n.lineno, n.col_offset),
    ):
        for target, value in _pairs(node):
            if _carries(value, aliases, scope):
                aliases.add(target)
    return aliases


def _pairs(node: ast.Assign) -> Iterator[tuple[str, ast.expr]]:
    """The names an assignment gives a value and the values, pairwise where a tuple is
    assigned to a tuple of names (``a, b = x, y``)."""
    for target in node.targets:
        if isinstance(target, ast.Name):
            yield target.id, node.value
        elif (
            isinstance(target, ast.Tuple)
            and isinstance(node.value, ast.Tuple)
            and len(target.elts) == len(node.value.elts)
        ):
            for name, value in zip(target.elts, node.value.elts, strict=True):
                if isinstance(name, ast.Name):
                    yield name.id, value


def _carries(node: ast.expr, aliases: set[str], scope: _Scope) -> bool:
    """The value itself, through tensor methods that keep its shape (``x.add(1)``), or
    through a layer that keeps its channels (``self.act(x)``)."""
    if isinstance(node, ast.Name):
        return node.id in aliases
    if not isinstance(node, ast.Call):
        return False
    if isinstance(node.func, ast.Attribute) and node.func.attr in _SAME_SHAPE_METHODS:
        return _carries(node.func.value, aliases, scope)
    if _is_torch(node.func, "where") and len(node.args) == 3:
        return any(_carries(a, aliases, scope) for a in node.args[1:])
    found = scope.resolve(node.func) if node.args else None
    kept = found is not None and isinstance(found[1], _KEEPS_CHANNELS)
    return kept and _carries(node.args[0], aliases, scope)


def _is_torch(func: ast.expr, name: str) -> bool:
    """``torch.name``."""
    return (
        isinstance(func, ast.Attribute)
        and func.attr == name
        and isinstance(func.value, ast.Name)
        and func.value.id == "torch"
    )


def _passed_as(call: ast.Call, aliases: set[str], scope: _Scope) -> tuple[int, str | None] | None:
    """Where a call passes the value: (positional index, None) or (-1, keyword)."""
    for index, arg in enumerate(call.args):
        if _carries(arg, aliases, scope):
            return index, None
    for keyword in call.keywords:
        if keyword.arg is not None and _carries(keyword.value, aliases, scope):
            return -1, keyword.arg
    return None


def _first_in_function(
    scope: _Scope, fn: ast.FunctionDef, param: str
) -> tuple[str, nn.Module] | None:
    """The first layer ``fn`` passes ``param`` to, by position or keyword, through
    activations and padding on the way."""
    calls = sorted(
        (n for n in ast.walk(fn) if isinstance(n, ast.Call) and (n.args or n.keywords)),
        key=lambda n: (n.lineno, n.col_offset),
    )
    assigned = {
        id(n.value): n.targets[0].id
        for n in ast.walk(fn)
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)
    }
    aliases = _aliases(fn, param, scope)
    rebound = _rebound(fn, aliases, scope)
    for call in calls:
        if (call.lineno, call.col_offset) > rebound:
            break  # the name holds something else from there on
        where = _passed_as(call, aliases, scope)
        resolved = scope.resolve(call.func) if where is not None else None
        if where is None or resolved is None:
            continue
        path, obj = resolved
        if isinstance(obj, _KEEPS_CHANNELS):
            # padding, activations, pooling: the value passes on under the name it is given
            target = assigned.get(id(call))
            if target is not None and where == (0, None):
                aliases.add(target)
            continue
        found = _into_callee(scope, obj, call, where, f"{scope.prefix}{path}")
        if found is not None:
            return found
    return None


def _derived(value: ast.expr, aliases: set[str], scope: _Scope) -> bool:
    """The input reshaped or combined (``x.reshape(b, f, t, c)``, ``x + self.pe[:n]``,
    ``x[:, 0]``, ``x == pad``, ``rearrange(x, "b n d -> b d n")``): fxls goes on reading its later layers
    for what the input is, but not past a module it was given to (``self.emb(x) * scale``) or
    a function that takes it after something else (``embed(self.table, x)``)."""
    if isinstance(value, ast.Name):
        return value.id in aliases
    if isinstance(value, ast.Call):
        if isinstance(value.func, ast.Attribute) and _derived(value.func.value, aliases, scope):
            return True
        found = scope.resolve(value.func)
        if found is not None and isinstance(found[1], nn.Module):
            return False
        return bool(value.args) and _derived(value.args[0], aliases, scope)
    if isinstance(value, ast.BinOp):
        return _derived(value.left, aliases, scope) or _derived(value.right, aliases, scope)
    if isinstance(value, (ast.Subscript, ast.Attribute)):
        return _derived(value.value, aliases, scope)
    if isinstance(value, ast.UnaryOp):
        return _derived(value.operand, aliases, scope)
    if isinstance(value, ast.Compare):
        return any(_derived(v, aliases, scope) for v in (value.left, *value.comparators))
    return False


def _rebound(fn: ast.FunctionDef, aliases: set[str], scope: _Scope) -> tuple[float, float]:
    """Where the first statement of ``fn``'s body ends that gives one of ``aliases`` a value
    that is not the input passed on (``x = embed(self.table, x)``): a later ``self.norm(x)``
    is not given the input. The input reshaped or combined (:func:`_derived`) is passed on."""
    found = [
        (node.end_lineno or node.lineno, node.end_col_offset or 0)
        for node in fn.body  # not under an ``if``: a branch the call may not take
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id in aliases for t in node.targets)
        and not _passes_on(node.value, aliases, scope)
    ]
    return min(found, default=(float("inf"), float("inf")))


def _passes_on(value: ast.expr, aliases: set[str], scope: _Scope) -> bool:
    """Whether an assigned value is the input passed on (itself, a shape-keeping method of it,
    or a layer that keeps its channels, as ``x = self.act(x)``)."""
    if _carries(value, aliases, scope) or _derived(value, aliases, scope):
        return True
    if not isinstance(value, ast.Call) or not value.args:
        return False
    found = scope.resolve(value.func)
    return found is not None and isinstance(found[1], _KEEPS_CHANNELS)


def _into_callee(
    scope: _Scope, obj: Any, call: ast.Call, where: tuple[int, str | None], qualified: str
) -> tuple[str, nn.Module] | None:
    """Follow the value into what the code calls: a submodule (its first layer, or the
    parameter of its ``forward`` the value binds to), a method of the module, or an object
    with a ``__call__`` that takes the module itself (diffusers' attention processors:
    ``self.processor(self, hidden_states)``)."""
    index, keyword = where
    if isinstance(obj, nn.Module):
        if where == (0, None):
            return _into_module(obj, qualified, scope.tree, scope.depth)
        if type(obj).__module__.startswith("torch."):
            return None  # a torch layer's other inputs (``key`` of attention): not read
        name = bound_name(obj.forward, index, keyword)
        inner = module_tree(type(obj)) or scope.tree
        if name is None:
            return None
        return _first_in_source(obj, "forward", name, f"{qualified}.", inner, scope.depth + 1)
    if inspect.ismethod(obj) and obj.__self__ is scope.module:
        name = bound_name(obj, index, keyword)
        if name is None:
            return None
        return _first_in_source(
            scope.module, obj.__name__, name, scope.prefix, scope.tree, scope.depth + 1
        )
    return _into_processor(scope, obj, call, where)


def bound_name(func: Any, index: int, keyword: str | None) -> str | None:
    """The parameter of a bound callable that a positional ``index`` or ``keyword`` binds."""
    try:
        params = list(inspect.signature(func).parameters.values())
    except (TypeError, ValueError):
        return None
    if keyword is not None:
        return keyword if any(p.name == keyword for p in params) else None
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return positional[index].name if index < len(positional) else None


def _into_processor(
    scope: _Scope, obj: Any, call: ast.Call, where: tuple[int, str | None]
) -> tuple[str, nn.Module] | None:
    """Into ``type(obj).__call__`` when ``call`` passes the module itself to it."""
    takes_module = [
        i for i, arg in enumerate(call.args) if isinstance(arg, ast.Name) and arg.id in scope.selves
    ]
    call_method = vars(type(obj)).get("__call__")
    if not takes_module or not inspect.isfunction(call_method) or scope.depth >= MAX_SOURCE_DEPTH:
        return None
    tree = module_tree(type(obj))
    fn = _method_def(tree, type(obj), "__call__") if tree is not None else None
    if fn is None or tree is None:
        return None
    names = [a.arg for a in [*fn.args.posonlyargs, *fn.args.args]][1:]  # after its ``self``
    selves = frozenset(names[i] for i in takes_module if i < len(names))
    index, keyword = where
    name = keyword if keyword is not None else (names[index] if index < len(names) else None)
    if name is None or not selves:
        return None
    inner = _Scope(scope.module, selves, scope.prefix, tree, scope.depth + 1)
    return _first_in_function(inner, fn, name)


_SAME_SHAPE_METHODS = frozenset(
    {"add", "sub", "mul", "div", "contiguous", "clone", "type_as", "clamp", "tanh", "sigmoid",
     "relu", "neg", "abs", "exp", "detach", *_CASTS}
)  # fmt: skip
"""Tensor methods whose result has its tensor's shape: the value passes on through them."""

_KEEPS_CHANNELS = (
    nn.ReflectionPad1d, nn.ReflectionPad2d, nn.ReflectionPad3d, nn.ZeroPad2d,
    nn.ConstantPad1d, nn.ConstantPad2d, nn.ConstantPad3d, nn.ReplicationPad1d,
    nn.ReplicationPad2d, nn.ReplicationPad3d, nn.ReLU, nn.ReLU6, nn.GELU, nn.SiLU, nn.Tanh,
    nn.Sigmoid, nn.LeakyReLU, nn.ELU, nn.Hardswish, nn.Mish, nn.MaxPool1d, nn.MaxPool2d,
    nn.MaxPool3d, nn.AvgPool1d, nn.AvgPool2d, nn.AvgPool3d, nn.Upsample, nn.Dropout,
    nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.Identity,
)  # fmt: skip

_LAYERS = (
    nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.ConvTranspose1d, nn.ConvTranspose2d,
    nn.ConvTranspose3d, nn.RMSNorm, nn.Linear, nn.Embedding, nn.LayerNorm, nn.BatchNorm1d,
    nn.BatchNorm2d, nn.BatchNorm3d, nn.GroupNorm, nn.RNNBase, nn.MultiheadAttention,
    nn.TransformerEncoderLayer, nn.TransformerDecoderLayer, nn.TransformerEncoder,
    nn.TransformerDecoder,
)  # fmt: skip


def norm_width(m: nn.Module) -> int | None:
    """The width a library's own normalization layer normalizes (an ``RMSNorm`` written in
    the model's file, ``T5LayerNorm``): its 1-D ``weight``, else its ``dim``; None for other
    modules, and for a norm built for any width (diffusers' ``RMSNorm(0, eps, False)`` in
    Mochi's blocks: ``dim`` ``(0,)``, no weight), which tells nothing."""
    if "Norm" not in type(m).__name__ or type(m).__module__.startswith("torch."):
        return None
    weight = getattr(m, "weight", None)
    if isinstance(weight, torch.Tensor) and weight.dim() == 1:
        return int(weight.shape[0]) or None
    dim = getattr(m, "dim", None)
    if isinstance(dim, tuple) and len(dim) == 1:
        dim = dim[0]
    return dim if isinstance(dim, int) and not isinstance(dim, bool) and dim > 0 else None


def _into_module(
    obj: nn.Module, path: str, tree: ast.Module, depth: int
) -> tuple[str, nn.Module] | None:
    if isinstance(obj, _LAYERS) or norm_width(obj) is not None:
        return path, obj
    if isinstance(obj, _PASS_THROUGH):
        return None
    if isinstance(obj, (nn.Sequential, nn.ModuleList)) and len(obj):
        for index, child in enumerate(obj):
            if isinstance(child, _PASS_THROUGH):
                continue
            return _into_module(child, f"{path}.{index}", tree, depth + 1)
        return None
    try:
        params = [p for p in inspect.signature(obj.forward).parameters]
    except (TypeError, ValueError):
        return None
    if not params:
        return None
    inner = module_tree(type(obj)) or tree  # a class of another file is read in its file
    return _first_in_source(obj, "forward", params[0], f"{path}.", inner, depth + 1)


def resolve(
    module: nn.Module, func: ast.expr, selves: frozenset[str] = frozenset({"self"})
) -> tuple[str, Any] | None:
    """``self.a.b`` / ``self.a[0]`` / ``self.a['k']`` -> (qualified name, object); ``selves``
    are the names the code gives ``module`` (``attn`` in an attention processor)."""
    steps: list[tuple[str, Any]] = []
    node = func
    while True:
        if isinstance(node, ast.Attribute):
            steps.append(("attr", node.attr))
            node = node.value
        elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            steps.append(("item", node.slice.value))
            node = node.value
        else:
            break
    if not (isinstance(node, ast.Name) and node.id in selves) or not steps:
        return None
    obj: Any = module
    names: list[str] = []
    for kind, key in reversed(steps):
        try:
            obj = getattr(obj, key) if kind == "attr" else obj[key]
        except Exception:
            return None
        names.append(str(key))
    return ".".join(names), obj


def size_hints(module: nn.Module, arguments: dict[str, Any]) -> dict[str, int]:
    """Sizes the constructor arguments (or the module's attributes) name: an image size, a
    number of input channels."""
    found: dict[str, int] = {}
    sources: list[dict[str, Any]] = [arguments]
    for attr in ("config", "args", "params", "cfg"):
        value = getattr(module, attr, None)
        if value is not None and hasattr(value, "__dict__"):
            sources.append(vars(value))
    sources.append({k: v for k, v in vars(module).items() if not k.startswith("_")})
    for source in sources:
        for key, value in source.items():
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                continue
            lowered = key.lower()
            if re.search(r"image_size|img_size|input_resolution|resolution|imsize", lowered):
                found.setdefault("spatial", value)
            elif re.search(r"^channels$|in_chans|in_channels|input_channels|num_channels", lowered):
                found.setdefault("channels", value)
            elif re.search(r"^(num_)?frames$|^n_frames$|video_frames", lowered):
                found.setdefault("frames", value)
    return found


# ---------------------------------------------------------------------------------------
# Inputs the file itself passes: ``model(torch.randn(1, 1, 28, 28))``
# ---------------------------------------------------------------------------------------


def from_calls(
    doc: ExecutedDocument,
    cls: type,
    params: list[str],
    symbols: Symbols,
    built_by: str | None = None,
) -> dict[str, PlannedInput]:
    """Inputs of ``cls`` from calls in the file whose arguments are computable from the file's
    names alone: ``Net()(torch.randn(1, 1, 28, 28))``, or ``model = Net()`` then ``model(x)``
    with ``x = torch.zeros(2, 16, dtype=torch.long)`` at module level. A tensor the file's
    ``if __name__ == "__main__":`` demo assigns (``time_series = torch.randn(4, 3, 256)``,
    then ``logits = v(time_series)``; the demo does not run) counts for an instance built as
    the capture's was, ``built_by`` (``SimpleViT(seq_len=256, ...)``, from that call): sizes
    made for the demo's model need not fit one fxls built otherwise. The first dimension of a
    tensor is the batch ``B``."""
    tree, namespace = doc.tree, doc.namespace
    if tree is None:
        return {}
    assigned = _top_level_assignments(tree)
    instances = {
        t.id: node.value
        for node in nodes_of(tree, ast.Assign)
        if isinstance(node, ast.Assign) and _builds(node.value, cls.__name__)
        for t in node.targets
        if isinstance(t, ast.Name)
    }
    for node in nodes_of(tree, ast.Call):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        func = node.func
        built = instances.get(func.id) if isinstance(func, ast.Name) else None
        if built is None and _builds(func, cls.__name__):
            built = func
        if not isinstance(built, ast.Call):
            continue
        same = built_by is not None and f"{cls.__name__}({arguments_text(built)})" == built_by
        found: dict[str, PlannedInput] = {}
        for name, arg in zip(params, node.args):
            if same and isinstance(arg, ast.Name) and arg.id not in namespace:
                arg = _last_before(assigned.get(arg.id, []), node.lineno) or arg
            value = _evaluate(arg, namespace)
            if not isinstance(value, torch.Tensor) or value.dim() == 0:
                break
            dims: list[tuple[str | None, int]] = [(None, int(s)) for s in value.shape]
            dims[0] = (BATCH, symbols.size(BATCH))
            found[name] = PlannedInput(
                name, "tensor", dims, value.dtype, assumed=True,
                reason=f"the call at line {node.lineno}",
            )  # fmt: skip
        if found:
            return found
    return {}


def _top_level_assignments(tree: ast.Module) -> dict[str, list[ast.Assign]]:
    """Assignments of one name at the file's top level, also inside its ``if``, ``with`` and
    ``try`` blocks (a ``__main__`` demo), by name, in the order written."""
    found: dict[str, list[ast.Assign]] = {}
    todo: list[ast.stmt] = list(tree.body)
    while todo:
        stmt = todo.pop(0)
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            target = stmt.targets[0]
            if isinstance(target, ast.Name):
                found.setdefault(target.id, []).append(stmt)
        elif isinstance(stmt, (ast.If, ast.With, ast.Try)):
            todo.extend(getattr(stmt, "body", []) + getattr(stmt, "orelse", []))
    return found


def _last_before(assignments: list[ast.Assign], line: int) -> ast.expr | None:
    """The value of the last of ``assignments`` written before ``line``."""
    earlier = [a for a in assignments if a.lineno < line]
    return earlier[-1].value if earlier else None


def _builds(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == name


def _evaluate(node: ast.expr, namespace: dict[str, Any]) -> Any:
    """The value of an argument made only of the file's names and literals (None otherwise)."""
    if not resolvable(node, namespace):
        return None
    try:
        code = compile(ast.Expression(body=node), "<fxls call argument>", "eval", dont_inherit=True)
        with torch.device("meta"):
            return eval(code, namespace)
    except Exception:
        return None


# ---------------------------------------------------------------------------------------
# Inputs of library models, by their conventional names and the model's configuration
# ---------------------------------------------------------------------------------------

CONFIG_FIRST = frozenset(
    {"hidden_states", "encoder_hidden_states", "input_features", "pixel_values"}
)
"""Inputs a library block with a configuration sizes better than its first layer does: states
``(B, T, hidden size)`` (a Linear alone says ``(B, hidden size)``), Whisper's mel features at
the one length its encoder accepts (a Conv1d alone says any length), images at the configured
``image_size`` (a patch convolution says any size; position embeddings are made for one)."""


def config_first(
    name: str, module: nn.Module, root: nn.Module | None = None, node: torch.fx.Node | None = None
) -> bool:
    """Whether the configuration sizes input ``name`` before its first layer does: the names
    of :data:`CONFIG_FIRST`, and token ids per choice (a first layer says ``(B, T)``); not
    for states whose first layer (``node`` in ``root``'s graph) is a convolution, which says
    more than the configuration's width (wav2vec 2.0's feature encoder layers take
    ``hidden_states`` ``[B, C, L]``)."""
    if name == "input_ids" and multiple_choice(module):
        return True
    if name not in CONFIG_FIRST:
        return False
    if name not in ("hidden_states", "encoder_hidden_states") or root is None or node is None:
        return True  # images and mel features: the configuration's size is the one
    found = first_layer(root, node)
    return found is None or not isinstance(found[1], nn.modules.conv._ConvNd)


_SUB_CONFIGS = ("text_config", "vision_config", "audio_config", "encoder", "decoder")
_TOKEN_IDS = ("input_ids", "decoder_input_ids")


def configurations(module: nn.Module, arguments: dict[str, Any]) -> list[Any]:
    """The configuration objects a module was built from or keeps (``self.config``, a
    ``config`` argument), then their sub-configurations (``text_config``, ``vision_config``)."""
    found: list[Any] = []
    for value in (getattr(module, "config", None), *arguments.values()):
        if value is None or isinstance(value, (nn.Module, torch.Tensor, type)):
            continue
        if not hasattr(value, "__dict__") or not _config_like(value):
            continue
        if all(value is not f for f in found):
            found.append(value)
    for config in list(found):
        for name in _SUB_CONFIGS:
            sub = _config_value(config, name)
            if sub is not None and _config_like(sub) and all(sub is not f for f in found):
                found.append(sub)
    return found


def _config_like(value: Any) -> bool:
    name = type(value).__name__
    if isinstance(value, dict):  # diffusers' FrozenDict: fields as attributes too
        return type(value) is not dict and name.endswith(("Dict", "Config"))
    return name.endswith(("Config", "Configuration")) or hasattr(value, "to_dict")


def _config_value(config: Any, name: str) -> Any:
    """``config.name``, None when it has none or its lookup raises (a property, or a dict
    whose ``__getattr__`` is ``dict.__getitem__`` and raises ``KeyError``)."""
    try:
        return getattr(config, name, None)
    except Exception:
        return None


def _field(configs: list[Any], *names: str) -> tuple[int, str] | None:
    """The first positive int field among ``names`` in ``configs``, with its name and owner."""
    for config in configs:
        for name in names:
            value = _config_value(config, name)
            if type(value) is int and value > 0:
                return value, f"{type(config).__name__}.{name}={value}"
    return None


WAVEFORM_SAMPLES = 16000
"""Samples of the raw audio fxls gives a speech model's ``input_values``: one second at the
16 kHz such models are trained on."""


def _waveform_config(configs: list[Any]) -> str | None:
    """``Wav2Vec2Config.conv_kernel=(10, 3, ...)`` for a configuration whose model reads raw
    audio through a stack of 1-D convolutions (wav2vec 2.0, HuBERT, WavLM), else None."""
    for config in configs:
        kernel = _config_value(config, "conv_kernel")
        stride = _config_value(config, "conv_stride")
        if not (isinstance(kernel, (tuple, list)) and isinstance(stride, (tuple, list))):
            continue
        if kernel and all(type(k) is int and k > 0 for k in (*kernel, *stride)):
            return f"{type(config).__name__}.conv_kernel={tuple(kernel)}"
    return None


def _audio(name: str, configs: list[Any]) -> tuple[list[tuple[str | None, int]], str] | None:
    """The sizes after the batch, and why, of a speech model's ``input_features`` (Whisper's
    mel frames) or ``input_values`` (a raw waveform)."""
    if name == "input_values":
        waveform = _waveform_config(configs)
        if waveform is None:
            return None
        return [
            (None, WAVEFORM_SAMPLES)
        ], f"one second of 16 kHz audio ({waveform}: a raw waveform)"
    mels = _field(configs, "num_mel_bins")
    positions = _field(configs, "max_source_positions")
    if mels is None or positions is None:
        return None
    # the encoder's two convolutions (the second of stride 2) make max_source_positions
    # frames of 2 * max_source_positions mel frames, the only length it accepts
    length = 2 * positions[0]
    why = f"mel features, {mels[1]}, {positions[1]} (× 2 frames)"
    return [(None, mels[0]), (None, length)], why


def from_config(
    name: str, module: nn.Module, arguments: dict[str, Any], symbols: Symbols
) -> PlannedInput | None:
    """A library ``forward`` input by its conventional name, sized from the module's
    configuration: token ids ``(B, T)``, ``pixel_values`` ``(B, C, H, W)`` at the configured
    image size, Whisper's ``input_features`` at the length its encoder requires, a
    diffusion model's ``sample`` and ``timestep``, ``encoder_hidden_states`` ``(B, S, D)``,
    ``hidden_states`` ``(B, T, hidden_size)``. Marked assumed with the fields it read; None
    when the name is not one of these or the configuration lacks the sizes."""
    b: tuple[str | None, int] = (BATCH, symbols.size(BATCH))

    def planned(dims: list[tuple[str | None, int]], dtype: torch.dtype, why: str) -> PlannedInput:
        return PlannedInput(name, "tensor", dims, dtype, assumed=True, reason=why)

    if name.endswith(GRID_SUFFIX):
        return planned([(None, 1), (None, 3)], torch.int64, "one image's grid of patches (t, h, w)")
    configs = configurations(module, arguments)
    if name in _TOKEN_IDS:
        return _token_ids(name, module, configs, symbols)
    if name == "pixel_values":
        size = _field(configs, "image_size")
        if size is None:
            return None
        channels = _field(configs, "num_channels", "in_channels")
        c = channels[0] if channels is not None else 3
        why = size[1] + (f", {channels[1]}" if channels is not None else "")
        return planned([b, (None, c), (None, size[0]), (None, size[0])], torch.float32, why)
    if name in ("input_features", "input_values"):
        audio = _audio(name, configs)
        return planned([b, *audio[0]], torch.float32, audio[1]) if audio is not None else None
    if name == "sample":
        channels = _field(configs, "in_channels")
        if channels is None:
            return None
        size = _field(configs, "sample_size")
        s = size[0] if size is not None else 32
        why = channels[1] + (f", {size[1]}" if size is not None else ", sample size 32")
        return planned([b, (None, channels[0]), (None, s), (None, s)], torch.float32, why)
    if name in TIMESTEP_NAMES and _field(configs, "in_channels") is not None:
        return per_sample(name, symbols)
    if name == "encoder_hidden_states":
        width = _field(configs, "cross_attention_dim", "d_model", "hidden_size")
        if width is None:
            return None
        dims = [b, (SOURCE, symbols.size(SOURCE)), (None, width[0])]
        return planned(dims, torch.float32, f"an encoder's output, {width[1]}")
    if name == "hidden_states":
        width = _field(configs, "hidden_size", "d_model")
        if width is None:
            return None
        dims = [b, (SEQUENCE, symbols.size(SEQUENCE)), (None, width[0])]
        return planned(dims, torch.float32, width[1])
    return None


def _token_ids(
    name: str, module: nn.Module, configs: list[Any], symbols: Symbols
) -> PlannedInput | None:
    """Token ids ``(B, T)`` (per choice ``(B, N, T)``) into the configuration's vocabulary."""
    vocab = _field(configs, "vocab_size")
    if vocab is None:
        return None
    b: tuple[str | None, int] = (BATCH, symbols.size(BATCH))
    t: tuple[str | None, int] = (SEQUENCE, symbols.size(SEQUENCE))
    dims, why = [b, t], f"token ids, {vocab[1]}"
    if name == "input_ids" and multiple_choice(module):
        dims = [b, (CHOICES, symbols.size(CHOICES)), t]
        why = f"token ids of each choice, {vocab[1]}"
    return PlannedInput(name, "tensor", dims, torch.int64, assumed=True, reason=why)


GRID_SUFFIX = "grid_thw"
"""Vision towers of multimodal models (Qwen2-VL and its descendants) take each image's grid
of patches as ``grid_thw`` ``(images, 3)`` integers (``image_grid_thw``, ``video_grid_thw``)."""

CHOICES = "N"
"""The number of choices of a multiple-choice head (``input_ids`` ``(B, N, T)``)."""


def multiple_choice(module: nn.Module) -> bool:
    """A transformers ``*ForMultipleChoice`` head: its ``forward`` reads ``num_choices`` off
    the second dimension of its token ids and flattens the choices into the batch."""
    return type(module).__name__.endswith("ForMultipleChoice") and _reads(module, "num_choices")


def _reads(module: nn.Module, name: str) -> bool:
    source = _forward_source(module)
    return source is not None and name in source


def cross_attention_states(
    name: str, module: nn.Module, arguments: dict[str, Any], symbols: Symbols
) -> PlannedInput | None:
    """``encoder_hidden_states`` of a transformers cross-attention block
    (``BertCrossAttention``): it defaults to ``None`` but the block attends to nothing else
    (``(B, S, hidden_size)`` from the configuration). None for other inputs and classes."""
    if name != "encoder_hidden_states" or "CrossAttention" not in type(module).__name__:
        return None
    return from_config(name, module, arguments, symbols)


def decoder_inputs(params: list[inspect.Parameter], primary: inspect.Parameter) -> list[str]:
    """The decoder's token ids of an encoder-decoder ``forward`` whose inputs all default to
    ``None``: a decoder called with neither ids nor embeddings raises, as its encoder does."""
    if primary.name == "decoder_input_ids":
        return []
    return [p.name for p in params if p.name == "decoder_input_ids" and p.default is None]


MODALITY_INPUTS = {
    "text": ("input_ids",),
    "image": ("pixel_values",),
    "audio": ("input_features", "input_values"),
    "video": ("pixel_values_videos",),
}
"""The parameter of each input modality transformers names in ``input_modalities``."""


def other_modalities(
    module: nn.Module, params: list[inspect.Parameter], primary: inspect.Parameter
) -> list[str]:
    """The inputs of the other modalities of a model of several (transformers'
    ``input_modalities = ("image", "text")``: ``CLIPModel`` embeds an image and a text in one
    ``forward``), beside its main one, when ``forward`` reads each of them without asking
    whether it was given (``if pixel_values is not None``: a captioning model that also runs
    on text alone keeps it ``None``; one that asks but raises without it needs it)."""
    modalities = getattr(type(module), "input_modalities", None)
    if isinstance(modalities, str) or not isinstance(modalities, (tuple, list)):
        return []
    by_name = {p.name: p for p in params if p.default is None}
    found = []
    for modality in modalities:
        names = MODALITY_INPUTS.get(modality, ()) if isinstance(modality, str) else ()
        name = next((n for n in names if n in by_name), None)
        if name is not None and name != primary.name and name not in found:
            found.append(name)
    if not found:
        return []
    source = _forward_source(module)
    if source is None:
        return []
    return [n for n in found if not _source_asks(source, n)]


def _source_asks(source: str, name: str) -> bool:
    """Whether ``forward``'s source asks whether ``name`` was given, and does not raise
    when it was not (``if (input_features is None) ^ (inputs_embeds is not None): raise``:
    one of the two is needed)."""
    if re.search(rf"\b{name}\s+is\s+not\s+None\b", source) is None:
        return False
    try:
        tree = ast.parse(textwrap.dedent(source))
    except (SyntaxError, ValueError, RecursionError):
        return True
    return not any(
        isinstance(node, ast.If)
        and _tests_none(node.test, name)
        and any(isinstance(s, ast.Raise) for s in node.body)
        for node in ast.walk(tree)
    )


def _tests_none(test: ast.expr, name: str) -> bool:
    """Whether ``test`` holds ``name is None``."""
    return any(
        isinstance(node, ast.Compare)
        and is_name(node.left, name)
        and isinstance(node.ops[0], ast.Is)
        and isinstance(node.comparators[0], ast.Constant)
        and node.comparators[0].value is None
        for node in ast.walk(test)
    )


def _forward_source(module: nn.Module) -> str | None:
    try:
        return inspect.getsource(inspect.unwrap(type(module).forward))
    except (OSError, TypeError):
        return None


SIZED_BY_BUILD = {"temb": "temb_channels", "encoder_hidden_states": "cross_attention_dim"}
"""Inputs that default to ``None`` but that a block built with this size needs (diffusers'
``temb`` of a block with ``temb_channels``, the text states of one with
``cross_attention_dim``), by the constructor argument that sizes them."""


def from_build(name: str, arguments: dict[str, Any], symbols: Symbols) -> PlannedInput | None:
    """``temb`` ``(B, temb_channels)``, ``encoder_hidden_states`` ``(B, S,
    cross_attention_dim)`` for a block built with that argument; None otherwise."""
    size_name = SIZED_BY_BUILD.get(name)
    size = arguments.get(size_name) if size_name is not None else None
    if type(size) is not int or size <= 0:
        return None
    b: tuple[str | None, int] = (BATCH, symbols.size(BATCH))
    dims = (
        [b, (None, size)] if name == "temb" else [b, (SOURCE, symbols.size(SOURCE)), (None, size)]
    )
    why = f"the block's {size_name}={size}"
    return PlannedInput(name, "tensor", dims, assumed=True, reason=why)


SKIP_STATES = "res_hidden_states_tuple"
"""diffusers' up blocks take the skip connections of the matching down block as a tuple of
tensors, which they pop from the end, one per resnet, and concatenate to ``hidden_states``
along the channels."""


def up_block_inputs(
    name: str, module: nn.Module, arguments: dict[str, Any], symbols: Symbols, spatial: int
) -> PlannedInput | None:
    """The inputs of a diffusers up block built with ``prev_output_channel``:
    ``hidden_states`` ``(B, prev_output_channel, H, W)`` and ``res_hidden_states_tuple``, one
    ``(B, C, H, W)`` per resnet in the order a UNet passes them (the last is concatenated
    first), each ``C`` what that resnet's input channels leave after the channels of the
    states it receives (``in_channels`` for the last resnet, ``out_channels`` for the
    others, by diffusers' construction). None for other inputs and blocks."""
    if SKIP_STATES not in _forward_names(module):
        return None
    plan = _up_block_plan(module, arguments)
    if plan is None:
        return None
    previous, channels, why, states_why = plan
    batch = symbols.size(BATCH)
    b: tuple[str | None, int] = (BATCH, batch)
    if name == "hidden_states":
        dims = [b, (None, previous), (None, spatial), (None, spatial)]
        return PlannedInput(name, "tensor", dims, assumed=True, reason=why)
    if name != SKIP_STATES or channels is None:
        return None
    with torch.device("meta"):
        states = tuple(torch.empty(batch, c, spatial, spatial) for c in reversed(channels))
    inner = [[b, *[(None, int(s)) for s in t.shape[1:]]] for t in states]
    return PlannedInput(
        name, "value", value=states, assumed=True, reason=states_why, inner_dims=inner
    )


def _up_block_plan(
    module: nn.Module, arguments: dict[str, Any]
) -> tuple[int, list[int] | None, str, str] | None:
    """The channels of an up block's ``hidden_states``, of its skip states (None when the
    resnets do not tell them) and the reasons for each. Built with ``prev_output_channel``:
    that many, and one state per resnet (:func:`skip_channels`). Without it, when the first
    resnet takes twice ``out_channels`` (diffusers' ``KUpBlock2D``: ``hidden_states``
    concatenated once with the last skip state, before the resnets): half each."""
    previous = arguments.get("prev_output_channel")
    if type(previous) is int and previous > 0:
        channels = skip_channels(module, previous)
        listed = list(reversed(channels)) if channels is not None else None
        return (previous, channels, f"the up block's prev_output_channel={previous}",
                f"one skip state per resnet, channels {listed} from the resnets")  # fmt: skip
    out = arguments.get("out_channels")
    resnets = getattr(module, "resnets", None)
    if type(out) is not int or out <= 0 or not isinstance(resnets, nn.ModuleList):
        return None
    if not len(resnets) or getattr(resnets[0], "in_channels", None) != 2 * out:
        return None
    return (out, [out], f"half the channels its first resnet takes, out_channels={out}",
            f"the last skip state, concatenated once, channels {[out]} from `resnets.0`")  # fmt: skip


def _forward_names(module: nn.Module) -> list[str]:
    try:
        return list(inspect.signature(module.forward).parameters)
    except (TypeError, ValueError):
        return []


def skip_channels(module: nn.Module, previous: int) -> list[int] | None:
    """The channels of the skip state each resnet of ``module.resnets`` concatenates, in the
    resnets' order: its input channels less those of the states it receives (``previous``
    for the first, the output of the one before for the others). None when a resnet does
    not say its channels or leaves none for a skip state."""
    resnets = getattr(module, "resnets", None)
    if not isinstance(resnets, nn.ModuleList) or not len(resnets):
        return None
    found: list[int] = []
    channels = previous
    for resnet in resnets:
        into, out = getattr(resnet, "in_channels", None), getattr(resnet, "out_channels", None)
        if type(into) is not int or type(out) is not int or into <= channels:
            return None
        found.append(into - channels)
        channels = out
    return found


def skip_sample(
    name: str, module: nn.Module, symbols: Symbols, spatial: int
) -> PlannedInput | None:
    """``skip_sample`` of a diffusers skip down block (one with ``downsamplers``): the image
    ``(B, C, H, W)`` its ``skip_conv`` takes, at the resolution of ``hidden_states``;
    ``forward`` downsamples it and fails without it. None otherwise (an up block makes its
    own when given none)."""
    conv = getattr(module, "skip_conv", None)
    if name != "skip_sample" or not isinstance(conv, nn.Conv2d):
        return None
    if getattr(module, "downsamplers", None) is None:
        return None
    b: tuple[str | None, int] = (BATCH, symbols.size(BATCH))
    dims = [b, (None, conv.in_channels), (None, spatial), (None, spatial)]
    why = f"the image `skip_conv` takes: {_describe('skip_conv', conv)}"
    return PlannedInput(name, "tensor", dims, assumed=True, reason=why)
