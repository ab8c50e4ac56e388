"""End-of-line inlay hints: the output shape of each statement in ``forward`` and helpers."""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass

from lsprotocol import types

from fxls.engine.render import (
    Run,
    escaping,
    example_text,
    executions,
    others_text,
    runs_across,
    unpacked_text,
    values_text,
)
from fxls.lsp.features import markdown as md
from fxls.lsp.features.convert import Encoding, LineMapper, units
from fxls.protocol.labels import SPLITS
from fxls.protocol.model import ModuleResult, NodeInfo, Value

_SKIP_OPS = {"placeholder", "output", "get_attr"}
_COMPOUND = (
    ast.For,
    ast.AsyncFor,
    ast.While,
    ast.If,
    ast.With,
    ast.AsyncWith,
    ast.Try,
    ast.FunctionDef,
    ast.AsyncFunctionDef,
    ast.ClassDef,
    ast.Match,
)


@dataclass
class ShapeHint:
    line: int
    """Line (1-based, analysed text) the hint is shown at the end of."""
    label: str
    node: str


def parsed(source: str) -> ast.Module | None:
    """``source`` parsed once for the functions below; None when it does not parse."""
    try:
        return ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def statement_ends(tree: ast.Module | None) -> dict[int, int]:
    """Line -> last line of the simple statement on it (empty if the text does not parse)."""
    if tree is None:
        return {}
    ends: dict[int, int] = {}
    for stmt in ast.walk(tree):
        if not isinstance(stmt, ast.stmt):
            continue
        end = stmt.end_lineno or stmt.lineno
        if isinstance(stmt, _COMPOUND):
            body = getattr(stmt, "body", None)
            # the header of a compound statement: `for b in self.blocks(x):`
            if body:
                end = max(stmt.lineno, body[0].lineno - 1)
                for line in range(stmt.lineno, end + 1):
                    ends.setdefault(line, end)
            continue
        for line in range(stmt.lineno, end + 1):
            ends[line] = end
    return ends


def value_ends(tree: ast.Module | None, lines: list[str]) -> dict[int, set[tuple[int, int]]]:
    """Hint line (a simple statement's last) -> where the value it assigns, returns or
    computes may end (line, code point column): the whole value's end, and each branch's of a
    conditional value (``x if m is None else self.f(x)``). A node whose code ends elsewhere
    (``x.shape`` of ``n = x.shape[:-1]``) made a part of it, not the value the hint names."""
    if tree is None:
        return {}
    out: dict[int, set[tuple[int, int]]] = {}
    for stmt in ast.walk(tree):
        value = getattr(stmt, "value", None)
        if not isinstance(stmt, _VALUED) or not isinstance(value, ast.expr):
            continue
        ends = out.setdefault(stmt.end_lineno or stmt.lineno, set())
        for part in _branches(value):
            end_line = part.end_lineno or part.lineno
            ends.add((end_line, _column(lines, end_line, part.end_col_offset or 0)))
    return out


_VALUED = (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Return, ast.Expr)


def _branches(value: ast.expr) -> list[ast.expr]:
    """``value`` and, for a conditional expression, each of its branches (nested too)."""
    if isinstance(value, ast.IfExp):
        return [value, *_branches(value.body), *_branches(value.orelse)]
    return [value]


@dataclass
class Unpacking:
    """``B, T, C = x.size()``: the assigned names and where the target tuple is written."""

    names: list[str]
    line: int
    col: int
    """Code-point column of the target tuple."""
    end: int
    """Last line of the statement (where the hint goes)."""
    values: list[tuple[int, int, int, int]] | None = None
    """For ``a, b = f(x), g(x)``: the span of each right-hand element (code points)."""
    value: tuple[int, int, int, int] | None = None
    """The span of the right-hand side (code points)."""
    starred: tuple[int, int, int, int] | None = None
    """``b, n, _, h = *x.shape, self.heads``: where the starred value is written (line and
    code-point column of its ``*``), the names before it and after it."""
    iterated: bool = False
    """The right-hand side makes each value in turn: ``map(f, pieces)``, ``(f(t) for t in
    pieces)``, a list comprehension."""
    star: int | None = None
    """The index in ``names`` of a starred name (``b, n, *_ = x.shape``), which takes the
    values the others leave."""


