"""One editor session: settings, open documents, the worker, and the captures behind them.

The handlers in ``fxls.lsp.server`` call into :class:`Session`; it schedules one capture per
document version (debounced, newer versions cancel older ones), keeps the worker running,
publishes diagnostics, asks the client to refresh hints and lenses, and answers feature
requests from the cached analysis through the pure functions in ``fxls.lsp.features``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import hashlib
import itertools
import logging
import os
import sys
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Coroutine
from functools import partial
from typing import Any, TypeVar

from lsprotocol import types
from pygls.lsp.server import LanguageServer

from fxls.analysis import parse, workspace
from fxls.engine import analyze as engine
from fxls.engine import compilecheck, fixes, incremental
from fxls.engine.settings import (
    SECTION,
    Settings,
    interpreter_path,
    merge_settings,
    parse_settings,
    parse_trusted,
    protected_differences,
    split_protected,
)
from fxls.engine.store import ResultStore
from fxls.engine.store import enabled as store_enabled
from fxls.engine.workerclient import WorkerClient
from fxls.lsp.documents import MAX_DOCUMENT_CHARS, Analysed, Document, DocumentStore
from fxls.lsp.features import (
    code_actions,
    code_lens,
    convert,
    diagnostics,
    hover,
    inlay_hints,
    markdown,
    pass_hover,
    trace,
)
from fxls.lsp.features.convert import Elsewhere, Published
from fxls.lsp.features.graph import graph_page
from fxls.lsp.notebooks import Notebook, NotebookCell, NotebookStore, View, document_view
from fxls.protocol import catalogue
from fxls.protocol.files import Refused
from fxls.protocol.model import FixOutcome, FixRequest, ReadyInfo, Span

logger = logging.getLogger(__name__)
T = TypeVar("T")

CODE_ACTION_KINDS = code_actions.KINDS
"""The code action kinds fxls offers: quickfix, refactor.rewrite, source.fixAll.fxls."""

TRACE_COMMAND = trace.COMMAND
"""``workspace/executeCommand`` "trace class at cursor": one ``TextDocumentPositionParams``."""

PROGRESS_DELAY_S = 0.5
"""Captures that take longer than this show work-done progress."""
PARENT_POLL_S = 2.0
HOVER_SAMPLES = 10_000
PRELIMINARY_NOTE = (
    "preliminary: sizes of one run on meta tensors at example sizes; fxls is capturing the "
    "file for named dimensions and diagnostics"
)
"""The hover's note on the shapes of a preview job (``FileAnalysis.provenance``)."""

UNTRUSTED_MESSAGE = (
    "fxls shows no shapes or diagnostics here because this workspace is not trusted: fxls runs "
    "your module files (in a sandbox) to capture them. In VS Code, trust this folder "
    "(Workspace Trust: 'Manage Workspace Trust' in the Command Palette). In other editors, "
    'start fxls with {"trusted": true} in initializationOptions.'
)


