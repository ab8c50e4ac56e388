"""Fixtures for tests that drive the real worker zygote through WorkerClient."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from fxls.engine.workerclient import WorkerClient

NOBODY = 65534


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


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def nobody_worker(tmp_path_factory) -> AsyncIterator[LoggedClient]:  # type: ignore[no-untyped-def]
    """A zygote running as an unprivileged user (``nobody`` when the tests run as root)."""
    if os.geteuid() != 0:
        client = LoggedClient(scratch_dir=str(tmp_path_factory.mktemp("scratch-user")))
        await client.start()
        yield client
        await client.close()
        return
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("setpriv (util-linux) is needed to run the worker as nobody")
    base = tempfile.mkdtemp(prefix="fxls-nobody-")
    try:
        os.chmod(base, 0o755)
        wrapper = os.path.join(base, "python")
        with open(wrapper, "w") as f:
            f.write(
                f"#!/bin/sh\nexec {setpriv} --reuid={NOBODY} --regid={NOBODY} --clear-groups "
                f'{sys.executable} "$@"\n'
            )
        os.chmod(wrapper, 0o755)
        scratch = os.path.join(base, "scratch")
        os.mkdir(scratch, 0o700)
        os.chown(scratch, NOBODY, NOBODY)
        client = LoggedClient(python=wrapper, scratch_dir=scratch)
        await client.start()
        assert client.pid is not None and os.stat(f"/proc/{client.pid}").st_uid == NOBODY
        yield client
        await client.close()
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def old_kernel_worker(tmp_path_factory) -> AsyncIterator[LoggedClient]:  # type: ignore[no-untyped-def]
    """A zygote that uses Landlock ABI 2 at most (Linux 5.19-6.1, e.g. Debian 12's 6.1): no
    truncate rights (ABI 3), no TCP rules (ABI 4), no signal scoping (ABI 6)."""
    client = LoggedClient(
        env=dict(os.environ, FXLS_LANDLOCK_ABI="2"),
        scratch_dir=str(tmp_path_factory.mktemp("scratch-abi2")),
    )
    await client.start()
    yield client
    await client.close()