def unpackings(tree: ast.Module | None, lines: list[str]) -> dict[tuple[int, int], Unpacking]:
    """(line, column) of each tuple target of plain names -> its Unpacking."""
    if tree is None:
        return {}
    out: dict[tuple[int, int], Unpacking] = {}
    for stmt in ast.walk(tree):
        if not isinstance(stmt, ast.Assign) or len(stmt.targets) != 1:
            continue
        target = stmt.targets[0]
        if not isinstance(target, (ast.Tuple, ast.List)) or len(target.elts) < 2:
            continue
        stars = [i for i, e in enumerate(target.elts) if isinstance(e, ast.Starred)]
        elts = [e.value if isinstance(e, ast.Starred) else e for e in target.elts]
        if len(stars) > 1 or not all(isinstance(e, ast.Name) for e in elts):
            continue
        col = _column(lines, target.lineno, target.col_offset)
        names = [e.id for e in elts]  # type: ignore[attr-defined]
        end = stmt.end_lineno or stmt.lineno
        unpack = Unpacking(names, target.lineno, col, end, star=stars[0] if stars else None)
        rhs = stmt.value
        unpack.value = (
            rhs.lineno,
            _column(lines, rhs.lineno, rhs.col_offset),
            rhs.end_lineno or rhs.lineno,
            _column(lines, rhs.end_lineno or rhs.lineno, rhs.end_col_offset or 0),
        )
        unpack.iterated = isinstance(rhs, (ast.GeneratorExp, ast.ListComp)) or (
            isinstance(rhs, ast.Call) and isinstance(rhs.func, ast.Name) and rhs.func.id == "map"
        )
        unpack.starred = _starred(rhs, lines)
        if isinstance(stmt.value, ast.Tuple) and len(stmt.value.elts) == len(names):
            unpack.values = [
                (
                    e.lineno,
                    _column(lines, e.lineno, e.col_offset),
                    e.end_lineno or e.lineno,
                    _column(lines, e.end_lineno or e.lineno, e.end_col_offset or 0),
                )
                for e in stmt.value.elts
            ]
        out[(target.lineno, col)] = unpack
    return out


def _starred(rhs: ast.expr, lines: list[str]) -> tuple[int, int, int, int] | None:
    """:attr:`Unpacking.starred` of a right-hand tuple with one starred value."""
    if not isinstance(rhs, ast.Tuple):
        return None
    starred = [i for i, e in enumerate(rhs.elts) if isinstance(e, ast.Starred)]
    if len(starred) != 1:
        return None
    at = rhs.elts[starred[0]]
    col = _column(lines, at.lineno, at.col_offset)
    return at.lineno, col, starred[0], len(rhs.elts) - starred[0] - 1


def _column(lines: list[str], line: int, byte_col: int) -> int:
    """An ast column (UTF-8 bytes) as code points."""
    text = lines[line - 1] if 1 <= line <= len(lines) else ""
    return len(text.encode()[:byte_col].decode(errors="ignore"))


def _is_meta_value(node: NodeInfo) -> bool:
    """Devices (``meta``: fxls builds on it, not the user), dtypes: nothing to hint."""
    return any(v.kind in ("device", "dtype") for v in node.outputs)


def _unpacking_hints(
    modules: Sequence[ModuleResult], tree: ast.Module | None, lines: list[str]
) -> dict[int, str]:
    """Statement end line -> ``B=B, T=T, C=768`` for unpacking lines, from the getitem nodes
    written at the target (the same words as the hover on the target)."""
    targets = unpackings(tree, lines)
    out: dict[int, str] = {}
    for module in modules:
        index = _index(module, targets)
        for unpack in targets.values():
            if unpack.end in out:
                continue
            text = _unpacked(unpack, module, index)
            if text is not None:
                out[unpack.end] = text
    return out


@dataclass
class _Index:
    """A module's nodes by name, by span (the last; the last that is no item of another),
    and its getitem nodes written at an unpacking's target."""

    by_name: dict[str, NodeInfo]
    by_span: dict[tuple[int, int, int, int], NodeInfo]
    made: dict[tuple[int, int, int, int], NodeInfo]
    found: dict[tuple[int, int], list[NodeInfo]]


