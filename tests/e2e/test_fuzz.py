"""Random editing sessions against the real server (hypothesis + pytest-lsp).

Each example opens a fresh document, applies random incremental edits (broken syntax, non-ASCII
text, emoji, CJK, CRLF, characters past the end of a line), asks for hovers, inlay hints and
code lenses at random places, closes and reopens it. A short debounce makes captures start and
get cancelled while the edits arrive. Checked after every example:

- no error response, no error message, and the server still answers;
- the server's text equals the text the LSP specification says the edits produce (compared
  through the ``fxls/stats`` request, which reports a SHA-256 of each open document);
- every range the server returns lies inside the document it was computed for;
- published diagnostics never go back in version, and none arrive for a closed document.

``bench/fuzz_soak.py`` drives the same machinery for 10,000 messages.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import itertools
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import pytest_lsp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "lsp"
SEED_TEXT = (
    (FIXTURES / "non_ascii.py").read_text()
    + "\n\n"
    + (FIXTURES / "shape_error.py").read_text().replace("class Head", "class Head2")
)
STATS = "fxls/stats"
PUBLISH = types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS
FAST = {"debounceMs": 50}

pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch"),
    pytest.mark.slow,
    pytest.mark.asyncio(loop_scope="module"),
]

# -- the oracle: LSP text edits, implemented from the specification ----------------------

_EOL = re.compile(r"\r\n|\r|\n")


def split_lines(text: str) -> list[tuple[int, int]]:
    """(start, end without terminator) offsets of each line; LSP terminators only."""
    out, start = [], 0
    for match in _EOL.finditer(text):
        out.append((start, match.start()))
        start = match.end()
    out.append((start, len(text)))
    return out


def utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def offset_of(text: str, line: int, character: int) -> int:
    """Offset of an LSP position (UTF-16): past the line's end is its end, past the last
    line is the end of the text."""
    lines = split_lines(text)
    if line >= len(lines):
        return len(text)
    start, end = lines[line]
    units = 0
    for index in range(start, end):
        if units >= character:
            return index
        units += utf16_len(text[index])
    return end


def position_at(text: str, line: int, codepoint: int) -> types.Position:
    """LSP position of code point ``codepoint`` on ``line`` (may be past the end)."""
    lines = split_lines(text)
    if line >= len(lines):
        return types.Position(line=line, character=codepoint)
    start, end = lines[line]
    content = text[start:end]
    extra = max(0, codepoint - len(content))
    return types.Position(line=line, character=utf16_len(content[:codepoint]) + extra)


def in_bounds(text: str, rng: types.Range) -> bool:
    lines = split_lines(text)
    for pos in (rng.start, rng.end):
        if pos.line >= len(lines):
            return False
        start, end = lines[pos.line]
        if pos.character > utf16_len(text[start:end]):
            return False
    return (rng.start.line, rng.start.character) <= (rng.end.line, rng.end.character)


# -- the session: one client, many documents ---------------------------------------------


@dataclass
class Session:
    """Client-side bookkeeping for documents and what the server sent about them."""

    client: LanguageClient
    events: list[tuple[str, Any]] = field(default_factory=list)
    """("publish", params) and ("open"/"close", uri), in the order they happened."""
    texts: dict[tuple[str, int, int], str] = field(default_factory=dict)
    """(uri, how often it was opened, version) -> text, for checking published ranges."""
    messages: int = 0

    def install(self) -> None:
        features = self.client.protocol.fm.features
        original = features[PUBLISH]

        def record(params: types.PublishDiagnosticsParams) -> None:
            self.events.append(("publish", params))
            original(params)

        features[PUBLISH] = record
        for method in (types.WORKSPACE_INLAY_HINT_REFRESH, types.WORKSPACE_CODE_LENS_REFRESH):
            features[method] = lambda params: None

    def errors(self) -> list[str]:
        """Error-level messages the server showed or logged."""
        shown = [m.message for m in self.client.messages if m.type == types.MessageType.Error]
        logged = [m.message for m in self.client.log_messages if m.type == types.MessageType.Error]
        return shown + logged

    async def stats(self) -> dict[str, Any]:
        self.messages += 1
        result = await self.client.protocol.send_request_async(STATS, None)
        return _plain(result)


def _plain(obj: Any) -> Any:
    """pygls answers unknown methods with namedtuples; make them dicts again."""
    if hasattr(obj, "_asdict"):
        return {k: _plain(v) for k, v in obj._asdict().items()}
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_plain(v) for v in obj]
    return obj


_uris = itertools.count(1)


class Doc:
    """One document as the client sees it, and the operations a fuzzer may apply."""

    def __init__(self, session: Session, text: str = SEED_TEXT) -> None:
        self.session = session
        self.uri = (FIXTURES / f"fuzz_{next(_uris)}.py").as_uri()
        self.text = text
        self.version = 1
        self.open = False
        self.opened = 0

    @property
    def client(self) -> LanguageClient:
        return self.session.client

    def _ident(self) -> types.TextDocumentIdentifier:
        return types.TextDocumentIdentifier(uri=self.uri)

    def do_open(self) -> None:
        self.version = 1
        self.opened += 1
        self.session.events.append(("open", self.uri))
        self.session.texts[(self.uri, self.opened, self.version)] = self.text
        self.session.messages += 1
        self.client.text_document_did_open(
            types.DidOpenTextDocumentParams(
                text_document=types.TextDocumentItem(
                    uri=self.uri, language_id="python", version=1, text=self.text
                )
            )
        )
        self.open = True

    def do_close(self) -> None:
        self.session.events.append(("close", self.uri))
        self.session.messages += 1
        self.client.text_document_did_close(types.DidCloseTextDocumentParams(self._ident()))
        self.open = False

    def pick(self, a: int, b: int) -> types.Position:
        """A position from two random numbers: usually on a line, sometimes past its end
        or past the last line."""
        lines = split_lines(self.text)
        line = a % (len(lines) + 2)
        width = 0 if line >= len(lines) else lines[line][1] - lines[line][0]
        return position_at(self.text, line, b % (width + 4))

    def do_change(self, a: int, b: int, span: int, c: int, new: str) -> None:
        start = self.pick(a, b)
        lines = split_lines(self.text)
        end_line = min(start.line + span, len(lines) + 1)
        end = self.pick(end_line, c) if end_line != start.line else self.pick(start.line, c)
        if (end.line, end.character) < (start.line, start.character):
            start, end = end, start
        lo = offset_of(self.text, start.line, start.character)
        hi = offset_of(self.text, end.line, end.character)
        self.text = self.text[:lo] + new + self.text[hi:]
        self.version += 1
        self.session.texts[(self.uri, self.opened, self.version)] = self.text
        self.session.messages += 1
        self.client.text_document_did_change(
            types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(
                    uri=self.uri, version=self.version
                ),
                content_changes=[
                    types.TextDocumentContentChangePartial(
                        range=types.Range(start=start, end=end), text=new
                    )
                ],
            )
        )

    async def do_hover(self, a: int, b: int) -> None:
        self.session.messages += 1
        result = await self.client.text_document_hover_async(
            types.HoverParams(text_document=self._ident(), position=self.pick(a, b))
        )
        if result is not None and self.open:
            assert isinstance(result.contents, types.MarkupContent)
            if result.range is not None:
                assert in_bounds(self.text, result.range), (result.range, self.text)

    async def do_hints(self, a: int, b: int) -> None:
        first, second = self.pick(a, 0), self.pick(b, 0)
        lo, hi = sorted([first, second], key=lambda p: (p.line, p.character))
        self.session.messages += 1
        hints = await self.client.text_document_inlay_hint_async(
            types.InlayHintParams(text_document=self._ident(), range=types.Range(lo, hi))
        )
        for hint in hints or []:
            assert self.open
            pos = hint.position
            assert in_bounds(self.text, types.Range(pos, pos)), (hint, self.text)

    async def do_lens(self) -> None:
        self.session.messages += 1
        lenses = await self.client.text_document_code_lens_async(
            types.CodeLensParams(text_document=self._ident())
        )
        for lens in lenses or []:
            assert self.open
            assert in_bounds(self.text, lens.range), (lens, self.text)

    async def settle(self, timeout: float = 30.0) -> None:
        """Wait for the diagnostics of the current version (a finished capture)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for kind, params in reversed(self.session.events):
                if kind == "publish" and params.uri == self.uri:
                    if params.version == self.version:
                        return
                    break
            await asyncio.sleep(0.02)
        raise AssertionError(f"no diagnostics for {self.uri} v{self.version}")

    async def check_text(self) -> None:
        """The server's copy of the document is byte for byte the client's."""
        docs = {d["uri"]: d for d in (await self.session.stats())["documents"]}
        if not self.open:
            assert self.uri not in docs
            return
        got = docs[self.uri]
        want = hashlib.sha256(self.text.encode("utf-8", "surrogatepass")).hexdigest()
        assert (got["version"], got["length"], got["sha256"]) == (
            self.version,
            len(self.text),
            want,
        ), f"server text differs from the client's: {self.text!r}"


