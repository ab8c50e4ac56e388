"""Code actions through the real server (pytest-lsp): list, resolve, apply the WorkspaceEdit.

Each fixture ``tests/fixtures/rewrites/<name>_before.py`` has an ``_after.py`` twin: applying
the fixes fxls offers (one by one, or all with ``source.fixAll.fxls``) must give exactly it.
"""

from __future__ import annotations

import asyncio
import importlib.util
import itertools
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

from fxls.lsp.features.convert import apply_change

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "rewrites"
pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch"),
    pytest.mark.slow,
    pytest.mark.asyncio(loop_scope="module"),
]
PUBLISH = types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS
SERVER = ClientServerConfig(server_command=[sys.executable, "-m", "fxls", "serve"])


def _record(client: LanguageClient) -> None:
    client.published = []  # type: ignore[attr-defined]
    features = client.protocol.fm.features
    original = features[PUBLISH]

    def record(params: types.PublishDiagnosticsParams) -> None:
        client.published.append(params)  # type: ignore[attr-defined]
        original(params)

    features[PUBLISH] = record
    for method in (types.WORKSPACE_INLAY_HINT_REFRESH, types.WORKSPACE_CODE_LENS_REFRESH):
        features[method] = lambda params: None


async def _start(client: LanguageClient, caps: str, options: dict[str, Any]) -> None:
    _record(client)
    client.initialized_with = await client.initialize_session(  # type: ignore[attr-defined]
        types.InitializeParams(
            capabilities=client_capabilities(caps),
            root_uri=FIXTURES.as_uri(),
            initialization_options=options,
        )
    )


@pytest_lsp.fixture(config=SERVER, scope="module")
async def client(lsp_client: LanguageClient):
    """A VS Code-like client (UTF-16, versioned document changes)."""
    await _start(lsp_client, "visual-studio-code", {"debounceMs": 50})
    yield
    await lsp_client.shutdown_session()


@pytest_lsp.fixture(config=SERVER, loop_scope="module")
async def unsafe_client(lsp_client: LanguageClient):
    """A Neovim-like client (UTF-8) that asks for unsafe fixes too."""
    options = {"debounceMs": 50, "codeActions": {"unsafe": True, "maxParams": 0}}
    await _start(lsp_client, "neovim@v0.11.0", options)
    yield
    await lsp_client.shutdown_session()


_versions: dict[str, int] = {}
_marks: dict[str, int] = {}


def _open(client: LanguageClient, name: str, text: str | None = None) -> tuple[str, str]:
    path = FIXTURES / name
    text = path.read_text() if text is None else text
    uri = path.as_uri()
    _versions[uri] = 1
    _marks[uri] = len(client.published)  # type: ignore[attr-defined]
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


def _change(client: LanguageClient, uri: str, text: str) -> int:
    _versions[uri] += 1
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=_versions[uri]),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)],
        )
    )
    return _versions[uri]


async def _diagnostics(
    client: LanguageClient, uri: str, version: int = 1, timeout: float = 90.0
) -> list[types.Diagnostic]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for params in reversed(client.published[_marks.get(uri, 0) :]):  # type: ignore[attr-defined]
            if params.uri == uri and params.version == version:
                return list(params.diagnostics)
        await asyncio.sleep(0.05)
    raise AssertionError(f"no diagnostics for {uri} v{version}")


async def _actions(
    client: LanguageClient,
    uri: str,
    rng: types.Range,
    diagnostics: list[types.Diagnostic] | None = None,
    only: list[str] | None = None,
) -> list[types.CodeAction]:
    result = await client.text_document_code_action_async(
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            range=rng,
            context=types.CodeActionContext(diagnostics=diagnostics or [], only=only),
        )
    )
    return [a for a in result or [] if isinstance(a, types.CodeAction)]


def _whole(text: str) -> types.Range:
    return types.Range(types.Position(0, 0), types.Position(text.count("\n") + 1, 0))


