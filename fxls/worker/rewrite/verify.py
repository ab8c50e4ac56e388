"""The one verification every rewrite goes through, in the sandboxed child.

An edit is **safe** only when all of these hold for every class it touches:

1. the edited file parses and runs;
2. each class builds and captures at least as far as before (traced, then partial with shapes,
   then nodes only), with the same output shapes (a size the original fixed to its example
   value, which the edit keeps symbolic, is the same size), no new error and no new
   ``Graph.lint()`` failure (FX301); the diagnostics the fix is for are gone;
3. for a trace fix-it, plain ``torch.fx.symbolic_trace`` no longer fails in the edited text;
4. for an edit of code (not of directives), the edited module computes the same as the
   original: both built on the CPU the way the capture built them (its expression, or the
   recipe that filled in a configuration object, made again in each document) with the same
   seed, the original's state_dict copied into the edited one after BatchNorm statistics and
   affine parameters (and any parameter filled with one constant) are randomized, eval mode
   and no_grad, outputs allclose on at least two random inputs, one with another batch size
   when the inputs have one; integer inputs stay within the smallest embedding. A class built
   inside a parent too large to run is built alone: the parent on the meta device, the class
   on the CPU (:meth:`Rebuild.build_alone`). An edit that changes what dropout does
   (``Proposal.train``) is also compared in training mode, with the same seed before each run.

A difference in outputs, or a module too large to run (``RewriteJob.max_params``), is
**unsafe** with the reason (the counterexample: input sizes and largest difference). An edit
that does not parse, build or capture as far is **unavailable**.

User code runs in this process and may have replaced torch's comparisons (a rules file that
sets ``torch.allclose = lambda *a, **k: True``), so a safe verdict also carries the values it
compared (:class:`~fxls.protocol.model.OutputSample`, read with torch's function overrides off):
the server or CLI compares them again in plain Python (:mod:`fxls.protocol.outputs`) and
refuses the fix when they differ.
"""

from __future__ import annotations

import ast
import contextlib
import itertools
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx
from torch import nn
from torch.utils._pytree import tree_flatten, tree_map

from fxls.protocol.edits import apply_edits, line_starts, offset, position
from fxls.protocol.labels import strategy_label
from fxls.protocol.model import (
    Applicability,
    CaptureJob,
    CaptureResult,
    ClassRequest,
    DimSpec,
    InputSpec,
    ModuleResult,
    OutputSample,
    OutputValues,
    Phase,
    RewriteJob,
    Span,
    TextEdit,
    Value,
)
from fxls.protocol.outputs import ATOL, RTOL, SAMPLED_OUTPUTS, SAMPLED_VALUES, integer, pack
from fxls.protocol.positions import contains, split_lines
from fxls.worker.capture import failures
from fxls.worker.capture.build import construct
from fxls.worker.capture.document import ExecutedDocument
from fxls.worker.capture.pipeline import capture_document
from fxls.worker.capture.reporting import one_line
from fxls.worker.capture.shapes.propagation import ExampleInput, map_named_tensors
from fxls.worker.rewrite.base import Original, Proposal
from fxls.worker.rewrite.text import ordered

PhaseReporter = Callable[[Phase, "str | None"], None]

INT_HIGH = 10
"""Exclusive upper bound of random integer inputs when no embedding bounds them."""

_RANK = {"traced": 3, "partial": 2, "failed": 0, "skipped": 0}
_REACH_TEXT = {3: "traced", 2: "partial, with shapes", 1: "nodes only", 0: "not captured"}


@dataclass
class Verdict:
    applicability: Applicability
    reason: str = ""
    checks: list[str] = field(default_factory=list)
    samples: list[OutputSample] = field(default_factory=list)
    """The outputs compared, for the server to compare again (see the module docstring)."""

    @staticmethod
    def unavailable(reason: str, checks: list[str] | None = None) -> Verdict:
        return Verdict("unavailable", reason, list(checks or []))


@dataclass
class Change:
    """Edits to verify together, and what they require."""

    edits: list[TextEdit]
    classes: list[str]
    """The classes of the fixes (every class of the file is captured again and compared)."""
    numeric: list[str] = field(default_factory=list)
    """Classes whose code changed: they must compute the same on real tensors."""
    traces_past: list[str] = field(default_factory=list)
    """Classes of trace fix-its: plain torch.fx must no longer fail at the edit."""
    train: list[str] = field(default_factory=list)
    """Classes that must compute the same in training mode too (dropout on, same seed)."""
    gone: list[tuple[str, str, Span]] = field(default_factory=list)
    requests: dict[str, Callable[[ClassRequest], None]] = field(default_factory=dict)
    """Per class: how the edit changes its capture request (directives added)."""


