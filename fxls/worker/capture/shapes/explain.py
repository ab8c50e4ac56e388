"""Readable shape errors: which node failed, on what shapes, and what would fix it."""

from __future__ import annotations

import operator
import re
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

from fxls.worker.capture.shapes.shortcuts import DtypeMismatch
from fxls.worker.capture.shapes.values import MISSING, Namer, dims_of, dtype_name, size_text


@dataclass
class ShapeError:
    """The first node whose shape propagation failed."""

    node: str
    message: str
    """Readable message (names modules' expected sizes, uses the user's dimension names)."""
    exception: BaseException
    original: str = ""
    """The exception's own first line (dimension symbols renamed), for reference."""


class NoExample(Exception):
    def __init__(self, name: str) -> None:
        super().__init__(f"no example value for input `{name}`")
        self.name = name


_REDUCTION = re.compile(r"must have same reduction dim, but got \[([^\]]*)\] X \[([^\]]*)\]")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    line = text.splitlines()[0].strip()
    # C++ errors start with the source location of torch's build: drop it
    return re.sub(r"^\S+\.(?:cpp|h|hpp|cu):\d+: ", "", line)


def _describe(obj: Any, namer: Namer) -> str:
    if isinstance(obj, torch.Tensor):
        return f"{size_text(dims_of(obj, namer))} {dtype_name(obj.dtype)}"
    return namer.scalar(obj) if isinstance(obj, (int, float, bool)) else type(obj).__name__


def _arg_nodes(node: torch.fx.Node) -> list[torch.fx.Node]:
    found: list[torch.fx.Node] = []
    torch.fx.node.map_arg((node.args, node.kwargs), found.append)
    return found


def target_name(node: torch.fx.Node) -> str:
    target = node.target
    if isinstance(target, str):
        return target
    return getattr(target, "__name__", str(target))


def _balanced(text: str) -> str:
    """``text`` without a closing parenthesis nothing opened at its end (torch's symbolic
    broadcast error ends "... at non-singleton dimension 1)")."""
    if text.endswith(")") and text.count(")") > text.count("("):
        return text[:-1]
    return text


def shape_error(
    gm: torch.fx.GraphModule,
    node: torch.fx.Node,
    exc: BaseException,
    env: dict[torch.fx.Node, Any],
    namer: Namer,
) -> ShapeError:
    original = _balanced(namer.text(_first_line(exc)))
    try:
        message = _explain(gm, node, exc, env, namer, original)
    except Exception:
        message = None
    if message is None:
        message = original
        inputs = [
            f"`{arg.name}` {_describe(env[arg], namer)}"
            for arg in _arg_nodes(node)
            if isinstance(env.get(arg, MISSING), torch.Tensor)
        ]
        if inputs:
            message += f" (inputs: {', '.join(inputs[:4])})"
    return ShapeError(node=node.name, message=message, exception=exc, original=original)


def _explain(
    gm: torch.fx.GraphModule,
    node: torch.fx.Node,
    exc: BaseException,
    env: dict[torch.fx.Node, Any],
    namer: Namer,
    original: str,
) -> str | None:
    """A readable message for the common failures; None when there is nothing better."""
    if isinstance(exc, NoExample):
        return str(exc)
    data_dependent = _data_dependent(node, exc, env)
    if data_dependent:
        return data_dependent
    args = [env.get(a) if isinstance(a, torch.fx.Node) else a for a in node.args]
    first = args[0] if args else None
    if node.op == "call_module" and isinstance(first, torch.Tensor):
        module = gm.get_submodule(str(node.target))
        explained = _explain_module(module, node, first, namer, exc)
        if explained:
            return explained
    plain = _python_error(gm, node, exc, args, namer)
    if plain:
        return plain
    if node.op == "call_function" and node.target is torch.nn.functional.linear:
        weight = args[1] if len(args) > 1 else env.get(node.kwargs.get("weight"))  # type: ignore[arg-type]
        if isinstance(first, torch.Tensor) and isinstance(weight, torch.Tensor):
            w = dims_of(weight, namer)
            x = dims_of(first, namer)
            if len(w) == 2 and x and str(x[-1]) != str(w[1]):
                return (
                    f"input is {size_text(x)} but weight is {size_text(w)} "
                    f"(out_features × in_features): last dimension {x[-1]} differs from "
                    f"in_features {w[1]}"
                )
    match = _REDUCTION.search(original)
    if match:
        a, b = match.group(1), match.group(2)
        inner_a = a.split(",")[-1].strip()
        inner_b = b.split(",")[0].strip()
        return (
            f"mat1 is [{a}] but mat2 is [{b}]: inner dimensions {inner_a} and {inner_b} differ "
            f"({target_name(node)})"
        )
    return None


_PYTHON_ERRORS = (IndexError, KeyError, ValueError, TypeError, AttributeError)
_UNPACK = re.compile(r"(?:not enough|too many) values to unpack \(expected (\d+)(?:, got (\d+))?\)")


def _python_error(
    gm: torch.fx.GraphModule, node: torch.fx.Node, exc: BaseException, args: list[Any],
    namer: Namer,
) -> str | None:  # fmt: skip
    """Plain Python errors in words: an item past the end of a tuple, an unpacking of the
    wrong count, a module whose own code raised (named, with its class)."""
    if type(exc) not in _PYTHON_ERRORS:
        return None
    if (
        node.target is operator.getitem
        and len(args) > 1
        and isinstance(exc, (IndexError, KeyError))
    ):
        container, index = args[0], args[1]
        shown = repr(index) if isinstance(index, (int, str)) else type(index).__name__
        if isinstance(container, (tuple, list)):
            items = ", ".join(_describe(v, namer) for v in container[:4])
            kind = type(container).__name__
            return f"takes item {shown[:40]} of a {kind} of {len(container)} ({items})"
        if isinstance(container, torch.Tensor) and isinstance(exc, IndexError):
            return f"index {shown[:40]} is past the end of {_describe(container, namer)}"
    unpack = _UNPACK.search(str(exc))
    if unpack:
        got = f" from one that holds {unpack.group(2)}" if unpack.group(2) else ""
        return f"unpacks {unpack.group(1)} values{got}"
    if node.op == "call_module":
        module = gm.get_submodule(str(node.target))
        return (
            f"`{node.target}` ({type(module).__name__}) raised {type(exc).__name__} in its own "
            f"code: {_first_line(exc)[:120]}"
        )
    return None


