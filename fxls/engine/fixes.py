"""Fixes: which ones an analysis offers, how they are computed, and the edits they make.

Shared by the language server (code actions) and ``fxls check --fix``; no LSP types, no torch.

- :func:`candidates` lists the fixes an analysis offers, from its diagnostics (FX302 unused
  statements, FX405/FX408 assumptions to pin, FX101/FX107/FX199 leaf and flag directives,
  ``torch.fx.wrap`` of a helper, FX101 ``assert``, FX102 ``len``, FX103 unpacked sizes, FX105 ``torch.zeros``,
  FX360 a user rule that matches),
  fast and without the worker;
  :func:`refactors_at` the refactors at a position (name every argument of a call, use
  ``F.scaled_dot_product_attention`` for a hand-written attention, apply a user pass to the
  source on its ``def`` line).
- :func:`compute` sends them to the worker as one ``rewrite`` job, which computes each edit and
  verifies it in the sandbox (``fxls.worker.rewrite.run``); the outputs the job found
  equal are compared again here (:func:`recheck`), where user code cannot reach.
- :func:`minimal_edits` turns an edited text back into the smallest edits (difflib), so that
  everything else in the file stays byte for byte.
"""

from __future__ import annotations

import ast
import asyncio
import difflib
import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from fxls.analysis import ClassInfo, parse
from fxls.engine.analyze import (
    EngineOptions,
    FileAnalysis,
    JobRunner,
    capture_job,
    class_requests,
    percent_cells,
)
from fxls.protocol import outputs
from fxls.protocol.edits import apply_edits, common_ends, line_starts, span_of
from fxls.protocol.fixkinds import FIX_ALL_KINDS, PER_CLASS_KINDS, length_as
from fxls.protocol.model import (
    Diagnostic,
    FixKind,
    FixOutcome,
    FixRequest,
    InputSpec,
    Limits,
    ModuleResult,
    NodeInfo,
    RewriteJob,
    RewriteResult,
    Span,
    TextEdit,
)
from fxls.protocol.positions import SourceText, contains

Category = Literal["quickfix", "refactor"]

REWRITE_MIN_TIMEOUT_S = 30.0
"""A rewrite job captures the file, then captures and runs each edited version: it gets at
least this long, and three times the capture limit."""


@dataclass
class Candidate:
    """A fix an analysis offers, before the worker has computed or verified it."""

    id: str
    kind: FixKind
    cls: str
    span: Span
    """Where it applies, in the analysed text."""
    title: str
    category: Category = "quickfix"
    code: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    diagnostic: Diagnostic | None = None

    @property
    def fix_all(self) -> bool:
        return self.kind in FIX_ALL_KINDS

    def request(self, span: Span | None = None) -> FixRequest:
        """The worker request; ``span`` when the text moved since the analysis."""
        return FixRequest(
            id=self.id,
            kind=self.kind,
            cls=self.cls,
            span=span or self.span,
            code=self.code,
            params=dict(self.params),
        )


# ---------------------------------------------------------------------------------------
# What an analysis offers
# ---------------------------------------------------------------------------------------


@dataclass
class _Index:
    """What the listing needs from a text's AST, by span."""

    src: SourceText
    statements: list[tuple[Span, ast.stmt]]
    calls: dict[tuple[int, int, int, int], ast.Call]
    assert_tests: set[tuple[int, int, int, int]]


def _key(span: Span) -> tuple[int, int, int, int]:
    return (span.line, span.col, span.end_line, span.end_col)


