"""The notebook as one module: IPython syntax, left-out statements, the line map, bad files."""

from __future__ import annotations

import ast
import json

import pytest

from fxls.analysis.notebook import (
    Cell,
    FileLines,
    NotebookError,
    build,
    file_lines,
    percent_module,
    python_lines,
    read_ipynb,
)
from fxls.engine.fixes import kept_lines_only
from fxls.protocol.catalogue import ALL_MESSAGES, FX404, FX410
from fxls.protocol.model import FixOutcome, Span, TextEdit


def code(text: str) -> Cell:
    return Cell("code", "python", text)


def lines_of(text: str) -> list[str]:
    return python_lines(text)[0]


def test_magics_become_pass_at_their_indentation_and_columns_stay() -> None:
    text = "%matplotlib inline\n!pip install x\nfor i in range(2):\n    %time f(i)\nx = 1"
    out, gone = python_lines(text)
    assert out[0] == "pass" and out[1] == "pass"
    assert out[4] == "x = 1"
    assert gone[:2] == [1, 2]
    ast.parse("\n".join(out))


def test_help_and_assigned_magics() -> None:
    out = lines_of("torch.nn.Linear?\n??torch.nn\nfiles = !ls\nnames = %who_ls\ny = 2 % 3")
    assert out[:2] == ["pass", "pass"]
    assert out[4] == "y = 2 % 3"
    ast.parse("\n".join(out))


def test_cell_magics() -> None:
    out, gone = python_lines("%%time\nimport torch\nw = torch.zeros(3)")
    assert out == ["", "import torch", "w = torch.zeros(3)"] and gone == [1]
    out, gone = python_lines("%%bash\nls -la\necho hi")
    assert out == ["", "", ""] and gone == [1, 2, 3]


def test_top_level_await_is_left_out() -> None:
    out = lines_of("import asyncio\ndata = await fetch()\nasync def f():\n    await g()")
    assert out == ["import asyncio", "", "async def f():", "    await g()"]


def test_only_model_code_runs() -> None:
    text = "\n".join(
        [
            "import torch",
            "from torch.utils.data import DataLoader",
            "loader = DataLoader(ds, batch_size=8)",
            "batch = next(iter(loader))",
            "model = Net()",
            "x = torch.randn(8, 3, 32, 32)",
            "out = model(x)",
            "model(torch.randn(2, 3, 32, 32))",
            "print(out.shape)",
            "for epoch in range(10):",
            "    model(batch)",
            "plt.plot([1, 2])",
            "model",
            "y = model(batch)",
        ]
    )
    out = lines_of(text)
    kept = [i + 1 for i, line in enumerate(out) if line]
    assert kept == [1, 2, 5, 6, 7, 8]
    assert len(out) == 14


def test_functions_that_train_are_not_called_and_shared_lines_keep_columns() -> None:
    text = "def train(m):\n    m.backward()\nhist = train(model)\nmodel = Net(); plt.show()"
    out = lines_of(text)
    assert out[2] == ""
    assert out[3] == "model = Net(); pass      "
    ast.parse("\n".join(out))


def test_if_main_and_if_of_model_code() -> None:
    out = lines_of('if __name__ == "__main__":\n    main()\nif True:\n    n = 3')
    assert out == ["", "", "if True:", "    n = 3"]


def test_syntax_error_is_kept_as_written() -> None:
    assert lines_of("def f(:\n    pass") == ["def f(:", "    pass"]