def _apply(text: str, edit: types.WorkspaceEdit, uri: str, encoding: str) -> str:
    """Apply a WorkspaceEdit to ``text`` as a client would (edits bottom-up)."""
    edits: list[types.TextEdit] = []
    if edit.document_changes:
        for change in edit.document_changes:
            assert isinstance(change, types.TextDocumentEdit)
            assert change.text_document.uri == uri
            edits.extend(e for e in change.edits if isinstance(e, types.TextEdit))
    else:
        assert edit.changes is not None
        edits.extend(edit.changes[uri])
    ordered = sorted(edits, key=lambda e: (e.range.start.line, e.range.start.character))
    for a, b in itertools.pairwise(ordered):
        assert (a.range.end.line, a.range.end.character) <= (
            b.range.start.line,
            b.range.start.character,
        ), "overlapping edits"
    for e in reversed(ordered):
        text = apply_change(
            text, types.TextDocumentContentChangePartial(range=e.range, text=e.new_text), encoding
        )
    return text


async def test_server_advertises_code_actions_with_resolve(client: LanguageClient) -> None:
    caps = client.initialized_with.capabilities  # type: ignore[attr-defined]
    provider = caps.code_action_provider
    assert isinstance(provider, types.CodeActionOptions)
    assert provider.resolve_provider is True
    kinds = {str(getattr(k, "value", k)) for k in provider.code_action_kinds or []}
    assert kinds == {"quickfix", "refactor.rewrite", "source.fixAll.fxls"}


async def test_remove_unused_statement_then_fix_all(client: LanguageClient) -> None:
    uri, text = _open(client, "dead_code_before.py")
    diags = await _diagnostics(client, uri)
    unused = [d for d in diags if d.code == "FX302"]
    assert len(unused) == 2, [(d.code, d.message) for d in diags]

    # one quick fix, listed from the cached analysis and resolved in the worker
    first = unused[0]
    actions = await _actions(client, uri, first.range, [first])
    fix = next(a for a in actions if a.kind == "quickfix")
    assert fix.title == "Remove unused `wasted = self.fc2(h).relu()`"
    assert fix.edit is None and isinstance(fix.data, dict)
    assert fix.data["version"] == 1 and fix.data["class"] == "Head"
    done = await client.code_action_resolve_async(fix)
    assert done.disabled is None, done.disabled
    assert done.edit is not None
    one = _apply(text, done.edit, uri, "utf-16")
    assert "wasted" not in one and "F.gelu(h)" in one
    # everything else byte for byte: exactly one line is gone
    assert one.split("\n") == [line for line in text.split("\n") if "wasted" not in line]
    # minimal: one edit that deletes one line
    (change,) = done.edit.document_changes or []
    assert isinstance(change, types.TextDocumentEdit)
    assert change.text_document.version == 1
    (only_edit,) = change.edits
    assert isinstance(only_edit, types.TextEdit) and only_edit.new_text == ""

    # fix all (source.fixAll.fxls) gives the after fixture
    actions = await _actions(client, uri, _whole(text), only=["source.fixAll"])
    (fix_all,) = actions
    assert fix_all.kind == "source.fixAll.fxls"
    done = await client.code_action_resolve_async(fix_all)
    assert done.edit is not None, done.disabled
    assert _apply(text, done.edit, uri, "utf-16") == (FIXTURES / "dead_code_after.py").read_text()
    _close(client, uri)


