"""fxls settings: a typed tree of dataclasses, camelCase on the wire.

The client sends the ``fxls`` section (``initializationOptions``, ``workspace/configuration``
with section ``"fxls"``, or ``workspace/didChangeConfiguration``). :func:`parse_settings`
turns it into :class:`Settings`; a value of the wrong type or out of range is reported and
replaced by its default, never raised. The setting names are a public contract, identical in
``docs/configuration.md`` and the VS Code extension's ``package.json``.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import sys
import typing
from dataclasses import dataclass, field
from typing import Any

from fxls.protocol.model import PRELOAD, Isolation, Limits

SECTION = "fxls"

PROTECTED = ("python", "limits", "isolation")
"""Top-level keys of the settings that decide what runs outside the sandbox or how strong the
sandbox is: the worker's interpreter, the resource limits, the isolation layers. The server
takes them from ``initializationOptions`` only (the editor's or the user's own configuration,
which starts the server); in ``workspace/configuration`` and ``didChangeConfiguration``
answers they may come from a repository's settings file, so there they are ignored."""


MAX_NAMES = 64
"""Entries a list setting may hold."""
_PACKAGE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,99}")


def _setting(
    default: Any, doc: str, *, wire: str | None = None, minimum: float | None = None
) -> Any:
    """A settings field: its default, a docstring, the wire name and a lower bound."""
    return field(default=default, metadata={"doc": doc, "wire": wire, "min": minimum})


@dataclass
class LimitsSettings:
    """Resource limits for one capture job."""

    timeout_seconds: float = _setting(
        20.0,
        "Wall-clock time one capture may take (a capture that computed but was slowed by a busy "
        "machine runs once more with twice as long).",
        minimum=0.1,
    )
    cpu_seconds: float = _setting(
        10.0,
        "CPU time one capture may use: the limit that decides for captures that compute.",
        minimum=0.1,
    )
    memory_mb: int = _setting(
        2048, "Memory (MB) a capture may add on top of the worker.", wire="memoryMB", minimum=64
    )
    file_size_mb: int = _setting(
        64, "Largest file (MB) a capture may write.", wire="fileSizeMB", minimum=0
    )

    def to_protocol(self) -> Limits:
        return Limits(
            timeout_s=self.timeout_seconds,
            cpu_s=self.cpu_seconds,
            memory_mb=self.memory_mb,
            file_size_mb=self.file_size_mb,
        )


@dataclass
class IsolationSettings:
    """Sandbox layers around each capture (each is used when the machine supports it)."""

    seccomp: bool = _setting(True, "Block network, process and ptrace system calls.")
    landlock: bool = _setting(True, "Restrict file writes to a scratch directory.")
    preload: tuple[str, ...] = _setting(
        PRELOAD,
        "Installed packages (top-level names) the worker keeps imported between captures once "
        "a capture used them, so the next ones do not import them again: imported outside the "
        "sandbox, from site-packages only. Empty: none.",
    )

    def to_protocol(self) -> Isolation:
        return Isolation(seccomp=self.seccomp, landlock=self.landlock, preload=list(self.preload))


@dataclass
class InlayHintSettings:
    """End-of-line shape hints in ``forward`` and its helpers."""

    enabled: bool = _setting(True, "Show the output shape at the end of each statement.")


@dataclass
class CodeLensSettings:
    """The summary line above each module class."""

    enabled: bool = _setting(True, "Show node count, parameters and shapes above each class.")


@dataclass
class CodeActionSettings:
    """Quick fixes and refactors (code actions)."""

    unsafe: bool = _setting(
        False,
        "Also offer fixes fxls could not verify, or that change what the module computes "
        "(with the reason in the title).",
    )
    max_params: int = _setting(
        20_000_000,
        "Largest module (parameters) a fix is verified on with real tensors; larger ones are "
        "unsafe.",
        wire="maxParams",
        minimum=0,
    )
    rules_file: str = _setting(
        "fxls_rules.py",
        "Workspace file of user rules (`pattern_<name>` / `replacement_<name>` pairs), relative "
        "to the workspace root; executed only in the sandbox of a trusted workspace. Empty: no "
        "rules.",
        wire="rulesFile",
    )


@dataclass
class CaptureSettings:
    """How modules are built and shapes are propagated."""

    meta_init: bool = _setting(True, "Build modules on the meta device (no real memory).")
    symbolic: bool = _setting(True, "Keep named dimensions such as `B` symbolic.")


