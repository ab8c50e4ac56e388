"""``fxls check --fix / --unsafe-fixes / --diff``: apply (or show) the fixes of each file.

For each file the capture offers fixes for, every fix-all candidate is sent to the worker as
one rewrite job that computes and verifies each fix, then combines the ones that verified and
verifies the combination again (``fxls.engine.fixes``); the edited text is captured and fixed again
while that reveals more fixes (at most ``MAX_ROUNDS`` rounds). ``--fix`` writes the file (only when it has
not changed on disk since it was read) and captures it again, so what is reported is what is
left; ``--diff`` prints a unified diff and writes nothing. Unsafe fixes (not verified equal)
are applied only with ``--unsafe-fixes``, and fixes that write a ``# fxls:`` directive pinning
what fxls assumed (:data:`PIN_KINDS`) only with ``--pin``. The fixes that could not be made are
kept with their reasons (:class:`fxls.cli.check.run.NotMade`), at their lines in the file as it
is after the run.

A fix is written only into a regular file inside the project root (the folder of the
``pyproject.toml``, or the working directory), reached without a symbolic link: a checked
repository may hold a link to another project's folder, which a glob follows (a walk does
not), and a fix must never rewrite what the link points at (:func:`write_refusal`).
"""

from __future__ import annotations

import difflib
import os
import secrets
import stat
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Literal, TextIO

from fxls.cli.check.config import CodeFilter
from fxls.cli.check.run import Checked, FileWork, NotMade, filter_analysis
from fxls.engine import fixes
from fxls.engine.analyze import (
    AnalysisRequest,
    EngineOptions,
    FileAnalysis,
    JobRunner,
    analyze,
)
from fxls.engine.compilecheck import check_compile
from fxls.protocol.edits import apply_edits
from fxls.protocol.fixkinds import PIN_KINDS
from fxls.protocol.model import FixOutcome
from fxls.protocol.positions import split_lines

FixMode = Literal["fix", "diff"]

MAX_ROUNDS = 5
"""Capture-and-fix rounds per file: a fix may let torch.fx reach the next problem."""

"""Fix kinds that write a ``# fxls:`` directive holding a value fxls guessed: the inputs and
constructor arguments it assumed (FX405, FX408: ``# fxls: x = (B=2, 64)``,
``# fxls: init(...)``) and the default it fixed a flag argument to (FX101:
``# fxls: use_inner = False``). Applied only with ``--pin``: the guess becomes the file's
declared truth, which is for the user to decide. ``leaf`` directives pin no value and apply."""


@dataclass
class FixCounts:
    files: int = 0
    """Files changed (or that would change, with ``--diff``)."""
    applied: int = 0
    not_safe: int = 0
    """Fixes that verified unsafe and were left out (no ``--unsafe-fixes``)."""
    unavailable: int = 0
    pins: int = 0
    """Fixes left out because they pin what fxls assumed (no ``--pin``)."""
    messages: list[str] = field(default_factory=list)

    def text(self, mode: FixMode) -> str:
        verb = "would fix" if mode == "diff" else "fixed"
        parts = [f"{verb} {self.applied} problem{'s' if self.applied != 1 else ''}"]
        if self.files:
            parts[0] += f" in {self.files} file{'s' if self.files != 1 else ''}"
        if self.not_safe:
            parts.append(
                f"{self.not_safe} more fix{'es' if self.not_safe != 1 else ''} not verified safe "
                "(--unsafe-fixes applies them)"
            )
        if self.pins:
            parts.append(
                f"{self.pins} more fix{'es' if self.pins != 1 else ''} would pin values fxls "
                "assumed (--pin applies them)"
            )
        if self.unavailable:
            parts.append(f"{self.unavailable} could not be made (listed above)")
        return "fxls: " + "; ".join(parts)


