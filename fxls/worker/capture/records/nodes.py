"""FX nodes as wire data: readable targets, submodule descriptions, named arguments.

Shapes and named arguments computed for a graph become ``NodeInfo`` values here, once, at the
end of a capture.
"""

from __future__ import annotations

import typing
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.fx

from fxls.protocol.copies import clone
from fxls.protocol.model import Arg, NodeCopy, NodeInfo, NodeOp, Value
from fxls.worker.capture.records import arguments
from fxls.worker.capture.spans import CALL_SITE_KEY, SPAN_KEY, document_forward, module_stack


def output_values(output: torch.fx.Node, values: Mapping[str, list[Value]]) -> list[Value]:
    found: list[Value] = []

    def collect(n: torch.fx.Node) -> torch.fx.Node:
        found.extend(values.get(n.name, []))
        return n

    torch.fx.node.map_arg(output.args, collect)
    return found


def _named_arguments(
    gm: torch.fx.GraphModule,
    node: torch.fx.Node,
    examples: Mapping[str, Any],
    chosen: dict[str, arguments.Choice] | None = None,
) -> tuple[list[Arg], str | None]:
    if node.op not in ("call_function", "call_method", "call_module"):
        return [], None
    try:
        args, signature = arguments.named_arguments(gm, node, examples, chosen)
    except Exception:
        return [], None
    return list(args), signature


_TARGET_NAMES: dict[int, str] = {}


def _target_names() -> dict[int, str]:
    if not _TARGET_NAMES:
        import operator

        for prefix, namespace in (
            ("operator", operator),
            ("torch", torch),
            ("torch.nn.functional", torch.nn.functional),
        ):
            for name in dir(namespace):
                if name.startswith("_"):
                    continue
                obj = getattr(namespace, name, None)
                if callable(obj) and not isinstance(obj, type):
                    _TARGET_NAMES.setdefault(id(obj), f"{prefix}.{name}")
    return _TARGET_NAMES


DOCUMENT_MODULES = {"__fxls_document__"}
"""Names of the module the document runs as: its own functions are named without it."""


def readable_target(node: torch.fx.Node) -> str:
    """``conv1``, ``torch.nn.functional.relu``, ``operator.add``, ``view``; a function of the
    document itself by its own name (``rotate_half``)."""
    target = node.target
    if node.op == "call_function":
        name = _target_names().get(id(target))
        if name is not None:
            return name
        try:
            name = torch.fx.node._get_qualified_name(target)  # type: ignore[arg-type]
        except Exception:
            return getattr(target, "__name__", str(target))
        module, _, rest = name.rpartition(".")
        while module and module not in DOCUMENT_MODULES:
            module, _, head = module.rpartition(".")
            rest = f"{head}.{rest}"
        return rest if module else name
    if node.op == "output":
        return "output"
    return str(target)


_SUMMARY_ATTRIBUTES = (
    "embed_dim", "num_heads", "d_model", "nhead", "input_size", "hidden_size", "num_layers",
    "in_features", "out_features", "dropout", "batch_first",
)  # fmt: skip


def _attribute_summary(sub: torch.nn.Module) -> str:
    """``embed_dim=64, num_heads=4`` for modules whose ``extra_repr`` is empty
    (``MultiheadAttention``, ``Transformer``): the dimensions they were built with."""
    parts = []
    for name in _SUMMARY_ATTRIBUTES:
        value = getattr(sub, name, None)
        if isinstance(value, (bool, int, float)) and not (name == "dropout" and not value):
            if name == "batch_first" and not value:
                continue
            parts.append(f"{name}={value}")
    return ", ".join(parts)


def module_type(gm: torch.fx.GraphModule, target: str) -> str | None:
    try:
        sub = submodule(gm, target)
    except AttributeError:
        return None
    return module_text(sub)


