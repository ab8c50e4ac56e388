"""``[tool.fxls]`` in the nearest ``pyproject.toml``, the user's own ``config.toml``, and the
diagnostic code filter.

Keys: ``select``, ``ignore`` (code prefixes), ``exclude`` (gitignore-style patterns relative to
the ``pyproject.toml``), and the language server's settings under the same names
(``python``, ``limits.timeoutSeconds``, ``isolation.seccomp``, ``capture.symbolic``...; see
docs/configuration.md). The command line wins over the files, the project's file over the
user's. Nothing here raises for a bad file: unknown keys and bad values become warnings and
keep their defaults.

A project file chooses what is checked and reported, never what runs or how it is isolated:
the settings in ``fxls.engine.settings.PROTECTED`` (the worker's interpreter, limits and isolation)
are taken from the user's configuration only (:func:`user_config_path`; the command line and
``FXLS_PYTHON`` are read by the caller). In CI a pull request edits ``pyproject.toml``, and
its ``python`` would otherwise run as the worker, outside the sandbox, with the job's token.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fxls.engine.settings import (
    Settings,
    defaults_flat,
    merge_settings,
    parse_settings,
    split_protected,
)
from fxls.protocol.catalogue import ALL_MESSAGES
from fxls.protocol.files import MAX_SOURCE_BYTES, Refused, read_source

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

CHECK_KEYS = ("select", "ignore", "exclude")
"""Keys of ``[tool.fxls]`` that only ``fxls check`` reads."""
USER_CONFIG = os.path.join("fxls", "config.toml")
"""The user's configuration, relative to ``$XDG_CONFIG_HOME`` (default ``~/.config``)."""

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
    ignored: list[str] = field(default_factory=list)
    """Dotted names of the settings the file sets and may not (``python``, ``limits.*``,
    ``isolation.*``): they were ignored."""
    user_path: str | None = None
    """The user's ``config.toml`` read (None when there is none)."""
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


def _known_names() -> set[str]:
    """Every setting's dotted name as a table writes it (``limits.timeoutSeconds``)."""
    return {name.removeprefix("fxls.") for name in defaults_flat()}


def user_config_path(environ: Mapping[str, str] = os.environ) -> str:
    """``$XDG_CONFIG_HOME/fxls/config.toml``, or ``~/.config/fxls/config.toml`` when the
    variable is unset or not an absolute path (the XDG rule)."""
    base = environ.get("XDG_CONFIG_HOME", "")
    if not os.path.isabs(base):
        base = os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, USER_CONFIG)


def _string_list(value: Any, key: str, warnings: list[str]) -> list[str] | None:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    warnings.append(f"`{key}` must be a list of strings, got {value!r}; ignored")
    return None


@dataclass
class _Table:
    """The fxls keys of one configuration file, and how its warnings name them."""

    where: str
    """The file as warnings name it."""
    prefix: str
    """What warnings put before a key: ``tool.fxls.`` in a ``pyproject.toml``."""
    data: dict[str, Any]
    problems: list[str] = field(default_factory=list)

    def settings_data(self) -> dict[str, Any]:
        """The settings of the table: every key but the check keys."""
        return {k: v for k, v in self.data.items() if k not in CHECK_KEYS}

    def check_keys(self, config: ProjectConfig) -> None:
        """``select``, ``ignore`` and ``exclude`` of the table into ``config``."""
        for key in CHECK_KEYS:
            if key not in self.data:
                continue
            values = _string_list(self.data[key], self.prefix + key, self.problems)
            if values is None:
                continue
            if key == "exclude":
                config.exclude = values
                continue
            codes, bad = parse_codes(values)
            self.problems.extend(f"`{self.prefix}{key}`: {b}; ignored" for b in bad)
            if key == "select":
                config.select = codes
            else:
                config.ignore = codes

    def parse(self, data: dict[str, Any]) -> None:
        """Record the problems of the settings ``data`` (unknown keys, bad values), named as
        this table names them."""
        known = _known_names()
        for name in sorted(_flatten(data)):
            if name not in known:
                self.problems.append(f"unknown key `{self.prefix}{name}`; ignored")
        _settings, problems = parse_settings(data)
        self.problems.extend(p.replace("`fxls.", f"`{self.prefix}") for p in problems)


