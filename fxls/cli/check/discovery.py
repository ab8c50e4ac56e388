"""Which files ``fxls check`` looks at: files, directories and globs on the command line.

A file named on the command line is always checked. Directories are walked and globs expanded,
keeping ``.py`` files and skipping what a project does not consider its source: paths ignored by
git (``.gitignore`` files and ``.git/info/exclude``, read without git), virtual environments
(folders with a ``pyvenv.cfg``, conda environments), ``node_modules``, ``__pycache__``, hidden
files and folders, and the ``exclude`` patterns of the configuration.

Links: a walk never enters a linked folder. A linked ``.py`` file found by a walk or a glob is
checked when it leads to a regular file inside the folder walked (a project that links a shared
module into two places); a link that leads out of it, or into a hidden file or folder (``.git/``,
which a walk never enters), is skipped with a note, and a link to
anything that is not a regular file is kept, so that reading it reports why it is not checked.
"""

from __future__ import annotations

import glob
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field

from fxls.cli.check.gitignore import IgnoreStack, RuleSet, compile_rules

SKIPPED_DIR_NAMES = frozenset({"__pycache__", "node_modules", "site-packages"})
GLOB_CHARS = frozenset("*?[")


@dataclass
class Target:
    path: str
    """The path as shown to the user: as given, or joined to the directory given."""
    explicit: bool
    """Named on the command line (checked even when it is excluded or has no modules)."""
    follow_link: bool = False
    """A link found by a walk or a glob that leads to a regular file inside the folder walked:
    read through the link (other links found that way are not followed)."""


@dataclass
class Discovery:
    targets: list[Target] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    """Arguments that name nothing (a missing path, a glob that matches nothing)."""
    skipped: int = 0
    """Directories and files left out by the rules above."""
    notes: list[str] = field(default_factory=list)
    """Files left out that the user would want to hear of (a link leading out of the project)."""


SOURCE_SUFFIXES = (".py", ".ipynb")
"""What a walk or a glob keeps: Python files and Jupyter notebooks (their Python cells)."""


def is_environment(directory: str) -> bool:
    """A virtual environment (``pyvenv.cfg``) or a conda environment (``conda-meta``)."""
    return os.path.isfile(os.path.join(directory, "pyvenv.cfg")) or os.path.isdir(
        os.path.join(directory, "conda-meta")
    )


def _clean(path: str) -> str:
    """``./models/a.py`` -> ``models/a.py``; other paths as written."""
    return os.path.normpath(path)


def has_glob(arg: str) -> bool:
    return any(c in GLOB_CHARS for c in arg)


def _inside(path: str, folder: str) -> bool:
    try:
        return os.path.commonpath([path, folder]) == folder
    except ValueError:
        return False


