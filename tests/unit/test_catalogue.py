"""The diagnostic catalogue and its call sites cannot drift apart.

Every place in fxls that builds a diagnostic passes the fields its message template and fix
template use; a missing one would show a literal ``{field}`` to the user. Checked statically
over the source (every construction of an ``FXnnn`` class), so it covers code paths that no
test happens to run.
"""

from __future__ import annotations

import ast
import re
import string
from pathlib import Path

import pytest

from fxls.protocol.catalogue import ALL_MESSAGES, Message

PACKAGE = Path(__file__).resolve().parents[2] / "fxls"
CODE = re.compile(r"^FX\d{3}$")
BUILDERS = {"build": {"source", "where", "cls"}}
"""Helpers that take a message class and add fields of their own (failures.explain)."""


def fields(cls: type[Message]) -> set[str]:
    """The fields a call site gives: those of every template (a notebook's ``line`` is the
    span's unless given)."""
    names: set[str] = set()
    notebook = (cls.notebook_template or "", cls.notebook_fix or "")
    for template in (cls.template, cls.fix or "", *notebook):
        for _, field, _, _ in string.Formatter().parse(template):
            if field:
                names.add(field.split(".")[0].split("[")[0])
    return names - ({"line"} if "{line}" not in cls.template + (cls.fix or "") else set())


def _code_of(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name) and CODE.match(node.id):
        return node.id
    if isinstance(node, ast.Attribute) and CODE.match(node.attr):
        return node.attr
    return None


def call_sites() -> list[tuple[str, str, set[str]]]:
    """``(where, code, keywords given)`` for every construction of a message in fxls."""
    sites = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "catalogue.py":
            continue
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            where = f"{path.relative_to(PACKAGE.parent)}:{node.lineno}"
            given = {k.arg for k in node.keywords if k.arg is not None}
            if any(k.arg is None for k in node.keywords):
                given.add("**")
            code = _code_of(node.func)
            if code is not None:
                sites.append((where, code, given))
            elif isinstance(node.func, ast.Name) and node.func.id in BUILDERS and node.args:
                code = _code_of(node.args[0])
                if code is not None:
                    sites.append((where, code, given | BUILDERS[node.func.id]))
    return sites


def test_call_sites_are_found() -> None:
    codes = {code for _, code, _ in call_sites()}
    assert {"FX101", "FX201", "FX401", "FX501"} <= codes


def _id(value: object) -> str:
    """A parameter's id, the same in every process (a set's order depends on the string hash)."""
    return ",".join(sorted(value)) if isinstance(value, set) else str(value)


@pytest.mark.parametrize(("where", "code", "given"), call_sites(), ids=_id)
def test_every_call_site_fills_its_templates(where: str, code: str, given: set[str]) -> None:
    assert code in ALL_MESSAGES, f"{where}: {code} is not in the catalogue"
    assert "**" not in given, f"{where}: {code} built from **kwargs cannot be checked"
    missing = fields(ALL_MESSAGES[code]) - given
    assert not missing, f"{where}: {code} needs {sorted(missing)}"


def test_every_code_is_used_somewhere_or_documented_as_reserved() -> None:
    used = {code for _, code, _ in call_sites()}
    unused = set(ALL_MESSAGES) - used
    assert not unused, f"codes never built by fxls: {sorted(unused)}"


def test_severities_match_the_documentation() -> None:
    import re
    from pathlib import Path

    from fxls.protocol import catalogue

    doc = (Path(__file__).resolve().parents[2] / "docs" / "diagnostics.md").read_text()
    found = re.findall(r"## (FX\d+)\n\n\*\*[^*]+\*\* \((\w+)", doc)
    assert len(found) > 20
    for code, severity in found:
        assert getattr(catalogue, code).severity == severity, code


def test_suggested_directives_parse_when_copied() -> None:
    import re

    from fxls.analysis.directives import parse_directive
    from fxls.protocol import catalogue
    from fxls.protocol.model import Span

    at = Span(1, 0, 1, 1)
    fixes = [
        catalogue.FX405(
            at, arg="x", shape="(B, 3, 32, 32)", reason="r", directive="(B, 3, 32, 32)"
        ),
        catalogue.FX402(at, arg="mask", cls="Net"),
        catalogue.FX402(at, arg="input_ids", cls="Net"),
        catalogue.FX402(at, arg="x", cls="Net"),
    ]
    for message in fixes:
        fix = message.diagnostic().fix or ""
        directive = re.search(r"`# fxls: ([^`]*)`", fix)
        assert directive is not None, fix
        parse_directive(directive.group(1))  # raises on a directive that does not parse
    assert "(B, T, T) bool" in (fixes[1].diagnostic().fix or "")
    assert "(B, T) int64" in (fixes[2].diagnostic().fix or "")
