"""The pure parts behind the server's hardening (``tests/e2e/test_hardening_server.py`` runs
them in the real server): notification text, format characters, the graph page's JSON, the
token gate and the listening checks."""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import unicodedata
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from fxls.graph.html import script_json
from fxls.lsp import rpc
from fxls.lsp.features import markdown as md
from fxls.lsp.server import InertFormatter

RENDERER = MarkdownIt("commonmark")
ACTIVE = {"link_open", "image", "html_inline", "html_block"}
VSCODE_LINK = re.compile(r"\[([^\]]+)\]\(((?:https?://|command:|file:)[^)\s]+)")
PIECES = ["[", "]", "(", ")", "<", ">", "\\", "`", "!", "command:x", "https://h/", " ", "\n", "a"]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=30).map("".join))
def test_notices_form_no_link_autolink_or_html(text: str) -> None:
    out = md.notice(text)
    assert not VSCODE_LINK.search(out), out
    tokens = {t.type for b in RENDERER.parse(out) for t in [b, *(b.children or [])]}
    assert not tokens & ACTIVE, (text, out)


def test_notices_keep_their_text_on_one_clipped_line() -> None:
    out = md.notice("[x](command:a)\n<b>" + "y" * 5000)
    assert out.startswith("[x] (command:a) \\<b\\>") and "\n" not in out
    assert len(out) <= md.MAX_NOTICE


def test_every_format_character_is_shown_escaped() -> None:
    """Every character of category Cf this Python knows (a newer Unicode adds some: then
    ``markdown.FORMAT_RANGES`` needs them too)."""
    found = [chr(c) for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c)) == "Cf"]
    text = "".join(found)
    for out in (md.plain(text, 10**6), md.code(text, 10**6), md.one_line(text)):
        assert not set(found) & set(out)
    assert md.plain("a\u202eb") == "a\\u202eb" and md.plain("\U000e0041") == "\\U000e0041"
    assert md.plain("x\x1by\x9bz\u2028") == "x y z "


def test_escapes_do_not_push_a_label_past_its_limit() -> None:
    assert len(md.plain("\u202e" * 500, md.MAX_LABEL)) == md.MAX_LABEL
    assert len(md.code("\u202e" * 500, 100)) <= 100 + 2


@settings(max_examples=100, deadline=None)
@given(st.recursive(st.text(), lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner)))
def test_script_json_reads_back_and_holds_no_markup(data: object) -> None:
    text = script_json(data)
    assert not set("<>&\u2028\u2029") & set(text)
    assert json.loads(text) == data


def test_script_json_of_a_hostile_string() -> None:
    hostile = "<!--<script>x</script>\\</script>&amp;"
    assert json.loads(script_json({"s": hostile})) == {"s": hostile}


def _first(options: object, method: str = "initialize") -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": 1, "method": method,
                       "params": {"initializationOptions": options}}).encode()  # fmt: skip


def test_only_an_initialize_with_the_token_is_admitted_and_the_token_is_dropped() -> None:
    token = "t" * 20
    passed = rpc.admitted(_first({"token": token, "trusted": True}), token)
    assert passed is not None
    assert json.loads(passed)["params"]["initializationOptions"] == {"trusted": True}
    for refused in (
        _first({"trusted": True}),
        _first({"token": token[:-1]}),
        _first({"token": token + "x"}),
        _first({"token": 123}),
        _first({"token": token}, method="fxls/stats"),
        _first(None),
        b"[]",
        b"{",
        rpc.Skipped("too large"),
        None,
    ):
        assert rpc.admitted(refused, token) is None, refused
    assert rpc.admitted(b"{}", None) == b"{}"  # a socket without a token: its modes guard it


def test_token_files_must_be_private_regular_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(rpc.TOKEN_ENV, raising=False)
    assert rpc.read_token(None) is None
    monkeypatch.setenv(rpc.TOKEN_ENV, " " + "e" * 20 + "\n")
    assert rpc.read_token(None) == "e" * 20
    monkeypatch.setenv(rpc.TOKEN_ENV, "short")
    with pytest.raises(rpc.ListenError, match="shorter"):
        rpc.read_token(None)
    path = tmp_path / "token"
    path.write_text("f" * 20 + "\n")
    for mode in (0o640, 0o604, 0o620):
        path.chmod(mode)
        with pytest.raises(rpc.ListenError, match="open to other users"):
            rpc.read_token(str(path))
    path.chmod(0o600)
    assert rpc.read_token(str(path)) == "f" * 20
    os.mkfifo(tmp_path / "fifo", 0o600)
    with pytest.raises(rpc.ListenError, match="not a regular file"):
        rpc.read_token(str(tmp_path / "fifo"))
    with pytest.raises(rpc.ListenError, match="cannot open"):
        rpc.read_token(str(tmp_path / "missing"))


def test_tcp_listens_on_loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(rpc.TOKEN_ENV, "g" * 20)
    assert rpc.listener("127.0.0.1:0", None, None).hosts == ("127.0.0.1",)
    assert rpc.listener("[::1]:7", None, None).hosts == ("::1",)
    for address in ("0.0.0.0:1", "10.1.2.3:1", "[::]:1", "127.0.0.1:x", "nohost"):
        with pytest.raises(rpc.ListenError):
            rpc.listener(address, None, None)
    monkeypatch.delenv(rpc.TOKEN_ENV)
    with pytest.raises(rpc.ListenError, match="needs a token"):
        rpc.listener("127.0.0.1:0", None, None)


def test_log_lines_cannot_be_forged_or_drive_a_terminal() -> None:
    record = logging.LogRecord(
        "fxls", logging.WARNING, __file__, 1, "capture of %s failed", ("a\nERROR:x\x1b[2J\u202e",),
        None,
    )  # fmt: skip
    line = InertFormatter(logging.BASIC_FORMAT).format(record)
    assert "\n" not in line and "\x1b" not in line and "\u202e" not in line
    assert "\\u202e" in line


def test_the_listening_token_never_reaches_the_worker() -> None:
    """``$FXLS_TOKEN`` (a listening server's token) is left out of the worker's environment,
    while fxls's other variables pass."""
    from fxls.engine.workerclient import worker_environment

    env = worker_environment({"FXLS_TOKEN": "s" * 32, "FXLS_LANDLOCK_ABI": "3", "API_KEY": "k"})
    assert env == {"FXLS_LANDLOCK_ABI": "3"}
