"""Start-up of the real zygote: the ready frame and the protocol version both sides speak."""

from __future__ import annotations

from fxls.protocol.model import PROTOCOL_VERSION


async def test_ready_frame_carries_the_protocol_version(worker) -> None:  # type: ignore[no-untyped-def]
    assert worker.ready is not None
    assert worker.ready.protocol == PROTOCOL_VERSION
    assert worker.ready.torch_version.startswith("2.")
