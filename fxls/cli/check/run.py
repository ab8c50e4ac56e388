"""One ``fxls check`` run: each file's classes from its AST, captured through one worker, counted.

Files without a module class (and files that do not parse) never reach the worker. Files are
captured two at a time through the same worker; results come back in the order of the files.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import TextIO

from fxls.analysis import parse
from fxls.analysis.notebook import (
    MAX_NOTEBOOK_BYTES,
    NotebookError,
    NotebookModule,
    build,
    file_lines,
    read_ipynb,
)
from fxls.cli.check.config import CodeFilter
from fxls.cli.check.discovery import Target
from fxls.engine import render
from fxls.engine.analyze import (
    AnalysisRequest,
    EngineOptions,
    FileAnalysis,
    JobRunner,
    SlowRules,
    analyze,
)
from fxls.engine.compilecheck import check_compile
from fxls.protocol.files import MAX_SOURCE_BYTES, Refused, read_source
from fxls.protocol.model import Diagnostic, InputSpec, ModuleResult


class UsageError(Exception):
    """Bad command line (exit code 2)."""


@dataclass
class FileWork:
    """What to capture in one file."""

    target: Target
    text: str
    only: list[str] | None
    inputs: dict[str, list[InputSpec]] = field(default_factory=dict)
    init: dict[str, str] = field(default_factory=dict)
    needs_worker: bool = True
    """False when there is nothing to capture (syntax error, no module classes)."""
    found: list[str] = field(default_factory=list)
    """Module classes of the file (to check ``--class`` names)."""
    inputs_taken: set[str] = field(default_factory=set)
    notebook: NotebookModule | None = None
    """For a ``.ipynb`` file: the module of its Python cells (``text``) and where each of its
    lines is in the notebook (reports give cells and lines in cells)."""

    @property
    def path(self) -> str:
        return self.target.path


def file_work(
    target: Target,
    text: str,
    classes: list[str] | None,
    specs: list[InputSpec],
    init: str | None,
) -> FileWork:
    """What to capture in one file: its module classes (AST only), the inputs each class takes."""
    parsed = parse(text)
    only = list(classes) if classes else None
    selected = [c for c in parsed.classes if only is None or c.name in only]
    work = FileWork(target, text, only, needs_worker=parsed.syntax_error is None and bool(selected))
    work.found = [c.name for c in parsed.classes]
    for spec in specs:
        takers = []
        for c in selected:
            fwd = c.effective_forward
            if fwd is None or fwd.accepts_any_keyword or spec.name in [p.name for p in fwd.params]:
                takers.append(c.name)
                work.inputs.setdefault(c.name, []).append(spec)
        if takers:
            work.inputs_taken.add(spec.name)
    if init is not None:
        if len(selected) > 1:
            raise UsageError(
                f"{target.path}: --init needs --class NAME when a file has several classes"
            )
        for c in selected:
            work.init[c.name] = init
    return work


def read_worklist(
    targets: list[Target],
    classes: list[str] | None,
    specs: list[InputSpec],
    init: str | None,
    errors: list[str],
) -> list[FileWork]:
    """Read every target and what to capture in it; unreadable files are added to ``errors``.

    Only regular files up to MAX_SOURCE_BYTES are read (a device, a FIFO or a file that is
    too large is an error, never a read without end); a link is followed only when the file
    was named on the command line, or when a walk or a glob found it leading to a regular file
    inside the folder walked (``Target.follow_link``)."""
    worklist = []
    for target in targets:
        notebook = target.path.endswith(".ipynb")
        text = read_source(
            target.path,
            cap=MAX_NOTEBOOK_BYTES if notebook else MAX_SOURCE_BYTES,
            follow_links=target.explicit or target.follow_link,
        )
        if isinstance(text, Refused):
            errors.append(f"cannot read {target.path}: {text}")
            continue
        module = None
        if notebook:
            try:
                module = build(read_ipynb(text))
            except NotebookError as exc:
                errors.append(f"cannot check {target.path}: {exc}")
                continue
            module.in_file = file_lines(text)
            text = module.text
        work = file_work(target, text, classes, specs, init)
        work.notebook = module
        worklist.append(work)
    return worklist


def validate(worklist: list[FileWork], classes: list[str] | None, specs: list[InputSpec]) -> None:
    """``--class`` names a class of some file; ``--input`` names an input some class takes."""
    for name in classes or []:
        if not any(name in work.found for work in worklist):
            found = sorted({n for work in worklist for n in work.found})
            raise UsageError(f"no module class {name} (found: {', '.join(found) or 'none'})")
    for spec in specs:
        if not any(spec.name in work.inputs_taken for work in worklist):
            raise UsageError(f"--input {spec.name}: no selected class takes an input of that name")


@dataclass
class NotMade:
    """A fix ``--fix`` (or ``--diff``) could not make, and why (text from the worker and the
    checked code: escape it before showing it)."""

    line: int | None
    """In the file as it is after the run (the fixed text once written, else the original)."""
    code: str | None
    kind: str
    title: str
    reason: str


@dataclass
class Checked:
    work: FileWork
    analysis: FileAnalysis
    not_made: list[NotMade] | None = None
    """With ``--fix``/``--diff``: the fixes of this file that could not be made."""

    @property
    def reported(self) -> bool:
        """Shown in the output: named on the command line, or with modules or diagnostics."""
        a = self.analysis
        return self.work.target.explicit or bool(a.modules or a.diagnostics)


def filter_analysis(analysis: FileAnalysis, codes: CodeFilter) -> FileAnalysis:
    """``analysis`` without the diagnostics ``codes`` leaves out (a shallow copy)."""

    def keep(ds: list[Diagnostic]) -> list[Diagnostic]:
        return [d for d in ds if codes.allows(d.code)]

    modules = [dataclasses.replace(m, diagnostics=keep(m.diagnostics)) for m in analysis.modules]
    return dataclasses.replace(analysis, modules=modules, diagnostics=keep(analysis.diagnostics))


async def run_worklist(
    client: JobRunner,
    worklist: list[FileWork],
    options: EngineOptions,
    codes: CodeFilter,
    *,
    concurrency: int = 2,
    started: Callable[[FileWork], None] | None = None,
    import_root: str | None = None,
) -> AsyncIterator[Checked]:
    """Capture the files of ``worklist`` (``concurrency`` at a time), yield results in its order.
    ``import_root`` (the project's folder) is on every job's ``sys.path``, so a file imports
    the project's own modules and packages as the project's scripts do when run from there.

    Once a job reports that the rules file took longer than its time to load, the files that
    start after it go without the rules (each would wait for them again); the rules file itself
    keeps them (its FX361). With ``options.compile_check``, each analysis then gets its compile check
    (FX6xx, :mod:`fxls.engine.compilecheck`)."""
    semaphore = asyncio.Semaphore(max(1, concurrency))
    slow_rules = SlowRules()

    async def one(work: FileWork) -> Checked:
        async with semaphore:
            if started is not None:
                started(work)
            chosen = slow_rules.options_for(options, work.path)
            request = AnalysisRequest(
                work.path,
                work.text,
                only=work.only,
                extra_inputs=work.inputs,
                init_override=work.init,
                import_root=import_root,
            )
            analysis = await analyze(client, request, options=chosen)
            if analysis.rules_too_slow:
                slow_rules.add(chosen.rules)
            if chosen.compile_check:
                await check_compile(client, analysis, request, chosen)
            return Checked(work, filter_analysis(analysis, codes))

    tasks = [asyncio.ensure_future(one(work)) for work in worklist]
    try:
        for task in tasks:
            yield await task
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


# ---------------------------------------------------------------------------------------
# Summary
# ---------------------------------------------------------------------------------------


@dataclass
class Summary:
    files: int = 0
    """Files read."""
    module_files: int = 0
    """Files with at least one module class."""
    statuses: Counter[str] = field(default_factory=Counter)
    severities: Counter[str] = field(default_factory=Counter)
    skipped_paths: int = 0
    seconds: float = 0.0

    def add(self, checked: Checked) -> None:
        a = checked.analysis
        self.files += 1
        if a.modules or a.classes:
            self.module_files += 1
        self.statuses.update(m.status for m in a.modules)
        self.severities.update(d.severity for d in a.diagnostics)

    @property
    def classes(self) -> int:
        return sum(self.statuses.values())

    def text(self) -> str:
        return render.check_summary(
            files=self.files,
            module_files=self.module_files,
            statuses=dict(self.statuses),
            severities=dict(self.severities),
            seconds=self.seconds,
        )


def module_of(analysis: FileAnalysis, diagnostic: Diagnostic) -> ModuleResult | None:
    """The module class a diagnostic belongs to (its own, or the class whose lines hold it)."""
    for m in analysis.modules:
        if diagnostic in m.diagnostics:
            return m
    for info in analysis.classes:
        if info.span.line <= diagnostic.span.line <= info.span.end_line:
            return analysis.module(info.name)
    return None


# ---------------------------------------------------------------------------------------
# Progress
# ---------------------------------------------------------------------------------------


class Progress:
    """A ``\\r``-updated line on stderr for runs over ``delay`` seconds, only on a terminal.

    Everything else written to the terminal during the run goes through :meth:`write` (or
    :meth:`hide` first), so the line never mixes with results or log messages.
    """

    def __init__(
        self,
        total: int,
        stream: TextIO | None = None,
        *,
        enabled: bool | None = None,
        delay: float = 1.0,
        interval: float = 0.1,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        if enabled is None:
            try:
                enabled = self.stream.isatty()
            except (AttributeError, ValueError):
                enabled = False
        self.enabled = enabled
        self.total = total
        self.done = 0
        self.current = ""
        self.delay = delay
        self.interval = interval
        self.clock = clock or time.monotonic
        self.start = self.clock()
        self.shown = False
        self._task: asyncio.Task[None] | None = None

    def line(self) -> str:
        elapsed = self.clock() - self.start
        text = render.progress_text(self.done, self.total, self.current, elapsed)
        try:
            width = os.get_terminal_size(self.stream.fileno()).columns or 80
        except (AttributeError, OSError, ValueError):
            width = 80
        return render.truncate(text, max(width - 1, 10))

    def draw(self) -> None:
        if not self.enabled or self.clock() - self.start < self.delay:
            return
        self.stream.write("\r\x1b[K" + self.line())
        self.stream.flush()
        self.shown = True

    def hide(self) -> None:
        if self.shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self.shown = False

    def write(self, out: TextIO, text: str) -> None:
        """Write ``text`` to ``out`` (stdout, say) without breaking the progress line."""
        self.hide()
        out.write(text)
        out.flush()
        self.draw()

    def begin(self, current: str) -> None:
        self.current = current
        self.draw()

    def finish_one(self) -> None:
        self.done += 1
        self.draw()

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            self.draw()

    def __enter__(self) -> Progress:
        if self.enabled:
            self._task = asyncio.ensure_future(self._tick())
        return self

    def __exit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
        self.hide()
