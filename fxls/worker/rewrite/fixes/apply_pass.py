"""Apply a user pass to the source: "Apply `fuse` to `Net`".

The pass (``# fxls: pass Net`` above its ``def``) runs on a copy of the class's traced module,
observed and checked as in a capture (:mod:`fxls.worker.capture.passes`); the graph it returns
is written back into ``Net.forward`` as minimal statement edits by
:func:`~fxls.worker.rewrite.regenerate.regenerate_forward`, which refuses what it
cannot write as the user's own code. The edit is verified like every change of code: safe only
when the edited class computes the same outputs as the original.

``FixRequest.params``: ``{"pass": function name, "line": line of its def}``.
"""

from __future__ import annotations

from fxls.protocol.model import ClassRequest, FixRequest, ModuleResult, PassRequest, PassResult
from fxls.worker.capture.passes import PassRun
from fxls.worker.rewrite.base import Original, Proposal, Unavailable
from fxls.worker.rewrite.regenerate import regenerate_forward


def propose(original: Original, fix: FixRequest) -> Proposal:
    function = str(fix.params.get("pass", ""))
    line = int(fix.params.get("line", 0) or 0)
    if not function:
        raise Unavailable("no pass named")
    mod = original.module(fix.cls)
    scratch = ModuleResult(name=fix.cls, line=mod.line, status=mod.status, strategy=mod.strategy)
    result = PassResult(function=function, line=line, status="not run")
    run = PassRun(
        original.doc, ClassRequest(fix.cls, mod.line), scratch, PassRequest(function, line), result
    )
    run.run()
    if run.output is None:
        problems = [d.message for d in scratch.diagnostics]
        raise Unavailable(problems[0] if problems else result.message or "the pass failed")
    if not (result.added or result.removed or result.replaced):
        raise Unavailable(f"`{function}` changes nothing in `{fix.cls}`")
    edits = regenerate_forward(original, fix.cls, run.output)
    if not edits:
        raise Unavailable(f"`{function}` changes nothing in the source of `{fix.cls}.forward`")
    return Proposal(f"Apply `{function}` to `{fix.cls}`", edits, check="numeric")