class Fixer:
    """Applies the fixes of each checked file, one file at a time."""

    def __init__(
        self,
        client: JobRunner,
        options: EngineOptions,
        codes: CodeFilter,
        *,
        mode: FixMode,
        unsafe: bool,
        pin: bool = False,
        max_params: int | None = None,
        diff_out: TextIO | None = None,
        root: str | None = None,
    ) -> None:
        self.client = client
        self.options = options
        self.codes = codes
        self.mode = mode
        self.unsafe = unsafe
        self.pin = pin
        self.max_params = max_params
        self.diff_out = diff_out
        self.root = os.path.abspath(root or os.getcwd())
        """The project root: fixes are written only inside it."""
        self.counts = FixCounts()
        self.not_made: list[tuple[str, NotMade]] = []
        """(path, fix) of every fix that could not be made, in the order of the files."""

    async def apply(self, checked: Checked) -> Checked:
        """Fix one file; returns what to report (the new capture after ``--fix``).

        Fixes can reveal others (torch.fx stops at the first failure of a ``forward``, so the
        next one is seen only once the first is fixed): the file is captured again and fixed
        again, at most ``MAX_ROUNDS`` times, and written (or diffed) once at the end."""
        work, analysis = checked.work, checked.analysis
        if self._in_notebook(work) or analysis.syntax_error is not None:
            return replace(checked, not_made=[])
        text, applied = work.text, 0
        outcomes: list[FixOutcome] = []
        offered: dict[str, fixes.Candidate] = {}
        held: list[fixes.Candidate] = []
        round_text = text
        """The text the last round's candidates and outcomes refer to."""
        for round_ in range(MAX_ROUNDS):
            if round_:
                analysis = filter_analysis(await self._analyze(work.path, text, work), self.codes)
                if analysis.syntax_error is not None:
                    break
            listed = [c for c in fixes.candidates(analysis, text) if c.fix_all]
            held = [c for c in listed if c.kind in PIN_KINDS and not self.pin]
            wanted = [c for c in listed if self.pin or c.kind not in PIN_KINDS]
            offered, round_text = {c.id: c for c in wanted}, text
            if not wanted:
                outcomes = []
                break
            result = await fixes.compute(
                self.client,
                work.path,
                text,
                [c.request() for c in wanted],
                options=self.options,
                combine=True,
                unsafe=self.unsafe,
                max_params=self.max_params,
                extra_inputs=work.inputs,
                init_override=work.init,
                import_root=self.root,
            )
            combined = result.combined
            done = set(combined.fixes) if combined is not None else set()
            outcomes = [o for o in result.outcomes if o.id not in done]
            if combined is None or not fixes.applies(combined, self.unsafe):
                break
            new = apply_edits(text, combined.edits)
            if new == text:
                break
            text, applied = new, applied + len(done)
        self._count(outcomes, held)
        refused = [o for o in outcomes if o.applicability == "unavailable"]

        def finish(result: Checked, shown: str) -> Checked:
            """``result`` with the fixes not made, at their lines in ``shown``."""
            if not refused:
                return replace(result, not_made=[])
            line_in = _line_mapper(round_text, shown)
            not_made = [_not_made(o, offered.get(o.id), line_in) for o in refused]
            self.not_made.extend((work.path, n) for n in not_made)
            return replace(result, not_made=not_made)

        if text == work.text:
            return finish(checked, work.text)
        self.counts.files += 1
        self.counts.applied += applied
        if self.mode == "diff":
            self._diff(work.path, work.text, text)
            return finish(checked, work.text)
        refusal = write_refusal(work.path, self.root)
        if refusal is None and not _write_if_unchanged(work.path, work.text, text):
            refusal = "it changed on disk while fxls fixed it"
        if refusal is not None:
            self.counts.messages.append(f"{work.path}: fixes not written: {refusal}")
            self.counts.files -= 1
            self.counts.applied -= applied
            return finish(checked, work.text)
        again = await self._analyze(work.path, text, work, compiled=self.options.compile_check)
        return finish(Checked(replace(work, text=text), filter_analysis(again, self.codes)), text)

    def _in_notebook(self, work: FileWork) -> bool:
        """A notebook gets no fix: its text is the module of its cells, not the file (said
        once per notebook)."""
        if work.notebook is None:
            return False
        self.counts.messages.append(f"{work.path}: fixes are not made in notebooks")
        return True

    async def _analyze(
        self, path: str, text: str, work: FileWork, *, compiled: bool = False
    ) -> FileAnalysis:
        """The capture of ``text``; with ``compiled``, its compile check too (the report of a
        fixed file; the rounds of fixing need the shapes only)."""
        request = AnalysisRequest(
            path,
            text,
            only=work.only,
            extra_inputs=work.inputs,
            init_override=work.init,
            import_root=self.root,
        )
        analysis = await analyze(self.client, request, options=self.options)
        if compiled:
            await check_compile(self.client, analysis, request, self.options)
        return analysis

    def _count(self, outcomes: list[FixOutcome], held: list[fixes.Candidate]) -> None:
        """The fixes left out in the last round: unsafe (without ``--unsafe-fixes``),
        impossible, or pinning a guess (without ``--pin``)."""
        self.counts.pins += len(held)
        for outcome in outcomes:
            if outcome.applicability == "unavailable":
                self.counts.unavailable += 1
            elif outcome.applicability == "unsafe" and not self.unsafe:
                self.counts.not_safe += 1

    def _diff(self, path: str, old: str, new: str) -> None:
        if self.diff_out is None:
            return
        lines = difflib.unified_diff(
            old.splitlines(keepends=True),
            new.splitlines(keepends=True),
            fromfile=f"a/{path}",
            tofile=f"b/{path}",
        )
        for line in lines:
            self.diff_out.write(line if line.endswith(("\n", "\r")) else line + "\n")


