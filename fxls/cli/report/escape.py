"""The one escaping function for text fxls did not write, in every report and on stderr.

Messages, names, values and call texts come from running the user's code, and paths and
settings from the checked repository, so their author chooses them. In a terminal or a CI log
they must not act, and in CI they must not carry secrets out in bulk:

- control characters are shown, not sent: C0 and C1 controls, DEL, ESC (OSC 52 sets the
  clipboard, OSC 0 the window title, CSI erases lines), line and paragraph separators and the
  bidirectional controls U+202A-U+202E and U+2066-U+2069 (which reorder what a reader sees)
  become ``\\x1b``, ``\\n``, ``\\u202e``, so a line break in such text never starts a line
  (the GitHub format keeps ``\\n`` and ``\\r`` in a message: it sends them as ``%0A``/``%0D``);
- no GitHub Actions workflow command can start: text whose first non-blank characters are
  ``::`` gets its first ``:`` as ``\\x3a``, and ``##[`` (the runner's older command syntax,
  recognised anywhere in a line) becomes ``##\\x5b``;
- a run of more than :data:`BLOB_RUN` characters of ``[A-Za-z0-9+/=_-]`` (base64 or hex,
  the shape of an encoded secret) becomes ``<blob of N characters removed>``; paths keep
  theirs (the repository names its files, user code cannot);
- the result is at most :data:`MAX_TEXT` characters (:data:`MAX_PATH` for a path), cut with
  an ellipsis.

The work is linear in the input and stops once the output is full: a 30 MB message costs
one pass of a character class over its blobs, no backtracking.
"""

from __future__ import annotations

import re
from typing import Any

MAX_TEXT = 2_000
"""Longest text taken from one string of a result (a diagnostic message, a value, a name)."""
MAX_PATH = 4_096
"""Longest path shown."""
BLOB_RUN = 256
"""Longest run of base64/hex characters kept; longer runs are replaced by a placeholder."""
ELLIPSIS = "…"

_BLOB = re.compile(r"[A-Za-z0-9+/=_-]+")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_CONTROLS = [*range(0x00, 0x20), *range(0x7F, 0xA0)]
_FORMATTING = [0x2028, 0x2029, *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
_ESCAPES: dict[str, str] = {
    **{chr(c): f"\\x{c:02x}" for c in _CONTROLS},
    **{chr(c): f"\\u{c:04x}" for c in _FORMATTING},
    **_NAMED,
}
_KEEP_NEWLINES = {k: v for k, v in _ESCAPES.items() if k not in "\r\n"}


def _pieces(text: str, limit: int, escapes: dict[str, str], blobs: bool) -> tuple[list[str], bool]:
    """The escaped pieces of ``text`` until they hold more than ``limit`` characters, and
    whether all of ``text`` was taken."""
    out: list[str] = []
    size = pos = 0
    while pos < len(text):
        if size > limit:
            return out, False
        run = _BLOB.match(text, pos)
        if run is not None:
            end = run.end()
            if blobs and end - pos > BLOB_RUN:
                piece = f"<blob of {end - pos} characters removed>"
            else:
                piece = text[pos:end]
            pos = end
        else:
            piece = escapes.get(text[pos], text[pos])
            pos += 1
        out.append(piece)
        size += len(piece)
    return out, True


def escape_text(
    text: str, limit: int | None = None, *, path: bool = False, newlines: bool = False
) -> str:
    """``text`` made inert for a terminal, a CI log and every report format (module
    docstring), at most ``limit`` characters (default :data:`MAX_TEXT`); ``path``: a file
    name of the checked repository (default limit :data:`MAX_PATH`, blobs kept);
    ``newlines``: ``\\n`` and ``\\r`` stay (only for text the caller escapes again, as the
    GitHub format's data)."""
    if limit is None:
        limit = MAX_PATH if path else MAX_TEXT
    escapes = _KEEP_NEWLINES if newlines else _ESCAPES
    pieces, whole = _pieces(text, limit, escapes, blobs=not path)
    out = "".join(pieces).replace("##[", "##\\x5b")
    start = len(out) - len(out.lstrip())
    if out.startswith("::", start):
        out = f"{out[:start]}\\x3a{out[start + 1 :]}"
    if whole and len(out) <= limit:
        return out
    return out[: max(limit - 1, 0)] + ELLIPSIS


def escape_tree(value: Any, path_keys: frozenset[str] = frozenset()) -> Any:
    """A JSON document with every string (not the keys, which are fxls's) through
    :func:`escape_text`; strings under a key in ``path_keys`` as paths. Line breaks stay:
    JSON writes them as ``\\n`` inside a string, never as a line of its own."""
    if isinstance(value, str):
        return escape_text(value, newlines=True)
    if isinstance(value, dict):
        return {
            key: escape_text(item, path=True, newlines=True)
            if key in path_keys and isinstance(item, str)
            else escape_tree(item, path_keys)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [escape_tree(item, path_keys) for item in value]
    return value
