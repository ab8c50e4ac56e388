"""The fxls VS Code extension in a real VS Code: code-server driven by headless Chromium.

``tests/e2e/vscode/setup.sh`` installs Chromium, code-server, playwright-core and a virtualenv
with only torch (into ``~/.cache/fxls-e2e``, reused when present) and builds
``vscode-extension/fxls.vsix`` with the documented command (``npm ci && npm run package``). The
main test installs that .vsix into a private code-server, opens a workspace whose ``fxls.python``
is the torch-only interpreter (so the fxls bundled in the .vsix is what runs), and drives the
editor like a user: open a file, wait for squiggles, hover a call, open the graph and click a
node. Every step waits for what a user would wait for (the hover's content, not just its
widget) and fails with the last text it saw. Screenshots go to ``tests/artifacts/vscode/``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from harness import NOTEBOOK_IMPORTS, NOTEBOOK_NET, write_notebook

from fxls import __version__

pytestmark = [pytest.mark.editor, pytest.mark.slow, pytest.mark.timeout(1800)]

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent / "vscode"
ARTIFACTS = ROOT / "tests" / "artifacts" / "vscode"
SHADOWS = ["fxls/__init__.py", "logging.py", "json.py", "typing.py", "token.py"]
SETUP_CANNOT_INSTALL = 3
"""setup.sh exits with this when a prerequisite (apt, code-server, ...) cannot be installed."""

MODEL = textwrap.dedent(
    """\
    import torch
    import torch.nn as nn
    import torch.nn.functional as F


    # fxls: x = (B, 3, 32, 32)
    class SmallCNN(nn.Module):
        def __init__(self, num_classes: int = 10) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(3, 64, kernel_size=3, padding=1)
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(64, num_classes)

        def forward(self, x):
            x = F.relu(self.conv1(x))
            x = self.pool(x).flatten(1)
            return self.fc(x)
    """
)

BROKEN = textwrap.dedent(
    """\
    import torch
    import torch.nn as nn


    # fxls: x = (B, 8)
    class Gate(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = nn.Linear(16, 16)

        def forward(self, x):
            y = self.proj(x)
            return y
    """
)


UNUSED = textwrap.dedent(
    """\
    import torch
    import torch.nn as nn


    # fxls: x = (B, 6)
    class WithUnused(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc1 = nn.Linear(6, 6)
            self.fc2 = nn.Linear(6, 6)

        def forward(self, x):
            h = self.fc1(x)
            wasted = self.fc2(x).relu()
            return torch.relu(h)
    """
)


@dataclass
class Toolchain:
    code_server: Path
    chromium: str
    node_modules: Path
    vsix: Path
    torch_python: str
    """A virtualenv's interpreter with torch and nothing else (no fxls, no pygls)."""
    seconds: int


@pytest.fixture(scope="module")
def toolchain() -> Toolchain:
    """Runs the idempotent setup script; skips only when prerequisites cannot be installed."""
    if not sys.platform.startswith("linux"):
        pytest.skip("the VS Code test runs code-server and Debian's Chromium on Linux only")
    for tool in ("node", "npm", "bash"):
        if shutil.which(tool) is None:
            pytest.skip(f"`{tool}` is not installed; the VS Code test needs Node.js 20 and npm")
    proc = subprocess.run(
        ["bash", str(HERE / "setup.sh")],
        capture_output=True,
        text=True,
        timeout=1500,
        check=False,
    )
    if proc.returncode == SETUP_CANNOT_INSTALL:
        pytest.skip(f"cannot install the VS Code test's prerequisites:\n{proc.stderr[-3000:]}")
    assert proc.returncode == 0, f"setup.sh failed ({proc.returncode}):\n{proc.stderr[-5000:]}"
    info = json.loads(proc.stdout.strip().splitlines()[-1])
    return Toolchain(
        code_server=Path(info["code_server"]),
        chromium=info["chromium"],
        node_modules=Path(info["node_modules"]),
        vsix=Path(info["vsix"]),
        torch_python=info["torch_python"],
        seconds=int(info["seconds"]),
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2))


@dataclass
class CodeServer:
    url: str
    workspace: Path
    home: Path
    data: Path
    log: Path

    def fxls_log(self) -> str:
        """The extension's "fxls" output channel, as VS Code saved it."""
        logs = sorted(self.data.glob("logs/*/exthost*/fxls.fxls/fxls.log"))
        return "\n".join(p.read_text(errors="replace") for p in logs)


def _start_code_server(
    toolchain: Toolchain,
    tmp: Path,
    *,
    trust: bool,
    python: str,
    settings: dict[str, Any] | None = None,
) -> tuple[CodeServer, subprocess.Popen[bytes]]:
    """Installs the .vsix into private dirs and serves ``tmp/workspace`` on a free port."""
    home = tmp / "home"
    data, extensions, workspace = tmp / "data", tmp / "extensions", tmp / "workspace"
    (workspace / ".vscode").mkdir(parents=True)
    (workspace / "model.py").write_text(MODEL)
    (workspace / "broken.py").write_text(BROKEN)
    (workspace / "unused.py").write_text(UNUSED)
    # Modules that shadow fxls and the standard library: the server must never import them.
    markers = tmp / "markers"
    markers.mkdir()
    for name in SHADOWS:
        path = workspace / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            "import os, sys\n"
            f"open(os.path.join({str(markers)!r}, {name.replace('/', '.')!r} + '-' + "
            "str(os.getpid())), 'w').write(repr(sys.argv))\n"
        )
    # A workspace cannot choose the interpreter or weaken the sandbox (machine-scoped
    # settings): these must be ignored, the user setting below applies.
    _write_json(
        workspace / ".vscode" / "settings.json",
        {
            "fxls.python": str(tmp / "no-such-workspace-python"),
            "fxls.isolation.seccomp": False,
            "fxls.limits.timeoutSeconds": 0.5,
        },
    )
    user_settings: dict[str, Any] = {
        "editor.hover.delay": 100,
        "editor.minimap.enabled": False,
        "workbench.startupEditor": "none",
        "workbench.tips.enabled": False,
        "extensions.autoUpdate": False,
        "extensions.ignoreRecommendations": True,
        "update.mode": "none",
        "telemetry.telemetryLevel": "off",
        "security.workspace.trust.startupPrompt": "never",
    }
    user_settings["fxls.python"] = python
    user_settings.update(settings or {})
    _write_json(data / "User" / "settings.json", user_settings)
    config = tmp / "config.yaml"
    config.write_text("auth: none\ncert: false\n")
    env = {
        **os.environ,
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
    }
    common = [
        "node",
        str(toolchain.code_server),
        "--config",
        str(config),
        "--user-data-dir",
        str(data),
        "--extensions-dir",
        str(extensions),
    ]
    install = subprocess.run(
        [*common, "--install-extension", str(toolchain.vsix)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    assert any(p.name.startswith("fxls.fxls-") for p in extensions.iterdir()), install.stdout

    port = _free_port()
    log = tmp / "code-server.log"
    args = [
        *common,
        "--bind-addr",
        f"127.0.0.1:{port}",
        "--auth",
        "none",
        "--disable-telemetry",
        "--disable-update-check",
        "--ignore-last-opened",
    ]
    if trust:
        args.append("--disable-workspace-trust")
    # else Workspace Trust stays on and the folder opens in restricted mode.
    with log.open("wb") as out:
        proc = subprocess.Popen(
            args, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(f"{url}/healthz", timeout=2) as response:
                if response.status == 200:
                    break
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            _stop(proc)
            pytest.fail(f"code-server did not come up:\n{log.read_text()[-3000:]}")
        time.sleep(0.3)
    return CodeServer(f"{url}/?folder={workspace}", workspace, home, data, log), proc


StartCodeServer = Callable[..., CodeServer]


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Stops code-server and everything it started (extension host, fxls server, worker)."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@pytest.fixture
def start_code_server(toolchain: Toolchain, tmp_path: Path) -> Iterator[StartCodeServer]:
    """Starts code-server (``trust=False``: Workspace Trust on, folder in restricted mode)."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(
        trust: bool = True, python: str = sys.executable, settings: dict[str, Any] | None = None
    ) -> CodeServer:
        server, proc = _start_code_server(
            toolchain, tmp_path, trust=trust, python=python, settings=settings
        )
        procs.append(proc)
        return server

    try:
        yield start
    finally:
        for proc in procs:
            _stop(proc)


def _drive(
    toolchain: Toolchain, server: CodeServer, tmp: Path, name: str, steps: list[dict[str, Any]]
) -> dict[str, Any]:
    """Runs driver.mjs over ``steps``; returns what it observed (also saved as JSON)."""
    shots = ARTIFACTS / name
    shutil.rmtree(shots, ignore_errors=True)
    shots.mkdir(parents=True)
    config = {
        "url": server.url,
        "chromium": toolchain.chromium,
        "nodeModules": str(toolchain.node_modules),
        "profileDir": str(tmp / "chromium-profile"),
        "screenshotDir": str(shots),
        "showOutput": True,
        "steps": steps,
    }
    config_path = tmp / "driver.json"
    _write_json(config_path, config)
    proc = subprocess.run(
        ["node", str(HERE / "driver.mjs"), str(config_path)],
        capture_output=True,
        text=True,
        timeout=420,
        env={**os.environ, "HOME": str(server.home)},
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-5000:]
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    result["code_server_log"] = server.log.read_text(errors="replace")[-4000:]
    result["fxls_log"] = server.fxls_log()
    _write_json(shots / "result.json", result)
    assert result["error"] is None, f"{result['error']}\n{result.get('output', '')}"
    # the docs site shows these screenshots (docs/mkdocs/hooks.py): each one a page asks for
    # from this run must have been taken
    for wanted in _docs_screenshots(name):
        assert (shots / wanted).is_file(), f"docs ask for {name}/{wanted}, not taken"
    return result


def _docs_screenshots(run: str) -> list[str]:
    """The screenshots of ``run`` that docs pages show (``<!-- screenshot: run/x.png ... -->``)."""
    marker = re.compile(rf'^<!-- screenshot: {re.escape(run)}/([\w-]+\.png) "', re.MULTILINE)
    return [n for page in (ROOT / "docs").rglob("*.md") for n in marker.findall(page.read_text())]


BROKEN_STEP: dict[str, Any] = {
    "name": "broken",
    "file": "broken.py",
    "expectText": "y = self.proj(x)",
    "waitSquiggle": "error",
    "squiggleHover": ["fxls", "FX201"],
    "timeoutMs": 90000,
}


def test_diagnostics_and_hover_in_vscode(
    toolchain: Toolchain, start_code_server: StartCodeServer, tmp_path: Path
) -> None:
    """With only torch in the interpreter (fxls from the .vsix): a shape error shows as an error
    squiggle; hovering `conv1` shows the call and its shape; the graph opens from the code lens
    and clicking a node reveals its line. "Trace Class at Cursor" (command palette and context
    menu) reports the class at the cursor, capturing an edit at once although the debounce is a
    minute, and its "Show Graph" button draws the new graph."""
    python = toolchain.torch_python
    server = start_code_server(True, python=python, settings={"fxls.debounceMs": 60_000})
    result = _drive(
        toolchain,
        server,
        tmp_path,
        "trusted",
        [
            BROKEN_STEP,
            {
                "name": "model",
                "file": "model.py",
                "expectText": "self.conv1(x)",
                "hover": {
                    "line": "x = F.relu(self.conv1(x))",
                    "word": "conv1",
                    "expect": ["conv1 · Conv2d", "→ [B, 64, 32, 32]"],
                },
                "timeoutMs": 60000,
            },
            {
                "name": "class",
                "file": "model.py",
                "expectText": "class SmallCNN",
                "hover": {
                    "line": "class SmallCNN(nn.Module):",
                    "word": "SmallCNN",
                    "expect": ["isolation"],
                },
                "graph": {"click": "conv1", "expectLine": 15, "timeoutMs": 60000},
                "timeoutMs": 60000,
            },
            {
                "name": "trace",
                "file": "model.py",
                "expectText": "class SmallCNN",
                "traces": [
                    {
                        "name": "trace-outside",
                        "via": "command palette",
                        "line": "import torch.nn.functional as F",
                        "word": "functional",
                        "expect": ["not in an nn.Module class"],
                    },
                    {
                        "name": "trace",
                        "via": "context menu",
                        "edit": {
                            "line": "def __init__(self, num_classes: int = 10)",
                            "word": "10",
                            "text": "12",
                            "expectText": "num_classes: int = 12",
                        },
                        "line": "x = self.pool(x).flatten(1)",
                        "word": "pool",
                        "expect": ["SmallCNN: traced (fx)", "→ [B, 12]"],
                        "button": "Show Graph",
                        "graphExpect": "[B, 12]",
                    },
                ],
                "timeoutMs": 60000,
            },
        ],
    )
    broken, model, summary, traced = result["steps"]
    context = json.dumps(result, indent=1)[-6000:]
    # The status bar item is there and says the server runs.
    assert broken["status"]["text"] == "fxls", context
    assert "codicon-check" in model["status"]["icons"], context
    # The shape error (an (B, 8) input to Linear(16, 16)) is an error with an fxls code and the
    # reason. (A data-dependent `if` is only a warning since captures work around it.)
    assert broken["squiggles"]["errors"] >= 1, context
    assert re.search(r"fxls\(?FX201", broken["squiggle_hover"]), context
    assert "shape error" in broken["squiggle_hover"], context
    # The healthy model has no errors, and hovering the call in forward shows its node and shape.
    assert model["squiggles"]["errors"] == 0, context
    hover = model["hover"]
    # the output first, then the module and its constructor
    assert hover.startswith("→ [B, 64, 32, 32] float32"), context
    assert "conv1 · Conv2d(3, 64" in hover, context
    starts = re.findall(r"Starting: (.*)", result["fxls_log"])
    assert starts == [
        f"{python} -m fxls serve (interpreter from setting; fxls bundled; workspace trusted)"
    ], context
    assert f"fxls {__version__} bundled with the extension" in result["fxls_log"], context
    assert "torch 2.13.0" in result["fxls_log"], context
    # The graph: opened from the code lens, nodes drawn, a click on conv1 reveals line 15.
    graph = summary["graph"]
    assert graph["opened_by"] == "code lens", context
    assert graph["title"] == "SmallCNN", context
    assert any("conv1" in n and "[B, 64, 32, 32]" in n for n in graph["nodes"]), context
    assert graph["selection"].startswith("Ln 15,"), context
    # Trace Class at Cursor: outside any class, a clear message; in SmallCNN, after an edit
    # the one-minute debounce holds back, the class as edited, then its graph.
    outside, trace = traced["traces"]
    assert "not in an nn.Module class" in outside["notification"], context
    assert "tracing the class at the cursor" in trace["progress"], context
    assert any("Trace Class at Cursor" in item for item in trace["menu"]), context
    assert "SmallCNN: traced (fx) · 7 nodes" in trace["notification"], context
    assert "[Show Graph] [Details]" in trace["notification"], context
    assert trace["ms"] < 45_000, context  # within the debounce: the command captured at once
    assert any("fc" in n and "[B, 12]" in n for n in trace["graph_nodes"]), context
    assert "Trace of SmallCNN (document version" in result["fxls_log"], context
    assert re.search(r"input x +\[B, 3, 32, 32\] float32 \(declared\)", result["fxls_log"]), context
    # the server never imported the workspace's fxls/, logging.py, json.py ...
    assert list((tmp_path / "markers").iterdir()) == [], context
    # the workspace's seccomp=false (and its interpreter) did not reach the server
    assert "seccomp" in summary["hover"].split("isolation", 1)[1], context


def test_quick_fix_in_vscode(
    toolchain: Toolchain, start_code_server: StartCodeServer, tmp_path: Path
) -> None:
    """Quick Fix (Ctrl+.) on an unused statement lists fxls's fix; picking it makes VS Code
    resolve it (the edit is verified in the sandbox) and apply it to the editor's text."""
    server = start_code_server(True)
    result = _drive(
        toolchain,
        server,
        tmp_path,
        "quick-fix",
        [
            {
                "name": "unused",
                "file": "unused.py",
                "expectText": "wasted = self.fc2(x).relu()",
                "quickFix": {
                    "line": "wasted = self.fc2(x).relu()",
                    "word": "fc2",
                    "title": "Remove unused",
                    "gone": "wasted",
                },
                "timeoutMs": 90000,
            }
        ],
    )
    (step,) = result["steps"]
    context = json.dumps(result, indent=1)[-6000:]
    fix = step["quick_fix"]
    assert any("Remove unused `wasted = self.fc2(x).relu()`" in item for item in fix["items"]), (
        context
    )
    assert fix["applied"] is True, context
    assert "h = self.fc1(x)" in fix["text"] and "return torch.relu(h)" in fix["text"], context
    assert "wasted" not in fix["text"], context


def test_restricted_mode_until_trusted(
    toolchain: Toolchain, start_code_server: StartCodeServer, tmp_path: Path
) -> None:
    """Untrusted folder: no code runs, the status says so; trusting it restarts the analysis."""
    server = start_code_server(False)
    untrusted = {
        "name": "untrusted",
        "file": "broken.py",
        "expectText": "y = self.proj(x)",
        "settleMs": 8000,
        "timeoutMs": 30000,
        "traces": [
            {
                "name": "trace-untrusted",
                "via": "command palette",
                "line": "y = self.proj(x)",
                "word": "proj",
                "expect": ["not trusted", "Manage Workspace Trust"],
            }
        ],
    }
    trusted = {**BROKEN_STEP, "name": "after-trust", "grantTrust": True}
    result = _drive(toolchain, server, tmp_path, "untrusted", [untrusted, trusted])
    before, after = result["steps"]
    context = json.dumps(result, indent=1)[-6000:]
    assert "codicon-shield" in before["status"]["icons"], context
    assert before["squiggles"]["errors"] == 0, context
    assert "not trusted" in before["notifications"], context
    # Trace Class at Cursor says why it traces nothing, with a way to trust the folder
    (trace,) = before["traces"]
    assert "fxls: this workspace is not trusted" in trace["notification"], context
    assert "[Manage Workspace Trust]" in trace["notification"], context
    # One start in restricted mode, then exactly one restart when trust is granted.
    starts = re.findall(r"Starting: .*workspace (.*)\)", result["fxls_log"])
    assert starts == ["NOT trusted: restricted mode", "trusted"], context
    # this interpreter has fxls installed (the same version): that one runs, not the bundled copy
    assert re.findall(r"; fxls (\w+); workspace", result["fxls_log"]) == ["installed"] * 2, context
    assert f"fxls {__version__} installed in the interpreter" in result["fxls_log"], context
    assert after["squiggles"]["errors"] >= 1, context
    assert "codicon-check" in after["status"]["icons"], context


def _venv_without_torch(tmp: Path) -> str:
    """A fresh virtualenv (no pip, no torch): a Python a user has before installing anything."""
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(tmp / "bare-env")], check=True
    )
    return str(tmp / "bare-env" / "bin" / "python")


@pytest.mark.parametrize("case", ["missing", "no-torch"])
def test_interpreter_problems_are_reported(
    toolchain: Toolchain, start_code_server: StartCodeServer, tmp_path: Path, case: str
) -> None:
    """No interpreter at the configured path, or one without torch: an error status item and a
    message that says what to do (for torch, the exact pip command), with its buttons."""
    if case == "missing":
        python = str(tmp_path / "no-such-env" / "bin" / "python")
        expected = [f'"{python}" (the fxls.python setting) was not found', "Open Setting"]
    else:
        python = _venv_without_torch(tmp_path)
        expected = [
            "PyTorch is not installed",
            f"{python} -m pip install torch",
            "Copy Command",
            "Open Setting",
            "Show Log",
        ]
    server = start_code_server(python=python)
    step = {"name": case, "file": "model.py", "expectText": "self.conv1(x)"}
    result = _drive(toolchain, server, tmp_path, case, [{**step, "settleMs": 5000}])
    (observed,) = result["steps"]
    context = json.dumps(result, indent=1)[-6000:]
    assert "codicon-error" in observed["status"]["icons"], context
    for text in expected:
        assert text in observed["notifications"], context
    assert python in result["fxls_log"], context
    assert "Starting:" not in result["fxls_log"], context


NOTEBOOK_CELLS: list[tuple[str, str]] = [
    NOTEBOOK_IMPORTS,
    ("markdown", "# A small network"),
    NOTEBOOK_NET,
    ("code", "!pip install nothing\nmodel = Net()\nout = model(torch.randn(8, 3, 32, 32))"),
]


def test_notebook_hover_in_vscode(
    toolchain: Toolchain, start_code_server: StartCodeServer, tmp_path: Path
) -> None:
    """A real .ipynb in VS Code's notebook editor (no kernel, no Jupyter extension): hovering the
    class in one cell shows the shapes of the call in a later cell, and names that call."""
    server = start_code_server(True, python=toolchain.torch_python)
    write_notebook(server.workspace / "model.ipynb", NOTEBOOK_CELLS)
    result = _drive(
        toolchain,
        server,
        tmp_path,
        "notebook",
        [
            {
                "name": "notebook",
                "file": "model.ipynb",
                "expectText": "class Net(nn.Module):",
                "hover": {
                    "line": "class Net(nn.Module):",
                    "word": "Net",
                    "expect": ["[B, 3, 32, 32]", "cell 4, line 3"],
                },
                "timeoutMs": 90000,
            },
        ],
    )
    (step,) = result["steps"]
    context = json.dumps(result, indent=1)[-6000:]
    assert "output" in step["hover"] and "[B, 10]" in step["hover"], context
    # the magic and the shell line give no error squiggle
    assert step["squiggles"]["errors"] == 0, context


def test_a_released_library_model_file_in_vscode(
    toolchain: Toolchain, start_code_server: StartCodeServer, tmp_path: Path
) -> None:
    """transformers' ``modeling_llama.py`` as installed (pinned in pyproject.toml), with no
    directive, in a workspace that links the package in: the file runs as its module
    (``transformers.models.llama.modeling_llama``), the inlay hint of a call inside ``LlamaMLP``
    shows the shapes of the default configuration (hidden size 4096), a mouse hover on the call
    nested inside it shows its own shapes, and no error squiggle appears."""
    import transformers

    package = Path(transformers.__file__).parent
    text = (package / "models" / "llama" / "modeling_llama.py").read_text().splitlines()
    line = next(i for i, t in enumerate(text, 1) if "down_proj = self.down_proj(" in t)
    server = start_code_server(True, python=sys.executable)
    (server.workspace / "transformers").symlink_to(package)
    result = _drive(
        toolchain,
        server,
        tmp_path,
        "library",
        [
            {
                "name": "llama",
                "file": "modeling_llama.py",
                "expectText": "Licensed under the Apache License",
                # the inlay hint after the call, once the capture is done
                "goToLine": {"line": line, "expectText": "▸ [B, T, 4096]"},
                "hover": {
                    "line": "self.gate_proj(x)",
                    "word": "gate_proj",
                    "expect": ["→ [B, T, 11008]", "gate_proj · Linear(4096, 11008"],
                },
                "timeoutMs": 120000,
            },
        ],
    )
    (step,) = result["steps"]
    context = json.dumps(result, indent=1)[-6000:]
    assert step["squiggles"]["errors"] == 0, context
    # A mouse hover on a call nested in another call's argument shows that call's own node.
    assert step["hover"].startswith("→ [B, T, 11008] float32"), context
    assert "input\tx\t[B, T, 4096] float32" in step["hover"], context
