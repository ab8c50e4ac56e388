"""Incremental captures: which classes of a document version must be captured again.

A class's capture depends on more than its own text: the module-level code that runs at
import, the helpers and classes it uses, the parents that build and feed it, the classes it
builds and feeds, its directives and call sites, the settings and the worker. :func:`units_of`
splits a document into *units*: the connected components of the graph whose nodes are the
top-level statements and whose edges are the module-level names two statements both mention
(imports excepted), so a unit holds a class together with everything it uses **and** everything
that uses it, transitively. Each unit gets a key from

- the job-wide part: the engine's context (settings, path, ``sys.path``, worker, workspace files)
  and every top-level statement that runs at import (imports, assignments, calls, decorated
  definitions), and
- the unit's own statements and its classes' requests (directives, call sites),

both read as the *code* of each line: comments after code are dropped, lines that hold only a
comment or nothing are dropped, except ``# fxls:`` directive lines, kept whole. Editing a
comment or adding blank lines therefore changes no key; the cached results are moved to the
lines where their code is now (:func:`relocate`). Anything that defeats this reading (a
function that reaches ``globals()``, ``eval``, ``setattr``, or changes torch's global state)
makes the whole file one unit. The engine captures only the units whose key it has not seen,
in one job, and takes the other classes from :class:`CaptureCache`.

Pure: no LSP, no torch, no worker.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import json
import os
import pickle
import re
import threading
import tokenize
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from fxls.protocol.codec import to_dict
from fxls.protocol.model import ClassRequest, ModuleResult
from fxls.protocol.positions import tokens

ENV_SWITCH = "FXLS_CAPTURE_CACHE"
"""``FXLS_CAPTURE_CACHE=0`` turns the cache off (every version captures every class)."""

MAX_CACHE_BYTES = 8 * 1024 * 1024
"""Total size of the cached results (their JSON text); least recently used go first."""
MAX_CACHE_ENTRIES = 512

_DIRECTIVE = re.compile(r"^\s*#\s*fxls\s*:")
_LINE_MENTION = re.compile(rb"\bline\s+\d+|, line \d+|\.py:\d+", re.IGNORECASE)
"""A message that names a line number (searched in a cache entry's pickle)."""

_DYNAMIC_NAMES = frozenset(
    {
        "globals",
        "locals",
        "vars",
        "eval",
        "exec",
        "compile",
        "__import__",
        "setattr",
        "delattr",
        "__builtins__",
    }
)
"""Builtins through which a function reaches names the graph cannot see."""
_DYNAMIC_ATTRS = frozenset({"__dict__", "__globals__", "__subclasses__", "f_globals"})
_GLOBAL_CALL_PREFIXES = ("set_", "register", "manual_seed", "use_deterministic", "seed")
"""Calls on an imported module that change state every class of the job sees."""
_PLAIN_DECORATORS = frozenset({"dataclass", "dataclasses.dataclass", "staticmethod"})


def enabled() -> bool:
    """False when ``FXLS_CAPTURE_CACHE`` is ``0``, ``false``, ``no`` or ``off``."""
    return os.environ.get(ENV_SWITCH, "1").strip().lower() not in ("0", "false", "no", "off")


@dataclass
class Unit:
    """Classes captured together, and the key of everything their captures depend on."""

    classes: list[str]
    """Class names of the requests in this unit (request order)."""
    key: str
    lines: list[int]
    """The lines the key reads (job-wide and the unit's), in order: where a cached result's
    lines are now."""


@dataclass
class Entry:
    """The captures of one unit: encoded ModuleResults and the lines they were keyed on.

    ``modules`` is a pickle of the server's own decoded (and checked) ``ModuleResult`` objects,
    made and read in this process only: never from the worker, a file or the network. It
    copies a GPT-48 result in a third of the time JSON took, and each hit gets its own
    objects."""

    modules: bytes
    lines: tuple[int, ...]
    isolation: tuple[str, ...]
    torch_version: str | None

    @property
    def size(self) -> int:
        return len(self.modules) + 8 * len(self.lines) + 200


@dataclass
class CacheStats:
    hits: int = 0
    """Classes taken from the cache."""
    misses: int = 0
    """Classes captured because their unit's key was new (or its result could not move)."""
    jobs: int = 0
    """Capture jobs the engine sent with the cache on."""
    stored: int = 0
    evicted: int = 0
    last_captured: list[str] = field(default_factory=list)
    """Classes the last capture job asked for (empty when no job was needed)."""


class CaptureCache:
    """Unit results by key, least recently used first out, bounded in bytes and entries."""

    def __init__(
        self, max_bytes: int = MAX_CACHE_BYTES, max_entries: int = MAX_CACHE_ENTRIES
    ) -> None:
        self.max_bytes = max_bytes
        self.max_entries = max_entries
        self._entries: OrderedDict[str, Entry] = OrderedDict()
        self._bytes = 0
        self.stats = CacheStats()

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def bytes(self) -> int:
        return self._bytes

    def get(self, key: str) -> Entry | None:
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
        return entry

    def put(self, key: str, entry: Entry) -> None:
        old = self._entries.pop(key, None)
        if old is not None:
            self._bytes -= old.size
        if entry.size > self.max_bytes:
            return
        self._entries[key] = entry
        self._bytes += entry.size
        self.stats.stored += 1
        while self._entries and (
            self._bytes > self.max_bytes or len(self._entries) > self.max_entries
        ):
            _, dropped = self._entries.popitem(last=False)
            self._bytes -= dropped.size
            self.stats.evicted += 1

    def clear(self) -> None:
        self._entries.clear()
        self._bytes = 0

    def summary(self) -> dict[str, Any]:
        """What ``fxls/stats`` shows under ``cache``."""
        s = self.stats
        return {
            "hits": s.hits,
            "misses": s.misses,
            "jobs": s.jobs,
            "entries": len(self._entries),
            "bytes": self._bytes,
            "stored": s.stored,
            "evicted": s.evicted,
            "lastCaptured": list(s.last_captured),
        }


def store(
    modules: list[ModuleResult], unit: Unit, isolation: list[str], torch_version: str | None
) -> Entry:
    """The cache entry for the fresh captures of ``unit``, as the worker sent them (copied
    records as the copies they came as: a tenth of the bytes for a 48-block GPT; the
    analysis expands them)."""
    data = pickle.dumps(modules, protocol=pickle.HIGHEST_PROTOCOL)
    return Entry(data, tuple(unit.lines), tuple(isolation), torch_version)


def relocate(entry: Entry, unit: Unit) -> list[ModuleResult] | None:
    """The cached ModuleResults of ``entry`` on the lines of ``unit`` (same key), their copied
    records as they came (``fxls.protocol.copies.expanded`` expands them), or None when
    a result cannot be moved exactly (a line outside the keyed lines, or a message that names
    a line number while lines moved)."""
    if len(entry.lines) != len(unit.lines):
        return None
    mapping = dict(zip(entry.lines, unit.lines, strict=True))
    moved = any(a != b for a, b in mapping.items())
    if moved and _LINE_MENTION.search(entry.modules):
        # a pickle keeps each string's UTF-8 bytes whole: every mention is found (and a
        # stray match only costs a capture)
        return None
    modules: list[ModuleResult] = pickle.loads(entry.modules)
    if moved:
        try:
            for module in modules:
                _move(module, mapping)  # copies have no lines: they take their templates'
        except KeyError:
            return None
    return modules


_LINE_FIELDS = frozenset({"line", "end_line", "init_line"})
_ATOMS = frozenset({str, int, float, bool, type(None), bytes})
_FIELDS: dict[type, tuple[tuple[str, ...], tuple[str, ...]] | None] = {}


def _fields_of(cls: type) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """A dataclass's line fields and its other fields (None for any other class)."""
    if cls not in _FIELDS:
        if dataclasses.is_dataclass(cls):
            names = [f.name for f in dataclasses.fields(cls)]
            lines = tuple(n for n in names if n in _LINE_FIELDS)
            _FIELDS[cls] = (lines, tuple(n for n in names if n not in _LINE_FIELDS))
        else:
            _FIELDS[cls] = None
    return _FIELDS[cls]


def _move(obj: Any, mapping: dict[int, int]) -> None:
    """Rewrite every line number in ``obj`` (spans, ``ModuleResult.line``, ``PassResult.line``:
    any ``line``/``end_line`` field) through ``mapping`` (KeyError for a line it does not
    know). Walks dataclasses and lists."""
    cls = type(obj)
    if cls is list:
        for item in obj:
            if type(item) not in _ATOMS:
                _move(item, mapping)
        return
    found = _fields_of(cls)
    if found is None:
        return
    lines, others = found
    for name in lines:
        value = getattr(obj, name)
        if type(value) is int:
            setattr(obj, name, mapping[value])
        elif type(value) not in _ATOMS:
            _move(value, mapping)
    for name in others:
        value = getattr(obj, name)
        if type(value) not in _ATOMS:
            _move(value, mapping)


# -- units ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Reach:
    """What one top-level statement mentions, from one walk of it."""

    touched: frozenset[str]
    """Every name it mentions or binds (``_touched``)."""
    declared_global: frozenset[str]
    dynamic: bool
    """It reaches names dynamically or imports ``*``."""
    stored: frozenset[str]
    """The root names of the attributes it stores into."""
    called: frozenset[str]
    """The root names of its ``set_*``/``register*``/... calls."""

    def entangled(self, imported: set[str]) -> bool:
        """``_entangled``: reaches beyond the names the graph follows."""
        return (
            self.dynamic
            or not self.stored.isdisjoint(imported)
            or not self.called.isdisjoint(imported)
        )


_REACHES: OrderedDict[bytes, _Reach] = OrderedDict()
"""Each statement's reach by a digest of its source: an edit inside one class walks that class
only, not the whole file again."""
_MAX_REACHES = 4096
_REACHES_LOCK = threading.Lock()


@dataclass
class _Statement:
    node: ast.stmt | None
    """None for the comment lines after the last statement."""
    first: int
    last: int
    reach: _Reach = _Reach(frozenset(), frozenset(), False, frozenset(), frozenset())
    job_wide: bool = False


def units_of(
    text: str, requests: list[ClassRequest], context: str, tree: ast.Module | None = None
) -> list[Unit] | None:
    """The units of ``text`` that hold ``requests``, each with its key; None when the text
    cannot be read so (every class is then captured, as without a cache). ``tree``: the
    text's syntax tree when the caller has it (not changed here)."""
    try:
        tree = tree if tree is not None else ast.parse(text)
        code = _code_lines(text, tree)
    except (SyntaxError, ValueError, tokenize.TokenError, IndentationError):
        return None
    statements = _statements(tree, text.split("\n"))
    imported, bound = _module_names(tree, statements)
    parent = list(range(len(statements)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    def union(a: int, b: int) -> None:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)

    # statements that run at import are in every key; the others must not reach further
    if any(s.reach.entangled(imported) for s in statements if s.node and not s.job_wide):
        for i in range(1, len(statements)):
            union(0, i)
    by_name: dict[str, int] = {}
    for i, st in enumerate(statements):
        for name in st.reach.touched & bound:
            if name in by_name:
                union(by_name[name], i)
            else:
                by_name[name] = i
    classes = {r.name for r in requests}
    # a file's factory functions are tried for the classes of every unit in one job
    # (``pipeline._adopt_parents``, a budget per job): keep them in one unit
    factories = [
        i
        for i, st in enumerate(statements)
        if isinstance(st.node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and st.reach.touched & classes
    ]
    for i in factories[1:]:
        union(factories[0], i)

    # a user pass (``# fxls: pass Class`` above a function) runs on the class's graph
    for req in requests:
        home = _statement_of(statements, req.line)
        for user_pass in req.passes:
            there = _statement_of(statements, user_pass.line)
            if home is None or there is None:
                return None
            union(home, there)
    owner: dict[str, int] = {}
    for req in requests:
        index = _statement_of(statements, req.line)
        if index is None:
            return None
        owner[req.name] = find(index)
    wide = [i for i, st in enumerate(statements) if st.job_wide]
    units: list[Unit] = []
    for root in dict.fromkeys(owner[r.name] for r in requests):
        members = [i for i in range(len(statements)) if find(i) == root]
        chosen = sorted(set(members) | set(wide))
        lines = [
            n
            for i in chosen
            for n in range(statements[i].first, statements[i].last + 1)
            if n in code
        ]
        place = {n: k for k, n in enumerate(lines)}
        names = [r.name for r in requests if owner[r.name] == root]
        reqs = [_request_key(r, place) for r in requests if owner[r.name] == root]
        body = [("w" if statements[i].job_wide else "u", i in members) for i in chosen]
        payload = json.dumps([context, [code[n] for n in lines], body, reqs], separators=(",", ":"))
        key = hashlib.sha256(payload.encode("utf-8", "surrogatepass")).hexdigest()
        units.append(Unit(names, key, lines))
    return units


def _request_key(req: ClassRequest, index: dict[int, int]) -> Any:
    """A request with its lines replaced by their place among the keyed lines."""
    data = to_dict(req)

    def where(line: Any) -> Any:
        if isinstance(line, int) and line in index:
            return ["k", index[line]]
        return ["abs", line]

    data["line"] = where(req.line)
    data["init_line"] = where(req.init_line)
    for spec in data.get("inputs", []):
        spec["line"] = where(spec.get("line"))
    for user_pass in data.get("passes", []):
        user_pass["line"] = where(user_pass.get("line"))
    return data


def _code_lines(text: str, tree: ast.Module) -> dict[int, str]:
    """Line number -> the code of that line (without a trailing comment), for the lines that
    hold code or a ``# fxls:`` directive; lines inside a string are code."""
    lines = text.split("\n")
    code: dict[int, str] = {}
    comment_at: dict[int, int] = {}
    inside: set[int] = set()
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT}
    skip.add(tokenize.ENDMARKER)
    for tok in tokens(text, tree.body):
        if tok.type == tokenize.COMMENT:
            comment_at[tok.start[0]] = tok.start[1]
            continue
        if tok.type in skip:
            continue
        for n in range(tok.start[0], tok.end[0] + 1):
            code[n] = ""
        inside.update(range(tok.start[0], tok.end[0]))  # lines a string runs on past
    for n in code:
        line = lines[n - 1] if n - 1 < len(lines) else ""
        cut = comment_at.get(n)
        if cut is not None:
            line = line[:cut]
        code[n] = line if n in inside else line.rstrip()
    for n, col in comment_at.items():
        if n not in code and _DIRECTIVE.match(lines[n - 1]):
            code[n] = lines[n - 1]
        elif n in code and _DIRECTIVE.match(lines[n - 1][col:]):
            code[n] = lines[n - 1]  # a directive after code is kept whole
    return code


def _statements(tree: ast.Module, lines: list[str]) -> list[_Statement]:
    out: list[_Statement] = []
    first = 1
    for node in tree.body:
        last = node.end_lineno or node.lineno
        st = _Statement(node, first, last, _reach(node, lines), _runs_at_import(node))
        out.append(st)
        first = last + 1
    if first <= len(lines):
        out.append(_Statement(None, first, len(lines), job_wide=True))
    return out


def _reach(node: ast.stmt, lines: list[str]) -> _Reach:
    """``node``'s reach, walked once per source of a statement (the memo is bounded)."""
    start = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", ()))])
    end = node.end_lineno or node.lineno
    source = "\n".join(lines[start - 1 : end])
    where = f"{node.col_offset}:{node.end_col_offset}\n"
    key = hashlib.blake2b((where + source).encode("utf-8", "surrogatepass"), digest_size=20)
    digest = key.digest()
    with _REACHES_LOCK:
        reach = _REACHES.get(digest)
        if reach is not None:
            _REACHES.move_to_end(digest)
            return reach
        reach = _REACHES[digest] = _walk(node)
        if len(_REACHES) > _MAX_REACHES:
            _REACHES.popitem(last=False)
        return reach


def _walk(node: ast.stmt) -> _Reach:
    declared: set[str] = set()
    stored: set[str] = set()
    called: set[str] = set()
    dynamic = False
    for sub in ast.walk(node):
        if isinstance(sub, ast.Global):
            declared.update(sub.names)
        dynamic = dynamic or _dynamic(sub)
        if isinstance(sub, ast.Attribute) and not isinstance(sub.ctx, ast.Load):
            stored.add(_root_name(sub) or "")
        if (
            isinstance(sub, ast.Call)
            and isinstance(sub.func, ast.Attribute)
            and sub.func.attr.startswith(_GLOBAL_CALL_PREFIXES)
        ):
            called.add(_root_name(sub.func) or "")
    stored.discard("")
    called.discard("")
    return _Reach(
        frozenset(_touched(node)),
        frozenset(declared),
        dynamic,
        frozenset(stored),
        frozenset(called),
    )


def _dynamic(sub: ast.AST) -> bool:
    if isinstance(sub, ast.Name):
        return sub.id in _DYNAMIC_NAMES
    if isinstance(sub, ast.ImportFrom):
        return any(a.name == "*" for a in sub.names)
    if isinstance(sub, ast.Attribute):
        modules = (
            sub.attr == "modules" and isinstance(sub.value, ast.Name) and sub.value.id == "sys"
        )
        return sub.attr in _DYNAMIC_ATTRS or modules
    return False


def _statement_of(statements: list[_Statement], line: int) -> int | None:
    for i, st in enumerate(statements):
        if st.first <= line <= st.last:
            return i
    return None


def _touched(node: ast.stmt) -> set[str]:
    """Every name the statement mentions or binds (an over-approximation: locals included)."""
    names: set[str] = set()
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        names.add(node.name)
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            names.add(sub.id)
        elif isinstance(sub, (ast.Global, ast.Nonlocal)):
            names.update(sub.names)
        elif isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(sub.name)
    return names


def _decorator_name(node: ast.expr) -> str:
    if isinstance(node, ast.Call):
        node = node.func
    return ast.unparse(node)


def _runs_at_import(node: ast.stmt) -> bool:
    """Statements whose execution every class of the file sees: everything but plain
    definitions and the ``if __name__ == "__main__":`` block (never run by a capture)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return any(_decorator_name(d) not in _PLAIN_DECORATORS for d in node.decorator_list)
    return not (isinstance(node, ast.If) and _main_guard(node.test))


def _main_guard(test: ast.expr) -> bool:
    return (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and test.left.id == "__name__"
        and len(test.comparators) == 1
        and isinstance(test.comparators[0], ast.Constant)
        and test.comparators[0].value == "__main__"
    )


def _module_names(tree: ast.Module, statements: list[_Statement]) -> tuple[set[str], set[str]]:
    """The module-level names bound only by imports (``torch``, ``nn``, ``F``: shared by every
    class, they connect nothing), and the other module-level names (the ones that do)."""
    imported: set[str] = set()
    other: set[str] = set()
    for node in tree.body:
        for sub in _module_level(node):
            if isinstance(sub, (ast.Import, ast.ImportFrom)):
                for alias in sub.names:
                    imported.add((alias.asname or alias.name).split(".")[0])
            elif isinstance(sub, ast.Name) and not isinstance(sub.ctx, ast.Load):
                other.add(sub.id)
            elif isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                other.add(sub.name)
    for st in statements:
        other.update(st.reach.declared_global)
    return imported - other - {"*"}, other


def _module_level(node: ast.AST) -> Iterable[ast.AST]:
    """``node`` and what it holds, without the bodies of functions and classes."""
    yield node
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
        return
    for child in ast.iter_child_nodes(node):
        yield from _module_level(child)


def _root_name(node: ast.expr) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None
