"""An input's axes in the order the code names them: ``tgt_len, bsz, embed_dim = query.size()``.

fxls lays an assumed input out as the layer it reaches takes it, batch first: ``[B, T, 64]``
for a sequence into a ``Linear`` of 64 features. Code written for other layouts says so where
it unpacks the input's size into names: sequence first (fairseq's and fair-esm's attention,
"Time x Batch x Channel"), channels first (``bs, c, h, w = image_embedding.shape``), more axes
(``num_rows, num_cols, batch_size, embed_dim``). :func:`unpacked_names` finds the first such
unpacking of an input, in ``forward``, in a method of the module it is passed to, or in the
``forward`` of a submodule it reaches with its leading axes kept (a norm, dropout, activation
or ``Linear`` on the way); :func:`laid_out` gives the assumed input that order and rank.
:func:`channels_first` tells a norm over an image's channels by how its weight meets the
input (``self.weight[:, None, None]``).
"""

from __future__ import annotations

import ast
import inspect
import re
from dataclasses import dataclass, replace
from typing import Any

from torch import nn

from fxls.worker.capture.build import inputs
from fxls.worker.capture.spans import forward_definition, method_definition, short_source

BATCH_NAMES = re.compile(
    r"^(b|bs|bsz|batch|batch_size|batchsize|n_batch|nbatch|num_batch|n_batches)$", re.IGNORECASE
)
"""Names code gives the batch dimension when it unpacks a size."""
SEQUENCE_NAMES = re.compile(
    r"^(t|n|l|s|seq|seqlen|seq_len|seq_length|sequence_length|tgt_len|src_len|length|len|time"
    r"|n_tokens|num_tokens|ntokens|n_ctx|ctx_len)$",
    re.IGNORECASE,
)
"""Names code gives a sequence's length when it unpacks a size."""
WIDTH_NAMES = re.compile(
    r"^(c|d|e|dim|d_model|model_dim|embed_dim|embedding_dim|emb_dim|embd|n_embd|hidden"
    r"|hidden_size|hidden_dim|channels?|num_channels|ch|features|num_features|in_features|feat_dim"
    r"|feature_dim|in_dim|dim_in|d_in)$",
    re.IGNORECASE,
)
"""Names code gives the features a layer takes last (not ``width``: an image's)."""

MAX_DEPTH = 3
"""How many submodules deep the input is followed to its unpacking."""

_AXES_KEEPING = (
    nn.LayerNorm, nn.RMSNorm, nn.modules.dropout._DropoutNd, nn.Identity, nn.ReLU, nn.GELU,
    nn.SiLU, nn.Tanh, nn.Sigmoid, nn.LeakyReLU, nn.ELU, nn.Mish, nn.Softplus, nn.Linear,
)  # fmt: skip
"""Layers whose output has their input's leading axes (a ``Linear`` changes only the last):
the names of an unpacking of it are the input's."""

_SHAPE_KEEPING_METHODS = frozenset(
    {"contiguous", "clone", "float", "half", "bfloat16", "to", "type_as", "detach", "add",
     "mul", "sub", "div"}
)  # fmt: skip


@dataclass(frozen=True)
class Unpacking:
    """``tgt_len, bsz, embed_dim = query.size()``: the names, the statement as written and the
    method that has it (``MultiheadAttention.forward``)."""

    names: tuple[str, ...]
    text: str
    owner: str
    reshaped: bool = False
    """The method also reshapes the tensor it unpacks (``x.view(b, c, h // p, p, ...)``:
    patches, whose features the layer takes are not its channels)."""


