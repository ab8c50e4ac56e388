"""The records of a graph's nodes, a replayed sub-block's as one ``BlockCopy``.

A call of an identical sub-block that the tracer replayed (``h.7`` of a GPT, from ``h.0``)
made copies of the template's nodes with the same targets under another path, the same
constants and other node names. Recording those nodes one by one (a ``NodeCopy`` each,
compacted into a ``BlockCopy`` at the end) costs ~20 µs a node; :func:`block_copy` makes the
``BlockCopy`` from the run directly, checking per node only what can differ between a copy
and its template (spans, outputs, user counts, inputs and paths), and refuses a run that one
of its template's records could not be copied exactly for. :class:`NodeRecords` makes every
record of a graph, in graph order.
"""

from __future__ import annotations

import os
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
import torch.fx

from fxls.protocol.copies import expand_node, moved_path
from fxls.protocol.model import BlockCopy, NodeCopy, NodeInfo, Value
from fxls.worker.capture.records import arguments
from fxls.worker.capture.records.nodes import (
    copied_node_info,
    module_path,
    module_type,
    node_copy,
    node_info,
)
from fxls.worker.capture.spans import CALL_SITE_KEY, SPAN_KEY

BLOCK_RECORDS_ENV = "FXLS_BLOCK_RECORDS"
"""``0``: every replayed node is recorded on its own (``node_copy``) and compacted later."""


def enabled() -> bool:
    return os.environ.get(BLOCK_RECORDS_ENV, "1") != "0"


class Replayed(Protocol):
    """One replayed call as the tracer notes it (``fxls.worker.capture.trace.reuse.Segment``)."""

    @property
    def inputs(self) -> list[str]: ...
    @property
    def template_inputs(self) -> list[str]: ...
    @property
    def template_path(self) -> str: ...
    @property
    def path(self) -> str: ...
    @property
    def copies(self) -> dict[str, str]:
        """Copied node name -> template node name, in graph order."""


@dataclass
class Run:
    """The nodes one replayed call made, where their records go, and what they copy."""

    nodes: list[torch.fx.Node]
    """The copies, in graph order."""
    templates: list[NodeInfo]
    """The whole record of each copy's template node."""
    at: int
    """Index of the first copy's record."""
    of: int
    """Index of the first template's record (the others follow it)."""
    template_path: str
    path: str
    outer: dict[str, str] = field(default_factory=dict)
    """Template input name -> the call's, for the nodes passed to the call."""
    plain: dict[int, bool | None] = field(default_factory=dict)
    """``_arguments_copy`` of each template record by ``id`` (runs of one template share
    it)."""


_PATH_OPS = ("call_module", "get_attr")
_UNSAFE_TEXT = ("'", '"', "<")
"""Characters of an argument text that make renaming its identifiers unsafe (a quoted string
or a repr could hold a node's name as a word that is no node)."""


def block_copy(
    gm: torch.fx.GraphModule, run: Run, values: Mapping[str, list[Value]]
) -> BlockCopy | None:
    """``run``'s records as one ``BlockCopy``, when it expands to the records recorded one by
    one would be; None when some node's could differ (it is recorded on its own then)."""
    names = [n.name for n in run.nodes]
    if len(names) != len(run.templates) or not names:
        return None
    renamed = dict(run.outer)
    renamed.update(zip([t.name for t in run.templates], names))
    old, new = run.template_path, run.path
    users: list[int] = []
    texts: list[int] = []
    known = run.plain
    for i, (node, info) in enumerate(zip(run.nodes, run.templates)):
        plain = known.get(id(info), False)
        if plain is False:
            plain = known[id(info)] = _arguments_copy(info)
        if plain is None or not _same_as_template(gm, node, info, values):
            return None
        if [n.name for n in node.all_input_nodes] != [renamed.get(x, x) for x in info.inputs]:
            return None
        if module_path(node) != moved_path(info.module_path, old, new):
            return None
        if node.op in _PATH_OPS and str(node.target) != moved_path(info.target, old, new):
            return None
        if not plain:
            texts.append(i)
        users.append(len(node.users))
    outer = {k: v for k, v in run.outer.items() if k != v}
    return BlockCopy(
        at=run.at, of=run.of, names=names, template_path=old, path=new, users=users,
        outer=outer, texts=texts,
    )  # fmt: skip


def _same_as_template(
    gm: torch.fx.GraphModule, node: torch.fx.Node, info: NodeInfo, values: Mapping[str, list[Value]]
) -> bool:
    """What a copy shares with its template's record: op, spans, outputs, the submodule."""
    meta = node.meta
    if (
        node.op != info.op
        or meta.get(SPAN_KEY) != info.span
        or meta.get(CALL_SITE_KEY) != info.call_site
        or values.get(node.name, []) != info.outputs
    ):
        return False
    if node.op == "call_function" or node.op == "call_method":
        return True  # the template's own target (a replay copies it)
    return node.op != "call_module" or module_type(gm, str(node.target)) == info.module_type


def _arguments_copy(info: NodeInfo) -> bool | None:
    """How a copy of ``info`` gets its named arguments: True when renaming its node
    arguments gives them, False when the texts of the others name its inputs too (renamed
    as identifiers), None when neither is exact (a node argument shown as another text, a
    node read by no argument, a text that renaming could change wrongly)."""
    inputs = set(info.inputs)
    named = {a.node for a in info.args if a.node is not None}
    if not named <= inputs:
        return None  # a node argument that is no input
    unnamed = inputs - named  # inputs only argument texts can name
    plain = True
    for arg in info.args:
        if arg.node is not None:
            if arg.value != arg.node:
                return None
        elif any(name in arg.value for name in inputs):
            if any(c in arg.value for c in _UNSAFE_TEXT):
                return None
            unnamed = {name for name in unnamed if name not in arg.value}
            plain = False
    return plain if not unnamed else None


