"""Regenerate a class's ``forward`` from a transformed FX graph, as minimal source edits.

:func:`regenerate_forward` takes the captured original (the class's traced ``GraphModule``,
whose nodes carry their source spans) and a transformed copy of that graph (a subgraph
rewrite, a user pass), and writes the difference back into the class's ``forward``:

- statements whose graph nodes are all unchanged are kept byte for byte (loops, branches,
  calls of submodules traced through, comments and names included), and so are the ``def``
  line, decorators, docstring and everything outside ``forward``;
- only the statements that computed a changed node are replaced, by idiomatic code printed
  from the new graph: submodule calls as ``self.attr(...)``, functions under the names the file
  imports (``F.relu``, ``math.sqrt``), operators infix, ``x.shape`` for ``getattr``, single-use
  values inlined, the user's variable names where a statement bound one; no ``x = None`` frees,
  no ``wrap(...)`` prologue, no alias globals.

It refuses (:class:`~fxls.worker.rewrite.base.Unavailable`, with the reason for
people) whenever the printed code would not be the user's program with the change and nothing
else: a changed statement inside a loop or branch (the graph holds one unrolled or specialized
path), a changed node traced through a helper, a submodule's ``forward`` or a container
(printing it would inline that code), a changed statement reading a plain Python value the graph
holds only as a constant (a local, an attribute that is None, an argument fixed while tracing;
scalar attributes and module constants are written back by name), frozen tensor constants
(``_tensor_constant0``), attributes or submodules the original instance does not have, an
inherited ``forward``, and a BatchNorm folded into the layer before it (the weights change, so
the edited source would run with the wrong ones).

The edits are for :class:`~fxls.worker.rewrite.base.Proposal` and go through the usual
verification (numeric comparison of the edited class with the original).
"""

from __future__ import annotations

import ast
import builtins
import inspect
import keyword
import operator
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import torch
import torch.fx
from torch import nn

from fxls.protocol.edits import apply_edits
from fxls.protocol.model import Span, TextEdit
from fxls.protocol.positions import SourceText, contains
from fxls.worker.capture.records.arguments import float_literal
from fxls.worker.capture.spans import CALL_SITE_KEY, SPAN_KEY
from fxls.worker.rewrite import text
from fxls.worker.rewrite.base import Original, Unavailable

__all__ = ["regenerate_forward"]

_BINARY = {
    operator.add: "+",
    operator.sub: "-",
    operator.mul: "*",
    operator.truediv: "/",
    operator.floordiv: "//",
    operator.mod: "%",
    operator.pow: "**",
    operator.matmul: "@",
    operator.and_: "&",
    operator.or_: "|",
    operator.xor: "^",
    operator.lshift: "<<",
    operator.rshift: ">>",
    operator.eq: "==",
    operator.ne: "!=",
    operator.lt: "<",
    operator.le: "<=",
    operator.gt: ">",
    operator.ge: ">=",
}
_AUGMENTED = {
    ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%",
    ast.Pow: "**", ast.MatMult: "@", ast.BitAnd: "&", ast.BitOr: "|", ast.BitXor: "^",
    ast.LShift: "<<", ast.RShift: ">>",
}  # fmt: skip
_UNARY = {operator.neg: "-", operator.pos: "+", operator.invert: "~", operator.not_: "not "}
_PRECEDENCE: dict[Any, int] = {
    operator.pow: 8,
    operator.neg: 7, operator.pos: 7, operator.invert: 7,
    operator.mul: 6, operator.truediv: 6, operator.floordiv: 6, operator.mod: 6,
    operator.matmul: 6,
    operator.add: 5, operator.sub: 5,
    operator.lshift: 4, operator.rshift: 4,
    operator.and_: 3, operator.xor: 2, operator.or_: 1,
    operator.eq: 0, operator.ne: 0, operator.lt: 0, operator.le: 0, operator.gt: 0,
    operator.ge: 0,
    operator.not_: -1,
}  # fmt: skip
"""Python's operator precedence (higher binds tighter)."""
_INLINE_LIMIT = 60
"""Single-use values are written inside their user when their text is at most this long."""
_COMPOUND = (
    ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try,
    ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Match,
)  # fmt: skip
_LOOPS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.Lambda)


def regenerate_forward(
    original: Original,
    cls: str,
    gm: torch.fx.GraphModule,
    *,
    before: torch.fx.GraphModule | None = None,
) -> list[TextEdit]:
    """Edits that make class ``cls``'s ``forward`` compute what ``gm`` computes.

    Args:
        original: the captured document (``Original`` of the rewrite job).
        cls: the class whose ``forward`` to edit; it must have been traced with FX.
        gm: the transformed graph: a copy of the class's traced ``GraphModule`` (for example
            ``copy.deepcopy(original.capture(cls).traced.gm)``) changed by a pass or a subgraph
            rewrite. Nodes the transformation did not touch keep their names and metadata,
            which is how the unchanged statements are recognized.
        before: the graph ``gm`` was derived from; defaults to the class's traced graph.

    Returns:
        Text edits against ``original.source`` (code-point columns, whole statements), in
        text order; empty when ``gm`` computes the same graph. The edited file parses.

    Raises:
        Unavailable: the change cannot be written back as the user's own code (see the
            module docstring); the message says why.

    Example::

        gm = copy.deepcopy(original.capture("Net").traced.gm)
        torch.fx.subgraph_rewriter.replace_pattern(gm, pattern, replacement)
        edits = regenerate_forward(original, "Net", gm)
        return Proposal("Apply my pass", edits, check="numeric")
    """
    capture = original.capture(cls)
    traced = capture.traced
    base = before if before is not None else (traced.gm if traced is not None else None)
    if base is None:
        raise Unavailable(f"`{cls}` has no FX graph to compare with")
    forward = capture.forward_def
    if forward is None:
        raise Unavailable(f"`{cls}.forward` is not written in this file")
    instance = capture.module
    if instance is None:
        raise Unavailable(f"`{cls}` could not be built")
    owner = text.class_def(original.tree, cls)
    if not contains(original.doc.source.node_span(owner), original.doc.source.node_span(forward)):
        raise Unavailable(
            f"`{cls}` inherits `forward`: editing it would change every class that shares it"
        )
    return _Regenerator(original, forward, base, gm, instance).edits()


