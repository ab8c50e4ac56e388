"""A capture whose workspace evidence was incomplete, in the session (no worker, no editor):
its compile check waits for the capture a read of the workspace brings, and runs when none
will come."""

from __future__ import annotations

import gc
import time
from types import SimpleNamespace
from typing import Any

import pytest

from fxls.engine.analyze import FileAnalysis
from fxls.lsp.session import Session


class _Editor:
    """What the session asks of the language server here: publish, capabilities."""

    def __init__(self) -> None:
        self.workspace = SimpleNamespace(position_encoding="utf-16", root_path=None)
        self.client_capabilities = None
        self.published: list[Any] = []

    def text_document_publish_diagnostics(self, params: Any) -> None:
        self.published.append(params)


def _session(checked: list[int | None], evidence_complete: bool) -> Session:
    session = Session(_Editor())  # type: ignore[arg-type]
    session.store = None

    async def analyze(doc: Any, text: str, version: int | None) -> FileAnalysis:
        return FileAnalysis(path=doc.path, version=version, evidence_complete=evidence_complete)

    async def compile_check(doc: Any, text: str, version: int | None, analysis: Any) -> None:
        checked.append(version)

    session._analyze = analyze  # type: ignore[method-assign]
    session._compile_check = compile_check  # type: ignore[method-assign]
    return session


async def test_no_read_of_the_workspace_will_come_the_compile_check_runs() -> None:
    """The workspace was read a moment ago (so no read is started): a capture that was told
    its evidence was incomplete is final, and gets its compile check. It got none, and the
    document never showed its FX6xx diagnostics."""
    checked: list[int | None] = []
    session = _session(checked, evidence_complete=False)
    session.workspace_read_at = time.monotonic()
    doc = session.documents.open("file:///w/net.py", "x = 1\n", 1)
    await session.capture(doc, 1, 0.0)
    assert checked == [1]
    assert session.lsp.published  # type: ignore[attr-defined]


async def test_a_read_of_the_workspace_is_running_the_capture_after_it_is_checked() -> None:
    checked: list[int | None] = []
    session = _session(checked, evidence_complete=False)
    session.reading_workspace = True  # its end captures the document again
    doc = session.documents.open("file:///w/net.py", "x = 1\n", 1)
    await session.capture(doc, 1, 0.0)
    assert checked == []


async def test_a_complete_capture_is_checked() -> None:
    checked: list[int | None] = []
    session = _session(checked, evidence_complete=True)
    doc = session.documents.open("file:///w/net.py", "x = 1\n", 1)
    await session.capture(doc, 1, 0.0)
    assert checked == [1]


async def test_the_heap_is_frozen_once_after_the_first_analysis(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What the server built by its first analysis is frozen (a full collection then walks
    only what later edits make); later analyses do not freeze again."""
    calls: list[str] = []
    monkeypatch.setattr(gc, "collect", lambda *args: calls.append("collect") or 0)
    monkeypatch.setattr(gc, "freeze", lambda: calls.append("freeze"))
    session = _session([], evidence_complete=True)
    doc = session.documents.open("file:///w/net.py", "x = 1\n", 1)
    assert not session.heap_frozen
    await session.capture(doc, 1, 0.0)
    assert calls == ["collect", "freeze"] and session.heap_frozen
    await session.capture(doc, 1, 0.0)
    assert calls == ["collect", "freeze"]