def submodule(root: torch.nn.Module, path: str) -> torch.nn.Module:
    """``root.get_submodule(path)``, read off each module's ``_modules`` where a name of the
    path is found there and nowhere that ``getattr`` looks first (the instance, its class, its
    parameters and buffers): a fifth of the time of torch's walk, which asks ``hasattr`` and
    ``getattr`` of every name (the records of a 48-block GPT read 600 paths). Else torch's
    walk, and its error."""
    mod = root
    for item in path.split(".") if path else ():
        found = mod._modules.get(item)
        if (
            found is None
            or item in mod.__dict__
            or item in mod._parameters
            or item in mod._buffers
            or hasattr(type(mod), item)
        ):
            return root.get_submodule(path)
        mod = found
    return mod


def module_text(sub: torch.nn.Module) -> str:
    """``Conv2d(3, 64, kernel_size=(3, 3), ...)``: a module's class and its ``extra_repr``."""
    try:
        extra = sub.extra_repr()
    except Exception:
        extra = ""
    if not extra:
        extra = _attribute_summary(sub)
    text = f"{type(sub).__name__}({extra})"
    return text if len(text) <= 200 else text[:196] + "...)"


def module_path(node: torch.fx.Node) -> str:
    stack = node.meta.get("nn_module_stack") or {}
    paths = [path for path, _ in stack.values()]
    if node.op == "call_module" and paths and paths[-1] == node.target:
        paths = paths[:-1]
    return paths[-1] if paths else ""


def containers(gm: torch.fx.GraphModule, path: str, root: torch.nn.Module) -> list[str]:
    """Module paths of the modules the graph's nodes were made inside whose ``forward`` is no
    code of the document (``path``): an ``nn.Sequential``, a subclass of a torch layer
    without a ``forward`` of its own, a library's module. A node made inside one has the span
    of the document code that called it (``ModuleResult.containers``). ``root``: the module
    captured (the graph module keeps no ``nn.ModuleList`` of it)."""
    found: dict[str, None] = {}
    verdicts: dict[type, bool] = {}
    for node in gm.graph.nodes:
        for qualified, kind in module_stack(node):
            if qualified in found:
                continue
            foreign = verdicts.get(kind)
            if foreign is None:
                foreign = verdicts[kind] = not document_forward(kind, path)
            if foreign and (node.op != "call_module" or qualified != node.target):
                found[qualified] = None
    return list(found) + _lists_inside(root, found)


def _lists_inside(root: torch.nn.Module, found: Mapping[str, None]) -> list[str]:
    """The ``nn.ModuleList``/``ModuleDict`` paths inside a container that hold containers
    (a library block's ``ff.net``, whose layers its ``forward`` loops over; lists in such
    lists, as x-transformers' ``layers.0.0`` of norms in ``layers``): never called,
    they are on no module stack, yet their layers' nodes belong to the block's code."""
    lists: dict[str, None] = {}
    for qualified in found:
        parts = qualified.split(".")
        for end in range(2, len(parts)):
            prefix = ".".join(parts[:end])
            parent = ".".join(parts[: end - 1])
            if prefix in found or prefix in lists or (parent not in found and parent not in lists):
                continue  # (a list in a list: x-transformers' ``layers.0.0``)
            try:
                held = root.get_submodule(prefix)
            except Exception:  # a user module's own __getattr__: not a list then
                continue
            if isinstance(held, (torch.nn.ModuleList, torch.nn.ModuleDict)):
                lists[prefix] = None
    return list(lists)


def node_info(
    gm: torch.fx.GraphModule,
    node: torch.fx.Node,
    values: Mapping[str, list[Value]],
    examples: Mapping[str, Any],
    rename: Callable[[str], str] | None = None,
    chosen: dict[str, arguments.Choice] | None = None,
    named: tuple[list[Arg], str | None] | None = None,
) -> NodeInfo:
    """The record of ``node``. ``chosen`` collects the signature chosen for its arguments (by
    node name); ``named`` gives its named arguments when they are known already."""
    args, signature = named if named is not None else _named_arguments(gm, node, examples, chosen)
    if rename is not None:
        for arg in args:
            arg.value = rename(arg.value)
    return NodeInfo(
        op=typing.cast(NodeOp, node.op),
        args=args,
        signature=signature,
        **_own_fields(gm, node, values),
    )