@dataclass
class _Statement:
    index: int
    node: ast.stmt
    span: Span
    nodes: list[torch.fx.Node] = field(default_factory=list)
    """The original graph's nodes traced from this statement (by call site)."""
    binds: dict[str, torch.fx.Node] = field(default_factory=dict)
    """Variable → original node it holds after the statement, for plain assignments."""
    dirty: bool = False


class _Regenerator:
    def __init__(
        self,
        original: Original,
        forward: ast.FunctionDef | ast.AsyncFunctionDef,
        before: torch.fx.GraphModule,
        after: torch.fx.GraphModule,
        instance: nn.Module,
    ):
        self.original = original
        self.src: SourceText = original.doc.source
        self.forward = forward
        self.before = before
        self.after = after
        self.instance = instance
        self.namespace: dict[str, Any] = original.doc.namespace
        self.forward_span = self.src.node_span(forward)
        body = list(forward.body)
        self.statements = [
            _Statement(i, stmt, self.src.node_span(stmt)) for i, stmt in enumerate(body)
        ]
        self.taken = {n.id for n in ast.walk(forward) if isinstance(n, ast.Name)} | {
            a.arg for a in ast.walk(forward.args) if isinstance(a, ast.arg)
        }
        self.taken |= set(dir(builtins)) | set(self.namespace)
        self.params = {a.arg for a in ast.walk(forward.args) if isinstance(a, ast.arg)}
        self.locals = _stored_names(forward) | self.params
        """Names ``forward`` binds: the graph holds their plain Python values as constants."""
        self.fixed = {
            self.param_name(n)
            for n in before.graph.nodes
            if n.op == "placeholder" and any(_is_guard(u) for u in n.users)
        }
        """Parameters traced with a fixed value (``concrete_args``)."""
        self.stands_for: dict[torch.fx.Node, torch.fx.Node] = {}
        """Removed original node → the new node read in its place (:meth:`_stands_for`)."""
        self.old_counterpart: dict[torch.fx.Node, torch.fx.Node] = {}
        code = self.src.text(self.forward_span)
        self.double_quotes = code.count('"') >= code.count("'")
        """Strings are written with the quotes ``forward`` uses most."""

    # ------------------------------------------------------------------ matching

    def _counterparts(self) -> dict[torch.fx.Node, torch.fx.Node]:
        """New node → the original node of the same name, op and target (its arguments may
        differ)."""
        old_by_name = {n.name: n for n in self.before.graph.nodes}
        out: dict[torch.fx.Node, torch.fx.Node] = {}
        for node in self.after.graph.nodes:
            old = old_by_name.get(node.name)
            if old is not None and old.op == node.op and _same_target(old, node):
                out[node] = old
        return out

    def _kept(
        self, counterparts: dict[torch.fx.Node, torch.fx.Node]
    ) -> dict[torch.fx.Node, torch.fx.Node]:
        """The counterparts whose arguments are the same, compared by counterpart, or by what
        stands for a removed node (:meth:`_stands_for`): a statement that reads a variable
        stays right when the variable holds what stands for what it held, which the printer
        checks."""
        self.stands_for = self._stands_for(counterparts)
        same = _Same(counterparts, self.stands_for)
        return {
            node: old
            for node, old in counterparts.items()
            if same.args((node.args, node.kwargs), (old.args, old.kwargs))
        }

    def _stands_for(
        self, counterparts: dict[torch.fx.Node, torch.fx.Node]
    ) -> dict[torch.fx.Node, torch.fx.Node]:
        """Removed original node → the one new node every counterpart of its users reads in
        its place (the input of a removed dropout, a rule's replacement)."""
        alive = set(counterparts.values())
        found: dict[torch.fx.Node, torch.fx.Node | None] = {}
        for new, old in counterparts.items():
            pairs: list[tuple[torch.fx.Node, torch.fx.Node]] = []
            if not _node_pairs((new.args, new.kwargs), (old.args, old.kwargs), pairs):
                continue
            for new_arg, old_arg in pairs:
                if old_arg in alive or counterparts.get(new_arg) is old_arg:
                    continue
                if old_arg in found and found[old_arg] is not new_arg:
                    found[old_arg] = None  # read as different values: no single stand-in
                else:
                    found[old_arg] = new_arg
        return {old: new for old, new in found.items() if new is not None}

    def _statement_of(self, node: torch.fx.Node) -> _Statement | None:
        span = node.meta.get(CALL_SITE_KEY) or node.meta.get(SPAN_KEY)
        if not isinstance(span, Span):
            return None
        for stmt in self.statements:
            if contains(stmt.span, span):
                return stmt
        return None

    # ------------------------------------------------------------------ the edits

    def edits(self) -> list[TextEdit]:
        counterparts = self._counterparts()
        kept = self._kept(counterparts)
        old_kept = {old: new for new, old in kept.items()}
        self.old_counterpart = {old: new for new, old in counterparts.items()}
        where: dict[torch.fx.Node, _Statement] = {}
        for node in self.before.graph.nodes:
            if node.op == "placeholder":
                continue
            stmt = self._statement_of(node)
            if stmt is None:
                if node.op in ("get_attr", "output"):
                    continue
                if node not in old_kept:
                    raise Unavailable(self._placeless(node))
                continue
            where[node] = stmt
            stmt.nodes.append(node)
        self._bindings()
        changed_old = [
            n
            for n in self.before.graph.nodes
            if n.op not in ("placeholder", "get_attr") and n not in old_kept
        ]
        new_nodes = [n for n in self.after.graph.nodes if n not in kept and n.op != "output"]
        out_new = _output(self.after.graph)
        out_old = _output(self.before.graph)
        output_changed = out_old not in old_kept
        if not changed_old and not new_nodes and not output_changed:
            return []
        self._refuse_fusion(changed_old)
        for node in changed_old:
            stmt = where.get(node)
            if stmt is None and node.op == "output":
                stmt = self._return_statement()
            if stmt is None:
                raise Unavailable(self._placeless(node))
            stmt.dirty = True
        dirty = [s for s in self.statements if s.dirty]
        for stmt in dirty:
            self._check_rewritable(stmt)
        for node in self.after.graph.nodes:
            if node.op == "placeholder" and node not in kept:
                raise Unavailable("the transformation changed `forward`'s parameters")
        return self._emit(kept, old_kept, where, out_new)

    def param_name(self, node: torch.fx.Node) -> str:
        """The ``forward`` parameter a placeholder stands for (FX may suffix it: ``mask_1``)."""
        name = str(node.target).lstrip("*")
        if name not in self.params:
            base = re.sub(r"_\d+$", "", name)
            if base in self.params:
                return base
        return name

    def _placeless(self, node: torch.fx.Node) -> str:
        """Why a node outside every statement of ``forward`` cannot be written back."""
        span = node.meta.get(SPAN_KEY)
        if isinstance(span, Span) and not contains(self.forward_span, span):
            return (
                f"`{node.name}` is computed by code that was traced through (line {span.line}): "
                "writing the graph back would inline it"
            )
        return f"`{node.name}` has no place in the source of `forward`"

    def _return_statement(self) -> _Statement | None:
        last = self.statements[-1] if self.statements else None
        if last is not None and isinstance(last.node, ast.Return):
            return last
        return None

    def _bindings(self) -> None:
        """What each plain assignment binds, as original nodes."""
        env: dict[str, torch.fx.Node] = {}
        for node in self.before.graph.nodes:
            if node.op == "placeholder":
                env[self.param_name(node)] = node
        for stmt in self.statements:
            inside = set(stmt.nodes)
            escaping = [
                n for n in stmt.nodes if n.op != "output" and any(u not in inside for u in n.users)
            ]
            targets: list[ast.expr] = []
            value: ast.expr | None = None
            if isinstance(stmt.node, ast.Assign):
                targets, value = list(stmt.node.targets), stmt.node.value
            elif isinstance(stmt.node, (ast.AnnAssign, ast.AugAssign)):
                targets, value = [stmt.node.target], stmt.node.value
            for target in targets:
                if isinstance(target, ast.Name):
                    if isinstance(value, ast.Name) and value.id in env and not stmt.nodes:
                        stmt.binds[target.id] = env[value.id]
                    elif len(escaping) == 1:
                        stmt.binds[target.id] = escaping[0]
                elif isinstance(target, ast.Tuple) and all(
                    isinstance(e, ast.Name) for e in target.elts
                ):
                    items = _unpacked(stmt.nodes, len(target.elts))
                    if items is not None:
                        for elt, item in zip(target.elts, items):
                            stmt.binds[elt.id] = item  # type: ignore[attr-defined]
            loop_targets = {
                n.id
                for sub in ast.walk(stmt.node)
                if isinstance(sub, (ast.For, ast.AsyncFor, ast.comprehension))
                for n in ast.walk(sub.target)
                if isinstance(n, ast.Name)
            }
            rest = _stored_names(stmt.node) - set(stmt.binds) - loop_targets
            if len(rest) == 1 and len(escaping) == 1 and not targets:
                # a block that leaves one value in one name (``for ...: x = f(x)``)
                stmt.binds[rest.pop()] = escaping[0]
            env.update(stmt.binds)

    def _check_rewritable(self, stmt: _Statement) -> None:
        node, line = stmt.node, stmt.span.line
        if isinstance(node, _COMPOUND):
            what = {
                ast.For: "`for` loop", ast.AsyncFor: "`for` loop", ast.While: "`while` loop",
                ast.If: "`if` statement", ast.With: "`with` block", ast.Try: "`try` block",
            }.get(type(node), "block")  # fmt: skip
            verb = "unroll" if "loop" in what else "specialize"
            raise Unavailable(
                f"the change is inside the {what} at line {line}: writing the graph back "
                f"would {verb} it (the graph holds only the path traced)"
            )
        for sub in ast.walk(node):
            if isinstance(sub, _LOOPS):
                raise Unavailable(
                    f"the change is in a comprehension or lambda at line {line}: writing the "
                    "graph back would unroll it"
                )
        if not isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Return, ast.Expr)):
            raise Unavailable(f"the statement at line {line} is not one fxls rewrites")
        seen: dict[tuple[Any, ...], int] = {}
        for n in stmt.nodes:
            stack = n.meta.get("nn_module_stack") or {}
            for path, _kind in list(stack.values()):
                if n.op == "call_module" and path == n.target:
                    continue
                shown = _self_path(self.instance, str(path)) if path else "a submodule"
                raise Unavailable(
                    f"line {line} runs `{shown}`, which was traced through: writing the graph "
                    "back would inline it"
                )
            inner = n.meta.get(SPAN_KEY)
            if isinstance(inner, Span) and not contains(stmt.span, inner):
                raise Unavailable(
                    f"line {line} calls code that was traced through (line {inner.line}): "
                    "writing the graph back would inline it"
                )
            if isinstance(inner, Span):
                key = (inner.line, inner.col, inner.end_line, inner.end_col, n.op, str(n.target))
                seen[key] = seen.get(key, 0) + 1
                if seen[key] > 1:
                    raise Unavailable(
                        f"line {inner.line} ran more than once while tracing: writing the "
                        "graph back would unroll it"
                    )

    def _refuse_fusion(self, changed_old: list[torch.fx.Node]) -> None:
        for node in changed_old:
            if node.op != "call_module":
                continue
            module = _submodule(self.before, str(node.target))
            if isinstance(module, nn.modules.batchnorm._BatchNorm) and not any(
                n.op == "call_module" and n.target == node.target for n in self.after.graph.nodes
            ):
                raise Unavailable(
                    f"`self.{node.target}` (BatchNorm) is folded away: the fused weights are "
                    "not the class's own, so this cannot be written into `forward`"
                )

    # ------------------------------------------------------------------ printing

    def _emit(
        self,
        kept: dict[torch.fx.Node, torch.fx.Node],
        old_kept: dict[torch.fx.Node, torch.fx.Node],
        where: dict[torch.fx.Node, _Statement],
        out_new: torch.fx.Node,
    ) -> list[TextEdit]:
        slots = [s.index for s in self.statements if s.dirty]
        old_by_name = {n.name: n for n in self.before.graph.nodes}
        slot_of: dict[torch.fx.Node, int] = {}
        avail: dict[torch.fx.Node, int] = {}
        emitted: list[torch.fx.Node] = []
        for node in self.after.graph.nodes:
            if node.op == "placeholder" or node.op == "get_attr":
                avail[node] = -1
                continue
            if node.op == "output":
                continue
            old = kept.get(node)
            stmt = where.get(old) if old is not None else None
            if old is not None and stmt is not None and not stmt.dirty:
                avail[node] = stmt.index
                continue
            if old is not None and stmt is None:
                if not node.users or _is_guard(node):
                    continue  # a guard of a fixed argument, or a value nothing reads
                raise Unavailable(self._placeless(old))
            need = max([avail.get(i, -1) for i in node.all_input_nodes] or [-1])
            if stmt is None:
                # a changed node stays at the statement that computed it before
                same = old_by_name.get(node.name)
                home = where.get(same) if same is not None and _same_target(same, node) else None
                if home is not None and home.dirty and home.index >= need:
                    stmt = home
            if stmt is not None:
                if stmt.index < need:
                    raise Unavailable(f"line {stmt.span.line} would need a value computed after it")
                slot = stmt.index
            else:
                later = [s for s in slots if s >= need]
                if not later:
                    raise Unavailable(f"no changed statement can compute `{node.name}`")
                slot = later[0]
            slot_of[node] = avail[node] = slot
            emitted.append(node)
        self._check_attributes(emitted, out_new)
        return_stmt = self._return_statement()
        output_changed = out_new.args and _output(self.before.graph) not in old_kept
        if output_changed and (return_stmt is None or not return_stmt.dirty):
            raise Unavailable("the returned value changed but `forward` has no last `return`")
        printer = _Printer(self, slot_of)
        edits: list[TextEdit] = []
        nl = text.newline_of(self.src.source)
        for stmt in self.statements:
            if stmt.dirty:
                lines = printer.slot(stmt, out_new if stmt is return_stmt else None)
                edit = self._replace(stmt, lines, nl)
                if edit.text != self.src.text(edit.span):
                    edits.append(edit)
            else:
                printer.keep(stmt, kept, old_kept)
        edited = apply_edits(self.original.source, edits)
        try:
            ast.parse(edited)
        except SyntaxError as exc:
            raise Unavailable(f"the regenerated `forward` does not parse: {exc.msg}") from exc
        return edits

    def _replace(self, stmt: _Statement, lines: list[str], nl: str) -> TextEdit:
        span = stmt.span
        first = self.src.line(span.line)
        last = self.src.line(span.end_line)
        before, after = first[: span.col], last[span.end_col :]
        if before.strip() or (after.strip() and not after.strip().startswith("#")):
            raise Unavailable(f"line {span.line} holds more than one statement")
        pad = before
        if not lines:
            block = [s for s in self.statements]
            if len(block) == 1:
                return TextEdit(span, "pass")
            return TextEdit(Span(span.line, 0, span.end_line + 1, 0), "")
        body = lines[0] + "".join(nl + pad + line for line in lines[1:])
        return TextEdit(Span(span.line, span.col, span.end_line, span.end_col), body)

    def _check_attributes(self, emitted: list[torch.fx.Node], out: torch.fx.Node) -> None:
        used: list[torch.fx.Node] = []
        for node in emitted:
            used.extend(i for i in node.all_input_nodes if i.op == "get_attr")
            if node.op == "call_module":
                used.append(node)
        used.extend(i for i in out.all_input_nodes if i.op == "get_attr")
        for node in used:
            target = str(node.target)
            if re.match(r"(.*\.)?_tensor_constant\d+$", target):
                raise Unavailable(
                    f"the graph uses a frozen tensor constant (`{target}`) that the class "
                    "does not create"
                )
            mine = _attribute(self.instance, target)
            if mine is None:
                raise Unavailable(
                    f"the graph uses `self.{target}`, which `{type(self.instance).__name__}` "
                    "does not have"
                )
            theirs = _attribute(self.after, target)
            if isinstance(mine, nn.Module) and (
                type(theirs) is not type(mine) or _shapes(theirs) != _shapes(mine)
            ):
                raise Unavailable(
                    f"`self.{target}` in the transformed graph is not the class's own "
                    f"`{type(mine).__name__}`"
                )


