"""What an editor shows for the fixtures of ``tests/worker/capture/test_shown_values.py``,
through the real server (``python -m fxls serve``), its worker and pytest-lsp's client:

- shapes after ``F.interpolate`` keep ``B``; shapes that hold for one batch size say so;
- a helper that returns its argument is not shown returning a size it computed inside;
- the residual of a block that runs in several instances shows one instance, named, with the
  number of the others that differ;
- a batch named and given as 1 says that a 1 shown may be it;
- a condition on tensor values is taken one way, and the diagnostic there says which.

The in-process test checks the same captures against eager runs at two batch sizes.
"""

from __future__ import annotations

import asyncio
import importlib.util
import re
import sys
import time

import pytest
import pytest_lsp
from harness import ROOT, needs_worker, start_recording
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient

FIXTURES = ROOT / "tests" / "fixtures" / "capture"

pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch"),
    pytest.mark.slow,
    needs_worker,
    pytest.mark.asyncio(loop_scope="module"),
]

SERVER = ClientServerConfig(server_command=[sys.executable, "-m", "fxls", "serve"])


@pytest_lsp.fixture(config=SERVER, scope="module")
async def client(lsp_client: LanguageClient):
    await start_recording(lsp_client, FIXTURES, {"debounceMs": 50})
    yield
    await lsp_client.shutdown_session()


async def _open(client: LanguageClient, name: str) -> tuple[str, str]:
    path = FIXTURES / name
    text = path.read_text(encoding="utf-8")
    uri = path.as_uri()
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(
                uri=uri, language_id="python", version=1, text=text
            )
        )
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if any(p.uri == uri for p in client.published):  # type: ignore[attr-defined]
            return uri, text
        await asyncio.sleep(0.05)
    raise AssertionError(f"no diagnostics for {name}")


def _pos(text: str, needle: str, offset: int = 0) -> types.Position:
    start = text.index(needle)
    line = text.count("\n", 0, start)
    col = start - (text.rfind("\n", 0, start) + 1)
    return types.Position(line=line, character=col + offset)


async def _hover(client: LanguageClient, uri: str, pos: types.Position) -> str:
    result = await client.text_document_hover_async(
        types.HoverParams(text_document=types.TextDocumentIdentifier(uri=uri), position=pos)
    )
    assert result is not None and isinstance(result.contents, types.MarkupContent)
    return re.sub(r"`", "", result.contents.value)


async def _hints(client: LanguageClient, uri: str, text: str) -> dict[int, str]:
    hints = await client.text_document_inlay_hint_async(
        types.InlayHintParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            range=types.Range(types.Position(0, 0), types.Position(text.count("\n") + 1, 0)),
        )
    )
    return {h.position.line: str(h.label) for h in hints or []}


async def _lenses(client: LanguageClient, uri: str) -> list[str]:
    lenses = await client.text_document_code_lens_async(
        types.CodeLensParams(text_document=types.TextDocumentIdentifier(uri=uri))
    )
    return [lens.command.title for lens in lenses or [] if lens.command is not None]


async def _every_lens(client: LanguageClient, uri: str, count: int) -> list[str]:
    """The lens titles once ``count`` classes have theirs (each class captured)."""
    titles = await _lenses(client, uri)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(titles) < count:
        await asyncio.sleep(0.2)
        titles = await _lenses(client, uri)
    return titles


async def test_shapes_after_a_fixed_batch_size(client: LanguageClient) -> None:
    uri, text = await _open(client, "example_sizes.py")
    hints = await _hints(client, uri, text)
    assert hints[_pos(text, "y = F.interpolate(").line] == "▸ [B, 3, 32, 32]"
    assert hints[_pos(text, "pooled = y.mean").line] == "▸ [B, 8]"
    assert hints[_pos(text, "return y.reshape(n, 2, 2)").line] == "▸ [B, 2, 2]"
    assert hints[_pos(text, "return y.view(2, 4, 2)").line] == "▸ [2, 4, 2] · holds for B = 2"
    md = await _hover(client, uri, _pos(text, "self.head(pooled)", 6))
    assert md.startswith("→ [B, 10] float32")
    md = await _hover(client, uri, _pos(text, "y.view(2, 4, 2)", 3))
    assert md.startswith("→ [2, 4, 2] float32") and "output holds for B = 2 only" in md
    titles = await _lenses(client, uri)
    assert any("[B, 3, 16, 16] → [B, 10]" in t for t in titles), titles
    assert any("[B, 16] → [2, 4, 2] (holds for B = 2)" in t for t in titles), titles


