"""Calls of a document's classes found in the other files of a workspace (pure AST)."""

from __future__ import annotations

import os
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest

from fxls.analysis import parse, workspace


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def test_calls_with_literal_or_document_arguments_are_found(tmp_path: Path) -> None:
    model = _write(
        tmp_path / "models" / "rnn.py",
        """
        from torch import nn
        class Cell(nn.Module): ...
        class RNNModel(nn.Module):
            def __init__(self, rnn_type, ntoken, ninp, nlayers, cell=None): ...
        """,
    )
    _write(
        tmp_path / "train.py",
        """
        from models.rnn import RNNModel, Cell
        ntokens = len(corpus.dictionary)
        model = RNNModel("LSTM", ntokens, 200, 2)          # a local name: not usable
        small = RNNModel("GRU", 100, 32, 1, cell=Cell)     # literals and a class of the model file
        again = RNNModel("GRU", 100, 32, 1, cell=Cell)     # the same twice: once
        """,
    )
    _write(tmp_path / ".venv" / "pyvenv.cfg", "")
    _write(tmp_path / ".venv" / "lib" / "x.py", "RNNModel('RNN', 1, 1, 1)\n")
    _write(tmp_path / "node_modules" / "y.py", "RNNModel('RNN', 2, 2, 2)\n")
    defined = parse(model.read_text()).defined
    assert {"Cell", "RNNModel", "nn"} <= defined
    found = workspace.call_sites(str(tmp_path), str(model), ["RNNModel", "Cell"], defined)
    assert [(s.init, Path(s.path).name, s.line) for s in found["RNNModel"]] == [
        ("'GRU', 100, 32, 1, cell=Cell", "train.py", 5)
    ]
    assert "Cell" not in found


def test_the_document_itself_and_broken_files_are_skipped(tmp_path: Path) -> None:
    model = _write(tmp_path / "m.py", "class Net: ...\nNet(3)\n")
    _write(tmp_path / "broken.py", "Net(4\n")
    _write(tmp_path / "other.py", "import m\nm.Net(5)\n")
    found = workspace.call_sites(str(tmp_path), str(model), ["Net"], {"Net"})
    assert [s.init for s in found["Net"]] == ["5"]


def test_no_root_no_evidence(tmp_path: Path) -> None:
    assert workspace.call_sites(None, str(tmp_path / "m.py"), ["Net"], set()) == {}


def test_prescan_reads_the_workspace_once_for_every_later_capture(tmp_path: Path) -> None:
    model = _write(
        tmp_path / "net.py",
        """
        from torch import nn
        class Net(nn.Module):
            def __init__(self, width): ...
        """,
    )
    train = _write(tmp_path / "train.py", "net = Net(64)\n")
    _write(tmp_path / "broken.py", "def (:\n")
    assert workspace.prescan(str(tmp_path)) == 3
    assert workspace.prescan(str(tmp_path / "missing")) == 0
    assert workspace.prescan(None) == 0
    # every file is in the cache now: a capture reads nothing again while they are unchanged
    cached = {p: workspace._FILES[p] for p in map(str, (model, train))}
    sites = workspace.call_sites(str(tmp_path), str(model), ["Net"], set())
    assert [(s.init, Path(s.path).name, s.line) for s in sites["Net"]] == [("64", "train.py", 1)]
    assert all(workspace._FILES[p] is entry for p, entry in cached.items())


def test_a_large_workspace_is_read_by_a_helper_process_with_the_same_findings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the helper runs isolated in a neutral folder: the workspace's own json.py or fxls/
    # (which would shadow what it imports) never run; its findings equal reading in process
    marker = tmp_path / "ran"
    for shadow in ("json.py", "ast.py", "fxls/__init__.py", "fxls/analysis/__init__.py"):
        _write(tmp_path / shadow, f"open({str(marker)!r}, 'w').write('{shadow}')\n")
    for i in range(workspace.HELPER_MIN_FILES):
        _write(tmp_path / f"train_{i}.py", f"net = Net({i}, depth=DEPTH)\nx = Block(width={i})\n")
    _write(tmp_path / "broken.py", "def (:\n")
    workspace._FILES.clear()
    read_here: list[str] = []
    parse_calls = workspace._parse_calls

    def counted(path: str, size: int) -> Any:
        read_here.append(path)
        return parse_calls(path, size)

    monkeypatch.setattr(workspace, "_parse_calls", counted)
    assert workspace.prescan(str(tmp_path)) == workspace.HELPER_MIN_FILES + 5
    assert read_here == [], "the server parsed files itself"
    assert not marker.exists(), marker.read_text()
    helper = dict(workspace._FILES)
    assert str(tmp_path / "train_7.py") in helper
    workspace._FILES.clear()
    for path in workspace._listing(str(tmp_path)):
        workspace._calls_in(path)
    assert helper == workspace._FILES
    sites = workspace.call_sites(str(tmp_path), str(tmp_path / "net.py"), ["Net"], {"DEPTH"})
    assert [s.init for s in sites["Net"]] == ["0, depth=DEPTH", "1, depth=DEPTH", "10, depth=DEPTH"]


