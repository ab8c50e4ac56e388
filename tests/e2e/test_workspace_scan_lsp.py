"""A large workspace through a real LSP client: reading it for calls of the module classes
shows work-done progress, and a class built from a call in another file gets its arguments
once the workspace is read (the first capture does not wait for the scan)."""

from __future__ import annotations

import asyncio
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import pytest_lsp
from harness import start_recording
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient

pytestmark = [pytest.mark.worker, pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

SERVER = ClientServerConfig(server_command=[sys.executable, "-m", "fxls", "serve"])
FILLER = 1500
"""Files besides the model: enough that reading them takes longer than the first capture (so
that capture goes ahead without them), in batches with progress."""
BODY = "".join(f"def f{i}(x):\n    return helper(x, {i}, key='k{i}')\n\n" for i in range(150))

MODEL = textwrap.dedent(
    """\
    from torch import nn


    class Tagger(nn.Module):
        def __init__(self, vocab, dim):
            super().__init__()
            self.emb = nn.Embedding(vocab, dim)
            self.out = nn.Linear(dim, 5)

        def forward(self, tokens):
            return self.out(self.emb(tokens))
    """
)


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("large")
    (root / "tagger.py").write_text(MODEL)
    scripts = root / "zz_scripts"  # read last
    scripts.mkdir()
    (scripts / "train.py").write_text("from tagger import Tagger\nmodel = Tagger(1000, 48)\n")
    for i in range(FILLER):
        folder = root / f"pkg{i // 100}"
        folder.mkdir(exist_ok=True)
        (folder / f"mod{i}.py").write_text(BODY)
    return root


@pytest_lsp.fixture(config=SERVER, scope="module")
async def client(lsp_client: LanguageClient, root: Path):
    await start_recording(lsp_client, root, {"debounceMs": 50})
    yield
    await lsp_client.shutdown_session()


async def test_the_scan_reports_progress_and_refines_the_first_capture(
    client: LanguageClient, root: Path
) -> None:
    uri = (root / "tagger.py").as_uri()
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(
                uri=uri, language_id="python", version=1, text=MODEL
            )
        )
    )

    def scans() -> list[list[Any]]:
        return [
            reports
            for reports in client.progress_reports.values()
            if reports
            and isinstance(reports[0], types.WorkDoneProgressBegin)
            and "reading the workspace" in (reports[0].message or "")
        ]

    def built_from_the_call() -> bool:
        published = [p for p in client.published if p.uri == uri]  # type: ignore[attr-defined]
        return bool(published) and not [d for d in published[-1].diagnostics if d.code == "FX408"]

    for _ in range(1200):
        done = scans() and isinstance(scans()[0][-1], types.WorkDoneProgressEnd)
        if done and built_from_the_call():
            break
        await asyncio.sleep(0.1)
    assert built_from_the_call(), client.published  # type: ignore[attr-defined]
    lines = MODEL.splitlines()
    line = next(i for i, t in enumerate(lines) if "self.emb(tokens)" in t)
    hover = await client.text_document_hover_async(
        types.HoverParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            position=types.Position(line=line, character=lines[line].index("self.emb") + 5),
        )
    )
    assert hover is not None and "48" in str(hover.contents)  # Tagger(1000, 48) from train.py
    (scan,) = scans()
    begin, end = scan[0], scan[-1]
    assert isinstance(begin, types.WorkDoneProgressBegin)
    assert isinstance(end, types.WorkDoneProgressEnd)
    assert f"{FILLER + 2} files" in (begin.message or "")
    assert any(isinstance(r, types.WorkDoneProgressReport) for r in scan)