async def test_trace_fixits_applied_one_by_one(client: LanguageClient) -> None:
    uri, text = _open(client, "trace_fixits_before.py")
    diags = await _diagnostics(client, uri)
    codes = sorted(str(d.code) for d in diags if str(d.code).startswith("FX1"))
    assert codes == ["FX101", "FX102", "FX105", "FX105"], codes
    current = text
    version = 1
    for code in ("FX101", "FX102", "FX105", "FX105"):
        diags = await _diagnostics(client, uri, version)
        diag = next(d for d in diags if d.code == code)
        actions = await _actions(client, uri, diag.range, [diag], only=["quickfix"])
        assert len(actions) == 1, [a.title for a in actions]
        done = await client.code_action_resolve_async(actions[0])
        assert done.edit is not None, done.disabled
        current = _apply(current, done.edit, uri, "utf-16")
        version = _change(client, uri, current)
    assert current == (FIXTURES / "trace_fixits_after.py").read_text()
    diags = await _diagnostics(client, uri, version)
    assert not [d for d in diags if str(d.code).startswith("FX1")]
    _close(client, uri)


async def test_unpacked_sizes_passed_as_one_argument(client: LanguageClient) -> None:
    """FX103 on ``y.view(*x.shape[:-1], h, -1)``: the sizes become one argument, for inputs of
    any rank; ``*`` of a list (``list(x.shape)``) is not offered."""
    uri, text = _open(client, "sizes_before.py")
    current, version = text, 1
    for line in ("y = y.view(", "pad = x.new_zeros("):
        diags = await _diagnostics(client, uri, version)
        diag = next(
            d
            for d in diags
            if d.code == "FX103" and line in current.split("\n")[d.range.start.line]
        )
        actions = await _actions(client, uri, diag.range, [diag], only=["quickfix"])
        sizes = [a for a in actions if a.title.startswith("Pass the sizes")]
        assert len(sizes) == 1, [a.title for a in actions]
        done = await client.code_action_resolve_async(sizes[0])
        assert done.edit is not None, done.disabled
        current = _apply(current, done.edit, uri, "utf-16")
        version = _change(client, uri, current)
    assert current == (FIXTURES / "sizes_after.py").read_text()
    diags = await _diagnostics(client, uri, version)
    (listed,) = [d for d in diags if d.code == "FX103"]
    assert "list(x.shape)" in current.split("\n")[listed.range.start.line]
    actions = await _actions(client, uri, listed.range, [listed], only=["quickfix"])
    assert not [a for a in actions if a.title.startswith("Pass the sizes")]
    _close(client, uri)


async def test_directives_pinned_by_fix_all(client: LanguageClient) -> None:
    uri, text = _open(client, "directives_before.py")
    diags = await _diagnostics(client, uri)
    assert {"FX405", "FX408", "FX101"} <= {d.code for d in diags}
    actions = await _actions(client, uri, _whole(text))
    titles = [a.title for a in actions]
    assert "Pin the constructor arguments: `# fxls: init(in_features=64)`" in titles
    assert "Keep `Inner` as a leaf: `# fxls: leaf Inner`" in titles
    fix_all = next(a for a in actions if a.kind == "source.fixAll.fxls")
    done = await client.code_action_resolve_async(fix_all)
    assert done.edit is not None, done.disabled
    after = _apply(text, done.edit, uri, "utf-16")
    assert after == (FIXTURES / "directives_after.py").read_text()
    version = _change(client, uri, after)
    diags = await _diagnostics(client, uri, version)
    # Outer's input stays assumed: declared, the shape error in its leaf would be an error
    outer = after.split("\n").index("class Outer(nn.Module):")
    left = [(d.code, d.range.start.line) for d in diags if d.code in ("FX405", "FX408")]
    assert left == [("FX405", outer + 6)], left
    _close(client, uri)