def change_of(fix_cls: str, proposal: Proposal, edits: list[TextEdit] | None = None) -> Change:
    return Change(
        edits=list(edits if edits is not None else proposal.edits),
        classes=[fix_cls],
        numeric=[fix_cls] if proposal.check == "numeric" else [],
        traces_past=[fix_cls] if proposal.traces_past else [],
        train=[fix_cls] if proposal.train else [],
        gone=list(proposal.gone),
        requests=dict(proposal.requests),
    )


def merge(changes: Sequence[Change]) -> Change:
    out = Change([], [])
    for change in changes:
        out.edits = ordered([*out.edits, *change.edits])
        out.classes.extend(c for c in change.classes if c not in out.classes)
        out.numeric.extend(c for c in change.numeric if c not in out.numeric)
        out.traces_past.extend(c for c in change.traces_past if c not in out.traces_past)
        out.train.extend(c for c in change.train if c not in out.train)
        out.gone.extend(change.gone)
        for cls, update in change.requests.items():
            previous = out.requests.get(cls)
            if previous is None:
                out.requests[cls] = update
            else:
                out.requests[cls] = _chain(previous, update)
    return out


def _chain(
    first: Callable[[ClassRequest], None], second: Callable[[ClassRequest], None]
) -> Callable[[ClassRequest], None]:
    def both(req: ClassRequest) -> None:
        first(req)
        second(req)

    return both


# ---------------------------------------------------------------------------------------
# Lines through edits
# ---------------------------------------------------------------------------------------


class LineShift:
    """Where the start of a line of the original text is in the edited text."""

    def __init__(self, edits: Sequence[TextEdit]):
        self.moves: list[tuple[tuple[int, int], int, int]] = []
        """(end of the edit, its first line, lines it adds minus lines it removes)."""
        for edit in edits:
            s = edit.span
            added = len(split_lines(edit.text)) - 1
            self.moves.append(((s.end_line, s.end_col), s.line, added - (s.end_line - s.line)))

    def line(self, line: int) -> int:
        out = line
        for end, first, delta in self.moves:
            if end <= (line, 0):
                out += delta
            elif first < line:
                out -= line - first  # inside the edit: its first line
        return out


def edited_regions(source: str, edits: Sequence[TextEdit]) -> list[Span]:
    """The spans the edits' new text occupies in the edited text."""
    ordered = sorted(edits, key=lambda e: (e.span.line, e.span.col))
    new_text = apply_edits(source, ordered)
    starts_old = line_starts(source)
    starts_new = line_starts(new_text)
    regions = []
    shift = 0
    for edit in ordered:
        s = edit.span
        begin = offset(source, starts_old, s.line, s.col)
        end = offset(source, starts_old, s.end_line, s.end_col)
        new_begin = begin + shift
        new_end = new_begin + len(edit.text)
        shift += len(edit.text) - (end - begin)
        line, col = position(starts_new, new_begin)
        end_line, end_col = position(starts_new, new_end)
        regions.append(Span(line, col, end_line, end_col))
    return regions


# ---------------------------------------------------------------------------------------
# The verification
# ---------------------------------------------------------------------------------------


def verify(
    original: Original,
    change: Change,
    rewrite: RewriteJob,
    report: PhaseReporter,
) -> Verdict:
    """Verify ``change`` against ``original`` (see the module docstring)."""
    source = original.source
    try:
        edited = apply_edits(source, change.edits)
    except ValueError as exc:
        return Verdict.unavailable(f"the edits do not combine: {exc}")
    try:
        ast.parse(edited)
    except SyntaxError as exc:
        return Verdict.unavailable(f"the edited file does not parse: {exc.msg} (line {exc.lineno})")
    checks = ["the edited file parses"]
    shift = LineShift(change.edits)
    job = _edited_job(original, edited, change, shift)
    doc, result = capture_document(job, report)
    if result.error is not None:
        return Verdict.unavailable(
            f"the edited file does not run: {result.error.type}: {result.error.message}", checks
        )
    for before in original.result.modules:
        if before.status == "skipped":
            continue
        after = next((m for m in result.modules if m.name == before.name), None)
        sizes = example_sizes(original, before.name)
        problem = _compare_captures(before, after, change, shift, sizes)
        if problem is not None:
            return Verdict.unavailable(problem, checks)
    checks.append(_capture_check(change.classes, result))
    for name in change.traces_past:
        where = [
            Span(shift.line(s.line), s.col, shift.line(s.end_line), s.end_col)
            for _, cls, s in change.gone
            if cls == name
        ]
        problem, done = _plain_trace(original, doc, name, source, change.edits, where)
        if problem is not None:
            return Verdict.unavailable(problem, checks)
        checks.append(done)
    if not rewrite.verify:
        return Verdict("safe", "", checks)
    samples: list[OutputSample] = []
    for name in change.numeric:
        verdict = compare_outputs(original, doc, name, rewrite, train=name in change.train)
        checks.extend(verdict.checks)
        samples.extend(verdict.samples)
        if verdict.applicability != "safe":
            return Verdict(verdict.applicability, verdict.reason, checks)
    return Verdict("safe", "", checks, samples)


