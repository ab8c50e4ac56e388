"""Calls of a document's classes in the other files of the workspace: evidence for building them.

A training script that does ``model = RNNModel("LSTM", ntokens, 200, 200, 2)`` or a test that
does ``Net(num_classes=10)`` says how a class is meant to be built. This module finds such
calls by their AST, keeps those whose arguments the document itself can evaluate (literals,
and names the document defines at top level, such as ``ResNet(BasicBlock, [2, 2, 2, 2])``), and
returns them as constructor argument text. Pure: it reads files, never runs them.

Bounded for editors: at most ``MAX_FILES`` files of at most ``MAX_FILE_BYTES`` are read, the
listing is cached for ``LISTING_TTL_S`` seconds and each file's findings until it changes.
Only regular files are read, links not followed (:func:`~fxls.protocol.files.read_source`):
a ``.py`` link to ``/dev/zero`` or to the server's own input, or a FIFO, is passed over.
Thread-safe: the server reads the workspace in a thread (:func:`prescan` when the workspace
opens, with a helper process for the bulk, then each capture), never on its event loop.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fxls.protocol.files import Refused, Stamp, read_source, stamp

MAX_FILES = 2000
MAX_FILE_BYTES = 1_000_000
LISTING_TTL_S = 30.0
MAX_PER_CLASS = 3
_SKIP_DIRS = frozenset({"node_modules", "__pycache__", "site-packages", "dist", "build"})


@dataclass(frozen=True)
class CallSite:
    """``Cls(<init>)`` written at ``path:line``."""

    init: str
    path: str
    line: int


_LISTINGS: dict[str, tuple[float, list[str]]] = {}
_FILES: dict[str, tuple[Stamp, dict[str, list[tuple[str, int, frozenset[str]]]]]] = {}
_SCAN = threading.Lock()
"""Held by :func:`prescan` (one scan of the workspace at a time) and :func:`call_sites`, which
waits for a scan and reads its cache instead of parsing the same files again."""
_LOOKUP = threading.Lock()
"""One :func:`known_call_sites` at a time. Not ``_SCAN``: a capture that starts while another
capture (or a compile check) looks up its calls waits the few milliseconds that takes; told
"a scan is running", it would wait for a refinement that no scan brings."""


def prescan(root: str | None, progress: Callable[[int, int], None] | None = None) -> int:
    """Read every file of the workspace ``root`` once, so captures find the calls in the cache
    (parsing a few hundred files takes seconds). Returns how many files were read; meant for a
    thread started when the editor opens the workspace. ``progress(done, total)`` is called as
    batches of files are read.

    Many files are parsed by helper processes (:func:`_scan_elsewhere`), a batch at a time:
    parsing them here would hold the interpreter lock for seconds while the editor waits for
    answers, and leave ~10 MiB of parse garbage in the server's memory (this repository: 450
    files). Captures do not wait for it (:func:`known_call_sites`)."""
    if not root or not os.path.isdir(root):
        return 0
    with _SCAN:
        files = _listing(root)
        todo = [path for path in files if not _fresh(path)]
        if len(todo) >= HELPER_MIN_FILES:
            for start in range(0, len(todo), SCAN_BATCH):
                if progress is not None:
                    progress(start, len(todo))
                _scan_elsewhere(todo[start : start + SCAN_BATCH])
        for path in files:
            _calls_in(path)  # what the helper did not read (or all, without a helper)
        if progress is not None:
            progress(len(todo), len(todo))
    return len(files)


SCAN_BATCH = 250
"""Files one helper process reads (progress is reported between batches)."""

HELPER_MIN_FILES = 50
"""Unread files before :func:`prescan` reads them in helper processes instead of here."""

INLINE_MAX = HELPER_MIN_FILES
"""Unread files a capture reads itself; with more, it uses what is read and says so
(:func:`known_call_sites`), and :func:`prescan` reads the rest in helper processes."""


HELPER_TIMEOUT_S = 120.0

_HELPER = (
    "import json, sys\n"
    "sys.path.insert(0, sys.argv[1])\n"
    "from fxls.analysis.workspace import scan_files\n"
    "json.dump(scan_files(json.load(sys.stdin)), sys.stdout)\n"
)


def scan_files(paths: list[str]) -> dict[str, Any]:
    """The helper's side of :func:`_scan_elsewhere`: each file's findings as JSON values."""
    out: dict[str, Any] = {}
    for path in paths:
        try:
            stat = os.stat(path)
        except OSError:
            continue
        calls = _parse_calls(path, stat.st_size)
        out[path] = [stat.st_mtime_ns, stat.st_size, {n: [[i, ln, sorted(ns)] for i, ln, ns in c]
                                                   for n, c in calls.items()}]  # fmt: skip
    return out


def _scan_elsewhere(paths: list[str]) -> None:
    """Parse ``paths`` in a separate Python process (isolated mode, a neutral working folder,
    nothing of the workspace on its path) and keep what it found; on any failure the files
    are simply read here."""
    package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        done = subprocess.run(
            [sys.executable, "-I", "-c", _HELPER, package_root],
            input=json.dumps(paths).encode(),
            capture_output=True,
            timeout=HELPER_TIMEOUT_S,
            cwd=tempfile.gettempdir(),
            check=True,
        )
        found = json.loads(done.stdout)
    except (OSError, subprocess.SubprocessError, ValueError):
        return
    wanted = set(paths)
    for path, entry in found.items() if isinstance(found, dict) else ():
        try:
            mtime, size, calls = entry
            parsed = {
                str(name): [(str(i), int(ln), frozenset(map(str, ns))) for i, ln, ns in sites]
                for name, sites in calls.items()
            }
        except (TypeError, ValueError):
            continue
        if path in wanted:
            _FILES[path] = ((int(size), int(mtime)), parsed)


class Stats:
    """The :data:`Stamp` of each workspace file, taken once: one analysis of a document reads
    the files' sizes and times for its call sites and again for its cache key (two thousand
    files take milliseconds each time). Made per analysis, never kept: a file changed since
    is seen by the next one."""

    def __init__(self) -> None:
        self._seen: dict[str, Stamp | None] = {}

    def of(self, path: str) -> Stamp | None:
        """``path``'s stamp, None when it cannot be read."""
        if path not in self._seen:
            self._seen[path] = stamp(path)
        return self._seen[path]

    def files(self, root: str) -> list[tuple[str, Stamp]]:
        """The listed files of ``root`` (:func:`python_files`) that exist, with their stamp."""
        found = ((path, self.of(path)) for path in python_files(root))
        return [(path, seen) for path, seen in found if seen is not None]