def test_line_map_both_ways_skips_other_cells() -> None:
    cells = [
        code("import torch\nimport torch.nn as nn"),
        Cell("markdown", "markdown", "# Title\ntext"),
        code("class Net(nn.Module):\n    pass"),
        Cell("code", "r", "x <- 1"),
        code("model = Net()"),
    ]
    module = build(cells)
    assert module.text.split("\n")[:5] == [
        "import torch",
        "import torch.nn as nn",
        "class Net(nn.Module):",
        "    pass",
        "model = Net()",
    ]
    assert module.to_module(2, 1) == 3 and module.to_module(4, 1) == 5
    assert module.to_cell(3) == (2, 1) and module.to_cell(5) == (4, 1)
    assert module.to_module(1, 1) is None and module.to_module(2, 3) is None
    assert module.to_cell(6) is None
    for slot in module.slots:
        for line in range(1, slot.count + 1):
            there = module.to_module(slot.cell, line)
            assert there is not None and module.to_cell(there) == (slot.cell, line)
    assert module.label(5) == "cell 5, line 1"
    assert (
        module.relabel("inputs from the call at line 5") == "inputs from the call at cell 5, line 1"
    )
    said = "running the cell at line 5 raised ValueError (the call at line 3)"
    assert module.relabel(said) == "running cell 5 raised ValueError (the call at cell 3, line 1)"
    assert module.relabel("the cell at line 99 raised") == "the cell at line 99 raised"


def test_messages_about_files_say_cells_in_a_notebook() -> None:
    """The catalogue's notebook wording: the cell that ran, no script or `__main__`; a file
    keeps its own."""
    found = FX404(Span(7, 8, 7, 20), error="RuntimeError: boom", line="12")
    in_file = found.diagnostic()
    assert in_file.message == "executing this file raised RuntimeError: boom"
    assert in_file.fix is not None and "__main__" in in_file.fix
    in_notebook = found.diagnostic(notebook=True)
    assert in_notebook.message == "running the cell at line 12 raised RuntimeError: boom"
    assert in_notebook.fix is not None and "not run" in in_notebook.fix
    exits = FX410(Span(3, 0, 3, 9), what="`sys.exit()`").diagnostic(notebook=True)
    assert exits.message.startswith("running the cell at line 3 stopped at `sys.exit()`")
    for message in ALL_MESSAGES.values():
        for text in (message.notebook_template or "", message.notebook_fix or ""):
            assert "file" not in text and "script" not in text and "__main__" not in text, text


def test_names_made_in_one_cell_reach_the_next() -> None:
    module = build([code("loader = DataLoader(ds)"), code("xb = next(loader)\nm = Net()\nm(xb)")])
    assert module.text.split("\n")[:4] == ["", "", "m = Net()", ""]


def notebook(cells: list[dict[str, object]], language: str = "python") -> bytes:
    meta = {"kernelspec": {"language": language, "name": "k"}}
    return json.dumps({"cells": cells, "metadata": meta, "nbformat": 4}).encode()


def test_read_ipynb_sources_only() -> None:
    data = notebook(
        [
            {"cell_type": "markdown", "source": ["# t"]},
            {"cell_type": "code", "source": ["import torch\n", "x = 1"], "outputs": [{"x": 1}]},
        ]
    )
    cells = read_ipynb(data)
    assert [c.kind for c in cells] == ["markdown", "code"]
    assert cells[1].text == "import torch\nx = 1"


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b"{not json", "not valid JSON"),
        (b"[]", "no list of cells"),
        (notebook([]), "no cells"),
        (notebook([{"cell_type": "code", "source": "x <- 1"}], "R"), "language is R"),
        (notebook([{"cell_type": "markdown", "source": "# t"}]), "no Python code cells"),
        (notebook([{"cell_type": "code", "source": 3}]), "neither text"),
        (b" " * 20_000_001, "larger than"),
    ],
)
def test_bad_notebooks_get_one_message(data: bytes, says: str) -> None:
    with pytest.raises(NotebookError, match=says):
        read_ipynb(data)


def test_percent_format_keeps_every_line_and_leaves_out_loops() -> None:
    text = "# %%\nimport torch\n# %% [markdown]\n# words\n# %%\nm = Net()\nm(x)\nwhile True:\n    pass\n"
    module = percent_module(text)
    assert module is not None
    assert module.text.split("\n") == [
        "# %%", "import torch", "# %% [markdown]", "# words", "# %%", "m = Net()", "m(x)",
        "", "", "",
    ]  # fmt: skip
    assert percent_module("import torch\nx = 1  # %% not a marker\n") is None