def unpacked_names(
    module: nn.Module, param: str, depth: int = 0, method: str = "forward"
) -> Unpacking | None:
    """The first unpacking of ``param``'s size into names (``a, b, c = x.size()`` or ``=
    x.shape``) in ``forward`` of ``module`` (or its ``method``), or in the ``forward`` of the
    first submodule of the library's own, or the method of the module, that the input reaches
    with its leading axes kept (through norms, activations, a ``Linear``); None when there is
    none before the name is given another value."""
    fn = method_definition(type(module), method)
    if fn is None or depth > MAX_DEPTH:
        return None
    aliases = {param}
    for node in _in_order(fn):
        if isinstance(node, ast.Assign):
            names = _unpacking(node, aliases)
            if names is not None:
                owner = f"{type(module).__name__}.{method}"
                reshaped = _reshapes(fn, _unpacked_name(node))
                return Unpacking(names, short_source(ast.unparse(node)), owner, reshaped)
            _rebind(node, aliases, module)
        elif isinstance(node, ast.Call):
            inner = _into_submodule(module, node, aliases, depth)
            if inner is not None:
                return inner
    return None


def _in_order(fn: ast.FunctionDef) -> list[ast.AST]:
    """Assignments and calls of ``fn`` in the order they run: a call where it starts, an
    assignment where it ends (after the calls of its value)."""
    nodes = [n for n in ast.walk(fn) if isinstance(n, (ast.Assign, ast.Call))]
    return sorted(nodes, key=_runs_at)


def _runs_at(node: ast.AST) -> tuple[int, int]:
    if isinstance(node, ast.Assign):
        return (node.end_lineno or node.lineno, node.end_col_offset or node.col_offset)
    return (getattr(node, "lineno", 0), getattr(node, "col_offset", 0))


def _unpacking(node: ast.Assign, aliases: set[str]) -> tuple[str, ...] | None:
    if len(node.targets) != 1 or not isinstance(node.targets[0], (ast.Tuple, ast.List)):
        return None
    names = node.targets[0].elts
    if len(names) < 2 or not all(isinstance(n, ast.Name) for n in names):
        return None
    value = node.value
    if isinstance(value, ast.Call) and not value.args and not value.keywords:
        value = value.func
        is_size = isinstance(value, ast.Attribute) and value.attr == "size"
    else:
        is_size = isinstance(value, ast.Attribute) and value.attr == "shape"
    if not is_size or not isinstance(value, ast.Attribute):
        return None
    if not (isinstance(value.value, ast.Name) and value.value.id in aliases):
        return None
    return tuple(n.id for n in names if isinstance(n, ast.Name))


def _unpacked_name(node: ast.Assign) -> str:
    """``x`` of ``a, b = x.shape`` or ``= x.size()`` (:func:`_unpacking` found it so)."""
    value = node.value.func if isinstance(node.value, ast.Call) else node.value
    inner = value.value if isinstance(value, ast.Attribute) else None
    return inner.id if isinstance(inner, ast.Name) else ""


_RESHAPES = frozenset({"view", "reshape", "unflatten", "rearrange"})


def _reshapes(fn: ast.FunctionDef, name: str) -> bool:
    """Whether ``fn`` reshapes ``name`` (``name.view(...)``, ``name.reshape(...)``,
    ``rearrange(name, ...)``)."""
    for node in ast.walk(fn):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        reshaped = isinstance(func, ast.Attribute) and func.attr in _RESHAPES
        if reshaped and isinstance(func, ast.Attribute) and inputs.is_name(func.value, name):
            return True
        callee = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
        if callee in _RESHAPES and node.args and inputs.is_name(node.args[0], name):
            return True
    return False


def _rebind(node: ast.Assign, aliases: set[str], module: nn.Module) -> None:
    """A name given the input with its shape kept joins the aliases; one given anything else
    leaves them."""
    for target in node.targets:
        if not isinstance(target, ast.Name):
            continue
        if _keeps_shape(node.value, aliases, module):
            aliases.add(target.id)
        else:
            aliases.discard(target.id)


