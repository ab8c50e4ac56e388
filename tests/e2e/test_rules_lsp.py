"""User rules end to end: the real server (pytest-lsp) and ``fxls check --fix``.

The fixture workspace ``tests/fixtures/rules`` has an ``fxls_rules.py`` with two rules: one
that computes the same (GELU's tanh approximation written out → ``F.gelu(approximate="tanh")``)
and one that does not (``sigmoid`` → ``hardsigmoid``). The rules file writes the file named by
``FXLS_RULES_MARKER`` if it is ever executed in a process that has pygls or the server or CLI
side of fxls imported: the tests give the server and the CLI that variable and check, after
the rules were matched and applied (which proves they ran in the worker), that it never was.
"""

from __future__ import annotations

import asyncio
import atexit
import importlib.util
import os
import runpy
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import pytest_lsp
from harness import needs_nvim, nvim_code_action, start_recording
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient

from fxls.lsp.features.convert import apply_change

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "rules"
MARKER = Path(tempfile.mkdtemp(prefix="fxls-rules-marker-")) / "executed-outside-the-sandbox"
atexit.register(shutil.rmtree, MARKER.parent, True)
ENV = {**os.environ, "FXLS_RULES_MARKER": str(MARKER)}
pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch"),
    pytest.mark.slow,
]
ASYNC = pytest.mark.asyncio(loop_scope="module")
PUBLISH = types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS
SERVER = ClientServerConfig(server_command=[sys.executable, "-m", "fxls", "serve"], server_env=ENV)


@pytest_lsp.fixture(config=SERVER, scope="module")
async def client(lsp_client: LanguageClient):
    await start_recording(lsp_client, FIXTURES, {"debounceMs": 50})
    yield
    await lsp_client.shutdown_session()


def _open(client: LanguageClient, name: str, text: str | None = None) -> tuple[str, str, int]:
    path = FIXTURES / name
    text = path.read_text() if text is None else text
    mark = len(client.published)  # type: ignore[attr-defined]
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(
                uri=path.as_uri(), language_id="python", version=1, text=text
            )
        )
    )
    return path.as_uri(), text, mark


def _close(client: LanguageClient, uri: str) -> None:
    client.text_document_did_close(
        types.DidCloseTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri))
    )


async def _diagnostics(client: LanguageClient, uri: str, mark: int) -> list[types.Diagnostic]:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        for params in reversed(client.published[mark:]):  # type: ignore[attr-defined]
            if params.uri == uri and params.version == 1:
                return list(params.diagnostics)
        await asyncio.sleep(0.05)
    raise AssertionError(f"no diagnostics for {uri}")


async def _actions(
    client: LanguageClient, uri: str, diag: types.Diagnostic
) -> list[types.CodeAction]:
    result = await client.text_document_code_action_async(
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            range=diag.range,
            context=types.CodeActionContext(diagnostics=[diag], only=["quickfix"]),
        )
    )
    return [a for a in result or [] if isinstance(a, types.CodeAction)]


def _apply(text: str, edit: types.WorkspaceEdit) -> str:
    edits = [
        e
        for change in edit.document_changes or []
        if isinstance(change, types.TextDocumentEdit)
        for e in change.edits
        if isinstance(e, types.TextEdit)
    ]
    for e in sorted(edits, key=lambda e: (e.range.start.line, e.range.start.character))[::-1]:
        text = apply_change(
            text, types.TextDocumentContentChangePartial(range=e.range, text=e.new_text), "utf-16"
        )
    return text


def _rule(diags: list[types.Diagnostic], name: str) -> types.Diagnostic:
    return next(d for d in diags if d.code == "FX360" and f"`{name}`" in d.message)


def test_the_marker_detects_execution_in_a_process_that_speaks_lsp() -> None:
    """The guard of the fixture works: run in this process (pygls is imported), it writes."""
    assert "pygls" in sys.modules
    previous = os.environ.get("FXLS_RULES_MARKER")
    os.environ["FXLS_RULES_MARKER"] = str(MARKER)
    try:
        runpy.run_path(str(FIXTURES / "fxls_rules.py"))
    finally:
        if previous is None:
            del os.environ["FXLS_RULES_MARKER"]
        else:
            os.environ["FXLS_RULES_MARKER"] = previous
    assert MARKER.exists()
    MARKER.unlink()


@ASYNC
async def test_a_safe_rule_is_applied_through_code_actions(client: LanguageClient) -> None:
    uri, text, mark = _open(client, "mlp_before.py")
    diags = await _diagnostics(client, uri, mark)
    gelu = _rule(diags, "gelu_tanh")
    assert gelu.severity == types.DiagnosticSeverity.Information
    assert gelu.range.start.line == 20  # 0-based: line 21, the written-out formula
    (action,) = await _actions(client, uri, gelu)
    assert action.title == "Apply rule `gelu_tanh`"
    assert action.edit is None and isinstance(action.data, dict)
    assert action.data["kind"] == "rule" and action.data["params"] == {"rule": "gelu_tanh"}
    done = await client.code_action_resolve_async(action)
    assert done.disabled is None, done.disabled
    assert done.edit is not None
    after = _apply(text, done.edit)
    assert after == (FIXTURES / "mlp_after.py").read_text()
    # minimal: one edit, inside line 21 only
    (change,) = done.edit.document_changes or []
    assert isinstance(change, types.TextDocumentEdit)
    assert all(e.range.start.line == e.range.end.line == 20 for e in change.edits)  # type: ignore[union-attr]
    _close(client, uri)
    # the rules were matched and applied, so they ran: in the worker, not in the server
    assert not MARKER.exists(), MARKER.read_text()


