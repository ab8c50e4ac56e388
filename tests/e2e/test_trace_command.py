"""``workspace/executeCommand`` ``fxls.traceClass`` ("Trace class at cursor") through the real
server, worker and capture, driven by pytest-lsp's client.

The server runs with a one-minute debounce: an answer about the edited text within seconds
shows the command captured now instead of waiting for it.
"""

from __future__ import annotations

import asyncio
import importlib.util
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch"),
    pytest.mark.slow,
    pytest.mark.asyncio(loop_scope="module"),
]

ROOT = Path(__file__).resolve().parents[1] / "fixtures" / "lsp"
COMMAND = "fxls.traceClass"
SERVER = ClientServerConfig(server_command=[sys.executable, "-m", "fxls", "serve"])
SLOW_DEBOUNCE = {"debounceMs": 60_000}

MODEL = (ROOT / "nvim_model.py").read_text()

ASSUMED = textwrap.dedent(
    """\
    import torch.nn as nn


    class Block(nn.Module):
        def __init__(self, dim, hidden):
            super().__init__()
            self.fc1 = nn.Linear(dim, hidden)
            self.fc2 = nn.Linear(hidden, dim)

        def forward(self, x):
            return self.fc2(self.fc1(x).relu())


    class Plain:
        pass
    """
)


async def _start(client: LanguageClient, options: dict[str, Any]) -> types.InitializeResult:
    # answer the refresh requests that VS Code's capabilities announce
    for method in (types.WORKSPACE_INLAY_HINT_REFRESH, types.WORKSPACE_CODE_LENS_REFRESH):
        client.protocol.fm.features[method] = lambda params: None
    return await client.initialize_session(
        types.InitializeParams(
            capabilities=client_capabilities("visual-studio-code"),
            root_uri=ROOT.as_uri(),
            initialization_options=options,
        )
    )


@pytest_lsp.fixture(config=SERVER, scope="module")
async def client(lsp_client: LanguageClient):
    """A VS Code-like client with a one-minute debounce."""
    lsp_client.init_result = await _start(lsp_client, SLOW_DEBOUNCE)  # type: ignore[attr-defined]
    yield
    await lsp_client.shutdown_session()


@pytest_lsp.fixture(config=SERVER, loop_scope="module")
async def untrusted(lsp_client: LanguageClient):
    await _start(lsp_client, {"trusted": False})
    yield
    await lsp_client.shutdown_session()


def _open(client: LanguageClient, name: str, text: str) -> str:
    uri = (ROOT / name).as_uri()
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(
                uri=uri, language_id="python", version=1, text=text
            )
        )
    )
    return uri


def _close(client: LanguageClient, uri: str) -> None:
    client.text_document_did_close(
        types.DidCloseTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri))
    )


def _at(text: str, needle: str, offset: int = 0) -> dict[str, int]:
    start = text.index(needle)
    line = text.count("\n", 0, start)
    return {"line": line, "character": start - (text.rfind("\n", 0, start) + 1) + offset}


async def _trace(client: LanguageClient, uri: str, position: dict[str, int]) -> dict[str, Any]:
    """What a client sends: one TextDocumentPositionParams argument."""
    answer = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(
            command=COMMAND,
            arguments=[{"textDocument": {"uri": uri}, "position": position}],
        )
    )
    assert isinstance(answer, dict), answer
    return answer


async def test_the_command_is_advertised(client: LanguageClient) -> None:
    provider = client.init_result.capabilities.execute_command_provider  # type: ignore[attr-defined]
    assert provider is not None and COMMAND in provider.commands