@functools.lru_cache(maxsize=8)
def _index(text: str) -> _Index | None:
    """The AST of ``text``, indexed once (the listing runs on every cursor move)."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    src = SourceText(text)
    index = _Index(src, [], {}, set())
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt):
            index.statements.append((src.node_span(node), node))
        if isinstance(node, ast.Call):
            index.calls.setdefault(_key(src.node_span(node)), node)
        if isinstance(node, ast.Assert):
            index.assert_tests.add(_key(src.node_span(node.test)))
    return index


def _short(text: str, limit: int = 40) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _forward_owner(classes: list[ClassInfo], span: Span) -> str | None:
    """The class whose own ``forward`` contains ``span``."""
    for info in classes:
        if info.forward is not None and contains(info.forward.span, span):
            return info.name
    return None


def _statement(index: _Index, span: Span) -> ast.stmt | None:
    """The innermost statement containing ``span``."""
    best: tuple[Span, ast.stmt] | None = None
    for where, node in index.statements:
        if contains(where, span) and (best is None or contains(best[0], where)):
            best = (where, node)
    return best[1] if best is not None else None


def candidates(analysis: FileAnalysis, text: str) -> list[Candidate]:
    """The fixes ``analysis`` (of ``text``) offers, one per place, in text order."""
    index = _index(text)
    if index is None:
        return []
    found: dict[tuple[Any, ...], Candidate] = {}
    for mod in analysis.modules:
        for diag in mod.diagnostics:
            for cand in _from_diagnostic(analysis, mod, diag, index):
                key: tuple[Any, ...] = (cand.kind, cand.span.line, cand.span.col, cand.span.end_line,
                       cand.span.end_col, repr(sorted(cand.params.items())))  # fmt: skip
                if cand.kind in PER_CLASS_KINDS:
                    key = (*key, cand.cls)
                found.setdefault(key, cand)
    out = list(found.values())
    out.sort(key=lambda c: (c.span.line, c.span.col, c.id))
    return out


def _debug_call(diag: Diagnostic, index: _Index) -> list[str]:
    """For an FX601 at a call statement: the title of removing it."""
    stmt = _statement(index, diag.span) if diag.code == "FX601" else None
    if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)):
        return []
    return [f"Remove the debug call `{_short(index.src.text(index.src.node_span(stmt)))}`"]


def _directive(code: str, data: dict[str, Any]) -> tuple[str, dict[str, str]] | None:
    """The title and parameters of the directive a diagnostic offers: FX405 pins an assumed
    input, FX402 declares an input left at ``None`` as suggested (FX101 one a rank check reads
    that fxls could not infer), FX408 pins the build."""
    if code == "FX405" and data.get("arg"):
        arg, shape = str(data["arg"]), str(data.get("shape", ""))
        return f"Pin the assumed input `{arg}` {shape} with `# fxls: {arg} = ...`", {
            "what": "input",
            "arg": arg,
        }
    if code in ("FX402", "FX101") and data.get("arg") and data.get("declare"):
        arg, shape = str(data["arg"]), str(data["declare"])
        shown = f"`# fxls: {_short(arg, 40)} = {_short(shape, 40)}`"
        return f"Declare `{_short(arg, 40)}` with {shown}", {
            "what": "declare",
            "arg": arg,
            "shape": shape,
        }
    if code == "FX408" and data.get("init"):
        shown = _short(str(data["init"]), 60)
        return f"Pin the constructor arguments: `# fxls: init({shown})`", {"what": "init"}
    return None


def _from_diagnostic(
    analysis: FileAnalysis,
    mod: ModuleResult,
    diag: Diagnostic,
    index: _Index,
) -> Iterable[Candidate]:
    code, span, data = diag.code, diag.span, diag.data
    src = index.src
    at = f"{span.line}:{span.col}"
    owner = _forward_owner(analysis.classes, span)

    def make(kind: FixKind, cls: str, title: str, **params: Any) -> Candidate:
        suffix = "".join(f":{v}" for v in params.values())
        return Candidate(
            id=f"{code}:{kind}:{cls}:{at}{suffix}",
            kind=kind,
            cls=cls,
            span=span,
            title=title,
            code=code,
            params=params,
            diagnostic=diag,
        )

    yield from (make("remove-print", mod.name, title) for title in _debug_call(diag, index))
    if code == "FX360" and owner == mod.name and data.get("rule"):
        rule = rule_name(str(data["rule"]))
        yield make("rule", mod.name, f"Apply rule `{rule}`", rule=str(data["rule"]))
    if code == "FX302" and owner is not None:
        stmt = _statement(index, span)
        if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.Expr)):
            shown = _short(src.text(src.node_span(stmt)))
            yield make("dead-code", owner, f"Remove unused `{shown}`")
    elif (directive := _directive(code, data)) is not None:
        yield make("directive", mod.name, directive[0], **directive[1])
    if code in ("FX101", "FX107", "FX199") and data.get("leaf"):
        leaf = str(data["leaf"])
        yield make("leaf", mod.name, f"Keep `{leaf}` as a leaf: `# fxls: leaf {leaf}`", leaf=leaf)
    if code.startswith("FX1") and data.get("wrap"):
        helper = str(data["wrap"])
        yield make(
            "wrap",
            owner or mod.name,
            f'Wrap `{helper}` for torch.fx: `torch.fx.wrap("{helper}")`',
            wrap=helper,
        )
    if code == "FX101" and data.get("concrete"):
        args = str(data["concrete"])
        yield make("concrete", mod.name, f"Trace with `{args}` fixed by a directive", args=args)
    if code == "FX101" and _key(span) in index.assert_tests:
        yield make(
            "assertion", owner or mod.name, "Replace `assert` with `torch._assert(...)` (traceable)"
        )
    if code == "FX102":
        call = index.calls.get(_key(span))
        if call is not None and len(call.args) == 1:
            receiver, method = length_as(call.args[0])
            inner = src.text(src.node_span(receiver))
            yield make(
                "length",
                owner or mod.name,
                f"Replace `{_short(src.text(span))}` with `{_short(inner)}{method}` (traceable)",
            )
    if code == "FX103":
        call = index.calls.get(_key(span))
        if call is not None and _unpacks_sizes(call):
            yield make(
                "sizes",
                owner or mod.name,
                f"Pass the sizes of `{_short(src.text(span))}` as one argument (traceable)",
            )
    if code == "FX105":
        call = index.calls.get(_key(span))
        func = call.func if call is not None else None
        if isinstance(func, ast.Attribute) and func.attr in ("zeros", "ones", "empty", "full"):
            yield make(
                "new-tensor",
                owner or mod.name,
                f"Replace `torch.{func.attr}(...)` with `x.new_{func.attr}(...)` (traceable)",
            )


_SIZE_TAKERS = frozenset(
    {"view", "reshape", "expand", "repeat", "permute", "new_zeros", "new_ones", "new_empty"}
    | {"zeros", "ones", "empty", "rand", "randn"}
)
"""Callees that take sizes unpacked or as one sequence (the worker's ``rewrites.sizes``
decides exactly; this only keeps the action from being listed where it cannot apply)."""


def _unpacks_sizes(call: ast.Call) -> bool:
    """``f(*x.shape[:-1], h, -1)`` with ``f`` a sizes-taking method or function."""
    starred = [a.value for a in call.args if isinstance(a, ast.Starred)]
    if not starred or not isinstance(call.func, ast.Attribute):
        return False
    if call.func.attr not in _SIZE_TAKERS:
        return False
    for value in starred:
        if isinstance(value, ast.Subscript) and isinstance(value.slice, ast.Slice):
            value = value.value
        shape = isinstance(value, ast.Attribute) and value.attr == "shape"
        size = (
            isinstance(value, ast.Call)
            and isinstance(value.func, ast.Attribute)
            and value.func.attr == "size"
            and not value.args
        )
        if not (shape or size):
            return False
    return True


_RULE_NAME_LIMIT = 60


def rule_name(name: str) -> str:
    """A rule's name for titles: identifier characters only, capped."""
    shown = "".join(c if c.isalnum() or c == "_" else "?" for c in name)
    return shown if len(shown) <= _RULE_NAME_LIMIT else shown[: _RULE_NAME_LIMIT - 1] + "…"


