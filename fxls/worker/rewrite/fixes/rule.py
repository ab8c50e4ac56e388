"""The ``rule`` fix: apply one match of a user rule (:mod:`fxls.worker.capture.rules`).

The match at the fix's span is replaced in a copy of the class's graph
(``replace_pattern_with_filters``), and the result is written back into ``forward`` with
:func:`~fxls.worker.rewrite.regenerate.regenerate_forward`; verified like every change of code
(the edited class must compute the same).
"""

from __future__ import annotations

import copy
import warnings

import torch
import torch.fx
from torch.fx.passes.utils.matcher_utils import InternalMatch
from torch.fx.subgraph_rewriter import replace_pattern_with_filters

from fxls.protocol.model import FixRequest
from fxls.worker.capture.reporting import one_line
from fxls.worker.capture.rules import load, match_span
from fxls.worker.rewrite.base import Original, Proposal, Unavailable
from fxls.worker.rewrite.regenerate import regenerate_forward


def propose(original: Original, fix: FixRequest) -> Proposal:
    rules = original.doc.job.rules
    name = str(fix.params.get("rule", ""))
    if rules is None:
        raise Unavailable("no rules file was sent with this job")
    loaded = load(rules)
    rule = next((r for r in loaded.rules if r.name == name), None)
    if rule is None:
        raise Unavailable(f"rule `{name}` is not in the rules file (or does not load)")
    capture = original.capture(fix.cls)
    traced = capture.traced
    if traced is None or traced.gm is None:
        raise Unavailable("no FX graph of this class")
    forward = capture.forward_def
    if forward is None:
        raise Unavailable("`forward` is not in this file")
    inside = original.doc.source.node_span(forward)
    gm = copy.deepcopy(traced.gm)

    def here(match: InternalMatch, graph: torch.fx.Graph, pattern: torch.fx.Graph) -> bool:
        return match_span(match, inside) == fix.span

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        replaced = replace_pattern_with_filters(
            gm, rule.pattern, rule.replacement, match_filters=[here]
        )
    if not replaced:
        raise Unavailable(f"rule `{name}` no longer matches here")
    try:
        gm.graph.lint()
        gm.recompile()
    except Exception as exc:
        raise Unavailable(f"the rewritten graph is invalid: {one_line(exc)}") from exc
    edits = regenerate_forward(original, fix.cls, gm, before=traced.gm)
    if not edits:
        raise Unavailable(f"rule `{name}` changes nothing here")
    return Proposal(f"Apply rule `{name}`", edits, check="numeric")
