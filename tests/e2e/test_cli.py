"""``fxls check`` as a user runs it: a subprocess on the example models, with the real worker.

Shapes are compared with eager execution of the same models (real torch, real tensors).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from harness import EXAMPLES, ROOT, RunFxls, needs_worker

import fxls

DOC_KEYS = {"version", "file", "outcome", "torch_version", "modules", "diagnostics"}
MODULE_KEYS = {"class", "line", "status", "capture", "build", "isolation", "params",
               "default_params", "inputs", "outputs", "holds_for", "nodes", "diagnostics",
               "passes", "compile", "notes", "error"}  # fmt: skip
NODE_KEYS = {
    "name",
    "op",
    "target",
    "line",
    "col",
    "end_line",
    "end_col",
    "call_site_line",
    "args",
    "outputs",
    "inputs",
    "module_path",
    "holds_for",
}  # fmt: skip  (the last line: added in fxls 0.1.0, docs/cli.md)
DIAG_KEYS = {
    "code",
    "severity",
    "message",
    "line",
    "col",
    "end_line",
    "end_col",
    "fix",
}  # fmt: skip  (fix: added in fxls 0.1.0)


def _eager(module_name: str, build: str, *inputs: str) -> tuple[int, ...]:
    """Run an example model eagerly and return its output shape."""
    import torch

    sys.path.insert(0, str(EXAMPLES))
    try:
        mod = __import__(module_name)
        torch.manual_seed(0)
        model = eval(build, vars(mod)).eval()
        with torch.no_grad():
            out = model(*(eval(i, {"torch": torch}) for i in inputs))
        return tuple(out.shape)
    finally:
        sys.path.remove(str(EXAMPLES))


def _concrete(shape: list[Any], sizes: dict[str, int]) -> tuple[int, ...]:
    return tuple(sizes[d] if isinstance(d, str) else d for d in shape)


@pytest.fixture(scope="module")
def examples_json(run_fxls: RunFxls) -> dict[str, dict[str, Any]]:
    names = ["cnn.py", "resnet.py", "gpt.py", "broken.py"]
    proc = run_fxls("check", *(f"docs/examples/{n}" for n in names), "--json")
    assert proc.returncode == 1, proc.stderr  # broken.py has errors
    docs = json.loads(proc.stdout)
    assert isinstance(docs, list) and len(docs) == len(names)
    return {Path(d["file"]).name: d for d in docs}


def _module(doc: dict[str, Any], name: str) -> dict[str, Any]:
    return next(m for m in doc["modules"] if m["class"] == name)


@needs_worker
@pytest.mark.slow
def test_json_schema_version_1(examples_json: dict[str, dict[str, Any]]) -> None:
    for doc in examples_json.values():
        assert set(doc) == DOC_KEYS
        assert doc["version"] == 1
        for m in doc["modules"]:
            assert set(m) == MODULE_KEYS
            for i in m["inputs"]:
                assert {"name", "shape", "dtype", "assumed", "origin"} <= set(i)
                assert i["origin"] in ("declared", "parent", "default", "assumed")
                assert i["assumed"] == (i["origin"] == "assumed")
            for n in m["nodes"]:
                assert set(n) == NODE_KEYS
                for a in n["args"]:
                    assert set(a) == {"name", "value", "default"}
                for o in n["outputs"]:
                    assert {"shape", "dtype"} <= set(o)
            for d in m["diagnostics"]:
                assert set(d) == DIAG_KEYS
    cnn = _module(examples_json["cnn.py"], "SmallCNN")
    conv1 = next(n for n in cnn["nodes"] if n["name"] == "conv1")
    line = (EXAMPLES / "cnn.py").read_text().splitlines()[conv1["line"] - 1]
    assert line[conv1["col"] : conv1["end_col"]] == "self.conv1(x)"  # 0-based code points
    assert conv1["args"] == [{"name": "input", "value": "x", "default": False}]
    assert conv1["inputs"] == ["x"] and conv1["module_path"] is None


@needs_worker
@pytest.mark.slow
def test_shapes_match_eager_execution(examples_json: dict[str, dict[str, Any]]) -> None:
    cnn = _module(examples_json["cnn.py"], "SmallCNN")
    assert cnn["status"] == "traced" and examples_json["cnn.py"]["diagnostics"] == []
    assert cnn["inputs"][0]["shape"] == ["B", 3, 32, 32]
    assert _concrete(cnn["outputs"][0]["shape"], {"B": 8}) == _eager(
        "cnn", "SmallCNN()", "torch.randn(8, 3, 32, 32)"
    )

    resnet = _module(examples_json["resnet.py"], "ResNet")
    assert resnet["status"] == "traced" and resnet["params"] == 25_557_032
    conv1 = next(n for n in resnet["nodes"] if n["name"] == "conv1")
    assert conv1["outputs"][0]["shape"] == ["B", 64, 112, 112]
    assert _concrete(resnet["outputs"][0]["shape"], {"B": 2}) == _eager(
        "resnet", "ResNet18()", "torch.randn(2, 3, 224, 224)"
    )

    gpt = _module(examples_json["gpt.py"], "GPT")
    assert gpt["status"] == "traced"
    assert gpt["inputs"][0]["dtype"] == "int64"
    assert _concrete(gpt["outputs"][0]["shape"], {"B": 2, "T": 16}) == _eager(
        "gpt",
        "GPT(GPTConfig(n_layer=2, n_head=4, n_embd=64, block_size=128, vocab_size=1000))",
        "torch.randint(0, 1000, (2, 16))",
    )
    for m in examples_json["gpt.py"]["modules"]:
        assert m["status"] == "traced", m
        assert not [d for d in m["diagnostics"] if d["severity"] == "error"]


@needs_worker
@pytest.mark.slow
def test_broken_example_reports_both_errors(examples_json: dict[str, dict[str, Any]]) -> None:
    doc = examples_json["broken.py"]
    source = (EXAMPLES / "broken.py").read_text().splitlines()
    gate = _module(doc, "DataDependentGate")
    # torch.fx cannot trace `if x.sum() > 0:`; the run on fake tensors takes it one way
    assert gate["status"] == "traced" and gate["capture"] == "fake-run", gate
    (fx101,) = [d for d in gate["diagnostics"] if d["code"] == "FX101"]
    assert "if x.sum() > 0:" in source[fx101["line"] - 1]
    assert "taking `x.sum() > 0` as `False`" in fx101["fix"], fx101
    wrong = _module(doc, "WrongInFeatures")
    (fx201,) = [d for d in wrong["diagnostics"] if d["code"] == "FX201"]
    assert "self.fc(x)" in source[fx201["line"] - 1]
    assert "3072" in fx201["message"] and "4096" in fx201["message"]


@needs_worker
@pytest.mark.slow
def test_a_hanging_class_does_not_hide_the_others(run_fxls: RunFxls, tmp_path: Path) -> None:
    model = tmp_path / "models.py"
    model.write_text(
        textwrap.dedent(
            """\
            from torch import nn

            # fxls: x = (B=2, 4)
            class Hangs(nn.Module):
                def forward(self, x):
                    while True:
                        pass

            # fxls: x = (B=2, 4)
            class Fine(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.fc = nn.Linear(4, 3)

                def forward(self, x):
                    return self.fc(x)
            """
        )
    )
    proc = run_fxls("check", str(model), "--json", "--timeout", "3")
    assert proc.returncode == 0, proc.stderr  # a timeout is a warning, not a model error
    doc = json.loads(proc.stdout)
    hangs, fine = doc["modules"]
    assert hangs["class"] == "Hangs" and hangs["status"] == "failed"
    (limit,) = hangs["diagnostics"]
    # a busy loop is stopped by the CPU limit (--timeout), the same on every run
    assert (limit["code"], limit["line"], limit["col"]) == ("FX506", 4, 6)
    assert limit["severity"] == "warning"
    assert "3 s" in limit["message"]
    assert fine["status"] == "traced"
    assert fine["outputs"][0]["shape"] == ["B", 3]


@needs_worker
def test_a_model_that_hashes_strings_gives_one_result_in_every_run(tmp_path: Path) -> None:
    """The worker hashes strings with one seed (``PYTHONHASHSEED=0`` unless set): a model
    whose sizes follow the order of a set of strings (transformers' ``set(layer_types)``)
    shows the same shapes in every run of ``fxls check``, not one of them at random."""
    model = tmp_path / "hashed.py"
    model.write_text(
        "from torch import nn\n\n"
        "# fxls: x = (B=2, 4)\n"
        "class Hashed(nn.Module):\n"
        "    def forward(self, x):\n"
        "        return x.new_zeros(hash('fxls') % 1000 + 1)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONHASHSEED"}
    seeded = subprocess.run(
        [sys.executable, "-c", "print(hash('fxls') % 1000 + 1)"],
        env={**env, "PYTHONHASHSEED": "0"}, capture_output=True, text=True, check=True,
    )  # fmt: skip
    for _ in range(2):
        proc = subprocess.run(
            [sys.executable, "-m", "fxls", "check", "--json", "--no-compile-check", str(model)],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=240,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stdout + proc.stderr
        (mod,) = json.loads(proc.stdout)["modules"]  # one file: its report
        assert mod["outputs"][0]["shape"] == [int(seeded.stdout)], mod


@needs_worker
@pytest.mark.slow
def test_text_output_with_input_and_init_options(run_fxls: RunFxls, tmp_path: Path) -> None:
    model = tmp_path / "lin.py"
    model.write_text(
        "from torch import nn\n\n"
        "class Lin(nn.Module):\n"
        "    def __init__(self, n):\n"
        "        super().__init__()\n"
        "        self.fc = nn.Linear(n, 2 * n)\n\n"
        "    def forward(self, x):\n"
        "        return self.fc(x)\n"
    )
    proc = run_fxls("check", str(model), "--init", "n=5", "--input", "x=(N=3, 5)")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    header, *rows, compiled, summary = proc.stdout.splitlines()
    assert compiled == "  torch.compile: compiles whole"
    assert header.startswith(f"{model}:3 class Lin  traced (fx) · ")
    assert header.endswith(" · 60 params · x [N=3, 5] → [N, 10]")
    assert summary.startswith("1 file (1 with module classes) · 1 class: 1 traced, 0 partial, ")
    (fc,) = rows
    assert re.fullmatch(r"  9:16  fc  call_module  Linear\(input=x\)  → \[N, 10\] float32", fc)


def test_usage_errors_exit_2_without_output(run_fxls: RunFxls, tmp_path: Path) -> None:
    cases = [
        ("check", "docs/examples/cnn.py", "--class", "Nope"),
        ("check", str(tmp_path / "missing.py")),
        ("check", "docs/examples/cnn.py", "--input", "x=(B,"),
        ("check", "docs/examples/cnn.py", "--input", "nothere=(B, 3)"),
        ("check", "docs/examples/resnet.py", "--init", "n=1"),
        ("check", "docs/examples/cnn.py", "--init", "n="),
        ("check", "docs/examples/cnn.py", "--pin"),  # --pin goes with --fix or --diff
        ("check", "docs/examples/cnn.py", "--json", "--annotate-info"),  # for github only
        ("check",),
    ]
    for args in cases:
        proc = run_fxls(*args)
        assert proc.returncode == 2, (args, proc.stderr)
        assert proc.stdout == ""
        assert proc.stderr


def test_syntax_error_needs_no_worker(run_fxls: RunFxls, tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("from torch import nn\nclass Net(nn.Module:\n    pass\n")
    proc = run_fxls("check", str(bad), "--json")
    assert proc.returncode == 1
    doc = json.loads(proc.stdout)
    assert doc["modules"] == []
    (diag,) = doc["diagnostics"]
    assert (diag["code"], diag["line"]) == ("FX404", 2)
    proc = run_fxls("check", str(bad))
    assert re.match(rf"{re.escape(str(bad))}:2:\d+: error FX404 ", proc.stdout)


def test_version(run_fxls: RunFxls) -> None:
    proc = run_fxls("--version")
    assert proc.returncode == 0
    assert proc.stdout.strip() == f"fxls {fxls.__version__}"
    assert ROOT.exists()


@needs_worker
@pytest.mark.slow
def test_every_call_node_of_the_examples_has_named_arguments(
    examples_json: dict[str, dict[str, Any]],
) -> None:
    calls = 0
    for doc in examples_json.values():
        for m in doc["modules"]:
            for n in m["nodes"]:
                if n["op"].startswith("call_"):
                    calls += 1
                    assert n["args"], (doc["file"], m["class"], n["name"])
                    assert all(a["name"] and not a["name"].startswith("arg") for a in n["args"]), n
    assert calls > 300


@needs_worker
@pytest.mark.slow
def test_text_output_speaks_the_users_code(run_fxls: RunFxls) -> None:
    """Node lines name calls by the module path and pass the expressions the code wrote
    (``add(a=out, b=identity)``, ``.view(self=k, size=(B, T, ...``), never an FX node name
    that is not also a name in the file (``layer1_0_conv1``, ``relu_1``, ``getitem_4``)."""
    files = ["docs/examples/resnet.py", "docs/examples/gpt.py"]
    text = run_fxls("check", *files)
    assert text.returncode == 0, text.stderr
    documents = json.loads(run_fxls("check", *files, "--json").stdout)
    source = " ".join((ROOT / f).read_text() for f in files)
    words = set(re.findall(r"[A-Za-z_]\w*", source))
    nodes = [n for d in documents for m in d["modules"] for n in m["nodes"]]
    callees = {n["target"].rsplit(".", 1)[-1] for n in nodes}  # add, getitem, matmul ...
    fx_names = {n["name"] for n in nodes} - words - callees
    assert {"layer1_0_conv1", "relu_1", "getitem_4"} <= fx_names  # FX's own names exist...
    rows = [line for line in text.stdout.splitlines() if line.startswith("  ")]
    used = {w for row in rows for w in re.findall(r"[A-Za-z_]\w*", row)}
    assert used & fx_names == set()  # ...and the report shows none of them
    assert any(re.search(r"  layer1\.0 +call_function  add\(a=out, b=identity\)", r) for r in rows)
    assert any(
        re.search(r"\s{2}layer1\.0\.conv1 +call_module  +Conv2d\(input=x\)", r) for r in rows
    )
    view = r"\.view\(self=k, size=\(B, T, self\.n_head, C // self…\)"
    assert any(re.search(view, r) for r in rows), rows
