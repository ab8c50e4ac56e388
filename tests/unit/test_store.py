"""The on-disk store of analyses: round trip, keys, validation of what is read, bounds."""

from __future__ import annotations

import json
import os
from pathlib import Path

from fxls.analysis import workspace
from fxls.engine import store as store_module
from fxls.engine.analyze import EngineOptions, FileAnalysis
from fxls.engine.store import ResultStore
from fxls.protocol.model import Diagnostic, Limits, ModuleResult, Span, Value

TEXT = (
    "from torch import nn\n\nclass Net(nn.Module):\n    def forward(self, x):\n        return x\n"
)


def _analysis(path: str) -> FileAnalysis:
    module = ModuleResult(
        name="Net", line=3, status="traced", outputs=[Value(kind="tensor", shape=["B", 4])]
    )
    diag = Diagnostic("FX405", "information", "input `x` assumed", Span(4, 16, 4, 17))
    return FileAnalysis(path=path, version=3, modules=[module], diagnostics=[diag])


def test_an_analysis_comes_back_marked_stored(tmp_path: Path) -> None:
    store = ResultStore(str(tmp_path / "store"))
    path = str(tmp_path / "net.py")
    key = store.key(path, TEXT, EngineOptions(), "/usr/bin/python3", None)
    store.save(key, _analysis(path))
    back = store.load(key, path, TEXT)
    assert back is not None and back.stored
    assert back.modules[0].outputs[0].shape == ["B", 4]
    assert [d.code for d in back.diagnostics] == ["FX405"]
    assert [c.name for c in back.classes] == ["Net"]  # the AST view of the same text
    folder = tmp_path / "store"
    assert oct(folder.stat().st_mode & 0o777) == "0o700"
    (entry,) = folder.iterdir()
    assert oct(entry.stat().st_mode & 0o777) == "0o600"
    assert entry.name == key + ".json"  # no user text in file names


def test_the_key_changes_with_what_the_analysis_depends_on(tmp_path: Path) -> None:
    store = ResultStore(str(tmp_path))
    path = str(tmp_path / "net.py")
    base = store.key(path, TEXT, EngineOptions(), "python3", None)
    assert base == store.key(path, TEXT, EngineOptions(), "python3", None)
    others = {
        store.key(path, TEXT + "\n", EngineOptions(), "python3", None),
        store.key(path, TEXT, EngineOptions(limits=Limits(cpu_s=3)), "python3", None),
        store.key(path, TEXT, EngineOptions(), "/other/python", None),
        store.key(str(tmp_path / "other.py"), TEXT, EngineOptions(), "python3", None),
    }
    (tmp_path / "helper.py").write_text("X = 1\n")  # a module of the workspace changed
    workspace._LISTINGS.clear()  # listings are kept 30 s: a new session lists again
    others.add(store.key(path, TEXT, EngineOptions(), "python3", str(tmp_path)))
    assert base not in others and len(others) == 5


def test_what_does_not_decode_is_no_analysis(tmp_path: Path) -> None:
    store = ResultStore(str(tmp_path))
    path = str(tmp_path / "net.py")
    now = store_module.FORMAT
    copied = {
        "name": "Net", "line": 3, "status": "traced",
        "nodes": [{"name": "x", "op": "placeholder", "target": "x"}],
        "node_copies": [{"at": 1, "of": 0, "name": "y", "target": "y", "module_path": None,
                         "users": 0}],
    }  # fmt: skip
    bad = {
        "a": b"{not json",
        "b": json.dumps({"format": now, "modules": [{"name": 3}], "diagnostics": []}).encode(),
        "c": json.dumps({"format": 99, "modules": [], "diagnostics": []}).encode(),
        "d": json.dumps({"format": now, "modules": "x", "diagnostics": []}).encode(),
        "e": json.dumps([1, 2]).encode(),
        # the store saves whole records: copies are not something it wrote
        "f": json.dumps({"format": now, "modules": [copied], "diagnostics": []}).encode(),
    }
    for key, raw in bad.items():
        (tmp_path / f"{key}.json").write_bytes(raw)
        assert store.load(key, path, TEXT) is None, key
    os.symlink(tmp_path / "a.json", tmp_path / "link.json")
    assert store.load("link", path, TEXT) is None  # never through a link
    assert store.load("missing", path, TEXT) is None


def test_the_store_is_bounded(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    store = ResultStore(str(tmp_path))
    path = str(tmp_path / "net.py")
    monkeypatch.setattr(store_module, "MAX_ENTRY_BYTES", 200)
    store.save("big", _analysis(path))
    assert not (tmp_path / "big.json").exists()  # over the entry bound: not stored
    monkeypatch.setattr(store_module, "MAX_ENTRY_BYTES", 1 << 20)
    size = None
    for i in range(6):
        store.save(f"k{i}", _analysis(path))
        os.utime(tmp_path / f"k{i}.json", (1000 + i, 1000 + i))
        size = (tmp_path / f"k{i}.json").stat().st_size
    assert size is not None
    monkeypatch.setattr(store_module, "MAX_TOTAL_BYTES", 3 * size + size // 2)  # room for 3
    store.save("k6", _analysis(path))
    left = sorted(p.stem for p in tmp_path.glob("*.json"))
    assert left == ["k4", "k5", "k6"]  # the least recently used went first


def test_a_stored_or_cancelled_analysis_is_not_stored_again(tmp_path: Path) -> None:
    store = ResultStore(str(tmp_path))
    stored = _analysis("m.py")
    stored.provenance = "stored"
    store.save("a", stored)
    cancelled = _analysis("m.py")
    cancelled.outcome = "cancelled"
    store.save("b", cancelled)
    assert list(tmp_path.iterdir()) == []