def _keeps_shape(value: ast.expr, aliases: set[str], module: nn.Module) -> bool:
    """The input itself, in arithmetic, through a shape-keeping method (``x.float()``) or
    layer (``self.norm(x)``, a norm of the library's own)."""
    if isinstance(value, ast.Name):
        return value.id in aliases
    if isinstance(value, ast.BinOp):
        left = _keeps_shape(value.left, aliases, module)
        return left or _keeps_shape(value.right, aliases, module)
    if not isinstance(value, ast.Call):
        return False
    method = value.func
    if isinstance(method, ast.Attribute) and method.attr in _SHAPE_KEEPING_METHODS:
        return _keeps_shape(method.value, aliases, module)
    found = inputs.resolve(module, value.func) if value.args else None
    keeps = found is not None and (
        isinstance(found[1], _AXES_KEEPING) or inputs.norm_width(found[1]) is not None
    )
    return keeps and _keeps_shape(value.args[0], aliases, module)


def _into_submodule(
    module: nn.Module, call: ast.Call, aliases: set[str], depth: int
) -> Unpacking | None:
    """Into the ``forward`` of a submodule of the library's own, or the method of the module,
    that ``call`` passes the input to (by position or keyword)."""
    found = inputs.resolve(module, call.func)
    if found is None:
        return None
    target = found[1]
    if inspect.ismethod(target) and target.__self__ is module:
        name = _bound(target, call, aliases, module)
        if name is None:
            return None
        return unpacked_names(module, name, depth + 1, target.__name__)
    if not isinstance(target, nn.Module) or type(target).__module__.startswith("torch."):
        return None
    name = _bound(target.forward, call, aliases, module)
    return unpacked_names(target, name, depth + 1) if name is not None else None


def _bound(function: Any, call: ast.Call, aliases: set[str], module: nn.Module) -> str | None:
    """The parameter of the bound ``function`` that the input, its leading axes kept
    (``self.split(self.to_q(x))``), binds to in ``call``."""
    for index, arg in enumerate(call.args):
        if _keeps_shape(arg, aliases, module):
            return inputs.bound_name(function, index, None)
    for keyword in call.keywords:
        if keyword.arg is not None and _keeps_shape(keyword.value, aliases, module):
            name = inputs.bound_name(function, -1, keyword.arg)
            if name is not None:  # not one ``**kwargs`` takes
                return name
    return None


def laid_out(
    planned: inputs.PlannedInput, unpacking: Unpacking, symbols: Any, like: str | None = None
) -> inputs.PlannedInput:
    """``planned`` (batch first, the layer's width last) with the rank ``unpacking`` gives it:
    the batch and sequence where the names say, other axes named as the code names them
    (``num_rows``) and the layer's width where the features are named, last (``embed_dim``,
    ``C``, ``_``; not an image's ``width``) or second, channels first (``bs, c, h, w``);
    ``planned`` itself when the names do not name one batch and at most one sequence, or say
    what it already is. ``like``: the input whose unpacking this one follows, assumed alike.
    """
    dims = planned.dims
    if planned.kind != "tensor" or not dims or not _width_last(dims):
        return planned
    names = unpacking.names
    at = _width_at(names)
    if at is not None and at < len(names) - 1 and unpacking.reshaped:
        return planned  # patches: the layer's features are not the channels
    kinds = [_kind(name) for i, name in enumerate(names) if i != at]
    if at is None or kinds.count("batch") != 1 or kinds.count("sequence") > 1 or None in kinds:
        return planned
    if any(WIDTH_NAMES.match(n) for i, n in enumerate(names) if i != at):
        return planned  # features named twice (``batch_size, dim, num_channels``): unclear
    if len(names) == len(dims) and at == len(names) - 1 and kinds.index("batch") == 0:
        return planned  # the order the layer gives: the code's other names add nothing
    known = {name: size for name, size in dims if name is not None}
    sequence = next((n for n in (inputs.SEQUENCE, inputs.SOURCE) if n in known), None)
    sequence = sequence or inputs.sequence_dim(planned.name, symbols)[0]
    new: list[tuple[str | None, int]] = []
    for i, name in enumerate(names):
        if i == at:
            new.append(dims[-1])
            continue
        kind = _kind(name)
        named = inputs.BATCH if kind == "batch" else sequence if kind == "sequence" else name
        new.append((named, known.get(named) or symbols.size(named)))
    if new == dims:
        return planned
    where = f"`{unpacking.owner}` unpacks them: `{unpacking.text}`"
    reason = f"{planned.reason}, its axes in the order {where}"
    if like is not None:  # an input assumed alike (``key`` beside ``query``)
        reason = f"{planned.reason}, its axes as `{like}`'s"
    return replace(planned, dims=new, reason=reason)


