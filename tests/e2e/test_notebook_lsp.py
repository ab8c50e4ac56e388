"""A Jupyter notebook through the real server, its worker and pytest-lsp's client (LSP 3.17
notebook synchronization): a class in one cell gets the shapes of the call in a later cell,
on the cell's own URI; editing the call updates them; a shape error is published on the
cell and line where it is; IPython magics give no error."""

from __future__ import annotations

import asyncio
import importlib.util
import re
import sys
import time
from pathlib import Path

import pytest
import pytest_lsp
from harness import NOTEBOOK_IMPORTS, NOTEBOOK_NET, needs_worker, start_recording
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient

pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch"),
    pytest.mark.slow,
    needs_worker,
]

SERVER = ClientServerConfig(server_command=[sys.executable, "-m", "fxls", "serve"])

CELLS = [
    NOTEBOOK_IMPORTS,
    ("markdown", "# A small network"),
    NOTEBOOK_NET,
    (
        "code",
        "!pip install nothing\nmodel = Net()\nout = model(torch.randn(8, 3, 32, 32))\n"
        "print(out.shape)\nmodel?",
    ),
]


@pytest_lsp.fixture(config=SERVER)
async def client(lsp_client: LanguageClient, tmp_path: Path):
    await start_recording(lsp_client, tmp_path, {"debounceMs": 50})
    yield
    await lsp_client.shutdown_session()


def _open(
    client: LanguageClient,
    folder: Path,
    cells_in: list[tuple[str, str]] = CELLS,
    name: str = "model.ipynb",
    tag: str = "C",
) -> tuple[str, list[str]]:
    """Open a notebook of ``cells_in`` (kind, text) as VS Code does: its URI and its cells'."""
    notebook = (folder / name).as_uri()
    cells = [f"vscode-notebook-cell:{folder / name}#{tag}{i}" for i in range(len(cells_in))]
    client.notebook_document_did_open(
        types.DidOpenNotebookDocumentParams(
            notebook_document=types.NotebookDocument(
                uri=notebook,
                notebook_type="jupyter-notebook",
                version=1,
                cells=[
                    types.NotebookCell(
                        kind=types.NotebookCellKind.Code
                        if kind == "code"
                        else types.NotebookCellKind.Markup,
                        document=uri,
                    )
                    for (kind, _), uri in zip(cells_in, cells)
                ],
            ),
            cell_text_documents=[
                types.TextDocumentItem(
                    uri=uri,
                    language_id="python" if kind == "code" else "markdown",
                    version=1,
                    text=text,
                )
                for (kind, text), uri in zip(cells_in, cells)
            ],
        )
    )
    return notebook, cells


def _set_line(
    client: LanguageClient, notebook: str, cell: str, version: int, line: int, text: str
) -> None:
    """Replace one line of a cell, as the editor sends a typed change."""
    end = types.Position(line=line, character=200)
    client.notebook_document_did_change(
        types.DidChangeNotebookDocumentParams(
            notebook_document=types.VersionedNotebookDocumentIdentifier(
                uri=notebook, version=version
            ),
            change=types.NotebookDocumentChangeEvent(
                cells=types.NotebookDocumentCellChanges(
                    text_content=[
                        types.NotebookDocumentCellContentChanges(
                            document=types.VersionedTextDocumentIdentifier(
                                uri=cell, version=version
                            ),
                            changes=[
                                types.TextDocumentContentChangePartial(
                                    range=types.Range(
                                        start=types.Position(line=line, character=0), end=end
                                    ),
                                    text=text,
                                )
                            ],
                        )
                    ]
                )
            ),
        )
    )


async def _hover(client: LanguageClient, uri: str, line: int, col: int) -> str:
    result = await client.text_document_hover_async(
        types.HoverParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            position=types.Position(line=line, character=col),
        )
    )
    if result is None or not isinstance(result.contents, types.MarkupContent):
        return ""
    return re.sub(r"`", "", result.contents.value)


