"""``[tool.fxls]`` in the nearest ``pyproject.toml``, and the diagnostic code filter.

Keys: ``select``, ``ignore`` (code prefixes), ``exclude`` (gitignore-style patterns relative to
the ``pyproject.toml``), and the language server's settings under the same names
(``python``, ``limits.timeoutSeconds``, ``isolation.seccomp``, ``capture.symbolic``...; see
docs/configuration.md). The command line wins over the file. Nothing here raises for a bad
file: unknown keys and bad values become warnings and keep their defaults.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field
from typing import Any

from fxls.protocol.catalogue import ALL_MESSAGES
from fxls.settings import Settings, defaults_flat, parse_settings

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

CHECK_KEYS = ("select", "ignore", "exclude")
"""Keys of ``[tool.fxls]`` that only ``fxls check`` reads."""

_CODE_PREFIX = re.compile(r"FX\d{0,3}")


@dataclass
class CodeFilter:
    """``--select``/``--ignore``: code prefixes; the longest matching prefix decides."""

    select: list[str] | None = None
    """None: every code."""
    ignore: list[str] = field(default_factory=list)

    def allows(self, code: str) -> bool:
        best_select = -1 if self.select is not None else 0
        for prefix in self.select or []:
            if code.startswith(prefix):
                best_select = max(best_select, len(prefix))
        best_ignore = -1
        for prefix in self.ignore:
            if code.startswith(prefix):
                best_ignore = max(best_ignore, len(prefix))
        return best_select >= 0 and best_select > best_ignore


def parse_codes(values: list[str]) -> tuple[list[str], list[str]]:
    """``["FX1", "fx201,FX3"]`` -> (valid upper-case prefixes, problems).

    A prefix is valid when it looks like ``FX``, ``FX2``, ``FX20``, ``FX201`` and matches at
    least one diagnostic code fxls has.
    """
    prefixes: list[str] = []
    problems: list[str] = []
    for value in values:
        for raw in str(value).split(","):
            code = raw.strip().upper()
            if not code:
                continue
            if not _CODE_PREFIX.fullmatch(code):
                problems.append(f"`{raw.strip()}` is not a diagnostic code or prefix (FX201, FX2)")
            elif not any(c.startswith(code) for c in ALL_MESSAGES):
                problems.append(f"no diagnostic code starts with `{code}`")
            elif code not in prefixes:
                prefixes.append(code)
    return prefixes, problems


@dataclass
class ProjectConfig:
    path: str | None = None
    """The ``pyproject.toml`` read (None when there is none)."""
    select: list[str] | None = None
    ignore: list[str] = field(default_factory=list)
    exclude: list[str] = field(default_factory=list)
    settings: Settings = field(default_factory=Settings)
    given: set[str] = field(default_factory=set)
    """Dotted setting names the file sets (``limits.timeoutSeconds``)."""
    warnings: list[str] = field(default_factory=list)

    @property
    def root(self) -> str:
        """The folder of the ``pyproject.toml`` (``exclude`` patterns are relative to it)."""
        return os.path.dirname(os.path.abspath(self.path)) if self.path else os.getcwd()


def find_pyproject(paths: list[str]) -> str | None:
    """The nearest ``pyproject.toml`` at or above the folder common to ``paths``."""
    folders = []
    for p in paths or ["."]:
        absolute = os.path.abspath(p)
        if not os.path.isdir(absolute):
            absolute = os.path.dirname(absolute)
        folders.append(absolute)
    try:
        here = os.path.commonpath(folders)
    except ValueError:
        here = os.getcwd()
    while True:
        candidate = os.path.join(here, "pyproject.toml")
        if os.path.isfile(candidate):
            return candidate
        parent = os.path.dirname(here)
        if parent == here:
            return None
        here = parent


def _flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flatten(value, name + "."))
        else:
            out[name] = value
    return out


def _string_list(value: Any, key: str, warnings: list[str]) -> list[str] | None:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    warnings.append(f"`tool.fxls.{key}` must be a list of strings, got {value!r}; ignored")
    return None


def load_config(paths: list[str], pyproject: str | None = None) -> ProjectConfig:
    """``[tool.fxls]`` of ``pyproject`` (default: the nearest one for ``paths``)."""
    path = pyproject or find_pyproject(paths)
    config = ProjectConfig(path=path)
    if path is None:
        return config
    where = os.path.relpath(path)
    try:
        with open(path, "rb") as f:
            document = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        config.warnings.append(f"{where}: cannot read it ({exc}); no [tool.fxls] settings used")
        return config
    section = document.get("tool", {}).get("fxls") if isinstance(document, dict) else None
    if section is None:
        return config
    if not isinstance(section, dict):
        config.warnings.append(f"{where}: `tool.fxls` must be a table; ignored")
        return config
    problems: list[str] = []
    for key in CHECK_KEYS:
        if key not in section:
            continue
        values = _string_list(section[key], key, problems)
        if values is None:
            continue
        if key == "exclude":
            config.exclude = values
            continue
        codes, bad = parse_codes(values)
        problems.extend(f"`tool.fxls.{key}`: {b}; ignored" for b in bad)
        if key == "select":
            config.select = codes
        else:
            config.ignore = codes
    settings_data = {k: v for k, v in section.items() if k not in CHECK_KEYS}
    known = {name.removeprefix("fxls.") for name in defaults_flat()}
    flat = _flatten(settings_data)
    for name in sorted(flat):
        if name not in known:
            problems.append(f"unknown key `tool.fxls.{name}`; ignored")
    config.settings, setting_problems = parse_settings(settings_data)
    problems.extend(p.replace("`fxls.", "`tool.fxls.") for p in setting_problems)
    config.given = {name for name in flat if name in known}
    if config.settings.python:
        python = os.path.expanduser(config.settings.python)
        if os.sep in python and not os.path.isabs(python):
            python = os.path.join(config.root, python)
        config.settings.python = python
    config.warnings.extend(f"{where}: {p}" for p in problems)
    return config