def refactors_at(analysis: FileAnalysis, text: str, line: int, col: int) -> list[Candidate]:
    """Refactors at a position of the analysed text: name every argument of the call there
    (the innermost call with a positional argument whose parameter names are known)."""
    index = _index(text)
    if index is None:
        return []
    src = index.src
    best: tuple[str, Span, ast.Call] | None = None
    for mod in analysis.modules:
        for node in mod.nodes:
            span = node.span
            if node.op not in ("call_function", "call_method", "call_module") or span is None:
                continue
            if node.signature in (None, "approximate") or not _inside(span, line, col):
                continue
            if best is not None and not contains(best[1], span):
                continue
            call = index.calls.get(_key(span))
            if call is None or not call.args or any(isinstance(a, ast.Starred) for a in call.args):
                continue
            owner = analysis.module(_forward_owner(analysis.classes, span) or "")
            cls = mod.name
            if owner is not None and any(n.span == span for n in owner.nodes):
                cls = owner.name
            if best is None or best[1] != span:
                best = (cls, span, call)
    found = _attention_at(analysis, line, col) + _passes_at(analysis, text, line)
    if best is None:
        return found
    cls, span, call = best
    callee = _short(src.text(src.node_span(call.func)), 30)
    return [
        Candidate(
            id=f"name-args:{cls}:{span.line}:{span.col}",
            kind="name-args",
            cls=cls,
            span=span,
            title=f"Name every argument of `{callee}(...)`",
            category="refactor",
        ),
        *found,
    ]


