"""Analyses kept on disk between sessions: a new server shows the last shapes of a file at once.

A stored analysis is keyed by everything it depends on that the server knows before the worker
runs: fxls's version, the interpreter that runs the worker, the settings, the file's path and
text, and the workspace's Python files (path, size, modification time). It is shown marked as
stored (``FileAnalysis.provenance``) until the worker's fresh capture replaces it, which always
runs: the store only decides what is shown first, never what is shown last. With nothing
stored, a new server's first shapes are a ``preview`` job's instead (``analyze.preview``).

The store is data, not code: JSON, decoded through the protocol codec (``from_dict`` refuses
anything that is not a module result or a diagnostic), one file per key named by its hash (no
user text in file names), written atomically with mode 0600 in a 0700 folder of the user's cache
(``$XDG_CACHE_HOME/fxls/results``, never the workspace), bounded per entry and in total (least
recently used entries go first), and safe to delete at any time. ``fxls.storeResults = false``
or ``FXLS_STORE=0`` turns it off.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import time
from dataclasses import replace
from typing import Any

from fxls import __version__
from fxls.analysis import parse
from fxls.engine.analyze import EngineOptions, FileAnalysis, workspace_digest
from fxls.protocol.codec import ProtocolError, from_dict, to_dict
from fxls.protocol.model import Diagnostic, ModuleResult

FORMAT = 2
"""The version of what is stored (a module result as the codec writes it); entries of another
are ignored: 2 when a result's inputs became one list of ``InputValue``."""
STORE_ENV = "FXLS_STORE"
"""``0`` turns the store off (tests, read-only homes)."""
MAX_ENTRY_BYTES = 4 << 20
"""A larger analysis is not stored."""
MAX_TOTAL_BYTES = 64 << 20
"""Past this, the least recently used entries are deleted."""


def default_folder() -> str:
    """``$XDG_CACHE_HOME/fxls/results`` (``~/.cache/fxls/results``)."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "fxls", "results")


def enabled() -> bool:
    return os.environ.get(STORE_ENV, "1") != "0"


class ResultStore:
    """Stored analyses in ``folder``; every method is blocking file I/O (call it in a thread)
    and never raises: a store that cannot be read or written is a store that is empty."""

    def __init__(self, folder: str | None = None) -> None:
        self.folder = folder or default_folder()

    def key(
        self, path: str, text: str, options: EngineOptions, python: str, root: str | None
    ) -> str:
        """The hash of everything a stored analysis of ``text`` depends on (known before the
        worker runs; the torch version is checked by the capture that replaces it)."""
        settings = [
            to_dict(options.limits),
            to_dict(options.isolation),
            options.meta_init,
            options.symbolic,
            None if options.rules is None else to_dict(options.rules),
        ]
        parts = [
            FORMAT,
            __version__,
            python,
            os.path.abspath(path),
            hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest(),
            settings,
            workspace_digest(root, path),
        ]
        return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()

    def _file(self, key: str) -> str:
        return os.path.join(self.folder, key + ".json")

    def load(self, key: str, path: str, text: str) -> FileAnalysis | None:
        """The analysis stored under ``key`` (for ``text``), marked ``stored``; None when there
        is none or it does not decode."""
        name = self._file(key)
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            return None
        try:
            with os.fdopen(fd, "rb") as f:
                raw = f.read(MAX_ENTRY_BYTES + 1)
            if len(raw) > MAX_ENTRY_BYTES:
                return None
            data = json.loads(raw)
            if not isinstance(data, dict) or data.get("format") != FORMAT:
                return None
            modules = [from_dict(ModuleResult, m) for m in _list(data, "modules")]
            diagnostics = [from_dict(Diagnostic, d) for d in _list(data, "diagnostics")]
            if any(m.node_copies or m.block_copies for m in modules):
                return None  # saved whole: copied records are not something it wrote
        except (OSError, ValueError, TypeError, ProtocolError, RecursionError):
            return None
        with contextlib.suppress(OSError):
            os.utime(name)  # recently used
        torch_version = data.get("torch_version")
        return FileAnalysis(
            path=path,
            version=None,
            modules=modules,
            diagnostics=diagnostics,
            classes=parse(text).classes,
            outcome=str(data.get("outcome", "ok")),
            torch_version=torch_version if isinstance(torch_version, str) else None,
            provenance="stored",
        )

    def save(self, key: str, analysis: FileAnalysis) -> None:
        """Keep ``analysis`` under ``key`` (not a cancelled one, nor one over the entry bound)."""
        if analysis.outcome == "cancelled" or analysis.provisional:
            return
        data = {
            "format": FORMAT,
            "saved": time.time(),
            "outcome": analysis.outcome,
            "torch_version": analysis.torch_version,
            "modules": [to_dict(m) for m in analysis.modules],
            "diagnostics": [to_dict(d) for d in analysis.diagnostics],
        }
        try:
            raw = json.dumps(data, separators=(",", ":")).encode("utf-8", "surrogatepass")
        except (TypeError, ValueError):
            return
        if len(raw) > MAX_ENTRY_BYTES:
            return
        try:
            os.makedirs(self.folder, mode=0o700, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.folder, prefix=".tmp-", suffix=".json")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(raw)
                os.replace(tmp, self._file(key))
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
        except OSError:
            return
        self._trim()

    def _trim(self) -> None:
        """Delete the least recently used entries past MAX_TOTAL_BYTES."""
        entries = []
        try:
            with os.scandir(self.folder) as it:
                for entry in it:
                    if entry.name.endswith(".json") and entry.is_file(follow_symlinks=False):
                        st = entry.stat(follow_symlinks=False)
                        entries.append((st.st_mtime, st.st_size, entry.path))
        except OSError:
            return
        total = sum(size for _, size, _ in entries)
        for _, size, name in sorted(entries):
            if total <= MAX_TOTAL_BYTES:
                break
            with contextlib.suppress(OSError):
                os.unlink(name)
                total -= size


def _list(data: dict[str, Any], name: str) -> list[Any]:
    value = data.get(name)
    if not isinstance(value, list):
        raise ValueError(f"{name} is not a list")
    return value


def unmark(analysis: FileAnalysis) -> FileAnalysis:
    """``analysis`` as a fresh one (for tests and tools comparing the two)."""
    return replace(analysis, provenance="worker")