def _edited_job(original: Original, edited: str, change: Change, shift: LineShift) -> CaptureJob:
    job = original.doc.job
    classes = []
    for req in job.classes:
        new = ClassRequest(
            name=req.name,
            line=shift.line(req.line),
            init=req.init,
            init_line=shift.line(req.init_line) if req.init_line else None,
            inputs=[_shifted_spec(s, shift) for s in req.inputs],
            leaf=list(req.leaf),
            skip=req.skip,
            call_sites=list(req.call_sites),
        )
        update = change.requests.get(req.name)
        if update is not None:
            update(new)
        classes.append(new)
    return CaptureJob(
        path=job.path,
        source=edited,
        classes=classes,
        sys_path=list(job.sys_path),
        module=job.module,
        module_is_package=job.module_is_package,
        meta_init=job.meta_init,
        symbolic=job.symbolic,
    )


def _shifted_spec(spec: InputSpec, shift: LineShift) -> InputSpec:
    return InputSpec(
        name=spec.name,
        kind=spec.kind,
        dims=[DimSpec(d.name, d.size) for d in spec.dims],
        dtype=spec.dtype,
        expr=spec.expr,
        source=spec.source,
        line=shift.line(spec.line) if spec.line else None,
    )


def _reach(mod: ModuleResult) -> int:
    if mod.status == "partial":
        return 2 if mod.outputs else 1
    if mod.status == "failed" and mod.nodes:
        return 1
    return _RANK.get(mod.status, 0)


def example_sizes(original: Original, name: str) -> dict[str, int]:
    """The example size of each named dimension of the inputs class ``name`` was captured
    with (``{"B": 2, "T": 8}``)."""
    capture = original.doc.captures.get(name)
    feeds = getattr(capture, "feeds", None) or []
    return {dim: size for feed in feeds for dim, size in feed.dims if dim is not None}


def same_shapes(before: ModuleResult, after: ModuleResult, sizes: dict[str, int]) -> bool:
    """Whether the outputs of two captures of a class have the same kinds, dtypes and shapes.

    A size the original fixed to a number where the edit keeps it symbolic is the same shape
    when the edit's size, at the example sizes of the inputs (``sizes``), is that number: the
    original ran ``forward`` on fake tensors and something there (``len(x)``, ``int(n)``,
    a branch on a size) fixed the dimension to its example value, which the edit no longer
    does. The reverse (the edit fixes a size the original kept) is a change.
    """
    if len(before.outputs) != len(after.outputs):
        return False
    for old, new in zip(before.outputs, after.outputs):
        if (old.kind, old.dtype) != (new.kind, new.dtype):
            return False
        old_shape, new_shape = old.shape or [], new.shape or []
        if len(old_shape) != len(new_shape):
            return False
        for a, b in zip(old_shape, new_shape):
            if str(a) == str(b):
                continue
            if not (isinstance(a, int) and isinstance(b, str) and size_value(b, sizes) == a):
                return False
    return True


def _shapes_text(mod: ModuleResult) -> str:
    shapes = [f"[{', '.join(map(str, v.shape or []))}]" for v in mod.outputs if v.shape]
    return ", ".join(shapes[:4]) + (", ..." if len(shapes) > 4 else "")


_SIZE_OPS: dict[type, Callable[[int, int], int]] = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.FloorDiv: lambda a, b: a // b,
    ast.Mod: lambda a, b: a % b,
}
_SIZE_CALLS: dict[str, Callable[[list[int]], int]] = {
    "Max": max,
    "Min": min,
    "max": max,
    "min": min,
}


def size_value(text: str, sizes: dict[str, int]) -> int | None:
    """The value of a symbolic size as fxls prints it (``T - 1``, ``2*B``, ``(T//2)``,
    ``Max(1, T)``) at the example ``sizes``; None when it holds anything else."""
    if len(text) > 200:
        return None
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None

    def value(node: ast.AST, depth: int) -> int:
        if depth > 30:
            raise ValueError("too deep")
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.Name) and node.id in sizes:
            return sizes[node.id]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -value(node.operand, depth + 1)
        if isinstance(node, ast.BinOp) and type(node.op) in _SIZE_OPS:
            return _SIZE_OPS[type(node.op)](
                value(node.left, depth + 1), value(node.right, depth + 1)
            )
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in _SIZE_CALLS
            and node.args
            and not node.keywords
        ):
            return _SIZE_CALLS[node.func.id]([value(a, depth + 1) for a in node.args])
        raise ValueError("not a size")

    try:
        return value(tree.body, 0)
    except (ValueError, ZeroDivisionError):
        return None


