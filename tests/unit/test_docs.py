"""The documentation stays true to the code: every diagnostic code and every README command."""

from __future__ import annotations

import re
from pathlib import Path

from fxls.protocol.catalogue import ALL_MESSAGES

ROOT = Path(__file__).resolve().parents[2]


def test_every_diagnostic_code_has_a_docs_section() -> None:
    text = (ROOT / "docs" / "diagnostics.md").read_text()
    documented = set(re.findall(r"^## (FX\d{3})$", text, flags=re.MULTILINE))
    assert set(ALL_MESSAGES) - documented == set(), "codes without a docs section"
    assert documented - set(ALL_MESSAGES) == set(), "docs sections for codes that do not exist"


def test_message_classes_are_well_formed() -> None:
    for code, cls in ALL_MESSAGES.items():
        assert re.fullmatch(r"FX[1-5]\d\d", code)
        assert cls.severity in ("error", "warning", "information", "hint")
        assert cls.title and cls.template


def test_readme_commands_exist_and_ci_runs_the_test_command() -> None:
    readme = (ROOT / "README.md").read_text()
    for script in ("./.ci/demo", "./.ci/test"):
        assert script in readme
        path = ROOT / script
        assert path.is_file() and path.stat().st_mode & 0o111, f"{script} must be executable"
    assert "./.ci/test" in (ROOT / ".ci" / "run").read_text()


def test_docs_links_resolve() -> None:
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" in target:
                continue
            assert (page.parent / target).exists(), (
                f"{page.relative_to(ROOT)} links to missing {target}"
            )