@ASYNC
async def test_a_rule_that_changes_results_is_not_offered_as_safe(client: LanguageClient) -> None:
    uri, _, mark = _open(client, "mlp_before.py")
    diags = await _diagnostics(client, uri, mark)
    gate = _rule(diags, "hard_gate")
    (action,) = await _actions(client, uri, gate)
    done = await client.code_action_resolve_async(action)
    assert done.edit is None
    assert done.disabled is not None
    assert "not verified safe" in done.disabled.reason
    assert "outputs differ" in done.disabled.reason
    # known unsafe for this version: listed greyed out with the reason (VS Code declares
    # disabledSupport), never with an edit (unsafe fixes are off)
    (again,) = await _actions(client, uri, gate)
    assert again.edit is None and again.disabled is not None
    assert "outputs differ" in again.disabled.reason
    _close(client, uri)


@ASYNC
async def test_a_rule_inside_a_loop_is_refused(client: LanguageClient) -> None:
    uri, _, mark = _open(client, "stack.py")
    diags = await _diagnostics(client, uri, mark)
    gate = _rule(diags, "hard_gate")
    (action,) = await _actions(client, uri, gate)
    done = await client.code_action_resolve_async(action)
    assert done.edit is None and done.disabled is not None
    assert "`for` loop" in done.disabled.reason and "unroll" in done.disabled.reason
    _close(client, uri)


@ASYNC
async def test_the_open_rules_file_shows_why_a_rule_does_not_load(client: LanguageClient) -> None:
    text = (FIXTURES / "fxls_rules.py").read_text() + (
        "\n\ndef pattern_orphan(x):\n    return x.sigmoid()\n"
    )
    uri, _, mark = _open(client, "fxls_rules.py", text)
    diags = await _diagnostics(client, uri, mark)
    (orphan,) = [d for d in diags if d.code == "FX362"]
    assert orphan.range.start.line == text.split("\n").index("def pattern_orphan(x):")
    assert orphan.severity == types.DiagnosticSeverity.Error
    _close(client, uri)


@ASYNC
async def test_a_rules_file_too_slow_to_load_is_said_once_and_left_out(
    client: LanguageClient,
) -> None:
    # the open rules file hangs at import: a capture that carries it waits for it once (the
    # worker's time for rules), the model gets no FX360, and the server says, once, that it
    # leaves that text out of other files' jobs (tests/unit/test_rules_server.py: it does)
    hanging = (FIXTURES / "fxls_rules.py").read_text() + "\n\nwhile True:\n    pass\n"
    rules_uri, _, _ = _open(client, "fxls_rules.py", hanging)
    uri, _, mark = _open(client, "mlp_before.py")
    diags = await _diagnostics(client, uri, mark)
    assert not [d for d in diags if d.code == "FX360"]
    said = [m.message for m in client.log_messages if "took longer than its time" in m.message]
    assert len(said) == 1 and "fxls_rules.py" in said[0], said
    _close(client, uri)
    _close(client, rules_uri)


@ASYNC
async def test_saving_the_rules_file_matches_the_open_files_again(client: LanguageClient) -> None:
    uri, _, mark = _open(client, "mlp_before.py")
    diags = await _diagnostics(client, uri, mark)
    assert {"gelu_tanh", "hard_gate"} <= {
        d.message.split("`")[1] for d in diags if d.code == "FX360"
    }
    rules_text = (FIXTURES / "fxls_rules.py").read_text()
    without_gate = rules_text.split("\n\ndef pattern_hard_gate")[0] + "\n"
    rules_uri, _, _ = _open(client, "fxls_rules.py", rules_text)
    mark = len(client.published)  # type: ignore[attr-defined]
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=rules_uri, version=2),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text=without_gate)],
        )
    )
    client.text_document_did_save(
        types.DidSaveTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=rules_uri))
    )
    diags = await _diagnostics(client, uri, mark)
    assert [d.message.split("`")[1] for d in diags if d.code == "FX360"] == ["gelu_tanh"]
    _close(client, rules_uri)
    _close(client, uri)


def test_check_fix_applies_safe_rules_and_never_runs_them_itself(tmp_path: Path) -> None:
    for name in ("fxls_rules.py", "mlp_before.py"):
        shutil.copy(FIXTURES / name, tmp_path / name)
    model = tmp_path / "mlp_before.py"
    run = subprocess.run(
        [sys.executable, "-m", "fxls", "check", "--fix", "."],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env=ENV,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert model.read_text() == (FIXTURES / "mlp_after.py").read_text()
    assert "1 more fix not verified safe" in run.stderr, run.stderr
    assert not MARKER.exists()
    # with --unsafe-fixes the other rule is applied too
    run = subprocess.run(
        [sys.executable, "-m", "fxls", "check", "--unsafe-fixes", "mlp_before.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env=ENV,
    )
    assert "g = F.hardsigmoid(self.gate(x))" in model.read_text(), run.stderr
    assert not MARKER.exists()


@needs_nvim
def test_neovim_applies_a_rule(tmp_path: Path) -> None:
    """Headless Neovim with the documented config: ``vim.lsp.buf.code_action({apply = true})``
    on the FX360 of a rule resolves the action and applies the regenerated statement."""
    for name in ("fxls_rules.py", "mlp_before.py"):
        shutil.copy(FIXTURES / name, tmp_path / name)
    result = nvim_code_action(
        tmp_path, tmp_path / "mlp_before.py", ENV, code="FX360", title="Apply rule `gelu_tanh`"
    )
    assert "Apply rule `gelu_tanh`" in result["titles"]
    assert result["lines"] == (FIXTURES / "mlp_after.py").read_text().split("\n")[:-1]
    assert not MARKER.exists()