def _compare_captures(
    before: ModuleResult,
    after: ModuleResult | None,
    change: Change,
    shift: LineShift,
    sizes: dict[str, int],
) -> str | None:
    """Why the edited capture of a class is worse, or None (``sizes``: the example sizes of
    the class's named input dimensions)."""
    if after is None or (after.build is None and before.build is not None):
        return f"`{before.name}` no longer builds" + (
            f": {after.error.type}: {after.error.message}" if after and after.error else ""
        )
    if _reach(after) < _reach(before):
        return (
            f"`{before.name}` captures less far than before ({_REACH_TEXT[_reach(after)]} "
            f"instead of {_REACH_TEXT[_reach(before)]})"
        )
    lint_before = {d.message for d in before.diagnostics if d.code == "FX301"}
    for d in after.diagnostics:
        if d.code == "FX301" and d.message not in lint_before:
            return f"the graph of `{before.name}` fails `Graph.lint()`: {d.message}"
    errors_before = {d.code for d in before.diagnostics if d.severity == "error"}
    for d in after.diagnostics:
        if d.severity == "error" and d.code not in errors_before:
            return f"`{before.name}` now reports {d.code}: {d.message}"
    same_inputs = _input_values(before) == _input_values(after)
    same_build = _built_as(before) == _built_as(after) and same_inputs
    own = before.name in change.classes
    if (
        (own or same_build)
        and before.outputs
        and after.outputs
        and not same_shapes(before, after, sizes)
    ):
        return (
            f"the output shapes of `{before.name}` change: {_shapes_text(before)} before, "
            f"{_shapes_text(after)} after the edit"
        )
    for code, cls, span in change.gone:
        if cls != before.name:
            continue
        line = shift.line(span.line)
        for d in after.diagnostics:
            if d.code == code and (d.span.line, d.span.col) == (line, span.col):
                return f"`{before.name}` still reports {code} at line {line}: {d.message}"
    return None


def _built_as(mod: ModuleResult) -> tuple[str | None, str | None]:
    how = mod.constructed
    return (how.source, how.text) if how is not None else (None, None)


def _input_values(mod: ModuleResult) -> list[Value]:
    """What the inputs were (not their names or where they came from)."""
    return [given.value for given in mod.inputs]


def _capture_check(names: list[str], result: CaptureResult) -> str:
    states = []
    for mod in result.modules:
        if mod.name in names:
            states.append(f"`{mod.name}` {mod.status} ({strategy_label(mod.strategy)})")
    return "captures as far with the same shapes: " + ", ".join(states)


# ---------------------------------------------------------------------------------------
# Plain torch.fx
# ---------------------------------------------------------------------------------------


def _plain_trace(
    original: Original,
    doc: ExecutedDocument,
    name: str,
    source: str,
    edits: list[TextEdit],
    failed_at: list[Span],
) -> tuple[str | None, str]:
    """Plain ``torch.fx.symbolic_trace`` of the edited class must not fail in the edit, nor
    where the original failed (``failed_at``, on the edited text)."""
    rebuild = rebuild_of(original, name)
    if isinstance(rebuild, str):
        return (
            None,
            f"`{name}`: cannot be rebuilt to trace with plain torch.fx (skipped: {rebuild})",
        )
    try:
        module = rebuild.build(doc, "meta")
    except Exception as exc:
        return f"the edited `{name}` does not build: {one_line(exc)}", ""
    try:
        with _quiet():
            module.eval()  # not its value: a ``train`` override may return None
            torch.fx.symbolic_trace(module)
    except Exception as exc:
        spans, _, _ = failures.locate(exc, doc.path, doc.source)
        regions = edited_regions(source, edits)
        if spans and any(contains(r, spans[0]) or contains(spans[0], r) for r in regions):
            return f"torch.fx still fails at the edit: {one_line(exc)}", ""
        if spans and any((s.line, s.col) == (spans[0].line, spans[0].col) for s in failed_at):
            return f"torch.fx still fails where it did: {one_line(exc)}", ""
        where = f" at line {spans[0].line}" if spans else ""
        return None, f"plain torch.fx traces past the edit (it fails later{where}: {one_line(exc)})"
    return None, f"plain `torch.fx.symbolic_trace` of `{name}` succeeds"


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


# ---------------------------------------------------------------------------------------
# Building a class again
# ---------------------------------------------------------------------------------------


class CannotRebuild(Exception):
    """A class cannot be built again the way its capture built it; the message says why."""