def check_publishes(session: Session, uri: str) -> None:
    """Diagnostics for ``uri``: in range for their version, versions never go back within
    one open period, and nothing after the close's empty publish until the next open."""
    closed = False
    last = opened = 0
    for kind, item in session.events:
        if kind in ("open", "close"):
            if item == uri and kind == "open":
                closed, last, opened = False, 0, opened + 1
            continue
        params: types.PublishDiagnosticsParams = item
        if params.uri != uri:
            continue
        assert not closed, f"diagnostics published for closed document: {params}"
        if params.version is None:  # the empty publish that answers didClose
            assert not params.diagnostics
            closed = True
            continue
        assert params.version >= last, f"diagnostics went back from v{last} to {params}"
        last = params.version
        text = session.texts[(uri, opened, params.version)]
        for diag in params.diagnostics:
            assert in_bounds(text, diag.range), (diag, text)


# -- strategies ----------------------------------------------------------------------------

FRAGMENTS = [
    "x",
    "ä",
    "😀",
    "中文",
    "\n",
    "\r\n",
    "(",
    ")",
    ":",
    "    ",
    "\t",
    '"',
    "#",
    " = self.fc(x)",
    "def ",
    "class A(nn.Module):",
    "return",
    "\x0c",
    "\u2028",
    "𝕏",
]
new_text = st.lists(st.sampled_from(FRAGMENTS), max_size=6).map("".join)
small = st.integers(min_value=0, max_value=200)
operation = st.one_of(
    st.tuples(st.just("change"), small, small, st.integers(0, 3), small, new_text),
    st.tuples(st.just("hover"), small, small),
    st.tuples(st.just("hints"), small, small),
    st.tuples(st.just("lens")),
    st.tuples(st.just("reopen")),
    st.tuples(st.just("check")),
    st.tuples(st.just("settle")),
    st.tuples(st.just("wait"), st.integers(0, 200)),
)
operations = st.lists(operation, min_size=1, max_size=25)


