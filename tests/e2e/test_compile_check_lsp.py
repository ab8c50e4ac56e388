"""The compile check in the editor: the real server (``python -m fxls serve``) driven by
pytest-lsp's client, with the real worker. The shapes are published first; the FX6xx
diagnostics, the lens's graph count and the class hover's breaks follow for the same version;
``fxls.compileCheck.enabled`` turns it off."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import pytest
import pytest_lsp
from harness import ROOT, needs_worker, start_recording
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient

FIXTURES = ROOT / "tests" / "fixtures" / "compile"
BREAKS = FIXTURES / "breaks.py"
SERVER = ClientServerConfig(server_command=[sys.executable, "-m", "fxls", "serve"])

pytestmark = [needs_worker, pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]


@pytest_lsp.fixture(config=SERVER, scope="module")
async def client(lsp_client: LanguageClient):
    await start_recording(lsp_client, FIXTURES, {"debounceMs": 50, "storeResults": False})
    yield
    await lsp_client.shutdown_session()


def _open(client: LanguageClient, path: Path, text: str) -> str:
    uri = path.as_uri()
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(
                uri=uri, language_id="python", version=1, text=text
            )
        )
    )
    return uri


async def _published(
    client: LanguageClient, uri: str, want: str, timeout: float = 90.0, version: int = 1
) -> list[types.Diagnostic]:
    """The first diagnostics of ``version`` of ``uri`` that hold a diagnostic of code ``want``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for params in client.published:  # type: ignore[attr-defined]
            codes = {d.code for d in params.diagnostics}
            if params.uri == uri and params.version == version and want in codes:
                return list(params.diagnostics)
        await asyncio.sleep(0.05)
    raise AssertionError(f"no {want} for {uri} within {timeout} s")


def _line(text: str, fragment: str) -> int:
    """0-based line of ``fragment``."""
    return next(i for i, line in enumerate(text.splitlines()) if fragment in line)


async def test_breaks_diagnostics_lens_and_hover(client: LanguageClient) -> None:
    text = BREAKS.read_text()
    uri = _open(client, BREAKS, text)
    shapes = await _published(client, uri, "FX405")  # the capture comes first
    assert not [d for d in shapes if str(d.code).startswith("FX6")]
    found = await _published(client, uri, "FX601")
    breaks = sorted(
        (str(d.code), d.range.start.line) for d in found if str(d.code).startswith("FX6")
    )
    assert breaks == sorted(
        [
            ("FX601", _line(text, 'print("shape"')),
            ("FX602", _line(text, ".item()")),
            ("FX605", _line(text, "graph_break()")),
            ("FX603", _line(text, "if x.sum() > 0")),
        ]
    )
    for d in found:
        if str(d.code).startswith("FX6"):
            assert d.severity == types.DiagnosticSeverity.Warning
            assert d.code_description is None or "fx6" in d.code_description.href

    lenses = await client.text_document_code_lens_async(
        types.CodeLensParams(text_document=types.TextDocumentIdentifier(uri=uri))
    )
    assert lenses is not None
    titles = {lens.range.start.line: lens.command.title for lens in lenses if lens.command}
    assert titles[_line(text, "class Breaks")].endswith("compiles to 5 graphs (3 breaks)")
    assert titles[_line(text, "class Clean")].endswith("compiles whole")

    at = types.Position(line=_line(text, "class Breaks"), character=len("class B"))
    hover = await client.text_document_hover_async(
        types.HoverParams(text_document=types.TextDocumentIdentifier(uri=uri), position=at)
    )
    assert hover is not None and isinstance(hover.contents, types.MarkupContent)
    shown = hover.contents.value
    assert "compiles to 5 graphs (3 breaks)" in shown
    # each string from the worker is a code span (escaped, capped) in the table
    assert f"`line {_line(text, 'print(') + 1} in debug_shape: FX601 " in shown
    assert "FX605" in shown


async def test_the_setting_turns_it_off(client: LanguageClient, tmp_path: Path) -> None:
    client.workspace_did_change_configuration(
        types.DidChangeConfigurationParams(settings={"fxls": {"compileCheck": {"enabled": False}}})
    )
    path = FIXTURES / "breaks_off.py"  # never written: the editor's text is what runs
    uri = _open(client, path, BREAKS.read_text())
    found = await _published(client, uri, "FX405")
    await asyncio.sleep(3.0)  # time for a compile check, were it to run
    later = [p for p in client.published if p.uri == uri]  # type: ignore[attr-defined]
    codes = {str(d.code) for p in later for d in p.diagnostics}
    assert found and not {c for c in codes if c.startswith("FX6")}


async def test_remove_a_debug_print_from_its_graph_break(client: LanguageClient) -> None:
    """FX601's quick fix through the editor: listed at the print, resolved (verified in the
    sandbox) to an edit that deletes exactly that line."""
    client.workspace_did_change_configuration(
        types.DidChangeConfigurationParams(settings={"fxls": {"compileCheck": {"enabled": True}}})
    )
    path = FIXTURES / "breaks_fix.py"  # never written: the editor's text is what runs
    text = BREAKS.read_text()
    uri = _open(client, path, text)
    found = await _published(client, uri, "FX601")
    (fx601,) = [d for d in found if d.code == "FX601"]
    result = await client.text_document_code_action_async(
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            range=fx601.range,
            context=types.CodeActionContext(diagnostics=[fx601]),
        )
    )
    actions = [a for a in result or [] if isinstance(a, types.CodeAction)]
    (remove,) = [a for a in actions if a.title.startswith("Remove the debug call")]
    assert remove.title == 'Remove the debug call `print("shape", x.shape)`'
    done = await client.code_action_resolve_async(remove)
    assert done.disabled is None and done.edit is not None
    (change,) = done.edit.document_changes or []
    assert isinstance(change, types.TextDocumentEdit)
    (edit,) = change.edits
    assert isinstance(edit, types.TextEdit) and edit.new_text == ""
    assert (edit.range.start.line, edit.range.end.line) == (
        fx601.range.start.line,
        fx601.range.start.line + 1,
    )


async def test_an_unchanged_text_is_not_compiled_again(client: LanguageClient) -> None:
    """A new version with the same text (an edit and its undo), and a save: the compile check
    comes from the engine's cache, no compile job is sent."""
    path = FIXTURES / "breaks_again.py"  # never written: the editor's text is what runs
    text = BREAKS.read_text()
    uri = _open(client, path, text)
    first = await _published(client, uri, "FX601")
    before = (await client.protocol.send_request_async("fxls/stats", None)).compileCache
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)],
        )
    )
    again = await _published(client, uri, "FX601", version=2)
    assert sorted(str(d.code) for d in again) == sorted(str(d.code) for d in first)
    client.text_document_did_save(
        types.DidSaveTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri))
    )
    await asyncio.sleep(1.0)  # time for a check, were one to start
    after = (await client.protocol.send_request_async("fxls/stats", None)).compileCache
    assert (after.jobs, after.hits) == (before.jobs, before.hits + 1)
