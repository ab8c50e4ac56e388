"""Reading a file of the user's workspace: regular files only, never more than a cap.

Every file the server or ``fxls check`` reads from a workspace (the files it checks, the
files scanned for constructor calls, the rules file, ``pyproject.toml``, ``.gitignore``) is
chosen by the workspace, so it may be a link to ``/dev/zero`` (a size of 0 and endless
bytes), to ``/proc/self/fd/0`` (the server's own JSON-RPC input), or a FIFO that blocks the
first ``open`` until someone writes to it. :func:`read_source` is the one way to read them:

- the path is checked with ``stat`` (``lstat`` when links are not followed) before it is
  opened, so a device or a FIFO is refused without being opened at all;
- it is opened with ``O_NOFOLLOW`` where a link is not expected (a link is then refused),
  ``O_NONBLOCK`` (a FIFO swapped in after the check cannot block the open), ``O_NOCTTY``
  and ``O_CLOEXEC``;
- the open descriptor is checked again with ``fstat`` (what was opened, not what the path
  named a moment before), and must be a regular file;
- at most ``cap + 1`` bytes are read, so a file that grows while it is read, or a size the
  kernel reports wrongly, still costs at most the cap.

A refusal is a value (:class:`Refused`) with a reason meant for people, never an exception,
so every caller has to decide what to tell the user. Standard library only.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from typing import Literal

MAX_SOURCE_BYTES = 8 * 1024 * 1024
"""The largest Python file ``fxls check`` and ``fxls graph`` read (editors send their own
text; the server does not parse documents over 2,000,000 characters either)."""

_FLAGS = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)
_FLAGS |= getattr(os, "O_NOCTTY", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CHUNK = 1024 * 1024

RefusedKind = Literal["missing", "link", "not_regular", "too_large", "unreadable", "encoding"]


@dataclass(frozen=True)
class Refused:
    """Why a file was not read; ``reason`` is a short phrase (``not a regular file (a FIFO)``)
    that names no path, so the caller puts the path where its output escapes it."""

    kind: RefusedKind
    reason: str

    def __str__(self) -> str:
        return self.reason


def _describe(mode: int) -> str:
    """What a file of mode ``mode`` is, in words (``a character device``)."""
    kinds = (
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
    )
    return next((text for test, text in kinds if test(mode)), "an unknown kind of file")


def _not_regular(mode: int, follow_links: bool) -> Refused:
    what = _describe(mode)
    if stat.S_ISLNK(mode) and not follow_links:
        what += "; fxls does not follow links here"
    return Refused("link" if stat.S_ISLNK(mode) else "not_regular", f"not a regular file ({what})")


def _os_error(exc: OSError) -> Refused:
    if isinstance(exc, FileNotFoundError):
        return Refused("missing", "no such file")
    return Refused("unreadable", exc.strerror or type(exc).__name__)


def _read_bytes(path: str, *, cap: int, follow_links: bool = False) -> bytes | Refused:
    """The bytes of the regular file ``path`` (at most ``cap``), or why it was not read.

    ``follow_links`` False refuses a link as the last part of the path (``O_NOFOLLOW``); the
    folders above it are followed either way."""
    try:
        before = os.stat(path) if follow_links else os.lstat(path)
    except OSError as exc:
        return _os_error(exc)
    if not stat.S_ISREG(before.st_mode):
        return _not_regular(before.st_mode, follow_links)
    if before.st_size > cap:
        return _too_large(cap)
    try:
        fd = os.open(path, _FLAGS | (0 if follow_links else _NOFOLLOW))
    except OSError as exc:
        if not follow_links and _NOFOLLOW and exc.errno == errno.ELOOP:
            return _not_regular(stat.S_IFLNK, follow_links)  # swapped for a link since
        return _os_error(exc)
    try:
        opened = os.fstat(fd)
        if not stat.S_ISREG(opened.st_mode):
            return _not_regular(opened.st_mode, follow_links)
        return _read_at_most(fd, cap)
    except OSError as exc:
        return _os_error(exc)
    finally:
        os.close(fd)


def _read_at_most(fd: int, cap: int) -> bytes | Refused:
    chunks: list[bytes] = []
    total = 0
    while total <= cap:
        chunk = os.read(fd, min(_CHUNK, cap + 1 - total))
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        total += len(chunk)
    return _too_large(cap)


def _too_large(cap: int) -> Refused:
    return Refused("too_large", f"too large (over {cap:,} bytes)")


def read_source(
    path: str, *, cap: int, follow_links: bool = False, errors: str = "strict"
) -> str | Refused:
    """The text of the regular file ``path`` as UTF-8 with universal newlines (what
    ``open(path, encoding="utf-8")`` gives), at most ``cap`` bytes, or why it was not read
    (see the module docstring). ``errors`` as for ``bytes.decode``: with ``"strict"`` a file
    that is not UTF-8 is refused."""
    data = _read_bytes(path, cap=cap, follow_links=follow_links)
    if isinstance(data, Refused):
        return data
    try:
        text = data.decode("utf-8", errors)
    except UnicodeDecodeError as exc:
        return Refused("encoding", f"not UTF-8 text (byte {exc.start:,})")
    return text.replace("\r\n", "\n").replace("\r", "\n")


Stamp = tuple[int, int]
"""A file's size and modification time in nanoseconds: what is kept about a file is checked
against it (two numbers, not a whole ``os.stat_result``: the callers look at many files)."""


def stamp(path: str) -> Stamp | None:
    """``path``'s :data:`Stamp`, None when it cannot be read."""
    try:
        found = os.stat(path)
    except OSError:
        return None
    return found.st_size, found.st_mtime_ns