class Session:
    """Server state: settings, documents, the worker and capture tasks."""

    def __init__(self, lsp: LanguageServer) -> None:
        self.lsp = lsp
        self.documents = DocumentStore()
        self.notebooks = NotebookStore(self.documents)
        """Open notebooks: each is analysed as one document of ``documents`` (its module)."""
        self.settings = Settings()
        self.trusted = True
        self.root: str | None = None
        self.init_settings: dict[str, Any] = {}
        self.worker: WorkerClient | None = None
        self.worker_ready: ReadyInfo | None = None
        """What the running worker reported at start (interpreter, torch, isolation)."""
        self.worker_identity = ""
        """The worker's interpreter and torch version (part of every cache key)."""
        self.store: ResultStore | None = ResultStore() if store_enabled() else None
        """Analyses of earlier sessions (``FXLS_STORE=0``: none; ``fxls.storeResults``)."""
        self.cache: incremental.CaptureCache | None = (
            incremental.CaptureCache() if incremental.enabled() else None
        )
        """Captures of unchanged classes, by key (``FXLS_CAPTURE_CACHE=0``: none)."""
        self.compile_cache: compilecheck.CompileCache | None = (
            compilecheck.CompileCache() if incremental.enabled() else None
        )
        """Compile checks of unchanged texts, by key (off with the capture cache)."""
        self._worker_python: str | None = None
        self.prestarted: WorkerClient | None = None
        """A zygote ``fxls serve`` started before the LSP libraries loaded: the worker when
        the workspace is trusted and ``fxls.python`` names no other interpreter, else closed."""
        self._worker_lock: asyncio.Lock | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._asking: set[asyncio.Task[Any]] = set()
        """Requests to the client in flight (refreshes)."""
        self._tokens = itertools.count(1)
        self.reading_workspace = False
        """A scan of the workspace for call sites is running (``read_workspace``)."""
        self.workspace_read_at: float | None = None
        self.hover_seconds: deque[float] = deque(maxlen=HOVER_SAMPLES)
        self.fix_outcomes: dict[str, tuple[int | None, dict[str, FixOutcome]]] = {}
        """Per document: the version and the fixes the worker computed for it."""
        self._candidates: dict[str, tuple[Any, list[fixes.Candidate]]] = {}
        """Per document: the analysis and the fixes it offers (listed on every cursor move)."""
        self._debouncing: set[asyncio.Task[Any]] = set()
        """Capture tasks that still wait out the debounce."""
        self.heap_frozen = False
        """Whether what the server had built by its first analysis was frozen (``gc.freeze``)."""
        self.hover_style: hover.Style = "table"
        """``block`` for clients whose hover shows Markdown tables raw (Neovim)."""
        self.slow_rules = engine.SlowRules()
        """Rules file texts that took longer than their time to load."""
        self.refused_rules: str | None = None
        """Why the rules file was last found unusable (not a regular file, too large)."""
        self._told_refused_rules: str | None = None

    # -- helpers -------------------------------------------------------------------------

    @property
    def encoding(self) -> convert.Encoding:
        return convert.encoding_name(self.lsp.workspace.position_encoding)

    def log(self, message: str, kind: types.MessageType = types.MessageType.Info) -> None:
        logger.info("%s", message)
        with contextlib.suppress(Exception):
            self.lsp.window_log_message(types.LogMessageParams(type=kind, message=message))

    def show(self, message: str, kind: types.MessageType) -> None:
        with contextlib.suppress(Exception):
            self.lsp.window_show_message(types.ShowMessageParams(type=kind, message=message))

    def safely(self, feature: str, call: Callable[[], T], default: T) -> T:
        """Run one feature; a failure is logged and answered with ``default``."""
        try:
            return call()
        except Exception as exc:
            logger.exception("%s failed", feature)
            self.log(
                f"fxls: {feature} failed: {type(exc).__name__}: {exc}", types.MessageType.Error
            )
            return default

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _capability(self, *path: str) -> Any:
        obj: Any = self.lsp.client_capabilities
        for name in path:
            obj = getattr(obj, name, None)
            if obj is None:
                return None
        return obj

    # -- lifecycle -----------------------------------------------------------------------

    def initialize(self, params: types.InitializeParams) -> None:
        """Adopt trust and settings from ``initializationOptions``; watch the editor process."""
        options = params.initialization_options
        client = params.client_info.name if params.client_info is not None else None
        self.hover_style = hover.style_for_client(client)
        self.trusted = parse_trusted(options)
        if isinstance(options, dict):
            self.init_settings = merge_settings(
                {}, {k: v for k, v in options.items() if k != "trusted"}
            )
            self.apply_settings({})
        self.root = self.lsp.workspace.root_path
        if params.process_id:
            self.spawn(self.watch_parent(params.process_id))
        if self.trusted:
            # torch takes a second or more to import: start now, not after the handshake
            self.spawn(self.warm_up())
            # and read the workspace's files for call sites meanwhile (seconds in a large one)
            self.spawn(self.read_workspace())
        else:
            self.spawn(self._drop_prestarted())

    async def initialized(self) -> None:
        """Tell an untrusted workspace why nothing shows; else pull settings (a worker in
        another interpreter, ``fxls.python``, replaces the one ``initialize`` started)."""
        if not self.trusted:
            self.show(UNTRUSTED_MESSAGE, types.MessageType.Info)
            return
        await self.pull_settings()
        self.spawn(self.warm_up())

    # -- settings ------------------------------------------------------------------------

    def apply_settings(self, data: Any) -> None:
        """Adopt a ``workspace/configuration`` answer on top of the initializationOptions,
        without its protected keys (``settings.PROTECTED``); problems become one warning,
        never an error."""
        data, protected = split_protected(data)
        ignored = protected_differences(protected, self.settings)
        if ignored:
            self.log(
                f"fxls ignores {', '.join(ignored)} from the editor's configuration: the "
                "sandbox settings are read once, from initializationOptions (in VS Code: user "
                "settings; the server restarts when they change)",
                types.MessageType.Warning,
            )
        new, problems = parse_settings(merge_settings(self.init_settings, data))
        if problems:
            self.show("fxls settings: " + "; ".join(problems), types.MessageType.Warning)
        old = self.settings
        self.settings = new
        if new != old:
            self.fix_outcomes.clear()  # verdicts depend on the settings (maxParams, limits)
            for doc in self.documents:
                self.schedule(doc, 0.0)
            self.refresh_views()

    async def configuration_changed(self, settings: Any) -> None:
        """``didChangeConfiguration``: settings pushed with it, or pulled when not."""
        if isinstance(settings, dict) and isinstance(settings.get(SECTION), dict):
            self.apply_settings(settings[SECTION])
        else:
            await self.pull_settings()

    async def pull_settings(self) -> None:
        """Ask the client for the ``fxls`` section (``workspace/configuration``)."""
        if not self._capability("workspace", "configuration"):
            return
        try:
            result = await self.lsp.workspace_configuration_async(
                types.ConfigurationParams(items=[types.ConfigurationItem(section=SECTION)])
            )
        except Exception as exc:
            logger.info("workspace/configuration failed: %s", exc)
            return
        if result and result[0] is not None:
            self.apply_settings(result[0])

    def engine_options(self, for_path: str | None = None) -> engine.EngineOptions:
        """The options of a job for ``for_path`` (rules known to be too slow left out)."""
        s = self.settings
        options = engine.EngineOptions(
            limits=s.limits.to_protocol(),
            isolation=s.isolation.to_protocol(),
            meta_init=s.capture.meta_init,
            symbolic=s.capture.symbolic,
            rules=self._rules(),
            compile_check=s.compile_check.enabled,
            compile_max_params=s.code_actions.max_params,
        )
        return self.slow_rules.options_for(options, for_path)

    def _rules(self) -> Any:
        """The rules file as text (the editor's when it is open); never executed here. Reads
        the disk: runs in a thread (``engine_options``), never on the event loop; a rules file
        it cannot use is kept in ``refused_rules`` for :meth:`_note_refused_rules`."""
        path = engine.rules_path(self.root, self.settings.code_actions.rules_file)
        if path is None or not self.trusted:
            return None
        open_doc = next((d for d in self.documents if os.path.abspath(d.path) == path), None)
        rules = engine.read_rules(path, open_doc.text if open_doc is not None else None)
        refused = isinstance(rules, Refused)
        self.refused_rules = f"{os.path.basename(path)}: {rules}" if refused else None
        return None if refused else rules

    def _note_refused_rules(self) -> None:
        """Say once (per reason) that the rules file is not used, and why."""
        refused = self.refused_rules
        if refused is None or refused == self._told_refused_rules:
            return
        self._told_refused_rules = refused
        self.show(
            f"fxls: the rules file is not used: {markdown.plain(refused, 300)}",
            types.MessageType.Warning,
        )

    def _note_slow_rules(self, options: engine.EngineOptions) -> None:
        """After a job whose rules file took too long to load: leave that text out from now."""
        rules = options.rules
        if rules is None or not self.slow_rules.add(rules):
            return
        name = markdown.plain(os.path.basename(rules.path), 200)
        self.log(
            f"fxls: the rules file {name} took longer than its time to load (FX361); its rules "
            "are left out of captures until it changes",
            types.MessageType.Warning,
        )

    # -- worker --------------------------------------------------------------------------

    def python(self) -> str | None:
        """The interpreter ``fxls.python`` names (a relative path from the workspace root), or
        None for the server's own."""
        return interpreter_path(self.settings.python, self.root)

    async def ensure_worker(self) -> WorkerClient:
        if self._worker_lock is None:
            self._worker_lock = asyncio.Lock()
        async with self._worker_lock:
            python = self.python()
            if self.worker is not None and self._worker_python == python:
                return self.worker
            if self.worker is not None:
                await self.close_worker()
            early = self.prestarted
            if early is not None and os.path.realpath(early.python) == os.path.realpath(
                python or sys.executable
            ):
                self.prestarted = None
                early.set_log(self._worker_log)
                client = early
            else:
                await self._drop_prestarted()
                client = WorkerClient(python, log=self._worker_log)
            try:
                info = await client.start()
            except BaseException:
                with contextlib.suppress(Exception):
                    await client.close()
                raise
            self.worker, self._worker_python = client, python
            self.worker_ready = info
            self.worker_identity = f"{info.python}|{info.torch_version}|{info.protocol}"
            missing = ", ".join(f"{k} ({why})" for k, why in info.isolation_missing.items())
            self.log(
                f"fxls worker ready: {info.python}, torch {info.torch_version}, "
                f"isolation: {', '.join(info.isolation_available) or 'none'}"
                + (f"; unavailable: {missing}" if missing else "")
                + f" (warm-up {info.warm_s:.2f} s)"
            )
            return client

    async def _drop_prestarted(self) -> None:
        early, self.prestarted = self.prestarted, None
        if early is not None:
            await early.close()

    async def warm_up(self) -> None:
        """Start the worker before the first document needs it."""
        try:
            await self.ensure_worker()
        except Exception as exc:
            self.log(f"fxls worker could not start: {exc}", types.MessageType.Error)

    def _worker_log(self, message: str, *args: Any) -> None:
        self.log(f"fxls worker: {message}", types.MessageType.Log)

    async def close_worker(self) -> None:
        worker, self.worker = self.worker, None
        if worker is not None:
            with contextlib.suppress(Exception):
                await worker.close()

    # -- captures ------------------------------------------------------------------------

    def schedule(self, doc: Document, delay: float) -> None:
        """Capture ``doc`` at its current version after ``delay``; cancels older jobs."""
        if not self.trusted or doc.closed:
            return
        if doc.too_large:
            if doc.task is not None:
                doc.task.cancel()
            self.publish_too_large(doc)
            return
        if doc.task is not None and not doc.task.done():
            if doc.task_version == doc.version and delay > 0:
                return
            doc.task.cancel()
        doc.task_version = doc.version
        doc.task = self.spawn(self.capture(doc, doc.version, delay))

    async def capture(self, doc: Document, version: int | None, delay: float) -> None:
        if delay > 0:
            task = asyncio.current_task()
            if task is not None:
                self._debouncing.add(task)
            try:
                await asyncio.sleep(delay)
            finally:
                if task is not None:
                    self._debouncing.discard(task)
        text = doc.text
        if doc.result is None:
            await self._show_stored(doc, text, version)
        first = self.spawn(self._show_preview(doc, text, version))
        progress = self.spawn(self._progress(doc))
        try:
            analysis = await self._analyze(doc, text, version)
        finally:
            progress.cancel()
            first.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await progress
        if doc.closed or doc.too_large or analysis is None:
            return
        if getattr(analysis, "outcome", "") == "cancelled":
            return
        done = Analysed(version=version, text=text, analysis=analysis)
        previous = doc.result
        if analysis.syntax_error is not None and previous and previous.analysis.modules:
            doc.syntax = done
        else:
            doc.syntax = None
            doc.set_result(done)
        try:
            self.publish(doc)  # written before the records are expanded, with no await between
        finally:
            analysis.expand()
        self.refresh_views()
        self._freeze_heap()
        if not analysis.evidence_complete and self._refine_later():
            return  # captured again with the whole workspace: its compile check runs then
        await self._compile_check(doc, text, version, analysis)
        if text == doc.saved_text:
            self.spawn(self._store(doc.path, text, analysis))

    def _freeze_heap(self) -> None:
        """Once, after the first analysis is published: what the server has built by then (its
        modules, the protocol's types, their caches) lives as long as the server, so it is moved
        out of the garbage collector's sight (``gc.freeze``). A full collection then walks only
        what later edits made: with a ResNet-50 file open it took 23 ms (some edit or hover
        waited for it), frozen 0.6 ms."""
        if self.heap_frozen:
            return
        self.heap_frozen = True
        gc.collect()
        gc.freeze()

    async def _compile_check(
        self, doc: Document, text: str, version: int | None, analysis: engine.FileAnalysis
    ) -> None:
        """After the shapes are published: the compile check (FX6xx, the lens's graph count)
        of the same version, published again when it is done. A newer version cancels it
        with the capture's task."""
        if not self.settings.compile_check.enabled or not compilecheck.compilable(analysis):
            return
        try:
            worker = await self.ensure_worker()
            options = await asyncio.to_thread(self.engine_options, doc.path)
            request = engine.AnalysisRequest(doc.path, text, version=version, root=self.root)
            cache = self.compile_cache
            if cache is not None:
                cache.worker = self.worker_identity
            await compilecheck.check_compile(worker, analysis, request, options, cache)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the check is a bonus: the shapes stay as published
            logger.exception("compile check of %s failed", doc.path)
            self.log(f"fxls: the compile check of {doc.path} failed: {exc}")
            return
        current = doc.result
        if doc.closed or current is None or current.analysis is not analysis:
            return
        self.publish(doc)
        self.refresh_views()

    # -- the store of earlier sessions ----------------------------------------------------

    def _store_key(self, path: str, text: str) -> str | None:
        """The store key of ``text`` (blocking: reads settings and the workspace listing)."""
        if self.store is None or not self.settings.store_results:
            return None
        python = self.python() or sys.executable
        return self.store.key(path, text, self.engine_options(path), python, self.root)

    async def _show_stored(self, doc: Document, text: str, version: int | None) -> None:
        """Before the first capture of ``doc``: publish what an earlier session stored for this
        very text, marked as stored, while the worker starts and captures it again."""
        store = self.store
        try:
            key = await asyncio.to_thread(self._store_key, doc.path, text)
            stored = (
                None
                if key is None or store is None
                else await asyncio.to_thread(store.load, key, doc.path, text)
            )
        except Exception as exc:  # the store is a bonus: never in the way of a capture
            logger.info("reading the store failed: %s", exc)
            return
        if stored is None or doc.result is not None or doc.closed or doc.version != version:
            return
        stored.version = version
        doc.set_result(Analysed(version=version, text=text, analysis=stored))
        self.publish(doc)
        self.refresh_views()

    async def _show_preview(self, doc: Document, text: str, version: int | None) -> None:
        """While a new worker imports what captures need: show the shapes of a ``preview`` job
        (one run on meta tensors at example sizes), marked as preliminary, until the capture
        of the same version replaces them. The editor is asked to refresh its inlay hints and
        code lenses; no diagnostics are published (a preview has none: the first
        ``publishDiagnostics`` of a document stays the capture's). Nothing once the worker
        takes captures, nor when something is shown already (a stored analysis) or
        ``fxls.preliminaryShapes`` is off."""
        if doc.result is not None or not self.settings.preliminary_shapes:
            return
        try:
            worker = await self.ensure_worker()
            if worker.captures_ready:
                return
            options = await asyncio.to_thread(self.engine_options, doc.path)
            request = engine.AnalysisRequest(doc.path, text, version=version, root=self.root)
            first = await engine.preview(worker, request, options)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bonus: never in the way of the capture
            self.log(f"fxls: the preview of {doc.path} failed: {exc!r}", types.MessageType.Log)
            return
        if first is None or doc.result is not None or doc.closed or doc.version != version:
            return
        doc.set_result(Analysed(version=version, text=text, analysis=first))
        self.refresh_views()

    async def _store(self, path: str, text: str, analysis: engine.FileAnalysis) -> None:
        """Keep a fresh analysis of the text on disk for the next session."""
        store = self.store
        if (
            store is None
            or analysis.provisional
            or analysis.outcome in ("cancelled", "worker_died")
        ):
            return
        try:
            key = await asyncio.to_thread(self._store_key, path, text)
            if key is not None:
                await asyncio.to_thread(store.save, key, analysis)
        except Exception as exc:
            logger.info("writing the store failed: %s", exc)

    def _refine_later(self) -> bool:
        """An analysis went ahead before the workspace was read: read it (again, when files
        changed since the last read) and capture such documents again when done. Returns
        whether that capture will come: not when the workspace was read less than
        ``LISTING_TTL_S`` ago (the analysis then stays as it is, and its compile check runs)."""
        if self.reading_workspace:
            return True  # the running read captures such documents again when it ends
        last = self.workspace_read_at
        if last is not None and time.monotonic() - last < workspace.LISTING_TTL_S:
            return False
        self.spawn(self.read_workspace())
        return True

    async def _analyze(self, doc: Document, text: str, version: int | None) -> Any:
        """The engine's FileAnalysis; worker and internal failures become an FX508."""
        try:
            worker = await self.ensure_worker()
            options = await asyncio.to_thread(self.engine_options, doc.path)  # reads the disk
            self._note_refused_rules()
            result = await engine.analyze(
                worker,
                engine.AnalysisRequest(
                    doc.path, text, version=version, root=self.root, copies_kept=True
                ),
                options=options,
                cache=self.cache,
                worker=self.worker_identity,
            )
            if result.rules_too_slow:
                self._note_slow_rules(options)
            return result
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            logger.exception("capture of %s failed", doc.path)
            self.log(f"fxls could not capture {doc.path}: {exc}", types.MessageType.Error)
            first = text.split("\n", 1)[0]
            failed = catalogue.FX508(Span(1, 0, 1, len(first)), reason=str(exc))
            diag = failed.diagnostic(notebook=doc.path.endswith(".ipynb"))
            return engine.FileAnalysis(
                path=doc.path, version=version, diagnostics=[diag], outcome="worker_died"
            )

    async def _progress(self, doc: Document) -> None:
        """Work-done progress for a capture that takes longer than PROGRESS_DELAY_S."""
        await asyncio.sleep(PROGRESS_DELAY_S)
        if not self._capability("window", "work_done_progress"):
            return
        token = f"fxls-capture-{next(self._tokens)}"
        await self.lsp.work_done_progress.create_async(token)
        name = os.path.basename(doc.path)
        try:
            self.lsp.work_done_progress.begin(
                token, types.WorkDoneProgressBegin(title="fxls", message=f"capturing {name}")
            )
            await asyncio.Event().wait()
        finally:
            self.lsp.work_done_progress.end(token, types.WorkDoneProgressEnd(message="done"))

    async def read_workspace(self) -> None:
        """Read the workspace's files for calls of module classes (seconds in a large one),
        with progress; captures do not wait for it. Then capture again the open documents
        whose analysis went ahead before every file was read."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[int, int]] = asyncio.Queue()

        def progress(done: int, total: int) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, (done, total))

        if self.reading_workspace:
            return
        self.reading_workspace = True
        reporter = self.spawn(self._report_scan(queue))
        try:
            await asyncio.to_thread(workspace.prescan, self.root, progress)
        except Exception as exc:  # evidence is a bonus: a workspace that cannot be read
            logger.info("reading the workspace failed: %s", exc)
        finally:
            self.reading_workspace = False
            self.workspace_read_at = time.monotonic()
            reporter.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reporter
        for doc in list(self.documents):
            if doc.result is not None and not doc.result.analysis.evidence_complete:
                self.schedule(doc, 0.0)

    async def _report_scan(self, queue: asyncio.Queue[tuple[int, int]]) -> None:
        """Work-done progress for a scan of the workspace that reads many files."""
        done, total = await queue.get()
        if total < workspace.SCAN_BATCH or not self._capability("window", "work_done_progress"):
            return
        token = f"fxls-workspace-{next(self._tokens)}"
        await self.lsp.work_done_progress.create_async(token)
        message = f"reading the workspace for calls of module classes: {total} files"
        self.lsp.work_done_progress.begin(
            token, types.WorkDoneProgressBegin(title="fxls", message=message, percentage=0)
        )
        try:
            while done < total:
                done, total = await queue.get()
                report = types.WorkDoneProgressReport(
                    message=f"{done} of {total} files", percentage=100 * done // max(total, 1)
                )
                self.lsp.work_done_progress.report(token, report)
        finally:
            end = types.WorkDoneProgressEnd(message="workspace read")
            self.lsp.work_done_progress.end(token, end)

    def publish(self, doc: Document) -> None:
        notebook = self.notebooks.get(doc.uri)
        if notebook is not None:
            self._publish_cells(doc, notebook)
            return
        result = doc.syntax or doc.result
        mapper = (doc.syntax_map() if doc.syntax else doc.line_map()).to_current
        items: list[types.Diagnostic] = []
        if result is not None:
            found = result.analysis.diagnostics
            items = self.safely(
                "diagnostics",
                lambda: diagnostics.lsp_diagnostics(
                    found, doc.uri, doc.lines, self.encoding, mapper
                ),
                [],
            )
        self.lsp.text_document_publish_diagnostics(
            types.PublishDiagnosticsParams(uri=doc.uri, diagnostics=items, version=doc.version)
        )

    def _publish_cells(self, doc: Document, notebook: Notebook) -> None:
        """A notebook's diagnostics, each on its cell's URI at the cell's line; cells that
        had some and have none now (or are gone) are cleared."""
        result = doc.syntax or doc.result
        found = result.analysis.diagnostics if result is not None else []
        line_map = doc.syntax_map() if doc.syntax else doc.line_map()
        sent: set[str] = set()
        for cell in notebook.cells:
            view = notebook.cell_view(cell.uri)
            if view is None:
                continue
            view.line_map = line_map
            empty: list[types.Diagnostic] = []
            cell_items = partial(self._cell_diagnostics, found, view, notebook.locator(line_map))
            items = self.safely("diagnostics", cell_items, empty)
            if items or cell.uri in notebook.published:
                self.lsp.text_document_publish_diagnostics(
                    types.PublishDiagnosticsParams(uri=cell.uri, diagnostics=items)
                )
            if items:
                sent.add(cell.uri)
        for gone in notebook.published - sent - {c.uri for c in notebook.cells}:
            self.lsp.text_document_publish_diagnostics(
                types.PublishDiagnosticsParams(uri=gone, diagnostics=[])
            )
        notebook.published = sent

    def _cell_diagnostics(
        self, found: list[Any], view: View, elsewhere: Elsewhere
    ) -> list[types.Diagnostic]:
        """The diagnostics of one cell's view, their messages in cells' words; related
        information in another cell is on that cell's URI."""
        where = Published(view.uri, view.lines, view.to_current, elsewhere)
        items = diagnostics.diagnostics_on(found, where, self.encoding)
        for item in items:
            item.message = view.relabel(item.message)
            for related in item.related_information or ():
                related.message = view.relabel(related.message)
        return items

    def publish_too_large(self, doc: Document) -> None:
        """One information diagnostic, and one message per document, instead of a capture."""
        notebook = self.notebooks.get(doc.uri)
        found = diagnostics.too_large(len(doc.text), MAX_DOCUMENT_CHARS, notebook is not None)
        uri, version = doc.uri, doc.version
        if notebook is not None and notebook.cells:  # on the first cell: editors show no notebook
            uri, version = notebook.cells[0].uri, None
            notebook.published.add(uri)
        self.lsp.text_document_publish_diagnostics(
            types.PublishDiagnosticsParams(uri=uri, diagnostics=[found], version=version)
        )
        if not doc.told_too_large:
            doc.told_too_large = True
            name = os.path.basename(doc.path)
            self.show(f"{name}: {found.message}", types.MessageType.Info)

    def refresh_views(self) -> None:
        """Ask the client to re-request inlay hints and code lenses (when it supports it)."""
        if self._capability("workspace", "inlay_hint", "refresh_support"):
            self._ask(self.lsp.workspace_inlay_hint_refresh_async(None))
        if self._capability("workspace", "code_lens", "refresh_support"):
            self._ask(self.lsp.workspace_code_lens_refresh_async(None))

    def _ask(self, request: Any) -> None:
        """Send a request to the client without waiting for its answer."""
        task = self.spawn(self._quiet(request))
        self._asking.add(task)
        task.add_done_callback(self._asking.discard)

    @staticmethod
    async def _quiet(awaitable: Any) -> None:
        with contextlib.suppress(Exception):
            await awaitable

    async def watch_parent(self, pid: int) -> None:
        """Exit when the editor process dies (``processId`` from initialize)."""
        while True:
            await asyncio.sleep(PARENT_POLL_S)
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                logger.info("editor process %s is gone; exiting", pid)
                await self.close_worker()
                os._exit(0)
            except PermissionError:
                pass

    async def stop(self) -> None:
        for doc in self.documents:
            self.documents.close(doc.uri)
        if self._asking:
            # Let the client answer: pygls logs an error for an answer to a cancelled request.
            await asyncio.wait(list(self._asking), timeout=1.0)
        tasks = [t for t in self._tasks if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=5.0)
        await self._drop_prestarted()
        await self.close_worker()

    def graph(self, uri: Any, cls: Any) -> dict[str, Any]:
        """The ``fxls/graph`` answer for class ``cls`` of the open document ``uri``."""
        view = self.view(uri) if isinstance(uri, str) else None
        return graph_page(view.doc if view is not None else None, str(uri), cls, self.trusted)

    def stats(self) -> dict[str, Any]:
        """What ``fxls/stats`` answers: server-side state a client cannot observe otherwise."""
        worker, ready = self.worker, self.worker_ready
        return {
            "pid": os.getpid(),
            "workerPid": worker.pid if worker is not None else None,
            "documents": [
                {
                    "uri": doc.uri,
                    "version": doc.version,
                    "length": len(doc.text),
                    "sha256": hashlib.sha256(doc.text.encode("utf-8", "surrogatepass")).hexdigest(),
                    "resultVersion": doc.result.version if doc.result else None,
                    "busy": doc.task is not None and not doc.task.done(),
                }
                for doc in self.documents
            ],
            "hoverSeconds": list(self.hover_seconds),
            "trusted": self.trusted,
            "worker": None
            if ready is None or worker is None
            else {
                "python": ready.python,
                "torch": ready.torch_version,
                "isolation": list(ready.isolation_available),
                "unavailable": dict(ready.isolation_missing),
            },
            "cache": self.cache.summary() if self.cache is not None else None,
            "compileCache": self.compile_cache.summary()
            if self.compile_cache is not None
            else None,
        }

    # -- document events -----------------------------------------------------------------

    def did_open(self, uri: str, text: str, version: int | None) -> None:
        self.schedule(self.documents.open(uri, text, version), 0.0)

    def did_change(self, params: types.DidChangeTextDocumentParams) -> None:
        doc = self.documents.get(params.text_document.uri)
        if doc is None:
            return
        text = doc.text
        for change in params.content_changes:
            text = convert.apply_change(text, change, self.encoding)
        doc.update(text, params.text_document.version)
        self.schedule(doc, self.settings.debounce_ms / 1000)

    def did_save(self, uri: str) -> None:
        doc = self.documents.get(uri)
        if doc is not None:
            doc.saved_text = doc.text
            done = doc.result
            if done is not None and done.text == doc.text and not done.analysis.provisional:
                self.spawn(self._store(doc.path, done.text, done.analysis))
        rules = engine.rules_path(self.root, self.settings.code_actions.rules_file)
        if doc is not None and rules is not None and os.path.abspath(doc.path) == rules:
            for other in self.documents:  # the rules changed: match them again
                if other is not doc:
                    self.fix_outcomes.pop(other.uri, None)
                    self.schedule(other, 0.0)
        if (
            doc is not None
            and (doc.result is None or doc.stale)
            and doc.task_version != doc.version
        ):
            self.schedule(doc, 0.0)

    def did_close(self, uri: str) -> None:
        self._candidates.pop(uri, None)
        self.fix_outcomes.pop(uri, None)
        if self.documents.close(uri) is not None:
            self.lsp.text_document_publish_diagnostics(
                types.PublishDiagnosticsParams(uri=uri, diagnostics=[])
            )

    # -- notebook events (LSP 3.17 notebook synchronization) -----------------------------

    def notebook_opened(self, params: types.DidOpenNotebookDocumentParams) -> None:
        """A notebook: its Python cells become one module, captured as one document."""
        item = params.notebook_document
        texts = {cell.uri: cell for cell in params.cell_text_documents}
        cells = [notebook_cell(c, texts.get(c.document)) for c in item.cells]
        notebook = self.notebooks.open(item.uri, item.version, cells)
        self.schedule(notebook.document, 0.0)

    def notebook_changed(self, params: types.DidChangeNotebookDocumentParams) -> None:
        """Cells added, removed, moved or edited: the module is made again, then captured
        after the usual debounce."""
        notebook = self.notebooks.get(params.notebook_document.uri)
        change = params.change.cells
        if notebook is None:
            return
        if change is not None:
            if change.structure is not None:
                restructure(notebook, change.structure)
            for data in change.data or []:
                for cell in notebook.cells:
                    if cell.uri == data.document:
                        cell.kind = cell_kind(data.kind)
            for content in change.text_content or []:
                self._edit_cell(notebook, content)
            self.notebooks.index(notebook)
        notebook.document.update(notebook.module_text(), params.notebook_document.version)
        self.schedule(notebook.document, self.settings.debounce_ms / 1000)

    def _edit_cell(
        self, notebook: Notebook, content: types.NotebookDocumentCellContentChanges
    ) -> None:
        for cell in notebook.cells:
            if cell.uri == content.document.uri:
                for event in content.changes:
                    cell.text = convert.apply_change(cell.text, event, self.encoding)
                cell.version = content.document.version

    def notebook_closed(self, uri: str) -> None:
        notebook = self.notebooks.close(uri)
        self._candidates.pop(uri, None)
        self.fix_outcomes.pop(uri, None)
        for cell in notebook.published if notebook is not None else ():
            self.lsp.text_document_publish_diagnostics(
                types.PublishDiagnosticsParams(uri=cell, diagnostics=[])
            )

    # -- feature views -------------------------------------------------------------------

    def view(self, uri: str) -> View | None:
        """What ``uri`` shows of an analysed document: a notebook cell (lines mapped to the
        notebook's module), or an open document itself."""
        notebook = self.notebooks.of_cell(uri)
        if notebook is not None:
            return notebook.cell_view(uri)
        doc = self.documents.get(uri)
        return None if doc is None else document_view(doc)

    def hover_at(self, uri: str, position: types.Position) -> types.Hover | None:
        view = self.view(uri)
        if view is None:
            return None
        doc = view.doc
        if doc.result is None:
            return self._pending_hover(view, position)
        result, lines, enc = doc.result, view.lines, self.encoding
        line, col = convert.position_from_lsp(position, lines, enc)
        old_line = view.to_analysed(line)
        if old_line is None:
            return None
        analysis, old_lines = result.analysis, result.text.split("\n")
        text = pass_hover.hover_text(
            analysis.modules, old_lines, old_line, col, style=self.hover_style
        ) or hover.hover_text(
            analysis.modules,
            old_lines,
            old_line,
            col,
            isolation=analysis.isolation,
            duration_s=analysis.duration_s,
            style=self.hover_style,
        )
        note = None if not doc.stale else f"from version {result.version}; edited since"
        if analysis.stored:
            note = "stored by an earlier session; fxls is capturing the file again"
        elif analysis.provisional:
            note = PRELIMINARY_NOTE
        if text is not None and view.cell:
            text = dataclasses.replace(text, markdown=view.relabel(text.markdown))
        return hover.lsp_hover(text, lines, enc, view.to_current, note=note)

    def _pending_hover(self, view: View, position: types.Position) -> types.Hover | None:
        """Before the first capture of the document is done: inside a module class, what fxls
        is doing (instead of nothing); None when no capture is coming."""
        doc = view.doc
        if doc.task is None or doc.task.done() or doc.too_large:
            return None
        line = view.to_text(position.line + 1)
        if line is None:
            return None
        said = hover.pending_hover(
            parse(doc.text).classes,
            line,
            worker_ready=self.worker_ready is not None,
            waited_s=time.monotonic() - doc.opened,
        )
        if said is None:
            return None
        return types.Hover(contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value=said))

    def inlay_hints_in(self, uri: str, visible: types.Range) -> list[types.InlayHint]:
        view = self.view(uri)
        doc = view.doc if view is not None else None
        if view is None or doc is None or doc.result is None:
            return []
        if not self.settings.inlay_hints.enabled:
            return []
        hints = inlay_hints.shape_hints(doc.result.analysis.modules, doc.result.text)
        return inlay_hints.lsp_inlay_hints(
            hints, view.lines, self.encoding, view.to_current, visible
        )

    def code_lenses_of(self, uri: str) -> list[types.CodeLens]:
        view = self.view(uri)
        doc = view.doc if view is not None else None
        if view is None or doc is None or doc.result is None:
            return []
        if not self.settings.code_lens.enabled:
            return []
        analysis = doc.result.analysis
        return code_lens.lsp_code_lenses(
            analysis.modules,
            analysis.diagnostics,
            view.lines,
            self.encoding,
            view.to_current,
        )

    # -- trace class at cursor -----------------------------------------------------------

    async def trace_class(self, params: types.TextDocumentPositionParams) -> dict[str, Any]:
        """``fxls.traceClass``: capture the document now (no debounce) and report the module
        class at the position (``fxls.lsp.features.trace``); never raises."""
        try:
            return await self._trace(params.text_document.uri, params.position)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            logger.exception("trace class failed")
            return trace.problem("error", f"fxls failed: {type(exc).__name__}: {exc}")

    async def _trace(self, uri: str, position: types.Position) -> dict[str, Any]:
        view = self.view(uri)
        if not self.trusted:
            return trace.problem("untrusted", trace.UNTRUSTED)
        if view is None:
            return trace.problem("notOpen", trace.NOT_OPEN)
        doc = view.doc
        unparsable = trace.unparsable(doc.text)
        if unparsable is not None:
            return unparsable
        line, _ = convert.position_from_lsp(position, view.lines, self.encoding)
        cls = trace.class_at(doc.text, view.to_text(line) or 0)
        if cls is None:
            return trace.problem("noClass", trace.NO_CLASS)
        async with self._work_done(f"tracing {cls.name}"):
            for _ in range(3):  # the user may type while it runs: capture the newest version
                if doc.closed or doc.too_large:
                    break
                if doc.result is not None and doc.result.version == doc.version:
                    break
                if doc.syntax is not None and doc.syntax.version == doc.version:
                    break
                running = doc.task is not None and not doc.task.done()
                if not running or doc.task_version != doc.version or doc.task in self._debouncing:
                    self.schedule(doc, 0.0)
                if doc.task is not None:
                    await asyncio.wait({doc.task})
        result = doc.result
        module = result.analysis.module(cls.name) if result is not None else None
        if result is None or module is None:
            return trace.problem(
                "notCaptured", f"fxls: {cls.name} was not captured; see the log for why."
            )
        return trace.report(
            module,
            result.analysis.modules,
            result.analysis.diagnostics,
            version=result.version,
            mapper=(self.view(uri) or view).to_current,
            isolation=result.analysis.isolation,
            duration_s=result.analysis.duration_s,
        )

    @contextlib.asynccontextmanager
    async def _work_done(self, message: str) -> AsyncIterator[None]:
        """Work-done progress (created by the server) around a command, when supported."""
        token = None
        if self._capability("window", "work_done_progress"):
            token = f"fxls-command-{next(self._tokens)}"
            try:
                await self.lsp.work_done_progress.create_async(token)
                begin = types.WorkDoneProgressBegin(title="fxls", message=message)
                self.lsp.work_done_progress.begin(token, begin)
            except Exception as exc:
                logger.info("work done progress failed: %s", exc)
                token = None
        try:
            yield
        finally:
            if token is not None:
                with contextlib.suppress(Exception):
                    end = types.WorkDoneProgressEnd(message="done")
                    self.lsp.work_done_progress.end(token, end)

    # -- code actions --------------------------------------------------------------------

    def _outcomes(self, doc: Document) -> dict[str, FixOutcome]:
        version, found = self.fix_outcomes.get(doc.uri, (None, {}))
        if version != doc.version:
            found = {}
            self.fix_outcomes[doc.uri] = (doc.version, found)
        return found

    def _offered(self, doc: Document, view: View | None = None) -> list[code_actions.Offered]:
        """The fixes of the cached analysis whose spans are unchanged, on the current text (on
        the lines of ``view``, a notebook cell, when given: only the fixes in that cell)."""
        if doc.result is None or doc.syntax is not None:
            return []
        mapper = (view or document_view(doc)).to_current
        known = self._outcomes(doc)
        cached = self._candidates.get(doc.uri)
        if cached is None or cached[0] is not doc.result:
            cached = (doc.result, fixes.candidates(doc.result.analysis, doc.result.text))
            self._candidates[doc.uri] = cached
        out = []
        for cand in cached[1]:
            span = fixes.moved(cand.span, mapper)
            if span is not None:
                out.append(code_actions.Offered(cand, span, known.get(cand.id)))
        return out

    def code_actions_for(
        self, uri: str, request: types.Range, context: types.CodeActionContext
    ) -> list[types.CodeAction]:
        """Quick fixes and refactors at ``request`` from the cached analysis (no worker); in a
        notebook cell, those of the cell (fix all is per file: not in cells)."""
        view = self.view(uri)
        doc = view.doc if view is not None else None
        if view is None or doc is None or doc.result is None or doc.syntax is not None:
            return []
        offered = self._offered(doc, view)
        enc, lines = self.encoding, view.lines
        line, col = convert.position_from_lsp(request.start, lines, enc)
        old_line = view.to_analysed(line)
        if old_line is not None:
            known = self._outcomes(doc)
            for cand in fixes.refactors_at(doc.result.analysis, doc.result.text, old_line, col):
                span = fixes.moved(cand.span, view.to_current)
                if span is not None:
                    offered.append(code_actions.Offered(cand, span, known.get(cand.id)))
        unsafe = self.settings.code_actions.unsafe
        return code_actions.lsp_code_actions(
            offered,
            uri,
            doc.version,
            lines,
            enc,
            request,
            context,
            mapper=view.to_current,
            unsafe=unsafe,
            fix_all=not view.cell
            and any(
                o.candidate.fix_all and (o.outcome is None or fixes.applies(o.outcome, unsafe))
                for o in offered
            ),
            disabled=bool(self._capability("text_document", "code_action", "disabled_support")),
        )

    async def resolve_code_action(self, action: types.CodeAction) -> types.CodeAction:
        """Compute a listed action's edit in the worker, verified; refused when the document
        changed since it was listed (never raises). A refusal is also said with
        ``window/showMessage``: editors do not read ``disabled`` on a resolved action, so it
        would otherwise change nothing and say nothing. Work-done progress shows while it
        takes longer than PROGRESS_DELAY_S."""
        title = action.title
        try:
            async with self._progress_after(f"checking: {title}"):
                done = await self._resolve(action)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            logger.exception("code action resolve failed")
            self.log(
                f"fxls: code action failed: {type(exc).__name__}: {exc}", types.MessageType.Error
            )
            done = code_actions.refused(action, f"fxls failed: {type(exc).__name__}: {exc}")
        message = code_actions.refused_message(done)
        if message is not None:
            self.show(message, types.MessageType.Warning)
        return done

    @contextlib.asynccontextmanager
    async def _progress_after(self, message: str) -> AsyncIterator[None]:
        """Work-done progress (created by the server) around the block once it has run for
        PROGRESS_DELAY_S, when the client supports it; ended when the block ends."""
        began: list[str] = []

        async def show() -> None:
            await asyncio.sleep(PROGRESS_DELAY_S)
            if not self._capability("window", "work_done_progress"):
                return
            token = f"fxls-resolve-{next(self._tokens)}"
            await self.lsp.work_done_progress.create_async(token)
            text = markdown.plain(message, markdown.MAX_LABEL)
            begin = types.WorkDoneProgressBegin(title="fxls", message=text)
            self.lsp.work_done_progress.begin(token, begin)
            began.append(token)

        task = self.spawn(show())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
            for token in began:
                with contextlib.suppress(Exception):
                    end = types.WorkDoneProgressEnd(message="done")
                    self.lsp.work_done_progress.end(token, end)

    async def _resolve(self, action: types.CodeAction) -> types.CodeAction:
        data = action.data if isinstance(action.data, dict) else {}
        if not self.trusted:
            return code_actions.refused(action, "this workspace is not trusted")
        view = self.view(str(data.get("uri", "")))
        doc = view.doc if view is not None else None
        version = data.get("version")
        if view is None or doc is None or doc.version != version:
            return code_actions.refused(
                action, "the document changed since this action was listed; ask again"
            )
        text = doc.text
        known = self._outcomes(doc)
        fix_all = data.get("fix") == "all"
        if fix_all:
            requests = [o.candidate.request(o.span) for o in self._offered(doc)
                        if o.candidate.fix_all]  # fmt: skip
            if not requests:
                return code_actions.refused(action, "no fix applies to this file")
        else:
            request = in_text(code_actions.fix_request(data), view)
            if request is None:
                return code_actions.refused(action, "fxls did not understand this action")
            requests = [request]
        outcome = None if fix_all else known.get(requests[0].id)
        if outcome is None:
            outcome = await self._compute(doc, text, requests, fix_all)
        if doc.closed or doc.version != version:
            return code_actions.refused(action, "the document changed while fxls computed the fix")
        if view.cell:
            return self._resolved_in_cell(action, outcome, text, view)
        return code_actions.resolved(
            action,
            outcome,
            text,
            doc.uri,
            doc.version,
            self.encoding,
            unsafe=self.settings.code_actions.unsafe,
            versioned=bool(self._capability("workspace", "workspace_edit", "document_changes")),
        )

    def _resolved_in_cell(
        self, action: types.CodeAction, outcome: FixOutcome | None, text: str, view: View
    ) -> types.CodeAction:
        notebook = self.notebooks.of_cell(view.uri)
        index = notebook.index(view.uri) if notebook is not None else None
        if notebook is None or index is None:
            return code_actions.refused(action, "the cell is no longer in the notebook")
        module, version = notebook.module, notebook.cells[index].version

        def to_cell(line: int) -> int | None:
            where = module.to_cell(line)
            return where[1] if where is not None and where[0] == index else None

        versioned = bool(self._capability("workspace", "workspace_edit", "document_changes"))
        cell = code_actions.Cell(view.uri, version, view.lines, to_cell, self.encoding, versioned)
        unsafe = self.settings.code_actions.unsafe
        return code_actions.resolved_in_cell(action, outcome, text, cell, unsafe=unsafe)

    async def _compute(
        self, doc: Document, text: str, requests: list[FixRequest], combine: bool
    ) -> FixOutcome | None:
        settings = self.settings.code_actions
        try:
            worker = await self.ensure_worker()
        except Exception as exc:
            return FixOutcome("all", "unavailable", "", reason=f"the worker did not start: {exc}")
        options = await asyncio.to_thread(self.engine_options, doc.path)  # reads the disk
        self._note_refused_rules()
        result = await fixes.compute(
            worker,
            doc.path,
            text,
            requests,
            options=options,
            root=self.root,
            combine=combine,
            unsafe=settings.unsafe,
            max_params=settings.max_params,
        )
        if doc.version is not None and self.fix_outcomes.get(doc.uri, (None,))[0] == doc.version:
            known = self._outcomes(doc)
            for outcome in result.outcomes:
                known[outcome.id] = outcome
        if combine:
            if result.combined is not None:
                return result.combined
            reasons = sorted({o.reason for o in result.outcomes if o.reason})
            why = "; ".join(reasons[:3]) or "nothing to change"
            return FixOutcome("all", "unavailable", "", reason=f"no fix verified safe ({why})")
        return result.outcomes[0] if result.outcomes else None