def _passes_at(analysis: FileAnalysis, text: str, line: int) -> list[Candidate]:
    """ "Apply `fuse` to `Net`" on the ``def`` line of a user pass that ran cleanly on a class
    and changed its graph (``# fxls: pass Net``)."""
    out = []
    for mod in analysis.modules:
        for run in mod.passes:
            changed = run.added or run.removed or run.replaced
            if run.line != line or run.status != "ok" or not changed:
                continue
            src = SourceText(text)
            start = src.line(line).find(run.function)
            span = Span(line, max(start, 0), line, max(start, 0) + len(run.function))
            out.append(
                Candidate(
                    id=f"pass:{mod.name}:{run.function}:{line}",
                    kind="apply-pass",
                    cls=mod.name,
                    span=span,
                    title=f"Apply `{run.function}` to `{mod.name}`",
                    category="refactor",
                    params={"pass": run.function, "line": line},
                )
            )
    return out


def _attention_at(analysis: FileAnalysis, line: int, col: int) -> list[Candidate]:
    """ "Use scaled_dot_product_attention" when the cursor is on a hand-written attention of
    a class's own ``forward``."""
    seen: set[tuple[int, int]] = set()
    out = []
    for mod, covering, softmax in _attentions(analysis):
        owner = _forward_owner(analysis.classes, softmax)
        if owner != mod.name or not _inside(covering, line, col):
            continue
        if (covering.line, covering.col) in seen:
            continue
        seen.add((covering.line, covering.col))
        out.append(
            Candidate(
                id=f"attention:{mod.name}:{covering.line}:{covering.col}",
                kind="attention",
                cls=mod.name,
                span=covering,
                title="Use `F.scaled_dot_product_attention` (fused attention)",
                category="refactor",
            )
        )
    return out


_ATTENTIONS: list[tuple[FileAnalysis, list[tuple[ModuleResult, Span, Span]]]] = []


def _attentions(analysis: FileAnalysis) -> list[tuple[ModuleResult, Span, Span]]:
    """Every module's attention spans, computed once per analysis (a few recent ones kept)."""
    for known, found in _ATTENTIONS:
        if known is analysis:
            return found
    found = [(mod, cov, soft) for mod in analysis.modules for cov, soft in attention_spans(mod)]
    _ATTENTIONS.insert(0, (analysis, found))
    del _ATTENTIONS[8:]
    return found


_SOFTMAX = frozenset({"torch.nn.functional.softmax", "torch.softmax", "softmax"})
_MATMUL = frozenset({"operator.matmul", "torch.matmul", "matmul"})
_SCALE = frozenset({"operator.mul", "operator.truediv"})


def _is_softmax(node: NodeInfo) -> bool:
    if node.op == "call_module":
        return (node.module_type or "").startswith("Softmax(")
    return node.target in _SOFTMAX


def _is_dropout(node: NodeInfo) -> bool:
    if node.op == "call_module":
        return (node.module_type or "").startswith("Dropout(")
    return node.target == "torch.nn.functional.dropout"


