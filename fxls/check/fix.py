"""``fxls check --fix / --unsafe-fixes / --diff``: apply (or show) the fixes of each file.

For each file the capture offers fixes for, every fix-all candidate is sent to the worker as
one rewrite job that computes and verifies each fix, then combines the ones that verified and
verifies the combination again (``fxls.fixes``); the edited text is captured and fixed again
while that reveals more fixes (at most ``MAX_ROUNDS`` rounds). ``--fix`` writes the file (only when it has
not changed on disk since it was read) and captures it again, so what is reported is what is
left; ``--diff`` prints a unified diff and writes nothing. Unsafe fixes (not verified equal)
are applied only with ``--unsafe-fixes``.
"""

from __future__ import annotations

import difflib
import os
import tempfile
from dataclasses import dataclass, field, replace
from typing import Literal, TextIO

from fxls import fixes
from fxls.check.config import CodeFilter
from fxls.check.run import Checked, Plan, filter_analysis
from fxls.engine import EngineOptions, FileAnalysis, analyze
from fxls.protocol.edits import apply_edits
from fxls.protocol.model import FixOutcome

FixMode = Literal["fix", "diff"]

MAX_ROUNDS = 5
"""Capture-and-fix rounds per file: a fix may let torch.fx reach the next problem."""


@dataclass
class FixCounts:
    files: int = 0
    """Files changed (or that would change, with ``--diff``)."""
    applied: int = 0
    not_safe: int = 0
    """Fixes that verified unsafe and were left out (no ``--unsafe-fixes``)."""
    unavailable: int = 0
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
        if self.unavailable:
            parts.append(f"{self.unavailable} could not be made")
        return "fxls: " + "; ".join(parts)


class Fixer:
    """Applies the fixes of each checked file, one file at a time."""

    def __init__(
        self,
        client: fixes.RewriteRunner,
        options: EngineOptions,
        codes: CodeFilter,
        *,
        mode: FixMode,
        unsafe: bool,
        max_params: int | None = None,
        diff_out: TextIO | None = None,
    ) -> None:
        self.client = client
        self.options = options
        self.codes = codes
        self.mode = mode
        self.unsafe = unsafe
        self.max_params = max_params
        self.diff_out = diff_out
        self.counts = FixCounts()

    async def apply(self, checked: Checked) -> Checked:
        """Fix one file; returns what to report (the new capture after ``--fix``).

        Fixes can reveal others (torch.fx stops at the first failure of a ``forward``, so the
        next one is seen only once the first is fixed): the file is captured again and fixed
        again, at most ``MAX_ROUNDS`` times, and written (or diffed) once at the end."""
        plan, analysis = checked.plan, checked.analysis
        if analysis.syntax_error is not None:
            return checked
        text, applied = plan.text, 0
        outcomes: list[FixOutcome] = []
        for round_ in range(MAX_ROUNDS):
            if round_:
                analysis = filter_analysis(await self._analyze(plan.path, text, plan), self.codes)
                if analysis.syntax_error is not None:
                    break
            wanted = [c for c in fixes.candidates(analysis, text) if c.fix_all]
            if not wanted:
                outcomes = []
                break
            result = await fixes.compute(
                self.client,
                plan.path,
                text,
                [c.request() for c in wanted],
                options=self.options,
                combine=True,
                unsafe=self.unsafe,
                max_params=self.max_params,
                extra_inputs=plan.inputs,
                init_override=plan.init,
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
        self._count(outcomes)
        if text == plan.text:
            return checked
        self.counts.files += 1
        self.counts.applied += applied
        if self.mode == "diff":
            self._diff(plan.path, plan.text, text)
            return checked
        if not _write_if_unchanged(plan.path, plan.text, text):
            self.counts.messages.append(f"{plan.path} changed on disk while fxls fixed it; skipped")
            self.counts.files -= 1
            self.counts.applied -= applied
            return checked
        again = await self._analyze(plan.path, text, plan)
        return Checked(replace(plan, text=text), filter_analysis(again, self.codes))

    async def _analyze(self, path: str, text: str, plan: Plan) -> FileAnalysis:
        return await analyze(
            self.client,  # type: ignore[arg-type]
            path,
            text,
            options=self.options,
            only=plan.only,
            extra_inputs=plan.inputs,
            init_override=plan.init,
        )

    def _count(self, outcomes: list[FixOutcome]) -> None:
        """The fixes left out in the last round: unsafe (without ``--unsafe-fixes``) or
        impossible."""
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


def _write_if_unchanged(path: str, expected: str, new: str) -> bool:
    """Replace ``path`` with ``new`` atomically, if it still holds ``expected``."""
    try:
        with open(path, encoding="utf-8", newline="") as f:
            raw = f.read()
    except (OSError, UnicodeDecodeError):
        return False
    if raw != expected:
        # read with universal newlines: keep the file's own line endings
        if "\r\n" in raw and raw.replace("\r\n", "\n") == expected:
            new = new.replace("\r\n", "\n").replace("\n", "\r\n")
        else:
            return False
    folder = os.path.dirname(os.path.abspath(path))
    mode = os.stat(path).st_mode
    fd, tmp = tempfile.mkstemp(prefix=".fxls-fix-", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(new)
        os.chmod(tmp, mode & 0o7777)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return True
