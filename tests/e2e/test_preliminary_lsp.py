"""The first shapes of a new server with nothing stored: a preview job's (one run on meta tensors
at example sizes, before the worker has imported ``torch._dynamo``), marked preliminary in the
hover and the code lens and shown before any diagnostics are published (a preview has none:
the first publish stays the capture's), then the capture's, with named dimensions and not
marked. Through a real LSP client and a real server and worker."""

from __future__ import annotations

import asyncio
import os
import textwrap
from pathlib import Path

import pytest
from harness import published, server_session
from lsprotocol import types
from pytest_lsp import LanguageClient

pytestmark = [pytest.mark.worker, pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

MODEL = textwrap.dedent(
    """\
    import torch
    from torch import nn


    # fxls: x = (B, 16)
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(16, 4)

        def forward(self, x):
            return torch.relu(self.fc(x))
    """
)


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
    return str(hover.contents).replace("\\", "")


async def _lens(client: LanguageClient, uri: str) -> str:
    lenses = await client.text_document_code_lens_async(
        types.CodeLensParams(text_document=types.TextDocumentIdentifier(uri=uri))
    )
    assert lenses
    return " ".join(lens.command.title for lens in lenses if lens.command is not None)


def _open(client: LanguageClient, uri: str) -> None:
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(
                uri=uri, language_id="python", version=1, text=MODEL
            )
        )
    )


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("preliminary")
    (folder / "net.py").write_text(MODEL)
    return folder


async def _preliminary_hover(client: LanguageClient, uri: str) -> str | None:
    """The hover once it shows preliminary shapes; None when the capture's diagnostics were
    published first."""
    for _ in range(1200):
        if [p for p in client.published if p.uri == uri]:  # type: ignore[attr-defined]
            return None
        shown = await _hover(client, uri)
        if "preliminary" in shown:
            return shown
        await asyncio.sleep(0.02)
    raise AssertionError("neither preliminary shapes nor diagnostics")


async def test_a_new_server_shows_preliminary_shapes_then_the_capture(root: Path) -> None:
    uri = (root / "net.py").as_uri()
    async for client in server_session(
        root, {"debounceMs": 50, **{}}, {**os.environ, "FXLS_STORE": "0"}
    ):
        _open(client, uri)
        shown = await _preliminary_hover(client, uri)
        assert shown is not None, "the capture's diagnostics came before any preliminary shapes"
        assert "[2, 4]" in shown  # the example size of B, not its name
        assert "preliminary" in await _lens(client, uri)
        await published(client, uri, 1)  # the capture's, which replaces them
        (params,) = [p for p in client.published if p.uri == uri]  # type: ignore[attr-defined]
        assert params.version == 1
        final = await _hover(client, uri)
        assert "preliminary" not in final
        assert "[B, 4]" in final
        assert "preliminary" not in await _lens(client, uri)


async def test_no_preliminary_shapes_when_turned_off(root: Path) -> None:
    uri = (root / "net.py").as_uri()
    async for client in server_session(
        root, {"debounceMs": 50, **{"preliminaryShapes": False}}, {**os.environ, "FXLS_STORE": "0"}
    ):
        _open(client, uri)
        assert await _preliminary_hover(client, uri) is None
        await published(client, uri, 1)
        first = await _hover(client, uri)
        assert "preliminary" not in first and "[B, 4]" in first