@dataclass
class CompileCheckSettings:
    """Where ``torch.compile`` (TorchDynamo) breaks the graph of each class (FX6xx)."""

    enabled: bool = _setting(
        True,
        "After the shapes, compile each class's `forward` with TorchDynamo and an eager "
        "backend in the worker, and show its graph breaks (FX6xx warnings) and graph count.",
    )


@dataclass
class Settings:
    """All ``fxls.*`` settings."""

    python: str = _setting(
        "", "Interpreter that runs the worker (needs torch); empty: the server's own."
    )
    debounce_ms: int = _setting(300, "Delay (ms) after typing before a capture starts.", minimum=0)
    store_results: bool = _setting(
        True,
        "Show a file's shapes from the last session at once (kept in the user's cache folder), "
        "marked as stored until the worker's capture replaces them.",
    )
    preliminary_shapes: bool = _setting(
        True,
        "While a new worker imports what captures need, show the shapes of one run on meta "
        "tensors at example sizes, marked as preliminary until the capture replaces them.",
    )
    limits: LimitsSettings = field(default_factory=LimitsSettings)
    isolation: IsolationSettings = field(default_factory=IsolationSettings)
    inlay_hints: InlayHintSettings = field(default_factory=InlayHintSettings)
    code_lens: CodeLensSettings = field(default_factory=CodeLensSettings)
    code_actions: CodeActionSettings = field(default_factory=CodeActionSettings)
    capture: CaptureSettings = field(default_factory=CaptureSettings)
    compile_check: CompileCheckSettings = field(default_factory=CompileCheckSettings)


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


def _wire_name(f: dataclasses.Field[Any]) -> str:
    return f.metadata.get("wire") or _camel(f.name)


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls, vars(sys.modules[cls.__module__]))


def _expand_dotted(data: dict[str, Any]) -> dict[str, Any]:
    """``{"limits.timeoutSeconds": 5}`` -> ``{"limits": {"timeoutSeconds": 5}}``."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        target = out
        *parents, last = str(key).split(".")
        for part in parents:
            nxt = target.get(part)
            if not isinstance(nxt, dict):
                nxt = target[part] = {}
            target = nxt
        if isinstance(value, dict) and isinstance(target.get(last), dict):
            target[last].update(value)
        else:
            target[last] = value
    return out


def _check_value(tp: Any, value: Any, minimum: float | None) -> tuple[bool, Any]:
    if tp is bool:
        return isinstance(value, bool), value
    if tp is int:
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif tp is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        ok = ok and math.isfinite(value)
        value = float(value) if ok else value
    elif tp is str:
        return isinstance(value, str), value
    elif tp == tuple[str, ...]:
        names = value if isinstance(value, list) and len(value) <= MAX_NAMES else None
        ok = names is not None and all(isinstance(n, str) and _PACKAGE.fullmatch(n) for n in names)
        return ok, tuple(value) if ok else value
    else:
        return False, value
    if ok and minimum is not None and value < minimum:
        ok = False
    return ok, value


def _parse(cls: type, data: dict[str, Any], prefix: str, problems: list[str]) -> Any:
    hints = _hints(cls)
    kwargs: dict[str, Any] = {}
    known: set[str] = set()
    for f in dataclasses.fields(cls):
        wire = _wire_name(f)
        known.add(wire)
        if wire not in data or data[wire] is None:
            continue
        value = data[wire]
        name = f"{prefix}.{wire}"
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            if isinstance(value, dict):
                kwargs[f.name] = _parse(tp, value, name, problems)  # type: ignore[arg-type]
            else:
                problems.append(f"`{name}` must be an object, got {value!r}")
            continue
        ok, converted = _check_value(tp, value, f.metadata.get("min"))
        if ok:
            kwargs[f.name] = converted
        else:
            expected = {bool: "true or false", int: "an integer", float: "a number"}
            expected[tuple[str, ...]] = f"a list of at most {MAX_NAMES} package names"
            bound = f.metadata.get("min")
            extra = f" ≥ {bound:g}" if bound is not None and tp in (int, float) else ""
            problems.append(
                f"`{name}` must be {expected.get(tp, 'a string')}{extra}, got {value!r}; "
                f"using the default {f.default!r}"
            )
    return cls(**kwargs)


def parse_settings(data: Any) -> tuple[Settings, list[str]]:
    """The ``fxls`` section (a dict; dotted keys allowed) -> settings and problems found.

    Problems are human-readable; the affected keys keep their defaults. Unknown keys are
    ignored (the same section may carry options of newer or older fxls versions).
    """
    problems: list[str] = []
    if data is None:
        return Settings(), problems
    if not isinstance(data, dict):
        problems.append(f"`{SECTION}` settings must be an object, got {data!r}; using defaults")
        return Settings(), problems
    if isinstance(data.get(SECTION), dict):
        data = data[SECTION]
    return _parse(Settings, _expand_dotted(data), SECTION, problems), problems


def merge_settings(base: dict[str, Any], override: Any) -> Any:
    """``override`` on top of ``base`` (nested objects merged key by key)."""
    if override is None:
        return base
    if not isinstance(override, dict):
        return override
    if isinstance(override.get(SECTION), dict):
        override = override[SECTION]
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge_settings(out[key], value)
        else:
            out[key] = value
    return out


def _walk(cls: type, prefix: str) -> typing.Iterator[tuple[str, dataclasses.Field[Any], Any]]:
    hints = _hints(cls)
    for f in dataclasses.fields(cls):
        name = f"{prefix}.{_wire_name(f)}"
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            yield from _walk(tp, name)  # type: ignore[arg-type]
        else:
            yield name, f, tp


def defaults_flat() -> dict[str, object]:
    """Every setting's dotted wire name (``fxls.limits.timeoutSeconds``) -> its default."""
    return {name: _json(f.default) for name, f, _ in _walk(Settings, SECTION)}