async def test_an_input_left_none_is_declared_by_a_quick_fix(client: LanguageClient) -> None:
    """FX402 where ``timestep.to(...)`` stopped on ``timestep`` left at ``None``: the quick
    fix declares it as suggested, and the next capture's FX402 names the next input."""
    uri, text = _open(client, "declare_before.py")
    diags = await _diagnostics(client, uri)
    (left,) = [d for d in diags if d.code == "FX402" and "`None`" in d.message]
    assert "`timestep` of `Denoiser.forward`" in left.message, left.message
    actions = await _actions(client, uri, left.range, [left], only=["quickfix"])
    titles = [a.title for a in actions]
    declare = [a for a in actions if a.title.startswith("Declare `timestep`")]
    assert len(declare) == 1, titles
    done = await client.code_action_resolve_async(declare[0])
    assert done.edit is not None, done.disabled
    after = _apply(text, done.edit, uri, "utf-16")
    assert after == (FIXTURES / "declare_after.py").read_text()
    diags = await _diagnostics(client, uri, _change(client, uri, after))
    (left,) = [d for d in diags if d.code == "FX402" and "`None`" in d.message]
    assert "`ids` of `Denoiser.forward`" in left.message, left.message
    _close(client, uri)


async def test_stale_version_is_refused(client: LanguageClient) -> None:
    uri, text = _open(client, "dead_code_before.py")
    diags = await _diagnostics(client, uri)
    diag = next(d for d in diags if d.code == "FX302")
    (fix,) = await _actions(client, uri, diag.range, [diag], only=["quickfix"])
    _change(client, uri, text + "\n# edited\n")
    done = await client.code_action_resolve_async(fix)
    assert done.edit is None
    assert done.disabled is not None and "changed" in done.disabled.reason
    _close(client, uri)


async def test_fix_on_an_edited_line_is_not_offered(client: LanguageClient) -> None:
    uri, text = _open(client, "dead_code_before.py")
    diags = await _diagnostics(client, uri)
    diag = next(d for d in diags if d.code == "FX302")
    lines = text.split("\n")
    lines[diag.range.start.line] += "  # touched"
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text="\n".join(lines))],
        )
    )
    actions = await _actions(client, uri, diag.range, only=["quickfix"])
    assert actions == []
    _close(client, uri)


async def test_name_every_argument(client: LanguageClient) -> None:
    text = (FIXTURES / "dead_code_after.py").read_text()
    uri, text = _open(client, "name_args.py", text)
    await _diagnostics(client, uri)
    line = text.split("\n").index("        return self.fc2(F.relu(kept))")
    at = types.Position(line, len("        return self.fc2(F.re"))
    actions = await _actions(client, uri, types.Range(at, at), only=["refactor"])
    (refactor,) = actions
    assert refactor.kind == "refactor.rewrite"
    assert refactor.title == "Name every argument of `F.relu(...)`"
    done = await client.code_action_resolve_async(refactor)
    assert done.edit is not None, done.disabled
    after = _apply(text, done.edit, uri, "utf-16")
    assert "return self.fc2(F.relu(input=kept))" in after
    _close(client, uri)


async def test_modernize_attention(client: LanguageClient) -> None:
    uri, text = _open(client, "attention_before.py")
    await _diagnostics(client, uri)
    line = text.split("\n").index("        att = F.softmax(att, dim=-1)")
    at = types.Position(line, 12)
    actions = await _actions(client, uri, types.Range(at, at), only=["refactor.rewrite"])
    (refactor,) = [a for a in actions if "scaled_dot_product_attention" in a.title]
    done = await client.code_action_resolve_async(refactor)
    assert done.edit is not None, done.disabled
    after = _apply(text, done.edit, uri, "utf-16")
    assert (
        "        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, "
        "dropout_p=self.drop.p if self.training else 0.0)  # (B, h, T, d)\n"
    ) in after
    assert "att = F.softmax(att, dim=-1)\n        att = self.drop(att)" not in after
    _close(client, uri)


