"""User passes through the real server (pytest-lsp) and ``fxls check``: the FX35x diagnostics
at the pass's lines, the hover on a pass (graph before -> after), "Apply <pass> to <Class>"."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import re
import shutil
import sys
import time
from pathlib import Path

import pytest
import pytest_lsp
from harness import RunFxls, needs_nvim, nvim_code_action, start_recording
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient

from fxls.lsp.features.convert import apply_change

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "passes"
pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch"),
    pytest.mark.slow,
]
on_server = pytest.mark.asyncio(loop_scope="module")
PUBLISH = types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS
SERVER = ClientServerConfig(server_command=[sys.executable, "-m", "fxls", "serve"])
MARK = re.compile(r"#\s*(FX35\d)\s*$")


@pytest_lsp.fixture(config=SERVER, scope="module")
async def client(lsp_client: LanguageClient):
    await start_recording(lsp_client, FIXTURES, {"debounceMs": 50})
    yield
    await lsp_client.shutdown_session()


def _open(client: LanguageClient, name: str, text: str | None = None) -> tuple[str, str]:
    path = FIXTURES / name
    text = path.read_text() if text is None else text
    uri = path.as_uri()
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


async def _diagnostics(
    client: LanguageClient, uri: str, timeout: float = 90.0
) -> list[types.Diagnostic]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for params in reversed(client.published):  # type: ignore[attr-defined]
            if params.uri == uri and params.version == 1:
                return list(params.diagnostics)
        await asyncio.sleep(0.05)
    raise AssertionError(f"no diagnostics for {uri}")


def _def_position(text: str, function: str) -> types.Position:
    line = next(i for i, t in enumerate(text.split("\n")) if t.startswith(f"def {function}("))
    return types.Position(line=line, character=len("def ") + 1)


@on_server
async def test_broken_passes_are_reported_at_their_lines(client: LanguageClient) -> None:
    uri, text = _open(client, "broken.py")
    diags = await _diagnostics(client, uri)
    got = sorted(
        (str(d.code), d.range.start.line + 1) for d in diags if str(d.code).startswith("FX35")
    )
    expected = sorted(
        (m.group(1), number)
        for number, line in enumerate(text.split("\n"), start=1)
        if (m := MARK.search(line))
    )
    assert len(expected) == 9
    assert got == expected
    assert all(
        d.severity == types.DiagnosticSeverity.Error
        for d in diags
        if str(d.code).startswith("FX35")
    )
    # the hover on a broken pass lists its diagnostic
    hover = await client.text_document_hover_async(
        types.HoverParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            position=_def_position(text, "appended_at_end"),
        )
    )
    assert hover is not None and isinstance(hover.contents, types.MarkupContent)
    value = hover.contents.value
    assert "appended_at_end · fxls pass" in value
    assert "failed" in value and "FX353 line 33" in value
    _close(client, uri)


@on_server
async def test_hover_on_a_pass_shows_the_graph_before_and_after(client: LanguageClient) -> None:
    uri, text = _open(client, "good.py")
    diags = await _diagnostics(client, uri)
    assert not [d for d in diags if str(d.code).startswith("FX35")]
    pos = _def_position(text, "functional_relu")
    hover = await client.text_document_hover_async(
        types.HoverParams(text_document=types.TextDocumentIdentifier(uri=uri), position=pos)
    )
    assert hover is not None and isinstance(hover.contents, types.MarkupContent)
    value = hover.contents.value
    assert "on Net · ok · 5 → 5 nodes: 1 added · 0 removed · 1 replaced" in value
    assert "| added | relu_1 | `torch.nn.functional.relu` | 26 |" in value
    assert "| replaced | `relu → relu_1` | `torch.relu` | 17 |" in value
    assert hover.range is not None and hover.range.start == types.Position(pos.line, 4)

    # "Apply functional_relu to Net": listed on the def line, resolved and verified in the worker
    actions = await client.text_document_code_action_async(
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            range=types.Range(pos, pos),
            context=types.CodeActionContext(diagnostics=[], only=["refactor"]),
        )
    )
    (action,) = [a for a in actions or [] if isinstance(a, types.CodeAction)]
    assert action.title == "Apply `functional_relu` to `Net`"
    assert action.kind == types.CodeActionKind.RefactorRewrite
    done = await client.code_action_resolve_async(action)
    assert done.disabled is None, done.disabled
    assert done.edit is not None and done.edit.document_changes
    (change,) = done.edit.document_changes
    assert isinstance(change, types.TextDocumentEdit)
    new = text
    for edit in reversed(change.edits):
        assert isinstance(edit, types.TextEdit)
        new = apply_change(
            new,
            types.TextDocumentContentChangePartial(range=edit.range, text=edit.new_text),
            "utf-16",
        )
    assert new == text.replace("h = torch.relu(self.fc1(x))", "h = F.relu(self.fc1(x))")
    _close(client, uri)


@on_server
async def test_a_pass_that_changes_outputs_is_unsafe_with_the_counterexample(
    client: LanguageClient,
) -> None:
    text = (
        (FIXTURES / "good.py").read_text().replace("F.relu, node.args", "torch.sigmoid, node.args")
    )
    uri, text = _open(client, "good_sigmoid.py", text)
    await _diagnostics(client, uri)
    pos = _def_position(text, "functional_relu")
    actions = await client.text_document_code_action_async(
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            range=types.Range(pos, pos),
            context=types.CodeActionContext(diagnostics=[], only=["refactor"]),
        )
    )
    (action,) = [a for a in actions or [] if isinstance(a, types.CodeAction)]
    done = await client.code_action_resolve_async(action)
    assert done.edit is None and done.disabled is not None
    assert "outputs differ" in done.disabled.reason
    _close(client, uri)


def test_fxls_check_reports_pass_diagnostics(run_fxls: RunFxls) -> None:
    path = FIXTURES / "broken.py"
    proc = run_fxls("check", str(path))
    assert proc.returncode == 1, proc.stderr
    text = path.read_text()
    for number, line in enumerate(text.split("\n"), start=1):
        m = MARK.search(line)
        if m:
            assert re.search(rf"broken\.py:{number}:\d+: error {m.group(1)} ", proc.stdout), (
                m.group(1),
                number,
                proc.stdout,
            )
    good = run_fxls("check", str(FIXTURES / "good.py"))
    assert good.returncode == 0 and "FX35" not in good.stdout
    assert (
        "  pass functional_relu (line 22): ok · 5 → 5 nodes: 1 added · 0 removed · 1 replaced"
        in (good.stdout)
    )
    doc = json.loads(run_fxls("check", str(FIXTURES / "good.py"), "--json").stdout)
    (run,) = doc["modules"][0]["passes"]
    assert (run["function"], run["status"], run["replaced"]) == ("functional_relu", "ok", 1)
    assert {"kind": "replaced", "node": "relu", "op": "call_function", "target": "torch.relu",
            "by": "relu_1", "line": 17} in run["changes"]  # fmt: skip


@needs_nvim
def test_neovim_applies_a_pass_to_the_source(tmp_path: Path) -> None:
    """Headless Neovim with the documented config: ``vim.lsp.buf.code_action({apply = true})``
    on the pass's name resolves "Apply `functional_relu` to `Net`" and applies the regenerated
    statement."""
    shutil.copy(FIXTURES / "good.py", tmp_path / "good.py")
    result = nvim_code_action(
        tmp_path,
        tmp_path / "good.py",
        at="functional_relu(",
        title="Apply `functional_relu` to `Net`",
    )
    assert "Apply `functional_relu` to `Net`" in result["titles"]
    text = (FIXTURES / "good.py").read_text()
    expected = text.replace("h = torch.relu(self.fc1(x))", "h = F.relu(self.fc1(x))")
    assert result["lines"] == expected.split("\n")[:-1]
