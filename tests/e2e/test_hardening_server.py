"""The real server against hostile peers and hostile text: who may connect to ``fxls serve``
over TCP or a UNIX socket, what a notification, the graph page and every plain-text surface
carry from a repository or a model, and the children left after ``shutdown``.

Numbered cases continue the adversarial suite (``tests/worker/process/test_sandbox.py``).
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import re
import secrets
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import pytest_lsp
from lsprotocol import types
from markdown_it import MarkdownIt
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

ROOT = Path(__file__).resolve().parents[2]
needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch")
needs_proc = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
pytestmark = [pytest.mark.timeout(180)]

NO_EARLY_WORKER = {"FXLS_EARLY_WORKER": "0"}
"""No zygote before ``initialize``: any child of the server is then one a session started."""
VSCODE_LINK = re.compile(r"\[([^\]]+)\]\(((?:https?://|command:|file:)[^)\s]+)")
"""The link syntax of VS Code's notifications (``parseLinkedText``)."""
RENDERER = MarkdownIt("commonmark")
ACTIVE = {"link_open", "image", "html_inline", "html_block"}
INVISIBLE = "\u202e\u2066\u2069\u200b\u200d\ufeff\u061c\U000e0041"
"""Bidi override and isolates, zero-width space and joiner, BOM, Arabic letter mark, a tag."""


# -- processes ----------------------------------------------------------------------------


