"""The wire contract: dataclass <-> dict conversion with type checks, and the frame format."""

from __future__ import annotations

import json
import os
import struct
import threading
import typing

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fxls.protocol.codec import ProtocolError, from_dict, to_dict
from fxls.protocol.frames import (
    MAX_FRAME_BYTES,
    FrameReader,
    decode_body,
    encode_frame,
    frame_length,
    write_frame,
)
from fxls.protocol.labels import strategy_label
from fxls.protocol.model import (
    RESULT_KINDS,
    Arg,
    CaptureJob,
    CaptureResult,
    ClassRequest,
    DimSpec,
    ErrorInfo,
    InputSpec,
    InputValue,
    Isolation,
    JobRequest,
    JobResult,
    Limits,
    ModuleResult,
    NodeInfo,
    ReadyInfo,
    ResultKind,
    Span,
    Strategy,
    Value,
)


def _job() -> JobRequest:
    request = ClassRequest(
        "Net",
        3,
        init="hidden=8",
        inputs=[InputSpec("x", dims=[DimSpec("B", 2), DimSpec(None, 4)], dtype="float16")],
        leaf=["Block"],
    )
    capture = CaptureJob(path="/w/model.py", source="x = 1\n", classes=[request], sys_path=["/w"])
    return JobRequest(7, capture, Limits(timeout_s=2.5, memory_mb=512), Isolation(landlock=False))


def _result() -> JobResult:
    node = NodeInfo(
        "linear",
        "call_module",
        "linear",
        span=Span(5, 8, 5, 22),
        args=[Arg("input", "x", node="x")],
        outputs=[Value(shape=["B", 8], dtype="torch.float32")],
    )
    module = ModuleResult(
        "Net", 3, "traced", strategy=Strategy("fx"), nodes=[node], timings={"trace": 0.01}
    )
    payload = CaptureResult(modules=[module], torch_version="2.13.0")
    return JobResult(7, "ok", phase="serialize", isolation=["seccomp"], payload=payload)


def test_job_request_round_trips_through_json() -> None:
    job = _job()
    assert from_dict(JobRequest, json.loads(json.dumps(to_dict(job)))) == job


def test_job_result_round_trips_through_json() -> None:
    result = _result()
    assert from_dict(JobResult, json.loads(json.dumps(to_dict(result)))) == result


def test_a_module_result_is_plain_data() -> None:
    # one record per input, a structured strategy, no methods
    module = ModuleResult(
        "Net", 3, "traced",
        strategy=Strategy("fx", ["leaf", "wrap"]),
        inputs=[InputValue("x", Value(shape=["B", 8]), assumed=True, origin="assumed")],
    )  # fmt: skip
    data = json.loads(json.dumps(to_dict(module)))
    assert data["strategy"] == {"method": "fx", "repairs": ["leaf", "wrap"]}
    assert data["inputs"][0]["name"] == "x" and data["inputs"][0]["origin"] == "assumed"
    assert from_dict(ModuleResult, data) == module
    assert strategy_label(module.strategy) == "fx+leaf+wrap"  # the JSON report's ``capture``
    assert strategy_label(ModuleResult("A", 1, "failed").strategy) == "none"
    with pytest.raises(ProtocolError):
        from_dict(ModuleResult, dict(data, strategy="fx+leaf"))  # the version 2 form
    with pytest.raises(ProtocolError):
        from_dict(ModuleResult, dict(data, strategy={"method": "fx", "repairs": ["inline"]}))
    methods = [m for m, v in vars(ModuleResult).items() if callable(v) and not m.startswith("__")]
    assert methods == [], "the protocol model is data: behaviour goes in functions"


def test_defaults_fill_missing_optional_fields() -> None:
    assert from_dict(Isolation, {}) == Isolation(seccomp=True, landlock=True, netns=False)
    assert from_dict(JobResult, {"id": 1, "kind": "timeout"}).payload is None


def test_result_kinds_match_the_literal() -> None:
    assert typing.get_args(ResultKind) == RESULT_KINDS
    assert "worker_died" in RESULT_KINDS and "sandbox_setup" in RESULT_KINDS


@pytest.mark.parametrize(
    ("cls", "data", "where"),
    [
        (JobResult, {"id": 1, "kind": "exploded"}, "JobResult.kind"),
        (JobResult, {"id": True, "kind": "ok"}, "JobResult.id"),
        (JobResult, {"kind": "ok"}, "missing field 'id'"),
        (Limits, {"timeout_s": "10"}, "Limits.timeout_s"),
        (Value, {"shape": [1, 2.5]}, "Value.shape[1]"),
        (ErrorInfo, {"kind": "exception", "phase": "lunch", "type": "E", "message": ""}, "phase"),
        (
            ReadyInfo,
            {"pid": 1, "python": "p", "torch_version": "t", "isolation_missing": []},
            "isolation_missing",
        ),
        (CaptureResult, [], "expected an object"),
        (
            CaptureResult,
            {"modules": [{"name": "A", "line": 1, "status": "traced"}, {"name": "B", "line": "2"}]},
            "CaptureResult.modules[1].line",
        ),
    ],
)
def test_from_dict_rejects_wrong_types(cls: type, data: object, where: str) -> None:
    with pytest.raises(ProtocolError, match=where.replace("[", r"\[").replace("]", r"\]")):
        from_dict(cls, data)