@dataclass
class Rebuild:
    """How the verification builds class ``name`` again, in the original and in the edited
    document: the way its capture built it, or inside the parent class that built it.

    ``root`` is the class built (``name`` itself, or the parent whose instance holds it at
    ``path``); each document builds it by its own constructor call, so the edited document
    builds its edited class.
    """

    original: Original
    name: str
    root: str
    path: str
    """Where the instance of ``name`` is inside ``root`` (``""``: it is ``root``)."""
    params: int | None
    """Parameters of ``name``."""
    root_params: int | None
    """Parameters of ``root``."""

    def make_root(self, doc: ExecutedDocument) -> Callable[[], Any]:
        """What builds ``root`` in ``doc``: the expression its capture recorded, else the
        recipe of ``fxls.worker.capture.build.construct`` that built it (a configuration
        object fxls filled in, which no expression writes down), made again in ``doc``."""
        how = self.original.module(self.root).constructed
        if how is None:
            raise CannotRebuild(f"fxls does not know how `{self.root}` was built")
        expr = how.expr
        if expr is not None:
            return lambda: eval(expr, doc.namespace)  # the user's own constructor, sandboxed
        cls = doc.namespace.get(self.root)
        request = next((r for r in doc.job.classes if r.name == self.root), None)
        if not isinstance(cls, type) or request is None:
            raise CannotRebuild(f"`{self.root}` is not a class of the edited file")
        for index, recipe in enumerate(construct.recipes(doc, cls, request.call_sites)):
            if index >= 2 * construct.MAX_RECIPES:
                break
            if (recipe.source, recipe.text) == (how.source, how.text):
                return recipe.make
        raise CannotRebuild(f"fxls cannot build `{how.text}` again")

    def build(self, doc: ExecutedDocument, device: str) -> nn.Module:
        """The instance of ``name`` in ``doc``, everything built on ``device``."""
        make = self.make_root(doc)
        with torch.device(device):
            root = make()
        return _part(root, self.path, self.root)

    def build_alone(self, doc: ExecutedDocument) -> nn.Module:
        """The instance of ``name`` in ``doc`` on the CPU, its parent ``root`` on the meta
        device: only the class whose ``forward`` changed gets real tensors. ``name``'s
        ``__init__`` runs on the CPU for the one instance at ``path`` (found by a first build
        on the meta device, in construction order)."""
        cls = doc.namespace.get(self.name)
        if not isinstance(cls, type):
            raise CannotRebuild(f"`{self.name}` is not a class of the edited file")
        make = self.make_root(doc)
        made: list[object] = []

        def note(module: object) -> bool:
            made.append(module)
            return False

        with torch.device("meta"), _init_hook(cls, note):
            target = _part(make(), self.path, self.root)
        index = next((i for i, m in enumerate(made) if m is target), None)
        if index is None:
            raise CannotRebuild(f"`{self.root}` does not build `{self.name}` itself")
        count = itertools.count()
        with torch.device("meta"), _init_hook(cls, lambda module: next(count) == index):
            module = _part(make(), self.path, self.root)
        on_meta = [n for n, t in itertools.chain(module.named_parameters(),
                   module.named_buffers()) if t.device.type != "cpu"]  # fmt: skip
        if on_meta:
            raise CannotRebuild(
                f"`{self.name}` holds tensors `{self.root}` made for it (`{on_meta[0]}`)"
            )
        return module


def _part(root: Any, path: str, root_name: str) -> nn.Module:
    if not isinstance(root, nn.Module):
        raise TypeError(f"building `{root_name}` gives a {type(root).__name__}, not a module")
    return root.get_submodule(path) if path else root


@contextlib.contextmanager
def _init_hook(cls: type, on_cpu: Callable[[object], bool]) -> Iterator[None]:
    """While the block runs, each ``cls(...)`` calls ``on_cpu(instance)`` and runs its
    ``__init__`` on the CPU when that returns True."""
    had = "__init__" in cls.__dict__
    init = cls.__init__  # type: ignore[misc]

    def hooked(self: Any, *args: Any, **kwargs: Any) -> None:
        if on_cpu(self):
            with torch.device("cpu"):
                init(self, *args, **kwargs)
        else:
            init(self, *args, **kwargs)

    cls.__init__ = hooked  # type: ignore[misc]
    try:
        yield
    finally:
        if had:
            cls.__init__ = init  # type: ignore[misc]
        else:
            del cls.__init__  # type: ignore[misc]


def rebuild_of(original: Original, name: str) -> Rebuild | str:
    """How to build ``name`` again (see :class:`Rebuild`), or why fxls cannot."""
    mod = original.module(name)
    current, path, seen = mod, "", {name}
    while current.constructed is not None and current.constructed.source == "parent":
        how = current.constructed
        record = original.doc.records.get(current.name) or original.doc.built_by_parents.get(
            current.name
        )
        if record is None or getattr(record, "text", None) != how.text:
            return f"fxls does not know where `{current.name}` is inside its parent"
        path = f"{record.path}.{path}" if path else str(record.path)
        parent = str(record.parent)
        if parent in seen:
            return f"`{parent}` is built inside itself"
        seen.add(parent)
        try:
            current = original.module(parent)
        except Exception:
            return f"`{parent}` was not captured"
    if current.constructed is None:
        return f"fxls does not know how `{current.name}` was built"
    return Rebuild(original, name, current.name, path, mod.params, current.params)


