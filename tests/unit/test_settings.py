"""Settings: parsing, defaults, invalid values and the documented contract."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from fxls.engine.settings import (
    Settings,
    defaults_flat,
    merge_settings,
    parse_settings,
    parse_trusted,
    to_wire,
)

ROOT = Path(__file__).resolve().parents[2]

CONTRACT = {
    "fxls.python": "",
    "fxls.limits.timeoutSeconds": 20,
    "fxls.limits.cpuSeconds": 10,
    "fxls.limits.memoryMB": 2048,
    "fxls.limits.fileSizeMB": 64,
    "fxls.debounceMs": 300,
    "fxls.storeResults": True,
    "fxls.preliminaryShapes": True,
    "fxls.inlayHints.enabled": True,
    "fxls.codeLens.enabled": True,
    "fxls.codeActions.unsafe": False,
    "fxls.codeActions.maxParams": 20_000_000,
    "fxls.codeActions.rulesFile": "fxls_rules.py",
    "fxls.isolation.seccomp": True,
    "fxls.isolation.landlock": True,
    "fxls.isolation.preload": [
        "transformers",
        "diffusers",
        "timm",
        "einops",
        "torchvision",
        "torchaudio",
        "accelerate",
        "peft",
        "x_transformers",
    ],
    "fxls.capture.metaInit": True,
    "fxls.capture.symbolic": True,
    "fxls.compileCheck.enabled": True,
}


def test_defaults_flat_is_the_contract() -> None:
    assert defaults_flat() == CONTRACT


def test_parse_nested_and_dotted() -> None:
    settings, problems = parse_settings(
        {
            "limits": {"timeoutSeconds": 3, "memoryMB": 512},
            "inlayHints.enabled": False,
            "capture": {"metaInit": False},
            "unknownKey": 1,
        }
    )
    assert problems == []
    assert settings.limits.timeout_seconds == 3.0
    assert settings.limits.memory_mb == 512
    assert settings.inlay_hints.enabled is False
    assert settings.capture.meta_init is False
    assert settings.limits.to_protocol().timeout_s == 3.0


def test_wrapped_in_fxls_section() -> None:
    settings, problems = parse_settings({"fxls": {"debounceMs": 50}})
    assert problems == [] and settings.debounce_ms == 50


@pytest.mark.parametrize(
    ("data", "key"),
    [
        ({"limits": {"timeoutSeconds": "soon"}}, "fxls.limits.timeoutSeconds"),
        ({"limits": {"timeoutSeconds": -1}}, "fxls.limits.timeoutSeconds"),
        ({"debounceMs": 1.5}, "fxls.debounceMs"),
        ({"inlayHints": {"enabled": "yes"}}, "fxls.inlayHints.enabled"),
        ({"limits": 5}, "fxls.limits"),
        ({"python": 3}, "fxls.python"),
    ],
)
def test_invalid_values_fall_back_to_defaults(data: dict[str, object], key: str) -> None:
    settings, problems = parse_settings({**data, "codeLens": {"enabled": False}})
    assert len(problems) == 1 and f"`{key}`" in problems[0]
    expected = Settings()
    expected.code_lens.enabled = False
    assert settings == expected


def test_not_an_object() -> None:
    settings, problems = parse_settings(["nope"])
    assert settings == Settings() and len(problems) == 1


def test_round_trip() -> None:
    settings, _ = parse_settings({"limits": {"cpuSeconds": 4}, "python": "/usr/bin/python3"})
    again, problems = parse_settings(json.loads(json.dumps(to_wire(settings))))
    assert again == settings and problems == []


def test_trusted() -> None:
    assert parse_trusted(None) is True
    assert parse_trusted({}) is True
    assert parse_trusted({"trusted": False}) is False
    assert parse_trusted({"trusted": True}) is True


def test_docs_configuration_lists_every_setting_with_its_default() -> None:
    doc = (ROOT / "docs" / "configuration.md").read_text()
    for name, default in CONTRACT.items():
        shown = json.dumps(default)
        pattern = rf"`{re.escape(name)}`.*`{re.escape(shown)}`"
        assert re.search(pattern, doc), f"{name} (default {shown}) missing from configuration.md"


def test_configuration_overrides_initialization_options_key_by_key() -> None:
    base = merge_settings({}, {"fxls": {"debounceMs": 50, "limits": {"cpuSeconds": 3}}})
    merged = merge_settings(base, {"limits": {"timeoutSeconds": 4}})
    settings, problems = parse_settings(merged)
    assert problems == []
    assert (settings.debounce_ms, settings.limits.cpu_seconds) == (50, 3.0)
    assert settings.limits.timeout_seconds == 4.0
    assert merge_settings(base, None) == base
    assert parse_settings(merge_settings(base, "junk"))[1]  # reported, not ignored


def test_protected_keys_are_split_off_configuration_answers() -> None:
    from fxls.engine.settings import Settings, protected_differences, split_protected

    answer = {
        "fxls": {
            "debounceMs": 10,
            "python": "/tmp/evil/python",
            "limits.timeoutSeconds": 999,
            "isolation": {"seccomp": False, "landlock": True},
        }
    }
    kept, protected = split_protected(answer)
    assert kept == {"debounceMs": 10}
    assert set(protected) == {"python", "limits", "isolation"}
    assert protected_differences(protected, Settings()) == [
        "fxls.isolation.seccomp",
        "fxls.limits.timeoutSeconds",
        "fxls.python",
    ]
    # values equal to the settings in force (VS Code sends every key) are not worth a word
    _, same = split_protected({"limits": {"timeoutSeconds": 20}, "python": ""})
    assert protected_differences(same, Settings()) == []
    # a list setting is sent as a list (its default is a tuple on the server)
    _, preload = split_protected(
        {"isolation": {"preload": defaults_flat()["fxls.isolation.preload"]}}
    )
    assert protected_differences(preload, Settings()) == []
    _, other = split_protected({"isolation": {"preload": ["timm"]}})
    assert protected_differences(other, Settings()) == ["fxls.isolation.preload"]
    assert split_protected(None) == (None, {})


def test_an_interpreter_path_is_read_from_where_the_user_is() -> None:
    from fxls.engine.settings import interpreter_path

    home = os.path.expanduser("~")
    assert interpreter_path("", "/w") is None
    assert interpreter_path(None, "/w") is None
    assert interpreter_path(".venv/bin/python", "/w/project") == "/w/project/.venv/bin/python"
    assert interpreter_path("../env/bin/python", "/w/project") == "/w/env/bin/python"
    assert interpreter_path("/usr/bin/python3", "/w") == "/usr/bin/python3"
    assert interpreter_path("~/env/bin/python", "/w") == os.path.join(home, "env/bin/python")
    assert interpreter_path("python3", "/w") == "python3"  # found on PATH
    assert interpreter_path(".venv/bin/python", None) == ".venv/bin/python"
