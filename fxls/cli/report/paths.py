"""Paths in machine reports: relative to the repository being checked, with ``/``."""

from __future__ import annotations

import os


def report_base() -> str:
    """The folder paths are relative to: ``$GITHUB_WORKSPACE`` when set, else the cwd."""
    return os.path.abspath(os.environ.get("GITHUB_WORKSPACE") or os.getcwd())


def relative_path(path: str, base: str) -> str | None:
    """``path`` relative to ``base`` with ``/`` separators; None when it is outside ``base``."""
    absolute = os.path.abspath(path)
    try:
        rel = os.path.relpath(absolute, base)
    except ValueError:
        return None
    if rel == ".." or rel.startswith(".." + os.sep):
        return None
    return rel.replace(os.sep, "/")


def display_path(path: str, base: str) -> str:
    """Relative to ``base`` when inside it, else absolute."""
    rel = relative_path(path, base)
    return rel if rel is not None else os.path.abspath(path)
