"""The worker's speed-up switches (``FXLS_PARENT_SHAPES``, ``FXLS_ZERO_ONE_STATIC``,
``FXLS_ELEMENTWISE_RULES``) change nothing a user sees: every example, corpus and bench file is
analysed by a zygote made with one switch at ``0`` and by the default one, and everything the
editor shows must agree (``editor_view.seen``). Apart from ``test_reuse.py`` so that the two
long comparisons run in different test processes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from editor_view import FILES, LIMITS, ROOT, WITH_ALL, seen

from fxls.engine.analyze import AnalysisRequest, EngineOptions, analyze
from fxls.engine.workerclient import WorkerClient
from fxls.worker.capture.shapes.propagation import (
    ELEMENTWISE_ENV,
    PARENT_SHAPES_ENV,
    ZERO_ONE_ENV,
)


async def _worker_with(switch: str, scratch: Path) -> AsyncIterator[WorkerClient]:
    """A zygote made with the environment variable ``switch`` set to ``0`` (the worker takes
    ``FXLS_*`` when it is made)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(switch, "0")
        client = WorkerClient(scratch_dir=str(scratch))
    await client.start()
    yield client
    await client.close()


SWITCHES = {
    PARENT_SHAPES_ENV: "each class's shapes on its own (no shapes.propagate_within)",
    ZERO_ONE_ENV: "a symbolic run whose named dimensions are all 0 or 1 in a ShapeEnv",
    ELEMENTWISE_ENV: "every elementwise operator dispatched (no shapes.elementwise)",
}
"""The worker's speed-up switches compared here, and what the worker does with one at ``0``."""


@pytest_asyncio.fixture(scope="module", loop_scope="module", params=list(SWITCHES))
async def worker_switched_off(request, tmp_path_factory) -> AsyncIterator[WorkerClient]:  # type: ignore[no-untyped-def]
    """A zygote made with one switch of ``SWITCHES`` at ``0``."""
    scratch = tmp_path_factory.mktemp("switched-off")
    async for client in _worker_with(request.param, scratch):
        yield client


@pytest.mark.slow
@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(ROOT)) for p in FILES])
async def test_results_are_the_same_with_each_speedup_switched_off(
    worker, worker_switched_off, path: Path
) -> None:  # type: ignore[no-untyped-def]
    await _same_as_the_defaults(worker, worker_switched_off, path)


async def _same_as_the_defaults(worker: WorkerClient, other: WorkerClient, path: Path) -> None:
    """What ``other`` shows for ``path`` is what the default worker shows."""
    text = path.read_text()
    options = EngineOptions(limits=LIMITS)
    request = AnalysisRequest(str(path), text)
    off = seen(await analyze(other, request, options=options), text)
    if path not in WITH_ALL:
        WITH_ALL[path] = seen(await analyze(worker, request, options=options), text)
    on = WITH_ALL[path]
    for key in ("modules", "diagnostics", "hints", "lenses", "classes", "outcome"):
        assert on[key] == off[key], key
    differ = [pos for pos in off["hovers"] if on["hovers"].get(pos) != off["hovers"][pos]]
    assert not differ, differ[:5]
