"""Process lifecycle of the real server: no orphans, no zombies, nothing left behind.

The server under test runs with a unique environment variable. Every process it starts (the
zygote, each forked job child) inherits it, so ``/proc/*/environ`` finds them even when they
were re-parented away from the server; the parent chain in ``/proc/*/stat`` finds the rest.
(test_lsp.py checks that the zygote stops on shutdown and when the editor dies; these tests
check every process, with captures running at that moment.)
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import random
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_lsp
from harness import record
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "lsp"
TAG = f"FXLS_LIFECYCLE_TAG={uuid.uuid4().hex}"
PUBLISH = types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS
CYCLES = 100

pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch"),
    pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc"),
    pytest.mark.slow,
]

# -- /proc --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    state: str
    cmdline: str
    tagged: bool


def scan() -> dict[int, Proc]:
    """Every process on the machine that we may read."""
    out = {}
    key, value = TAG.split("=")
    needle = f"{key}={value}".encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{pid}/cmdline", "rb") as fb:
                cmdline = fb.read().replace(b"\0", b" ").decode(errors="replace").strip()
            try:
                with open(f"/proc/{pid}/environ", "rb") as fb:
                    tagged = needle in fb.read().split(b"\0")
            except PermissionError:
                tagged = False
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        out[pid] = Proc(pid, int(fields[1]), fields[0], cmdline, tagged)
    return out


def family(server_pid: int) -> list[Proc]:
    """The server's descendants and every other process carrying the server's tag."""
    procs = scan()
    children: dict[int, list[int]] = {}
    for proc in procs.values():
        children.setdefault(proc.ppid, []).append(proc.pid)
    found = {p.pid for p in procs.values() if p.tagged and p.pid != server_pid}
    stack = list(children.get(server_pid, []))
    while stack:
        pid = stack.pop()
        if pid not in found:
            found.add(pid)
            stack.extend(children.get(pid, []))
    return [procs[pid] for pid in sorted(found) if pid in procs]


def zygotes(server_pid: int, procs: list[Proc]) -> list[Proc]:
    """The worker zygotes the server started (job children are forks with the same
    command line, one level further down)."""
    return [p for p in procs if "fxls.worker" in p.cmdline and p.ppid == server_pid]


async def settle(server_pid: int, want: int, timeout: float = 10.0) -> list[Proc]:
    """The server's family once it has at most ``want`` processes (or at the timeout)."""
    deadline = time.monotonic() + timeout
    while True:
        procs = family(server_pid)
        if len(procs) <= want or time.monotonic() > deadline:
            return procs
        await asyncio.sleep(0.05)


# -- client helpers --------------------------------------------------------------------------


async def _start(
    client: LanguageClient, process_id: int | None = None, options: dict[str, Any] | None = None
) -> None:
    record(client)
    await client.initialize_session(
        types.InitializeParams(
            capabilities=client_capabilities("visual-studio-code"),
            root_uri=FIXTURES.as_uri(),
            initialization_options={"debounceMs": 20, **(options or {})},
            process_id=process_id,
        )
    )


def _open(client: LanguageClient, name: str, text: str | None = None, version: int = 1) -> str:
    path = FIXTURES / name
    uri = path.as_uri()
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(
                uri=uri,
                language_id="python",
                version=version,
                text=path.read_text() if text is None else text,
            )
        )
    )
    return uri


def _close(client: LanguageClient, uri: str) -> None:
    client.text_document_did_close(
        types.DidCloseTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri))
    )


async def _published(
    client: LanguageClient, uri: str, version: int, timeout: float = 60.0
) -> types.PublishDiagnosticsParams:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for params in reversed(client.published):  # type: ignore[attr-defined]
            if params.uri == uri and params.version == version:
                return params
        await asyncio.sleep(0.02)
    raise AssertionError(f"no diagnostics for {uri} v{version}")


async def _stats(client: LanguageClient) -> Any:
    return await client.protocol.send_request_async("fxls/stats", None)