async def _until(predicate, what: str, seconds: float = 120.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = await predicate()
        if found:
            return found
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.asyncio
async def test_shapes_from_a_later_cell_errors_on_their_cell(
    client: LanguageClient, tmp_path: Path
) -> None:
    notebook, cells = _open(client, tmp_path)

    async def class_hover() -> str:  # the capture's (a new server may show preliminary first)
        text = await _hover(client, cells[2], 0, 7)
        return text if "32, 32" in text and "preliminary" not in text else ""

    text = await _until(class_hover, "the class hover with the call's shapes")
    assert "[B, 3, 32, 32]" in text or "[8, 3, 32, 32]" in text, text
    assert "cell 4, line 3" in text, text
    # the line of the class's own forward: shapes at the cell's lines
    conv = await _hover(client, cells[2], 7, 12)
    assert "16, 32, 32" in conv, conv
    # inlay hints and code lenses on the cell's own lines; none in the other cells
    whole = types.Range(
        start=types.Position(line=0, character=0), end=types.Position(line=99, character=0)
    )
    hints = await client.text_document_inlay_hint_async(
        types.InlayHintParams(text_document=types.TextDocumentIdentifier(uri=cells[2]), range=whole)
    )
    assert hints and {h.position.line for h in hints} <= {7, 8}, hints
    lenses = await client.text_document_code_lens_async(
        types.CodeLensParams(text_document=types.TextDocumentIdentifier(uri=cells[2]))
    )
    assert [lens.range.start.line for lens in lenses or []] == [0], lenses
    for other in (cells[0], cells[3]):
        assert not await client.text_document_inlay_hint_async(
            types.InlayHintParams(
                text_document=types.TextDocumentIdentifier(uri=other), range=whole
            )
        )
    # magics, shell lines and help give no diagnostic
    published = client.published  # type: ignore[attr-defined]
    assert not any(p.diagnostics for p in published if p.uri in (cells[0], cells[3]))
    assert all(p.uri in cells for p in published), {p.uri for p in published}

    # the call changes: the class gets the new sizes
    _set_line(client, notebook, cells[3], 2, 2, "out = model(torch.randn(8, 3, 64, 64))")

    async def new_hover() -> str:
        text = await _hover(client, cells[2], 0, 7)
        return text if "64, 64" in text else ""

    text = await _until(new_hover, "the class hover with the edited call")
    assert "3, 64, 64" in text and "cell 4, line 3" in text, text

    # a call the class cannot run: the error is on the class's cell, at the line that raised
    _set_line(client, notebook, cells[3], 3, 2, "out = model(torch.randn(8, 4, 64, 64))")

    async def error_on_cell() -> list[types.Diagnostic]:
        # each cell's diagnostics are a publication of their own: wait for both cells'
        found = [p for p in client.published if p.uri == cells[2]]  # type: ignore[attr-defined]
        ran = [p for p in client.published if p.uri == cells[3]]  # type: ignore[attr-defined]
        if not found or not ran or not ran[-1].diagnostics:
            return []
        return [d for d in found[-1].diagnostics if d.severity == 1]

    errors = await _until(error_on_cell, "a shape error published on both cells")
    assert any(d.range.start.line == 7 for d in errors), [(d.range, d.message) for d in errors]
    calling = [p for p in client.published if p.uri == cells[3]]  # type: ignore[attr-defined]
    assert calling and [d.range.start.line for d in calling[-1].diagnostics] == [2], calling[-1]
    # the calling cell's error points to where it was raised: the class's cell, its line
    (raised,) = calling[-1].diagnostics
    places = [(r.location.uri, r.location.range.start.line, r.message)
              for r in raised.related_information or []]  # fmt: skip
    assert (cells[2], 7, "raised here") in places, places
    # and the class's error points to the cell's statement that ran it; both say so in a
    # notebook's words (the cell that ran, not "this file" and `__main__`)
    (in_class,) = [d for d in errors if d.range.start.line == 7]
    ran = [(r.location.uri, r.location.range.start.line, r.message)
           for r in in_class.related_information or []]  # fmt: skip
    assert (cells[3], 2, "run from here") in ran, ran
    for said in (raised.message, in_class.message):
        assert said.startswith("running cell 4 raised RuntimeError"), said
        assert "file" not in said and "__main__" not in said, said
    client.notebook_document_did_close(
        types.DidCloseNotebookDocumentParams(
            notebook_document=types.NotebookDocumentIdentifier(uri=notebook),
            cell_text_documents=[types.TextDocumentIdentifier(uri=uri) for uri in cells],
        )
    )


PERCENT = """# %%
import torch
import torch.nn as nn

# %% [markdown]
# A small network

# %%
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, padding=1)
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        h = self.conv(x)
        return self.fc(h.mean((2, 3)))

# %%
model = Net()
out = model(torch.randn(8, 3, 48, 48))

# %%
while True:  # a training loop: never run by a capture
    pass
"""


@pytest.mark.asyncio
async def test_percent_format_file_is_a_notebook_in_plain_python(
    client: LanguageClient, tmp_path: Path
) -> None:
    """What Neovim users edit (jupytext's ``# %%`` files): a plain Python document whose
    top-level loop is left out of the run, with the shapes of the call in a later cell."""
    uri = (tmp_path / "train.py").as_uri()
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(
                uri=uri, language_id="python", version=1, text=PERCENT
            )
        )
    )

    async def class_hover() -> str:  # the capture's (a new server may show preliminary first)
        text = await _hover(client, uri, 8, 7)
        return text if "48, 48" in text and "preliminary" not in text else ""

    text = await _until(class_hover, "the class hover with the call's shapes", 60)
    assert "[B, 3, 48, 48]" in text and "the call at line 21" in text, text
    published = [p for p in client.published if p.uri == uri]  # type: ignore[attr-defined]
    assert published and not any(d.severity == 1 for d in published[-1].diagnostics)