async def run_operation(doc: Doc, op: tuple[Any, ...]) -> None:
    kind = op[0]
    if kind == "change":
        doc.do_change(*op[1:])
    elif kind == "hover":
        await doc.do_hover(*op[1:])
    elif kind == "hints":
        await doc.do_hints(*op[1:])
    elif kind == "lens":
        await doc.do_lens()
    elif kind == "reopen":
        doc.do_close()
        await doc.check_text()
        doc.do_open()
    elif kind == "check":
        await doc.check_text()
    elif kind == "settle":
        await doc.settle()
    elif kind == "wait":
        await asyncio.sleep(op[1] / 1000)


async def run_example(session: Session, ops: list[tuple[Any, ...]]) -> None:
    """One random session on a fresh document, then every check."""
    doc = Doc(session)
    doc.do_open()
    for op in ops:
        await run_operation(doc, op)
    await doc.check_text()
    doc.do_close()
    await doc.check_text()  # the server has processed the close
    await asyncio.sleep(0.15)  # longer than the debounce: a late capture would publish now
    await session.stats()
    check_publishes(session, doc.uri)
    assert session.errors() == []


# -- the test --------------------------------------------------------------------------------

SERVER = ClientServerConfig(server_command=[sys.executable, "-m", "fxls", "serve"])


@pytest_lsp.fixture(config=SERVER, scope="module")
async def client(lsp_client: LanguageClient):
    session = Session(lsp_client)
    session.install()
    lsp_client.session = session  # type: ignore[attr-defined]
    await lsp_client.initialize_session(
        types.InitializeParams(
            capabilities=client_capabilities("visual-studio-code"),
            root_uri=FIXTURES.as_uri(),
            initialization_options=FAST,
        )
    )
    warm = Doc(session)  # the worker is warm before the fuzzing starts
    warm.do_open()
    await warm.settle(timeout=120)
    warm.do_close()
    yield
    await lsp_client.shutdown_session()


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ops=operations)
async def test_random_editing_sessions(client: LanguageClient, ops: list[tuple[Any, ...]]) -> None:
    await run_example(client.session, ops)  # type: ignore[attr-defined]


