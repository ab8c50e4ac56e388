"""The real server and CLI against a workspace whose files are not files: a rules file linked
to ``/dev/zero``, a ``.py`` linked to the reader's own standard input, and a FIFO.

Before fxls read only regular files, the server read ``/dev/zero`` on its event loop until
memory ran out, its workspace scan would block for ever on the FIFO (and every capture with it)
and read its own JSON-RPC input through the link; ``fxls check`` hung on the FIFO.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import shutil
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import pytest_lsp
from harness import start_recording
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient

from fxls.engine import fixes
from fxls.engine.analyze import AnalysisRequest, Budget, EngineOptions, analyze, read_rules
from fxls.protocol.model import Limits, RulesFile

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch")
SERVER = ClientServerConfig(server_command=[sys.executable, "-m", "fxls", "serve"])
MODEL = """\
import torch.nn as nn


# fxls: x = (B, 10)
class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(10, 5)

    def forward(self, x):
        return self.fc(x)
"""


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with a model, ``fxls_rules.py -> /dev/zero``, ``x.py -> /proc/self/fd/0``,
    a FIFO ``y.py``, ``.gitignore -> /dev/zero`` and a FIFO ``sub/.gitignore``."""
    root = tmp_path_factory.mktemp("hostile")
    (root / "pyproject.toml").write_text("[tool.fxls]\n")
    (root / "model.py").write_text(MODEL)
    (root / "fxls_rules.py").symlink_to("/dev/zero")
    (root / "x.py").symlink_to("/proc/self/fd/0")
    os.mkfifo(root / "y.py")
    (root / ".gitignore").symlink_to("/dev/zero")
    (root / "sub").mkdir()
    os.mkfifo(root / "sub" / ".gitignore")
    return root


@pytest_lsp.fixture(config=SERVER, scope="module")
async def client(lsp_client: LanguageClient, workspace: Path):
    await start_recording(lsp_client, workspace, {"debounceMs": 50})
    yield
    await lsp_client.shutdown_session()


def _peak_rss_mb(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    line = next(x for x in status.splitlines() if x.startswith("VmHWM:"))
    return int(line.split()[1]) / 1024


@pytest.mark.asyncio(loop_scope="module")
async def test_96_the_server_reads_no_device_fifo_or_its_own_input(
    client: LanguageClient, workspace: Path
) -> None:
    """The server keeps answering (diagnostics and a hover of another file), its memory stays
    bounded, and it says that the rules file is not a regular file."""
    uri = (workspace / "model.py").as_uri()
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(uri, "python", 1, MODEL)
        )
    )
    deadline = time.monotonic() + 60
    published = None
    while published is None and time.monotonic() < deadline:
        published = next((p for p in client.published if p.uri == uri), None)  # type: ignore[attr-defined]
        await asyncio.sleep(0.05)
    assert published is not None, "no diagnostics for model.py: the server stopped answering"
    hover = await asyncio.wait_for(
        client.text_document_hover_async(
            types.HoverParams(types.TextDocumentIdentifier(uri), types.Position(4, 7))
        ),
        timeout=10,
    )
    assert hover is not None and "Head" in str(hover.contents)
    told = [m.message for m in client.messages if "rules file" in m.message]
    assert len(told) == 1 and "not a regular file" in told[0], told
    server = client._server
    assert server is not None and server.returncode is None
    assert _peak_rss_mb(server.pid) < 1_000


def test_97_fxls_check_finishes_on_devices_fifos_and_links(workspace: Path) -> None:
    """``fxls check`` on the same folder ends at once: each file that is not a regular file
    is named with the reason, the rules file is said to be unused, the model is checked."""
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "fxls", "check", "."],
        cwd=workspace,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert time.monotonic() - started < 60
    errors = done.stderr.splitlines()
    for name in ("x.py", "y.py", "fxls_rules.py"):
        line = next((e for e in errors if f"cannot read {name}" in e), "")
        assert "not a regular file" in line, (name, done.stderr)
    assert any("rules file" in e and "not a regular file" in e for e in errors), done.stderr
    assert "model.py" in done.stdout, done.stdout
    assert done.returncode == 2, (done.returncode, done.stderr)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def worker() -> AsyncIterator[Any]:
    """The real worker (zygote and sandboxed jobs) through fxls.engine.workerclient.WorkerClient."""
    from fxls.engine.workerclient import WorkerClient

    client = WorkerClient()
    await client.start()
    try:
        yield client
    finally:
        await client.close()