def attention_spans(mod: ModuleResult) -> list[tuple[Span, Span]]:
    """(covering span, softmax span) of each hand-written attention in a captured graph:
    ``q @ kᵀ`` [scaled] [masked] → softmax → [dropout] → ``@ v``, each step used once. A quick
    look at the wire graph; the worker matches the real FX graph when the refactor is picked."""
    by_name = {n.name: n for n in mod.nodes}
    users: dict[str, list[NodeInfo]] = {}
    for n in mod.nodes:
        for name in n.inputs:
            users.setdefault(name, []).append(n)

    def only_user(n: NodeInfo) -> NodeInfo | None:
        found = users.get(n.name, [])
        return found[0] if len(found) == 1 else None

    out = []
    for soft in mod.nodes:
        if not _is_softmax(soft) or not soft.inputs or soft.span is None:
            continue
        node = by_name.get(soft.inputs[0])
        if node is not None and node.target == "masked_fill" and node.inputs:
            node = by_name.get(node.inputs[0])
        if node is not None and node.target in _SCALE:
            node = next((by_name[i] for i in node.inputs if by_name[i].target in _MATMUL), None)
        if node is None or node.target not in _MATMUL or node.span is None:
            continue
        after = only_user(soft)
        if after is not None and _is_dropout(after):
            after = only_user(after)
        if after is None or after.target not in _MATMUL or after.span is None:
            continue
        start, end = node.span, after.span
        out.append((Span(start.line, start.col, end.end_line, end.end_col), soft.span))
    return out


def _inside(span: Span, line: int, col: int) -> bool:
    if not span.line <= line <= span.end_line:
        return False
    if line == span.line and col < span.col:
        return False
    return not (line == span.end_line and col > span.end_col)


# ---------------------------------------------------------------------------------------
# Computing them in the worker
# ---------------------------------------------------------------------------------------


def rewrite_limits(limits: Limits) -> Limits:
    timeout = max(limits.timeout_s * 3, REWRITE_MIN_TIMEOUT_S)
    return replace(limits, timeout_s=timeout, cpu_s=max(limits.cpu_s * 3, timeout + 2))


async def compute(
    runner: JobRunner,
    path: str,
    text: str,
    fixes: list[FixRequest],
    *,
    options: EngineOptions | None = None,
    root: str | None = None,
    combine: bool = False,
    unsafe: bool = False,
    max_params: int | None = None,
    extra_inputs: dict[str, list[InputSpec]] | None = None,
    init_override: dict[str, str] | None = None,
    import_root: str | None = None,
) -> RewriteResult:
    """Compute and verify ``fixes`` on ``text`` in the worker (one ``rewrite`` job).

    ``import_root`` goes on the job's ``sys.path`` when there is no workspace ``root``, as in
    :func:`fxls.engine.analyze.analyze`.

    Never raises for worker failures: every fix is then ``unavailable`` with the reason.
    ``asyncio.CancelledError`` propagates.
    """
    options = options or EngineOptions()
    parsed = parse(text)
    if parsed.syntax_error is not None:
        return _failed(fixes, f"the file does not parse: {parsed.syntax_error.message}")
    # the workspace's files are read for constructor calls: in a thread, off the event loop
    requests = await asyncio.to_thread(
        class_requests, parsed, path, root, extra_inputs, init_override
    )
    job = percent_cells(capture_job(path, text, requests, options, root or import_root))
    rewrite = RewriteJob(fixes=list(fixes), combine=combine, unsafe=unsafe)
    if max_params is not None:
        rewrite.max_params = max_params
    try:
        result = await runner.run(
            job, rewrite_limits(options.limits), options.isolation, rewrite=rewrite
        )
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        return _failed(fixes, f"the worker failed: {type(exc).__name__}: {exc}")
    payload = result.payload
    if result.kind != "ok" or payload is None or payload.rewrite is None:
        why = result.message.strip() or result.kind.replace("_", " ")
        return _failed(fixes, f"the sandbox could not verify it ({why})")
    rewrite_result = payload.rewrite
    for outcome in [*rewrite_result.outcomes, rewrite_result.combined]:
        if outcome is not None:
            recheck(outcome)
            kept_lines_only(outcome, job.source, text)
    return rewrite_result


def kept_lines_only(outcome: FixOutcome, ran: str, text: str) -> None:
    """A fix computed on a ``# %%`` file's run (``ran``: its lines, statements that are not
    model code left out) applies to the file (``text``) only where both have the same lines:
    one that changes a line left out is unavailable."""
    if ran == text or not outcome.edits:
        return
    mine, theirs = ran.split("\n"), text.split("\n")
    for edit in outcome.edits:
        lines = range(edit.span.line - 1, edit.span.end_line)
        if any(i >= len(mine) or i >= len(theirs) or mine[i] != theirs[i] for i in lines):
            outcome.applicability, outcome.edits = "unavailable", []
            outcome.reason = "it changes a line of the file that fxls leaves out of its run"
            return