async def test_in_place_statement_is_never_removed(client: LanguageClient) -> None:
    """``h.mul_(2)`` has no users in the graph, but removing it would change what the module
    computes: it is not reported as unused and no fix is offered there. A statement with an
    unused value that also works in place is reported, and its fix says why it cannot be
    made."""
    uri, text = _open(client, "unsafe_before.py")
    diags = await _diagnostics(client, uri)
    lines = text.split("\n")
    in_place = lines.index("        h.mul_(2)")
    assert [d.range.start.line for d in diags if d.code == "FX302"] == [
        lines.index("        self.fc(h).mul_(2)")
    ]
    at = types.Position(in_place, 9)
    assert await _actions(client, uri, types.Range(at, at), only=["quickfix"]) == []
    diag = next(d for d in diags if d.code == "FX302")
    (fix,) = await _actions(client, uri, diag.range, [diag], only=["quickfix"])
    shown = len(client.messages)
    done = await client.code_action_resolve_async(fix)
    assert done.edit is None and done.disabled is not None
    assert "in place" in done.disabled.reason
    # the editor applies a resolved action without reading `disabled`: it is also said
    (message,) = client.messages[shown:]
    assert message.type == types.MessageType.Warning
    assert message.message == f"{fix.title}: {done.disabled.reason}"
    # listed again at the same version: known unavailable, so disabled with the reason for
    # a client that shows disabled actions (VS Code greys it out)
    (again,) = await _actions(client, uri, diag.range, [diag], only=["quickfix"])
    assert again.title == fix.title and again.edit is None
    assert again.disabled is not None and again.disabled.reason == done.disabled.reason
    _close(client, uri)


async def test_unsafe_fix_applied_only_when_asked(unsafe_client: LanguageClient) -> None:
    """With ``maxParams`` 0 nothing can be run to verify: the fix is unsafe, and applied
    only because this client asked for unsafe fixes, with the reason in the title."""
    uri, text = _open(unsafe_client, "dead_code_before.py")
    diags = await _diagnostics(unsafe_client, uri)
    diag = next(d for d in diags if d.code == "FX302")
    (fix,) = await _actions(unsafe_client, uri, diag.range, [diag], only=["quickfix"])
    done = await unsafe_client.code_action_resolve_async(fix)
    assert done.edit is not None, done.disabled
    assert "unsafe: too large to verify" in done.title
    after = _apply(text, done.edit, uri, "utf-8")
    assert "wasted" not in after
    # listed again: offered with the reason in its title
    (again,) = await _actions(unsafe_client, uri, diag.range, [diag], only=["quickfix"])
    assert "unsafe: too large to verify" in again.title
    _close(unsafe_client, uri)


async def test_unsafe_fix_refused_by_default(client: LanguageClient) -> None:
    client.workspace_did_change_configuration(
        types.DidChangeConfigurationParams(settings={"fxls": {"codeActions": {"maxParams": 0}}})
    )
    try:
        uri, _text = _open(client, "dead_code_before.py")
        diags = await _diagnostics(client, uri)
        diag = next(d for d in diags if d.code == "FX302")
        (fix,) = await _actions(client, uri, diag.range, [diag], only=["quickfix"])
        done = await client.code_action_resolve_async(fix)
        assert done.edit is None and done.disabled is not None
        assert "too large to verify" in done.disabled.reason
        assert "fxls.codeActions.unsafe" in done.disabled.reason
        (again,) = await _actions(client, uri, diag.range, [diag], only=["quickfix"])
        assert again.disabled is not None and again.disabled.reason == done.disabled.reason
        _close(client, uri)
    finally:
        client.workspace_did_change_configuration(
            types.DidChangeConfigurationParams(settings={"fxls": {"codeActions": {}}})
        )


async def test_refusal_said_to_a_client_without_disabled_actions(
    unsafe_client: LanguageClient,
) -> None:
    """Neovim 0.11 neither declares ``disabledSupport`` nor reads ``disabled`` on a resolved
    action: picking a refused action there is answered with a message, and the action is no
    longer listed."""
    uri, _ = _open(unsafe_client, "unsafe_before.py")
    diags = await _diagnostics(unsafe_client, uri)
    diag = next(d for d in diags if d.code == "FX302")
    (fix,) = await _actions(unsafe_client, uri, diag.range, [diag], only=["quickfix"])
    shown = len(unsafe_client.messages)
    done = await unsafe_client.code_action_resolve_async(fix)
    assert done.edit is None and done.disabled is not None
    (message,) = unsafe_client.messages[shown:]
    assert message.message.startswith("Remove unused `self.fc(h).mul_(2)`: fxls cannot make")
    assert "`mul_` works in place" in message.message
    assert await _actions(unsafe_client, uri, diag.range, [diag], only=["quickfix"]) == []
    _close(unsafe_client, uri)


