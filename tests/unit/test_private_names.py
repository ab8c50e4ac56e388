"""No fxls module reads another module's private (``_name``) names.

What one module uses of another is that module's public surface; a leading underscore means
"only this module". ruff sees ``from x import _y`` but not ``x._y`` through a module alias, so
this test parses every module of the package and checks both.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "fxls"


def _module_name(path: Path, root: Path = PACKAGE.parent) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_uses(modules: dict[str, Path]) -> list[str]:
    """``module:line uses other._name`` for every cross-module private read."""
    found = []
    for name, path in sorted(modules.items()):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        aliases: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("fxls"):
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    if full in modules:
                        aliases[alias.asname or alias.name] = full
                    elif _private(alias.name) and node.module != name:
                        found.append(f"{name}:{node.lineno} uses {full}")
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("fxls") and alias.asname:
                        aliases[alias.asname] = alias.name
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in aliases
                and _private(node.attr)
                and aliases[node.value.id] != name
            ):
                found.append(f"{name}:{node.lineno} uses {aliases[node.value.id]}.{node.attr}")
    return found


def _modules(root: Path) -> dict[str, Path]:
    return {_module_name(p): p for p in root.rglob("*.py")}


def test_no_module_reads_another_modules_private_names() -> None:
    assert private_uses(_modules(PACKAGE)) == []


@pytest.mark.parametrize(
    "line",
    [
        "from fxls.a import _hidden",
        "from fxls import a\nx = a._hidden",
        "from fxls import a as alias\nx = alias._hidden()",
    ],
)
def test_the_check_finds_a_private_read(tmp_path: Path, line: str) -> None:
    pkg = tmp_path / "fxls"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("_hidden = 1\n")
    (pkg / "b.py").write_text(line + "\n")
    modules = {_module_name(p, tmp_path): p for p in pkg.rglob("*.py")}
    assert [u.split(" uses ")[1] for u in private_uses(modules)] == ["fxls.a._hidden"]


def public_surface_gaps(modules: dict[str, Path]) -> list[str]:
    """Names other modules use from a module that has ``__all__`` but does not list them."""
    listed: dict[str, set[str]] = {}
    for name, path in modules.items():
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
            ):
                listed[name] = set(ast.literal_eval(node.value))
    gaps = set()
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        aliases: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module in listed and node.module != name:
                for alias in node.names:
                    submodule = f"{node.module}.{alias.name}" in modules
                    if alias.name not in listed[node.module] and not submodule:
                        gaps.add(f"{node.module}.{alias.name} (used by {name})")
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("fxls"):
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    if full in listed:
                        aliases[alias.asname or alias.name] = full
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in aliases
                and node.attr not in listed[aliases[node.value.id]]
                and not node.attr.startswith("__")
            ):
                gaps.add(f"{aliases[node.value.id]}.{node.attr} (used by {name})")
    return sorted(gaps)


def test_what_other_modules_use_is_in_all() -> None:
    assert public_surface_gaps(_modules(PACKAGE)) == []
