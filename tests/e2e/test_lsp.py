"""The real server (`python -m fxls serve`) driven by pytest-lsp's client.

Every test runs the whole pipeline: server, sandboxed worker, capture, engine.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities
from pytest_lsp.client import make_test_lsp_client

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "lsp"
_MISSING = [
    name
    for name in ("fxls.engine.workerclient", "fxls.engine.analyze", "fxls.worker.process.zygote")
    if importlib.util.find_spec(name) is None
]
pytestmark = [
    pytest.mark.skipif(bool(_MISSING), reason=f"pipeline piece missing: {_MISSING}"),
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch"),
    pytest.mark.slow,
    # One server (and one warm worker) serves the whole module; each test uses its own documents.
    pytest.mark.asyncio(loop_scope="module"),
]

FAST = {"debounceMs": 50}
PUBLISH = types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS


def _record(client: LanguageClient) -> None:
    """Keep every publishDiagnostics (with its version), not only the latest per URI, and
    answer the refresh requests the client's capabilities announce."""
    client.published = []  # type: ignore[attr-defined]
    client.refreshes = []  # type: ignore[attr-defined]
    client.marks = {}  # type: ignore[attr-defined]
    features = client.protocol.fm.features
    original = features[PUBLISH]

    def record(params: types.PublishDiagnosticsParams) -> None:
        client.published.append(params)  # type: ignore[attr-defined]
        original(params)

    features[PUBLISH] = record
    for method in (types.WORKSPACE_INLAY_HINT_REFRESH, types.WORKSPACE_CODE_LENS_REFRESH):

        def refresh(params: None, method: str = method) -> None:
            client.refreshes.append(method)  # type: ignore[attr-defined]

        features[method] = refresh


async def _start(client: LanguageClient, options: dict[str, Any], caps: str) -> None:
    _record(client)
    await client.initialize_session(
        types.InitializeParams(
            capabilities=client_capabilities(caps),
            root_uri=FIXTURES.as_uri(),
            initialization_options=options,
        )
    )


SERVER = ClientServerConfig(server_command=[sys.executable, "-m", "fxls", "serve"])


@pytest_lsp.fixture(config=SERVER, scope="module")
async def client(lsp_client: LanguageClient):
    """A VS Code-like client, shared by the module's tests."""
    await _start(lsp_client, FAST, "visual-studio-code")
    yield
    await lsp_client.shutdown_session()


@pytest_lsp.fixture(config=SERVER, loop_scope="module")
async def untrusted(lsp_client: LanguageClient):
    """A client that says the workspace is not trusted."""
    await _start(lsp_client, {"trusted": False}, "visual-studio-code")
    yield
    await lsp_client.shutdown_session()


@pytest_lsp.fixture(config=SERVER, loop_scope="module")
async def nvim(lsp_client: LanguageClient):
    """A Neovim 0.11-like client (negotiates UTF-8 positions)."""
    await _start(lsp_client, FAST, "neovim@v0.11.0")
    yield
    await lsp_client.shutdown_session()


def _open(client: LanguageClient, name: str, text: str | None = None) -> tuple[str, str]:
    path = FIXTURES / name
    text = path.read_text() if text is None else text
    uri = path.as_uri()
    client.marks[uri] = len(client.published)  # type: ignore[attr-defined]
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(
                uri=uri, language_id="python", version=1, text=text
            )
        )
    )
    return uri, text


def _close(client: LanguageClient, uri: str) -> None:
    client.text_document_did_close(
        types.DidCloseTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri))
    )


def _published(client: LanguageClient, uri: str) -> list[types.PublishDiagnosticsParams]:
    """Diagnostics published for ``uri`` since it was last opened."""
    start = client.marks.get(uri, 0)  # type: ignore[attr-defined]
    return [p for p in client.published[start:] if p.uri == uri]  # type: ignore[attr-defined]


def _change(client: LanguageClient, uri: str, version: int, text: str) -> None:
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)],
        )
    )