async def test_len_fix_where_the_original_was_captured_on_fake_tensors(
    client: LanguageClient,
) -> None:
    """``n = len(x)``: the original's output is ``[2, 8]`` (the fake run fixed the batch
    size), the edit's ``[B, 8]``; the fix is not refused for "the output shapes change"."""
    uri, text = _open(client, "len_shapes_before.py")
    diags = await _diagnostics(client, uri)
    diag = next(d for d in diags if d.code == "FX102")
    (fix,) = await _actions(client, uri, diag.range, [diag], only=["quickfix"])
    done = await client.code_action_resolve_async(fix)
    assert done.edit is not None, done.disabled
    after = _apply(text, done.edit, uri, "utf-16")
    assert after == (FIXTURES / "len_shapes_after.py").read_text()
    _close(client, uri)


async def test_causal_attention_of_a_model_too_large_to_run(client: LanguageClient) -> None:
    """minGPT's attention block, built by a model over ``maxParams`` from a configuration fxls
    filled in: verified alone."""
    client.workspace_did_change_configuration(
        types.DidChangeConfigurationParams(settings={"fxls": {"codeActions": {"maxParams": 50000}}})
    )
    try:
        uri, text = _open(client, "causal_attention_before.py")
        await _diagnostics(client, uri)
        line = text.split("\n").index("        att = F.softmax(att, dim=-1)")
        at = types.Position(line, 12)
        actions = await _actions(client, uri, types.Range(at, at), only=["refactor.rewrite"])
        (refactor,) = [a for a in actions if "scaled_dot_product_attention" in a.title]
        done = await client.code_action_resolve_async(refactor)
        assert done.edit is not None, done.disabled
        after = _apply(text, done.edit, uri, "utf-16")
        assert after == (FIXTURES / "causal_attention_after.py").read_text()
        _close(client, uri)
    finally:
        client.workspace_did_change_configuration(
            types.DidChangeConfigurationParams(settings={"fxls": {"codeActions": {}}})
        )


async def test_progress_while_a_slow_resolve_runs(client: LanguageClient) -> None:
    """Resolving an action that takes longer than half a second shows work-done progress,
    ended when the answer is sent; a quick one (the outcome known) shows none."""
    uri, _text = _open(client, "slow_before.py")
    diags = await _diagnostics(client, uri)
    diag = next(d for d in diags if d.code == "FX302")
    (fix,) = await _actions(client, uri, diag.range, [diag], only=["quickfix"])
    known = set(client.progress_reports)
    done = await client.code_action_resolve_async(fix)
    assert done.edit is not None, done.disabled
    new = [t for t in client.progress_reports if t not in known]
    assert len(new) == 1, client.progress_reports
    begin, *_, end = client.progress_reports[new[0]]
    assert isinstance(begin, types.WorkDoneProgressBegin)
    assert begin.message == f"checking: {fix.title}"
    assert isinstance(end, types.WorkDoneProgressEnd)
    known = set(client.progress_reports)
    again = await client.code_action_resolve_async(fix)
    assert again.edit is not None
    assert set(client.progress_reports) == known
    _close(client, uri)


async def test_a_pass_is_blamed_at_the_edit_its_own_lint_found(client: LanguageClient) -> None:
    uri, text = _open(client, "pass_lint.py")
    diags = await _diagnostics(client, uri)
    (blamed,) = [d for d in diags if str(d.code).startswith("FX35")]
    assert blamed.code == "FX353"
    assert blamed.range.start.line == text.split("\n").index("    fc1.args = (fc2,)")
    _close(client, uri)