def _read_table(path: str, where: str, prefix: str, warnings: list[str]) -> _Table | None:
    """The fxls table of a TOML file: ``[tool.fxls]`` when ``prefix`` says so, else the whole
    file; None (and a warning when the file exists but is no good) otherwise."""
    text = read_source(path, cap=MAX_SOURCE_BYTES, follow_links=True)  # regular files only
    document: dict[str, Any] | None = None
    try:
        document = tomllib.loads(text) if isinstance(text, str) else None
    except tomllib.TOMLDecodeError as exc:
        text = Refused("unreadable", str(exc))
    if document is None:
        warnings.append(f"{where}: cannot read it ({text}); no fxls settings used from it")
        return None
    section: Any = document
    if prefix:
        tool = document.get("tool", {})
        section = tool.get("fxls") if isinstance(tool, dict) else None
        if section is None:
            return None
    if not isinstance(section, dict):
        warnings.append(f"{where}: `{prefix.rstrip('.')}` must be a table; ignored")
        return None
    return _Table(where, prefix, section)


def _resolve_python(python: str, folder: str) -> str:
    """``~`` expanded; a relative path with a folder in it is relative to ``folder``."""
    python = os.path.expanduser(python)
    if os.sep in python and not os.path.isabs(python):
        python = os.path.join(folder, python)
    return python


def load_config(
    paths: list[str], pyproject: str | None = None, user_config: str | None = None
) -> ProjectConfig:
    """The configuration for checking ``paths``: the user's ``config.toml`` (``user_config``,
    default :func:`user_config_path`) under ``[tool.fxls]`` of ``pyproject`` (default: the
    nearest one for ``paths``), whose protected settings are ignored (module docstring)."""
    path = pyproject or find_pyproject(paths)
    config = ProjectConfig(path=path)
    user_path = user_config if user_config is not None else user_config_path()
    tables: list[_Table] = []
    user_data: dict[str, Any] = {}
    if os.path.exists(user_path):
        user = _read_table(user_path, _home_relative(user_path), "", config.warnings)
        if user is not None:
            config.user_path = user_path
            user.check_keys(config)
            user_data = user.settings_data()
            user.parse(user_data)
            tables.append(user)
    project_data: dict[str, Any] = {}
    if path is not None:
        project = _read_table(path, os.path.relpath(path), "tool.fxls.", config.warnings)
        if project is not None:
            project.check_keys(config)
            settings_data = project.settings_data()
            project_data, protected = split_protected(settings_data)
            config.ignored = sorted(_flatten(protected))
            project.parse(project_data)
            config.given = set(_flatten(settings_data)) & _known_names()
            tables.append(project)
    config.settings, _problems = parse_settings(merge_settings(user_data, project_data))
    if config.settings.python and config.user_path is not None:
        config.settings.python = _resolve_python(
            config.settings.python, os.path.dirname(config.user_path)
        )
    for table in tables:
        config.warnings.extend(f"{table.where}: {p}" for p in table.problems)
    if config.ignored and path is not None:
        where = os.path.relpath(path)
        config.warnings.append(_ignored_warning(where, config.ignored, user_path))
    return config


def _home_relative(path: str) -> str:
    """``/home/me/.config/fxls/config.toml`` -> ``~/.config/fxls/config.toml``."""
    home = os.path.expanduser("~")
    if home not in ("", "/", "~") and path.startswith(home + os.sep):
        return "~" + path[len(home) :]
    return path


def _ignored_warning(where: str, names: list[str], user_path: str) -> str:
    """What to say once when a project file sets settings it may not, and where they go."""
    listed = ", ".join(f"`{name}`" for name in names)
    return (
        f"{where}: [tool.fxls] may not choose the worker's interpreter, limits or isolation; "
        f"ignored {listed}. Set them on the command line (--python, --timeout), with "
        f"FXLS_PYTHON, or in {_home_relative(user_path)}"
    )
