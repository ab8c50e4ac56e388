"""Which module a file runs as (``fxls.analysis.packages.locate``)."""

from __future__ import annotations

from pathlib import Path

from fxls.analysis.packages import ModuleLocation, locate, relative_import_depth


def _touch(root: Path, *files: str) -> None:
    for rel in files:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")


def test_a_file_in_regular_packages_is_named_by_them(tmp_path: Path) -> None:
    _touch(tmp_path, "lib/__init__.py", "lib/models/__init__.py", "lib/models/llama.py")
    where = locate(str(tmp_path / "lib" / "models" / "llama.py"))
    assert where == ModuleLocation("lib.models.llama", str(tmp_path))
    assert where.package == "lib.models"


def test_a_package_init_is_the_package(tmp_path: Path) -> None:
    _touch(tmp_path, "lib/__init__.py", "lib/models/__init__.py")
    where = locate(str(tmp_path / "lib" / "models" / "__init__.py"))
    assert where == ModuleLocation("lib.models", str(tmp_path), is_package=True)
    assert where.package == "lib.models"


def test_src_layout_roots_at_src(tmp_path: Path) -> None:
    _touch(tmp_path, "src/lib/__init__.py", "src/lib/net.py")
    assert locate(str(tmp_path / "src" / "lib" / "net.py")).root == str(tmp_path / "src")


def test_a_folder_that_is_no_identifier_ends_the_package(tmp_path: Path) -> None:
    _touch(tmp_path, "my-repo/__init__.py", "my-repo/lib/__init__.py", "my-repo/lib/net.py")
    where = locate(str(tmp_path / "my-repo" / "lib" / "net.py"))
    assert where == ModuleLocation("lib.net", str(tmp_path / "my-repo"))


def test_a_lone_file_is_a_script_of_its_folder(tmp_path: Path) -> None:
    _touch(tmp_path, "models/net.py", "my-model.py")
    assert locate(str(tmp_path / "models" / "net.py")) == ModuleLocation(
        "", str(tmp_path / "models")
    )
    assert locate(str(tmp_path / "my-model.py")).name == ""


def test_relative_imports_outside_packages_use_namespace_packages_below_the_workspace(
    tmp_path: Path,
) -> None:
    _touch(tmp_path, "proj/models/net.py", "proj/models/layers.py")
    net = str(tmp_path / "proj" / "models" / "net.py")
    text = "from .layers import Block\n"
    assert locate(net, text, str(tmp_path / "proj")) == ModuleLocation(
        "models.net", str(tmp_path / "proj")
    )
    assert locate(net, text).name == ""  # no workspace: a script
    assert locate(net, "from ...x import y\n", str(tmp_path / "proj")).name == ""  # too deep
    assert locate(net, "import layers\n", str(tmp_path / "proj")).name == ""  # no relative


def test_relative_import_depth() -> None:
    assert relative_import_depth("from . import a\nfrom ...b import c\n") == 3
    assert relative_import_depth("import os\n") == 0
    assert relative_import_depth("def (:\n") == 0


def test_a_folder_without_init_inside_a_regular_package_is_a_portion_of_it(
    tmp_path: Path,
) -> None:
    """fair-esm's ``esm/model/esm1.py`` (no ``esm/model/__init__.py``) imports ``from
    ..modules import ...``: Python imports it as ``esm.model.esm1``, workspace or not."""
    _touch(tmp_path, "site/esm/__init__.py", "site/esm/modules.py", "site/esm/model/esm1.py")
    esm1 = str(tmp_path / "site" / "esm" / "model" / "esm1.py")
    expected = ModuleLocation("esm.model.esm1", str(tmp_path / "site"))
    assert locate(esm1, "from ..modules import TransformerLayer\n") == expected
    assert locate(esm1, "from ..modules import X\n", str(tmp_path)) == expected
    assert locate(esm1, "from .. import modules\n") == expected
    assert locate(esm1, "import torch\n").name == ""  # no relative import: as before
    _touch(tmp_path, "loose/a/b/net.py")  # no regular package on the way: as before
    net = str(tmp_path / "loose" / "a" / "b" / "net.py")
    assert locate(net, "from ..x import y\n").name == ""
