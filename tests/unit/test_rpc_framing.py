"""The server's message framing on hand-made byte streams, in chunks of every size."""

from __future__ import annotations

import json

import pytest

from fxls.lsp.rpc import LspMessageReader, Skipped


def _message(obj: object) -> bytes:
    body = json.dumps(obj).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


async def _read_all(stream: bytes, chunk: int, **limits: int) -> list[object]:
    pos = 0

    async def read_some(n: int) -> bytes:
        nonlocal pos
        data = stream[pos : pos + chunk]
        pos += len(data)
        return data

    reader = LspMessageReader(read_some, **limits)
    out: list[object] = []
    while True:
        message = await reader.read()
        if message is None:
            return out
        out.append(message if isinstance(message, Skipped) else json.loads(message))


@pytest.mark.parametrize("chunk", [1, 3, 7, 64, 1 << 20])
async def test_oversized_messages_are_skipped_and_the_next_one_is_read(chunk: int) -> None:
    text = "a file that mentions Content-Length: 12\r\n in a string"
    big = _message({"jsonrpc": "2.0", "method": "didOpen", "params": {"text": text * 40}})
    stream = (
        _message({"id": 1})
        + b"Content-Length: 1000000000000\r\n\r\n"
        + big
        + _message({"id": 2})
        + b"\r\n"  # a stray blank line
        + b"X-Header: "
        + b"h" * 300
        + b"\r\n\r\n{}"
        + _message({"id": 3})
        + b"Content-Type: x\r\n\r\n{}"  # no Content-Length
        + _message({"id": 4})
    )
    got = await _read_all(stream, chunk, max_message=1000, max_header_line=200)
    ids = [m["id"] for m in got if isinstance(m, dict) and "id" in m]
    assert ids == [1, 2, 3, 4]
    reasons = [m.reason for m in got if isinstance(m, Skipped)]
    # the resync after the lying header lands on the big message's own header: that one is
    # over the limit too
    assert len(reasons) == 4
    assert "1,000,000,000,000 bytes" in reasons[0] and "(the limit is 1,000)" in reasons[1]
    assert "header line" in reasons[2] and "without Content-Length" in reasons[3]


async def test_a_body_over_the_limit_that_contains_a_header_is_skipped_whole() -> None:
    """JSON text cannot hold a raw CR LF, so ``Content-Length: 5`` inside a string (escaped)
    is never mistaken for the next header."""
    inner = json.dumps({"text": "Content-Length: 5\r\n\r\n{}" * 50}).encode()
    stream = b"Content-Length: %d\r\n\r\n" % len(inner) + inner + _message({"id": 9})
    got = await _read_all(stream, 5, max_message=100)
    assert isinstance(got[0], Skipped) and got[1] == {"id": 9}
    assert len(got) == 2


async def test_end_of_stream_in_a_body_or_a_header_is_the_end() -> None:
    assert await _read_all(b"Content-Length: 10\r\n\r\n{}", 4) == []
    assert await _read_all(b"Content-Len", 4) == []