def _own_fields(
    gm: torch.fx.GraphModule, node: torch.fx.Node, values: Mapping[str, list[Value]]
) -> dict[str, Any]:
    """The fields of a record that are the node's own, never a template's."""
    return {
        "name": node.name,
        "target": readable_target(node),
        "span": node.meta.get(SPAN_KEY),
        "call_site": node.meta.get(CALL_SITE_KEY),
        "outputs": list(values.get(node.name, [])),
        "module_type": module_type(gm, str(node.target)) if node.op == "call_module" else None,
        "module_path": module_path(node),
        "users": len(node.users),
        "inputs": [n.name for n in node.all_input_nodes],
    }


def copied_node_info(
    gm: torch.fx.GraphModule,
    node: torch.fx.Node,
    template: torch.fx.Node,
    info: NodeInfo,
    values: Mapping[str, list[Value]],
    examples: Mapping[str, Any],
    chosen: dict[str, arguments.Choice] | None = None,
) -> NodeInfo:
    """The record of ``node``, a copy of ``template`` (whose record is ``info``) made for an
    identical sub-block: the template's named arguments with the copy's node names when every
    node argument is exactly one node (the binding depends only on the arguments' kinds, which
    a copy shares); else the signature chosen for the template (in ``chosen``) bound to the
    copy's own arguments (:func:`arguments.named_like`), or named again."""
    args = _moved_args(info, template, node)
    if args is None:
        choice = chosen.get(template.name) if chosen is not None else None
        named = arguments.named_like(node, template, choice, examples) if choice else None
        return node_info(gm, node, values, examples, named=named)
    return clone(info, args=args, **_own_fields(gm, node, values))


def node_copy(
    gm: torch.fx.GraphModule,
    node: torch.fx.Node,
    template: torch.fx.Node,
    info: NodeInfo,
    values: Mapping[str, list[Value]],
    at: int,
    of: int,
) -> NodeCopy | None:
    """The record :func:`copied_node_info` gives, as a :class:`NodeCopy` of ``info`` (at
    ``at``, its template at ``of``), when expanding the copy gives exactly that record: the
    copy's span, call site, outputs and module description are the template's and its
    argument texts name no node; otherwise None."""
    meta = node.meta
    if (
        meta.get(SPAN_KEY) != info.span
        or meta.get(CALL_SITE_KEY) != info.call_site
        or values.get(node.name, []) != info.outputs
    ):
        return None
    if node.op == "call_module" and module_type(gm, str(node.target)) != info.module_type:
        return None
    renamed = _renamed_nodes(info, template, node)
    if renamed is None:
        return None
    return NodeCopy(
        at=at, of=of, name=node.name, target=readable_target(node),
        module_path=module_path(node), users=len(node.users),
        inputs=[n.name for n in node.all_input_nodes], renamed=renamed,
    )  # fmt: skip


def _renamed_nodes(
    info: NodeInfo, template: torch.fx.Node, node: torch.fx.Node
) -> dict[str, str] | None:
    """Template node name -> copy's, for the arguments that are exactly one node, when the
    copy's named arguments are the template's with those names (:func:`_moved_args`)."""
    old = template.all_input_nodes
    new = node.all_input_nodes
    if len(old) != len(new):
        return None
    names = {a.name: b.name for a, b in zip(old, new)}
    if {a.node for a in info.args if a.node is not None} != set(names):
        return None
    for arg in info.args:
        if arg.node is not None:
            if arg.value != arg.node:
                return None
        elif any(name in arg.value for name in names):
            return None  # a node inside a list or tuple: named again
    return {a.node: names[a.node] for a in info.args if a.node is not None}


def _moved_args(info: NodeInfo, template: torch.fx.Node, node: torch.fx.Node) -> list[Arg] | None:
    """The template's named arguments with the copy's node names (:func:`_renamed_nodes`)."""
    renamed = _renamed_nodes(info, template, node)
    if renamed is None:
        return None
    out = []
    for arg in info.args:
        if arg.node is not None:
            out.append(clone(arg, value=renamed[arg.node], node=renamed[arg.node]))
        else:
            out.append(clone(arg))
    return out