def _count(params: int | None) -> str:
    return f"{params:,} parameters" if params is not None else "size unknown"


# ---------------------------------------------------------------------------------------
# Real tensors
# ---------------------------------------------------------------------------------------

TRAIN_DROPOUT = 0.25
"""Probability given, in the comparison in training mode, to every dropout module whose own is
0 (both versions alike), so that the comparison sees dropout."""


def compare_outputs(
    original: Original,
    edited: ExecutedDocument,
    name: str,
    rewrite: RewriteJob,
    *,
    train: bool = False,
) -> Verdict:
    """Build both classes on the CPU and compare their outputs on random inputs, in eval mode
    and, with ``train``, in training mode too (dropout on, the same seed before each run)."""
    rebuild = rebuild_of(original, name)
    if isinstance(rebuild, str):
        return Verdict(
            "unsafe", f"unsafe: `{name}` cannot be rebuilt to compare its outputs: {rebuild}"
        )
    whole = rebuild.root_params is not None and rebuild.root_params <= rewrite.max_params
    alone = (
        not whole
        and rebuild.path != ""
        and rebuild.params is not None
        and rebuild.params <= rewrite.max_params
    )
    if not whole and not alone:
        inside = f" (built inside `{rebuild.root}`)" if rebuild.root != name else ""
        return Verdict(
            "unsafe",
            f"unsafe: too large to verify{inside}: {_count(rebuild.root_params)}; fxls runs "
            f"modules up to {rewrite.max_params:,} parameters on real tensors",
        )
    capture = original.capture(name)
    feeds = capture.feeds
    if feeds is None:
        return Verdict("unsafe", f"unsafe: the inputs of `{name}` are unknown")

    def build(doc: ExecutedDocument) -> nn.Module:
        torch.manual_seed(rewrite.seed)
        return rebuild.build_alone(doc) if alone else rebuild.build(doc, "cpu")

    try:
        before = build(original.doc)
    except Exception as exc:
        if alone:
            return Verdict(
                "unsafe",
                f"unsafe: too large to verify (built inside `{rebuild.root}`: "
                f"{_count(rebuild.root_params)}), and `{name}` cannot be built on its own: "
                f"{one_line(exc)}",
            )
        return Verdict("unsafe", f"unsafe: `{name}` could not be built on the CPU: {one_line(exc)}")
    try:
        after = build(edited)
    except Exception as exc:
        return Verdict.unavailable(f"the edited `{name}` does not build: {one_line(exc)}")
    with torch.no_grad():
        randomize(before, rewrite.seed)
        try:
            after.load_state_dict(before.state_dict(), strict=True)
        except Exception as exc:
            return Verdict.unavailable(f"the edited `{name}` has other parameters: {one_line(exc)}")
    before.eval()
    after.eval()
    high = _int_high(before)
    compared: list[str] = []
    samples: list[OutputSample] = []
    runs: list[list[Any]] = []
    for variant, batch in _variants(feeds):
        args = make_inputs(feeds, batch, rewrite.seed + variant, high)
        shown = _sizes(feeds, args)
        outcome = _run_both(before, after, args, rewrite.seed)
        if outcome is None:
            continue  # the original does not run on these inputs: not a counterexample
        want, got = outcome
        if isinstance(got, BaseException):
            return Verdict(
                "unsafe", f"unsafe: the edited `{name}` raises on {shown}: {one_line(got)}"
            )
        difference = differ(want, got)
        if difference is not None:
            return Verdict("unsafe", f"unsafe: outputs differ on {shown}: {difference}")
        samples.extend(output_samples(want, got, shown))
        compared.append(shown)
        runs.append(args)
        if len(compared) >= 2:
            break
    if len(compared) < 2:
        return Verdict(
            "unsafe",
            f"unsafe: `{name}` ran on {len(compared)} random input(s) only; "
            "fxls compares at least two",
        )
    where = (
        f" (`{name}` alone on the CPU: `{rebuild.root}`, which builds it, has "
        f"{_count(rebuild.root_params)} and was built on the meta device)"
        if alone
        else ""
    )
    checks = [
        f"`{name}` computes the same (eval, BatchNorm statistics randomized) on "
        + " and ".join(compared)
        + where
    ]
    if train:
        verdict = _compare_training(before, after, runs, compared, name, rewrite.seed)
        if verdict.applicability != "safe":
            return verdict
        checks.extend(verdict.checks)
        samples.extend(verdict.samples)
    return Verdict("safe", checks=checks, samples=samples)