class Walker:
    def __init__(self, excludes: RuleSet | None) -> None:
        self.excludes = excludes
        self.skipped = 0
        self.linked: set[str] = set()
        """Absolute paths of links found that lead to a regular file inside the folder walked."""
        self.notes: list[str] = []

    def _keep_link(self, path: str, shown: str, top: str) -> bool:
        """Whether the file at ``path`` (``shown`` as the user sees it) is kept; a link is kept
        when it leads to a regular file inside ``top`` (then read through it) or to something
        that is not a regular file (then reading it says why); a link out of ``top`` is not."""
        if not os.path.islink(path):
            return True
        real = os.path.realpath(path)
        try:
            regular = stat.S_ISREG(os.stat(real).st_mode)
        except OSError:
            return True  # dangling: reading it reports the missing file
        if not regular:
            return True
        folder = os.path.realpath(top)
        if not _inside(real, folder):
            self.skipped += 1
            self.notes.append(f"skipped {shown}: a link to a file outside {top}")
            return False
        if any(part.startswith(".") for part in os.path.relpath(real, folder).split(os.sep)):
            self.skipped += 1
            self.notes.append(f"skipped {shown}: a link to a hidden file or folder")
            return False
        self.linked.add(os.path.abspath(path))
        return True

    def _excluded(self, path: str, is_dir: bool) -> bool:
        return self.excludes is not None and bool(self.excludes.decide(path, is_dir))

    def skip_dir(self, path: str, name: str, stack: IgnoreStack) -> bool:
        if name.startswith(".") or name in SKIPPED_DIR_NAMES or is_environment(path):
            return True
        return stack.ignored(path, True) or self._excluded(path, True)

    def skip_file(self, path: str, name: str, stack: IgnoreStack) -> bool:
        if not name.endswith(SOURCE_SUFFIXES) or name.startswith("."):
            return True
        return stack.ignored(path, False) or self._excluded(path, False)

    def walk(self, top: str) -> Iterator[str]:
        """The ``.py`` files and notebooks under ``top`` (sorted, depth first), as
        ``top``-joined paths."""
        stacks = {os.path.abspath(top): IgnoreStack.for_directory(top)}
        for here, dirs, files in os.walk(top):
            absolute = os.path.abspath(here)
            stack = stacks.pop(absolute, None) or IgnoreStack.for_directory(here)
            kept = []
            for name in sorted(dirs):
                sub = os.path.join(absolute, name)
                if self.skip_dir(sub, name, stack):
                    self.skipped += 1
                else:
                    kept.append(name)
                    stacks[sub] = stack.enter(sub)
            dirs[:] = kept
            for name in sorted(files):
                path = os.path.join(absolute, name)
                if self.skip_file(path, name, stack):
                    if name.endswith(SOURCE_SUFFIXES):
                        self.skipped += 1
                    continue
                shown = os.path.join(here, name)
                if self._keep_link(path, shown, top):
                    yield shown

    def glob(self, pattern: str) -> Iterator[str]:
        """Matches of a glob (``**`` spans folders), filtered like a walk from its base."""
        parts = pattern.replace(os.sep, "/").split("/")
        base_parts: list[str] = []
        for part in parts:
            if has_glob(part):
                break
            base_parts.append(part)
        base = "/".join(base_parts) or ("/" if pattern.startswith("/") else ".")
        base_abs = os.path.abspath(base)
        stack0 = IgnoreStack.for_directory(base_abs) if os.path.isdir(base_abs) else None
        for match in sorted(glob.glob(pattern, recursive=True)):
            absolute = os.path.abspath(match)
            if os.path.isdir(absolute):
                if self._skip_chain(base_abs, absolute, stack0, final_dir=True):
                    continue
                yield from self.walk(match)
                continue
            if self._skip_chain(base_abs, absolute, stack0, final_dir=False):
                continue
            if self._keep_link(absolute, match, base):
                yield match

    def _skip_chain(
        self, base: str, path: str, stack: IgnoreStack | None, *, final_dir: bool
    ) -> bool:
        """Whether a glob match, or a folder between the glob's base and it, is skipped."""
        rel = os.path.relpath(path, base)
        if stack is None or rel.startswith(".."):
            stack = IgnoreStack.for_directory(os.path.dirname(path))
            parts = [os.path.basename(path)]
            here = os.path.dirname(path)
        else:
            parts = [] if rel == "." else rel.split(os.sep)
            here = base
        for i, name in enumerate(parts):
            nxt = os.path.join(here, name)
            last = i == len(parts) - 1
            if last and not final_dir:
                if self.skip_file(nxt, name, stack):
                    self.skipped += 1
                    return True
                return False
            if self.skip_dir(nxt, name, stack):
                self.skipped += 1
                return True
            stack = stack.enter(nxt)
            here = nxt
        return False


def exclude_rules(patterns: list[str], base: str) -> RuleSet | None:
    """``exclude`` patterns (gitignore syntax) relative to ``base``; None when there are none."""
    if not patterns:
        return None
    return RuleSet(os.path.abspath(base), compile_rules(patterns))


def discover(args: list[str], excludes: RuleSet | None = None) -> Discovery:
    """The files to check for the command line's paths, each once, in a stable order."""
    found = Discovery()
    walker = Walker(excludes)
    seen: set[str] = set()

    def add(path: str, explicit: bool) -> None:
        key = os.path.abspath(path)
        if key not in seen:
            seen.add(key)
            found.targets.append(Target(_clean(path), explicit, key in walker.linked))

    for arg in args:
        if os.path.isdir(arg):
            for path in walker.walk(arg):
                add(path, False)
        elif os.path.exists(arg) or not has_glob(arg):
            add(arg, True)  # a missing file is reported when it is read
        else:
            matches = list(walker.glob(arg))
            if not matches and not glob.glob(arg, recursive=True):
                found.errors.append(f"no files match {arg}")
            for path in matches:
                add(path, False)
    found.skipped = walker.skipped
    found.notes = walker.notes
    return found