async def _diagnostics(
    client: LanguageClient, uri: str, version: int = 1, timeout: float = 60.0
) -> list[types.Diagnostic]:
    """Wait for the diagnostics of ``uri`` at ``version``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for params in _published(client, uri):
            if params.version == version:
                return list(params.diagnostics)
        await asyncio.sleep(0.05)
    raise AssertionError(f"no diagnostics for {uri} v{version} within {timeout} s")


def _pos(text: str, needle: str, offset: int = 0, occurrence: int = 0) -> types.Position:
    """Position (UTF-16) of ``needle`` in ``text``; the fixtures used here are ASCII-only
    where this is used."""
    start = -1
    for _ in range(occurrence + 1):
        start = text.index(needle, start + 1)
    line = text.count("\n", 0, start)
    col = start - (text.rfind("\n", 0, start) + 1)
    return types.Position(line=line, character=col + offset)


async def _hover(client: LanguageClient, uri: str, pos: types.Position) -> str | None:
    result = await client.text_document_hover_async(
        types.HoverParams(text_document=types.TextDocumentIdentifier(uri=uri), position=pos)
    )
    if result is None:
        return None
    assert isinstance(result.contents, types.MarkupContent)
    # Shapes and every other string from the worker are code spans (`[B, 64]`), so that no
    # client reads them as links; the assertions below read the text without the backticks
    # (none of these fixtures has a backtick of its own).
    assert "[" not in re.sub(r"`[^`]*`", "", result.contents.value)
    return result.contents.value.replace("`", "")


async def test_hover_named_arguments_defaults_shapes_loops(client: LanguageClient) -> None:
    uri, text = _open(client, "resnet_block.py")
    await _diagnostics(client, uri)

    md = await _hover(client, uri, _pos(text, "self.conv1(x)", 6))
    assert md is not None
    # the output first, then the module with its constructor, then the arguments as written
    assert md.startswith(
        "→ [B, 64, 112, 112] float32\n\nconv1 · Conv2d(3, 64, kernel_size=(7, 7), "
        "stride=(2, 2), padding=(3, 3), bias=False)"
    )
    assert "| input | x | [B, 3, 224, 224] float32 |" in md

    md = await _hover(client, uri, _pos(text, "F.conv2d", 3))
    assert md is not None
    assert "| stride | 2 |" in md
    assert "| padding | 0 | *default* |" in md
    assert "| dilation | 1 | *default* |" in md

    md = await _hover(client, uri, _pos(text, "block(x)", 1))
    assert md is not None and "×4: blocks.0 … blocks.3" in md

    md = await _hover(client, uri, _pos(text, "adaptive_avg_pool2d", 1))
    assert md is not None and "adaptive_avg_pool2d" in md

    md = await _hover(client, uri, _pos(text, "class Stem", 7))
    assert md is not None
    assert md.startswith("Stem · nn.Module · traced")
    assert "parameters" in md and "| input x | [B, 3, 224, 224] float32 (declared) |" in md

    assert await _hover(client, uri, _pos(text, "import torch")) is None
    _close(client, uri)


async def test_inlay_hints_and_code_lens(client: LanguageClient) -> None:
    uri, text = _open(client, "resnet_block.py")
    await _diagnostics(client, uri)
    lines = text.split("\n")
    hints = await client.text_document_inlay_hint_async(
        types.InlayHintParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            range=types.Range(types.Position(0, 0), types.Position(len(lines), 0)),
        )
    )
    assert hints
    by_line = {h.position.line: h.label for h in hints}
    conv_line = _pos(text, "x = self.conv1(x)").line
    assert by_line[conv_line] == "▸ [B, 64, 112, 112]"
    for hint in hints:
        assert hint.position.character == len(lines[hint.position.line])

    lenses = await client.text_document_code_lens_async(
        types.CodeLensParams(text_document=types.TextDocumentIdentifier(uri=uri))
    )
    assert lenses is not None and len(lenses) == 1
    (lens,) = lenses
    assert lens.range.start.line == _pos(text, "class Stem").line
    assert lens.command is not None
    title = lens.command.title
    assert title.startswith("fxls · ") and " nodes · " in title
    assert "params" in title and "[B, 3, 224, 224] → [B, 8]" in title
    assert types.WORKSPACE_CODE_LENS_REFRESH in client.refreshes  # type: ignore[attr-defined]
    _close(client, uri)


async def test_graph_request(client: LanguageClient) -> None:
    """``fxls/graph`` (the VS Code "Show graph" view): the HTML page of the captured class,
    with the nodes' source lines; an error for an unknown class."""
    uri, text = _open(client, "resnet_block.py")
    await _diagnostics(client, uri)
    graph = await client.protocol.send_request_async(
        "fxls/graph", {"uri": uri, "className": "Stem"}
    )
    html = graph.html
    assert html.startswith("<!DOCTYPE html>") and "dagre" in html and graph.nodes > 3
    conv_line = _pos(text, "x = self.conv1(x)").line + 1
    assert f'"line":{conv_line}' in html
    missing = await client.protocol.send_request_async(
        "fxls/graph", {"uri": uri, "className": "Nope"}
    )
    assert "no graph for Nope" in missing.error
    unopened = await client.protocol.send_request_async(
        "fxls/graph", {"uri": uri + "x", "className": "Stem"}
    )
    assert "not been analysed" in unopened.error
    _close(client, uri)