class _Printer:
    """Prints the new graph's nodes at the changed statements, and follows which variable
    holds which value through the statements kept."""

    def __init__(self, regen: _Regenerator, slot_of: dict[torch.fx.Node, int]):
        self.regen = regen
        self.slot_of = slot_of
        self.holds: dict[str, torch.fx.Node] = {}
        self.name_of: dict[torch.fx.Node, str] = {}
        self.done: set[torch.fx.Node] = set()
        for node in regen.after.graph.nodes:
            if node.op == "placeholder":
                name = regen.param_name(node)
                self.holds[name] = node
                self.name_of[node] = name
                self.done.add(node)
        self.values: dict[tuple[type, Any], str | None] = {}
        """Plain Python values the statement being printed reads, by value."""
        self.used_values: set[str] = set()
        self.pending: dict[torch.fx.Node, str] = {}
        """Values of the statement being printed that are written inside their user."""

    # -- kept statements

    def keep(
        self,
        stmt: _Statement,
        kept: dict[torch.fx.Node, torch.fx.Node],
        old_kept: dict[torch.fx.Node, torch.fx.Node],
    ) -> None:
        for new, old in kept.items():
            if old in stmt.nodes:
                self.done.add(new)
        env_before = self.holds
        for name in text.loaded_names(stmt.node):
            held = self._expected(stmt, name)
            if held is None:
                continue
            want = self.regen.old_counterpart.get(held) or self.regen.stands_for.get(held)
            if want is None or env_before.get(name) is not want:
                raise Unavailable(
                    f"line {stmt.span.line} is kept but reads `{name}`, which the change "
                    "computes differently"
                )
        for name, bound in stmt.binds.items():
            counterpart = self.regen.old_counterpart.get(bound) or self.regen.stands_for.get(bound)
            if counterpart is not None:
                self._bind(name, counterpart)
            else:
                self.holds.pop(name, None)
        for target in _stored_names(stmt.node):
            if target not in stmt.binds:
                self.holds.pop(target, None)

    def _expected(self, stmt: _Statement, name: str) -> torch.fx.Node | None:
        """The original node variable ``name`` holds when ``stmt`` starts."""
        found: torch.fx.Node | None = None
        for node in self.regen.before.graph.nodes:
            if node.op == "placeholder" and self.regen.param_name(node) == name:
                found = node
        for earlier in self.regen.statements[: stmt.index]:
            if name in earlier.binds:
                found = earlier.binds[name]
            elif name in _stored_names(earlier.node):
                found = None
        return found

    def _bind(self, name: str, node: torch.fx.Node) -> None:
        old = self.holds.get(name)
        if old is not None and self.name_of.get(old) == name:
            del self.name_of[old]
        self.holds[name] = node
        self.name_of[node] = name

    # -- changed statements

    def slot(self, stmt: _Statement, out: torch.fx.Node | None) -> list[str]:
        nodes = [n for n, s in self.slot_of.items() if s == stmt.index]
        inline: dict[torch.fx.Node, str] = {}
        self.pending = inline
        self.values = self._python_values(stmt)
        self.used_values = set()
        lines: list[str] = []
        for node in nodes:
            expr = self._expr(node, inline)
            if self._inlinable(node, stmt, out) and len(expr) <= _INLINE_LIMIT:
                inline[node] = expr
                continue
            name = self._name_for(node, stmt)
            if name is None:
                lines.append(expr)
            else:
                lines.append(self._augmented(stmt, name, node, inline) or f"{name} = {expr}")
                self._bind(name, node)
            self.done.add(node)
        if out is not None:
            value = out.args[0] if out.args else None
            shown = self._value(value, inline)
            if isinstance(value, tuple) and len(value) > 1:
                shown = shown[1:-1]  # return a, b
            lines.append(f"return {shown}")
        else:
            lines.extend(self._keep_alive(stmt))
        for text_ in sorted({t for t in self.values.values() if t is not None} - self.used_values):
            raise Unavailable(
                f"line {stmt.span.line} uses `{text_}`, which the graph holds only as the "
                "number it computed: writing it back would hard-code it"
            )
        self.values = {}
        return lines

    def _python_values(self, stmt: _Statement) -> dict[tuple[type, Any], str | None]:
        """Plain Python values a changed statement reads (``self.n_head``, a module-level
        ``EPS``): the graph holds their values as constants, which are written back as these
        names again (``None`` for a value two of them, or a literal of the statement, share).
        Locals the graph does not hold, and attributes that are None, are refused."""
        regen = self.regen
        found: dict[tuple[type, Any], str | None] = {}
        literals = {
            (type(v), v) for v in _literals(stmt.node) if isinstance(v, (bool, int, float, str))
        }

        def add(shown: str, value: Any) -> None:
            if value is None:
                raise Unavailable(
                    f"line {stmt.span.line} reads `{shown}`, which is None in the instance fxls "
                    "built: the graph left it out, so writing it back would hard-code that"
                )
            if not isinstance(value, (bool, int, float, str)):
                raise Unavailable(
                    f"line {stmt.span.line} reads `{shown}` ({type(value).__name__}), which the "
                    "graph holds only as a constant"
                )
            key = (type(value), value)
            found[key] = None if key in found or key in literals else shown

        for chain, value in _self_reads(stmt.node, regen.instance):
            add(chain, value)
        for node in ast.walk(stmt.node):
            if not (isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)):
                continue
            name = node.id
            if name in regen.fixed:
                raise Unavailable(
                    f"line {stmt.span.line} reads `{name}`, which was fixed while tracing: "
                    "writing the graph back would hard-code it"
                )
            if self._expected(stmt, name) is not None or name == "self":
                continue
            if name in regen.locals:
                raise Unavailable(
                    f"line {stmt.span.line} reads `{name}`, a Python value the graph holds only "
                    "as a constant: writing the graph back would hard-code it"
                )
            value = regen.namespace.get(name, getattr(builtins, name, None))
            if isinstance(value, (bool, int, float, str)) or (
                value is None and name in regen.namespace
            ):
                add(name, value)
        return found

    def _augmented(
        self, stmt: _Statement, name: str, node: torch.fx.Node, inline: dict[torch.fx.Node, str]
    ) -> str | None:
        """``x += y`` for a changed ``x += ...`` that still adds to ``x``."""
        aug = stmt.node
        if not (isinstance(aug, ast.AugAssign) and isinstance(aug.target, ast.Name)):
            return None
        symbol = _AUGMENTED.get(type(aug.op))
        if (
            aug.target.id != name
            or node.op != "call_function"
            or _BINARY.get(node.target) != symbol  # type: ignore[arg-type]
            or len(node.args) != 2
            or node.kwargs
            or not isinstance(node.args[0], torch.fx.Node)
            or self.name_of.get(node.args[0]) != name
        ):
            return None
        return f"{name} {symbol}= {self._value(node.args[1], inline)}"

    def _keep_alive(self, stmt: _Statement) -> list[str]:
        """Aliases for values a later changed statement needs whose variable a statement kept
        before it overwrites (``b = a`` when ``b``'s own computation was merged into ``a``)."""
        later = self.regen.statements[stmt.index + 1 :]
        lines: list[str] = []
        for node, name in list(self.name_of.items()):
            needed = any(
                u not in self.done and (u.op == "output" or self.slot_of.get(u, -1) > stmt.index)
                for u in node.users
            )
            if not needed:
                continue
            for kept in later:
                if kept.dirty:
                    if any(self.slot_of.get(u) == kept.index for u in node.users):
                        break  # used before anything overwrites it
                    continue
                if name not in _stored_names(kept.node):
                    continue
                if isinstance(kept.node, ast.AugAssign):
                    raise Unavailable(
                        f"line {kept.span.line} changes `{name}` in place, and the change "
                        "shares that value"
                    )
                free = [b for b in stmt.binds if b not in self.holds or not self._busy(b, node)]
                alias = free[0] if free else self._fresh(node.name)
                lines.append(f"{alias} = {name}")
                self._bind(alias, node)
                self.holds[name] = node
                break
        return lines

    def _inlinable(self, node: torch.fx.Node, stmt: _Statement, out: torch.fx.Node | None) -> bool:
        users = list(node.users)
        if len(users) != 1 or _uses(users[0], node) != 1:
            return False
        user = users[0]
        if user is not out and self.slot_of.get(user) != stmt.index:
            return False
        return not (self._wanted_name(node, stmt) is not None and self._read_later(node, stmt))

    def _wanted_name(self, node: torch.fx.Node, stmt: _Statement) -> str | None:
        for name, old in stmt.binds.items():
            if old.name == node.name or self.regen.stands_for.get(old) is node:
                return name
        return None

    def _read_later(self, node: torch.fx.Node, stmt: _Statement) -> bool:
        for later in self.regen.statements[stmt.index + 1 :]:
            if later.dirty:
                continue
            for name in text.loaded_names(later.node):
                if name in stmt.binds and stmt.binds[name].name == node.name:
                    return True
        return False

    def _name_for(self, node: torch.fx.Node, stmt: _Statement) -> str | None:
        if not node.users:
            return None
        wanted = self._wanted_name(node, stmt)
        if wanted is None and len(stmt.binds) == 1:
            (only,) = stmt.binds
            last = [n for n, s in self.slot_of.items() if s == stmt.index and n.users]
            if (
                last
                and last[-1] is node
                and all(self.slot_of.get(u) != stmt.index for u in node.users)
            ):
                wanted = only
        if wanted is not None and not self._busy(wanted, node):
            return wanted
        return self._fresh(node.name)

    def _busy(self, name: str, node: torch.fx.Node) -> bool:
        """Whether variable ``name`` holds a value still needed after ``node``."""
        held = self.holds.get(name)
        if held is None or held is node:
            return False
        return any(u not in self.done and not self._feeds(u, node) for u in held.users)

    def _feeds(self, user: torch.fx.Node, node: torch.fx.Node) -> bool:
        """Whether ``user`` is ``node`` or written inside it (inlined, not yet emitted)."""
        while user is not node and user in self.pending:
            (user,) = user.users
        return user is node

    def _fresh(self, base: str) -> str:
        base = re.sub(r"\W", "_", base) or "v"
        if keyword.iskeyword(base) or base[0].isdigit():
            base = f"v_{base}"
        name, i = base, 1
        while name in self.regen.taken or name in self.holds:
            i += 1
            name = f"{base}_{i}"
        self.regen.taken.add(name)
        return name

    def _value(self, value: Any, inline: dict[torch.fx.Node, str], *, index: bool = False) -> str:
        if isinstance(value, torch.fx.Node):
            if value.op == "get_attr":
                return _self_path(self.regen.instance, str(value.target))
            if value in inline:
                return inline[value]
            name = self.name_of.get(value)
            if name is None or self.holds.get(name) is not value:
                raise Unavailable(f"`{value.name}` is not available where it is needed")
            return name
        return self._constant(value, inline, index=index)

    def _constant(
        self, value: Any, inline: dict[torch.fx.Node, str], *, index: bool = False
    ) -> str:
        if isinstance(value, (bool, int, float, str)) and (type(value), value) in self.values:
            shown = self.values[(type(value), value)]
            if shown is None:
                raise Unavailable(
                    f"the constant {value!r} could come from several names or literals of the "
                    "statement: fxls cannot tell which to write"
                )
            self.used_values.add(shown)
            return shown
        if isinstance(value, str):
            shown = repr(value)
            if self.regen.double_quotes and shown.startswith("'") and '"' not in value:
                shown = f'"{shown[1:-1]}"'
            return shown
        if isinstance(value, bool) or value is None or isinstance(value, (int, bytes)):
            return repr(value)
        if isinstance(value, float):
            return float_literal(value, '"' if self.regen.double_quotes else "'")
        if value is Ellipsis:
            return "..."
        if isinstance(value, slice):
            parts = [
                "" if p is None else self._value(p, inline)
                for p in (value.start, value.stop, value.step)
            ]
            if index:
                return ":".join(parts[:2]) + (f":{parts[2]}" if value.step is not None else "")
            return f"slice({', '.join(self._value(p, inline) for p in (value.start, value.stop, value.step))})"
        if isinstance(value, tuple):
            items = [self._value(v, inline, index=index) for v in value]
            if index:
                return ", ".join(items) if len(items) != 1 else items[0] + ","
            return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"
        if isinstance(value, list):
            return f"[{', '.join(self._value(v, inline) for v in value)}]"
        if isinstance(value, dict):
            return (
                "{" + ", ".join(f"{k!r}: {self._value(v, inline)}" for k, v in value.items()) + "}"
            )
        if isinstance(value, (torch.dtype, torch.layout, torch.memory_format)):
            return f"{self._torch()}.{str(value).removeprefix('torch.')}"
        if isinstance(value, torch.device):
            return f"{self._torch()}.device({str(value)!r})"
        if isinstance(value, torch.Tensor):
            raise Unavailable("the graph holds a tensor constant that cannot be written as code")
        raise Unavailable(f"cannot write the constant {type(value).__name__} as code")

    def _torch(self) -> str:
        name = _bound_name(self.regen.namespace, torch)
        if name is None:
            raise Unavailable("the file does not `import torch`")
        return name

    def _args(
        self, args: Iterable[Any], kwargs: dict[str, Any], inline: dict[torch.fx.Node, str]
    ) -> str:
        parts = [self._value(a, inline) for a in args]
        parts += [f"{k}={self._value(v, inline)}" for k, v in kwargs.items()]
        return ", ".join(parts)

    def _operand(
        self, value: Any, inline: dict[torch.fx.Node, str], outer: Any = None, side: int = 0
    ) -> str:
        """``value`` as an operand of ``outer`` (an operator; None: of a call or attribute),
        on its left (0) or right (1), parenthesized when precedence needs it."""
        shown = self._value(value, inline)
        if isinstance(value, torch.fx.Node) and value in inline and _is_operator(value):
            inner, wanted = _PRECEDENCE[value.target], _PRECEDENCE.get(outer, 99)
            keep = inner > wanted or (
                inner == wanted and inner not in (0, 8) and side == 0 and outer in _BINARY
            )
            return shown if keep else f"({shown})"
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0:
            return f"({shown})"
        return shown

    def _expr(self, node: torch.fx.Node, inline: dict[torch.fx.Node, str]) -> str:
        args, kwargs = node.args, dict(node.kwargs)
        if node.op == "call_module":
            call = _self_path(self.regen.instance, str(node.target))
            return f"{call}({self._args(args, kwargs, inline)})"
        if node.op == "call_method":
            receiver = self._operand(args[0], inline)
            return f"{receiver}.{node.target}({self._args(args[1:], kwargs, inline)})"
        if node.op != "call_function":
            raise Unavailable(f"cannot write a `{node.op}` node as code")
        target = node.target
        if target in _BINARY and len(args) == 2 and not kwargs:
            left = self._operand(args[0], inline, target, 0)
            right = self._operand(args[1], inline, target, 1)
            return f"{left} {_BINARY[target]} {right}"
        if target in _UNARY and len(args) == 1 and not kwargs:
            return f"{_UNARY[target]}{self._operand(args[0], inline, target, 1)}"
        if target is operator.getitem and len(args) == 2:
            return f"{self._operand(args[0], inline)}[{self._value(args[1], inline, index=True)}]"
        if target is builtins.getattr and len(args) == 2 and isinstance(args[1], str):
            return f"{self._operand(args[0], inline)}.{args[1]}"
        given = _given(target, kwargs, keep=lambda v: (type(v), v) in self.values)
        return f"{self._callable(target)}({self._args(args, given, inline)})"

    def _callable(self, target: Any) -> str:
        ns = self.regen.namespace
        name = getattr(target, "__name__", None)
        if not isinstance(name, str):
            raise Unavailable(f"cannot name the function {target!r} in this file")
        if getattr(builtins, name, None) is target:
            return name
        home = getattr(target, "__module__", None) or ""
        best: tuple[int, str] | None = None
        for alias, value in ns.items():
            if isinstance(value, ModuleType) and getattr(value, name, None) is target:
                rank = 0 if value.__name__ == home else 1 if value is not torch else 2
                if best is None or rank < best[0]:
                    best = (rank, f"{alias}.{name}")
        if best is not None:
            return best[1]
        if ns.get(name) is target:
            return name
        torch_alias = _bound_name(ns, torch)
        if torch_alias is not None and home.startswith("torch"):
            for path in (home, "torch.nn.functional", "torch"):
                module = _import_path(path)
                if module is not None and getattr(module, name, None) is target:
                    parts = path.split(".")
                    if all(not p.startswith("_") for p in parts):
                        return ".".join([torch_alias, *parts[1:], name])
        raise Unavailable(f"`{home}.{name}` is not imported in this file")


