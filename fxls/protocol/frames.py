"""Length-prefixed JSON frames: a 4-byte big-endian length, then UTF-8 JSON.

Never pickle between processes: a hostile child could run code in the reader. Every frame is
size-capped on both sides. Standard library only.
"""

from __future__ import annotations

import json
import struct
from typing import Any

from fxls.protocol.codec import ProtocolError, to_dict

MAX_FRAME_BYTES = 64 * 1024 * 1024
"""Largest frame either side accepts."""
MAX_RESULT_BYTES = 32 * 1024 * 1024
"""Largest result payload a child may send; larger ones become ``result_too_large``."""

_HEADER = struct.Struct(">I")


def encode_frame(message: Any) -> bytes:
    """A message (dict or dataclass) -> one length-prefixed frame."""
    body = json.dumps(to_dict(message), separators=(",", ":"), ensure_ascii=False).encode()
    if len(body) > MAX_FRAME_BYTES:
        raise ProtocolError(f"frame of {len(body)} bytes exceeds {MAX_FRAME_BYTES}")
    return _HEADER.pack(len(body)) + body


def frame_length(header: bytes) -> int:
    """Body length from a 4-byte header; raises ProtocolError when over the cap."""
    if len(header) != _HEADER.size:
        raise ProtocolError("truncated frame header")
    (length,) = _HEADER.unpack(header)
    if length > MAX_FRAME_BYTES:
        raise ProtocolError(f"frame of {length} bytes exceeds {MAX_FRAME_BYTES}")
    return int(length)


def decode_body(body: bytes) -> dict[str, Any]:
    try:
        message = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ProtocolError(f"frame is not JSON: {exc}") from exc
    if not isinstance(message, dict) or not isinstance(message.get("type"), str):
        raise ProtocolError("frame is not an object with a 'type'")
    return message


def read_frame(fd: int) -> dict[str, Any] | None:
    """Blocking read of one frame from a file descriptor; None at a clean EOF."""
    import os

    header = _read_exactly(os.read, fd, _HEADER.size)
    if not header:
        return None
    body = _read_exactly(os.read, fd, frame_length(header))
    return decode_body(body)


def write_frame(fd: int, message: Any) -> None:
    """Blocking write of one frame to a file descriptor."""
    import os

    data = memoryview(encode_frame(message))
    while data:
        written = os.write(fd, data)
        data = data[written:]


def _read_exactly(read: Any, fd: int, n: int) -> bytes:
    chunks = []
    remaining = n
    while remaining:
        chunk = read(fd, min(remaining, 1 << 20))
        if not chunk:
            if remaining == n:
                return b""
            raise ProtocolError("connection closed inside a frame")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)
