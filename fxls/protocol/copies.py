"""Copied node records: how the worker sends the nodes of identical sub-blocks, and their
expansion into whole records.

A result of a 48-block GPT holds 47 blocks whose nodes are those of the first with other
names. The worker sends them as :class:`~fxls.protocol.model.NodeCopy` and
:class:`~fxls.protocol.model.BlockCopy` values in ``ModuleResult.node_copies`` and
``block_copies`` (``fxls.worker.capture.trace.reuse.compact``); decoding a frame keeps them
as they came. The reader of a result frame checks them against the frame's size
(:func:`check_received`) before anything is expanded; whoever needs every record in
``nodes`` calls :func:`expanded` once (the engine, when it takes a capture's result; the
incremental cache keeps the copies and expands what it hands out).

Standard library only, like the rest of the protocol package.
"""

from __future__ import annotations

import re
import typing
from collections.abc import Iterator, Sequence
from typing import Any

from fxls.protocol.codec import ProtocolError
from fxls.protocol.model import Arg, BlockCopy, ModuleResult, NodeCopy, NodeInfo


def expanded(module: ModuleResult) -> ModuleResult:
    """``module`` with every record in ``nodes``: its copies expanded, ``node_copies`` and
    ``block_copies`` empty (a new result sharing the other fields; ``module`` itself when
    nothing came as a copy). ``ProtocolError`` when the copies do not fit the records,
    ``ExpansionTooLarge`` past ``MAX_EXPANSION_BYTES``."""
    if not (module.node_copies or module.block_copies):
        return module
    try:
        nodes = expand_copies(module.nodes, module.node_copies, module.block_copies)
    except ExpansionTooLarge:
        raise
    except ValueError as exc:
        raise ProtocolError(f"{module.name}: {exc}") from None
    return clone(module, nodes=nodes, node_copies=[], block_copies=[])


def check_received(modules: Sequence[ModuleResult], frame_bytes: int) -> None:
    """Check the copies of ``modules``, all decoded from one frame of ``frame_bytes``, before
    anything is expanded: ``ProtocolError`` when a module's copies do not fit its records
    (:func:`check_copies`), ``ExpansionTooLarge`` when together they would expand past the
    frame's budget (:func:`check_expansion`)."""
    for index, module in enumerate(modules):
        if module.node_copies or module.block_copies:
            try:
                check_copies(len(module.nodes), module.node_copies, module.block_copies)
            except ValueError as exc:
                raise ProtocolError(f"modules[{index}]: {exc}") from None
    check_expansion(modules, frame_bytes)


def check_copies(count: int, copies: list[NodeCopy], blocks: Sequence[BlockCopy] = ()) -> int:
    """The number of records once expanded; ``ValueError`` unless ``copies`` and ``blocks``
    fit ``count`` whole records the way :func:`expand_copies` needs: each copy at a free index
    after its template (copies expand in index order, so a template that is a copy itself is
    expanded first), each block's templates before the block."""
    return len(_layout(count, copies, blocks))


def _layout(count: int, copies: list[NodeCopy], blocks: Sequence[BlockCopy]) -> bytearray:
    """One byte per expanded record, 1 where a copy goes (see :func:`check_copies`). The
    names a copy brings must be node names (``[A-Za-z_][A-Za-z0-9_]*``, as FX makes them):
    renaming one identifier in an argument text to another then keeps the number of
    identifiers in it, which bounds what copies of copies add (:func:`expanded_bytes`)."""
    total = count + len(copies) + sum(len(b.names) for b in blocks)
    taken = bytearray(total)
    for copy in copies:
        if not 0 <= copy.of < copy.at < total or taken[copy.at]:
            raise ValueError(f"node copy at {copy.at} of {copy.of} does not fit")
        if not _all_names([copy.name], copy.inputs, copy.renamed.values()):
            raise ValueError(f"node copy at {copy.at} names something that is not a node")
        taken[copy.at] = 1
    for block in blocks:
        size = len(block.names)
        if (
            not size
            or len(block.users) != size
            or not block.of >= 0
            or block.of + size > block.at
            or block.at + size > total
            or any(taken[block.at : block.at + size])
        ):
            raise ValueError(f"block copy at {block.at} of {block.of} does not fit")
        if not _all_names(block.names, block.outer.values()):
            raise ValueError(f"block copy at {block.at} names something that is not a node")
        taken[block.at : block.at + size] = b"\x01" * size
    return taken