# ---------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------


def _output(graph: torch.fx.Graph) -> torch.fx.Node:
    for node in reversed(graph.nodes):
        if node.op == "output":
            return node  # type: ignore[no-any-return]
    raise Unavailable("the graph has no output")


def _same_target(a: torch.fx.Node, b: torch.fx.Node) -> bool:
    if a.op in ("call_module", "get_attr", "call_method", "placeholder"):
        return bool(a.target == b.target)
    return a.target is b.target


class _Same:
    """Argument comparison through counterparts and stand-ins."""

    def __init__(
        self,
        counterparts: dict[torch.fx.Node, torch.fx.Node],
        stands_for: dict[torch.fx.Node, torch.fx.Node],
    ):
        self.counterparts = counterparts
        self.stands_for = stands_for

    def args(self, new: Any, old: Any) -> bool:
        if isinstance(new, torch.fx.Node) and isinstance(old, torch.fx.Node):
            return self.counterparts.get(new) is old or self.stands_for.get(old) is new
        return _same_args(new, old, self.counterparts, self.args)


def _node_pairs(new: Any, old: Any, out: list[tuple[torch.fx.Node, torch.fx.Node]]) -> bool:
    """(new node, original node) at the same places of two argument structures; False when
    the structures differ elsewhere."""
    if isinstance(new, torch.fx.Node) and isinstance(old, torch.fx.Node):
        out.append((new, old))
        return True

    def collect(a: Any, b: Any) -> bool:
        return _node_pairs(a, b, out)

    return _same_args(new, old, {}, collect)


