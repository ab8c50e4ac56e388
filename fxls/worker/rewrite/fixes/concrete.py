"""A branch on a flag argument of ``forward``: ``# fxls: flag = <default>`` above the class.

torch.fx cannot trace ``if flag:`` on a traced argument; fxls already fixes plain-value
arguments to their defaults on its own (``fx+concrete``). The directive declares that value,
so the trace needs no repair and the value is written where people see it. Verified by
capturing the edited file: it must trace as far, with the same shapes, and without the
failure.
"""

from __future__ import annotations

from fxls.protocol.model import ClassRequest, FixRequest, InputSpec
from fxls.worker.rewrite import text
from fxls.worker.rewrite.base import Original, Proposal, Unavailable, gone_of
from fxls.worker.rewrite.fixes.directive import value_directive


def propose(original: Original, fix: FixRequest) -> Proposal:
    capture = original.capture(fix.cls)
    plan = capture.plan
    if plan is None:
        raise Unavailable("the inputs of this class are unknown")
    names = [n.strip() for n in str(fix.params.get("args", "")).split(",") if n.strip()]
    if not names:
        raise Unavailable("no flag argument named")
    bodies: list[str] = []
    specs: list[InputSpec] = []
    for name in names:
        planned = plan.planned.get(name)
        if planned is None or planned.kind != "value" or name in plan.declared:
            raise Unavailable(f"`{name}` has no default value to fix")
        body, spec = value_directive(name, planned.value)
        bodies.append(body)
        specs.append(spec)
    edit = text.insert_directives(original.doc.source, original.tree, fix.cls, bodies)
    gone = gone_of(fix)
    shown = "; ".join(f"`# fxls: {b}`" for b in bodies)

    def update(req: ClassRequest) -> None:
        names = {s.name for s in specs}
        req.inputs = [s for s in req.inputs if s.name not in names] + specs

    return Proposal(
        f"Trace `{fix.cls}` with {shown}",
        [edit],
        check="capture",
        gone=gone,
        requests={fix.cls: update},
    )