def _fresh(path: str) -> bool:
    seen = stamp(path)
    return seen is not None and _cached(path, seen) is not None


def _cached(path: str, seen: Stamp) -> dict[str, list[tuple[str, int, frozenset[str]]]] | None:
    """The findings kept for ``path`` while the file is unchanged (its stamp ``seen``)."""
    cached = _FILES.get(path)
    if cached is not None and cached[0] == seen:
        return cached[1]
    return None


def call_sites(
    root: str | None, document: str, classes: list[str], defined: set[str]
) -> dict[str, list[CallSite]]:
    """Calls of ``classes`` in the workspace ``root`` (the document itself excluded) whose
    arguments use only literals and the names in ``defined`` (the document's top level)."""
    if not root or not classes or not os.path.isdir(root):
        return {}
    with _SCAN:
        return _sites(Stats().files(root), document, classes, defined, read=True)


def known_call_sites(
    root: str | None,
    document: str,
    classes: list[str],
    defined: set[str],
    stats: Stats | None = None,
) -> tuple[dict[str, list[CallSite]], bool]:
    """:func:`call_sites` without waiting for a scan of the workspace: the calls in the files
    read so far, and whether that was every file. While :func:`prescan` runs, or when more
    than ``INLINE_MAX`` files are unread, the first capture of a file goes ahead with what is
    known; the caller refines the result when the scan is done. ``stats``: the analysis's
    :class:`Stats` (each file is looked at once)."""
    if not root or not classes or not os.path.isdir(root):
        return {}, True
    files = (stats or Stats()).files(root)
    if _SCAN.locked():  # a scan is running: do not wait for it
        return _sites(files, document, classes, defined, read=False), False
    with _LOOKUP:
        unread = sum(1 for path, seen in files if _cached(path, seen) is None)
        complete = unread <= INLINE_MAX
        return _sites(files, document, classes, defined, read=complete), complete


