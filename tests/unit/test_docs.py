"""The documentation stays true to the code: every diagnostic code, every README command, and
the docs site (mkdocs, built strictly)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from fxls.protocol.catalogue import ALL_MESSAGES, docs_url

ROOT = Path(__file__).resolve().parents[2]
MKDOCS = ROOT / "docs" / "mkdocs" / "mkdocs.yml"


def test_every_diagnostic_code_has_a_docs_section() -> None:
    text = (ROOT / "docs" / "diagnostics.md").read_text()
    documented = set(re.findall(r"^## (FX\d{3})$", text, flags=re.MULTILINE))
    assert set(ALL_MESSAGES) - documented == set(), "codes without a docs section"
    assert documented - set(ALL_MESSAGES) == set(), "docs sections for codes that do not exist"


def test_message_classes_are_well_formed() -> None:
    for code, cls in ALL_MESSAGES.items():
        assert re.fullmatch(r"FX[1-6]\d\d", code)
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


def test_docs_site_builds_strictly_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, build_docs: Any
) -> None:
    """``mkdocs build --strict`` (broken links, missing anchors and pages left out of the
    navigation fail it); the built pages load nothing from the network; every diagnostic code
    has the anchor that ``docs_url`` links to on a published copy (``FXLS_DOCS_URL``)."""
    site = tmp_path / "site"
    proc = build_docs(site)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    monkeypatch.setenv("FXLS_DOCS_URL", "https://docs.example.org/fxls/")
    for code in ALL_MESSAGES:
        url = docs_url(code)
        assert url is not None
        page, _, anchor = url.removeprefix("https://docs.example.org/fxls/").partition("#")
        html = (site / page / "index.html").read_text()
        assert f'id="{anchor}"' in html, (code, url)
    external = re.compile(r'<(?:script|link|img)\b[^>]*(?:src|href)="(?:https?:)?//', re.I)
    for page in site.rglob("*.html"):
        assert not external.search(page.read_text()), f"{page} loads something from the network"
    assert (site / "benchmarks" / "index.html").read_text().count("<table>") >= 1
    assert (site / "examples" / "gpt.py").is_file()  # pages link to the example models
    assert not (site / "mkdocs").exists()


def test_every_docs_page_is_in_the_site_navigation() -> None:
    text = MKDOCS.read_text()
    pages = {
        p.relative_to(ROOT / "docs").as_posix()
        for p in (ROOT / "docs").rglob("*.md")
        if "mkdocs" not in p.parts
    }
    in_nav = set(re.findall(r":\s+([\w/-]+\.md)\s*$", text, flags=re.MULTILINE))
    assert pages == in_nav


def test_install_instructions_do_not_use_a_package_index() -> None:
    """fxls is not on a package index: no page says ``pip install fxls``."""
    pages = [ROOT / "README.md", ROOT / "vscode-extension" / "README.md"]
    for page in [*pages, *sorted((ROOT / "docs").rglob("*.md"))]:
        assert not re.search(r"pip install fxls\b", page.read_text()), page