async def test_diagnostics_codes_ranges_and_links(client: LanguageClient) -> None:
    uri, text = _open(client, "shape_error.py")
    diags = await _diagnostics(client, uri)
    by_code = {d.code: d for d in diags}
    assert "FX201" in by_code, [(d.code, d.message) for d in diags]
    shape = by_code["FX201"]
    assert shape.source == "fxls"
    assert shape.severity == types.DiagnosticSeverity.Error
    assert shape.range.start.line == _pos(text, "self.fc(x)").line
    assert shape.code_description is not None
    assert shape.code_description.href.endswith("#fx201")
    if "FX302" in by_code:
        assert list(by_code["FX302"].tags or []) == [types.DiagnosticTag.Unnecessary]
    _close(client, uri)


async def test_utf8_positions_after_non_ascii(nvim: LanguageClient) -> None:
    uri, text = _open(nvim, "non_ascii.py")
    await _diagnostics(nvim, uri)
    line_text = next(line for line in text.split("\n") if "self.fc(x)" in line)
    line = text.split("\n").index(line_text)
    byte_col = len(line_text[: line_text.index("self.fc")].encode())
    md = await _hover(nvim, uri, types.Position(line=line, character=byte_col + 5))
    assert md is not None and "\n\nfc · Linear(" in md
    result = await nvim.text_document_hover_async(
        types.HoverParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            position=types.Position(line=line, character=byte_col + 5),
        )
    )
    assert result is not None and result.range is not None
    assert result.range.start.character == byte_col


async def test_progress_for_slow_capture(client: LanguageClient) -> None:
    before = set(client.progress_reports)
    uri, _ = _open(client, "slow_import.py")
    await _diagnostics(client, uri)
    await asyncio.sleep(0.2)
    new = [client.progress_reports[t] for t in client.progress_reports if t not in before]
    assert len(new) == 1
    kinds = [type(r).__name__ for r in new[0]]
    assert kinds == ["WorkDoneProgressBegin", "WorkDoneProgressEnd"]
    _close(client, uri)


async def test_settings_change_applies(client: LanguageClient) -> None:
    uri, text = _open(client, "resnet_block.py")
    await _diagnostics(client, uri)
    seen = len(client.messages)
    client.set_configuration({"inlayHints": {"enabled": False}, "debounceMs": -5}, section="fxls")
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))
    deadline = time.monotonic() + 10
    while len(client.messages) == seen and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    (warning,) = client.messages[seen:]
    assert "fxls.debounceMs" in warning.message
    assert warning.type == types.MessageType.Warning
    hints = await client.text_document_inlay_hint_async(
        types.InlayHintParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            range=types.Range(types.Position(0, 0), types.Position(40, 0)),
        )
    )
    assert not hints
    assert await _hover(client, uri, _pos(text, "self.conv1(x)", 6)) is not None
    client.set_configuration(FAST, section="fxls")
    client.workspace_did_change_configuration(
        types.DidChangeConfigurationParams(settings={"fxls": FAST})
    )
    await asyncio.sleep(0.2)
    _close(client, uri)


