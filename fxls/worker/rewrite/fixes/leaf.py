"""A submodule whose ``forward`` cannot be traced: ``# fxls: leaf Sub`` above the class.

fxls already keeps such a submodule as a leaf on its own (``fx+leaf``); the directive makes it
the declared way to capture the class, so the trace needs no repair. Verified by capturing the
edited file: it must trace as far with the same shapes, and the trace failure inside the
submodule must be gone.
"""

from __future__ import annotations

import re

from fxls.protocol.model import ClassRequest, FixRequest
from fxls.worker.rewrite import text
from fxls.worker.rewrite.base import Original, Proposal, Unavailable, gone_of

_NAME = re.compile(r"^[A-Za-z_]\w*$")


def propose(original: Original, fix: FixRequest) -> Proposal:
    leaf = str(fix.params.get("leaf", ""))
    if not _NAME.match(leaf):
        raise Unavailable(f"`{leaf}` is not a class name")
    if leaf == fix.cls:
        raise Unavailable("a class cannot be a leaf of itself")
    if leaf in original.capture(fix.cls).req.leaf:
        raise Unavailable(f"`{leaf}` is already declared a leaf")
    edit = text.insert_directives(original.doc.source, original.tree, fix.cls, [f"leaf {leaf}"])
    gone = gone_of(fix)

    def update(req: ClassRequest) -> None:
        if leaf not in req.leaf:
            req.leaf.append(leaf)

    return Proposal(
        f"Keep `{leaf}` as a leaf of `{fix.cls}`: `# fxls: leaf {leaf}`",
        [edit],
        check="capture",
        gone=gone,
        requests={fix.cls: update},
    )
