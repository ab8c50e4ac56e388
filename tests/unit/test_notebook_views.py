"""Open notebooks on the server side, without LSP or a worker: cells kept in order, the
notebook's module as one document, and a cell's view mapping its lines to the analysed text
and back, also after edits made since the analysis."""

from __future__ import annotations

from fxls.engine.analyze import FileAnalysis
from fxls.lsp.documents import Analysed, DocumentStore
from fxls.lsp.notebooks import NotebookCell, NotebookStore, document_view


def cells() -> list[NotebookCell]:
    return [
        NotebookCell("cell:0", "code", "python", "import torch\n%matplotlib inline"),
        NotebookCell("cell:1", "markdown", "markdown", "# Title"),
        NotebookCell("cell:2", "code", "python", "class Net:\n    pass"),
        NotebookCell("cell:3", "code", "python", "model = Net()\nout = model(x)"),
    ]


def test_a_notebook_is_one_document_of_its_python_cells() -> None:
    documents = DocumentStore()
    store = NotebookStore(documents)
    notebook = store.open("file:///w/model.ipynb", 3, cells())
    doc = documents.get("file:///w/model.ipynb")
    assert doc is notebook.document and doc.version == 3
    assert doc.text.split("\n")[:6] == [
        "import torch", "pass", "class Net:", "    pass", "model = Net()", "out = model(x)",
    ]  # fmt: skip
    assert store.of_cell("cell:2") is notebook and store.of_cell("cell:9") is None
    assert notebook.cell_view("cell:1") is not None  # a markdown cell maps nowhere
    view = notebook.cell_view("cell:3")
    assert view is not None and view.uri == "cell:3" and view.cell
    assert view.lines == ["model = Net()", "out = model(x)"]
    assert (view.to_text(2), view.to_analysed(2), view.to_current(6)) == (6, 6, 2)
    assert view.to_current(3) is None  # a line of another cell
    assert view.relabel("from the call at line 6") == "from the call at cell 4, line 2"
    store.close("file:///w/model.ipynb")
    assert documents.get("file:///w/model.ipynb") is None and store.of_cell("cell:3") is None


def test_views_follow_edits_made_after_the_analysis() -> None:
    documents = DocumentStore()
    store = NotebookStore(documents)
    notebook = store.open("nb", 1, cells())
    doc = notebook.document
    doc.set_result(Analysed(1, doc.text, FileAnalysis(path="nb", version=1)))
    # a line added at the top of the first cell moves every later line down by one
    notebook.cells[0].text = "import os\n" + notebook.cells[0].text
    doc.update(notebook.module_text(), 2)
    view = notebook.cell_view("cell:3")
    assert view is not None
    assert view.to_analysed(2) == 6 and view.to_current(6) == 2
    assert view.relabel("the call at line 6") == "the call at cell 4, line 2"
    first = notebook.cell_view("cell:0")
    assert first is not None and first.to_analysed(1) is None  # the new line: not analysed


def test_a_plain_document_view_is_the_identity() -> None:
    documents = DocumentStore()
    doc = documents.open("file:///w/m.py", "a = 1\nb = 2\n", 1)
    view = document_view(doc)
    assert not view.cell and view.uri == "file:///w/m.py"
    assert (view.to_text(2), view.to_analysed(2), view.to_current(2)) == (2, 2, 2)
    assert view.relabel("the call at line 2") == "the call at line 2"


def test_a_line_of_another_cell_is_located_on_that_cell() -> None:
    """Related information of a diagnostic may be in another cell: the notebook places a
    line of the analysed text on its cell's URI and line, edits since included."""
    documents = DocumentStore()
    store = NotebookStore(documents)
    notebook = store.open("nb", 1, cells())
    doc = notebook.document
    doc.set_result(Analysed(1, doc.text, FileAnalysis(path="nb", version=1)))
    notebook.cells[2].text = "# the model\n" + notebook.cells[2].text
    doc.update(notebook.module_text(), 2)
    locate = notebook.locator(doc.line_map())
    found = locate(6)  # `out = model(x)`: line 2 of cell 4, not moved
    assert found is not None
    uri, lines, to_current = found
    assert (uri, lines, to_current(6)) == ("cell:3", ["model = Net()", "out = model(x)"], 2)
    moved = locate(3)  # `class Net:`, one line down in its cell
    assert moved is not None and moved[0] == "cell:2" and moved[2](3) == 2
    assert locate(99) is None
