"""Positions in notebooks for every report format: a line of a notebook's module (what the
engine analysed) as its cell and the line in that cell.

Cells are counted from 1 over every cell of the notebook (markdown included), as the notebook
shows them; lines and columns within a cell as in a file.
"""

from __future__ import annotations

from fxls.analysis.notebook import NotebookModule


def cell_of(notebook: NotebookModule | None, line: int) -> tuple[int | None, int]:
    """``(cell, line in the cell)``, or ``(None, line)`` for a plain file (or a line past the
    cells)."""
    where = notebook.to_cell(line) if notebook is not None else None
    return (None, line) if where is None else (where[0] + 1, where[1])


def position(notebook: NotebookModule | None, line: int, col: int | None = None) -> str:
    """``12:5`` in a file, ``cell 3:12:5`` in a notebook (``col`` 1-based, when given)."""
    cell, at = cell_of(notebook, line)
    text = f"{at}" if col is None else f"{at}:{col}"
    return text if cell is None else f"cell {cell}:{text}"


def relabel(notebook: NotebookModule | None, text: str) -> str:
    """A message that names a module line (``from the call at line 14``) in cells' words."""
    return text if notebook is None else notebook.relabel(text)
