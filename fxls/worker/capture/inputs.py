"""Example inputs for a module's ``forward``: declared, evaluated, or inferred from the first layer.

Declared inputs come from ``ClassRequest.inputs`` (directives, jaxtyping annotations, the CLI).
A named dimension is symbolic; its example size is the size given with it, else a distinct
default per name (2, 3, 5, 7, ... skipping sizes already used, never 1, which torch would
specialize). Undeclared tensor inputs are inferred after tracing from the first layer their
placeholder feeds (``Conv2d.in_channels``, ``Linear.in_features``, ...) and marked assumed.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
import torch.fx
from torch import nn

from fxls.protocol.model import DimSpec, InputSpec, Value

BATCH = "B"
SEQUENCE = "T"


@dataclass
class PlannedInput:
    """One ``forward`` argument as fxls will pass it (same fields as ``shapes.ExampleInput``)."""

    name: str
    kind: Literal["tensor", "value"]
    dims: list[tuple[str | None, int]] = field(default_factory=list)
    dtype: torch.dtype = torch.float32
    value: Any = None
    assumed: bool = False
    reason: str | None = None
    """For assumed inputs: where the shape came from (``conv1: Conv2d(3, 64, ...)``)."""

    def protocol_value(self) -> Value:
        """The input as a protocol ``Value`` (symbolic dims print as their names)."""
        if self.kind == "tensor":
            shape: list[int | str] = [name or size for name, size in self.dims]
            return Value(kind="tensor", shape=shape, dtype=dtype_name(self.dtype))
        return value_of(self.value)

    def shape_text(self) -> str:
        inner = ", ".join(name or str(size) for name, size in self.dims)
        if len(self.dims) == 1:
            inner += ","
        return f"({inner})" + ("" if self.dtype == torch.float32 else f" {dtype_name(self.dtype)}")


class InputError(Exception):
    """A declared input could not be made (bad dtype, expression raised)."""

    def __init__(self, name: str, message: str):
        super().__init__(message)
        self.name = name


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def value_of(v: Any) -> Value:
    """A non-tensor Python value as a protocol ``Value``."""
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
    text = repr(v)
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
    """``forward``'s parameters (without ``self``)."""
    sig = inspect.signature(module.forward)
    return list(sig.parameters.values())


def keeps_default(param: inspect.Parameter) -> bool:
    """True for a parameter whose default is a plain value (flag, ``None``), passed as is."""
    return param.default is not inspect.Parameter.empty and not isinstance(
        param.default, torch.Tensor
    )


def _describe(name: str, module: nn.Module) -> str:
    extra = module.extra_repr()
    text = f"{type(module).__name__}({extra})"
    if len(text) > 60:
        text = text[:57] + "...)"
    return f"`{name}`: {text}" if name else text


_PASS_THROUGH = (nn.Dropout, nn.Identity, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d)


def first_layer(root: nn.Module, placeholder: torch.fx.Node) -> tuple[str, nn.Module] | None:
    """The first module a placeholder feeds directly (skipping dropout/identity)."""
    frontier = [placeholder]
    seen: set[torch.fx.Node] = set()
    while frontier:
        node = frontier.pop(0)
        for user in node.users:
            if user in seen or user.op != "call_module":
                continue
            seen.add(user)
            if user.args[:1] != (node,):
                continue
            module = root.get_submodule(str(user.target))
            if isinstance(module, _PASS_THROUGH):
                frontier.append(user)
                continue
            return str(user.target), module
    return None


def infer(root: nn.Module, placeholder: torch.fx.Node, symbols: Symbols) -> PlannedInput | None:
    """Infer a tensor input from the first layer it reaches; None when fxls cannot tell.

    ``root`` resolves ``call_module`` targets: the traced GraphModule, or the module itself
    with the partial graph of a trace that failed.
    """
    found = first_layer(root, placeholder)
    if found is None:
        return None
    target, m = found
    b: tuple[str | None, int] = (BATCH, symbols.size(BATCH))
    dims: list[tuple[str | None, int]] | None = None
    dtype = torch.float32

    def fixed(*sizes: int) -> list[tuple[str | None, int]]:
        return [(None, int(s)) for s in sizes]

    if isinstance(m, nn.Conv1d):
        dims = [b, *fixed(m.in_channels, 128)]
    elif isinstance(m, nn.Conv2d):
        dims = [b, *fixed(m.in_channels, 224, 224)]
    elif isinstance(m, nn.Conv3d):
        dims = [b, *fixed(m.in_channels, 16, 112, 112)]
    elif isinstance(m, nn.Linear):
        dims = [b, *fixed(m.in_features)]
    elif isinstance(m, nn.Embedding):
        dims = [b, (SEQUENCE, symbols.size(SEQUENCE))]
        dtype = torch.int64
    elif isinstance(m, nn.LayerNorm):
        dims = [b, (SEQUENCE, symbols.size(SEQUENCE)), *fixed(*m.normalized_shape)]
    elif isinstance(m, nn.BatchNorm1d):
        dims = [b, *fixed(m.num_features)]
    elif isinstance(m, nn.BatchNorm2d):
        dims = [b, *fixed(m.num_features, 224, 224)]
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
    if dims is None:
        return None
    name = str(placeholder.target)
    return PlannedInput(name, "tensor", dims, dtype, assumed=True, reason=_describe(target, m))