async def _job_running(client: LanguageClient, server_pid: int, timeout: float = 60.0) -> None:
    """Wait until a job child runs next to the zygote.

    Only once the worker is ready: while it starts, the zygote forks short-lived probe children
    that would otherwise pass for a job.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        procs = family(server_pid)
        running = len(zygotes(server_pid, procs)) == 1 and len(procs) >= 2
        if running and (await _stats(client)).workerPid is not None:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"no job child appeared: {family(server_pid)}")


def _server_pid(client: LanguageClient) -> int:
    assert client._server is not None
    return client._server.pid


SERVER = ClientServerConfig(
    server_command=[sys.executable, "-m", "fxls", "serve"],
    server_env={**os.environ, TAG.split("=")[0]: TAG.split("=")[1]},
)


@pytest_lsp.fixture(config=SERVER)
async def client(lsp_client: LanguageClient):
    await _start(lsp_client)
    yield
    await lsp_client.shutdown_session()


@pytest_lsp.fixture(config=SERVER)
async def watched(lsp_client: LanguageClient):
    """A server whose ``processId`` is a stand-in editor the test kills."""
    editor = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    lsp_client.editor = editor  # type: ignore[attr-defined]
    await _start(lsp_client, process_id=editor.pid)
    yield
    editor.kill()
    editor.wait()


@pytest_lsp.fixture(config=SERVER)
async def uninitialized(lsp_client: LanguageClient):
    """A server the test initializes itself."""
    yield


async def _early_zygote(server: int, timeout: float = 30.0) -> Proc:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = zygotes(server, family(server))
        if found:
            return found[0]
        await asyncio.sleep(0.02)
    raise AssertionError(f"no worker started before initialize: {family(server)}")


# -- tests ---------------------------------------------------------------------------------


async def test_the_worker_starts_before_initialize_and_is_adopted(
    uninitialized: LanguageClient,
) -> None:
    # torch loads while the server loads its own libraries: the zygote runs before the client
    # says anything, and the trusted session keeps that one instead of starting another
    client = uninitialized
    server = _server_pid(client)
    early = await _early_zygote(server)
    await _start(client)
    uri = _open(client, "shape_error.py")
    await _published(client, uri, 1)
    assert (await _stats(client)).workerPid == early.pid
    assert [z.pid for z in zygotes(server, family(server))] == [early.pid]
    await client.shutdown_session()


async def test_an_untrusted_workspace_stops_the_early_worker(
    uninitialized: LanguageClient,
) -> None:
    client = uninitialized
    server = _server_pid(client)
    await _early_zygote(server)
    await _start(client, options={"trusted": False})
    left = await settle(server, want=0, timeout=15.0)
    assert left == [], f"a worker runs in an untrusted workspace: {left}"
    assert (await _stats(client)).workerPid is None
    await client.shutdown_session()


async def test_open_close_cycles_leave_one_zygote_and_no_zombies(client: LanguageClient) -> None:
    server = _server_pid(client)
    text = (FIXTURES / "shape_error.py").read_text()
    uri = _open(client, "shape_error.py", text)
    await _published(client, uri, 1)  # the worker is warm
    _close(client, uri)
    zygote = (await _stats(client)).workerPid
    assert zygote is not None

    rng = random.Random(1234)
    captured = 0
    max_family = 0
    for cycle in range(CYCLES):
        version = cycle + 2
        # module-level code (not a comment): every version captures again, cache or not
        _open(client, "shape_error.py", f"CYCLE = {cycle}\n{text}", version)
        if cycle % 4 == 0:
            params = await _published(client, uri, version)
            captured += bool(params.diagnostics)
        else:
            await asyncio.sleep(rng.uniform(0.0, 0.08))
        procs = family(server)
        assert len(zygotes(server, procs)) == 1, procs
        max_family = max(max_family, len(procs))
        _close(client, uri)

    assert captured >= CYCLES // 4, "captures did not run during the cycles"
    assert max_family >= 2, "no job child was ever seen running"
    # the last job (a capture, or the compile check after it) ends on its own: on a loaded
    # machine that can take longer than the default wait
    procs = await settle(server, want=1, timeout=45.0)
    assert [p for p in procs if p.state == "Z"] == [], procs
    assert [p.pid for p in procs] == [zygote], procs
    assert zygotes(server, procs) == procs
    assert (await _stats(client)).workerPid == zygote, "the zygote was restarted"
    assert [z for z in scan().values() if z.state == "Z" and z.ppid == server] == []


async def test_shutdown_during_a_capture_leaves_nothing(client: LanguageClient) -> None:
    server = _server_pid(client)
    _open(client, "slow_import.py")
    await _job_running(client, server)
    before = family(server)
    assert len(before) >= 2

    await client.shutdown_async(None)
    client.exit(None)
    assert client._server is not None
    assert await asyncio.wait_for(client._server.wait(), timeout=30) == 0
    client.capabilities = None  # the session is over: the fixture must not shut it down again
    left = await settle(server, want=0, timeout=5.0)
    assert left == [], f"left behind after exit: {left}"


async def test_editor_death_during_a_capture_leaves_nothing(watched: LanguageClient) -> None:
    client = watched
    server = _server_pid(client)
    _open(client, "slow_import.py")
    await _job_running(client, server)

    client.editor.kill()  # type: ignore[attr-defined]
    client.editor.wait()  # type: ignore[attr-defined]
    assert client._server is not None
    await asyncio.wait_for(client._server.wait(), timeout=20)
    left = await settle(server, want=0, timeout=5.0)
    assert left == [], f"left behind after the editor died: {left}"