def _data_dependent(
    node: torch.fx.Node, exc: BaseException, env: dict[torch.fx.Node, Any]
) -> str | None:
    from torch._subclasses.fake_tensor import (
        DataDependentOutputException,
        DynamicOutputShapeException,
    )
    from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

    op = target_name(node)
    text = str(exc)
    if isinstance(exc, (DataDependentOutputException,)) or ("item()" in text and "meta" in text):
        return (
            f"`{op}` reads a tensor's values, which do not exist during shape propagation "
            "(data-dependent result)"
        )
    if isinstance(exc, DynamicOutputShapeException) or (
        isinstance(exc, NotImplementedError) and op in {"nonzero", "unique", "masked_select"}
    ):
        return (
            f"`{op}` has an output shape that depends on tensor values, which do not exist "
            "during shape propagation"
        )
    for arg in _arg_nodes(node):
        example = env.get(arg)
        if isinstance(example, (torch.SymInt, torch.SymFloat, torch.SymBool)) and any(
            str(sym).startswith(("u", "zuf", "zf")) for sym in example.node.expr.free_symbols
        ):
            return (
                f"`{op}` uses `{arg.name}`, a value read from a tensor's data, which is unknown "
                "during shape propagation"
            )
    if isinstance(exc, GuardOnDataDependentSymNode):
        return (
            f"`{op}` needs a size that depends on tensor values (for example after "
            "`nonzero` or `.item()`), which is unknown during shape propagation"
        )
    return None


def _explain_module(
    module: Any, node: torch.fx.Node, x: torch.Tensor, namer: Namer, exc: BaseException
) -> str | None:
    """Name a module's expected input size against what it got."""
    nn = torch.nn
    shape = dims_of(x, namer)
    got = f"{size_text(shape)}"
    kind = type(module).__name__
    arg = node.args[0]
    src = f"`{arg.name}`" if isinstance(arg, torch.fx.Node) else "its input"
    if isinstance(exc, DtypeMismatch):
        return (
            f"`{node.target}` is {kind} with {dtype_name(module.weight.dtype)} weights but its "
            f"input {src} is {dtype_name(x.dtype)} {got}: convert one of them "
            f"(`.to({module.weight.dtype})` on the input, or the module's dtype)"
        )
    if isinstance(module, nn.Linear):
        if shape and str(shape[-1]) != str(module.in_features):
            return (
                f"`{node.target}` is {kind}(in_features={module.in_features}, "
                f"out_features={module.out_features}) but its input {src} is {got}: last "
                f"dimension {shape[-1]} differs from in_features {module.in_features}"
            )
    elif isinstance(module, nn.modules.conv._ConvNd):
        spatial = len(module.kernel_size)
        if len(shape) in (spatial + 1, spatial + 2):
            channels = shape[-spatial - 1]
            if str(channels) != str(module.in_channels):
                return (
                    f"`{node.target}` is {kind}(in_channels={module.in_channels}, "
                    f"out_channels={module.out_channels}) but its input {src} is {got}: it has "
                    f"{channels} channels, not {module.in_channels}"
                )
        else:
            return (
                f"`{node.target}` is {kind} and expects a {spatial + 2}-d (N, C, ...) or "
                f"{spatial + 1}-d input, but its input {src} is {got} ({len(shape)}-d)"
            )
    elif isinstance(module, (nn.Embedding, nn.EmbeddingBag)):
        if x.dtype.is_floating_point or x.dtype.is_complex or x.dtype == torch.bool:
            return (
                f"`{node.target}` is {kind}({module.num_embeddings}, {module.embedding_dim}) "
                f"and needs integer indices (int64), but its input {src} is "
                f"{dtype_name(x.dtype)} {got}"
            )
    elif isinstance(module, nn.modules.batchnorm._NormBase):
        if len(shape) >= 2 and str(shape[1]) != str(module.num_features):
            return (
                f"`{node.target}` is {kind}({module.num_features}) but its input {src} is "
                f"{got}: it has {shape[1]} channels, not {module.num_features}"
            )
    elif isinstance(module, nn.LayerNorm):
        norm = list(module.normalized_shape)
        tail = shape[-len(norm) :] if norm else []
        if [str(d) for d in tail] != [str(d) for d in norm]:
            return (
                f"`{node.target}` is LayerNorm({size_text(norm)}) but its input {src} is "
                f"{got}: its last dimensions {size_text(tail)} differ from {size_text(norm)}"
            )
    elif isinstance(module, nn.GroupNorm):
        if len(shape) >= 2 and str(shape[1]) != str(module.num_channels):
            return (
                f"`{node.target}` is GroupNorm({module.num_groups}, {module.num_channels}) but "
                f"its input {src} is {got}: it has {shape[1]} channels"
            )
    elif isinstance(module, nn.RNNBase) and shape and str(shape[-1]) != str(module.input_size):
        return (
            f"`{node.target}` is {kind}(input_size={module.input_size}, "
            f"hidden_size={module.hidden_size}) but its input {src} is {got}: last dimension "
            f"{shape[-1]} differs from input_size {module.input_size}"
        )
    return None
