"""The server's JSON-RPC stream over real stdio: oversized and malformed messages, invalid
params, requests after ``shutdown``. Raw bytes, so nothing between the test and the server
fixes the framing up. No worker is needed (the sessions say they are not trusted)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(120)


class Session:
    """``python -m fxls serve`` on pipes, read by a thread into a list of messages."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "fxls", "serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd=ROOT,
        )
        self.messages: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()
        self._next = 0

    def _read(self) -> None:
        out = self.proc.stdout
        assert out is not None
        while True:
            length = None
            while True:
                line = out.readline()
                if not line:
                    return
                if line.strip() == b"":
                    break
                name, _, value = line.decode().partition(":")
                if name.lower() == "content-length":
                    length = int(value)
            assert length is not None
            message = json.loads(out.read(length))
            with self._lock:
                self.messages.append(message)

    def raw(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def send(self, message: dict[str, Any]) -> None:
        body = json.dumps({"jsonrpc": "2.0", **message}).encode()
        self.raw(b"Content-Length: %d\r\n\r\n" % len(body) + body)

    def request(self, method: str, params: Any = None) -> int:
        self._next += 1
        self.send({"id": self._next, "method": method, "params": params})
        return self._next

    def wait(self, predicate: Any, timeout: float = 30.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                for message in self.messages:
                    if predicate(message):
                        return message
            if self.proc.poll() is not None:
                raise AssertionError(f"the server exited with {self.proc.returncode}")
            time.sleep(0.02)
        raise AssertionError(f"no such message within {timeout} s: {self.messages[-5:]}")

    def response(self, msg_id: int, timeout: float = 30.0) -> dict[str, Any]:
        return self.wait(lambda m: m.get("id") == msg_id and "method" not in m, timeout)

    def initialize(self) -> None:
        msg_id = self.request(
            "initialize",
            {
                "processId": None,
                "rootUri": None,
                "capabilities": {},
                "initializationOptions": {"trusted": False},
            },
        )
        assert "result" in self.response(msg_id)
        self.send({"method": "initialized", "params": {}})

    def rss_mb(self) -> float:
        status = Path(f"/proc/{self.proc.pid}/status").read_text()
        line = next(x for x in status.splitlines() if x.startswith("VmHWM:"))
        return int(line.split()[1]) / 1024

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


@pytest.fixture
def session() -> Any:
    s = Session()
    try:
        s.initialize()
        yield s
    finally:
        s.close()


def test_a_huge_content_length_is_skipped_and_the_server_goes_on(session: Session) -> None:
    session.raw(b'Content-Length: 1000000000000\r\n\r\n{"jsonrpc": "2.0"}')
    msg_id = session.request("fxls/stats")
    answer = session.response(msg_id)
    assert "result" in answer and answer["result"]["documents"] == []
    warning = session.wait(
        lambda m: m.get("method") == "window/showMessage" and "skipped" in m["params"]["message"]
    )
    assert "1,000,000,000,000 bytes" in warning["params"]["message"]
    if os.path.exists(f"/proc/{session.proc.pid}/status"):
        assert session.rss_mb() < 500
    # a header line without an end and a body over the limit are skipped the same way
    session.raw(b"X-Junk: " + b"a" * 100_000 + b"\r\n\r\n")
    session.raw(b"Content-Length: %d\r\n\r\n" % (70 * 1024 * 1024) + b" " * (70 * 1024 * 1024))
    msg_id = session.request("fxls/stats")
    assert "result" in session.response(msg_id)


def test_malformed_messages_get_json_rpc_errors(session: Session) -> None:
    body = b"{not json"
    session.raw(b"Content-Length: %d\r\n\r\n" % len(body) + body)
    assert session.wait(lambda m: m.get("error", {}).get("code") == -32700)["id"] is None
    session.send({"id": 50, "method": 7})
    assert session.response(50)["error"]["code"] == -32600
    # textDocument/hover without a position
    msg_id = session.request("textDocument/hover", {"textDocument": {"uri": "file:///x.py"}})
    error = session.response(msg_id)["error"]
    assert error["code"] == -32602 and "textDocument/hover" in error["message"]
    msg_id = session.request("textDocument/hover", "not an object")
    assert session.response(msg_id)["error"]["code"] == -32602
    # the server still works
    msg_id = session.request("fxls/stats")
    assert "result" in session.response(msg_id)


def test_requests_after_shutdown_are_invalid_and_exit_ends_with_zero(session: Session) -> None:
    msg_id = session.request("shutdown")
    assert session.response(msg_id)["result"] is None
    msg_id = session.request(
        "textDocument/hover",
        {"textDocument": {"uri": "file:///x.py"}, "position": {"line": 0, "character": 0}},
    )
    assert session.response(msg_id)["error"]["code"] == -32600
    session.send({"method": "exit"})
    assert session.proc.wait(timeout=20) == 0


def test_exit_without_shutdown_ends_with_one() -> None:
    s = Session()
    try:
        s.initialize()
        s.send({"method": "exit"})
        assert s.proc.wait(timeout=20) == 1
    finally:
        s.close()
