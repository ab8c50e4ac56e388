"""Shapes of the last session at once: a second server shows what the first stored for the
same text (marked as stored in the hover) before its own worker has started, then replaces it
with its fresh capture. Through a real LSP client, with a worker interpreter that starts slowly
so the order is certain."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest
from harness import LINEAR_NET, published, server_session
from lsprotocol import types
from pytest_lsp import LanguageClient

pytestmark = [pytest.mark.worker, pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

MODEL = LINEAR_NET
SLOW_START_S = 6


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str], str]:
    root = tmp_path_factory.mktemp("store")
    (root / "net.py").write_text(MODEL)
    slow = root / "slow-python"
    slow.write_text(f'#!/bin/sh\nsleep {SLOW_START_S}\nexec {sys.executable} "$@"\n')
    slow.chmod(0o755)
    env = {**os.environ, "FXLS_STORE": "1", "XDG_CACHE_HOME": str(root / "cache")}
    return root, env, str(slow)


async def _hover(client: LanguageClient, uri: str) -> str:
    lines = MODEL.splitlines()
    line = next(i for i, t in enumerate(lines) if "self.fc(x)" in t)
    hover = await client.text_document_hover_async(
        types.HoverParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            position=types.Position(line=line, character=lines[line].index("self.fc") + 5),
        )
    )
    assert hover is not None
    return str(hover.contents)


def _open(client: LanguageClient, uri: str) -> None:
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(
                uri=uri, language_id="python", version=1, text=MODEL
            )
        )
    )


async def test_a_new_session_shows_the_stored_shapes_first(
    setup: tuple[Path, dict[str, str], str],
) -> None:
    root, env, python = setup
    uri = (root / "net.py").as_uri()
    async for first in server_session(root, {"debounceMs": 50, "python": python}, env):
        _open(first, uri)
        await published(first, uri, 1)
        assert "stored" not in await _hover(first, uri)
        for _ in range(100):  # written after the publish, in a thread
            if list((root / "cache" / "fxls" / "results").glob("*.json")):
                break
            await asyncio.sleep(0.05)
    assert len(list((root / "cache" / "fxls" / "results").glob("*.json"))) == 1
    async for second in server_session(root, {"debounceMs": 50, "python": python}, env):
        loop = asyncio.get_running_loop()
        opened = loop.time()
        _open(second, uri)
        await published(second, uri, 1)
        assert loop.time() - opened < SLOW_START_S  # before the worker could have started
        shown = await _hover(second, uri)
        assert "stored by an earlier session" in shown
        assert "[B, 4]" in shown.replace("\\", "")
        await published(second, uri, 2)  # the fresh capture replaces it
        assert "stored" not in await _hover(second, uri)
