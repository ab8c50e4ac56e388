"""A relative interpreter path (``--python .venv/bin/python``, ``FXLS_PYTHON``, the
``fxls.python`` setting) names the interpreter from where the user is: the directory
``fxls check`` runs in, the server's workspace root. The worker itself starts in a scratch
directory, where such a path named nothing. Through the real CLI and a real LSP client."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from harness import LINEAR_NET, published, server_session
from lsprotocol import types

pytestmark = [pytest.mark.worker]

MODEL = LINEAR_NET


def _project(tmp_path: Path) -> tuple[Path, Path]:
    """A project with ``model.py`` and an interpreter at ``tools/python`` that leaves a marker
    when it runs (then runs the real one); the project and the marker."""
    project = tmp_path / "project"
    (project / "tools").mkdir(parents=True)
    (project / "model.py").write_text(MODEL)
    marker = tmp_path / "ran"
    python = project / "tools" / "python"
    python.write_text(f'#!/bin/sh\ntouch "{marker}"\nexec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    return project, marker


def _check(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k != "FXLS_PYTHON"}
    base.update(XDG_CONFIG_HOME=str(cwd.parent / "xdg"), **env)
    return subprocess.run(
        [sys.executable, "-m", "fxls", "check", "--json", *args],
        cwd=cwd,
        env=base,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _shape(proc: subprocess.CompletedProcess[str]) -> list[object]:
    assert proc.returncode == 0, proc.stderr
    module = json.loads(proc.stdout)["modules"][0]
    return [o["shape"] for o in module["outputs"]]


def test_check_takes_a_relative_python_from_where_it_runs(tmp_path: Path) -> None:
    project, marker = _project(tmp_path)

    assert _shape(_check(project, "--python", "tools/python", "model.py")) == [["B", 4]]
    assert marker.exists()

    marker.unlink()
    inside = project / "tools"
    proc = _check(inside, "../model.py", FXLS_PYTHON="./python")
    assert _shape(proc) == [["B", 4]]
    assert marker.exists()


def test_check_says_which_interpreter_it_could_not_run(tmp_path: Path) -> None:
    project, _ = _project(tmp_path)

    proc = _check(project, "--python", "venv/bin/python", "model.py")

    assert proc.returncode != 0
    assert f"cannot run {project / 'venv' / 'bin' / 'python'}" in proc.stderr


@pytest.mark.asyncio
async def test_the_server_takes_a_relative_python_from_the_workspace_root(
    tmp_path: Path,
) -> None:
    project, marker = _project(tmp_path)
    uri = (project / "model.py").as_uri()
    env = {**os.environ, "FXLS_STORE": "0"}
    async for client in server_session(project, {"debounceMs": 50, "python": "tools/python"}, env):
        client.text_document_did_open(
            types.DidOpenTextDocumentParams(
                text_document=types.TextDocumentItem(
                    uri=uri, language_id="python", version=1, text=MODEL
                )
            )
        )
        await published(client, uri, 1)
        line = MODEL.splitlines().index("        return self.fc(x)")
        hover = await client.text_document_hover_async(
            types.HoverParams(
                text_document=types.TextDocumentIdentifier(uri=uri),
                position=types.Position(line=line, character=20),
            )
        )
        assert hover is not None
        assert "[B, 4]" in str(hover.contents).replace("\\", "")
    assert marker.exists()
