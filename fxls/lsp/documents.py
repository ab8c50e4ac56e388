"""Open documents: text and version, the latest analysis, and how lines moved since.

A capture result belongs to one document version. When the user types after that version,
:class:`LineMap` says where each line of the analysed text is now (shifted by edits above it)
or that it changed (``None``), so no feature ever shows a shape on the wrong line.
Pure bookkeeping: no LSP types, no worker.
"""

from __future__ import annotations

import asyncio
import difflib
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlparse

from fxls.engine.analyze import FileAnalysis
from fxls.protocol.edits import common_ends


@dataclass(frozen=True)
class LineEdit:
    """Lines ``start..end`` (1-based, inclusive) of the old text became ``new_count`` lines.

    A pure insertion between lines has ``end == start - 1``.
    """

    start: int
    end: int
    new_count: int

    @property
    def delta(self) -> int:
        return self.new_count - (self.end - self.start + 1)


def line_edits(old: str, new: str) -> list[LineEdit]:
    """The blocks of whole lines that differ between two texts, bottom block first.

    Bottom-first order means each edit is still in the coordinates of the text left by the
    ones before it, which is how :class:`LineMap` applies them.
    """
    if old == new:
        return []
    a = old.split("\n")
    b = new.split("\n")
    prefix, suffix = common_ends(a, b)
    mid_a, mid_b = a[prefix : len(a) - suffix], b[prefix : len(b) - suffix]
    edits = []
    matcher = difflib.SequenceMatcher(None, mid_a, mid_b, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag != "equal":
            edits.append(LineEdit(start=prefix + i1 + 1, end=prefix + i2, new_count=j2 - j1))
    edits.reverse()
    return edits


@dataclass
class LineMap:
    """Maps lines between an analysed text and the current text through a list of edits."""

    edits: list[LineEdit] = field(default_factory=list)

    @property
    def identity(self) -> bool:
        return not self.edits

    def to_current(self, line: int) -> int | None:
        """Line of the analysed text -> line of the current text, None if it was edited."""
        for edit in self.edits:
            if line < edit.start:
                continue
            if line > edit.end:
                line += edit.delta
            else:
                return None
        return line

    def to_analysed(self, line: int) -> int | None:
        """Line of the current text -> line of the analysed text, None if it was edited."""
        for edit in reversed(self.edits):
            if line < edit.start:
                continue
            new_end = edit.start + edit.new_count - 1
            if line > new_end:
                line -= edit.delta
            else:
                return None
        return line


MAX_DOCUMENT_CHARS = 2_000_000
"""Documents longer than this are kept (edits still apply) but not parsed or captured."""


@dataclass
class Analysed:
    """One finished analysis and the text it was computed from."""

    version: int | None
    text: str
    analysis: FileAnalysis


@dataclass
class Document:
    uri: str
    path: str
    text: str
    version: int | None
    result: Analysed | None = None
    edits: list[tuple[int | None, LineEdit]] = field(default_factory=list)
    """Edits after ``result.version``, each tagged with the version it produced."""
    syntax: Analysed | None = None
    """A newer analysis that only found a syntax error; ``result`` keeps the last good
    capture for hovers and hints while the user is typing."""
    task: asyncio.Task[Any] | None = None
    """The debounce/capture task for the newest version."""
    task_version: int | None = None
    closed: bool = False
    opened: float = field(default_factory=time.monotonic)
    """When the editor opened it (``time.monotonic``): a hover before the first capture says
    how long fxls has been at it."""
    saved_text: str | None = None
    """The text as on disk (at open, and at each save): the analyses worth storing for the next
    session, which opens the file from disk."""
    told_too_large: bool = False
    """The user was told once that this document is too large to analyse."""

    @property
    def too_large(self) -> bool:
        return len(self.text) > MAX_DOCUMENT_CHARS

    @property
    def lines(self) -> list[str]:
        """The lines of the text without their terminators (``\r\n`` line ends included)."""
        return [line[:-1] if line.endswith("\r") else line for line in self.text.split("\n")]

    def update(self, text: str, version: int | None) -> None:
        """Record a new text; remembers how lines moved for the cached result. A text over
        MAX_DOCUMENT_CHARS (before or after) drops the result instead: no line diff of a
        huge text, and no capture of an older version is pending for it."""
        if len(text) > MAX_DOCUMENT_CHARS or self.too_large:
            self.text, self.version = text, version
            self.result = self.syntax = None
            self.edits = []
            return
        edits = line_edits(self.text, text)
        if edits:
            self.edits.extend((version, edit) for edit in edits)
            if len(self.edits) > _MAX_EDITS:
                if self.result is not None:
                    self.edits = _edits_after(self.result.text, text)
                else:
                    self.edits = self.edits[-_MAX_EDITS:]
        self.text = text
        self.version = version

    def set_result(self, result: Analysed) -> None:
        """Adopt a finished analysis; keeps only edits made after its version."""
        if (
            result.version is not None
            and self.version is not None
            and result.version > self.version
        ):
            return
        self.result = result
        if result.version is None or any(tag is None for tag, _ in self.edits):
            self.edits = _edits_after(result.text, self.text)
        else:
            rv = result.version
            self.edits = [(tag, e) for tag, e in self.edits if tag is not None and tag > rv]

    def syntax_map(self) -> LineMap:
        """Line map from the syntax-error analysis's text to the current text."""
        if self.syntax is None:
            return LineMap()
        return LineMap(line_edits(self.syntax.text, self.text))

    def line_map(self) -> LineMap:
        return LineMap([edit for _, edit in self.edits])

    @property
    def stale(self) -> bool:
        return self.result is not None and self.result.version != self.version


_MAX_EDITS = 500


def _edits_after(analysed: str, current: str) -> list[tuple[int | None, LineEdit]]:
    return [(None, edit) for edit in line_edits(analysed, current)]


def uri_to_path(uri: str) -> str:
    """``file:///a/b.py`` -> ``/a/b.py``; other schemes keep the URI as the name."""
    parsed = urlparse(uri)
    if parsed.scheme != "file":
        return uri
    return unquote(parsed.path)


class DocumentStore:
    """All open documents by URI."""

    def __init__(self) -> None:
        self._docs: dict[str, Document] = {}

    def open(self, uri: str, text: str, version: int | None) -> Document:
        old = self._docs.get(uri)
        if old is not None:
            self.close(uri)
        doc = Document(uri=uri, path=uri_to_path(uri), text=text, version=version, saved_text=text)
        self._docs[uri] = doc
        return doc

    def get(self, uri: str) -> Document | None:
        return self._docs.get(uri)

    def close(self, uri: str) -> Document | None:
        doc = self._docs.pop(uri, None)
        if doc is not None:
            doc.closed = True
            if doc.task is not None and not doc.task.done():
                doc.task.cancel()
        return doc

    def __iter__(self) -> Any:
        return iter(list(self._docs.values()))

    def __len__(self) -> int:
        return len(self._docs)