async def test_a_helper_that_returns_its_argument(client: LanguageClient) -> None:
    uri, text = await _open(client, "early_return.py")
    line = _pos(text, "keys = repeat_kv(xk").line
    hints = await _hints(client, uri, text)
    assert line not in hints  # no value made inside the call is its result
    md = await _hover(client, uri, _pos(text, "repeat_kv(xk", 2))
    first = md.split("\n")[0]
    assert first == "→ ? (the call returns nothing it computes)", md
    assert "| input | xk | [B, T, 4, 16] float32 |" in md


async def test_one_instance_with_the_count_of_the_others(client: LanguageClient) -> None:
    uri, text = await _open(client, "instances.py")
    line = _pos(text, "return x + self.conv(x)").line
    hints = await _hints(client, uri, text)
    assert hints[line] == (
        "▸ [B, 8, 32, 32] · TinyMobileNet.features.0 · 1 of 4 instances · 3 others differ"
    )
    md = await _hover(client, uri, _pos(text, "return x + self.conv(x)", 9))
    assert md.startswith("→ [B, 8, 32, 32] float32")
    assert "TinyMobileNet.features.0 · 1 of 4 instances · 3 others differ" in md
    assert "| a | x | [B, 8, 32, 32] float32 |" in md
    assert "| b | self.conv(x) | [B, 8, 32, 32] float32 |" in md
    helper = _pos(text, "return F.adaptive_avg_pool2d(x, size)").line
    first = _pos(text, "coarse = pooled(y, 1)").line + 1
    assert hints[helper] == f"▸ [B, 4] · the call at line {first} · 1 of 2 calls · 1 other differs"


async def test_a_batch_given_as_one_says_so(client: LanguageClient) -> None:
    uri, text = await _open(client, "batch_of_one.py")
    md = await _hover(client, uri, _pos(text, "self.head(pooled)", 6))
    assert md.startswith("→ [1, 10] float32") and "B = 1 in the example: a 1 shown may be B" in md
    summary = await _hover(client, uri, _pos(text, "class Classifier", 7))
    assert "torch fixes sizes 0 and 1, so a 1 shown may be B" in summary
    titles = await _lenses(client, uri)
    assert any("[B, 3, 8, 8] → [1, 10] (holds for B = 1)" in t for t in titles), titles
    assert any("[B, 3, 8, 8] → [B, 4, 1, 1]" in t for t in titles), titles  # B=2: the name


async def test_a_condition_on_values_is_taken_one_way(client: LanguageClient) -> None:
    uri, text = await _open(client, "value_branch.py")
    line = _pos(text, "if not padding_mask.any():").line
    hints = await _hints(client, uri, text)
    assert hints[_pos(text, "return self.head(x)").line] == "▸ [B, T, 33]"
    found: list[types.Diagnostic] = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not found:  # the capture's own publication
        published = [p for p in client.published if p.uri == uri]  # type: ignore[attr-defined]
        found = [d for d in published[-1].diagnostics if d.range.start.line == line]
        await asyncio.sleep(0.1)
    assert [(d.code, d.severity) for d in found] == [
        ("FX101", types.DiagnosticSeverity.Information)
    ], found
    md = await _hover(client, uri, _pos(text, "self.head(x)", 6))
    assert md.startswith("→ [B, T, 33] float32"), md


async def test_inputs_laid_out_as_the_code_unpacks_them(client: LanguageClient) -> None:
    uri, text = await _open(client, "sequence_first.py")
    titles = await _every_lens(client, uri, 4)
    assert any("[T, B, 64] → ([T, B, 64], [B, 4, T, T])" in t for t in titles), titles
    axial = "[num_rows, num_cols, B, 64] → [num_rows, num_cols, B, 64]"
    assert any(axial in t for t in titles), titles
    md = await _hover(client, uri, _pos(text, "self.out_proj(out)", 6))
    assert md.startswith("→ [T, B, 64] float32"), md
    md = await _hover(client, uri, _pos(text, "class TimeBatchLayer", 7))
    assert "[T, B, 64]" in md and "[B, T" not in md.split("→")[0], md


async def test_images_laid_out_channels_first(client: LanguageClient) -> None:
    uri, text = await _open(client, "channels_first.py")
    titles = await _every_lens(client, uri, 4)
    assert any("[B, 64, 224, 224] → [B, 64, 224, 224]" in t for t in titles), titles
    assert any("[B, 64, h, w], [B, T, 64] → [B, T, 64]" in t for t in titles), titles
    md = await _hover(client, uri, _pos(text, "self.attend(tokens, flat)", 6))
    assert md.startswith("→ [B, T, 64] float32"), md