def _not_made(
    outcome: FixOutcome, candidate: fixes.Candidate | None, line_in: Callable[[int], int]
) -> NotMade:
    """A fix that could not be made, titled as it was offered (the worker titles an
    unavailable fix with its id)."""
    if candidate is None:
        return NotMade(None, None, "", outcome.title, outcome.reason or "no reason given")
    return NotMade(
        line_in(candidate.span.line),
        candidate.code,
        candidate.kind,
        candidate.title,
        outcome.reason or "no reason given",
    )


def _line_mapper(old: str, new: str) -> Callable[[int], int]:
    """Maps a 1-based line of ``old`` to the same line in ``new``: an unchanged line to where
    it moved, a changed or removed one to where its replacement starts."""
    if old == new:
        return lambda line: line
    a, b = split_lines(old), split_lines(new)
    blocks = difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()

    def line_in(line: int) -> int:
        index = line - 1
        for tag, i1, i2, j1, _j2 in blocks:
            if i1 <= index < i2:
                moved = j1 + (index - i1) if tag == "equal" else j1
                return max(1, min(moved + 1, len(b)))
        return max(1, min(line, len(b)))

    return line_in


def write_refusal(path: str, root: str) -> str | None:
    """Why fixes may not write ``path`` (None when they may): the real path of the file (every
    link resolved) must be inside the real path of ``root``, and no part of its path below
    ``root`` (below the working directory, when ``root`` is in it) may be a link, the file
    itself included. Links above that are the user's own (a home folder that is a link)."""
    absolute = os.path.abspath(path)
    real_root = os.path.realpath(root)
    real = os.path.realpath(absolute)
    if os.path.commonpath([real_root, real]) != real_root:
        return f"it is outside the project root {root} once links are resolved (it is {real})"
    cwd = os.getcwd()
    inside_cwd = os.path.commonpath([cwd, root]) == cwd
    anchor = cwd if inside_cwd else root
    rel = os.path.relpath(absolute, anchor)
    if rel == os.pardir or rel.startswith(os.pardir + os.sep):
        anchor, rel = root, os.path.relpath(absolute, root)
    here = anchor
    for part in rel.split(os.sep):
        here = os.path.join(here, part)
        if os.path.islink(here):
            return f"it is reached through the symbolic link {here}; fxls writes no fix through one"
    return None


def _open_folder(folder: str) -> int:
    return os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)


def _read_raw(name: str, dir_fd: int, limit: int) -> str | None:
    """The text of the regular file ``name`` in ``dir_fd`` as it is on disk (line endings
    kept), None when it is not a regular file, is a link, is longer than ``limit`` bytes or
    is not UTF-8."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(name, flags, dir_fd=dir_fd)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = f.read(limit + 1)
    if len(data) > limit:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _write_if_unchanged(path: str, expected: str, new: str) -> bool:
    """Replace the regular file ``path`` with ``new`` atomically, if it still holds
    ``expected`` (read with universal newlines: the file's own line endings are kept).

    The folder and the file are opened with ``O_NOFOLLOW``, and the new text is written to a
    fresh file in that same folder (``O_EXCL``) and renamed over the old one, all relative to
    the folder's descriptor: a link swapped in meanwhile is never written through."""
    folder, name = os.path.split(os.path.abspath(path))
    try:
        dir_fd = _open_folder(folder)
    except OSError:
        return False
    try:
        # at most one more byte per line than the text read (\r\n line endings)
        limit = len(expected.encode("utf-8")) + expected.count("\n")
        raw = _read_raw(name, dir_fd, limit)
        if raw is None:
            return False
        if raw != expected:
            if "\r\n" in raw and raw.replace("\r\n", "\n") == expected:
                new = new.replace("\r\n", "\n").replace("\n", "\r\n")
            else:
                return False
        mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode & 0o7777
        _replace(name, new, mode, dir_fd)
    finally:
        os.close(dir_fd)
    return True


def _replace(name: str, text: str, mode: int, dir_fd: int) -> None:
    """``name`` in ``dir_fd`` replaced by a file holding ``text`` with ``mode``."""
    tmp = f".fxls-fix-{secrets.token_hex(8)}"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(tmp, flags, 0o600, dir_fd=dir_fd)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
            os.fchmod(f.fileno(), mode)
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        try:
            os.unlink(tmp, dir_fd=dir_fd)
        except OSError:
            pass
        raise