def _json(value: Any) -> Any:
    """A default as the client sends it (a list for a tuple)."""
    return list(value) if isinstance(value, tuple) else value


def describe() -> list[tuple[str, str, object, str]]:
    """(dotted name, type name, default, description) for every setting, for docs."""
    return [
        (name, tp.__name__, f.default, f.metadata.get("doc", ""))
        for name, f, tp in _walk(Settings, SECTION)
    ]


def to_wire(settings: Settings) -> dict[str, Any]:
    """Settings -> the nested camelCase object a client would send."""

    def convert(obj: Any) -> Any:
        return {
            _wire_name(f): convert(getattr(obj, f.name))
            if dataclasses.is_dataclass(getattr(obj, f.name))
            else _json(getattr(obj, f.name))
            for f in dataclasses.fields(obj)
        }

    return typing.cast(dict[str, Any], convert(settings))


def split_protected(data: Any) -> tuple[Any, dict[str, Any]]:
    """A configuration answer -> (the answer without protected keys, the protected part).

    Accepts the same shapes as :func:`parse_settings` (nested, dotted, under ``"fxls"``)."""
    if not isinstance(data, dict):
        return data, {}
    if isinstance(data.get(SECTION), dict):
        data = data[SECTION]
    expanded = _expand_dotted(data)
    kept = {k: v for k, v in expanded.items() if k not in PROTECTED}
    protected = {k: v for k, v in expanded.items() if k in PROTECTED}
    return kept, protected


def protected_differences(protected: dict[str, Any], current: Settings) -> list[str]:
    """Dotted names (``fxls.limits.timeoutSeconds``) of protected values that differ from the
    settings in force (what a user may have meant to change, and was ignored)."""
    wire = to_wire(current)
    out: list[str] = []

    def walk(value: Any, have: Any, name: str) -> None:
        if isinstance(value, dict) and isinstance(have, dict):
            for key, sub in value.items():
                walk(sub, have.get(key), f"{name}.{key}")
        elif value is not None and value != have:
            out.append(name)

    for key, value in protected.items():
        walk(value, wire.get(key), f"{SECTION}.{key}")
    return sorted(out)


def interpreter_path(value: str | None, base: str | None) -> str | None:
    """The interpreter a setting or option names, as the worker is started with it: ``None``
    for none; ``~`` expanded; a relative path (``.venv/bin/python``) joined to ``base`` (the
    directory ``fxls check`` runs in, the server's workspace root), since the worker starts
    in a scratch directory of its own; a bare name (``python3``) left for ``PATH``."""
    if not value:
        return None
    path = os.path.expanduser(value)
    if os.path.isabs(path) or os.sep not in path or base is None:
        return path
    return os.path.normpath(os.path.join(base, path))


_TRUSTED_RE = re.compile(r"^(true|1|yes)$", re.IGNORECASE)


def parse_trusted(init_options: Any) -> bool:
    """``initializationOptions.trusted``: false only when the client says so explicitly."""
    if not isinstance(init_options, dict) or "trusted" not in init_options:
        return True
    value = init_options["trusted"]
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        return bool(_TRUSTED_RE.match(value.strip()))
    return bool(value)