async def test_traces_the_class_at_the_cursor_now(client: LanguageClient) -> None:
    uri = _open(client, "trace_now.py", MODEL)
    first = await _trace(client, uri, _at(MODEL, "self.fc2(h)"))
    assert first["kind"] == "traced", first
    assert first["className"] == "Mlp"
    assert first["line"] == MODEL.split("\n").index("class Mlp(nn.Module):")
    assert first["summary"].startswith("Mlp: traced (fx) · 5 nodes · ")
    assert "[B, 16] → [B, 4]" in first["summary"]
    assert first["details"][0] == "Mlp · nn.Module · traced (fx)"
    assert any(
        d.startswith("input x") and "[B, 16] float32 (declared)" in d for d in first["details"]
    )
    assert first["assumed"] == [] and first["graph"] is True
    assert first["version"] == 1

    # An edit waits out the one-minute debounce; the command does not.
    edited = MODEL.replace("nn.Linear(32, 4)", "nn.Linear(32, 7)")
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text=edited)],
        )
    )
    started = time.monotonic()
    second = await _trace(client, uri, _at(edited, "class Mlp", 8))
    assert time.monotonic() - started < 30  # the debounce is 60 s
    assert second["version"] == 2, second
    assert "[B, 16] → [B, 7]" in second["summary"], second
    _close(client, uri)


async def test_a_shape_error_is_reported_with_the_class(client: LanguageClient) -> None:
    uri = _open(client, "trace_failed.py", MODEL)
    # on the directive line above the class
    answer = await _trace(client, uri, _at(MODEL, "# fxls: x = (B, 8)", 3))
    assert answer["className"] == "Broken", answer
    # the graph is there up to the failing call; its shapes stop there
    assert answer["kind"] == "partial" and answer["status"] == "partial"
    assert answer["summary"].startswith("Broken: partial (fx) · 3 nodes · 68 params · FX201 shape")
    codes = [(d["code"], d["severity"]) for d in answer["diagnostics"]]
    assert ("FX201", "error") in codes
    fx201 = next(d for d in answer["diagnostics"] if d["code"] == "FX201")
    assert MODEL.split("\n")[fx201["line"]].strip() == "return self.fc(x)"
    _close(client, uri)


async def test_assumed_arguments_and_the_directive_that_pins_them(
    client: LanguageClient,
) -> None:
    uri = _open(client, "trace_assumed.py", ASSUMED)
    answer = await _trace(client, uri, _at(ASSUMED, "return self.fc2"))
    assert answer["className"] == "Block", answer
    assert answer["kind"] == "traced"
    assert "dim=64" in answer["assumed"] and "hidden=64" in answer["assumed"], answer
    assert "input x [B, 64] float32" in answer["assumed"], answer
    assert answer["pin"] == "# fxls: init(dim=64, hidden=64)", answer
    assert "inputs assumed" in answer["summary"]
    _close(client, uri)


async def test_outside_any_module_class(client: LanguageClient) -> None:
    uri = _open(client, "trace_outside.py", ASSUMED)
    for position in (_at(ASSUMED, "import torch"), _at(ASSUMED, "class Plain", 7)):
        answer = await _trace(client, uri, position)
        assert answer["kind"] == "noClass", answer
        assert "not in an nn.Module class" in answer["message"]
        assert "className" not in answer
    _close(client, uri)


async def test_progress_while_tracing(client: LanguageClient) -> None:
    uri = _open(client, "trace_progress.py", ASSUMED)
    before = set(client.progress_reports)
    await _trace(client, uri, _at(ASSUMED, "class Block", 7))
    await asyncio.sleep(0.2)
    new = [client.progress_reports[t] for t in client.progress_reports if t not in before]
    tracing = [r for r in new if getattr(r[0], "message", "") == "tracing Block"]
    assert len(tracing) == 1, new
    assert [type(r).__name__ for r in tracing[0]] == [
        "WorkDoneProgressBegin",
        "WorkDoneProgressEnd",
    ]
    _close(client, uri)


async def test_untrusted_workspace_traces_nothing(untrusted: LanguageClient) -> None:
    uri = _open(untrusted, "trace_untrusted.py", MODEL)
    answer = await _trace(untrusted, uri, _at(MODEL, "class Mlp", 7))
    assert answer["kind"] == "untrusted", answer
    assert "not trusted" in answer["message"]


async def test_a_file_that_does_not_parse(client: LanguageClient) -> None:
    broken = ASSUMED.replace("def forward(self, x):", "def forward(self, x:")
    uri = _open(client, "trace_syntax.py", broken)
    answer = await _trace(client, uri, _at(broken, "class Block", 7))
    assert answer["kind"] == "syntaxError", answer
    assert answer["message"].startswith("fxls: the file does not parse (line 10: ")
    _close(client, uri)