def _index(module: ModuleResult, targets: dict[tuple[int, int], Unpacking]) -> _Index:
    index = _Index({n.name: n for n in module.nodes}, {}, {}, {})
    places = set(targets) | {u.starred[:2] for u in targets.values() if u.starred is not None}
    for node in module.nodes:
        span = node.span
        if span is None or not node.outputs:
            continue
        if node.target.endswith("getitem") and (span.line, span.col) in places:
            index.found.setdefault((span.line, span.col), []).append(node)
        if len(node.outputs) != 1:
            continue
        key = (span.line, span.col, span.end_line, span.end_col)
        index.by_span[key] = node  # the last
        if not node.target.endswith("getitem"):
            index.made[key] = node  # the last that is not an item of another
    return index


def _unpacked(unpack: Unpacking, module: ModuleResult, index: _Index) -> str | None:
    """The hint of one unpacking line, or None."""
    if unpack.star is not None:
        return _beside_the_star(unpack, index)
    values: Sequence[Value | list[Value]] | None
    getitems = index.found.get((unpack.line, unpack.col), [])
    values = _unpacked_values(unpack, getitems, index.by_name)
    # `_b, t, _h, d = x.shape`: the value is a size (not one a call of a library's
    # module makes inside it, which has the call's span too)
    last = index.made.get(unpack.value) if unpack.value is not None else None
    if values is None and last is not None:
        values = _dims(last.outputs[0], len(unpack.names))
    if values is None and unpack.iterated and unpack.value is not None:
        values = _made_in_turn(module.nodes, unpack.value, len(unpack.names))
    names = unpack.names
    if values is None and unpack.starred is not None:
        # `b, n, _, h = *x.shape, self.heads`: the names the starred value's items are given
        line, col, first, after = unpack.starred
        count = len(names) - first - after
        items = index.found.get((line, col), [])
        if count > 0 and len(items) >= count:
            names = names[first : first + count]
            values = _item_values(items[:count])
    if values is None and unpack.values is not None:
        # `a, b = self.p(x), self.q(x)`; `inp, target = x, x[:, 1:]`: the names given
        # a value made there (`inp` is given `x` as it is)
        made_here = [
            (name, there)
            for name, span in zip(unpack.names, unpack.values)
            if (there := index.by_span.get(span)) is not None
        ]
        names = [name for name, _ in made_here]
        values = [there.outputs[0] for _, there in made_here] or None
    if values is None:
        return None
    return unpacked_text(names, values, default_dtype="float32")


def _beside_the_star(unpack: Unpacking, index: _Index) -> str | None:
    """``b, n, *_ = x.shape``, ``*_, n, dtype = *x.shape, x.dtype``: the names beside the
    starred one given the values they take, from the graph's items of what is unpacked (at
    the target, or at the starred value the right-hand side starts with; values it appends
    after it are no items, and their names get none)."""
    star = unpack.star
    items = index.found.get((unpack.line, unpack.col), [])
    appended = 0
    if not items and unpack.starred is not None and unpack.starred[2] == 0:
        items = index.found.get(unpack.starred[:2], [])
        appended = unpack.starred[3]
    if star is None or not items:
        return None
    values: list[Value | list[Value] | None] = [*_item_values(items), *[None] * appended]
    before, after = unpack.names[:star], unpack.names[star + 1 :]
    if len(values) < len(before) + len(after):
        return None
    pairs = [*zip(before, values), *zip(after, values[len(values) - len(after) :])]
    given = [(name, value) for name, value in pairs if value is not None]
    if not given:
        return None
    return unpacked_text([n for n, _ in given], [v for _, v in given], default_dtype="float32")


def _made_in_turn(
    nodes: Sequence[NodeInfo], value: tuple[int, int, int, int], count: int
) -> list[Value] | None:
    """``q, k, v = map(f, qkv)``: the values written inside the right-hand side that are used
    after it, one per name in graph order, when there are as many as names."""
    start, end = value[:2], value[2:]
    inside = [
        n
        for n in nodes
        if n.span is not None
        and (n.span.line, n.span.col) >= start
        and (n.span.end_line, n.span.end_col) <= end
    ]
    made = [n for n in escaping(inside) if len(n.outputs) == 1]
    return [n.outputs[0] for n in made] if len(made) == count else None