def children(pid: int) -> list[tuple[int, str]]:
    """(pid, state) of every process whose parent is ``pid`` (``/proc/*/stat``)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid:
            found.append((int(entry), fields[0]))
    return found


class Served:
    """``fxls serve ARGS`` as a subprocess; its stderr is collected by a thread."""

    def __init__(self, *args: str, env: dict[str, str], cwd: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "fxls", "serve", *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            cwd=cwd,
            env={**os.environ, **env},
        )
        self.lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)

    def address(self, timeout: float = 60.0) -> str:
        """Where it listens, from its ``fxls: listening on ...`` line."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if line.startswith("fxls: listening on "):
                    return line.removeprefix("fxls: listening on ").strip()
            if self.proc.poll() is not None:
                raise AssertionError(f"fxls serve exited: {''.join(self.lines)[-2000:]}")
            time.sleep(0.05)
        raise AssertionError(f"fxls serve did not listen: {''.join(self.lines)[-2000:]}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


class Raw:
    """Content-Length framed JSON-RPC over one stream connection, nothing else in between."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    async def send(self, message: dict[str, Any] | bytes) -> None:
        body = message if isinstance(message, bytes) else json.dumps(message).encode()
        self.writer.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        await self.writer.drain()

    async def receive(self, timeout: float = 20.0) -> dict[str, Any] | None:
        """The next message, or None when the server closed the connection."""

        async def one() -> dict[str, Any] | None:
            length = None
            while True:
                line = await self.reader.readline()
                if not line:
                    return None
                if line.strip() == b"":
                    break
                name, _, value = line.decode().partition(":")
                if name.lower() == "content-length":
                    length = int(value)
            assert length is not None
            data: dict[str, Any] = json.loads(await self.reader.readexactly(length))
            return data

        return await asyncio.wait_for(one(), timeout)

    async def answer(self, msg_id: int) -> dict[str, Any]:
        """The response to request ``msg_id`` (notifications before it are skipped)."""
        while True:
            message = await self.receive()
            assert message is not None, "the server closed the connection"
            if message.get("id") == msg_id and "method" not in message:
                return message

    def close(self) -> None:
        self.writer.close()


def _initialize(msg_id: int, options: dict[str, Any], root: Path) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": msg_id,
        "method": "initialize",
        "params": {
            "processId": None,
            "rootUri": root.as_uri(),
            "capabilities": {},
            "initializationOptions": options,
        },
    }


async def _refused(connect: Any, first: dict[str, Any] | bytes) -> None:
    """A connection whose first message is ``first`` gets at most one error, and is closed (a
    server that refuses before reading may reset the connection instead)."""
    raw = Raw(*await connect())
    try:
        await raw.send(first)
        message = await raw.receive()
        if message is not None:
            assert "error" in message and "result" not in message, message
            assert await raw.receive() is None, "the connection stayed open"
    except (ConnectionResetError, BrokenPipeError):
        pass
    finally:
        raw.close()


def _marker_interpreter(tmp_path: Path) -> tuple[Path, Path]:
    """A program that leaves a marker file when run: the interpreter an intruder asks for."""
    marker = tmp_path / "intruder-ran"
    program = tmp_path / "intruder.sh"
    program.write_text(f"#!/bin/sh\ntouch {marker}\nexit 1\n")
    program.chmod(0o700)
    return program, marker


# -- 83, 84: who may connect --------------------------------------------------------------


@needs_torch
@needs_proc
@pytest.mark.asyncio(loop_scope="function")
async def test_83_tcp_acts_on_nothing_before_the_token(tmp_path: Path) -> None:
    """Without the token, with a wrong one or with another first message, a TCP connection
    gets an error and is closed: no initializationOptions are read (the interpreter they name
    never runs) and no worker starts. The right token opens a session that works, and the
    token is never logged. ``--tcp`` without a token, or on a non-loopback host, never
    listens."""
    token = secrets.token_urlsafe(24)
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n")
    for args, why in (
        (["--tcp", "127.0.0.1:0"], "needs a token"),
        (["--tcp", "0.0.0.0:0", "--token-file", str(token_file)], "open to other users"),
    ):
        token_file.chmod(0o644)
        done = subprocess.run(
            [sys.executable, "-m", "fxls", "serve", *args],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
            env={k: v for k, v in os.environ.items() if k != "FXLS_TOKEN"},
        )
        assert done.returncode == 2 and why in done.stderr, done.stderr
    token_file.chmod(0o600)
    done = subprocess.run(
        [sys.executable, "-m", "fxls", "serve", "--tcp", "0.0.0.0:0"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env={**os.environ, "FXLS_TOKEN": token},
    )
    assert done.returncode == 2 and "loopback only" in done.stderr, done.stderr

    program, marker = _marker_interpreter(tmp_path)
    env = {**NO_EARLY_WORKER, "FXLS_LOG_LEVEL": "INFO"}
    served = Served("--tcp", "127.0.0.1:0", "--token-file", str(token_file), env=env, cwd=tmp_path)
    client = pytest_lsp.make_test_lsp_client()
    try:
        host, port = served.address().rsplit(":", 1)
        assert host == "127.0.0.1"

        def connect() -> Any:
            return asyncio.open_connection(host, int(port))

        hostile = {"python": str(program), "trusted": True, "isolation": {"seccomp": False}}
        for first in (
            _initialize(1, hostile, tmp_path),
            _initialize(1, {**hostile, "token": "x" * len(token)}, tmp_path),
            _initialize(1, {**hostile, "token": token[:-1]}, tmp_path),
            _initialize(1, {**hostile, "token": [token]}, tmp_path),
            {"jsonrpc": "2.0", "id": 1, "method": "fxls/stats", "params": {"token": token}},
            b"{not json",
        ):
            await _refused(connect, first)
        await asyncio.sleep(0.5)
        assert served.proc.poll() is None, "a refused connection ended the server"
        assert children(served.proc.pid) == [], "a refused connection started a worker"
        assert not marker.exists()

        await client.start_tcp(host, int(port))
        result = await client.initialize_session(
            types.InitializeParams(
                capabilities=client_capabilities("visual-studio-code"),
                root_uri=tmp_path.as_uri(),
                initialization_options={"token": token, "debounceMs": 50},
            )
        )
        assert result.capabilities.hover_provider
        deadline = time.monotonic() + 90
        stats = await client.protocol.send_request_async("fxls/stats", None)
        while stats.workerPid is None and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
            stats = await client.protocol.send_request_async("fxls/stats", None)
        assert stats.trusted and stats.workerPid is not None
        # one session at a time: a second client, even with the token, is refused
        await _refused(connect, _initialize(1, {"token": token}, tmp_path))
        await client.shutdown_session()
        assert served.proc.wait(timeout=30) == 0
        assert token not in "".join(served.lines)
        assert not marker.exists()
    finally:
        served.stop()
        await client.stop()


@pytest.mark.asyncio(loop_scope="function")
async def test_84_socket_is_private_and_touches_nothing_else(tmp_path: Path) -> None:
    """``--socket PATH``: the folder is made with mode 0700 when missing, the socket has mode
    0600; a folder open to others, a file that is not a socket or a socket another server
    listens on is refused (and left alone); a stale socket is replaced. A session works over
    it and the socket file is removed at the end."""

    def refused(path: Path, why: str) -> None:
        done = subprocess.run(
            [sys.executable, "-m", "fxls", "serve", "--socket", str(path)],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
            env={**os.environ, **NO_EARLY_WORKER},
        )
        assert done.returncode == 2 and why in done.stderr, done.stderr

    open_folder = tmp_path / "open"
    open_folder.mkdir()
    open_folder.chmod(0o755)
    refused(open_folder / "fxls.sock", "open to other users")
    assert list(open_folder.iterdir()) == []
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    regular = private / "fxls.sock"
    regular.write_text("keep me")
    refused(regular, "not a socket")
    assert regular.read_text() == "keep me"
    regular.unlink()
    with socket.socket(socket.AF_UNIX) as live:
        live.bind(str(regular))
        live.listen()
        refused(regular, "another server listens")
    assert stat.S_ISSOCK(regular.lstat().st_mode)  # left by the closed listener: stale

    path = tmp_path / "run" / "fxls.sock"
    for where in (path, regular):
        served = Served("--socket", str(where), env=NO_EARLY_WORKER, cwd=tmp_path)
        try:
            assert served.address() == str(where)
            assert stat.S_IMODE(where.parent.stat().st_mode) == 0o700
            assert stat.S_ISSOCK(where.lstat().st_mode)
            assert stat.S_IMODE(where.lstat().st_mode) == 0o600
            raw = Raw(*await asyncio.open_unix_connection(str(where)))
            await raw.send(_initialize(1, {"trusted": False}, tmp_path))
            assert "result" in await raw.answer(1)
            await raw.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})
            await raw.send({"jsonrpc": "2.0", "id": 2, "method": "fxls/stats", "params": None})
            assert (await raw.answer(2))["result"]["trusted"] is False
            await raw.send({"jsonrpc": "2.0", "id": 3, "method": "shutdown", "params": None})
            await raw.answer(3)
            await raw.send({"jsonrpc": "2.0", "method": "exit", "params": None})
            assert served.proc.wait(timeout=30) == 0
            raw.close()
            assert not os.path.lexists(where)
        finally:
            served.stop()


# -- 85: notifications --------------------------------------------------------------------

NOTICE_SERVER = ClientServerConfig(
    server_command=[sys.executable, "-m", "fxls", "serve"], server_env=NO_EARLY_WORKER
)


@pytest_lsp.fixture(config=NOTICE_SERVER)
async def untrusted(lsp_client: LanguageClient):
    await lsp_client.initialize_session(
        types.InitializeParams(
            capabilities=client_capabilities("visual-studio-code"),
            root_uri=ROOT.as_uri(),
            initialization_options={"trusted": False},
        )
    )
    yield
    await lsp_client.shutdown_session()


@pytest.mark.asyncio(loop_scope="function")
async def test_85_settings_values_never_become_links_in_messages(untrusted: LanguageClient) -> None:
    """A settings value pushed by an untrusted workspace is quoted in a warning: VS Code's
    notification would render ``[label](command:...)`` there as a command link. The message
    keeps the text but no link, autolink or HTML forms, and no control or bidi character
    passes."""
    client = untrusted
    link = "[x](command:workbench.action.terminal.new)"
    hostile = {
        "debounceMs": link,
        "codeLens": {"enabled": "![i](https://h.example/i.png)\x1b]52;c;aGk=\x07\u202e"},
        "inlayHints": {"enabled": "<command:workbench.action.terminal.new> \\<https://h/>"},
    }
    seen = len(client.messages)
    client.workspace_did_change_configuration(
        types.DidChangeConfigurationParams(settings={"fxls": hostile})
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        found = [m.message for m in client.messages[seen:] if "settings" in m.message]
        if found:
            break
        await asyncio.sleep(0.05)
    assert found, "no warning about the settings"
    text = found[0]
    assert "command:workbench.action.terminal.new" in text  # the value is shown...
    assert "](" not in text and not VSCODE_LINK.search(text), text  # ...as no link
    tokens = {t.type for block in RENDERER.parse(text) for t in [block, *(block.children or [])]}
    assert not tokens & ACTIVE, (tokens, text)
    assert "<a " not in RENDERER.render(text)
    assert not any(ch in text for ch in "\x1b\x07\u202e"), text
    for message in client.log_messages:
        assert "](" not in message.message and "\x1b" not in message.message


# -- 86, 87: the graph page and plain-text surfaces, from a real capture -------------------

HOSTILE_MODEL = """\
import torch.nn as nn

SCRIPT = "<!--<script>alert(1)</script> & \\u2028 </script><!--"
BIDI = "ok\\u202e)x(gnol\\u2066 \\u200bzero\\ufeff \\U000e0041 \\u061c"


class Leaf(nn.Module):
    def extra_repr(self):
        return SCRIPT + BIDI

    def forward(self, x):
        return x + 1


# fxls: x = (B, 4)
# fxls: leaf Leaf
class Page(nn.Module):
    def __init__(self):
        super().__init__()
        self.leaf = Leaf()

    def forward(self, x):
        return self.leaf(x)


# fxls: x = (B, 4)
class Fails(nn.Module):
    def forward(self, x):
        raise RuntimeError("bad " + BIDI)
"""
CAPTURE_SERVER = ClientServerConfig(server_command=[sys.executable, "-m", "fxls", "serve"])


@pytest_lsp.fixture(config=CAPTURE_SERVER, scope="module")
async def captured(lsp_client: LanguageClient, tmp_path_factory: pytest.TempPathFactory):
    """A trusted session with the hostile model open and captured; ``client.hostile`` is
    (its uri, its first diagnostics)."""
    root = tmp_path_factory.mktemp("hostile")
    path = root / "hostile_page.py"
    path.write_text(HOSTILE_MODEL)
    published: list[types.PublishDiagnosticsParams] = []
    features = lsp_client.protocol.fm.features
    original = features[types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS]

    def record(params: types.PublishDiagnosticsParams) -> None:
        published.append(params)
        original(params)

    features[types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS] = record
    for method in (types.WORKSPACE_INLAY_HINT_REFRESH, types.WORKSPACE_CODE_LENS_REFRESH):
        features[method] = lambda params: None
    await lsp_client.initialize_session(
        types.InitializeParams(
            capabilities=client_capabilities("visual-studio-code"),
            root_uri=root.as_uri(),
            initialization_options={"debounceMs": 50},
        )
    )
    uri = path.as_uri()
    lsp_client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(
                uri=uri, language_id="python", version=1, text=HOSTILE_MODEL
            )
        )
    )
    deadline = time.monotonic() + 120
    while not any(p.uri == uri for p in published) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    found = next(p for p in published if p.uri == uri)
    lsp_client.hostile = (uri, list(found.diagnostics))  # type: ignore[attr-defined]
    yield
    await lsp_client.shutdown_session()


def _embedded_json(page: str) -> str:
    """The text of the graph's JSON ``<script>`` element, up to the first ``</script>``
    (where an HTML parser in the plain script state ends it)."""
    opening = '<script type="application/json" id="fxls-data">'
    start = page.index(opening) + len(opening)
    return page[start : page.index("</script>", start)]


@needs_torch
@pytest.mark.asyncio(loop_scope="module")
async def test_86_graph_page_json_cannot_end_or_hide_its_script(captured: LanguageClient) -> None:
    """``<!--<script>`` in an ``extra_repr`` put the HTML parser into the state where the
    page's own ``</script>`` is skipped (a blank graph page and VS Code graph view). The
    embedded JSON holds no ``<``, ``>`` or ``&`` and reads back the exact strings."""
    client, (uri, _) = captured, captured.hostile  # type: ignore[attr-defined]
    answer = await client.protocol.send_request_async(
        "fxls/graph", {"uri": uri, "className": "Page"}
    )
    page = answer.html
    assert isinstance(page, str), answer
    text = _embedded_json(page)
    assert not set("<>&\u2028\u2029") & set(text), text[:500]
    data = json.loads(text)
    types_of = [n["module_type"] for n in data["nodes"] if n.get("module_type")]
    script = "<!--<script>alert(1)</script> & \u2028 </script><!--"
    assert any(script in t for t in types_of), types_of
    # the element ends where the JSON ends: the viewer's scripts follow it intact
    after = page[page.index(text) + len(text) :]
    assert after.startswith("</script>\n<script>\n/* @dagrejs/dagre")


@needs_torch
@pytest.mark.asyncio(loop_scope="module")
async def test_87_invisible_and_bidi_characters_are_shown_escaped(
    captured: LanguageClient,
) -> None:
    """Bidi overrides and isolates, zero-width characters, the BOM and tag characters from a
    model reach no diagnostic, code lens title, inlay hint or hover: each is shown as an
    escape (``\\u202e``) instead."""
    client, (uri, diagnostics) = captured, captured.hostile  # type: ignore[attr-defined]
    lines = HOSTILE_MODEL.split("\n")
    texts: list[str] = []
    for d in diagnostics:
        texts.append(d.message)
        texts.extend(r.message for r in d.related_information or [])
    lenses = await client.text_document_code_lens_async(
        types.CodeLensParams(text_document=types.TextDocumentIdentifier(uri=uri))
    )
    texts.extend(lens.command.title for lens in lenses or [] if lens.command is not None)
    hints = await client.text_document_inlay_hint_async(
        types.InlayHintParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            range=types.Range(types.Position(0, 0), types.Position(len(lines), 0)),
        )
    )
    for hint in hints or []:
        texts.append(hint.label if isinstance(hint.label, str) else "")
        if isinstance(hint.tooltip, types.MarkupContent):
            texts.append(hint.tooltip.value)
    for number, line in enumerate(lines):
        if not any(n in line for n in ("self.leaf(x)", "class Fails", "class Page")):
            continue
        for col in range(len(line) - len(line.lstrip()), len(line), 2):
            result = await client.text_document_hover_async(
                types.HoverParams(
                    text_document=types.TextDocumentIdentifier(uri=uri),
                    position=types.Position(line=number, character=col),
                )
            )
            if result is not None:
                assert isinstance(result.contents, types.MarkupContent)
                texts.append(result.contents.value)
    joined = "\n".join(texts)
    assert "gnol" in joined and "bad ok" in joined, joined[:2000]  # the text itself arrived
    assert not set(INVISIBLE) & set(joined), [hex(ord(c)) for c in set(INVISIBLE) & set(joined)]
    for escape in ("\\u202e", "\\u2066", "\\u200b", "\\ufeff", "\\U000e0041"):
        assert escape in joined, escape


# -- 88: children after shutdown ----------------------------------------------------------


@needs_torch
@needs_proc
@pytest.mark.parametrize("delay", [0.0, 1.0])
def test_88_shutdown_while_the_worker_warms_up_leaves_no_zombie(
    tmp_path: Path, delay: float
) -> None:
    """A ``shutdown`` while the worker adopted from ``fxls serve``'s early start is still
    warming up killed it without reaping it: a zombie child of the server until it exited.
    After ``shutdown`` no child of the server is a zombie (or alive), and ``exit`` ends it
    with 0."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "fxls", "serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=tmp_path,
    )
    assert proc.stdin is not None and proc.stdout is not None

    def send(message: dict[str, Any]) -> None:
        body = json.dumps({"jsonrpc": "2.0", **message}).encode()
        assert proc.stdin is not None
        proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        proc.stdin.flush()

    def answer(msg_id: int) -> None:
        assert proc.stdout is not None
        while True:
            length = None
            while (line := proc.stdout.readline()).strip():
                if line.lower().startswith(b"content-length"):
                    length = int(line.split(b":")[1])
            assert length is not None, "the server closed its output"
            if json.loads(proc.stdout.read(length)).get("id") == msg_id:
                return

    try:
        send(_initialize(1, {}, tmp_path))
        answer(1)
        send({"method": "initialized", "params": {}})
        time.sleep(delay)
        send({"id": 2, "method": "shutdown", "params": None})
        answer(2)
        deadline = time.monotonic() + 3.0
        left = children(proc.pid)
        while time.monotonic() < deadline:
            left = children(proc.pid)
            assert not [c for c in left if c[1] == "Z"], f"zombie children: {left}"
            time.sleep(0.1)
        assert left == [], f"children left after shutdown: {left}"
        send({"method": "exit", "params": None})
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