async def test_still_serves_after_the_fuzzing(client: LanguageClient) -> None:
    """After the random sessions the server still captures, hovers and captures edits.

    (Whether a random session let a capture of an edited version finish depends on the draw and
    on the machine's load; here an edit is captured for sure.)"""
    session: Session = client.session  # type: ignore[attr-defined]
    text = (FIXTURES / "shape_error.py").read_text()
    doc = Doc(session, text)
    doc.do_open()
    await doc.settle()
    (last,) = [p for k, p in session.events if k == "publish" and p.uri == doc.uri]
    assert "FX201" in [d.code for d in last.diagnostics]
    line = next(i for i, s in enumerate(text.split("\n")) if "self.fc(x)" in s)
    col = text.split("\n")[line].index("self.fc") + 5
    result = await client.text_document_hover_async(
        types.HoverParams(
            text_document=types.TextDocumentIdentifier(uri=doc.uri),
            position=types.Position(line=line, character=col),
        )
    )
    assert result is not None and isinstance(result.contents, types.MarkupContent)
    # the shape error is at fc: no output shape, the callee and its argument as written
    value = result.contents.value
    assert value.startswith("→ `?`") and "fc · `Linear(10, 5)`" in value, value
    assert "| input | `x` | `[B, 20] float32` |" in value
    # an edit of module-level code is captured again and published for its version
    doc.do_change(0, 0, 0, 0, "WIDTH = 3\n")
    await doc.settle()
    edited = [p for k, p in session.events if k == "publish" and p.uri == doc.uri]
    assert edited[-1].version == 2 and "FX201" in [d.code for d in edited[-1].diagnostics]
    doc.do_close()
    assert session.errors() == []


@pytest.mark.parametrize(
    ("text", "start", "end", "new", "expected"),
    [
        # a character past the end of a line is the end of that line, never the next line
        ("abc\ndef", (0, 9), (0, 9), "X", "abcX\ndef"),
        ("abc\ndef", (1, 9), (1, 9), "X", "abc\ndefX"),
        ("abc\r\ndef", (0, 4), (0, 4), "X", "abcX\r\ndef"),
        # form feed and U+2028 are not LSP line breaks
        ("a\x0cb\u2028c\nd", (0, 4), (0, 5), "X", "a\x0cb\u2028X\nd"),
        # UTF-16: the emoji counts two units
        ("😀ä\n", (0, 2), (0, 3), "o", "😀o\n"),
        # a line past the end is the end of the text
        ("ab", (5, 0), (6, 0), "\n", "ab\n"),
    ],
)
async def test_edge_edits_match_the_specification(
    client: LanguageClient,
    text: str,
    start: tuple[int, int],
    end: tuple[int, int],
    new: str,
    expected: str,
) -> None:
    session: Session = client.session  # type: ignore[attr-defined]
    doc = Doc(session, text)
    doc.do_open()
    lo = offset_of(text, *start)
    hi = offset_of(text, *end)
    assert text[:lo] + new + text[hi:] == expected  # the oracle agrees with the case
    doc.version += 1
    doc.text = expected
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=doc.uri, version=2),
            content_changes=[
                types.TextDocumentContentChangePartial(
                    range=types.Range(types.Position(*start), types.Position(*end)), text=new
                )
            ],
        )
    )
    await doc.check_text()
    doc.do_close()


async def test_crlf_document_ranges_end_before_the_line_break(client: LanguageClient) -> None:
    """With CRLF line ends, end-of-line positions are before the ``\\r``, not after it."""
    session: Session = client.session  # type: ignore[attr-defined]
    text = (FIXTURES / "shape_error.py").read_text().replace("\n", "\r\n")
    text = text.replace("return self.fc(x)", "return self.fc(x) +")  # a syntax error at the end
    doc = Doc(session, text)
    doc.do_open()
    await doc.settle()
    doc.do_change(0, 0, 0, 0, "")  # same text, version 2: the error is published again
    await doc.settle()
    published = [p for k, p in session.events if k == "publish" and p.uri == doc.uri]
    assert published and all(p.diagnostics for p in published)
    for params in published:
        for diag in params.diagnostics:
            assert in_bounds(text, diag.range), diag
    doc.do_close()
