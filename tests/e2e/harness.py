"""Shared end-to-end helpers: repository paths, markers, the recording LSP client set-up and
the headless Neovim driver. Test modules import them from here (``from harness import ...``);
``conftest.py`` holds the fixtures."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "docs" / "examples"
needs_worker = pytest.mark.worker
"""Mark tests that start the real worker (``-m "not worker"`` leaves them out; never a skip)."""

RunFxls = Callable[..., subprocess.CompletedProcess[str]]


def record(client: LanguageClient, *, timed: bool = False) -> None:
    """Keep every publishDiagnostics in ``client.published`` (with its version, not only the
    latest per URI; with ``timed``, as ``(time.monotonic(), params)``) and answer the
    inlay-hint / code-lens refresh requests."""
    client.published = []  # type: ignore[attr-defined]
    features = client.protocol.fm.features
    original = features[types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS]

    def publish(params: types.PublishDiagnosticsParams) -> None:
        entry = (time.monotonic(), params) if timed else params
        client.published.append(entry)  # type: ignore[attr-defined]
        original(params)

    features[types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS] = publish
    for method in (types.WORKSPACE_INLAY_HINT_REFRESH, types.WORKSPACE_CODE_LENS_REFRESH):
        features[method] = lambda params: None


async def start_recording(client: LanguageClient, root: Path, options: dict[str, Any]) -> None:
    """Initialize ``client`` as VS Code would, on the workspace ``root``, recording what it
    receives (:func:`record`)."""
    record(client)
    await client.initialize_session(
        types.InitializeParams(
            capabilities=client_capabilities("visual-studio-code"),
            root_uri=root.as_uri(),
            initialization_options=options,
        )
    )


async def server_session(
    root: Path, options: dict[str, Any], env: dict[str, str]
) -> AsyncIterator[LanguageClient]:
    """A new ``fxls serve`` with ``env``, initialized on ``root`` with ``options`` and recorded
    (:func:`start_recording`); shut down after the ``async for`` body."""
    config = ClientServerConfig([sys.executable, "-m", "fxls", "serve"], server_env=env)
    client = await config.start()
    await start_recording(client, root, options)
    try:
        yield client
    finally:
        await client.shutdown_session()
        await client.stop()


async def published(client: LanguageClient, uri: str, count: int) -> None:
    """Wait (up to 60 s) until ``uri`` has had ``count`` publishDiagnostics."""
    for _ in range(1200):
        if len([p for p in client.published if p.uri == uri]) >= count:  # type: ignore[attr-defined]
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"fewer than {count} publishes for {uri}")


NVIM = Path(sys.executable).parent / "nvim"
if not NVIM.exists():
    NVIM = Path(shutil.which("nvim") or "nvim")
NVIM_CONFIG = ROOT / "docs" / "editors" / "nvim-fxls.lua"
NVIM_CODE_ACTION = Path(__file__).resolve().parent / "nvim" / "code_action.lua"
needs_nvim = pytest.mark.skipif(shutil.which(str(NVIM)) is None, reason="needs nvim")


def nvim_code_action(
    workspace: Path,
    file: Path,
    base_env: dict[str, str] | None = None,
    script: Path = NVIM_CODE_ACTION,
    **driver: str,
) -> dict[str, Any]:
    """Run a Neovim driver (``tests/e2e/nvim/code_action.lua`` unless ``script``) headless with
    the documented config on ``file`` (workspace root ``workspace``); ``driver`` sets its
    ``FXLS_NVIM_<KEY>`` variables (``CODE``/``AT``, ``TITLE``). Returns the driver's JSON
    result after checking it finished."""
    (workspace / "pyproject.toml").write_text("")  # the workspace root (root_markers)
    out = workspace / "result.json"
    env = dict(os.environ if base_env is None else base_env)
    for name in ("CONFIG", "DATA", "CACHE", "STATE"):
        env[f"XDG_{name}_HOME"] = str(workspace / name.lower())
    env.update({f"FXLS_NVIM_{key.upper()}": value for key, value in driver.items()})
    env.update(
        FXLS_NVIM_CONFIG=str(NVIM_CONFIG),
        FXLS_NVIM_FILE=str(file),
        FXLS_NVIM_OUT=str(out),
        FXLS_CMD=json.dumps([sys.executable, "-m", "fxls", "serve"]),
    )
    proc = subprocess.run(
        [str(NVIM), "--headless", "--clean", "-c", f"luafile {script}"],
        env=env,
        cwd=workspace,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert out.exists(), f"no result (exit {proc.returncode}): {proc.stderr[-2000:]}"
    result: dict[str, Any] = json.loads(out.read_text())
    assert proc.returncode == 0, (result.get("error"), result.get("titles"), proc.stderr[-2000:])
    return result


LINEAR_NET = """\
from torch import nn


# fxls: x = (B, 16)
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 4)

    def forward(self, x):
        return self.fc(x)
"""
"""A one-layer model whose hover of ``self.fc(x)`` shows ``[B, 4]``: for tests of how the
server and the CLI start and store, not of what a capture shows."""


NOTEBOOK_IMPORTS = ("code", "import torch\nimport torch.nn as nn\n%matplotlib inline")
NOTEBOOK_NET = (
    "code",
    "class Net(nn.Module):\n"
    "    def __init__(self):\n"
    "        super().__init__()\n"
    "        self.conv = nn.Conv2d(3, 16, 3, padding=1)\n"
    "        self.fc = nn.Linear(16, 10)\n"
    "\n"
    "    def forward(self, x):\n"
    "        h = self.conv(x)\n"
    "        return self.fc(h.mean((2, 3)))",
)
"""The cells the notebook tests share: imports with a magic, and a small CNN (a call in a later
cell gives its shapes)."""


def write_notebook(
    path: Path, cells: list[tuple[str, str]], output: dict[str, Any] | None = None
) -> Path:
    """An nbformat 4 file as Jupyter writes it (sources as lists of lines); each code cell
    holds ``output`` when given (a run notebook), none otherwise."""
    raw: list[dict[str, Any]] = []
    for kind, text in cells:
        cell: dict[str, Any] = {"cell_type": kind, "metadata": {}, "source": text.splitlines(True)}
        if kind == "code":
            cell.update(execution_count=1 if output else None, outputs=[output] if output else [])
        raw.append(cell)
    meta = {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}}
    notebook = {"cells": raw, "metadata": meta, "nbformat": 4, "nbformat_minor": 5}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(notebook, indent=1))
    return path