def _run_both(
    before: nn.Module, after: nn.Module, args: list[Any], seed: int
) -> tuple[Any, Any] | None:
    """Both modules on ``args``, each after seeding with ``seed``: (want, got), got being the
    exception when the edited one raises; None when the original raises."""
    with torch.no_grad():
        try:
            torch.manual_seed(seed)
            want = before(*_cloned(args))
        except Exception:
            return None
        try:
            torch.manual_seed(seed)
            got = after(*_cloned(args))
        except Exception as exc:
            return want, exc
    return want, got


def _compare_training(
    before: nn.Module,
    after: nn.Module,
    runs: list[list[Any]],
    shown: list[str],
    name: str,
    seed: int,
) -> Verdict:
    """Both modules in training mode on the inputs compared in eval: the same seed before each
    run, so that dropout draws the same masks in both when the edit applies the same dropout
    (``F.scaled_dot_product_attention`` on the CPU draws its ``dropout_p`` mask as
    ``F.dropout`` does on the attention weights). Dropout modules whose probability is 0 get
    :data:`TRAIN_DROPOUT` in both versions, so that a missing or wrong ``dropout_p`` shows."""
    raised = 0.0
    for module in (before, after):
        for sub in module.modules():
            if isinstance(sub, nn.modules.dropout._DropoutNd) and sub.p == 0:
                sub.p = TRAIN_DROPOUT
                raised = TRAIN_DROPOUT
    before.train()
    after.train()
    samples: list[OutputSample] = []
    for args, sizes in zip(runs, shown):
        outcome = _run_both(before, after, args, seed)
        if outcome is None:
            continue
        want, got = outcome
        if isinstance(got, BaseException):
            return Verdict(
                "unsafe",
                f"unsafe: the edited `{name}` raises in training mode on {sizes}: {one_line(got)}",
            )
        difference = differ(want, got)
        if difference is not None:
            return Verdict(
                "unsafe",
                f"unsafe: outputs differ in training mode (dropout on, same seed) on {sizes}: "
                f"{difference}",
            )
        samples.extend(output_samples(want, got, f"{sizes} in training mode"))
    dropout = f", dropout modules of p 0 set to {raised}" if raised else ""
    return Verdict(
        "safe",
        checks=[
            f"`{name}` computes the same in training mode (dropout on, the same seed{dropout}) "
            f"on {' and '.join(shown)}"
        ],
        samples=samples,
    )


def randomize(module: nn.Module, seed: int) -> None:
    """BatchNorm statistics and affine parameters, and parameters filled with one constant,
    get random values (a fresh BatchNorm in eval mode is nearly the identity)."""
    gen = torch.Generator().manual_seed(seed + 1)
    for sub in module.modules():
        if isinstance(sub, nn.modules.batchnorm._NormBase):
            if sub.running_mean is not None and sub.running_mean.is_floating_point():
                sub.running_mean.copy_(torch.randn(sub.running_mean.shape, generator=gen) * 0.5)
            if sub.running_var is not None and sub.running_var.is_floating_point():
                sub.running_var.copy_(torch.rand(sub.running_var.shape, generator=gen) + 0.5)
            if sub.weight is not None:
                sub.weight.copy_(1 + torch.randn(sub.weight.shape, generator=gen) * 0.2)
            if sub.bias is not None:
                sub.bias.copy_(torch.randn(sub.bias.shape, generator=gen) * 0.2)
    for param in module.parameters():
        if not param.is_floating_point() or param.numel() < 2:
            continue
        flat = param.detach().reshape(-1)
        if bool((flat == flat[0]).all()):
            param.add_(torch.randn(param.shape, generator=gen).to(param.dtype) * 0.1)


def _int_high(module: nn.Module) -> int:
    sizes = [m.num_embeddings for m in module.modules() if isinstance(m, nn.Embedding)]
    return min(sizes) if sizes else INT_HIGH


def _variants(feeds: list[ExampleInput]) -> list[tuple[int, int | None]]:
    """(seed offset, batch size): the captured sizes, one batch larger, another draw."""
    first = next((f for f in feeds if f.kind == "tensor" and f.dims), None)
    out: list[tuple[int, int | None]] = [(0, None)]
    if first is not None:
        out.append((1, first.dims[0][1] + 1))
    out.append((2, None))
    return out