def _same_args(
    new: Any,
    old: Any,
    kept: dict[torch.fx.Node, torch.fx.Node],
    inner: Any = None,
) -> bool:
    """Equal argument structures; nodes compared by ``kept`` (or by ``inner`` for every
    element, which then decides about nodes)."""
    if inner is not None and (isinstance(new, torch.fx.Node) or isinstance(old, torch.fx.Node)):
        if isinstance(new, torch.fx.Node) and isinstance(old, torch.fx.Node):
            return bool(inner(new, old))
        return False
    recurse = inner or (lambda a, b: _same_args(a, b, kept))
    if isinstance(new, torch.fx.Node) or isinstance(old, torch.fx.Node):
        return isinstance(new, torch.fx.Node) and kept.get(new) is old
    if type(new) is not type(old):
        return False
    if isinstance(new, (tuple, list)):
        return len(new) == len(old) and all(recurse(a, b) for a, b in zip(new, old))
    if isinstance(new, dict):
        return new.keys() == old.keys() and all(recurse(new[k], old[k]) for k in new)
    if isinstance(new, slice):
        return recurse((new.start, new.stop, new.step), (old.start, old.stop, old.step))
    if isinstance(new, torch.Tensor):
        return new is old
    try:
        return bool(new == old)
    except Exception:
        return False


