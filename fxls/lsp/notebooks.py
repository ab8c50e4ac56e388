"""Open notebooks: their cells, the module fxls captures for them, and views of one cell.

A notebook is analysed as one document (its URI, the text :func:`fxls.analysis.notebook.build`
makes of its Python cells, the notebook's version); every feature answers on a cell's own URI
through a :class:`View`, which maps the cell's lines to the lines of the analysed text and back.
A plain document has a view too, the identity, so the session reads every document one way.
Pure bookkeeping: no LSP types, no worker.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from fxls.analysis.notebook import Cell, NotebookModule, build
from fxls.lsp.documents import Document, DocumentStore, LineMap

PYTHON = frozenset({"python", "python3"})
Place = tuple[str, list[str], Callable[[int], "int | None"]]
"""A URI, its current lines, and the map of analysed lines to them."""


@dataclass
class NotebookCell:
    """A cell as the editor syncs it: its text document's URI, kind and language."""

    uri: str
    kind: str
    """``code`` or ``markdown``."""
    language: str
    text: str = ""
    version: int | None = None

    @property
    def lines(self) -> list[str]:
        return [line[:-1] if line.endswith("\r") else line for line in self.text.split("\n")]


@dataclass
class Notebook:
    uri: str
    cells: list[NotebookCell]
    document: Document
    module: NotebookModule = field(default_factory=lambda: NotebookModule(""))
    published: set[str] = field(default_factory=set)
    """The cells that were last sent diagnostics (cleared when they have none, or are gone)."""

    def module_text(self) -> str:
        """Build the module of the current cells (and keep its line map)."""
        self.module = build(
            [
                Cell(
                    c.kind,
                    "python" if c.language.lower() in PYTHON else c.language or "unknown",
                    c.text,
                )
                for c in self.cells
            ]
        )
        return self.module.text

    def index(self, cell_uri: str) -> int | None:
        return next((i for i, c in enumerate(self.cells) if c.uri == cell_uri), None)

    def cell_view(self, cell_uri: str) -> View | None:
        index = self.index(cell_uri)
        if index is None:
            return None
        cell = self.cells[index]
        return View(self.document, cell.lines, CellPlace(cell.uri, index, self.module))

    def locator(self, line_map: LineMap) -> Callable[[int], Place | None]:
        """Where a line of the analysed text is now: its cell's URI, the cell's lines and the
        map of analysed lines to them (through ``line_map``, edits since included); None for
        a line edited since or outside every cell."""

        def locate(analysed: int) -> Place | None:
            line = line_map.to_current(analysed)
            where = self.module.to_cell(line) if line is not None else None
            if where is None or where[0] >= len(self.cells):
                return None
            view = self.cell_view(self.cells[where[0]].uri)
            if view is None:
                return None
            view.line_map = line_map
            return view.uri, view.lines, view.to_current

        return locate


@dataclass(frozen=True)
class CellPlace:
    """Where a view's lines are: cell ``index`` of a notebook whose module is ``module``."""

    uri: str
    index: int
    module: NotebookModule


class View:
    """What one URI shows of an analysed document: its lines, and how they map to the lines
    of the analysed text (through the document's current text, edits since included). A
    cell's view (``place``) maps through the notebook's module; a document's is the identity
    there."""

    def __init__(self, doc: Document, lines: list[str], place: CellPlace | None = None) -> None:
        self.doc = doc
        self.lines = lines
        self.place = place
        self.line_map: LineMap = doc.line_map()

    @property
    def cell(self) -> bool:
        return self.place is not None

    @property
    def uri(self) -> str:
        return self.place.uri if self.place is not None else self.doc.uri

    def to_text(self, line: int) -> int | None:
        """A line of this URI -> the line of the document's current text."""
        place = self.place
        return line if place is None else place.module.to_module(place.index, line)

    def to_current(self, analysed: int) -> int | None:
        """A line of the analysed text -> the line of this URI (None: edited, or elsewhere)."""
        line = self.line_map.to_current(analysed)
        place = self.place
        if line is None or place is None:
            return line
        where = place.module.to_cell(line)
        return where[1] if where is not None and where[0] == place.index else None

    def to_analysed(self, line: int) -> int | None:
        """A line of this URI -> the line of the analysed text (None: edited since)."""
        text_line = self.to_text(line)
        return None if text_line is None else self.line_map.to_analysed(text_line)

    def relabel(self, text: str) -> str:
        """Lines of the analysed text named in a message (``the call at line 14``) in the
        notebook's words (``the call at cell 3, line 2``); unchanged for plain documents."""
        if self.place is None:
            return text
        return self.place.module.relabel(text, self.line_map.to_current)


def document_view(doc: Document) -> View:
    return View(doc, doc.lines)


class NotebookStore:
    """Open notebooks by URI, and which notebook each cell belongs to."""

    def __init__(self, documents: DocumentStore) -> None:
        self.documents = documents
        self._notebooks: dict[str, Notebook] = {}
        self._cells: dict[str, str] = {}

    def open(self, uri: str, version: int | None, cells: list[NotebookCell]) -> Notebook:
        self.close(uri)
        notebook = Notebook(uri, cells, self.documents.open(uri, "", version))
        text = notebook.module_text()
        notebook.document.text = notebook.document.saved_text = text
        self._notebooks[uri] = notebook
        self.index(notebook)
        return notebook

    def index(self, notebook: Notebook) -> None:
        """Remember the notebook of each of its (current) cells."""
        for cell in notebook.cells:
            self._cells[cell.uri] = notebook.uri

    def get(self, uri: str) -> Notebook | None:
        return self._notebooks.get(uri)

    def of_cell(self, cell_uri: str) -> Notebook | None:
        uri = self._cells.get(cell_uri)
        notebook = self._notebooks.get(uri) if uri is not None else None
        return notebook if notebook is not None and notebook.index(cell_uri) is not None else None

    def close(self, uri: str) -> Notebook | None:
        notebook = self._notebooks.pop(uri, None)
        if notebook is not None:
            self.documents.close(uri)
            for cell_uri in [c for c, nb in self._cells.items() if nb == uri]:
                del self._cells[cell_uri]
        return notebook

    def __iter__(self) -> Iterator[Notebook]:
        return iter(list(self._notebooks.values()))