def make_inputs(feeds: list[ExampleInput], batch: int | None, seed: int, high: int) -> list[Any]:
    """Random CPU tensors for ``feeds``; ``batch`` replaces the batch dimension everywhere."""
    gen = torch.Generator().manual_seed(seed)
    first = next((f for f in feeds if f.kind == "tensor" and f.dims), None)
    batch_name, batch_size = first.dims[0] if first is not None else (None, None)

    def sized(dims: list[tuple[str | None, int]]) -> list[int]:
        shape = []
        for index, (name, size) in enumerate(dims):
            same = (name is not None and name == batch_name) or (
                batch_name is None and index == 0 and size == batch_size
            )
            shape.append(batch if batch is not None and same else size)
        return shape

    out: list[Any] = []
    for feed in feeds:
        if feed.kind != "tensor":
            # tensors inside a value with named dimensions follow the batch too
            value = map_named_tensors(
                feed.value,
                feed.inner_dims,
                lambda dims, dtype: _random(sized(dims), dtype, gen, high),
                lambda t: _random(list(t.shape), t.dtype, gen, high),
            )
            out.append(value)
            continue
        out.append(_random(sized(feed.dims), feed.dtype, gen, high))
    return out


def _random(shape: list[int], dtype: torch.dtype, gen: torch.Generator, high: int) -> Any:
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=gen).bool()
    if dtype.is_floating_point:
        return torch.randn(shape, generator=gen).to(dtype)
    if dtype.is_complex:
        return torch.randn(shape, generator=gen, dtype=dtype)
    return torch.randint(0, max(high, 1), shape, generator=gen).to(dtype)


def _cloned(args: list[Any]) -> list[Any]:
    return [tree_map(lambda v: v.clone() if isinstance(v, torch.Tensor) else v, a) for a in args]


def _sizes(feeds: list[ExampleInput], args: list[Any]) -> str:
    parts = []
    for feed, arg in zip(feeds, args):
        if isinstance(arg, torch.Tensor):
            parts.append(f"{feed.name} [{', '.join(str(s) for s in arg.shape)}]")
    return ", ".join(parts) or "the example inputs"


def output_samples(want: Any, got: Any, inputs: str) -> list[OutputSample]:
    """The tensors among the first SAMPLED_OUTPUTS outputs, before and after, as samples the
    server compares again (other outputs are compared here only)."""
    flat_want, _ = tree_flatten(want)
    flat_got, _ = tree_flatten(got)
    out: list[OutputSample] = []
    for index, (a, b) in enumerate(zip(flat_want[:SAMPLED_OUTPUTS], flat_got)):
        if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
            where = f"output {index}" if len(flat_want) > 1 else "the output"
            with contextlib.suppress(Exception):  # sparse, quantized...: compared here only
                out.append(OutputSample(where, inputs, _values(a), _values(b)))
    return out


def _values(tensor: torch.Tensor) -> OutputValues:
    """Up to SAMPLED_VALUES values of ``tensor`` at evenly spaced positions, read with
    ``__torch_function__`` overrides off (a tensor subclass cannot choose what is sent)."""
    with torch._C.DisableTorchFunctionSubclass():
        dtype, shape = str(tensor.dtype), [int(size) for size in tensor.shape]
        flat = tensor.detach().to("cpu").reshape(-1)
        if flat.numel() > SAMPLED_VALUES:
            where = torch.linspace(0, flat.numel() - 1, SAMPLED_VALUES, dtype=torch.float64)
            flat = flat[where.long()]
        if flat.is_complex():
            flat = torch.view_as_real(flat.to(torch.complex128)).reshape(-1)
        numbers = flat.to(torch.int64 if integer(dtype) else torch.float64).tolist()
    return OutputValues(dtype, shape, pack(numbers, dtype))


def differ(want: Any, got: Any) -> str | None:
    """How two outputs differ (None when they are equal within tolerance)."""
    flat_want, spec_want = tree_flatten(want)
    flat_got, spec_got = tree_flatten(got)
    if spec_want != spec_got:
        return f"the output structure changed ({spec_want} vs {spec_got})"
    for index, (a, b) in enumerate(zip(flat_want, flat_got)):
        where = f"output {index}" if len(flat_want) > 1 else "the output"
        if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
            if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
                return f"{where} is no longer a tensor"
            if a.shape != b.shape:
                return f"{where} has shape {list(b.shape)} instead of {list(a.shape)}"
            if a.dtype != b.dtype:
                return f"{where} is {b.dtype} instead of {a.dtype}"
            if a.is_floating_point() or a.is_complex():
                if not torch.allclose(a, b, rtol=RTOL, atol=ATOL, equal_nan=True):
                    delta = (a - b).abs()
                    worst = float(delta[~torch.isnan(delta)].max()) if delta.numel() else 0.0
                    return f"{where}: max |Δ| = {worst:.3g}"
            elif not torch.equal(a, b):
                return f"{where} has other values"
            continue
        try:
            same = bool(a == b) or (
                isinstance(a, float) and isinstance(b, float) and math.isclose(a, b)
            )
        except Exception:
            same = False
        if not same:
            return f"{where} is {b!r} instead of {a!r}"
    return None
