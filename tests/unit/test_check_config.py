"""``[tool.fxls]`` in pyproject.toml and the ``--select``/``--ignore`` code filter."""

from __future__ import annotations

from pathlib import Path

from fxls.cli.check.config import (
    CodeFilter,
    find_pyproject,
    load_config,
    parse_codes,
    user_config_path,
)


def test_code_filter_prefixes_and_specificity() -> None:
    everything = CodeFilter()
    assert everything.allows("FX101") and everything.allows("FX302")
    only_shapes = CodeFilter(select=["FX2"])
    assert only_shapes.allows("FX201") and not only_shapes.allows("FX101")
    no_hints = CodeFilter(ignore=["FX302"])
    assert not no_hints.allows("FX302") and no_hints.allows("FX301")
    # the longer prefix decides: select FX2 but not FX202; ignore FX1 but keep FX101
    assert not CodeFilter(select=["FX2"], ignore=["FX202"]).allows("FX202")
    assert CodeFilter(select=["FX101"], ignore=["FX1"]).allows("FX101")
    assert not CodeFilter(select=["FX101"], ignore=["FX1"]).allows("FX102")
    assert not CodeFilter(select=[]).allows("FX101")


def test_parse_codes() -> None:
    codes, problems = parse_codes(["fx1, FX201", "FX3"])
    assert codes == ["FX1", "FX201", "FX3"] and problems == []
    codes, problems = parse_codes(["E501", "FX999", "FX2"])
    assert codes == ["FX2"]
    assert len(problems) == 2 and "E501" in problems[0] and "FX999" in problems[1]


def _project(tmp_path: Path, body: str) -> Path:
    (tmp_path / "pyproject.toml").write_text(body)
    (tmp_path / "src" / "models").mkdir(parents=True)
    return tmp_path / "src" / "models"


def test_nearest_pyproject_from_the_common_folder(tmp_path: Path) -> None:
    models = _project(tmp_path, "[project]\nname='x'\n")
    inner = models / "pyproject.toml"
    assert find_pyproject([str(models)]) == str(tmp_path / "pyproject.toml")
    inner.write_text("")
    assert find_pyproject([str(models / "a.py"), str(models / "b.py")]) == str(inner)
    assert find_pyproject([str(models), str(tmp_path / "src")]) == str(tmp_path / "pyproject.toml")


def test_tool_fxls_section(tmp_path: Path) -> None:
    models = _project(
        tmp_path,
        """
[tool.fxls]
select = ["FX1", "FX2"]
ignore = "FX202"
exclude = ["legacy/"]
python = ".venv/bin/python"
debounceMs = 100

[tool.fxls.limits]
timeoutSeconds = 30
memoryMB = 4096

[tool.fxls.capture]
symbolic = false
""",
    )
    config = load_config([str(models)], user_config=str(tmp_path / "no-user-config.toml"))
    assert config.select == ["FX1", "FX2"] and config.ignore == ["FX202"]
    assert config.exclude == ["legacy/"] and config.root == str(tmp_path)
    assert config.settings.capture.symbolic is False
    # what runs and how it is isolated is not the project's choice: ignored, said once
    assert config.settings.limits.timeout_seconds == 20
    assert config.settings.limits.memory_mb == 2048
    assert config.settings.python == ""
    assert config.ignored == ["limits.memoryMB", "limits.timeoutSeconds", "python"]
    assert len(config.warnings) == 1 and "ignored `limits.memoryMB`" in config.warnings[0]
    assert config.given == {"python", "debounceMs", "limits.timeoutSeconds", "limits.memoryMB",
                            "capture.symbolic"}  # fmt: skip


def test_unknown_keys_and_bad_values_warn_and_keep_defaults(tmp_path: Path) -> None:
    models = _project(
        tmp_path,
        """
[tool.fxls]
select = ["FX9", "nope"]
ignore = 3
colour = "blue"
codeActions = { maxParams = -1, walltime = 5 }
""",
    )
    config = load_config([str(models)], user_config=str(tmp_path / "no-user-config.toml"))
    text = "\n".join(config.warnings)
    assert "unknown key `tool.fxls.colour`" in text
    assert "unknown key `tool.fxls.codeActions.walltime`" in text
    assert "`tool.fxls.codeActions.maxParams` must be an integer ≥ 0" in text
    assert "`tool.fxls.ignore` must be a list of strings" in text
    assert "FX9" in text and "nope" in text
    assert config.select == [] and config.ignore == []
    assert config.settings.code_actions.max_params == 20_000_000


def test_a_broken_pyproject_is_a_warning(tmp_path: Path) -> None:
    models = _project(tmp_path, "[tool.fxls\nselect = \n")
    config = load_config([str(models)])
    assert len(config.warnings) == 1 and "cannot read it" in config.warnings[0]
    assert config.select is None


def test_no_pyproject_no_section(tmp_path: Path) -> None:
    models = _project(tmp_path, "[tool.other]\nx = 1\n")
    config = load_config([str(models)])
    assert config.warnings == [] and config.select is None and config.exclude == []


def test_user_config_under_the_project(tmp_path: Path) -> None:
    models = _project(
        tmp_path,
        '[tool.fxls]\nignore = ["FX302"]\ncapture = { symbolic = false }\npython = "x"\n',
    )
    user = tmp_path / "home" / "fxls" / "config.toml"
    user.parent.mkdir(parents=True)
    user.write_text(
        'python = "bin/python"\nignore = ["FX1"]\nselect = ["FX2"]\n'
        "[limits]\ntimeoutSeconds = 30\n[capture]\nsymbolic = true\nmetaInit = false\n"
    )
    config = load_config([str(models)], user_config=str(user))
    assert config.user_path == str(user)
    assert config.settings.python == str(user.parent / "bin" / "python")  # the user's, not "x"
    assert config.settings.limits.timeout_seconds == 30
    assert config.settings.capture.symbolic is False  # the project's value of a key it may set
    assert config.settings.capture.meta_init is False
    assert config.ignore == ["FX302"] and config.select == ["FX2"]
    assert config.ignored == ["python"]


def test_user_config_path_follows_xdg() -> None:
    assert user_config_path({"XDG_CONFIG_HOME": "/cfg"}) == "/cfg/fxls/config.toml"
    assert user_config_path({"XDG_CONFIG_HOME": "relative"}).endswith("/.config/fxls/config.toml")
    assert user_config_path({}).endswith("/.config/fxls/config.toml")