def _unpacked_values(
    unpack: Unpacking, getitems: list[NodeInfo], by_name: dict[str, NodeInfo]
) -> Sequence[Value | list[Value]] | None:
    """The value of each name: the getitem nodes at the target, or (when the graph has only
    the items it uses, ``_b, t, _h, d = x.shape``) the dimensions of the size unpacked."""
    if len(getitems) >= len(unpack.names):
        return _item_values(getitems)
    if not getitems or not getitems[0].args or getitems[0].args[0].node is None:
        return None
    source = by_name.get(getitems[0].args[0].node)
    if source is None or len(source.outputs) != 1:
        return None
    return _dims(source.outputs[0], len(unpack.names))


def _item_values(items: Sequence[NodeInfo]) -> list[Value | list[Value]]:
    """The value of each item node (a tuple's values when it is one)."""
    return [n.outputs[0] if len(n.outputs) == 1 else n.outputs for n in items]


def _dims(size: Value, count: int) -> list[Value] | None:
    """The dimensions of a ``torch.Size`` as int values, when it has ``count`` of them."""
    if size.kind != "size" or size.shape is None or len(size.shape) != count:
        return None
    return [Value(kind="int", text=str(dim)) for dim in size.shape]


def shape_hints(modules: Sequence[ModuleResult], source: str) -> list[ShapeHint]:
    """One hint per statement: the value its code makes that is used after it (graph order:
    the last one), of the first run of that code when it ran several times (naming that run
    and counting the others whose value differs); on an unpacking line one part per assigned
    name. A call into a helper counts for the helper's statement and for the calling
    statement; a call that returns nothing it computes (``return x``) gets no hint."""
    tree, lines = parsed(source), source.split("\n")
    ends = statement_ends(tree)
    valued = value_ends(tree, lines)
    unpacked = _unpacking_hints(modules, tree, lines)
    displays = _starred_displays(tree, lines)
    per_line: dict[int, list[tuple[ModuleResult, list[Run]]]] = {}
    for module in modules:
        attached: dict[int, list[tuple[NodeInfo, bool]]] = {}
        pieces = _pieces_at_their_split(module.nodes)
        for node in module.nodes:
            if node.op in _SKIP_OPS or node.span is None or not node.outputs:
                continue
            if _is_meta_value(node) or id(node) in pieces or _in_a_display(node, displays):
                continue
            own = ends.get(node.span.end_line, node.span.end_line)
            attached.setdefault(own, []).append((node, True))
            site = node.call_site
            if site is not None and site != node.span:  # `return self.helper(y)` in forward
                line = ends.get(site.end_line, site.end_line)
                if line != own:
                    attached.setdefault(line, []).append((node, False))
        for line, pairs in attached.items():
            per_line.setdefault(line, []).append((module, _runs(pairs, module)))
    chosen: dict[int, tuple[str, str]] = {}
    for line, per_module in per_line.items():
        found = _line_hint(runs_across(per_module), valued.get(line))
        if found is not None:
            chosen[line] = found
    hints = []
    for line in sorted(set(chosen) | set(unpacked)):
        if line in unpacked:
            label = md.plain(f"▸ {unpacked[line]}", md.MAX_LABEL)
            name = chosen[line][1] if line in chosen else ""
            hints.append(ShapeHint(line=line, label=label, node=name))
            continue
        text, name = chosen[line]
        hints.append(ShapeHint(line=line, label=md.plain(f"▸ {text}", md.MAX_LABEL), node=name))
    return hints


def _starred_displays(tree: ast.Module | None, lines: list[str]) -> set[tuple[int, int, int, int]]:
    """Where a tuple or list display with a starred item is written (``(*input_shape, -1,
    self.head_dim)``), as spans in code points."""
    found: set[tuple[int, int, int, int]] = set()
    for node in ast.walk(tree) if tree is not None else ():
        if not isinstance(node, (ast.Tuple, ast.List)) or node.end_lineno is None:
            continue
        if any(isinstance(e, ast.Starred) for e in node.elts) and node.end_col_offset is not None:
            start = _column(lines, node.lineno, node.col_offset)
            end = _column(lines, node.end_lineno, node.end_col_offset)
            found.add((node.lineno, start, node.end_lineno, end))
    return found


def _in_a_display(node: NodeInfo, displays: set[tuple[int, int, int, int]]) -> bool:
    """Whether ``node`` is an item taken of a starred value to make a display: the sizes of
    ``input_shape`` in ``(*input_shape, -1, self.head_dim)``. The statement's value is the
    whole tuple, not its last size (its sizes are the hint of the line that makes them)."""
    span = node.span
    if span is None or not node.target.endswith("getitem"):
        return False
    return (span.line, span.col, span.end_line, span.end_col) in displays


