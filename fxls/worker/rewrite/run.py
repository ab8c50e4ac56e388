"""Rewrites: fixes and refactors computed on a captured document and verified in the sandbox.

The ``rewrite`` job (``JobRequest.kind``) executes and captures the document once, asks the
module of each requested fix for its edits (one module per rewrite: ``dead_code``,
``directives``, ``leaf``, ``wrap``, ``concrete``, ``assertion``, ``length``, ``new_tensor``,
``name_args``, ``attention``, ``apply_pass``, ``rules`` for the workspace's user rules), and
verifies them with
:mod:`~fxls.worker.rewrite.verify`. With
``RewriteJob.combine`` the fixes that verified are applied together and verified again.

Edits are computed against the job's source and touch only what they must; the server turns
them into minimal LSP text edits.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

from fxls.protocol.edits import compatible
from fxls.protocol.fixkinds import FIX_KINDS
from fxls.protocol.model import (
    Applicability,
    CaptureJob,
    CaptureResult,
    FixOutcome,
    FixRequest,
    Phase,
    RewriteJob,
    RewriteResult,
)
from fxls.worker.capture.pipeline import capture_document
from fxls.worker.capture.reporting import one_line
from fxls.worker.rewrite.base import Original, Proposal, Unavailable
from fxls.worker.rewrite.fixes import (
    apply_pass,
    assertion,
    attention,
    concrete,
    dead_code,
    directive,
    leaf,
    length,
    name_args,
    new_tensor,
    remove_print,
    rule,
    sizes,
    wrap,
)
from fxls.worker.rewrite.text import ordered
from fxls.worker.rewrite.verify import Change, Verdict, change_of, merge, verify

PhaseReporter = Callable[[Phase, "str | None"], None]

_FIX_MODULES = (apply_pass, assertion, attention, concrete, dead_code, directive, leaf, length,
                name_args, new_tensor, remove_print, rule, sizes, wrap)  # fmt: skip
_MODULES: dict[str, ModuleType] = {m.__name__.rpartition(".")[2]: m for m in _FIX_MODULES}

REWRITES: dict[str, ModuleType] = {k.kind: _MODULES[k.module] for k in FIX_KINDS}
"""The module of each fix kind of the registry (:mod:`fxls.protocol.fixkinds`)."""

_ORDER = {"safe": 0, "unsafe": 1, "unavailable": 2}


def run_rewrite(job: CaptureJob, rewrite: RewriteJob, report: PhaseReporter) -> CaptureResult:
    """Compute and verify ``rewrite.fixes`` on ``job``'s document.

    Returns the capture of the original document with ``rewrite`` set: one outcome per fix
    (and the combination with ``rewrite.combine``).
    """
    doc, result = capture_document(job, report)
    out = RewriteResult()
    result.rewrite = out
    if result.error is not None:
        reason = f"the file does not run: {result.error.type}: {result.error.message}"
        out.outcomes = [FixOutcome(f.id, "unavailable", f.id, reason=reason) for f in rewrite.fixes]
        return result
    original = Original(doc, result)
    changes: dict[str, Change] = {}
    for fix in rewrite.fixes:
        report("trace", fix.cls)
        outcome, change = _one(original, fix, rewrite, report)
        out.outcomes.append(outcome)
        if change is not None:
            changes[fix.id] = change
    if rewrite.combine:
        out.combined = _combined(original, out.outcomes, changes, rewrite, report)
    return result


def _one(
    original: Original, fix: FixRequest, rewrite: RewriteJob, report: PhaseReporter
) -> tuple[FixOutcome, Change | None]:
    module = REWRITES.get(fix.kind)
    if module is None:
        return FixOutcome(fix.id, "unavailable", fix.id, reason=f"unknown fix {fix.kind!r}"), None
    try:
        proposal: Proposal = module.propose(original, fix)
    except Unavailable as exc:
        return FixOutcome(fix.id, "unavailable", fix.id, reason=str(exc)), None
    except Exception as exc:  # a bug in a rewrite must not lose the others
        return (
            FixOutcome(fix.id, "unavailable", fix.id, reason=f"fxls failed: {one_line(exc)}"),
            None,
        )
    best: tuple[Verdict, Change] | None = None
    for edits in [proposal.edits, *proposal.alternatives]:
        change = change_of(fix.cls, proposal, edits)
        try:
            verdict = verify(original, change, rewrite, report)
        except Exception as exc:
            verdict = Verdict.unavailable(f"verification failed: {one_line(exc)}")
        if best is None or _ORDER[verdict.applicability] < _ORDER[best[0].applicability]:
            best = (verdict, change)
        if verdict.applicability == "safe":
            break
    assert best is not None
    verdict, change = best
    outcome = FixOutcome(
        fix.id,
        verdict.applicability,
        proposal.title,
        edits=list(change.edits) if verdict.applicability != "unavailable" else [],
        reason=verdict.reason,
        checks=verdict.checks,
        samples=verdict.samples,
    )
    return outcome, change if verdict.applicability != "unavailable" else None


def _combined(
    original: Original,
    outcomes: list[FixOutcome],
    changes: dict[str, Change],
    rewrite: RewriteJob,
    report: PhaseReporter,
) -> FixOutcome | None:
    """Every fix that verified (unsafe ones too with ``rewrite.unsafe``), applied together.

    The combination is verified again; when it fails, fixes are added one at a time and each
    one that breaks the combination is left out.
    """
    wanted = [
        o
        for o in outcomes
        if o.id in changes
        and (o.applicability == "safe" or (rewrite.unsafe and o.applicability == "unsafe"))
    ]
    chosen: list[FixOutcome] = []
    for outcome in wanted:
        edits = [e for c in chosen for e in changes[c.id].edits]
        if compatible(original.source, edits, changes[outcome.id].edits):
            chosen.append(outcome)
    if not chosen:
        return None
    if len(chosen) == 1:
        only = chosen[0]
        return FixOutcome(
            "all", only.applicability, only.title, list(only.edits), only.reason,
            list(only.checks), fixes=[only.id], samples=list(only.samples),
        )  # fmt: skip
    verdict = _verify_set(original, chosen, changes, rewrite, report)
    if verdict.applicability == "unavailable" or (
        verdict.applicability == "unsafe" and not rewrite.unsafe
    ):
        kept: list[FixOutcome] = []
        for outcome in chosen:
            trial = _verify_set(original, [*kept, outcome], changes, rewrite, report)
            if trial.applicability == "safe" or (
                rewrite.unsafe and trial.applicability == "unsafe"
            ):
                kept.append(outcome)
                verdict = trial
        chosen = kept
        if not chosen:
            return None
    unsafe = [o for o in chosen if o.applicability == "unsafe"]
    applicability: Applicability = (
        "unsafe" if unsafe or verdict.applicability == "unsafe" else "safe"
    )
    title = f"Apply {len(chosen)} fxls fixes" if len(chosen) > 1 else chosen[0].title
    return FixOutcome(
        "all",
        applicability,
        title,
        ordered([e for o in chosen for e in changes[o.id].edits]),
        verdict.reason or "; ".join(o.reason for o in unsafe),
        verdict.checks,
        fixes=[o.id for o in chosen],
        samples=verdict.samples,
    )


def _verify_set(
    original: Original,
    chosen: list[FixOutcome],
    changes: dict[str, Change],
    rewrite: RewriteJob,
    report: PhaseReporter,
) -> Verdict:
    if len(chosen) == 1:
        only = chosen[0]
        return Verdict(only.applicability, only.reason, list(only.checks), list(only.samples))
    try:
        return verify(original, merge([changes[o.id] for o in chosen]), rewrite, report)
    except Exception as exc:
        return Verdict.unavailable(f"verification failed: {one_line(exc)}")


__all__ = ["REWRITES", "Unavailable", "run_rewrite"]