def in_text(request: FixRequest | None, view: View | None) -> FixRequest | None:
    """A listed fix's request on the document's current text: in a notebook cell, its span
    (the cell's lines) moved to the lines of the notebook's module."""
    if request is None or view is None or not view.cell:
        return request
    span = request.span
    start, end = view.to_text(span.line), view.to_text(span.end_line)
    if start is None or end is None:
        return None
    return dataclasses.replace(request, span=Span(start, span.col, end, span.end_col))


def restructure(notebook: Notebook, structure: types.NotebookDocumentCellChangeStructure) -> None:
    """Cells inserted, deleted or moved (a moved cell keeps its text)."""
    known = {cell.uri: cell for cell in notebook.cells}
    opened = {cell.uri: cell for cell in structure.did_open or []}
    span = structure.array
    notebook.cells[span.start : span.start + span.delete_count] = [
        notebook_cell(c, opened[c.document])
        if c.document in opened  # new, or opened again (its language changed)
        else known.get(c.document) or notebook_cell(c, None)
        for c in span.cells or []
    ]


def cell_kind(kind: types.NotebookCellKind) -> str:
    return "code" if kind == types.NotebookCellKind.Code else "markdown"


def notebook_cell(cell: types.NotebookCell, item: types.TextDocumentItem | None) -> NotebookCell:
    """A synced cell (its text from the cell's text document, when the editor sent one)."""
    if item is None:
        return NotebookCell(cell.document, cell_kind(cell.kind), "python")
    return NotebookCell(
        cell.document, cell_kind(cell.kind), item.language_id, item.text, item.version
    )
