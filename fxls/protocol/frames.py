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
    return frame_of(json.dumps(to_dict(message), separators=(",", ":"), ensure_ascii=False))


def frame_of(text: str) -> bytes:
    """JSON text -> one length-prefixed frame (UTF-8; a lone surrogate raises
    ``UnicodeEncodeError``, a body over ``MAX_FRAME_BYTES`` ``ProtocolError``)."""
    body = text.encode()
    if len(body) > MAX_FRAME_BYTES:
        raise ProtocolError(f"frame of {len(body)} bytes exceeds {MAX_FRAME_BYTES}")
    return frame_bytes(body)


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
    except ValueError as exc:  # not UTF-8, not JSON, or an integer over Python's digit limit
        raise ProtocolError(f"frame is not JSON: {exc}"[:300]) from None
    except RecursionError:
        raise ProtocolError("frame is nested deeper than the recursion limit") from None
    if not isinstance(message, dict) or not isinstance(message.get("type"), str):
        raise ProtocolError("frame is not an object with a 'type'")
    return message


class FrameTooLarge(ProtocolError):
    """A header announced more than the reader accepts; ``head`` is the start of the body."""

    def __init__(self, length: int, limit: int, head: bytes) -> None:
        super().__init__(f"frame of {length} bytes exceeds {limit}")
        self.length = length
        self.head = head


class FrameReader:
    """Incremental frame reader: ``feed`` bytes as they arrive, take whole bodies out.

    The one implementation of framing for every reader (the server reading the zygote, the
    zygote reading the server and each job child). Nothing is decoded here: ``next_body``
    returns raw bytes, ``decode_body`` turns one into a message.
    """

    TOO_LARGE_HEAD = 16
    """Bytes of body that ``FrameTooLarge.head`` carries (enough to tell what the frame is)."""

    def __init__(self, limit: int = MAX_FRAME_BYTES) -> None:
        self.limit = limit
        self._buf = bytearray()

    def feed(self, data: bytes) -> None:
        self._buf += data

    @property
    def pending(self) -> int:
        """Bytes received that do not yet make a whole frame."""
        return len(self._buf)

    def next_body(self) -> bytes | None:
        """The next complete body, or None until more bytes arrive.

        Raises ``FrameTooLarge`` (once the first ``TOO_LARGE_HEAD`` bytes of the body are in)
        when the header announces more than ``limit``.
        """
        buf = self._buf
        if len(buf) < _HEADER.size:
            return None
        (length,) = _HEADER.unpack_from(buf)
        if length > self.limit:
            if len(buf) < _HEADER.size + self.TOO_LARGE_HEAD:
                return None
            head = bytes(buf[_HEADER.size : _HEADER.size + self.TOO_LARGE_HEAD])
            raise FrameTooLarge(length, self.limit, head)
        end = _HEADER.size + length
        if len(buf) < end:
            return None
        body = bytes(buf[_HEADER.size : end])
        del buf[:end]
        return body


def write_frame(fd: int, message: Any) -> None:
    """Blocking write of one frame to a file descriptor."""
    write_all(fd, encode_frame(message))


def frame_bytes(body: bytes) -> bytes:
    """An already encoded body -> one frame (no size check: the reader enforces its cap)."""
    return _HEADER.pack(len(body)) + body


def write_all(fd: int, data: bytes) -> None:
    """Blocking write of all of ``data`` to a file descriptor."""
    import os

    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
