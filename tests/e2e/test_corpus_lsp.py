"""Opening the corpus in an editor: every module class shows shapes on hover.

A real server and client (pytest-lsp) open each file of tests/corpus; for every module class the
hover on its name gives the class summary with its output shape. The corpus manifest says which
classes must have shapes (all but the ones it marks as expected to fail).
"""

from __future__ import annotations

import asyncio
import importlib.util
import re
import sys
from pathlib import Path

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
sys.path.insert(0, str(CORPUS))
import manifest  # noqa: E402

pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch"),
    pytest.mark.slow,
    pytest.mark.asyncio(loop_scope="module"),
]

SERVER = ClientServerConfig(server_command=[sys.executable, "-m", "fxls", "serve"])
SHAPE = re.compile(r"\[[^\]]*\d[^\]]*\]|\[[A-Z]")


@pytest_lsp.fixture(config=SERVER, scope="module")
async def client(lsp_client: LanguageClient):
    features = lsp_client.protocol.fm.features
    for method in (types.WORKSPACE_INLAY_HINT_REFRESH, types.WORKSPACE_CODE_LENS_REFRESH):
        features[method] = lambda params: None  # the capabilities announce them
    await lsp_client.initialize_session(
        types.InitializeParams(
            capabilities=client_capabilities("visual-studio-code"),
            root_uri=CORPUS.as_uri(),
            initialization_options={"debounceMs": 50, "limits": {"timeoutSeconds": 60}},
        )
    )
    yield
    await lsp_client.shutdown_session()


def _hover_text(hover: types.Hover | None) -> str:
    if hover is None:
        return ""
    contents = hover.contents
    return contents.value if isinstance(contents, types.MarkupContent) else str(contents)


async def _hover(client: LanguageClient, uri: str, line: int, col: int) -> str:
    hover = await client.text_document_hover_async(
        types.HoverParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            position=types.Position(line=line, character=col),
        )
    )
    return _hover_text(hover)


FILES = sorted({e.file for e in manifest.primary_entries()})


@pytest.mark.parametrize("file", FILES)
async def test_every_module_of_the_file_shows_shapes_on_hover(
    client: LanguageClient, file: str
) -> None:
    path = CORPUS / file
    text = path.read_text()
    uri = path.as_uri()
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
    assert uri in client.diagnostics, f"no diagnostics published for {file}"
    lines = text.splitlines()
    entries = [e for e in manifest.primary_entries() if e.file == file]
    missing = []
    for entry in entries:
        line = next(i for i, t in enumerate(lines) if re.match(rf"\s*class {entry.cls}\b", t))
        col = lines[line].index(entry.cls)
        summary = await _hover(client, uri, line, col + 1)
        assert summary.startswith(f"{entry.cls} · nn.Module"), (file, entry.cls, summary)
        output = re.search(r"\| output \| (.*) \|", summary)
        if entry.capture_xfail:
            continue
        if output is None or not SHAPE.search(output.group(1)):
            missing.append((entry.cls, summary))
    client.text_document_did_close(
        types.DidCloseTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri))
    )
    assert missing == [], missing
