"""Git's ignore rules without git: ``.gitignore`` syntax, compiled to regular expressions.

Follows gitignore(5): blank lines and ``#`` comments are skipped, ``!`` re-includes, a
trailing ``/`` matches directories only, a ``/`` at the start or in the middle anchors the
pattern to the directory of its file, ``*``/``?``/``[...]`` never match ``/``, and ``**``
spans directories (``**/x``, ``x/**``, ``a/**/b``). Among all rules that match a path, the
last one wins, and files deeper in the tree come after the ones above them.
``fxls check`` uses the same syntax for its own ``exclude`` patterns.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Rule:
    regex: re.Pattern[str]
    negate: bool
    dir_only: bool
    pattern: str


def _bracket(pat: str, i: int) -> tuple[str, int] | None:
    """``[...]`` at ``pat[i]`` -> (regex class, index after it); None when it does not close."""
    j = i + 1
    if j < len(pat) and pat[j] in "!^":
        j += 1
    if j < len(pat) and pat[j] == "]":
        j += 1
    while j < len(pat) and pat[j] != "]":
        j += 1
    if j >= len(pat):
        return None
    body = pat[i + 1 : j]
    negate = body[:1] in ("!", "^")
    if negate:
        body = body[1:]
    body = body.replace("\\", "\\\\")
    return ("[^/" if negate else "[") + body + "]", j + 1


def _translate(pat: str) -> str:
    out: list[str] = []
    i, n = 0, len(pat)
    while i < n:
        c = pat[i]
        if c == "*":
            if pat.startswith("**", i) and (i == 0 or pat[i - 1] == "/"):
                if i + 2 == n:
                    out.append(".*")
                    i += 2
                    continue
                if pat[i + 2] == "/":
                    out.append("(?:.*/)?")
                    i += 3
                    continue
            while i < n and pat[i] == "*":
                i += 1
            out.append("[^/]*")
            continue
        if c == "?":
            out.append("[^/]")
        elif c == "[":
            found = _bracket(pat, i)
            if found is not None:
                out.append(found[0])
                i = found[1]
                continue
            out.append(re.escape(c))
        elif c == "\\" and i + 1 < n:
            i += 1
            out.append(re.escape(pat[i]))
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


def compile_rule(line: str) -> Rule | None:
    """One line of a ``.gitignore`` -> a Rule (None for blanks and comments)."""
    line = line.rstrip("\n").rstrip("\r")
    # trailing spaces are ignored unless escaped with a backslash
    stripped = line.rstrip(" ")
    if stripped.endswith("\\") and len(stripped) < len(line):
        stripped += " "
    line = stripped
    if not line or line.startswith("#"):
        return None
    negate = line.startswith("!")
    if negate or line.startswith("\\!") or line.startswith("\\#"):
        line = line[1:]
    dir_only = line.endswith("/") and not line.endswith("\\/")
    body = line.rstrip("/") if dir_only else line
    if not body:
        return None
    anchored = "/" in body.lstrip("/") or body.startswith("/")
    body = body.lstrip("/") if body.startswith("/") else body
    if not body:
        return None
    regex = _translate(body)
    if not anchored:
        regex = "(?:.*/)?" + regex
    return Rule(re.compile(regex + r"\Z", re.DOTALL), negate, dir_only, line)


def compile_rules(lines: list[str]) -> list[Rule]:
    return [r for r in (compile_rule(x) for x in lines) if r is not None]


@dataclass
class RuleSet:
    """The rules of one file (or one list of patterns), relative to ``base``."""

    base: str
    """Absolute directory the patterns are relative to."""
    rules: list[Rule]

    def decide(self, path: str, is_dir: bool) -> bool | None:
        """True ignored, False re-included, None no rule matched (``path`` absolute)."""
        rel = os.path.relpath(path, self.base)
        if rel == "." or rel.startswith(".." + os.sep) or rel == "..":
            return None
        rel = rel.replace(os.sep, "/")
        verdict: bool | None = None
        for rule in self.rules:
            if rule.dir_only and not is_dir:
                continue
            if rule.regex.match(rel):
                verdict = not rule.negate
        return verdict


def read_rules(path: str, base: str) -> RuleSet | None:
    """The RuleSet of a ``.gitignore``-style file, or None when it cannot be read."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return RuleSet(base, compile_rules(f.read().splitlines()))
    except OSError:
        return None


def find_git_root(start: str) -> str | None:
    """The nearest directory at or above ``start`` that holds ``.git`` (a folder or a file)."""
    here = os.path.abspath(start)
    while True:
        if os.path.exists(os.path.join(here, ".git")):
            return here
        parent = os.path.dirname(here)
        if parent == here:
            return None
        here = parent


@dataclass
class IgnoreStack:
    """The ignore rules in force in one directory: outer files first, deeper files last."""

    sets: list[RuleSet] = field(default_factory=list)

    def ignored(self, path: str, is_dir: bool) -> bool:
        verdict: bool | None = None
        for rule_set in self.sets:
            decided = rule_set.decide(path, is_dir)
            if decided is not None:
                verdict = decided
        return bool(verdict)

    def enter(self, directory: str) -> IgnoreStack:
        """The stack for a subdirectory: this one plus its own ``.gitignore``, if any."""
        own = os.path.join(directory, ".gitignore")
        if os.path.isfile(own):
            rule_set = read_rules(own, directory)
            if rule_set is not None and rule_set.rules:
                return IgnoreStack([*self.sets, rule_set])
        return self

    @classmethod
    def for_directory(cls, directory: str) -> IgnoreStack:
        """The rules that apply inside ``directory``: ``.git/info/exclude`` and every
        ``.gitignore`` from the repository root down to ``directory`` itself; outside a git
        repository, only ``directory``'s own ``.gitignore``."""
        directory = os.path.abspath(directory)
        root = find_git_root(directory)
        stack = cls()
        if root is None:
            return stack.enter(directory)
        info = os.path.join(root, ".git", "info", "exclude")
        if os.path.isfile(info):
            rule_set = read_rules(info, root)
            if rule_set is not None:
                stack = IgnoreStack([rule_set])
        rel = os.path.relpath(directory, root)
        here = root
        stack = stack.enter(here)
        if rel != ".":
            for part in rel.split(os.sep):
                here = os.path.join(here, part)
                stack = stack.enter(here)
        return stack
