"""mkdocs hooks of the fxls site: real screenshots from the VS Code end-to-end test.

A page marks where a screenshot goes with one comment line::

    <!-- screenshot: trusted/model.png "Caption" -->

The name is a file in the folder where ``tests/e2e/test_vscode.py`` saves its screenshots,
``tests/artifacts/vscode/`` (``FXLS_SCREENSHOTS`` names another folder). Screenshots are
generated, so they are never committed: when the file exists (the VS Code stage ran in this
checkout, or CI restored its artifacts), the build copies it into the site as
``assets/screenshots/<run>-<name>.png`` and the marker becomes the image, its caption and the
day it was taken; when it does not, the marker becomes a note that says where the screenshot
comes from. Either way ``mkdocs build --strict`` passes.
"""

from __future__ import annotations

import datetime
import os
import posixpath
import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[2]
MARKER = re.compile(
    r'^<!-- screenshot: (?P<name>[\w-]+/[\w-]+\.png) "(?P<caption>[^"\n]*)" -->$', re.MULTILINE
)
SITE_FOLDER = "assets/screenshots"


def screenshot_folder() -> Path:
    """Where the VS Code stage saved its screenshots (``FXLS_SCREENSHOTS`` overrides)."""
    configured = os.environ.get("FXLS_SCREENSHOTS")
    return Path(configured) if configured else ROOT / "tests" / "artifacts" / "vscode"


def site_uri(name: str) -> str:
    """``trusted/model.png`` -> ``assets/screenshots/trusted-model.png``."""
    return f"{SITE_FOLDER}/{name.replace('/', '-')}"


def on_files(files: Files, config: Any) -> Files:
    """Adds each screenshot a page asks for, when the VS Code stage made it, to the site."""
    folder = screenshot_folder()
    for page in list(files.documentation_pages()):
        if page.abs_src_path is None:
            continue
        for found in MARKER.finditer(Path(page.abs_src_path).read_text(encoding="utf-8")):
            source = folder / found["name"]
            uri = site_uri(found["name"])
            if source.is_file() and files.get_file_from_path(uri) is None:
                files.append(File.generated(config, uri, abs_src_path=str(source)))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    """Each marker: the image and its caption, or a note when there is no screenshot."""

    def replace(found: re.Match[str]) -> str:
        name, caption = found["name"], found["caption"]
        uri = site_uri(name)
        shot = files.get_file_from_path(uri)
        if shot is None or shot.abs_src_path is None:
            return (
                f'!!! note "Screenshot: {caption}"\n'
                "    Not in this build. The VS Code end-to-end test takes it "
                f"(`{name}` under `tests/artifacts/vscode/`); build the site after "
                "`.venv/bin/pytest tests/e2e/test_vscode.py` to see it here.\n"
            )
        link = posixpath.relpath(uri, posixpath.dirname(page.file.src_uri) or ".")
        taken = datetime.date.fromtimestamp(os.path.getmtime(shot.abs_src_path)).isoformat()
        return (
            f"![{caption}]({link})\n\n"
            f"*{caption}. Screenshot from the VS Code end-to-end test, {taken}.*\n"
        )

    return MARKER.sub(replace, markdown)
