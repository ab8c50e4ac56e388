"""Git's ignore rules without git: ``.gitignore`` syntax, matched in linear time.

Follows gitignore(5): blank lines and ``#`` comments are skipped, ``!`` re-includes, a
trailing ``/`` matches directories only, a ``/`` at the start or in the middle anchors the
pattern to the directory of its file, ``*``/``?``/``[...]`` never match ``/``, and ``**``
spans directories (``**/x``, ``x/**``, ``a/**/b``). Among all rules that match a path, the
last one wins, and files deeper in the tree come after the ones above them.
``fxls check`` uses the same syntax for its own ``exclude`` patterns.

Patterns come from the checked repository, so no pattern may make matching slow. A pattern is
parsed once into segments of tokens, and a path is matched with the two-pointer wildcard
match (a failure returns to the last star only, never to earlier ones): over the path's
segments, where a ``**`` segment spans any number of them, and within one segment over its
characters. A match takes at most (path length × pattern length) steps; as a regular
expression, ``*a*a*a*a*a*a*a*a*a*a*a*a*a*a*b`` took seconds on a 30-character name and
doubled with each character more.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar, Union

from fxls.protocol.files import Refused, read_source


class Star:
    """The wildcard of a pattern: ``*`` in a segment (any characters), or a ``**`` segment
    (any segments)."""


STAR = Star()


class CharToken:
    """One character position of a segment pattern."""

    def matches(self, ch: str) -> bool:
        raise NotImplementedError


@dataclass(frozen=True)
class Char(CharToken):
    """A literal character (escaped ones included)."""

    char: str

    def matches(self, ch: str) -> bool:
        return ch == self.char


@dataclass(frozen=True)
class AnyChar(CharToken):
    """``?``."""

    def matches(self, ch: str) -> bool:
        return ch != "/"


@dataclass(frozen=True)
class CharClass(CharToken):
    """``[...]``: characters and ``a-z`` ranges, negated by a leading ``!`` or ``^``; never
    ``/``."""

    negate: bool
    chars: frozenset[str]
    ranges: tuple[tuple[str, str], ...]

    def matches(self, ch: str) -> bool:
        inside = ch in self.chars or any(lo <= ch <= hi for lo, hi in self.ranges)
        return ch != "/" and inside != self.negate


SegmentPattern = tuple[Union[CharToken, Star], ...]
"""The pattern of one path segment; ``(STAR,)`` matches any segment."""
PathPattern = tuple[Union[SegmentPattern, Star], ...]
"""The pattern of a whole relative path; a ``STAR`` spans zero or more segments."""

P = TypeVar("P")
S = TypeVar("S")


def wildcard_match(
    pattern: Sequence[P | Star], subject: Sequence[S], one: Callable[[P, S], bool]
) -> bool:
    """Whether ``subject`` matches ``pattern`` as a whole, where ``STAR`` matches any run of
    items (none included) and any other item matches the one item ``one`` accepts.

    Greedy from the left; on a mismatch only the last star seen takes one more item. That
    is complete: whatever an earlier star would take, the last one can take as well. Each
    return to the last star moves its start one item on, and between two returns at most
    ``len(pattern)`` items are compared, so this is O(len(pattern) × len(subject)) whatever
    the pattern."""
    p = s = 0
    star_p, star_s = -1, 0
    while s < len(subject):
        item = pattern[p] if p < len(pattern) else None
        if isinstance(item, Star):
            star_p, star_s = p, s
            p += 1
        elif item is not None and one(item, subject[s]):
            p += 1
            s += 1
        elif star_p >= 0:
            star_s += 1
            p, s = star_p + 1, star_s
        else:
            return False
    return all(isinstance(item, Star) for item in pattern[p:])


def _char_matches(token: CharToken, ch: str) -> bool:
    return token.matches(ch)


def _segment_matches(pattern: SegmentPattern, name: str) -> bool:
    return wildcard_match(pattern, name, _char_matches)


def _bracket(pat: str, i: int) -> tuple[CharClass, int] | None:
    """``[...]`` at ``pat[i]`` -> (the class, index after it); None when it does not close.

    As in git, ``]`` right after the opening (or after ``!``/``^``) is a member, a ``-``
    between two characters is a range and a ``-`` at either end a member."""
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
    chars: set[str] = set()
    ranges: list[tuple[str, str]] = []
    k = 0
    while k < len(body):
        if k + 2 < len(body) and body[k + 1] == "-":
            ranges.append((body[k], body[k + 2]))
            k += 3
        else:
            chars.add(body[k])
            k += 1
    return CharClass(negate, frozenset(chars), tuple(ranges)), j + 1


def _split(body: str) -> list[tuple[str, SegmentPattern]]:
    """A pattern body -> (raw text, tokens) per ``/``-separated segment. Runs of ``*`` are one
    ``STAR``; ``\\x`` is the literal ``x`` (``\\/`` still separates: a path has no other
    ``/``, but the segment before it is never ``**``)."""
    segments: list[tuple[str, SegmentPattern]] = []
    tokens: list[CharToken | Star] = []
    raw_start = 0
    i, n = 0, len(body)
    while i <= n:
        c = body[i] if i < n else "/"
        escaped_slash = c == "\\" and body[i + 1 : i + 2] == "/"
        if c == "/" or escaped_slash:
            segments.append((body[raw_start : i + escaped_slash], tuple(tokens)))
            i += 2 if escaped_slash else 1
            raw_start, tokens = i, []
            continue
        if c == "*":
            if not tokens or not isinstance(tokens[-1], Star):
                tokens.append(STAR)
        elif c == "?":
            tokens.append(AnyChar())
        elif c == "[" and (found := _bracket(body, i)) is not None:
            tokens.append(found[0])
            i = found[1]
            continue
        elif c == "\\" and i + 1 < n:
            i += 1
            tokens.append(Char(body[i]))
        else:
            tokens.append(Char(c))
        i += 1
    return segments


def _path_pattern(body: str, anchored: bool) -> PathPattern:
    """The segment pattern of a body: a ``**`` segment spans zero or more segments, one more
    when it ends the pattern (``data/**`` is everything inside ``data``, not ``data``)."""
    segments = _split(body)
    items: list[SegmentPattern | Star] = [] if anchored else [STAR]
    for k, (raw, tokens) in enumerate(segments):
        if raw != "**":
            items.append(tokens)
        elif k == len(segments) - 1:
            items.extend([(STAR,), STAR])
        else:
            items.append(STAR)
    return tuple(items)


@dataclass(frozen=True)
class Rule:
    segments: PathPattern
    negate: bool
    dir_only: bool
    pattern: str

    def matches(self, rel: str) -> bool:
        """Whether the ``/``-separated path ``rel`` (relative to the rule's base) matches."""
        return wildcard_match(self.segments, rel.split("/"), _segment_matches)


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
    return Rule(_path_pattern(body, anchored), negate, dir_only, line)


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
            if rule.matches(rel):
                verdict = not rule.negate
        return verdict


MAX_IGNORE_FILE_BYTES = 1024 * 1024
"""A larger ignore file is not read."""


def read_rules(path: str, base: str) -> RuleSet | None:
    """The RuleSet of a ``.gitignore``-style file, or None when it cannot be read: a regular
    file of at most MAX_IGNORE_FILE_BYTES (a repository's ``.gitignore`` may be a link to
    ``/dev/zero`` or a FIFO; see :func:`~fxls.protocol.files.read_source`)."""
    text = read_source(path, cap=MAX_IGNORE_FILE_BYTES, follow_links=True, errors="replace")
    if isinstance(text, Refused):
        return None
    return RuleSet(base, compile_rules(text.splitlines()))


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