async def test_untrusted_runs_nothing(untrusted: LanguageClient) -> None:
    client = untrusted
    deadline = time.monotonic() + 10
    while not client.messages and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert len(client.messages) == 1
    assert client.messages[0].type == types.MessageType.Info
    message = client.messages[0].message
    assert "Workspace Trust" in message  # what a VS Code user does
    assert '{"trusted": true}' in message and "initializationOptions" in message  # other clients
    uri, text = _open(client, "resnet_block.py")
    await asyncio.sleep(1.0)
    assert uri not in client.diagnostics
    assert await _hover(client, uri, _pos(text, "self.conv1(x)", 6)) is None


async def test_syntax_error_while_typing(client: LanguageClient) -> None:
    uri, text = _open(client, "resnet_block.py")
    await _diagnostics(client, uri)
    broken = text.replace("x = block(x)", "x = block(x", 1)
    broken = "# a new first line\n" + broken
    _change(client, uri, 2, broken)
    diags = await _diagnostics(client, uri, version=2)
    assert [d.code for d in diags] == ["FX404"]
    assert "SyntaxError" in diags[0].message
    # The last good capture still answers hovers on lines that did not change, moved down.
    md = await _hover(client, uri, _pos(broken, "self.conv1(x)", 6))
    assert md is not None and "\n\nconv1 · Conv2d(" in md
    assert await _hover(client, uri, _pos(broken, "block(x", 1)) is None
    _change(client, uri, 3, text)
    assert [d for d in await _diagnostics(client, uri, version=3) if d.code == "FX404"] == []
    _close(client, uri)


async def test_close_while_job_runs(client: LanguageClient) -> None:
    uri, _ = _open(client, "slow_import.py")
    await asyncio.sleep(0.3)
    _close(client, uri)
    other, _ = _open(client, "shape_error.py")
    await _diagnostics(client, other)
    await asyncio.sleep(2.0)
    assert all(not p.diagnostics for p in _published(client, uri))
    _close(client, other)


async def test_stdout_flood_with_fake_headers(client: LanguageClient) -> None:
    uri, text = _open(client, "flood.py")
    diags = await _diagnostics(client, uri)
    assert all(d.source == "fxls" for d in diags)
    md = await _hover(client, uri, _pos(text, "self.fc(x)", 6))
    assert md is not None and "→ [B, 3] float32" in md
    assert client.error is None
    _close(client, uri)


async def test_spinning_v1_is_cancelled_by_v2(client: LanguageClient) -> None:
    good = (FIXTURES / "shape_error.py").read_text()
    spin = "while True:\n    pass\n" + good
    uri, _ = _open(client, "shape_error.py", spin)
    await asyncio.sleep(0.5)
    started = time.monotonic()
    _change(client, uri, 2, good)
    diags = await _diagnostics(client, uri, version=2, timeout=8.0)
    assert time.monotonic() - started < 8.0
    assert "FX201" in [d.code for d in diags]
    await asyncio.sleep(0.5)
    assert {p.version for p in _published(client, uri)} == {2}
    _close(client, uri)


def _worker_pid(client: LanguageClient) -> int | None:
    for message in client.log_messages:
        match = re.search(r"worker (\d+) ready", message.message)
        if match:
            return int(match.group(1))
    return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie still answers kill(0); it has no process state left to leak
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


async def _wait_for_worker(client: LanguageClient) -> int:
    deadline = time.monotonic() + 60
    while (pid := _worker_pid(client)) is None and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert pid is not None, "the worker never reported ready"
    return pid


@pytest_lsp.fixture(config=SERVER, loop_scope="module")
async def watched(lsp_client: LanguageClient):
    """A client whose ``processId`` is a stand-in editor process the test can kill."""
    editor = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    lsp_client.editor = editor  # type: ignore[attr-defined]
    _record(lsp_client)
    await lsp_client.initialize_session(
        types.InitializeParams(
            capabilities=client_capabilities("visual-studio-code"),
            root_uri=FIXTURES.as_uri(),
            process_id=editor.pid,
        )
    )
    yield
    editor.kill()
    editor.wait()


async def test_exits_with_its_worker_when_the_editor_dies(watched: LanguageClient) -> None:
    client = watched
    worker = await _wait_for_worker(client)
    server = client._server
    assert server is not None and _alive(worker)
    client.editor.kill()  # type: ignore[attr-defined]
    client.editor.wait()  # type: ignore[attr-defined]
    await asyncio.wait_for(server.wait(), timeout=15)
    deadline = time.monotonic() + 5
    while _alive(worker) and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert not _alive(worker)