def _large_workspace(tmp_path: Path, files: int) -> Path:
    model = _write(
        tmp_path / "net.py",
        """
        from torch import nn
        class Net(nn.Module):
            def __init__(self, width): ...
        """,
    )
    _write(tmp_path / "train.py", "net = Net(64)\n")
    for i in range(files):
        _write(tmp_path / "pkg" / f"mod{i}.py", f"VALUE = {i}\n")
    return model


def test_a_capture_does_not_wait_for_a_scan_of_the_workspace(tmp_path: Path) -> None:
    """While a scan holds the workspace, the first capture goes ahead with what is known and
    says it is incomplete; once the scan is done, the call is found and the answer complete."""
    model = _large_workspace(tmp_path, 10)
    root = str(tmp_path)
    with workspace._SCAN:  # a scan running in another thread
        found, complete = workspace.known_call_sites(root, str(model), ["Net"], set())
    assert (found, complete) == ({}, False)
    workspace.prescan(root)
    found, complete = workspace.known_call_sites(root, str(model), ["Net"], set())
    assert complete and [s.init for s in found["Net"]] == ["64"]


def test_many_unread_files_are_left_to_the_scan(tmp_path: Path) -> None:
    model = _large_workspace(tmp_path, workspace.INLINE_MAX + 10)
    root = str(tmp_path)
    found, complete = workspace.known_call_sites(root, str(model), ["Net"], set())
    assert not complete  # more unread files than a capture reads itself
    reports: list[tuple[int, int]] = []
    assert workspace.prescan(root, lambda done, total: reports.append((done, total))) > 60
    assert reports[-1][0] == reports[-1][1] > workspace.INLINE_MAX
    found, complete = workspace.known_call_sites(root, str(model), ["Net"], set())
    assert complete and [s.init for s in found["Net"]] == ["64"]


def test_two_captures_looking_up_at_once_both_get_the_whole_workspace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lookup of another capture (or of a compile check) is no scan of the workspace: a
    capture that starts during it waits for it and says its evidence is complete. It was
    told "incomplete", skipped its compile check and waited for a refinement that never
    came (the workspace had been read less than ``LISTING_TTL_S`` ago)."""
    model = _large_workspace(tmp_path, 3)
    root = str(tmp_path)
    inside, go = threading.Event(), threading.Event()
    listing = workspace._listing

    def slow_listing(at: str) -> list[str]:
        if threading.current_thread().name == "first":
            inside.set()
            go.wait(10)
        return listing(at)

    monkeypatch.setattr(workspace, "_listing", slow_listing)
    results: list[tuple[object, bool]] = []

    def first() -> None:
        results.append(workspace.known_call_sites(root, str(model), ["Net"], set()))

    thread = threading.Thread(target=first, name="first")
    thread.start()
    assert inside.wait(10)
    threading.Timer(0.2, go.set).start()
    found, complete = workspace.known_call_sites(root, str(model), ["Net"], set())
    thread.join(10)
    assert complete and [s.init for s in found["Net"]] == ["64"]
    assert results and results[0][1]


def test_one_analysis_looks_at_each_workspace_file_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The call sites and the cache key of one analysis share one ``os.stat`` per file; the
    next analysis (a new ``Stats``) sees a file changed since."""
    from fxls.engine.analyze import workspace_digest

    model = _write(tmp_path / "m.py", "class Net: ...\n")
    files = [_write(tmp_path / f"user{i}.py", f"import m\nm.Net({i})\n") for i in range(3)]
    workspace.call_sites(str(tmp_path), str(model), ["Net"], {"Net"})  # read once
    looked: list[str] = []
    real = os.stat

    def counting(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        looked.append(str(path))
        return real(path, *args, **kwargs)

    stats = workspace.Stats()
    monkeypatch.setattr(os, "stat", counting)
    found, complete = workspace.known_call_sites(str(tmp_path), str(model), ["Net"], set(), stats)
    digest = workspace_digest(str(tmp_path), str(model), stats)
    monkeypatch.undo()
    assert complete and sorted(s.init for s in found["Net"]) == ["0", "1", "2"]
    assert sorted(p for p in looked if p.endswith(".py")) == sorted(map(str, [model, *files]))
    assert workspace_digest(str(tmp_path), str(model)) == digest
    files[0].write_text("import m\nm.Net(10)\n")
    assert workspace_digest(str(tmp_path), str(model), workspace.Stats()) != digest