@pytest.mark.asyncio
async def test_cells_added_and_removed(client: LanguageClient, tmp_path: Path) -> None:
    """A cell inserted above moves every cell number; a removed cell's diagnostics are cleared."""
    notebook, cells = _open(client, tmp_path)

    async def hover_says(words: str) -> str:
        text = await _hover(client, cells[2], 0, 7)
        return text if words in text else ""

    await _until(lambda: hover_says("cell 4, line 3"), "the first capture")
    new = f"vscode-notebook-cell:{tmp_path / 'model.ipynb'}#N0"
    structure = types.NotebookDocumentCellChangeStructure(
        array=types.NotebookCellArrayChange(
            start=0,
            delete_count=0,
            cells=[types.NotebookCell(kind=types.NotebookCellKind.Markup, document=new)],
        ),
        did_open=[types.TextDocumentItem(uri=new, language_id="markdown", version=1, text="# Hi")],
    )
    client.notebook_document_did_change(
        types.DidChangeNotebookDocumentParams(
            notebook_document=types.VersionedNotebookDocumentIdentifier(uri=notebook, version=2),
            change=types.NotebookDocumentChangeEvent(
                cells=types.NotebookDocumentCellChanges(structure=structure)
            ),
        )
    )
    text = await _until(lambda: hover_says("cell 5, line 3"), "the hover after a cell was added")
    assert "[B, 3, 32, 32]" in text

    # the calling cell goes: its call no longer gives the inputs
    removed = types.NotebookDocumentCellChangeStructure(
        array=types.NotebookCellArrayChange(start=4, delete_count=1),
        did_close=[types.TextDocumentIdentifier(uri=cells[3])],
    )
    client.notebook_document_did_change(
        types.DidChangeNotebookDocumentParams(
            notebook_document=types.VersionedNotebookDocumentIdentifier(uri=notebook, version=3),
            change=types.NotebookDocumentChangeEvent(
                cells=types.NotebookDocumentCellChanges(structure=removed)
            ),
        )
    )

    async def no_call() -> str:
        text = await _hover(client, cells[2], 0, 7)
        return text if text and "the call at" not in text else ""

    await _until(no_call, "the hover once the calling cell is gone")


@pytest.mark.asyncio
async def test_a_notebook_too_large_is_said_on_its_first_cell(
    client: LanguageClient, tmp_path: Path
) -> None:
    texts = ["import torch", "x = 1\n" * 400_000]
    _, cells = _open(client, tmp_path, [("code", t) for t in texts], "big.ipynb", "B")

    async def told() -> list[types.PublishDiagnosticsParams]:
        return [p for p in client.published if p.diagnostics]  # type: ignore[attr-defined]

    (published,) = await _until(told, "the notebook too large to analyse")
    assert published.uri == cells[0] and published.diagnostics[0].code == "FX407"


UNUSED_CELL = (
    "class Head(nn.Module):\n"
    "    def __init__(self):\n"
    "        super().__init__()\n"
    "        self.fc1 = nn.Linear(6, 6)\n"
    "        self.fc2 = nn.Linear(6, 6)\n"
    "\n"
    "    def forward(self, x):\n"
    "        h = self.fc1(x)\n"
    "        wasted = self.fc2(h).relu()\n"
    "        return torch.relu(h)"
)


@pytest.mark.asyncio
async def test_a_quick_fix_in_a_cell_edits_that_cell(
    client: LanguageClient, tmp_path: Path
) -> None:
    """An unused statement in a class's cell: the fix is listed on the cell, computed on the
    notebook's module, and its edit is on the cell's URI at the cell's lines."""
    texts = ["%load_ext autoreload\nimport torch\nimport torch.nn as nn", UNUSED_CELL,
             "head = Head()\nhead(torch.randn(4, 6))"]  # fmt: skip
    _, cells = _open(client, tmp_path, [("code", t) for t in texts], "head.ipynb", "H")

    async def unused() -> list[types.Diagnostic]:
        found = [p for p in client.published if p.uri == cells[1]]  # type: ignore[attr-defined]
        return [d for d in found[-1].diagnostics if d.code == "FX302"] if found else []

    (diagnostic,) = await _until(unused, "the unused statement's hint on its cell")
    assert diagnostic.range.start.line == 8
    listed = await client.text_document_code_action_async(
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=cells[1]),
            range=diagnostic.range,
            context=types.CodeActionContext(diagnostics=[diagnostic]),
        )
    )
    actions = [a for a in listed or [] if isinstance(a, types.CodeAction)]
    fix = next(a for a in actions if a.title.startswith("Remove unused"))
    assert not any(a.kind == "source.fixAll.fxls" for a in actions)  # per file: not in cells
    done = await client.code_action_resolve_async(fix)
    assert done.edit is not None, done.disabled
    changes = done.edit.document_changes or []
    assert [c.text_document.uri for c in changes] == [cells[1]]  # type: ignore[union-attr]
    (edit,) = changes[0].edits  # type: ignore[union-attr]
    assert edit.range.start.line == 8 and edit.new_text == "", edit