def _all_names(*groups: typing.Iterable[str]) -> bool:
    return all(_NAME.fullmatch(name) for group in groups for name in group)


_RECORD_BYTES = 520
"""What one copied record allocates besides its arguments (measured: ~450 bytes for the
``NodeInfo`` and its ``args``, ``outputs`` and ``inputs`` lists, plus its slot in the node
list; a GPT-48 result's copies take 1.53 MB expanded, estimated 1.52 MB)."""
_CLONED_ARG_BYTES = 192
"""An argument a copy renames (a node argument, or a text that names nodes): a new ``Arg``
(measured: ~185 bytes, plus its new text)."""
_SHARED_BYTES = 8
"""An argument, output or input a copy shares with its template: one list slot."""
_TEXT_BYTES = 56
"""A renamed text besides its characters: a new ``str``."""

EXPANSION_PER_FRAME_BYTE = 64
"""A result frame may expand to this many times its size (copied records are compact on the
wire: a copied record of a large model takes ~15 bytes there and ~1 KB expanded)."""
EXPANSION_FLOOR_BYTES = 16 << 20
"""What any result may expand to, however small its frame."""
MAX_EXPANSION_BYTES = 1 << 30
"""What no result expands past, whatever its frame's size."""

_Shape = tuple[int, int, int, int, int, int, int]
"""What copying a record costs: (node arguments, other arguments, outputs, inputs, and of
the other arguments' texts: the characters outside identifiers, the number of identifiers,
the length of the longest one)."""
_NO_SHAPE: _Shape = (0, 0, 0, 0, 0, 0, 0)


def _shape(record: NodeInfo) -> _Shape:
    texts = [a.value for a in record.args if a.node is None]
    names = [n for t in texts for n in _NAME.findall(t)]
    lengths = list(map(len, names))
    others = sum(map(len, texts)) - sum(lengths)
    nodes = len(record.args) - len(texts)
    outputs, inputs = len(record.outputs), len(record.inputs)
    return (nodes, len(texts), outputs, inputs, others, len(names), max(lengths, default=0))


def _plain_cost(shape: _Shape, inputs: int) -> int:
    """Bytes a copy of a record of ``shape`` with ``inputs`` inputs allocates when it renames
    no argument text (its node arguments are always new ``Arg`` objects)."""
    nodes, others, outputs = shape[:3]
    return _RECORD_BYTES + _CLONED_ARG_BYTES * nodes + _SHARED_BYTES * (others + outputs + inputs)


def _text_copy(shape: _Shape, inputs: int, longest: int) -> tuple[_Shape, int]:
    """The shape and cost of a copy of ``shape`` that renames identifiers in its argument
    texts to names of at most ``longest`` characters: the characters outside identifiers
    and the number of identifiers stay (a name is one identifier), so the texts are at most
    ``outside + identifiers * max(longest identifier, longest)`` long, along any chain of
    copies."""
    nodes, others, outputs, _, outside, names, widest = shape
    widest = max(widest, longest)
    chars = outside + names * widest
    renamed = (_CLONED_ARG_BYTES + _TEXT_BYTES - _SHARED_BYTES) * others + chars
    cost = _plain_cost(shape, inputs) + renamed
    return (nodes, others, outputs, inputs, outside, names, widest), cost


def expanded_bytes(
    nodes: list[NodeInfo], copies: list[NodeCopy], blocks: Sequence[BlockCopy] = ()
) -> int:
    """About how many bytes :func:`expand_copies` allocates for the copies (an upper bound of
    what was measured), computed from the copies' headers and their templates' sizes
    without making a copy: per copy, its template's arguments, outputs and inputs, and the
    texts it renames. Linear in the size of what was sent. Raises ``ValueError`` like
    :func:`check_copies`."""
    return _expanded_bytes(_layout(len(nodes), copies, blocks), nodes, copies, blocks)