def recheck(outcome: FixOutcome) -> None:
    """Compare again the outputs a rewrite job found equal (``FixOutcome.samples``), in plain
    Python: the job ran user code, which may have replaced torch's comparisons. A safe fix
    whose outputs differ becomes unsafe with the counterexample. The samples are dropped."""
    samples, outcome.samples = outcome.samples, []
    if outcome.applicability != "safe":
        return
    for sample in samples:
        problem = outputs.difference(sample)
        if problem is not None:
            outcome.applicability = "unsafe"
            outcome.reason = (
                f"unsafe: outputs differ on {sample.inputs[:200]}: {problem[:300]} (compared "
                "by fxls outside the sandbox; the comparison in the sandbox said equal)"
            )
            return


def _failed(fixes: list[FixRequest], reason: str) -> RewriteResult:
    return RewriteResult(
        outcomes=[FixOutcome(f.id, "unavailable", f.id, reason=reason) for f in fixes]
    )


def applies(outcome: FixOutcome | None, unsafe: bool) -> bool:
    """Whether an outcome may be applied (safe, or unsafe when the user asked for those)."""
    if outcome is None or not outcome.edits:
        return False
    return outcome.applicability == "safe" or (unsafe and outcome.applicability == "unsafe")


# ---------------------------------------------------------------------------------------
# Minimal edits
# ---------------------------------------------------------------------------------------

_CHAR_DIFF_LIMIT = 4000
"""Changed blocks up to this many characters are diffed character by character."""


def minimal_edits(old: str, new: str) -> list[TextEdit]:
    """The smallest edits (difflib) that turn ``old`` into ``new``, against ``old``.

    Lines are matched first; each changed block is then narrowed to the characters that
    differ, so applying the edits leaves every other character of ``old`` untouched.
    """
    if old == new:
        return []
    starts = line_starts(old)
    a = old.splitlines(keepends=True)
    b = new.splitlines(keepends=True)
    offsets_a = [0]
    for line in a:
        offsets_a.append(offsets_a[-1] + len(line))
    offsets_b = [0]
    for line in b:
        offsets_b.append(offsets_b[-1] + len(line))
    edits: list[TextEdit] = []
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        begin, end = offsets_a[i1], offsets_a[i2]
        new_begin, new_end = offsets_b[j1], offsets_b[j2]
        for s, e, replacement in _narrow(old[begin:end], new[new_begin:new_end]):
            edits.append(TextEdit(span_of(starts, begin + s, begin + e), replacement))
    return edits


def _narrow(a: str, b: str) -> list[tuple[int, int, str]]:
    """Edits within one changed block: (start, end) in ``a`` and the replacement."""
    prefix, suffix = common_ends(a, b)
    mid_a, mid_b = a[prefix : len(a) - suffix], b[prefix : len(b) - suffix]
    if len(mid_a) + len(mid_b) > _CHAR_DIFF_LIMIT or not mid_a or not mid_b:
        return [(prefix, prefix + len(mid_a), mid_b)]
    out = []
    matcher = difflib.SequenceMatcher(None, mid_a, mid_b, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag != "equal":
            out.append((prefix + i1, prefix + i2, mid_b[j1:j2]))
    return _merge_close(out, a)


def _merge_close(edits: list[tuple[int, int, str]], a: str) -> list[tuple[int, int, str]]:
    """Join edits separated by fewer than three unchanged characters (readable, no
    confetti of one-letter edits)."""
    merged: list[tuple[int, int, str]] = []
    for start, end, text in edits:
        if merged and start - merged[-1][1] < 3:
            p_start, p_end, p_text = merged[-1]
            merged[-1] = (p_start, end, p_text + a[p_end:start] + text)
        else:
            merged.append((start, end, text))
    return merged


def edited_text(text: str, outcome: FixOutcome) -> str:
    """``text`` with the outcome's edits applied."""
    return apply_edits(text, outcome.edits)


Mapper = Callable[[int], "int | None"]


def moved(span: Span, mapper: Mapper) -> Span | None:
    """``span`` of the analysed text on the current text, None when its lines were edited."""
    start, end = mapper(span.line), mapper(span.end_line)
    if start is None or end is None:
        return None
    return Span(start, span.col, end, span.end_col)
