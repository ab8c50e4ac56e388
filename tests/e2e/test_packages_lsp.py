"""A model file of a package, opened with no directives through a real LSP client: it runs as
its module (relative imports, a lazily loaded package), and hovers show shapes.

The workspace is ``tests/fixtures/packages``: ``tinylib`` is laid out like the model libraries."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
import pytest_lsp
from harness import start_recording
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient

PACKAGES = Path(__file__).resolve().parents[1] / "fixtures" / "packages"
MODEL = PACKAGES / "tinylib" / "models" / "tiny" / "modeling_tiny.py"

pytestmark = [pytest.mark.worker, pytest.mark.asyncio(loop_scope="module")]

SERVER = ClientServerConfig(server_command=[sys.executable, "-m", "fxls", "serve"])


@pytest_lsp.fixture(config=SERVER, scope="module")
async def client(lsp_client: LanguageClient):
    await start_recording(
        lsp_client, PACKAGES, {"debounceMs": 50, "limits": {"timeoutSeconds": 60}}
    )
    yield
    await lsp_client.shutdown_session()


async def test_relative_imports_resolve_and_hovers_show_shapes(client: LanguageClient) -> None:
    text = MODEL.read_text()
    uri = MODEL.as_uri()
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(
                uri=uri, language_id="python", version=1, text=text
            )
        )
    )
    for _ in range(600):
        if uri in client.diagnostics:
            break
        await asyncio.sleep(0.1)
    diagnostics = client.diagnostics.get(uri, [])
    assert not [d for d in diagnostics if d.code == "FX404"], diagnostics
    assert not [d for d in diagnostics if d.severity == types.DiagnosticSeverity.Error], diagnostics
    lines = text.splitlines()
    line = next(i for i, t in enumerate(lines) if "self.mlp(self.norm(hidden_states))" in t)
    col = lines[line].index("self.mlp(") + 5
    hover = await client.text_document_hover_async(
        types.HoverParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            position=types.Position(line=line, character=col),
        )
    )
    assert hover is not None
    value = hover.contents.value if isinstance(hover.contents, types.MarkupContent) else ""
    assert "`self.mlp`" in value and "Linear(48, 96)" in value and "[B, T, 48]" in value, value