def _sites(
    files: list[tuple[str, Stamp]],
    document: str,
    classes: list[str],
    defined: set[str],
    *,
    read: bool,
) -> dict[str, list[CallSite]]:
    """Calls of ``classes`` in ``files`` (with their stamps): every file (``read``), else only
    those whose findings are kept."""
    here = os.path.abspath(document)
    listing = []
    for path, seen in files:
        if path == here:
            continue
        if read:
            listing.append((path, _calls_in(path, seen)))
            continue
        kept = _cached(path, seen)
        if kept is not None:
            listing.append((path, kept))
    wanted = set(classes)
    found: dict[str, list[CallSite]] = {}
    for path, in_file in listing:
        for name, calls in in_file.items():
            if name not in wanted:
                continue
            for init, line, names in calls:
                if not names <= defined:
                    continue
                sites = found.setdefault(name, [])
                if len(sites) < MAX_PER_CLASS and all(s.init != init for s in sites):
                    sites.append(CallSite(init, path, line))
    return found


def top_level_names(tree: ast.Module) -> set[str]:
    """Names a module defines at its top level (classes, functions, imports, assignments)."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                names.add((alias.asname or alias.name).split(".")[0])
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def python_files(root: str) -> list[str]:
    """The ``.py`` files of the workspace ``root`` that fxls reads (bounded, listed at most
    every ``LISTING_TTL_S`` seconds)."""
    return list(_listing(root)) if os.path.isdir(root) else []


def _listing(root: str) -> list[str]:
    now = time.monotonic()
    cached = _LISTINGS.get(root)
    if cached is not None and now - cached[0] < LISTING_TTL_S:
        return cached[1]
    files: list[str] = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(
            d
            for d in dirs
            if not d.startswith(".")
            and d not in _SKIP_DIRS
            and not os.path.exists(os.path.join(folder, d, "pyvenv.cfg"))
        )
        for name in sorted(names):
            if name.endswith(".py"):
                files.append(os.path.abspath(os.path.join(folder, name)))
                if len(files) >= MAX_FILES:
                    break
        if len(files) >= MAX_FILES:
            break
    _LISTINGS[root] = (now, files)
    return files


def _calls_in(
    path: str, seen: Stamp | None = None
) -> dict[str, list[tuple[str, int, frozenset[str]]]]:
    """Per called name: (argument text, line, names the arguments use), for calls whose
    arguments are literals or plain names. ``seen``: the file's stamp, when the caller has it."""
    seen = seen or stamp(path)
    if seen is None:
        return {}
    cached = _cached(path, seen)
    if cached is not None:
        return cached
    calls = _parse_calls(path, seen[0])
    _FILES[path] = (seen, calls)
    return calls


def _parse_calls(path: str, size: int) -> dict[str, list[tuple[str, int, frozenset[str]]]]:
    """The calls of one workspace file; nothing for a file that is not a regular file (a link,
    a device, a FIFO: see :func:`~fxls.protocol.files.read_source`) or over MAX_FILE_BYTES."""
    calls: dict[str, list[tuple[str, int, frozenset[str]]]] = {}
    if size > MAX_FILE_BYTES:
        return calls
    text = read_source(path, cap=MAX_FILE_BYTES, errors="replace")
    if isinstance(text, Refused):
        return calls
    try:
        tree = ast.parse(text, path)
    except (SyntaxError, ValueError, RecursionError):
        return calls
    for node in ast.walk(tree):
        site = _site(node)
        if site is not None:
            name, init, names = site
            calls.setdefault(name, []).append((init, node.lineno, names))  # type: ignore[attr-defined]
    return calls


def _site(node: ast.AST) -> tuple[str, str, frozenset[str]] | None:
    if not isinstance(node, ast.Call) or not (node.args or node.keywords):
        return None
    func = node.func
    if isinstance(func, ast.Name):
        name = func.id
    elif isinstance(func, ast.Attribute):
        name = func.attr
    else:
        return None
    if not name[:1].isupper():
        return None
    if any(isinstance(a, ast.Starred) for a in node.args) or any(
        k.arg is None for k in node.keywords
    ):
        return None
    names: set[str] = set()
    for arg in [*node.args, *(k.value for k in node.keywords)]:
        if not _plain(arg, names):
            return None
    try:
        parts = [ast.unparse(a) for a in node.args]
        parts += [f"{k.arg}={ast.unparse(k.value)}" for k in node.keywords]
    except Exception:
        return None
    return name, ", ".join(parts), frozenset(names)


def _plain(node: ast.AST, names: set[str]) -> bool:
    """Literals, containers of them, unary minus, and plain names (collected in ``names``)."""
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.Name):
        names.add(node.id)
        return True
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        return _plain(node.operand, names)
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return all(_plain(e, names) for e in node.elts)
    if isinstance(node, ast.Dict):
        return all(k is not None and _plain(k, names) for k in node.keys) and all(
            _plain(v, names) for v in node.values
        )
    return False
