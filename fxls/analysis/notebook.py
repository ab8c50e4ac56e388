"""A Jupyter notebook as one Python module: the text fxls captures, and where each line came from.

The Python cells, in order, become one module, one line per line of a cell, so a position in
a cell maps to the module and back (:class:`NotebookModule`). Before that:

- IPython syntax becomes harmless Python of the same lines, keeping columns where code stays:
  line magics (``%matplotlib inline``), shell lines (``!pip install x``) and help (``obj?``,
  ``??obj``) become ``pass`` at their indentation; ``x = %who_ls`` and ``files = !ls`` keep
  ``x = `` and get ``None``; a cell magic whose body is Python (``%%time``) loses its first
  line only, any other cell magic (``%%bash``, ``%%html``) the whole cell.
- Only model code runs in the sandbox: top-level statements that neither define nor build nor
  call a module are blanked, their lines kept (:func:`kept_statements`). Imports, ``def`` and
  ``class`` stay; assignments stay unless they read files or the network, plot, or use a name
  only such a statement made (``batch = next(iter(loader))`` after ``loader = DataLoader(...)``);
  an expression stays only when it calls an instance the notebook built (``model(x)``); loops,
  ``with`` blocks, prints, plots and top-level ``await`` go.

Pure: it reads JSON and parses Python; it never runs anything. :func:`read_ipynb` reads only
the cells' sources of a notebook file of at most ``MAX_NOTEBOOK_BYTES``.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

MAX_NOTEBOOK_BYTES = 20_000_000
"""Larger ``.ipynb`` files are refused unread past this many bytes (outputs make them large;
only the sources matter)."""
MAX_CELLS = 5_000

PYTHON_BODY_MAGICS = frozenset({"time", "timeit", "capture", "prun", "debug", "profile"})
"""Cell magics whose body is Python (kept; the magic's own line is blanked)."""

IO_CALLS = frozenset(
    {
        "open", "input", "display", "exec", "eval", "system", "sleep",
        "read_csv", "read_json", "read_parquet", "read_excel", "read_table", "read_pickle",
        "load", "loads", "save", "savez", "savefig", "to_csv", "to_json", "to_parquet",
        "urlopen", "urlretrieve", "download", "download_url", "from_pretrained",
        "load_dataset", "DataLoader", "ImageFolder", "imread", "imshow", "show",
        "plot", "scatter", "hist", "subplots", "figure", "fit", "backward", "step",
        "zero_grad", "iter", "next", "train_one_epoch", "evaluate", "cuda",
    }
)  # fmt: skip
"""Calls (by their last name) that read or write files, the network or the screen, or train:
a statement making one is not run."""
IO_MODULES = frozenset(
    {"plt", "matplotlib", "sns", "seaborn", "requests", "urllib", "subprocess", "shutil",
     "os", "wandb", "mlflow", "tensorboard", "datasets", "pd", "pandas", "PIL", "cv2",
     "IPython", "tqdm", "time", "socket", "pickle", "sys"}
)  # fmt: skip
"""Modules (by the first name of a dotted call) whose calls are not run."""

_MAGIC_ASSIGN = re.compile(r"^(\s*[\w.,\s\[\]()]+?\s*=\s*)[%!].*$")
_HELP = re.compile(r"^\s*(\?{1,2}[\w.\[\]'\"()]*|[\w.\[\]'\"()]+\?{1,2})\s*$")
_CELL_MAGIC = re.compile(r"^\s*%%(\w+)")


class NotebookError(ValueError):
    """A notebook fxls cannot read: invalid JSON, no cells, another language, too large."""


@dataclass(frozen=True)
class Cell:
    """One cell as the notebook has it: ``code`` / ``markdown`` / ``raw``, its language."""

    kind: str
    language: str
    text: str

    @property
    def python(self) -> bool:
        return self.kind == "code" and self.language.lower() in ("python", "python3", "")


@dataclass(frozen=True)
class Slot:
    """Where a Python cell's lines are in the module: lines ``start .. start + count - 1``."""

    cell: int
    """The cell's index in the notebook (0-based, every kind of cell counted)."""
    start: int
    count: int


@dataclass
class NotebookModule:
    """The module text of a notebook, and the two-way map of its lines to cells'."""

    text: str
    slots: list[Slot] = field(default_factory=list)
    blanked: list[int] = field(default_factory=list)
    """Module lines of statements left out of the run (magics, I/O, loops)."""
    in_file: FileLines | None = None
    """Where the cells' lines are in the ``.ipynb`` file's JSON text (reports that point into
    the file); None when not known."""

    def file_line(self, line: int) -> int | None:
        """Module line -> the line of the ``.ipynb`` file that holds it (1-based), or the
        line where its cell's source starts when the file does not hold one string per line;
        None when not known."""
        where = self.to_cell(line)
        if where is None or self.in_file is None:
            return None
        return self.in_file.line(*where)

    def to_module(self, cell: int, line: int) -> int | None:
        """Line ``line`` (1-based) of cell ``cell`` (0-based) -> its module line."""
        for slot in self.slots:
            if slot.cell == cell:
                return slot.start + line - 1 if 1 <= line <= slot.count else None
        return None

    def to_cell(self, line: int) -> tuple[int, int] | None:
        """Module line -> (cell index, 1-based line in that cell); None past the cells."""
        for slot in self.slots:
            if slot.start <= line < slot.start + slot.count:
                return slot.cell, line - slot.start + 1
        return None

    def label(self, line: int) -> str:
        """``cell 3, line 2`` for people (cells counted from 1, as the notebook shows them)."""
        where = self.to_cell(line)
        return f"line {line}" if where is None else f"cell {where[0] + 1}, line {where[1]}"

    def cell_label(self, line: int) -> str | None:
        """``cell 3``: the cell of a module line (counted from 1); None past the cells."""
        where = self.to_cell(line)
        return None if where is None else f"cell {where[0] + 1}"

    def relabel(self, text: str, moved: Callable[[int], int | None] | None = None) -> str:
        """``the call at line 14`` in a message fxls made on the module -> ``the call at
        cell 3, line 2``, and ``the cell at line 14`` -> ``cell 3``. ``moved`` maps the lines
        the message names to this module's (the message was made on an older text); a line
        it maps to None stays as written."""

        def now(m: re.Match[str]) -> int | None:
            line = int(m.group(2))
            return line if moved is None else _nearest(moved, line)

        def cell(m: re.Match[str]) -> str:
            line = now(m)
            label = self.cell_label(line) if line is not None else None
            return m.group(0) if label is None else f"{m.group(1)}{label}"

        def words(m: re.Match[str]) -> str:
            line = now(m)
            return m.group(0) if line is None else f"{m.group(1)}{self.label(line)}"

        return _LINE_REF.sub(words, _CELL_REF.sub(cell, text))


def _nearest(moved: Callable[[int], int | None], line: int) -> int | None:
    """Where ``line`` is now: an edited line is placed after the nearest unedited one above."""
    for back in range(min(line, 200)):
        now = moved(line - back)
        if now is not None:
            return now + back
    return None


_LINE_REF = re.compile(r"(\bat |\bfrom |\bon )line (\d{1,7})\b")
_CELL_REF = re.compile(r"(\b)the cell at line (\d{1,7})\b")


def build(cells: Sequence[Cell]) -> NotebookModule:
    """The module of ``cells``: Python cells in order, IPython syntax made Python, statements
    that are not model code blanked; one module line per cell line."""
    lines: list[str] = []
    slots: list[Slot] = []
    blanked: list[int] = []
    state = Names()
    for index, cell in enumerate(cells):
        if not cell.python:
            continue
        start = len(lines) + 1
        cell_lines, gone = python_lines(cell.text, state)
        slots.append(Slot(index, start, len(cell_lines)))
        lines.extend(cell_lines)
        blanked.extend(start + i - 1 for i in gone)
    return NotebookModule("\n".join(lines) + "\n", slots, blanked)


_PERCENT = re.compile(r"^#\s*%%")


def percent_module(text: str) -> NotebookModule | None:
    """A percent-format file (``# %%`` cell markers: jupytext, VS Code's Python Interactive,
    Spyder) as a notebook's module, line for line; None for a file without markers. Its cells
    are plain Python (jupytext writes magics as comments), so only statements that are not
    model code are left out."""
    lines = text.split("\n")
    starts = [i for i, line in enumerate(lines) if _PERCENT.match(line)]
    if not starts:
        return None
    bounds = [0, *(i for i in starts if i > 0), len(lines)]
    cells = [Cell("code", "python", "\n".join(lines[a:b])) for a, b in pairwise(bounds)]
    module = build(cells)
    module.text = module.text[:-1]  # build ends the last line; the file's own end stays
    return module


def python_lines(text: str, state: Names | None = None) -> tuple[list[str], list[int]]:
    """One cell's lines as Python that runs only model code, and the (1-based) lines left out."""
    lines = text.replace("\r\n", "\n").split("\n")
    lines, gone = without_magics(lines)
    try:
        tree = compile(
            "\n".join(lines),
            "<cell>",
            "exec",
            flags=ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT,
            dont_inherit=True,
        )
    except (SyntaxError, ValueError):
        return lines, gone  # kept as written: the capture reports the error at its line
    assert isinstance(tree, ast.Module)
    keep = kept_statements(tree.body, state or Names())
    for stmt in tree.body:
        if stmt not in keep:
            gone.extend(_blank(lines, stmt, keep))
    return lines, sorted(set(gone))


def without_magics(lines: list[str]) -> tuple[list[str], list[int]]:
    """IPython syntax replaced by Python of the same lines (see the module's docstring)."""
    out = list(lines)
    gone: list[int] = []
    first = next((i for i, line in enumerate(out) if line.strip()), None)
    if first is not None:
        magic = _CELL_MAGIC.match(out[first])
        if magic is not None:
            if magic.group(1) in PYTHON_BODY_MAGICS:
                out[first], gone = "", [first + 1]
            else:  # %%bash, %%html, %%writefile...: not Python
                return [""] * len(out), list(range(1, len(out) + 1))
    for i, line in enumerate(out):
        stripped = line.lstrip()
        indent = line[: len(line) - len(stripped)]
        if not stripped or stripped.startswith("#"):
            continue
        assigned = _MAGIC_ASSIGN.match(line)
        if stripped[0] in "%!" or _HELP.match(line):
            out[i] = indent + "pass"
        elif assigned is not None and not stripped.startswith(("'", '"')):
            out[i] = assigned.group(1) + "None"
        else:
            continue
        gone.append(i + 1)
    return out, gone


@dataclass
class Names:
    """What the cells so far made: instances (names bound to a call), names only statements
    left out made, and functions that train or do I/O."""

    instances: set[str] = field(default_factory=set)
    dropped: set[str] = field(default_factory=set)
    active: set[str] = field(default_factory=set)


def kept_statements(body: Iterable[ast.stmt], names: Names) -> set[ast.stmt]:
    """The top-level statements of a cell that run: the rest are blanked."""
    kept: set[ast.stmt] = set()
    for stmt in body:
        stored = _stored(stmt)
        if _keeps(stmt, names):
            kept.add(stmt)
            names.dropped -= stored
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and _does_io(stmt):
                names.active.add(stmt.name)
            if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and isinstance(stmt.value, ast.Call):
                names.instances |= stored
        else:
            names.dropped |= stored
            names.instances -= stored
    return kept


def _keeps(stmt: ast.stmt, names: Names) -> bool:
    if isinstance(stmt, (ast.Import, ast.ImportFrom, ast.ClassDef, ast.Pass)):
        return True
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return True
    if _awaits(stmt) or _loaded(stmt) & (names.dropped | names.active):
        return False
    if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        return stmt.value is not None and not _does_io(stmt.value)
    if isinstance(stmt, ast.Expr):
        return _calls_instance(stmt.value, names.instances) and not _does_io(stmt.value)
    if isinstance(stmt, ast.If):
        if any(isinstance(n, ast.Name) and n.id == "__name__" for n in ast.walk(stmt.test)):
            return False
        inner = Names(set(names.instances), set(names.dropped), set(names.active))
        branches = [*stmt.body, *stmt.orelse]
        return not _does_io(stmt.test) and len(kept_statements(branches, inner)) == len(branches)
    return False  # loops, with, try, del, raise, assert, global: not model code


def _calls_instance(node: ast.expr, instances: set[str]) -> bool:
    """``model(x)``, ``model.forward(x)``, ``model.encoder(x)``, ``Net()(x)``."""
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    if isinstance(func, ast.Call):
        return True
    while isinstance(func, ast.Attribute):
        func = func.value
    return isinstance(func, ast.Name) and func.id in instances


def _does_io(node: ast.AST) -> bool:
    """A call of ``IO_CALLS`` or of ``IO_MODULES`` anywhere in ``node`` (function bodies
    included: a function that does is not called)."""
    for sub in ast.walk(node):
        if not isinstance(sub, ast.Call):
            continue
        func, first = sub.func, None
        last = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        while isinstance(func, ast.Attribute):
            func = func.value
        if isinstance(func, ast.Name):
            first = func.id
        if last in IO_CALLS or first in IO_MODULES:
            return True
    return False


def _awaits(stmt: ast.stmt) -> bool:
    """A top-level ``await``, ``async for`` or ``async with`` (outside any function)."""
    todo: list[ast.AST] = [stmt]
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.Await, ast.AsyncFor, ast.AsyncWith)):
            return True
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        todo.extend(ast.iter_child_nodes(node))
    return False


