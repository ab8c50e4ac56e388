"""A complexity gate: no new function over ruff's limits (C901: complexity 10; PLR0913: five
arguments), and none of today's offenders gets worse. The offenders are listed with their
numbers in ``complexity_baseline.json``; one that gets simpler must leave the list (it only
shrinks). ``python tests/unit/test_complexity.py --update`` rewrites it after such a change.
"""

from __future__ import annotations

import ast
import functools
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BASELINE = Path(__file__).with_name("complexity_baseline.json")
RUFF = Path(sys.executable).with_name("ruff")
_NUMBER = re.compile(r"\((\d+) > \d+\)")


def _function_at(tree: ast.Module, line: int) -> str:
    """The qualified name of the ``def`` at ``line`` (``Class.method``)."""
    found = "?"

    def visit(node: ast.AST, prefix: str) -> None:
        nonlocal found
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef) and child.lineno == line:
                    found = name
                visit(child, name + ".")

    visit(tree, "")
    return found


@functools.cache
def offenders() -> dict[str, int]:
    """``path:function:code`` -> the number ruff reports over its limit."""
    done = subprocess.run(
        [str(RUFF), "check", "--select", "C901,PLR0913", "--output-format", "json", "fxls"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    found: dict[str, int] = {}
    trees: dict[str, ast.Module] = {}
    for item in json.loads(done.stdout):
        path = Path(item["filename"]).resolve().relative_to(ROOT).as_posix()
        tree = trees.setdefault(path, ast.parse((ROOT / path).read_text(encoding="utf-8")))
        line = item["location"]["row"]
        number = _NUMBER.search(item["message"])
        key = f"{path}:{_function_at(tree, line)}:{item['code']}"
        found[key] = max(found.get(key, 0), int(number.group(1)) if number else 0)
    return found


def test_no_new_offender_and_none_worse() -> None:
    baseline: dict[str, int] = json.loads(BASELINE.read_text())
    now = offenders()
    new = {k: v for k, v in now.items() if k not in baseline}
    worse = {k: (baseline[k], v) for k, v in now.items() if k in baseline and v > baseline[k]}
    assert not new, f"new functions over the limits (simplify or split them): {new}"
    assert not worse, f"functions that got more complex (baseline, now): {worse}"


def test_the_baseline_only_shrinks() -> None:
    baseline: dict[str, int] = json.loads(BASELINE.read_text())
    now = offenders()
    better = {k: (v, now.get(k)) for k, v in baseline.items() if now.get(k, 0) < v}
    assert not better, (
        "simpler than the baseline: run `python tests/unit/test_complexity.py --update` "
        f"to record it: {better}"
    )


def test_offenders_are_named_by_their_function() -> None:
    tree = ast.parse("class A:\n    def f(self):\n        pass\n\ndef g():\n    pass\n")
    assert (_function_at(tree, 2), _function_at(tree, 5), _function_at(tree, 1)) == (
        "A.f",
        "g",
        "?",
    )


if __name__ == "__main__" and "--update" in sys.argv:
    BASELINE.write_text(json.dumps(offenders(), indent=1, sort_keys=True) + "\n")
    print(f"{BASELINE}: {len(offenders())} offenders")
