"""Installed libraries kept imported in the zygote between jobs (``worker.process.preload``).

Through the real WorkerClient and zygote: a job that imports an allowed library reports it,
the zygote imports it while idle, and the next job's child finds it imported (it reports
nothing new) and gives the same result. The rules that keep the zygote's imports to
installed packages the settings name are unit-tested on the module's functions.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from fxls.protocol.codec import to_dict
from fxls.protocol.model import (
    PRELOAD,
    CaptureJob,
    ClassRequest,
    DimSpec,
    InputSpec,
    Isolation,
    JobResult,
)
from fxls.worker.process import preload

pytestmark = pytest.mark.timeout(180)
ASYNC = pytest.mark.asyncio(loop_scope="module")

GELU_MODEL = """
import torch
from torch import nn
from transformers.activations import NewGELUActivation


class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 8)
        self.act = NewGELUActivation()

    def forward(self, x):
        return self.act(self.fc(x))
"""


def _job(source: str, path: str = "/workspace/case.py", sys_path: list[str] | None = None):
    line = source.splitlines().index("class M(nn.Module):") + 1
    request = ClassRequest(
        "M", line, inputs=[InputSpec("x", dims=[DimSpec("B", 2), DimSpec(None, 4)])]
    )
    return CaptureJob(path=path, source=source, classes=[request], sys_path=sys_path or [])


def _modules(result: JobResult) -> Any:
    assert result.kind == "ok", result
    assert result.payload is not None and result.payload.error is None, result.payload
    out = to_dict(result.payload)["modules"]
    for module in out:
        module.pop("timings", None)
    return out


async def _kept(worker: Any, package: str, seconds: float = 60.0) -> None:
    for _ in range(int(seconds * 10)):
        if any("kept imported" in line and package in line for line in worker.logs):
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"the worker did not keep {package} imported: {worker.logs[-10:]}")


@ASYNC
async def test_a_library_a_job_imported_is_imported_once_for_the_next_jobs(
    own_worker: Any,
) -> None:
    job = _job(GELU_MODEL)
    first = await own_worker.run(job)
    assert first.payload is not None
    assert "transformers.activations" in first.payload.imported
    assert all(name.partition(".")[0] == "transformers" for name in first.payload.imported)
    await _kept(own_worker, "transformers")
    second = await own_worker.run(job)
    assert second.payload is not None
    assert second.payload.imported == []  # the child found them imported
    assert _modules(second) == _modules(first)
    output = [n for n in _modules(second)[0]["nodes"] if n["op"] == "output"]
    assert [v["shape"] for v in output[0]["outputs"]] == [["B", 8]]


@ASYNC
async def test_the_imports_are_made_while_the_next_job_runs(own_worker: Any) -> None:
    """``fxls check`` keeps a job running: the worker imports between reading results."""
    first = await own_worker.run(_job(GELU_MODEL))
    assert first.payload is not None and first.payload.imported
    slow = "import time\ntime.sleep(4)\n" + GELU_MODEL.replace("from transformers", "# from")
    slow = slow.replace("NewGELUActivation()", "nn.GELU()")
    running = asyncio.ensure_future(own_worker.run(_job(slow)))
    await _kept(own_worker, "transformers", seconds=30)
    assert not running.done()  # kept while the second job was still running
    second = await running
    assert second.kind == "ok", second


@ASYNC
async def test_packages_the_settings_do_not_name_are_left_to_each_job(
    own_worker: Any,
) -> None:
    job = _job(GELU_MODEL)
    result = await own_worker.run(job, isolation=Isolation(preload=["einops"]))
    assert result.payload is not None and result.payload.imported == []
    await asyncio.sleep(1.0)
    assert not any("kept imported" in line for line in own_worker.logs)


@ASYNC
async def test_a_workspace_copy_of_a_kept_package_is_what_its_job_imports(
    own_worker: Any, tmp_path: Path
) -> None:
    uses = "import torch\nfrom torch import nn\nimport einops\n\n\nclass M(nn.Module):\n"
    uses += "    def forward(self, x):\n        return einops.rearrange(x, 'b c -> c b')\n"
    first = await own_worker.run(_job(uses))
    assert first.payload is not None and "einops" in first.payload.imported
    await _kept(own_worker, "einops")
    workspace = tmp_path / "ws"
    (workspace / "einops").mkdir(parents=True)
    (workspace / "einops" / "__init__.py").write_text("WHERE = 'workspace'\n")
    probe = "import einops\nif getattr(einops, 'WHERE', '') != 'workspace':\n"
    probe += "    raise ImportError('the installed einops')\n\n" + uses.split("import einops\n")[1]
    probe = "import torch\nfrom torch import nn\n" + probe
    result = await own_worker.run(
        _job(probe, str(workspace / "model.py"), sys_path=[str(workspace)])
    )
    assert result.payload is not None
    assert result.payload.error is None, result.payload.error
    again = await own_worker.run(_job(uses))
    assert again.payload is not None and again.payload.imported == []


# -- the rules, on the module's functions --------------------------------------------------


def test_a_report_is_read_as_names_of_allowed_packages_only() -> None:
    # a submodule no test imports (in-process captures of other test files import
    # transformers' real ones into this process: those are imported already)
    probe = "transformers.models.fxls_never_imported"
    names = [probe, "os", "transformers.x; rm", "evil.pkg", 3, "a" * 500]
    assert preload.wanted(names, ["transformers"]) == [probe]
    assert preload.wanted("transformers", ["transformers"]) == []
    assert preload.wanted(["sys"], ["sys"]) == []  # imported already


def test_a_package_outside_site_packages_is_never_imported(tmp_path: Path) -> None:
    (tmp_path / "fxls_preload_probe").mkdir()
    (tmp_path / "fxls_preload_probe" / "__init__.py").write_text("raise SystemExit('ran')\n")
    sys.path.insert(0, str(tmp_path))
    try:
        why = preload.load("fxls_preload_probe")
    finally:
        sys.path.remove(str(tmp_path))
        preload.REFUSED.pop("fxls_preload_probe", None)
    assert why is not None and "not installed in site-packages" in why
    assert "fxls_preload_probe" not in sys.modules


def test_the_folder_the_worker_started_in_is_not_searched(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "fxls_preload_here.py").write_text("raise SystemExit('ran')\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    try:
        why = preload.load("fxls_preload_here")
    finally:
        preload.REFUSED.pop("fxls_preload_here", None)
        preload.LOADED.pop("fxls_preload_here", None)
    assert why is not None and "fxls_preload_here" not in sys.modules


def test_a_kept_package_shadowed_or_changed_is_dropped_before_a_job(tmp_path: Path) -> None:
    installed = tmp_path / "site" / "fxls_kept"
    installed.mkdir(parents=True)
    (installed / "__init__.py").write_text("X = 1\n")
    (installed / "part.py").write_text("Y = 2\n")
    other = tmp_path / "ws" / "fxls_kept"
    other.mkdir(parents=True)
    kept = preload.Package(os.path.realpath(installed))
    for path in (installed / "__init__.py", installed / "part.py"):
        stat = path.stat()
        kept.files[str(path)] = (stat.st_size, stat.st_mtime_ns)
    fake = type(sys)("fxls_kept")
    preload.LOADED["fxls_kept"] = kept
    preload.LOADED["fxls_kept_user"] = preload.Package(str(tmp_path / "site" / "other"))
    try:
        for sys_path, dropped in (
            ([str(tmp_path / "site")], []),  # the same copy
            ([str(tmp_path / "nothing")], []),
            # another copy first on the path: every kept package goes (one may use the other)
            ([str(tmp_path / "ws")], ["fxls_kept", "fxls_kept_user"]),
        ):
            sys.modules["fxls_kept"] = sys.modules["fxls_kept.part"] = fake
            sys.modules["fxls_kept_user"] = fake
            assert preload.drop_unusable(sys_path) == dropped
            for name in ("fxls_kept", "fxls_kept.part", "fxls_kept_user"):
                assert (name in sys.modules) == (not dropped), name
        sys.modules["fxls_kept"] = fake
        (installed / "part.py").write_text("Y = 3  # upgraded\n")
        assert preload.drop_unusable([]) == ["fxls_kept", "fxls_kept_user"]
        assert "fxls_kept" not in sys.modules
    finally:
        preload.LOADED.pop("fxls_kept", None)
        preload.LOADED.pop("fxls_kept_user", None)
        sys.modules.pop("fxls_kept_user", None)
        sys.modules.pop("fxls_kept", None)
        sys.modules.pop("fxls_kept.part", None)


def test_what_a_job_reports_is_what_it_imported_of_allowed_installed_packages() -> None:
    for name in [n for n in sys.modules if n.partition(".")[0] == "einops"]:
        del sys.modules[name]
    newest = preload.newest_module()
    import einops  # noqa: F401 - installed in site-packages (the test environment's)

    names = preload.imported_since(newest, list(PRELOAD), "")
    assert "einops" in names and all(n.partition(".")[0] == "einops" for n in names)
    assert set(names) == {n for n in sys.modules if n.partition(".")[0] == "einops"}
    assert preload.imported_since(newest, ["transformers"], "") == []
    assert preload.imported_since(newest, list(PRELOAD), "einops") == [
        n for n in names if n != "einops"
    ]
    assert preload.imported_since(preload.newest_module(), list(PRELOAD), "") == []