RULES = Path(__file__).resolve().parents[1] / "fixtures" / "rules"
LYING_COMPARISONS = """
# user code in the job replaces every comparison the verification could use
torch.allclose = lambda *args, **kwargs: True
torch.equal = lambda *args, **kwargs: True
torch.Tensor.allclose = lambda *args, **kwargs: True
torch.Tensor.equal = lambda *args, **kwargs: True
"""


@pytest.mark.asyncio(loop_scope="module")
async def test_98_a_rules_file_that_replaces_torch_comparisons_verifies_nothing(
    worker: Any, tmp_path: Path
) -> None:
    """The workspace's rules file makes ``torch.allclose`` and ``torch.equal`` always true;
    its rule sigmoid -> hardsigmoid changes the outputs: the fix is not verified safe (the
    server compares the outputs the job sent), while the rule that computes the same (GELU's
    tanh approximation) still is."""
    model = tmp_path / "mlp_before.py"
    shutil.copy(RULES / "mlp_before.py", model)
    rules_path = tmp_path / "fxls_rules.py"
    rules_path.write_text((RULES / "fxls_rules.py").read_text() + LYING_COMPARISONS)
    rules = read_rules(str(rules_path))
    assert isinstance(rules, RulesFile)
    options = EngineOptions(rules=rules)
    text = model.read_text()
    analysis = await analyze(
        worker, AnalysisRequest(str(model), text, root=str(tmp_path)), options=options
    )
    found = {c.params.get("rule"): c for c in fixes.candidates(analysis, text) if c.kind == "rule"}
    assert set(found) == {"gelu_tanh", "hard_gate"}, found
    result = await fixes.compute(
        worker,
        str(model),
        text,
        [found["hard_gate"].request(), found["gelu_tanh"].request()],
        options=options,
        root=str(tmp_path),
    )
    gate, gelu = result.outcomes
    assert gate.applicability == "unsafe", (gate.reason, gate.checks)
    assert "outputs differ" in gate.reason and "outside the sandbox" in gate.reason
    assert gelu.applicability == "safe", gelu.reason
    assert not gate.samples and not gelu.samples  # checked, then dropped


LIMIT_S = 2.0
SLOW_CLASSES = "import time\nimport torch.nn as nn\n\n_slept = set()\n" + "".join(
    f"""

# fxls: x = (2, 3)
class Slow{i}(nn.Module):
    def forward(self, x):
        if "Slow{i}" not in _slept:  # once per job: each capture takes just under the limit
            _slept.add("Slow{i}")
            time.sleep({LIMIT_S * 0.7})
        return x + 1
"""
    for i in range(6)
)


@pytest.mark.asyncio(loop_scope="module")
async def test_99_a_files_captures_share_one_time_budget(worker: Any, tmp_path: Path) -> None:
    """Six classes that each take just under the time limit and succeed: the first job times
    out on the second class, the re-runs succeed one by one until the file has used three
    time limits, then the re-run going on is stopped and the classes left get FX510 saying
    so; the whole analysis ends within the budget."""
    options = EngineOptions(limits=Limits(timeout_s=LIMIT_S, cpu_s=LIMIT_S + 2))
    started = time.monotonic()
    result = await analyze(
        worker, AnalysisRequest(str(tmp_path / "slow.py"), SLOW_CLASSES), options=options
    )
    took = time.monotonic() - started
    codes = {m.name: [d.code for d in m.diagnostics] for m in result.modules}
    assert len(result.modules) == 6, codes
    budget = options.capture_budget * LIMIT_S
    assert took < budget + Budget.GRACE_S + 1.0, (took, codes)
    stopped = [d for m in result.modules for d in m.diagnostics if d.code == "FX510"]
    assert stopped, codes
    assert all("took" in d.message and "time limit" in d.message for d in stopped)
    captured = [m.name for m in result.modules if m.status == "traced"]
    assert captured, codes  # the re-runs before the budget ran out were kept