def _unpacked(nodes: list[torch.fx.Node], count: int) -> list[torch.fx.Node] | None:
    """The items ``a, b = value`` binds: ``value[0]``, ``value[1]`` of one value."""
    items = [n for n in nodes if n.op == "call_function" and n.target is operator.getitem]
    sources = {id(n.args[0]) for n in items}
    by_index = {n.args[1]: n for n in items if isinstance(n.args[1], int)}
    if len(sources) != 1 or sorted(by_index) != list(range(count)) or len(items) != count:
        return None
    return [by_index[i] for i in range(count)]


def _given(
    target: Any, kwargs: dict[str, Any], keep: Callable[[Any], bool] = lambda v: False
) -> dict[str, Any]:
    """``kwargs`` without those equal to the function's default: ``torch.nn.functional``
    records every argument as given (``inplace=False``); ``keep`` says which to write anyway."""
    try:
        params = inspect.signature(inspect.unwrap(target)).parameters
    except (TypeError, ValueError):
        return kwargs
    out = {}
    for key, value in kwargs.items():
        param = params.get(key)
        default = param.default if param is not None else inspect.Parameter.empty
        if (
            default is not inspect.Parameter.empty
            and not _keep_safely(keep, value)
            and type(default) is type(value)
            and not isinstance(value, torch.fx.Node)
            and _same_args(value, default, {})
        ):
            continue
        out[key] = value
    return out


