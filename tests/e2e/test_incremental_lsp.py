"""Incremental captures through the real server and worker.

Two servers live through the same scripted editing session of a three-class file, one with
the capture cache and one without (``FXLS_CAPTURE_CACHE=0``): after every edit, everything the
editor shows (published diagnostics, hovers at every identifier, inlay hints, code lenses)
must be identical. ``fxls/stats`` says which classes each version sent to the worker: none for
comments and blank lines, only the edited class's unit for an edit inside a class.
"""

from __future__ import annotations

import asyncio
import importlib.util
import io
import json
import os
import re
import sys
import time
import tokenize
from pathlib import Path
from typing import Any

import pytest
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch"),
]

PUBLISH = types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS

THREE = """\
import torch
from torch import nn

SCALE = 2


class Gate(nn.Module):
    def __init__(self, dim: int = 16):
        super().__init__()
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        unused = x * SCALE
        return torch.sigmoid(self.proj(x))


class Mixer(nn.Module):
    def __init__(self, dim: int = 16):
        super().__init__()
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


class Stack(nn.Module):
    def __init__(self, dim: int = 16, depth: int = 2):
        super().__init__()
        self.blocks = nn.ModuleList([Mixer(dim) for _ in range(depth)])
        self.head = nn.Linear(dim, 10)

    def forward(self, x):
        for block in self.blocks:
            x = x + block(x)
        return self.head(x).view(x.shape[0], -1)


def describe(model):
    return type(model).__name__
"""


