"""An input's axes in the order the code names them: ``tgt_len, bsz, embed_dim = query.size()``.

fxls lays an assumed input out as the layer it reaches takes it, batch first: ``[B, T, 64]``
for a sequence into a ``Linear`` of 64 features. Code written for sequence-first tensors
(fairseq's and fair-esm's attention: "Input shape: Time x Batch x Channel") says otherwise
where it unpacks the input's size into names. :func:`unpacked_names` finds the first such
unpacking of an input, in ``forward`` or in the ``forward`` of a submodule the input reaches
with its shape kept (a layer norm, dropout, activation on the way); :func:`laid_out` orders
the batch and sequence dimensions of the assumed input as those names do, and gives it the
rank they give. Names it cannot tell as batch, sequence or the layer's width leave the input
as it was.
"""

from __future__ import annotations

import ast
import inspect
import re
from dataclasses import dataclass, replace
from typing import Any

from torch import nn

from fxls.worker.capture.build import inputs
from fxls.worker.capture.spans import forward_definition, short_source

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
    r"|hidden_size|hidden_dim|channels?|ch|features|num_features|in_features|feat_dim"
    r"|feature_dim|in_dim|dim_in|d_in)$",
    re.IGNORECASE,
)
"""Names code gives the features a layer takes last (not ``width``: an image's)."""

MAX_DEPTH = 3
"""How many submodules deep the input is followed to its unpacking."""

_SHAPE_KEEPING = (
    nn.LayerNorm, nn.RMSNorm, nn.modules.dropout._DropoutNd, nn.Identity, nn.ReLU, nn.GELU,
    nn.SiLU, nn.Tanh, nn.Sigmoid, nn.LeakyReLU, nn.ELU, nn.Mish, nn.Softplus,
)  # fmt: skip
"""Layers whose output has their input's shape: the input passes on through them."""

_SHAPE_KEEPING_METHODS = frozenset(
    {"contiguous", "clone", "float", "half", "bfloat16", "to", "type_as", "detach", "add",
     "mul", "sub", "div"}
)  # fmt: skip


@dataclass(frozen=True)
class Unpacking:
    """``tgt_len, bsz, embed_dim = query.size()``: the names, the statement as written and the
    class whose ``forward`` has it."""

    names: tuple[str, ...]
    text: str
    owner: str


def unpacked_names(module: nn.Module, param: str, depth: int = 0) -> Unpacking | None:
    """The first unpacking of ``param``'s size into names (``a, b, c = x.size()`` or ``=
    x.shape``) in ``forward`` of ``module``, or in the ``forward`` of the first submodule of
    the library's own that the input reaches with its shape kept; None when there is none
    before the name is given another value."""
    fn = forward_definition(type(module))
    if fn is None or depth > MAX_DEPTH:
        return None
    aliases = {param}
    for node in _in_order(fn):
        if isinstance(node, ast.Assign):
            names = _unpacking(node, aliases)
            if names is not None:
                return Unpacking(names, short_source(ast.unparse(node)), type(module).__name__)
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
        isinstance(found[1], _SHAPE_KEEPING) or inputs.norm_width(found[1]) is not None
    )
    return keeps and _keeps_shape(value.args[0], aliases, module)


def _into_submodule(
    module: nn.Module, call: ast.Call, aliases: set[str], depth: int
) -> Unpacking | None:
    """Into the ``forward`` of a submodule of the library's own that ``call`` passes the input
    to (by position or keyword)."""
    found = inputs.resolve(module, call.func)
    if found is None or not isinstance(found[1], nn.Module):
        return None
    sub = found[1]
    if type(sub).__module__.startswith("torch."):
        return None
    name = _bound(sub, call, aliases)
    return unpacked_names(sub, name, depth + 1) if name is not None else None


def _bound(sub: nn.Module, call: ast.Call, aliases: set[str]) -> str | None:
    """The parameter of ``sub.forward`` the input binds to in ``call``."""
    try:
        params = list(inspect.signature(sub.forward).parameters.values())
    except (TypeError, ValueError):
        return None
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    for index, arg in enumerate(call.args):
        if isinstance(arg, ast.Name) and arg.id in aliases:
            return positional[index] if index < len(positional) else None
    names = {p.name for p in params}
    for keyword in call.keywords:
        value = keyword.value
        if isinstance(value, ast.Name) and value.id in aliases and keyword.arg in names:
            return keyword.arg
    return None


def laid_out(
    planned: inputs.PlannedInput, unpacking: Unpacking, symbols: Any
) -> inputs.PlannedInput:
    """``planned`` (batch first, the layer's width last) with the rank ``unpacking`` gives it,
    its batch and sequence dimensions where the names say, other axes named as the code names
    them (``num_rows``) and the width kept last; ``planned`` itself when the names do not
    name one batch, at most one sequence and last the features (``embed_dim``, ``C``, ``_``:
    not an image's ``width``), or say what it already is."""
    dims = planned.dims
    if planned.kind != "tensor" or not dims or not _width_last(dims):
        return planned
    *leading, last = unpacking.names
    kinds = [_kind(name) for name in leading]
    width = last.startswith("_") or WIDTH_NAMES.match(last)
    if not width or kinds.count("batch") != 1 or kinds.count("sequence") > 1:
        return planned
    if None in kinds:
        return planned
    known = {name: size for name, size in dims if name is not None}
    batch = inputs.BATCH
    sequence = next((n for n in (inputs.SEQUENCE, inputs.SOURCE) if n in known), None)
    sequence = sequence or inputs.sequence_dim(planned.name, symbols)[0]
    new: list[tuple[str | None, int]] = []
    for name, kind in zip(leading, kinds, strict=True):
        named = batch if kind == "batch" else sequence if kind == "sequence" else name
        new.append((named, known.get(named) or symbols.size(named)))
    new.append(dims[-1])
    if new == dims:
        return planned
    where = f"`{unpacking.owner}.forward` unpacks them: `{unpacking.text}`"
    reason = f"{planned.reason}, its axes in the order {where}"
    return replace(planned, dims=new, reason=reason)


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