def _expanded_bytes(
    taken: bytearray, nodes: list[NodeInfo], copies: list[NodeCopy], blocks: Sequence[BlockCopy]
) -> int:
    shapes: list[_Shape] = []
    whole = iter(nodes)
    for is_copy in taken:
        shapes.append(_NO_SHAPE if is_copy else _shape(next(whole)))
    plain = [_plain_cost(s, s[3]) for s in shapes]
    starts: dict[int, NodeCopy | BlockCopy] = {c.at: c for c in copies}
    starts.update((b.at, b) for b in blocks)
    total = 0
    for at in sorted(starts):
        item = starts[at]
        if isinstance(item, NodeCopy):
            template, inputs = shapes[item.of], len(item.inputs)
            if item.texts:
                longest = max(map(len, item.inputs), default=0)
                shapes[at], cost = _text_copy(template, inputs, longest)
            else:
                shapes[at] = (*template[:3], inputs, *template[4:])
                cost = _plain_cost(template, inputs)
            plain[at] = _plain_cost(shapes[at], inputs)
            total += cost
            continue
        size = len(item.names)
        shapes[at : at + size] = shapes[item.of : item.of + size]
        plain[at : at + size] = plain[item.of : item.of + size]
        total += sum(plain[at : at + size])
        if item.texts:
            longest = max(map(len, [*item.names, *item.outer.values()]))
            for i in {i for i in item.texts if 0 <= i < size}:
                template = shapes[at + i]
                shapes[at + i], cost = _text_copy(template, template[3], longest)
                total += cost - plain[at + i]
    return total


class ExpansionTooLarge(ValueError):
    """Copied records that would expand past what their frame may expand to."""


def expansion_budget(frame_bytes: int) -> int:
    """What the records of one result frame of ``frame_bytes`` may expand to: a fixed
    multiple of the frame, at least ``EXPANSION_FLOOR_BYTES``, at most
    ``MAX_EXPANSION_BYTES``."""
    return min(
        max(EXPANSION_PER_FRAME_BYTE * frame_bytes, EXPANSION_FLOOR_BYTES), MAX_EXPANSION_BYTES
    )


def check_expansion(modules: Sequence[ModuleResult], frame_bytes: int) -> None:
    """Raise ``ExpansionTooLarge`` (a ``ValueError``, like a copy that does not fit) when the
    copies of ``modules``, all sent in one frame of ``frame_bytes``, would expand past that
    frame's budget (:func:`expansion_budget`). The reader of a frame calls it before
    expanding anything: a job that found its MAC key can send ~15-byte copies of a record
    with thousands of arguments, which would otherwise take the reader to gigabytes."""
    budget = expansion_budget(frame_bytes)
    total = 0
    for module in modules:
        if not (module.node_copies or module.block_copies):
            continue
        total += expanded_bytes(module.nodes, module.node_copies, module.block_copies)
        if total > budget:
            raise ExpansionTooLarge(
                f"the result would expand past its limit: its copied records need about "
                f"{_mib(total)} or more, a frame of {_mib(frame_bytes)} may expand to "
                f"{_mib(budget)} ({EXPANSION_PER_FRAME_BYTE} x the frame, at least "
                f"{_mib(EXPANSION_FLOOR_BYTES)}, at most {_mib(MAX_EXPANSION_BYTES)})"
            )


def _mib(size: int) -> str:
    return f"{size / (1 << 20):.1f} MiB"


_T = typing.TypeVar("_T")


def clone(obj: _T, **changes: Any) -> _T:
    """``dataclasses.replace`` for the plain record dataclasses (no ``__post_init__``, no
    ``InitVar``), twice as fast: a GPT-48 result expands 1,900 copied records of a dozen
    dataclasses each."""
    new = object.__new__(type(obj))
    fields = new.__dict__
    fields.update(obj.__dict__)
    fields.update(changes)
    return new