def _loaded(stmt: ast.stmt) -> set[str]:
    return {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _stored(stmt: ast.stmt) -> set[str]:
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {stmt.name}
    return {
        n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
    }


def _blank(lines: list[str], stmt: ast.stmt, kept: set[ast.stmt]) -> list[int]:
    """Leave ``stmt`` out: its lines become empty, or, on a line it shares with a statement
    that stays (``a = Net(); plt.show()``), its own columns become ``pass`` and spaces."""
    first, last = stmt.lineno, stmt.end_lineno or stmt.lineno
    shared = any(k.lineno <= last and (k.end_lineno or k.lineno) >= first for k in kept)
    if not shared:
        for i in range(first, last + 1):
            lines[i - 1] = ""
        return list(range(first, last + 1))
    if first != last or stmt.end_col_offset is None:
        return []  # a multi-line statement on a shared line is rare: it stays as written
    raw = lines[first - 1].encode("utf-8")
    start, end = stmt.col_offset, stmt.end_col_offset
    width = len(raw[start:end].decode("utf-8", "replace"))
    filler = "pass".ljust(width) if width >= 4 else "0".ljust(width)
    lines[first - 1] = (raw[:start].decode("utf-8", "replace") + filler
                        + raw[end:].decode("utf-8", "replace"))  # fmt: skip
    return [first]


# ---------------------------------------------------------------------------------------
# .ipynb files
# ---------------------------------------------------------------------------------------


def read_ipynb(data: bytes | str) -> list[Cell]:
    """The cells of a notebook file's bytes (nbformat 4; only ``cell_type`` and ``source``
    are read). Raises :class:`NotebookError` with one sentence for the user."""
    raw = _raw_cells(data)
    cells = [_cell(item) for item in raw]
    if not any(c.python for c in cells):
        raise NotebookError("the notebook has no Python code cells")
    return cells


def _raw_cells(data: bytes | str) -> list[Any]:
    if len(data) > MAX_NOTEBOOK_BYTES:
        raise NotebookError(
            f"the notebook is larger than {MAX_NOTEBOOK_BYTES // 1_000_000} MB; fxls reads "
            "notebooks up to that size (clear its outputs to make it smaller)"
        )
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise NotebookError(f"the notebook is not valid JSON ({_short(exc)})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("cells"), list):
        raise NotebookError("the notebook has no list of cells (not an nbformat 4 notebook)")
    language = _language(doc.get("metadata"))
    if language and language.lower() not in ("python", "python3"):
        raise NotebookError(f"the notebook's language is {_short(language)}, not Python")
    raw: list[Any] = doc["cells"]
    if not raw:
        raise NotebookError("the notebook has no cells")
    if len(raw) > MAX_CELLS:
        raise NotebookError(f"the notebook has more than {MAX_CELLS} cells")
    return raw


@dataclass(frozen=True)
class FileLines:
    """Where each cell's source is in a notebook file's JSON text (lines 1-based): nbformat
    writes a cell's ``source`` as a list with one string per line, each on a line of its own."""

    exact: dict[int, list[int]] = field(default_factory=dict)
    """Cell index -> the file line of each of its lines (one string per line, as written)."""
    starts: dict[int, int] = field(default_factory=dict)
    """Cell index -> the file line of its ``"source"`` key (for any other layout)."""

    def line(self, cell: int, line: int) -> int | None:
        """Line ``line`` (1-based) of cell ``cell`` (0-based) -> its line in the file."""
        lines = self.exact.get(cell)
        if lines is not None and 1 <= line <= len(lines):
            return lines[line - 1]
        return self.starts.get(cell)


_SOURCE_KEY = '"source":'


def file_lines(raw: str) -> FileLines:
    """Where the cells' source lines are in ``raw``, the text of a notebook file (``\n``
    line ends). Found from the text itself, in cell order: the ``"source": [`` line of each
    cell, then one line per string, each decoding to that string; a cell written otherwise
    (``"source": "..."`` in one string, several lines in a string, another indentation
    style) gets only the line of its ``"source"`` key. Nothing for text that is not a
    notebook."""
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError):
        return FileLines()
    cells = doc.get("cells") if isinstance(doc, dict) else None
    found = FileLines()
    if not isinstance(cells, list):
        return found
    text = raw.split("\n")
    cursor = 0
    for index, item in enumerate(cells):
        source = item.get("source") if isinstance(item, dict) else None
        place = _source_key(text, cursor, source)
        if place is None:
            break
        at, exact = place
        found.starts[index] = at + 1
        if exact:
            found.exact[index] = list(range(at + 2, at + 2 + len(source or ())))
        cursor = at + 1
    return found


_CANDIDATES = 3
"""``"source"`` keys tried for one cell before its first is taken (an output's metadata may
have such a key before the cell's own: nbformat sorts a cell's keys, ``source`` last)."""


def _source_key(text: list[str], start: int, source: Any) -> tuple[int, bool] | None:
    """The line of a cell's ``"source"`` key at or after ``start``, and whether its strings
    follow one per line; None when there is none."""
    first: int | None = None
    tried = 0
    for i in range(start, len(text)):
        if not text[i].lstrip().startswith(_SOURCE_KEY):
            continue
        if _source_at(text, i, source):
            return i, True
        first = i if first is None else first
        tried += 1
        if tried >= _CANDIDATES:
            break
    return None if first is None else (first, False)


def _one_string_per_line(source: Any) -> bool:
    """A list of strings, each one line ending in a newline, the last maybe without."""
    if not isinstance(source, list) or not all(isinstance(s, str) for s in source):
        return False
    last = len(source) - 1
    return all(s.count("\n") == (0 if i == last and not s.endswith("\n") else 1)
               and (i == last or s.endswith("\n")) for i, s in enumerate(source))  # fmt: skip


def _source_at(text: list[str], key: int, source: Any) -> bool:
    """Whether line ``key`` opens ``"source": [`` and the lines after it are ``source``'s
    strings, one per line, then ``]``."""
    if text[key].strip() != _SOURCE_KEY + " [" or not _one_string_per_line(source):
        return False
    end = key + 1 + len(source)
    if end >= len(text) or not text[end].strip().startswith("]"):
        return False
    return all(_decodes_to(text[key + 1 + j], s) for j, s in enumerate(source))


def _decodes_to(line: str, value: str) -> bool:
    item = line.strip()
    item = item[:-1] if item.endswith(",") else item
    try:
        return bool(json.loads(item) == value)
    except (ValueError, RecursionError):
        return False


def _cell(item: Any) -> Cell:
    if not isinstance(item, dict):
        raise NotebookError("a cell of the notebook is not a JSON object")
    source = item.get("source", "")
    if isinstance(source, list) and all(isinstance(s, str) for s in source):
        source = "".join(source)
    if not isinstance(source, str):
        raise NotebookError("a cell's source is neither text nor a list of lines")
    kind = item.get("cell_type")
    return Cell(kind if isinstance(kind, str) else "raw", "python", source)


def _language(metadata: Any) -> str:
    if not isinstance(metadata, dict):
        return ""
    for key, name in (("language_info", "name"), ("kernelspec", "language")):
        part = metadata.get(key)
        if isinstance(part, dict) and isinstance(part.get(name), str):
            return str(part[name])
    return ""


def _short(value: object, limit: int = 80) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