async def test_shutdown_stops_the_worker(nvim: LanguageClient) -> None:
    worker = await _wait_for_worker(nvim)
    _open(nvim, "slow_import.py")
    await asyncio.sleep(0.5)  # a capture is running
    await nvim.shutdown_async(None)
    assert not _alive(worker)
    nvim.exit(None)
    assert nvim._server is not None
    assert await asyncio.wait_for(nvim._server.wait(), timeout=20) == 0
    nvim.capabilities = None  # the session is over: the fixture must not shut it down again


async def test_incremental_edits_keep_shapes_on_their_lines(client: LanguageClient) -> None:
    uri, text = _open(client, "resnet_block.py")
    await _diagnostics(client, uri)
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
            content_changes=[
                types.TextDocumentContentChangePartial(
                    range=types.Range(types.Position(0, 0), types.Position(0, 0)),
                    text="# one\n# two\n",
                )
            ],
        )
    )
    moved = "# one\n# two\n" + text
    # Asked right away: answered from the v1 result, shifted down by the two new lines.
    md = await _hover(client, uri, _pos(moved, "self.conv1(x)", 6))
    assert md is not None and "\n\nconv1 · Conv2d(" in md
    hints = await client.text_document_inlay_hint_async(
        types.InlayHintParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            range=types.Range(types.Position(0, 0), types.Position(100, 0)),
        )
    )
    moved_lines = moved.split("\n")
    labels = {moved_lines[h.position.line].strip(): h.label for h in hints or []}
    assert labels["x = self.conv1(x)"] == "▸ [B, 64, 112, 112]"
    await _diagnostics(client, uri, version=2)
    _close(client, uri)


@pytest.mark.asyncio(loop_scope="function")
async def test_tcp_mode_serves_hover() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    token = "a-token-of-the-test-session"
    server = subprocess.Popen(
        [sys.executable, "-m", "fxls", "serve", "--tcp", f"127.0.0.1:{port}"],
        env={**os.environ, "FXLS_TOKEN": token},
    )
    client = make_test_lsp_client()
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                await client.start_tcp("127.0.0.1", port)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.1)
        await _start(client, {**FAST, "token": token}, "visual-studio-code")
        uri, text = _open(client, "shape_error.py")
        diags = await _diagnostics(client, uri)
        assert "FX201" in [d.code for d in diags]
        md = await _hover(client, uri, _pos(text, "self.fc(x)", 6))
        assert md is not None and "\n\nfc · Linear(" in md
        await client.shutdown_async(None)
        client.exit(None)
        assert server.wait(timeout=20) == 0
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        await client.stop()


SLOW_IMPORT = """import time

import torch
from torch import nn

time.sleep(3)  # a slow import: the first capture takes a while


class Slow(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)

    def forward(self, x):
        return self.fc(x)
"""


async def test_a_hover_before_the_first_capture_says_what_is_happening(
    client: LanguageClient,
) -> None:
    """Hovering inside a class while its file's first capture runs says so (Neovim showed
    "No information available"); outside every class nothing is said; once the capture is
    done the hover shows shapes."""
    uri, text = _open(client, "slow_import.py", SLOW_IMPORT)
    lines = text.split("\n")
    inside = next(i for i, t in enumerate(lines) if "self.fc(x)" in t)
    outside = next(i for i, t in enumerate(lines) if t.startswith("time.sleep"))

    async def hover(line: int) -> str:
        got = await client.text_document_hover_async(
            types.HoverParams(
                text_document=types.TextDocumentIdentifier(uri=uri),
                position=types.Position(line=line, character=lines[line].index("s") + 1),
            )
        )
        if got is None:
            return ""
        return got.contents.value if isinstance(got.contents, types.MarkupContent) else ""

    await asyncio.sleep(0.5)
    early = await hover(inside)
    # "starting its worker (importing torch)" when the worker is not ready yet
    assert early.startswith("fxls · ") and "`Slow` appear here when it is done" in early, early
    assert await hover(outside) == ""
    await _diagnostics(client, uri)
    assert "[B, 2]" in await hover(inside)
    _close(client, uri)
