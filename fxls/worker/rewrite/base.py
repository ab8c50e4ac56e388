"""What every rewrite shares: the captured original document and what a rewrite proposes."""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from fxls.protocol.model import (
    CaptureResult,
    ClassRequest,
    FixRequest,
    ModuleResult,
    Span,
    TextEdit,
)
from fxls.worker.capture.classcapture import ClassCapture
from fxls.worker.capture.document import ExecutedDocument

Check = Literal["numeric", "capture"]
"""``numeric``: the edit changes code, so the edited module must compute the same on real
tensors; ``capture``: it changes only how fxls captures (directives), so the re-capture must
run as far and give the same shapes."""


class Unavailable(Exception):
    """The fix cannot be made here; the message says why, for people."""


@dataclass
class Proposal:
    """A rewrite's edits against the original source, and how to verify them."""

    title: str
    edits: list[TextEdit]
    check: Check = "numeric"
    traces_past: bool = False
    """A trace fix-it: plain ``torch.fx.symbolic_trace`` must no longer fail in the edited
    text (it may fail further on)."""
    train: bool = False
    """The edit changes what the module does in training mode (dropout): it must compute the
    same in training mode too, with the same seed before each run."""
    alternatives: list[list[TextEdit]] = field(default_factory=list)
    """Other edits for the same fix, tried in order when ``edits`` does not verify safe."""
    gone: list[tuple[str, str, Span]] = field(default_factory=list)
    """(code, class, span in the original) of diagnostics the re-capture of that class must no
    longer report."""
    requests: dict[str, Callable[[ClassRequest], None]] = field(default_factory=dict)
    """Per class: what the edit changes in its capture request (the directives it adds, as
    the server's parser reads them), applied to the request of the edited file."""


def gone_of(fix: FixRequest, code: str | None = None) -> list[tuple[str, str, Span]]:
    """The diagnostic ``fix`` is for, which the edited capture must no longer report."""
    code = code or fix.code
    return [(code, fix.cls, fix.span)] if code else []


@dataclass
class Original:
    """The document as the job sent it, executed and captured once for every rewrite."""

    doc: ExecutedDocument
    result: CaptureResult

    @property
    def tree(self) -> ast.Module:
        if self.doc.tree is None:
            raise Unavailable("the file does not parse")
        return self.doc.tree

    @property
    def source(self) -> str:
        return self.doc.job.source

    def module(self, name: str) -> ModuleResult:
        for mod in self.result.modules:
            if mod.name == name:
                return mod
        raise Unavailable(f"`{name}` was not captured")

    def capture(self, name: str) -> ClassCapture:
        """The capture of class ``name`` (its built module, inputs and graph)."""
        capture = self.doc.captures.get(name)
        if capture is None:
            raise Unavailable(f"`{name}` could not be built")
        return capture  # type: ignore[no-any-return]
