"""Which module a file is: the dotted name Python would import it as, and the folder that
must be on ``sys.path`` for that name to resolve.

A model file of a library (``transformers/models/llama/modeling_llama.py``) imports its
neighbours with relative imports (``from ...activations import ACT2FN``), registers classes
under ``__name__`` and is reached through lazy package modules. Executed as a lone script it
fails at its first relative import. Executed as ``transformers.models.llama.modeling_llama``,
with the folder above ``transformers/`` on ``sys.path``, it runs as it does for its users.

The rule is Python's own for regular packages: walk up from the file's folder while the folder
holds an ``__init__.py``; the folders walked are the package names, the first folder without
one is the root. A folder without one whose file's relative imports climb into a regular
package above it is a namespace portion of that package (``esm/model/`` of fair-esm). A file
outside any regular package that uses relative imports is placed in
namespace packages (PEP 420) below the workspace root, when the workspace holds it. Files,
not imports: this module reads folder listings only and runs nothing.
"""

from __future__ import annotations

import ast
import itertools
import keyword
import os
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class ModuleLocation:
    """How one file is executed."""

    name: str
    """The dotted module name (``pkg.models.llama``); empty: a script of its own folder."""
    root: str
    """The folder that goes first on ``sys.path``: the package root, or the file's folder."""
    is_package: bool = False
    """The file is a package's ``__init__.py`` (the module is the package itself)."""

    @property
    def package(self) -> str:
        """``__package__`` of the module: its parent package (the package itself for an
        ``__init__.py``), empty for a script."""
        if self.is_package:
            return self.name
        return self.name.rpartition(".")[0]


_RELATIVE = re.compile(r"\bfrom[\s\\]*\.")
"""What every relative import holds: ``from``, spaces or line continuations, a dot."""


def _identifier(name: str) -> bool:
    return name.isidentifier() and not keyword.iskeyword(name)


def relative_import_depth(text: str) -> int:
    """The deepest ``level`` of the file's relative imports (``from ..x import y`` is 2);
    0 when it has none or does not parse."""
    if not _RELATIVE.search(text):
        return 0  # no ``from`` followed by a dot: nothing to parse for
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return 0
    return max(
        (n.level for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level),
        default=0,
    )


def locate(path: str, text: str = "", workspace_root: str | None = None) -> ModuleLocation:
    """The module ``path`` is, for running ``text`` (its current editor text) as Python would
    import it.

    Regular packages come first: ``a/b/c.py`` with ``a/__init__.py`` and ``a/b/__init__.py`` is
    ``a.b.c`` with root ``.``. Without one, a file whose relative imports reach no further than
    ``workspace_root`` is named by its folders below that root (namespace packages). Anything
    else, or a name Python could not import (``my-model.py``, ``class.py``), is a script run
    from its own folder, as before."""
    absolute = os.path.abspath(path)
    folder = os.path.dirname(absolute)
    stem, ext = os.path.splitext(os.path.basename(absolute))
    script = ModuleLocation("", folder)
    if ext != ".py" or not _identifier(stem):
        return script
    is_package = stem == "__init__"
    parts: list[str] = [] if is_package else [stem]
    here = folder
    while os.path.isfile(os.path.join(here, "__init__.py")):
        name = os.path.basename(here)
        parent = os.path.dirname(here)
        if not _identifier(name) or parent == here:
            break
        parts.insert(0, name)
        here = parent
    in_package = len(parts) > (0 if is_package else 1)
    if in_package:
        return ModuleLocation(".".join(parts), here, is_package)
    if is_package:
        return script
    depth = relative_import_depth(text)
    portion = _in_a_package_portion(folder, stem, depth)
    if portion is not None:
        return portion
    if not workspace_root:
        return script
    root = os.path.abspath(workspace_root)
    if depth == 0 or os.path.commonpath([root, folder]) != root or folder == root:
        return script
    folders = os.path.relpath(folder, root).split(os.sep)
    if len(folders) < depth or not all(_identifier(f) for f in folders):
        return script
    return ModuleLocation(".".join([*folders, stem]), root)


def _in_a_package_portion(folder: str, stem: str, depth: int) -> ModuleLocation | None:
    """A file whose relative imports climb out of its folder, which has no ``__init__.py``,
    into a regular package above it (fair-esm's ``esm/model/esm1.py``: ``from ..modules
    import ...``, with ``esm/__init__.py`` and no ``esm/model/__init__.py``): Python imports
    it as ``esm.model.esm1``, the folder a namespace portion of the package. The ``depth``
    folders the imports climb name the module, then the regular packages above them; None
    when no folder on the way is a regular package or one is no identifier."""
    parts = [stem]
    here = folder
    regular = False
    for step in itertools.count():
        has_init = os.path.isfile(os.path.join(here, "__init__.py"))
        if step >= depth and not has_init:
            break
        name, parent = os.path.basename(here), os.path.dirname(here)
        if not _identifier(name) or parent == here:
            return None
        parts.insert(0, name)
        regular = regular or has_init
        here = parent
    return ModuleLocation(".".join(parts), here) if regular and depth else None
