"""fxls.protocol.files.read_source: regular files only, never more than the cap."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from fxls.protocol.files import Refused, read_source


def test_95_read_source_refuses_devices_fifos_links_and_large_files(tmp_path: Path) -> None:
    """A link to /dev/zero, a link to the process's own stdin, a FIFO nobody writes to and a
    file over the cap are refused at once, with the reason; a plain file is read."""
    (tmp_path / "zero.py").symlink_to("/dev/zero")
    (tmp_path / "stdin.py").symlink_to("/proc/self/fd/0")
    os.mkfifo(tmp_path / "fifo.py")
    (tmp_path / "big.py").write_bytes(b"x = 1\n" * 1000)
    (tmp_path / "ok.py").write_bytes(b"x = 1\r\ny = 2\n")
    (tmp_path / "link.py").symlink_to(tmp_path / "ok.py")
    started = time.monotonic()
    results = {
        (name, follow): read_source(str(tmp_path / name), cap=100, follow_links=follow)
        for name, follow in [
            ("zero.py", True),
            ("zero.py", False),
            ("stdin.py", True),
            ("fifo.py", False),
            ("fifo.py", True),
            ("big.py", False),
            ("link.py", False),
            ("missing.py", False),
        ]
    }
    assert time.monotonic() - started < 2  # nothing blocked, nothing read without bound
    assert all(isinstance(r, Refused) for r in results.values()), results
    assert "character device" in str(results["zero.py", True])
    assert "symbolic link" in str(results["zero.py", False])
    assert "symbolic link" in str(results["link.py", False])
    assert "FIFO" in str(results["fifo.py", True])
    assert "too large" in str(results["big.py", False])
    assert read_source(str(tmp_path / "ok.py"), cap=100) == "x = 1\ny = 2\n"
    assert read_source(str(tmp_path / "link.py"), cap=100, follow_links=True) == "x = 1\ny = 2\n"


def test_95_read_source_stops_at_the_cap_when_the_size_lies() -> None:
    """A regular file whose size says 0 (``/proc/self/maps``) is read up to cap + 1 bytes
    only, and refused as too large: the cap holds even when the size check cannot."""
    assert os.stat("/proc/self/maps").st_size == 0
    capped = read_source("/proc/self/maps", cap=16)
    assert isinstance(capped, Refused) and capped.kind == "too_large"
    whole = read_source("/proc/self/maps", cap=1 << 20)
    assert isinstance(whole, str) and len(whole) > 16


@pytest.mark.parametrize("errors", ["strict", "replace"])
def test_95_read_source_decodes_like_open(tmp_path: Path, errors: str) -> None:
    path = tmp_path / "latin.py"
    path.write_bytes(b"s = '\xe9'\n")
    got = read_source(str(path), cap=100, errors=errors)
    if errors == "strict":
        assert isinstance(got, Refused) and got.kind == "encoding"
    else:
        assert got == "s = '\ufffd'\n"