def _is_guard(node: torch.fx.Node) -> bool:
    """FX's check of an argument traced with a fixed value (``concrete_args``)."""
    return node.op == "call_function" and getattr(node.target, "__name__", "") in (
        "_assert_is_none",
    )


def _keep_safely(keep: Callable[[Any], bool], value: Any) -> bool:
    try:
        return bool(keep(value))
    except TypeError:  # unhashable
        return False


def _literals(stmt: ast.AST) -> list[Any]:
    """The constants written in ``stmt`` (``-1`` as -1)."""
    out: list[Any] = []
    for node in ast.walk(stmt):
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            inner = node.operand
            if isinstance(inner, ast.Constant) and isinstance(inner.value, (int, float)):
                out.append(-inner.value)
        elif isinstance(node, ast.Constant):
            out.append(node.value)
    return out


def _self_reads(stmt: ast.AST, instance: nn.Module) -> list[tuple[str, Any]]:
    """``self.a.b`` reads of ``stmt`` that reach a plain Python value (not a module, tensor or
    method), with that value on ``instance``."""
    out: list[tuple[str, Any]] = []
    for node in ast.walk(stmt):
        chain: list[str] = []
        cur: ast.expr = node  # type: ignore[assignment]
        while isinstance(cur, ast.Attribute):
            chain.append(cur.attr)
            cur = cur.value
        if not (isinstance(cur, ast.Name) and cur.id == "self" and chain):
            continue
        if not isinstance(node, ast.Attribute):
            continue
        chain.reverse()
        value: Any = instance
        for i, attr in enumerate(chain):
            try:
                value = getattr(value, attr)
            except Exception:
                break
            if isinstance(value, torch.Tensor):
                break  # read through a tensor: traced
            if isinstance(value, nn.Module) or callable(value):
                continue
            if i == len(chain) - 1 or not isinstance(value, (bool, int, float, str)):
                out.append(("self." + ".".join(chain[: i + 1]), value))
            break
    # a chain is read once per outermost attribute: drop the shorter prefixes ast.walk met
    seen: dict[str, Any] = {}
    for shown, value in out:
        seen.setdefault(shown, value)
    return list(seen.items())


