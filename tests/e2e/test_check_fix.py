"""``fxls check --fix / --diff / --unsafe-fixes`` on the bundled examples and the corpus.

The test checks what the fixes did on its own, without fxls's verification: every class of
every file computes the same before and after (built from the same seed, state_dict copied,
BatchNorm statistics randomized, eval, two input sizes), and a second run finds nothing left
to fix.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from fxls.analysis import parse

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "docs" / "examples"
CORPUS = ROOT / "tests" / "corpus"
REWRITES = ROOT / "tests" / "fixtures" / "rewrites"

pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch"),
    pytest.mark.slow,
]


def _fxls(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fxls", "check", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
    )


def _model_files() -> list[Path]:
    files = sorted(EXAMPLES.glob("*.py"))
    files += [p for p in sorted(CORPUS.glob("*.py")) if p.name != "manifest.py"]
    return files


def _load(path: Path, text: str, name: str) -> dict[str, Any]:
    module = types.ModuleType(name)
    module.__file__ = str(path)
    sys.modules[name] = module
    try:
        exec(compile(text, str(path), "exec"), module.__dict__)
    finally:
        sys.modules.pop(name, None)
    return module.__dict__


def _inputs(info: Any, namespace: dict[str, Any], batch: int, module: Any) -> list[Any] | None:
    import torch

    forward = info.effective_forward
    if forward is None:
        return None
    by_name = {spec.name: spec for spec in info.inputs}
    high = min(
        [m.num_embeddings for m in module.modules() if isinstance(m, torch.nn.Embedding)] or [2]
    )
    out = []
    for param in forward.params:
        spec = by_name.get(param.name)
        if spec is None:
            if param.has_default:
                break
            return None
        if spec.kind == "expr":
            out.append(eval(spec.expr, namespace))
            continue
        sizes = [
            d.size if d.size is not None and d.name != "B" else (batch if d.name == "B" else 4)
            for d in spec.dims
        ]
        dtype = getattr(torch, spec.dtype or "float32")
        if dtype.is_floating_point or dtype.is_complex:
            out.append(torch.randn(sizes, dtype=dtype))
        elif dtype == torch.bool:
            out.append(torch.zeros(sizes, dtype=torch.bool))
        else:
            out.append(torch.randint(0, high, sizes, dtype=dtype))
    return out


def _same(a: Any, b: Any) -> bool:
    import torch
    from torch.utils._pytree import tree_flatten

    fa, sa = tree_flatten(a)
    fb, sb = tree_flatten(b)
    if sa != sb:
        return False
    for x, y in zip(fa, fb):
        if isinstance(x, torch.Tensor):
            if not (isinstance(y, torch.Tensor) and x.shape == y.shape and x.dtype == y.dtype):
                return False
            if x.is_floating_point() and not torch.allclose(x, y, rtol=1e-5, atol=1e-6):
                return False
            if not x.is_floating_point() and not torch.equal(x, y):
                return False
        elif x != y:
            return False
    return True


def _randomize_norms(module: Any) -> None:
    import torch

    gen = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for sub in module.modules():
            if isinstance(sub, torch.nn.modules.batchnorm._NormBase):
                if sub.running_mean is not None:
                    sub.running_mean.copy_(torch.randn(sub.running_mean.shape, generator=gen))
                    sub.running_var.copy_(torch.rand(sub.running_var.shape, generator=gen) + 0.5)
                if sub.weight is not None:
                    sub.weight.copy_(torch.randn(sub.weight.shape, generator=gen))
                    sub.bias.copy_(torch.randn(sub.bias.shape, generator=gen))


def compare_eager(path: Path, before: str, after: str) -> list[str]:
    """Every class that runs before the fix computes the same after it; returns the classes
    compared."""
    import torch

    infos = {c.name: c for c in parse(after).classes}  # directives pinned by the fix count
    old = _load(path, before, "fxls_fix_before")
    new = _load(path, after, "fxls_fix_after")
    compared = []
    for name, info in infos.items():
        if info.directives.skip or name not in old or name not in new:
            continue
        init = info.directives.init or ""
        try:
            torch.manual_seed(0)
            a = eval(f"{name}({init})", old)
        except Exception:
            continue
        torch.manual_seed(0)
        b = eval(f"{name}({init})", new)
        _randomize_norms(a)
        b.load_state_dict(a.state_dict())
        a.eval()
        b.eval()
        ran = 0
        for batch in (2, 3):
            torch.manual_seed(batch)
            args = _inputs(info, old, batch, a)
            if args is None:
                break
            with torch.no_grad():
                try:
                    want = a(*args)
                except Exception:
                    continue
                got = b(*args)
            assert _same(want, got), f"{path.name}: {name} computes something else after --fix"
            ran += 1
        if ran:
            compared.append(name)
    return compared


def test_fix_keeps_every_module_computing_the_same(tmp_path: Path) -> None:
    work = tmp_path / "models"
    work.mkdir()
    originals = {}
    for path in _model_files():
        shutil.copy(path, work / path.name)
        originals[path.name] = path.read_text()

    diff = _fxls(".", "--diff", cwd=work)
    assert diff.returncode == 1, diff.stderr[-3000:]
    assert "+        torch._assert(t <= self.config.block_size" in diff.stdout
    assert "would fix" in diff.stderr
    assert all((work / n).read_text() == t for n, t in originals.items()), "--diff wrote files"

    fixed = _fxls(".", "--fix", cwd=work)
    assert fixed.returncode in (0, 1), fixed.stderr[-3000:]  # broken.py keeps its FX201 error
    assert "fxls: fixed " in fixed.stderr

    changed = {n for n, t in originals.items() if (work / n).read_text() != t}
    assert {"gpt.py", "misc.py"} <= changed, changed
    gpt = (work / "gpt.py").read_text()
    assert 'torch._assert(t <= self.config.block_size, "sequence is too long")' in gpt
    misc = (work / "misc.py").read_text()
    assert "return y.sum(0) / y.size(0)" in misc
    assert "h = x.new_zeros((x.size(0), x.size(2)))" in misc
    compared: list[str] = []
    for name in sorted(changed):
        compared += compare_eager(work / name, originals[name], (work / name).read_text())
    assert {"GPT", "LengthNormalized", "ZeroState", "Attention"} <= set(compared), compared
    # the rotary helper's starred sizes, which torch.fx cannot iterate, become one argument
    # (fxls traces them by the input's rank; plain torch.fx needs this rewrite)
    assert "reshape(xq.shape[:-1] + (-1, 2))" in (work / "llama.py").read_text()

    again = _fxls(".", "--diff", cwd=work)
    assert again.returncode == 0, again.stdout[-3000:]
    assert again.stdout == ""


def test_fix_rewrites_fixtures_to_their_after_twins(tmp_path: Path) -> None:
    names = ["dead_code", "trace_fixits", "sizes_rounds"]  # directives: the test below
    for name in names:
        shutil.copy(REWRITES / f"{name}_before.py", tmp_path / f"{name}.py")
    shutil.copy(REWRITES / "unsafe_before.py", tmp_path / "unsafe.py")
    result = _fxls(".", "--fix", cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    for name in names:
        after = (tmp_path / f"{name}.py").read_text()
        assert after == (REWRITES / f"{name}_after.py").read_text(), name
        compare_eager(tmp_path / f"{name}.py", (REWRITES / f"{name}_before.py").read_text(), after)
    # the in-place statement stays, and the summary says why
    assert (tmp_path / "unsafe.py").read_text() == (REWRITES / "unsafe_before.py").read_text()
    assert (
        "fxls: unsafe.py:21: fix not made: Remove unused `self.fc(h).mul_(2)`: "
        "`mul_` works in place\n" in result.stderr
    ), result.stderr[-3000:]
    assert "; 1 could not be made (listed above)\n" in result.stderr


PINS = [
    "# fxls: init(in_features=64)\n",
    "# fxls: x = (B=2, 64)\n",
    "# fxls: x = (B=2, 4)\n",
    "# fxls: use_inner = False\n",
]
"""The directives of ``directives_after.py`` that pin what fxls assumed (its ``leaf`` pins no
value)."""


def test_fix_pins_what_fxls_assumed_only_with_pin(tmp_path: Path) -> None:
    before = (REWRITES / "directives_before.py").read_text()
    after = (REWRITES / "directives_after.py").read_text()
    assert all(pin in after.splitlines(keepends=True) for pin in PINS)
    unpinned = "".join(line for line in after.splitlines(keepends=True) if line not in PINS)
    assert "# fxls: leaf Inner\n" in unpinned
    target = tmp_path / "directives.py"
    target.write_text(before)

    fixed = _fxls("directives.py", "--fix", cwd=tmp_path)
    assert fixed.returncode == 0, fixed.stderr[-3000:]
    assert target.read_text() == unpinned
    assert "; 5 more fixes would pin values fxls assumed (--pin applies them)" in fixed.stderr

    # Outer's input cannot be pinned (it would turn its hint into FX201): listed at its line
    # in the file as it is after the run, unchanged by --diff, fixed by --fix
    outer = "    def forward(self, x):\n        return self.inner(self.fc(x))\n"
    diff = _fxls("directives.py", "--diff", "--pin", cwd=tmp_path)
    assert diff.returncode == 1, diff.stderr[-3000:]
    assert "+# fxls: init(in_features=64)" in diff.stdout and "+# fxls: leaf" not in diff.stdout
    assert target.read_text() == unpinned
    line = unpinned[: unpinned.index(outer)].count("\n") + 1
    refused = f"fxls: directives.py:{line}: fix not made: Pin the assumed input `x` (B, 4) "
    assert refused in diff.stderr, diff.stderr[-3000:]
    assert "`Outer` now reports FX201" in diff.stderr

    pinned = _fxls("directives.py", "--fix", "--pin", "--json", cwd=tmp_path)
    assert pinned.returncode == 0, pinned.stderr[-3000:]
    assert target.read_text() == after
    (not_made,) = json.loads(pinned.stdout)["fixes_not_made"]
    assert not_made["line"] == after[: after.index(outer)].count("\n") + 1 == line + 4
    assert (not_made["code"], not_made["kind"]) == ("FX405", "directive")
    assert not_made["title"].startswith("Pin the assumed input `x`")
    assert not_made["reason"].startswith("`Outer` now reports FX201")
    compare_eager(target, before, after)


def test_fixes_not_made_are_listed_escaped(tmp_path: Path) -> None:
    """The title quotes the checked code and the reason comes from the worker: both inert."""
    text = (REWRITES / "unsafe_before.py").read_text()
    statement = "self.fc(h).mul_(2)"
    assert statement in text
    hostile = 'self.fc(h).mul_(2 if "\x1b]0;pwned\x07\u202e" else 3)'
    (tmp_path / "hostile.py").write_text(text.replace(statement, hostile))
    shown = 'Remove unused `self.fc(h).mul_(2 if "\\x1b]0;pwned\\x07\\u202e" else…`'

    fixed = _fxls("hostile.py", "--fix", cwd=tmp_path)
    assert fixed.returncode == 0, fixed.stderr[-3000:]
    line = f"fxls: hostile.py:21: fix not made: {shown}: `mul_` works in place\n"
    assert line in fixed.stderr, fixed.stderr[-3000:]
    assert "\x1b" not in fixed.stderr and "\u202e" not in fixed.stderr

    as_json = _fxls("hostile.py", "--fix", "--json", cwd=tmp_path)
    document = json.loads(as_json.stdout)
    assert document["fixes_not_made"] == [
        {
            "line": 21,
            "code": "FX302",
            "kind": "dead-code",
            "title": shown,
            "reason": "`mul_` works in place",
        }
    ]
    assert "fixes_not_made" not in json.loads(_fxls("hostile.py", "--json", cwd=tmp_path).stdout)


def test_unsafe_fixes_need_the_flag(tmp_path: Path) -> None:
    target = tmp_path / "dead.py"
    shutil.copy(REWRITES / "dead_code_before.py", target)
    (tmp_path / "pyproject.toml").write_text("[tool.fxls]\ncodeActions = { maxParams = 0 }\n")
    result = _fxls("dead.py", "--fix", cwd=tmp_path)
    assert "not verified safe (--unsafe-fixes applies them)" in result.stderr, result.stderr
    assert target.read_text() == (REWRITES / "dead_code_before.py").read_text()
    result = _fxls("dead.py", "--unsafe-fixes", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert target.read_text() == (REWRITES / "dead_code_after.py").read_text()


def test_diff_refuses_other_output_formats(tmp_path: Path) -> None:
    shutil.copy(REWRITES / "dead_code_before.py", tmp_path / "dead.py")
    result = _fxls("dead.py", "--diff", "--json", cwd=tmp_path)
    assert result.returncode == 2
    assert "--diff" in result.stderr