def test_integer_is_accepted_where_a_float_is_expected() -> None:
    assert from_dict(Limits, {"timeout_s": 3}).timeout_s == 3.0


def test_frame_is_big_endian_length_then_json() -> None:
    frame = encode_frame({"type": "ping", "id": 3})
    (length,) = struct.unpack(">I", frame[:4])
    assert length == len(frame) - 4
    assert decode_body(frame[4:]) == {"type": "ping", "id": 3}


def test_frames_over_a_pipe() -> None:
    r, w = os.pipe()
    try:
        messages = [{"type": "job", "job": _job()}, {"type": "log", "message": "é" * 100_000}]

        def writer() -> None:  # the second frame exceeds the pipe buffer
            for message in messages:
                write_frame(w, message)
            os.close(w)

        thread = threading.Thread(target=writer)
        thread.start()
        bodies = _read_all(r)
        thread.join()
        assert len(bodies) == 2
        first, second = (decode_body(body) for body in bodies)
    finally:
        os.close(r)
    assert first is not None and from_dict(JobRequest, first["job"]) == _job()
    assert second == {"type": "log", "message": "é" * 100_000}


def _read_all(fd: int) -> list[bytes]:
    """Every whole frame body until EOF (asserts nothing is left over)."""
    reader = FrameReader()
    bodies = []
    while chunk := os.read(fd, 1 << 16):
        reader.feed(chunk)
        while (body := reader.next_body()) is not None:
            bodies.append(body)
    assert reader.pending == 0, f"{reader.pending} bytes of an unfinished frame"
    return bodies


def test_truncated_frame_is_left_pending() -> None:
    r, w = os.pipe()
    os.write(w, encode_frame({"type": "pong", "id": 1})[:-2])
    os.close(w)
    try:
        with pytest.raises(AssertionError, match="unfinished frame"):
            _read_all(r)
    finally:
        os.close(r)


def test_oversized_frames_are_refused() -> None:
    with pytest.raises(ProtocolError, match="exceeds"):
        frame_length(struct.pack(">I", MAX_FRAME_BYTES + 1))
    assert frame_length(struct.pack(">I", MAX_FRAME_BYTES)) == MAX_FRAME_BYTES
    with pytest.raises(ProtocolError, match="truncated"):
        frame_length(b"\x00\x01")


@pytest.mark.parametrize(
    "body", [b"\xff\xfe", b"not json", b"[1, 2]", b'{"id": 1}', b'{"type": 5}']
)
def test_bodies_that_are_not_typed_objects_are_refused(body: bytes) -> None:
    with pytest.raises(ProtocolError):
        decode_body(body)


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text() | st.floats(allow_nan=False),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4)
    ),
    max_leaves=20,
)


@given(st.text(min_size=1), st.dictionaries(st.text(), _json, max_size=5))
def test_any_typed_json_object_round_trips(kind: str, fields: dict[str, object]) -> None:
    message = {**fields, "type": kind}
    frame = encode_frame(message)
    assert frame_length(frame[:4]) == len(frame) - 4
    assert decode_body(frame[4:]) == message


def test_frame_reader_splits_and_joins_frames() -> None:
    from fxls.protocol.frames import FrameReader, decode_body, encode_frame

    data = encode_frame({"type": "a", "n": 1}) + encode_frame({"type": "b", "s": "é" * 10})
    reader = FrameReader()
    bodies = []
    for i in range(len(data)):  # one byte at a time: every split point
        reader.feed(data[i : i + 1])
        while (body := reader.next_body()) is not None:
            bodies.append(decode_body(body))
    assert bodies == [{"type": "a", "n": 1}, {"type": "b", "s": "é" * 10}]
    assert reader.pending == 0


def test_frame_reader_refuses_oversized_header_and_keeps_the_head() -> None:
    from fxls.protocol.frames import FrameReader, FrameTooLarge

    reader = FrameReader(limit=100)
    reader.feed((10**6).to_bytes(4, "big") + b'{"type":"result"')
    with pytest.raises(FrameTooLarge) as info:
        reader.next_body()
    assert info.value.length == 10**6
    assert info.value.head == b'{"type":"result"'