def _width_at(names: tuple[str, ...]) -> int | None:
    """Where the features are: the last name when it names them (or is ``_``), else the
    second when it names them after a batch (channels first, ``bs, c, h, w``); None when
    neither does."""
    last = names[-1]
    if last.startswith("_") or WIDTH_NAMES.match(last):
        return len(names) - 1
    if len(names) >= 3 and BATCH_NAMES.match(names[0]) and WIDTH_NAMES.match(names[1]):
        return 1
    return None


def _width_last(dims: list[tuple[str | None, int]]) -> bool:
    """Named dimensions and the width last: ``[B, T, 64]``, not an image's ``[B, 3, 224,
    224]``."""
    return dims[-1][0] is None and all(name is not None for name, _ in dims[:-1])


def _kind(name: str) -> str | None:
    """``batch``, ``sequence``, ``other`` (a name of its own), or None (``_``, a name that
    is not one)."""
    if BATCH_NAMES.match(name):
        return "batch"
    if SEQUENCE_NAMES.match(name):
        return "sequence"
    if name.startswith("_"):
        return None
    return "other"


@dataclass(frozen=True)
class ChannelsFirst:
    """A norm that gives its 1-D parameter ``spatial`` trailing axes of size 1 before it meets
    the input (``self.weight[:, None, None] * x``): the input's channels are at dimension 1."""

    spatial: int
    text: str


def channels_first(module: nn.Module) -> ChannelsFirst | None:
    """How a norm of the library's own reads its input, when ``forward`` gives a 1-D
    parameter of its own trailing axes of size 1 (``self.weight[:, None, None]``,
    ``self.weight.view(-1, 1, 1)``: ConvNeXt's and SAM's ``LayerNorm2d``) before it meets the
    input; None otherwise."""
    fn = forward_definition(type(module))
    if fn is None:
        return None
    vectors = {n for n, p in module.named_parameters(recurse=False) if p.dim() == 1}
    for node in sorted(ast.walk(fn), key=_runs_at):  # the first in the source
        spatial = _trailing_ones(node, vectors)
        if spatial:
            return ChannelsFirst(spatial, short_source(ast.unparse(node)))
    return None


def _trailing_ones(node: ast.AST, vectors: set[str]) -> int:
    """``k`` for ``self.p[:, None, ...]`` (``k`` Nones) or ``self.p.view(-1, 1, ...)`` (``k``
    ones) of a parameter ``p`` among ``vectors``, else 0."""
    if isinstance(node, ast.Subscript) and _own(node.value, vectors):
        items = node.slice.elts if isinstance(node.slice, ast.Tuple) else []
        if items and isinstance(items[0], ast.Slice) and _all_constant(items[1:], None):
            return len(items) - 1
    reshaped = (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in ("view", "reshape")
        and _own(node.func.value, vectors)
    )
    if reshaped and isinstance(node, ast.Call) and len(node.args) >= 2:
        return len(node.args) - 1 if _all_constant(node.args[1:], 1) else 0
    return 0


def _own(node: ast.expr, vectors: set[str]) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr in vectors
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
    )


def _all_constant(nodes: list[ast.expr], value: int | None) -> bool:
    """Each of ``nodes`` is the constant ``value`` (``None``, or that integer)."""
    return all(
        isinstance(n, ast.Constant) and type(n.value) is type(value) and n.value == value
        for n in nodes
    )
