"""The settings contract: VS Code's package.json, fxls.engine.settings and docs/configuration.md agree."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from fxls.engine.settings import defaults_flat, parse_settings

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "vscode-extension" / "package.json"
DOCS = ROOT / "docs" / "configuration.md"

CLIENT_ONLY = {"fxls.server.command", "fxls.trace.server"}
"""Settings only the VS Code client reads (how to start the server, JSON-RPC tracing)."""

JSON_TYPES = {
    bool: {"boolean"},
    int: {"number", "integer"},
    float: {"number"},
    str: {"string"},
    list: {"array"},
}


def _properties() -> dict[str, dict[str, Any]]:
    package = json.loads(PACKAGE.read_text())
    configuration = package["contributes"]["configuration"]
    sections = configuration if isinstance(configuration, list) else [configuration]
    props: dict[str, dict[str, Any]] = {}
    for section in sections:
        for name, spec in section["properties"].items():
            assert name not in props, f"{name} declared twice in package.json"
            props[name] = spec
    return props


def test_server_settings_have_the_same_names() -> None:
    props = _properties()
    server = set(defaults_flat())
    assert set(props) - CLIENT_ONLY == server
    assert not CLIENT_ONLY & server, "a client-only setting is also read by the server"
    assert set(props) >= CLIENT_ONLY, "a client-only setting is missing from package.json"


@pytest.mark.parametrize("name", sorted(defaults_flat()))
def test_defaults_and_types_match(name: str) -> None:
    spec = _properties()[name]
    default = defaults_flat()[name]
    assert spec["default"] == default, (
        f"{name}: package.json {spec['default']!r}, server {default!r}"
    )
    assert isinstance(spec["default"], bool) == isinstance(default, bool), name
    assert spec["type"] in JSON_TYPES[type(default)], f"{name}: type {spec['type']}"


@pytest.mark.parametrize("name", sorted(defaults_flat()))
def test_package_json_default_is_accepted_by_the_server(name: str) -> None:
    """VS Code sends package.json defaults; the server must take them without a warning."""
    wire = name.removeprefix("fxls.")
    _, problems = parse_settings({wire: _properties()[name]["default"]})
    assert problems == []


@pytest.mark.parametrize("name", sorted(defaults_flat()))
def test_minimums_match(name: str) -> None:
    """A minimum in package.json is the bound the server enforces (and vice versa)."""
    spec = _properties()[name]
    if "minimum" not in spec:
        return
    wire = name.removeprefix("fxls.")
    below = spec["minimum"] - 1
    at = spec["minimum"]
    assert parse_settings({wire: at})[1] == [], f"{name}: the server rejects the minimum"
    assert parse_settings({wire: below})[1], f"{name}: the server accepts below the minimum"


@pytest.mark.parametrize("name", sorted(defaults_flat()))
def test_docs_list_every_setting_with_its_default(name: str) -> None:
    doc = DOCS.read_text()
    shown = json.dumps(defaults_flat()[name])
    shown_short = re.sub(r"\.0$", "", shown)  # 10.0 is documented as 10
    row = next((line for line in doc.splitlines() if f"`{name}`" in line), None)
    assert row is not None, f"{name} is missing from docs/configuration.md"
    assert f"`{shown}`" in row or f"`{shown_short}`" in row, f"{name}: default {shown} not in {row}"


def test_docs_mention_no_unknown_server_setting() -> None:
    doc = DOCS.read_text()
    mentioned = set(re.findall(r"`(fxls\.[A-Za-z.]+)`", doc))
    unknown = mentioned - set(defaults_flat()) - CLIENT_ONLY
    assert unknown == set(), f"docs/configuration.md names settings fxls does not have: {unknown}"


def test_integer_settings_are_integers_in_package_json() -> None:
    props = _properties()
    loose = [
        n for n, d in defaults_flat().items() if type(d) is int and props[n]["type"] != "integer"
    ]
    assert loose == []


def _protected_names() -> set[str]:
    from fxls.engine.settings import PROTECTED, SECTION

    return {
        name
        for name in defaults_flat()
        if name.removeprefix(f"{SECTION}.").split(".")[0] in PROTECTED
    }


def test_settings_that_decide_what_runs_are_user_settings_only() -> None:
    """What the server ignores from workspace/configuration (settings.PROTECTED) is exactly
    what VS Code never takes from a workspace: machine scope, and restricted in untrusted
    workspaces. The server command (client only) is the same kind of setting."""
    props = _properties()
    protected = _protected_names() | {"fxls.server.command"}
    assert {"fxls.python", "fxls.limits.timeoutSeconds", "fxls.isolation.seccomp"} <= protected
    for name in protected:
        assert props[name].get("scope") in ("machine", "application"), name
    package = json.loads(PACKAGE.read_text())
    restricted = set(package["capabilities"]["untrustedWorkspaces"]["restrictedConfigurations"])
    assert protected <= restricted, protected - restricted
    unprotected = set(props) - protected
    assert not {props[n].get("scope") for n in unprotected} & {"machine", "application"}


def test_the_extension_restarts_the_server_when_a_protected_setting_changes() -> None:
    """The server reads protected settings once, so a change must restart it."""
    constants = (ROOT / "vscode-extension" / "src" / "common" / "constants.ts").read_text()
    block = constants.split("RESTART_SETTINGS", 1)[1].split(";", 1)[0]
    for prefix in ("fxls.python", "fxls.server.command", "fxls.limits", "fxls.isolation"):
        assert f'"{prefix}"' in block, prefix
