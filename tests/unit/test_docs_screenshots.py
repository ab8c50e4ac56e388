"""The docs site shows the VS Code stage's screenshots when they exist and a note when not
(``docs/mkdocs/hooks.py``); ``mkdocs build --strict`` passes either way. (That the stage
takes every screenshot a page asks for is checked by tests/e2e/test_vscode.py.)"""

from __future__ import annotations

import re
import struct
import zlib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
MKDOCS = ROOT / "docs" / "mkdocs" / "mkdocs.yml"
MARKER = re.compile(r'^<!-- screenshot: ([\w-]+/[\w-]+\.png) "([^"\n]*)" -->$', re.MULTILINE)


def _png(width: int = 4, height: int = 3) -> bytes:
    """A valid RGB PNG (what the stage's screenshots are, only smaller)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    rows = b"".join(b"\x00" + b"\x20\x60\xa0" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def _build(build_docs: Any, site: Path, shots: Path) -> None:
    proc = build_docs(site, {"FXLS_SCREENSHOTS": str(shots)})
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _markers() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for page in (ROOT / "docs").rglob("*.md"):
        for name, _ in MARKER.findall(page.read_text()):
            found.setdefault(page.relative_to(ROOT / "docs").as_posix(), []).append(name)
    return found


def test_screenshots_are_copied_into_the_site_when_they_exist(
    tmp_path: Path, build_docs: Any
) -> None:
    shots = tmp_path / "shots"
    names = sorted({n for names in _markers().values() for n in names})
    assert len(_markers()["editors/vscode.md"]) >= 5
    for name in names:
        (shots / name).parent.mkdir(parents=True, exist_ok=True)
        (shots / name).write_bytes(_png())
    site = tmp_path / "site"
    _build(build_docs, site, shots)
    for name in names:
        copied = site / "assets" / "screenshots" / name.replace("/", "-")
        assert copied.read_bytes() == _png(), name
    page = (site / "editors" / "vscode" / "index.html").read_text()
    assert '<img alt="Hovering conv1 in forward' in page
    assert 'src="../../assets/screenshots/trusted-model.png"' in page
    assert "Screenshot from the VS Code end-to-end test" in page
    assert "Not in this build" not in page
    home = (site / "index.html").read_text()
    assert 'src="assets/screenshots/trusted-model.png"' in home


def test_a_clean_checkout_builds_with_notes_instead(tmp_path: Path, build_docs: Any) -> None:
    site = tmp_path / "site"
    _build(build_docs, site, tmp_path / "no-screenshots")
    page = (site / "editors" / "vscode" / "index.html").read_text()
    assert "<img" not in page
    assert page.count("Not in this build") == len(_markers()["editors/vscode.md"])
    assert not (site / "assets" / "screenshots").exists()
