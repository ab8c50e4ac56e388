"""Shared end-to-end helpers: repository paths, markers, the recording LSP client set-up and
the headless Neovim driver. Test modules import them from here (``from harness import ...``);
``conftest.py`` holds the fixtures."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from lsprotocol import types
from pytest_lsp import LanguageClient, client_capabilities

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
