"""Installed libraries kept imported in the zygote, so a job child starts with them.

A model file of a library (``transformers/models/gpt2/modeling_gpt2.py``) or a file that uses
one (``from diffusers.models.attention import Attention``) imports it in every job: each edit
paid 0.7-2 s of imports before its first class was built. A job child reports the modules of
the packages named in ``Isolation.preload`` that it imported (:func:`imported_since`); the
zygote imports them itself between jobs (:func:`load`, a few at each step of its loop),
and the children it forks afterwards find them in ``sys.modules``.

What the zygote imports runs outside the sandbox, so the child's report is only a hint, and
what is imported is decided here: a module of a top-level package the user's settings allow
(``isolation.preload``, taken from the editor's own configuration only), found in the
interpreter's ``site-packages`` (never in a workspace or the worker's folder: the search runs
with the folder the zygote started in removed from ``sys.path``), and imported by name only.

A job whose ``sys.path`` finds another copy of such a package (a checkout of ``transformers``
open as the workspace), and every job after a file of one changed on disk (an upgrade), drops
the kept packages from ``sys.modules`` before it runs (:func:`drop_unusable`): it imports what
it uses from disk as before. Imports a package makes of other packages (``yaml``,
``huggingface_hub``) stay as the package made them.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import re
import site
import sys
import sysconfig
from collections.abc import Iterator
from dataclasses import dataclass, field

from fxls.protocol.files import Stamp, stamp

MAX_NAMES = 2000
"""Module names one job's report may hold (the rest is left out)."""
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,99}(?:\.[A-Za-z_][A-Za-z0-9_]{0,99}){0,15}")


@dataclass
class Package:
    """A top-level package the zygote imported: where, and the files of its modules then."""

    folder: str
    files: dict[str, Stamp] = field(default_factory=dict)


LOADED: dict[str, Package] = {}
"""Top-level name -> the package this process imported (inherited by its children)."""
REFUSED: dict[str, str] = {}
"""Top-level name -> why it is not imported here (not installed, elsewhere, failed)."""


def site_folders() -> list[str]:
    """The interpreter's ``site-packages`` folders (real paths)."""
    paths = sysconfig.get_paths()
    found = [paths.get("purelib", ""), paths.get("platlib", "")]
    with contextlib.suppress(AttributeError):
        found += site.getsitepackages()
    with contextlib.suppress(AttributeError):
        found.append(site.getusersitepackages())
    return list(dict.fromkeys(os.path.realpath(p) for p in found if p))


def _inside(path: str, folders: list[str]) -> bool:
    real = os.path.realpath(path)
    return any(real.startswith(folder + os.sep) for folder in folders)


# -- in the job child ---------------------------------------------------------------------


def newest_module() -> str | None:
    """The name added to ``sys.modules`` last. Only that entry is looked at: a forked child
    that walks every entry writes the reference count of each name and module, and copies the
    pages they share with the zygote (2-4 ms for a ResNet-50 file's job)."""
    return next(reversed(sys.modules), None)


def imported_since(newest: str | None, allowed: list[str], document: str) -> list[str]:
    """Modules of the ``allowed`` packages, found in ``site-packages``, that this process
    imported after ``newest`` (:func:`newest_module`), in the order they were imported, the
    document's own module (``document``) left out."""
    added = []
    for name in reversed(sys.modules):
        if name == newest:
            break
        added.append(name)
    tops = set(allowed)
    folders: list[str] | None = None
    out: list[str] = []
    for name in reversed(added):
        if name == document or name.partition(".")[0] not in tops:
            continue
        path = getattr(sys.modules.get(name), "__file__", None)
        if not isinstance(path, str):
            continue
        folders = folders if folders is not None else site_folders()
        if _inside(path, folders):
            out.append(name)
            if len(out) >= MAX_NAMES:
                break
    return out


def drop_unusable(sys_path: list[str]) -> list[str]:
    """Before a job: when a kept package must be imported from disk by this job (another
    copy on its ``sys_path``, or a file changed since the zygote imported it), every kept
    package is removed from ``sys.modules`` (one may hold the other's classes: ``diffusers``
    those of ``transformers``), and the job imports what it uses as without them; their names."""
    if not any(_shadowed(top, kept, sys_path) or _changed(kept) for top, kept in LOADED.items()):
        return []
    tops = set(LOADED)
    for name in [n for n in sys.modules if n.partition(".")[0] in tops]:
        del sys.modules[name]
    return sorted(tops)


def _shadowed(top: str, package: Package, sys_path: list[str]) -> bool:
    for entry in sys_path:
        for candidate in (os.path.join(entry, top), os.path.join(entry, top + ".py")):
            if os.path.exists(candidate):
                return os.path.realpath(candidate) != package.folder
    return False


def _changed(package: Package) -> bool:
    return any(stamp(path) != seen for path, seen in package.files.items())


# -- in the zygote ------------------------------------------------------------------------


def wanted(names: object, allowed: list[str]) -> list[str]:
    """The module names of a job's report the zygote may import: well-formed, of an allowed
    top-level package not refused before, not imported yet."""
    if not isinstance(names, list):
        return []
    tops = set(allowed)
    out = []
    for name in names[:MAX_NAMES]:
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            continue
        top = name.partition(".")[0]
        if top in tops and top not in REFUSED and name not in sys.modules:
            out.append(name)
    return out


def load(name: str) -> str | None:
    """Import ``name`` here if its package is installed in ``site-packages``; what went wrong
    otherwise (its package is then refused for good)."""
    top = name.partition(".")[0]
    if top in REFUSED:
        return REFUSED[top]
    if name in sys.modules:
        return None
    with _without_start_folder():
        if top not in LOADED:
            folder = _installed(top)
            if folder is None:
                REFUSED[top] = f"`{top}` is not installed in site-packages"
                return REFUSED[top]
            LOADED[top] = Package(folder)
        try:
            importlib.import_module(name)
        except BaseException as exc:  # a library's import is not ours to fail
            REFUSED[top] = f"importing `{name}` failed: {type(exc).__name__}"
        finally:
            _note_files(top)
    return REFUSED.get(top)


def _installed(top: str) -> str | None:
    """The real path of ``top``'s folder (or module file) when it is in ``site-packages``."""
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    locations = list(spec.submodule_search_locations or [])
    where = locations[0] if locations else spec.origin
    if not isinstance(where, str) or not _inside(where, site_folders()):
        return None
    return os.path.realpath(where)


def _note_files(top: str) -> None:
    package = LOADED[top]
    for name, module in list(sys.modules.items()):
        if name != top and not name.startswith(top + "."):
            continue
        path = getattr(module, "__file__", None)
        if isinstance(path, str) and path not in package.files:
            seen = stamp(path)
            if seen is not None:
                package.files[path] = seen


@contextlib.contextmanager
def _without_start_folder() -> Iterator[None]:
    """``sys.path`` without the folder the zygote was started in (``python -m`` puts it
    first: the server's scratch folder, where job folders live), nor ``""``."""
    here = os.path.realpath(os.getcwd())
    saved = sys.path[:]
    sys.path[:] = [p for p in saved if p and os.path.realpath(p) != here]
    try:
        yield
    finally:
        sys.path[:] = saved