def expand_copies(
    nodes: list[NodeInfo], copies: list[NodeCopy], blocks: Sequence[BlockCopy] = ()
) -> list[NodeInfo]:
    """The whole node list: ``nodes`` (the whole records, in order) with ``copies`` and the
    runs of ``blocks`` inserted at their indices, expanded in index order. Raises
    ``ValueError`` for indices that do not fit, ``ExpansionTooLarge`` when the copies would
    take more than ``MAX_EXPANSION_BYTES`` (a reader that knows the frame's size checks the
    tighter :func:`check_expansion` first)."""
    taken = _layout(len(nodes), copies, blocks)
    if _expanded_bytes(taken, nodes, copies, blocks) > MAX_EXPANSION_BYTES:
        raise ExpansionTooLarge(f"copied records would expand past {_mib(MAX_EXPANSION_BYTES)}")
    whole = iter(nodes)
    records = [_PENDING if is_copy else next(whole) for is_copy in taken]
    starts: dict[int, NodeCopy | BlockCopy] = {copy.at: copy for copy in copies}
    starts.update((block.at, block) for block in blocks)
    # in index order: every index before a copy (its templates among them, as checked) is a
    # whole record or a copy expanded already
    for at in sorted(starts):
        item = starts[at]
        if isinstance(item, NodeCopy):
            records[at] = expand_node(item, records[item.of])
            continue
        templates = records[item.of : item.of + len(item.names)]
        records[item.at : item.at + len(item.names)] = expand_block(item, templates)
    return records


_PENDING = NodeInfo(name="", op="output", target="")


def _text_names(copy: NodeCopy, template: NodeInfo) -> dict[str, str] | None:
    if not copy.texts or len(template.inputs) != len(copy.inputs):
        return None
    return dict(zip(template.inputs, copy.inputs))


def expand_node(copy: NodeCopy, template: NodeInfo) -> NodeInfo:
    """The record of ``copy``: ``template``'s with the names, target and path of the copy.
    It shares the template's spans, output values and the arguments it does not rename
    (records are read-only once made; ``fxls.engine.incremental`` moves lines on results as
    sent, before their copies are expanded)."""
    texts = _text_names(copy, template)
    renamed = copy.renamed
    args = []
    for arg in template.args:
        if arg.node is None:
            if texts is None:
                args.append(arg)
            else:
                args.append(clone(arg, value=_renamed_text(arg.value, texts)))
        else:
            node = renamed.get(arg.node, arg.node)
            value = node if arg.value == arg.node else arg.value
            args.append(clone(arg, value=value, node=node))
    return clone(
        template, name=copy.name, target=copy.target, args=args,
        outputs=list(template.outputs), module_path=copy.module_path, users=copy.users,
        inputs=list(copy.inputs),
    )  # fmt: skip


def node_matches(copy: NodeCopy, template: NodeInfo, node: NodeInfo) -> bool:
    """Whether ``expand_node(copy, template) == node``, without building the expansion."""
    if (
        node.name != copy.name
        or node.target != copy.target
        or node.module_path != copy.module_path
        or node.users != copy.users
        or node.inputs != copy.inputs
        or node.op != template.op
        or node.span != template.span
        or node.call_site != template.call_site
        or node.signature != template.signature
        or node.outputs != template.outputs
        or node.module_type != template.module_type
        or len(node.args) != len(template.args)
    ):
        return False
    renamed = copy.renamed
    texts = _text_names(copy, template)
    for arg, was in zip(node.args, template.args):
        if was.node is None:
            if texts is not None:
                was = Arg(was.name, _renamed_text(was.value, texts), was.default, None, was.kind)
            if arg != was:
                return False
            continue
        name = renamed.get(was.node, was.node)
        value = name if was.value == was.node else was.value
        if (arg.name, arg.value, arg.default, arg.node, arg.kind) != (
            was.name,
            value,
            was.default,
            name,
            was.kind,
        ):
            return False
    return True


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _renamed_text(text: str, names: dict[str, str]) -> str:
    """``text`` with each identifier that ``names`` maps replaced (whole identifiers only)."""
    return _NAME.sub(lambda m: names.get(m.group(), m.group()), text)


