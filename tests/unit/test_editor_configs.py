"""The Neovim snippets in docs/editors/neovim.md say what the tested lsp/fxls.lua says.

nvim-lspconfig cannot be installed where the tests run, so its classic ``setup()`` snippet
is not executed; this checks that its launch fields are those of ``lsp/fxls.lua``, which
tests/e2e/test_neovim.py runs in headless Neovim.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EDITORS = ROOT / "docs" / "editors"


def _classic_snippet() -> str:
    doc = (EDITORS / "neovim.md").read_text()
    blocks = re.findall(r"```lua\n(.*?)```", doc, flags=re.DOTALL)
    (snippet,) = [b for b in blocks if 'require("lspconfig.configs")' in b]
    return snippet


def _strings(text: str) -> list[str]:
    return re.findall(r'"([^"]*)"', text)


def _field(lua: str, name: str) -> str:
    found = re.search(rf"^\s*{name} = (.*?),?$", lua, flags=re.MULTILINE)
    assert found is not None, f"no {name} in\n{lua}"
    return found.group(1)


def test_the_classic_lspconfig_snippet_matches_lsp_fxls_lua() -> None:
    shipped = (EDITORS / "lsp" / "fxls.lua").read_text()
    snippet = _classic_snippet()
    # the same command, working directory (never the project) and environment
    assert _strings(_field(shipped, "cmd").split(" or ", 1)[1]) == _strings(_field(snippet, "cmd"))
    assert 'vim.fn.stdpath("cache") .. "/fxls"' in shipped
    assert 'local server_cwd = vim.fn.stdpath("cache") .. "/fxls"' in snippet
    assert 'vim.fn.mkdir(server_cwd, "p")' in shipped and 'vim.fn.mkdir(server_cwd, "p")' in snippet
    assert _field(shipped, "cmd_cwd") == _field(snippet, "cmd_cwd") == "server_cwd"
    assert _field(shipped, "cmd_env") == _field(snippet, "cmd_env") == '{ PYTHONSAFEPATH = "1" }'
    assert _strings(_field(shipped, "filetypes")) == _strings(_field(snippet, "filetypes"))
    markers = _strings(_field(shipped, "root_markers"))
    assert markers == _strings(_field(snippet, "root_dir"))
    assert re.search(r"^\s*trusted = true,", shipped, flags=re.MULTILINE)
    assert _field(snippet, "init_options") == "{ trusted = true }"


def test_the_try_it_config_enables_the_shipped_lsp_folder() -> None:
    text = (EDITORS / "nvim-fxls.lua").read_text()
    assert "vim.opt.runtimepath:prepend(here)" in text
    assert 'vim.lsp.enable("fxls")' in text
    assert (EDITORS / "lua" / "fxls" / "health.lua").is_file()