def _uses(user: torch.fx.Node, node: torch.fx.Node) -> int:
    """How many times ``user`` reads ``node``."""
    count = 0

    def visit(value: Any) -> None:
        nonlocal count
        if value is node:
            count += 1
        elif isinstance(value, (tuple, list)):
            for item in value:
                visit(item)
        elif isinstance(value, dict):
            for item in value.values():
                visit(item)
        elif isinstance(value, slice):
            visit((value.start, value.stop, value.step))

    visit((user.args, user.kwargs))
    return count


def _stored_names(stmt: ast.stmt) -> set[str]:
    return {
        n.id
        for n in ast.walk(stmt)
        if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del))
    }


def _is_operator(node: torch.fx.Node) -> bool:
    return node.op == "call_function" and (node.target in _BINARY or node.target in _UNARY)


def _submodule(gm: nn.Module, target: str) -> nn.Module | None:
    try:
        return gm.get_submodule(target)
    except AttributeError:
        return None


def _attribute(root: nn.Module, target: str) -> Any:
    value: Any = root
    for part in target.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            return None
    return value


def _shapes(module: Any) -> list[tuple[str, tuple[int, ...]]]:
    if not isinstance(module, nn.Module):
        return []
    return [(k, tuple(v.shape)) for k, v in module.state_dict().items()]


def _self_path(root: nn.Module, target: str) -> str:
    out = "self"
    value: Any = root
    for part in target.split("."):
        if isinstance(value, nn.ModuleDict):
            out += f"[{part!r}]"
        elif part.isdigit() and isinstance(value, (nn.Sequential, nn.ModuleList)):
            out += f"[{part}]"
        elif part.isidentifier():
            out += f".{part}"
        else:
            raise Unavailable(f"cannot write the attribute path `{target}` as code")
        value = getattr(value, part, None)
    return out


def _bound_name(namespace: dict[str, Any], value: object) -> str | None:
    preferred = getattr(value, "__name__", "").rpartition(".")[2]
    if namespace.get(preferred) is value:
        return preferred
    for name, bound in namespace.items():
        if bound is value and name.isidentifier() and not name.startswith("__"):
            return name
    return None


def _import_path(path: str) -> ModuleType | None:
    import sys

    module = sys.modules.get(path)
    return module if isinstance(module, ModuleType) else None