def _edit(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, old
    return text.replace(old, new)


# (what the step does, old, new, the classes the cached server must send to the worker;
#  None: not checked)
STEPS: list[tuple[str, str, str, list[str] | None]] = [
    ("comment line above a class", "class Mixer", "# the mixer\nclass Mixer", []),
    ("blank lines", "\n\nclass Stack", "\n\n\n\nclass Stack", []),
    (
        "trailing whitespace",
        "super().__init__()\n        self.proj",
        "super().__init__()   \n        self.proj",
        [],
    ),
    ("comment inside forward", "        for block", "        # residual\n        for block", []),
    ("comment after code", "x = x + block(x)", "x = x + block(x)  # add", []),
    (
        "typing in a function no module calls",
        "type(model).__name__",
        "type(model).__qualname__",
        [],
    ),
    (
        "edit inside Gate",
        "return torch.sigmoid(self.proj(x))",
        "return torch.tanh(self.proj(x))",
        ["Gate"],
    ),
    (
        "edit inside Mixer",
        "self.fc2(torch.relu(",
        "self.fc2(torch.nn.functional.gelu(",
        ["Mixer", "Stack"],
    ),
    ("edit inside Stack", "nn.Linear(dim, 10)", "nn.Linear(dim, 12)", ["Mixer", "Stack"]),
    ("comment moves every line", "SCALE = 2", "# scale of the gate\n\nSCALE = 2", []),
    ("module-level code", "SCALE = 2", "SCALE = 3", ["Gate", "Mixer", "Stack"]),
    (
        "a shape error in Stack",
        "view(x.shape[0], -1)",
        "view(x.shape[0], 7, -1)",
        ["Mixer", "Stack"],
    ),
    ("comment below the error", "# residual", "# residual, twice", []),
    ("undo the error", "view(x.shape[0], 7, -1)", "view(x.shape[0], -1)", None),
    ("a name error at import", "SCALE = 3", "SCALE = SCAL", None),
    ("fixed again", "SCALE = SCAL", "SCALE = 3", None),
]

_TIME = re.compile(r"(capture time\W+)\d+\.\d+ s")


def _server(cache: bool) -> ClientServerConfig:
    env = {**os.environ, "FXLS_CAPTURE_CACHE": "1" if cache else "0"}
    return ClientServerConfig(
        server_command=[sys.executable, "-m", "fxls", "serve"], server_env=env
    )


async def _start(config: ClientServerConfig, root: Path) -> LanguageClient:
    client: LanguageClient = await config.start()  # type: ignore[assignment]
    client.published = []  # type: ignore[attr-defined]
    features = client.protocol.fm.features
    original = features[PUBLISH]

    def record(params: types.PublishDiagnosticsParams) -> None:
        client.published.append(params)  # type: ignore[attr-defined]
        original(params)

    features[PUBLISH] = record
    for method in (types.WORKSPACE_INLAY_HINT_REFRESH, types.WORKSPACE_CODE_LENS_REFRESH):
        features[method] = lambda params: None
    await client.initialize_session(
        types.InitializeParams(
            capabilities=client_capabilities("visual-studio-code"),
            root_uri=root.as_uri(),
            initialization_options={"debounceMs": 0},
        )
    )
    return client


async def _published(client: LanguageClient, uri: str, version: int) -> Any:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        for params in reversed(client.published):  # type: ignore[attr-defined]
            if params.uri == uri and params.version == version:
                return params
        await asyncio.sleep(0.02)
    raise AssertionError(f"no diagnostics for version {version}")


def _dicts(value: Any) -> Any:
    """pygls answers a custom request with named tuples; plain dicts and lists instead."""
    if hasattr(value, "_asdict"):
        return {k: _dicts(v) for k, v in value._asdict().items()}
    if isinstance(value, (list, tuple)):
        return [_dicts(v) for v in value]
    return value


async def _stats(client: LanguageClient) -> Any:
    return _dicts(await client.protocol.send_request_async("fxls/stats", None))


async def _settled(client: LanguageClient, uri: str, version: int) -> Any:
    """Published for ``version``, the result adopted (``resultVersion``) and nothing running
    for it any more (``busy``: the compile check after the capture)."""
    await _published(client, uri, version)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        stats = await _stats(client)
        doc = next(d for d in stats["documents"] if d["uri"] == uri)
        if doc["resultVersion"] == version and not doc["busy"]:
            return stats
        await asyncio.sleep(0.02)
    raise AssertionError(f"version {version} was not adopted")


def _identifiers(text: str) -> list[types.Position]:
    out = []
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.NAME:
            out.append(types.Position(line=tok.start[0] - 1, character=tok.start[1] + 1))
    return out


def _plain(value: Any) -> Any:
    from lsprotocol import converters

    return converters.get_converter().unstructure(value)


async def _view(client: LanguageClient, uri: str, text: str, version: int) -> dict[str, Any]:
    """Everything the editor shows for one version."""
    doc = types.TextDocumentIdentifier(uri=uri)
    published = await _published(client, uri, version)
    hovers = []
    for position in _identifiers(text):
        hover = await client.text_document_hover_async(
            types.HoverParams(text_document=doc, position=position)
        )
        value = _plain(hover)
        hovers.append(json.loads(_TIME.sub(r"\1? s", json.dumps(value))))
    lines = text.split("\n")
    whole = types.Range(
        start=types.Position(line=0, character=0),
        end=types.Position(line=len(lines) - 1, character=len(lines[-1])),
    )
    hints = await client.text_document_inlay_hint_async(
        types.InlayHintParams(text_document=doc, range=whole)
    )
    lenses = await client.text_document_code_lens_async(types.CodeLensParams(text_document=doc))
    return {
        "diagnostics": _plain(published.diagnostics),
        "hovers": hovers,
        "hints": _plain(hints),
        "lenses": _plain(lenses),
    }


@pytest.mark.slow
async def test_cache_shows_exactly_what_a_full_capture_shows(tmp_path: Path) -> None:
    path = tmp_path / "three.py"
    path.write_text(THREE)
    uri = path.as_uri()
    cached = await _start(_server(cache=True), tmp_path)
    plain = await _start(_server(cache=False), tmp_path)
    try:
        text, version = THREE, 1
        for client in (cached, plain):
            client.text_document_did_open(
                types.DidOpenTextDocumentParams(
                    text_document=types.TextDocumentItem(
                        uri=uri, language_id="python", version=1, text=text
                    )
                )
            )
        first = await _settled(cached, uri, 1)
        assert first["cache"]["lastCaptured"] == ["Gate", "Mixer", "Stack"]
        await _settled(plain, uri, 1)
        assert (await _stats(plain))["cache"] is None
        views = [(await _view(cached, uri, text, 1), await _view(plain, uri, text, 1))]
        assert views[0][0]["hints"], "the file shows shapes"
        assert any(d["code"] == "FX302" for d in views[0][0]["diagnostics"])
        jobs = first["cache"]["jobs"]
        for label, old, new, expected in STEPS:
            text, version = _edit(text, old, new), version + 1
            for client in (cached, plain):
                client.text_document_did_change(
                    types.DidChangeTextDocumentParams(
                        text_document=types.VersionedTextDocumentIdentifier(
                            uri=uri, version=version
                        ),
                        content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)],
                    )
                )
            stats = await _settled(cached, uri, version)
            await _settled(plain, uri, version)
            if expected is not None:
                sent = stats["cache"]["jobs"] - jobs
                assert sent == (1 if expected else 0), (label, stats["cache"])
                if expected:
                    assert stats["cache"]["lastCaptured"] == expected, label
            jobs = stats["cache"]["jobs"]
            mine, theirs = (
                await _view(cached, uri, text, version),
                await _view(plain, uri, text, version),
            )
            assert mine == theirs, label
            views.append((mine, theirs))
        # the session exercised shapes, errors and moved lines
        codes = {d["code"] for mine, _ in views for d in mine["diagnostics"]}
        assert "FX201" in codes and "FX404" in codes, codes
        assert stats["cache"]["hits"] > 0
    finally:
        for client in (cached, plain):
            await client.shutdown_session()
