"""Answers from the client to requests the server already gave up on."""

from __future__ import annotations

import concurrent.futures
import json
import logging

import pytest
from pygls.lsp.server import LanguageServer

from fxls.lsp.rpc import FxlsProtocol


async def test_an_answer_to_a_cancelled_request_is_no_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # a progress or refresh request the server cancelled (at shutdown, or when a capture it
    # belonged to was cancelled) may still be answered by the editor
    server = LanguageServer("fxls-test", "0", protocol_cls=FxlsProtocol)
    protocol = server.protocol
    assert isinstance(protocol, FxlsProtocol)
    future: concurrent.futures.Future[object] = concurrent.futures.Future()
    future.cancel()
    protocol._request_futures["42"] = future
    with caplog.at_level(logging.DEBUG, logger="fxls.lsp.rpc"):
        protocol.receive(json.dumps({"jsonrpc": "2.0", "id": "42", "result": None}).encode())
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    assert "cancelled request" in caplog.text