def _pieces_at_their_split(nodes: Sequence[NodeInfo]) -> set[int]:
    """The items written where the value they index is (the pieces of ``qkv.chunk(3)`` that
    ``map(f, qkv)`` takes on a later line): the statement's value is the split's, all of
    them, not its last piece."""
    splits = {n.name: n.span for n in nodes if n.target.rsplit(".", 1)[-1] in SPLITS}
    return {
        id(n)
        for n in nodes
        if n.target.endswith("getitem")
        and n.args
        and n.args[0].node in splits
        and n.span is not None
        and splits[n.args[0].node] == n.span
    }


def _runs(pairs: list[tuple[NodeInfo, bool]], module: ModuleResult) -> list[Run]:
    """The runs of one statement's nodes (each with whether it is written there rather than
    in code the statement calls)."""
    written = {id(n) for n, mine in pairs if mine}
    runs = executions([n for n, _ in pairs], module.containers, lambda n: id(n) in written, module)
    for run in runs:
        run.written = [id(n) in written for n in run.nodes]
    return runs


_NO_HINT = ("none", "other")
"""Value kinds no hint names: ``None``, an object (a cache, a model output)."""


def _result(run: Run, value_ends: set[tuple[int, int]] | None = None) -> NodeInfo | None:
    """The node whose value one run of a statement gives: the last one used after it; the
    last tensor written there when none is (computed, then never used); None for a call that
    returns nothing it computes, or when that node's code (or, for a helper's node, the call
    of the helper) does not end where the statement's value may (``value_ends``). ``None``
    or an object (``outputs.attentions``, ``outputs.past_key_values`` of a layer's output,
    read where the result is returned) is no statement's value a hint names, nor a size a
    library read and left unused (``inputs_embeds.shape`` inside transformers'
    ``create_bidirectional_mask``)."""
    out = [n for n in escaping(run.nodes) if any(v.kind not in _NO_HINT for v in n.outputs)]
    mine = [n for n, written in zip(run.nodes, run.written) if written]
    unused = [n for n in mine if any(v.kind == "tensor" for v in n.outputs)]
    node = out[-1] if out else (unused[-1] if unused else None)
    if node is None or value_ends is None:
        return node
    span = node.span if any(n is node for n in mine) else node.call_site
    if span is None or (span.end_line, span.end_col) not in value_ends:
        return None
    return node


def _line_hint(
    runs: Sequence[Run], value_ends: set[tuple[int, int]] | None = None
) -> tuple[str, str] | None:
    """(label text, node name) for one statement's runs, or None when nothing is shown."""
    if not runs:
        return None
    node = _result(runs[0], value_ends)
    if node is None:
        return None
    shown = values_text(node.outputs, default_dtype="float32")
    if not shown:
        return None
    text = shown
    module = runs[0].module
    if module is not None and node.name in module.example_nodes:
        text += f" · {example_text(module.example_sizes)}"
    differ = 0
    for run in runs[1:]:
        other = _result(run)
        if other is None or values_text(other.outputs, default_dtype="float32") != shown:
            differ += 1
    if differ:
        text += f" · {others_text(runs[0], differ, len(runs))}"
    return text, node.name


def lsp_inlay_hints(
    hints: Sequence[ShapeHint],
    current_lines: Sequence[str],
    encoding: Encoding,
    mapper: LineMapper,
    visible: types.Range | None = None,
) -> list[types.InlayHint]:
    """ShapeHints -> LSP inlay hints at the end of their (current) lines within ``visible``."""
    out = []
    for hint in hints:
        line = mapper(hint.line)
        if line is None or not 1 <= line <= len(current_lines):
            continue
        if visible is not None and not visible.start.line <= line - 1 <= visible.end.line:
            continue
        text = current_lines[line - 1].rstrip("\r")
        out.append(
            types.InlayHint(
                position=types.Position(line=line - 1, character=units(text, encoding)),
                label=hint.label,
                kind=types.InlayHintKind.Type,
                padding_left=True,
                tooltip=types.MarkupContent(
                    kind=types.MarkupKind.Markdown, value=f"output of {md.code(hint.node)}"
                ),
            )
        )
    return out
