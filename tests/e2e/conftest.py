"""Shared end-to-end helpers: the repository paths and a runner for ``python -m fxls``."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from lsprotocol import types
from pytest_lsp import LanguageClient, client_capabilities

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "docs" / "examples"
HAS_WORKER_CLIENT = (ROOT / "fxls" / "workerclient.py").exists()

needs_worker = pytest.mark.skipif(
    not HAS_WORKER_CLIENT, reason="fxls/workerclient.py (the worker client) is not available"
)
"""Mark tests that start the real worker."""

RunFxls = Callable[..., subprocess.CompletedProcess[str]]


async def start_recording(client: LanguageClient, root: Path, options: dict[str, Any]) -> None:
    """Initialize ``client`` as VS Code would, on the workspace ``root``: every
    publishDiagnostics is kept in ``client.published`` (with its version, not only the latest
    per URI) and the inlay-hint / code-lens refresh requests are answered."""
    client.published = []  # type: ignore[attr-defined]
    features = client.protocol.fm.features
    original = features[types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS]

    def record(params: types.PublishDiagnosticsParams) -> None:
        client.published.append(params)  # type: ignore[attr-defined]
        original(params)

    features[types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS] = record
    for method in (types.WORKSPACE_INLAY_HINT_REFRESH, types.WORKSPACE_CODE_LENS_REFRESH):
        features[method] = lambda params: None
    await client.initialize_session(
        types.InitializeParams(
            capabilities=client_capabilities("visual-studio-code"),
            root_uri=root.as_uri(),
            initialization_options=options,
        )
    )


@pytest.fixture(scope="session")
def run_fxls() -> RunFxls:
    """``run_fxls("check", "file.py", "--json")`` -> CompletedProcess (text, from the repo root)."""

    def run(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "fxls", *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    return run