def moved_path(text: str | None, old: str, new: str) -> str | None:
    """``old`` (a module path prefix of ``text``) replaced by ``new``."""
    if text is None or not old:
        return text
    if text == old:
        return new
    if text.startswith(old + "."):
        return new + text[len(old) :]
    return text


_PATH_OPS = ("call_module", "get_attr")


def _node_arguments_renamed(template: NodeInfo, renamed: dict[str, str]) -> dict[str, str]:
    """``NodeCopy.renamed`` of a copy of ``template``: its node arguments through ``renamed``."""
    return {a.node: renamed.get(a.node, a.node) for a in template.args if a.node is not None}


def _moved(
    block: BlockCopy, templates: list[NodeInfo]
) -> Iterator[tuple[int, NodeInfo, str, str, str | None, list[str], dict[str, str]]]:
    """Per copy of the run: its offset, template record, name, target, module path and
    inputs, with the names the run renames (template side -> this side)."""
    renamed = dict(block.outer)
    renamed.update(zip([t.name for t in templates], block.names))
    old, new = block.template_path, block.path
    for i, (template, name) in enumerate(zip(templates, block.names)):
        target = template.target
        if template.op in _PATH_OPS:
            target = moved_path(target, old, new) or target
        path = moved_path(template.module_path, old, new)
        inputs = [renamed.get(x, x) for x in template.inputs]
        yield i, template, name, target, path, inputs, renamed


def expand_block(block: BlockCopy, templates: list[NodeInfo]) -> list[NodeInfo]:
    """The records of the run: ``[expand_node(c, t) for c, t in
    zip(block_node_copies(block, templates), templates)]``, made directly from the
    templates (no ``NodeCopy`` values, no ``__init__`` calls; every copy of the run expands
    with the run's renames, which hold those of its node arguments): a GPT-48 result's
    1,900 copied records 7.0 -> 4.1 ms."""
    texts = set(block.texts)
    make = object.__new__
    out = []
    for i, template, name, target, path, inputs, renamed in _moved(block, templates):
        names = None
        if i in texts and len(template.inputs) == len(inputs):
            names = dict(zip(template.inputs, inputs))
        args = []
        for arg in template.args:
            node = arg.node
            if node is None:
                args.append(
                    arg if names is None else clone(arg, value=_renamed_text(arg.value, names))
                )
                continue
            moved = renamed.get(node, node)
            copied = make(Arg)
            copied.__dict__.update(arg.__dict__, node=moved)
            if arg.value == node:
                copied.value = moved
            args.append(copied)
        record = make(NodeInfo)
        record.__dict__.update(
            template.__dict__, name=name, target=target, args=args,
            outputs=list(template.outputs), module_path=path, users=block.users[i], inputs=inputs,
        )  # fmt: skip
        out.append(record)
    return out


def block_gives(block: BlockCopy, templates: list[NodeInfo], run: list[NodeCopy]) -> bool:
    """Whether ``block_node_copies(block, templates) == run``, without making the copies."""
    if len(templates) != len(block.names) or len(run) != len(block.names):
        return False
    texts = set(block.texts)
    for i, template, name, target, path, inputs, renamed in _moved(block, templates):
        copy = run[i]
        if (
            copy.at != block.at + i
            or copy.of != block.of + i
            or copy.name != name
            or copy.target != target
            or copy.module_path != path
            or copy.users != block.users[i]
            or copy.texts != (i in texts)
            or copy.inputs != inputs
            or copy.renamed != _node_arguments_renamed(template, renamed)
        ):
            return False
    return True


def block_node_copies(block: BlockCopy, templates: list[NodeInfo]) -> list[NodeCopy]:
    """The node copies of the run of ``block``, from its template records (``templates[i]`` is the
    record at ``of + i``)."""
    texts = set(block.texts)
    out = []
    for i, template, name, target, path, inputs, renamed in _moved(block, templates):
        copy = NodeCopy(
            at=block.at + i, of=block.of + i, name=name, target=target, module_path=path,
            users=block.users[i], inputs=inputs,
            renamed=_node_arguments_renamed(template, renamed), texts=i in texts,
        )  # fmt: skip
        out.append(copy)
    return out