def test_a_factory_that_prints_is_still_called() -> None:
    out = lines_of(
        'def make():\n    print("building")\n    return Net()\nmodel = make()\nprint(model)'
    )
    assert out[3] == "model = make()" and out[4] == ""


def test_a_fix_of_a_percent_file_applies_only_to_lines_that_ran_as_written() -> None:
    text = "# %%\nm = Net()\n# %%\nfor i in range(3):\n    m(i)\n"
    ran = "# %%\nm = Net()\n# %%\n\n\n"
    inside = FixOutcome("a", "safe", "t", edits=[TextEdit(Span(2, 0, 2, 9), "m = Net(2)")])
    kept_lines_only(inside, ran, text)
    assert inside.applicability == "safe" and inside.edits
    outside = FixOutcome("b", "safe", "t", edits=[TextEdit(Span(4, 0, 5, 8), "")])
    kept_lines_only(outside, ran, text)
    assert outside.applicability == "unavailable" and not outside.edits


def _ipynb(*sources: object, indent: int | None = 1, output: object = None) -> str:
    cells = []
    for source in sources:
        cell: dict[str, object] = {"cell_type": "code", "metadata": {}, "source": source}
        cell["outputs"] = [output] if output is not None else []
        cells.append(dict(sorted(cell.items())))  # nbformat sorts keys: outputs first
    return json.dumps({"cells": cells, "metadata": {}, "nbformat": 4}, indent=indent)


def test_file_lines_find_each_source_string_in_the_json_text() -> None:
    raw = _ipynb(["import torch\n", "x = 1"], ["é = 'a\"b'\n", "y = 2\n"])
    text = raw.split("\n")
    found = file_lines(raw)
    for cell, lines in ((0, ["import torch\n", "x = 1"]), (1, ["é = 'a\"b'\n", "y = 2\n"])):
        for i, value in enumerate(lines, start=1):
            at = found.line(cell, i)
            assert at is not None and json.loads(text[at - 1].strip().rstrip(",")) == value
    # past the strings (the empty line after a last newline): the cell's source key
    assert found.line(1, 3) == found.starts[1] and '"source"' in text[found.starts[1] - 1]
    assert found.line(2, 1) is None


def test_file_lines_fall_back_to_the_source_key_or_nothing() -> None:
    one_string = _ipynb("import torch\nx = 1")
    found = file_lines(one_string)
    assert found.exact == {} and found.line(0, 2) == found.starts[0]
    assert one_string.split("\n")[found.starts[0] - 1].strip().startswith('"source": "import')
    several = file_lines(_ipynb(["import torch\nx = 1"]))  # two lines in one string
    assert several.exact == {} and several.line(0, 2) == several.starts[0]
    assert file_lines(_ipynb(["x = 1"], indent=None)) == FileLines()  # all on one line
    assert file_lines("{not json") == FileLines()
    assert file_lines("[1, 2]") == FileLines()


def test_file_lines_skip_a_source_key_in_an_output() -> None:
    output = {"output_type": "display_data", "metadata": {"source": ["y = 2"]}, "data": {}}
    raw = _ipynb(["x = 1"], output=output)
    text = raw.split("\n")
    assert text.index('      "source": [') < text.index('   "source": [')  # the output's first
    at = file_lines(raw).line(0, 1)
    assert at is not None and (text[at - 2], text[at - 1]) == ('   "source": [', '    "x = 1"')


def test_a_notebook_module_knows_its_lines_in_the_file() -> None:
    raw = _ipynb(["import torch\n", "x = 1"], ["y = 2"])
    module = build(read_ipynb(raw))
    assert module.file_line(2) is None  # not known until read from the file
    module.in_file = file_lines(raw)
    assert [module.file_line(n) for n in (1, 2, 3)] == [
        module.in_file.line(0, 1), module.in_file.line(0, 2), module.in_file.line(1, 1),
    ]  # fmt: skip
    assert module.file_line(3) is not None and module.file_line(4) is None
