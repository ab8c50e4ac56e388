"""Fixtures for tests that drive the real worker zygote through WorkerClient."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest_asyncio

from fxls.workerclient import WorkerClient


class LoggedClient(WorkerClient):
    """A WorkerClient that keeps every log line (zygote stderr and log frames)."""

    def __init__(self, **kwargs: object) -> None:
        self.logs: list[str] = []
        super().__init__(log=self.logs.append, **kwargs)  # type: ignore[arg-type]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def worker(tmp_path_factory) -> AsyncIterator[LoggedClient]:  # type: ignore[no-untyped-def]
    """One warm zygote shared by the tests of a module (start-up costs seconds)."""
    client = LoggedClient(scratch_dir=str(tmp_path_factory.mktemp("scratch")))
    await client.start()
    yield client
    await client.close()


@pytest_asyncio.fixture(loop_scope="module")
async def own_worker(tmp_path) -> AsyncIterator[LoggedClient]:  # type: ignore[no-untyped-def]
    """A zygote of its own, for tests that kill it."""
    client = LoggedClient(scratch_dir=str(tmp_path / "scratch"))
    await client.start()
    yield client
    await client.close()