def _block_runs(segments: Sequence[Replayed], copied: Mapping[str, str]) -> dict[str, Replayed]:
    """First copied node name -> its replayed call, for the calls whose records may be made
    as one ``BlockCopy``: those none of whose nodes is another copy's template (a ``NodeCopy``
    is expanded from its template's record, never from inside a block)."""
    used = set(copied.values())
    return {next(iter(s.copies)): s for s in segments if s.copies and used.isdisjoint(s.copies)}


class NodeRecords:
    """The records of one graph's nodes, made in graph order (:meth:`record`): ``records``
    has one per node, a block copy's at each of its nodes' places; the block copies are in
    ``blocks``, and ``copied_from`` names the whole records of copies (their index -> their
    template's) that ``fxls.worker.capture.trace.reuse.compact`` may send as copies."""

    def __init__(
        self,
        gm: torch.fx.GraphModule,
        values: dict[str, list[Value]],
        examples: dict[str, Any],
        rename: Callable[[str], str] | None,
    ) -> None:
        self.gm, self.values, self.examples, self.rename = gm, values, examples, rename
        self.copied: dict[str, str] = {}
        """Copied node name -> its template node's name."""
        self.by_name: dict[str, torch.fx.Node] = {}
        self.index: dict[str, int] = {}
        self.records: list[NodeInfo | NodeCopy | BlockCopy] = []
        """One per node: a block copy's at each of its nodes' places."""
        self.blocks: list[BlockCopy] = []
        self.copied_from: dict[int, int] = {}
        self.expanded: dict[int, NodeInfo] = {}  # templates that are copies themselves
        self.chosen: dict[str, arguments.Choice] = {}  # the signature each call was named with
        self.templates: dict[tuple[int, int], list[NodeInfo]] = {}  # by (first index, length)
        self.plain: dict[int, bool | None] = {}  # ``Run.plain``, shared by every run

    def record(self, nodes: list[torch.fx.Node], segments: Sequence[Replayed]) -> None:
        """Record ``nodes`` (the graph's, in order), the copies ``segments`` made as copies
        of their templates' records."""
        for segment in segments:
            self.copied.update(segment.copies)
        runs = _block_runs(segments, self.copied) if enabled() else {}
        at = 0
        while at < len(nodes):
            run = runs.get(nodes[at].name)
            if run is not None and self._add_block(nodes[at : at + len(run.copies)], run):
                at += len(run.copies)
                continue
            self._add(nodes[at])
            at += 1

    def _whole(self, at: int) -> NodeInfo | None:
        """The record at ``at`` expanded (a chain of node copies in turn); None inside a
        block copy."""
        if isinstance(self.records[at], BlockCopy):
            return None
        records = typing.cast(list[NodeInfo | NodeCopy], self.records)
        return whole_record(records, at, self.expanded)

    def _add(self, n: torch.fx.Node) -> None:
        gm, values = self.gm, self.values
        self.by_name[n.name] = n
        at = len(self.records)
        source = self.copied.get(n.name)
        template = self.by_name.get(source) if source is not None else None
        record: NodeInfo | NodeCopy | None = None
        if template is not None and template.name in self.index:
            of = self.index[template.name]
            base = self._whole(of)
            if base is not None:
                record = node_copy(gm, n, template, base, values, at, of)
                if record is None:
                    record = copied_node_info(
                        gm, n, template, base, values, self.examples, self.chosen
                    )
                    self.copied_from[at] = of
        if record is None:
            record = node_info(gm, n, values, self.examples, self.rename, self.chosen)
        self.index[n.name] = at
        self.records.append(record)

    def _add_block(self, nodes: list[torch.fx.Node], segment: Replayed) -> bool:
        """The records of ``nodes``, the copies ``segment`` made, as one block copy; False
        when they are not recorded so."""
        if [n.name for n in nodes] != list(segment.copies):
            return False
        of = self.index.get(next(iter(segment.copies.values())))
        if of is None:
            return False
        templates = self.templates.get((of, len(nodes)))
        if templates is None:
            templates = self.templates[(of, len(nodes))] = self._run_of(of, segment)
        if not templates:
            return False
        outer = dict(zip(segment.template_inputs, segment.inputs))
        run = Run(
            nodes, templates, len(self.records), of, segment.template_path, segment.path, outer,
            plain=self.plain,
        )  # fmt: skip
        block = block_copy(self.gm, run, self.values)
        if block is None:
            return False
        for n in nodes:
            self.by_name[n.name] = n
            self.index[n.name] = len(self.records)
            self.records.append(block)
        self.blocks.append(block)
        return True

    def _run_of(self, of: int, segment: Replayed) -> list[NodeInfo]:
        """The whole records of ``segment``'s templates, which start at ``of``; empty when
        they are not there in order or one is inside a block copy."""
        templates = []
        for offset, name in enumerate(segment.copies.values()):
            whole = self._whole(of + offset) if self.index.get(name) == of + offset else None
            if whole is None:
                return []
            templates.append(whole)
        return templates


def whole_record(
    nodes: list[NodeInfo | NodeCopy], index: int, expanded: dict[int, NodeInfo] | None = None
) -> NodeInfo:
    """The record at ``index`` of records in index order, a copy there expanded from its
    template's (a chain of copies in turn); ``expanded`` keeps the expansions by index."""
    found = nodes[index]
    chain: list[NodeCopy] = []
    while isinstance(found, NodeCopy):
        if expanded is not None and found.at in expanded:
            found = expanded[found.at]
            break
        chain.append(found)
        found = nodes[found.of]
    for copy in reversed(chain):
        found = expand_node(copy, found)
        if expanded is not None:
            expanded[copy.at] = found
    return found
