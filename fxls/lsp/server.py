"""The fxls language server: pygls wiring only.

Each handler is a few lines that delegate to :class:`fxls.lsp.session.Session`, which holds the
documents, settings, worker and captures, and answers from the cached analysis through the
pure functions in ``fxls.lsp.features``. Hovers, inlay hints and code lenses never wait for a
capture.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from typing import Any

from lsprotocol import types
from pygls.lsp.server import LanguageServer

from fxls import __version__
from fxls.engine.workerclient import WorkerClient
from fxls.lsp.features import markdown
from fxls.lsp.rpc import FxlsProtocol, Listener, serve_listener, serve_stdio
from fxls.lsp.session import CODE_ACTION_KINDS, TRACE_COMMAND, Session

logger = logging.getLogger(__name__)

STATS = "fxls/stats"
"""Custom request: open documents (version, length, SHA-256 of the text), recent hover
handler times, trust and the worker's interpreter, torch and isolation layers, for tests,
benchmarks and ``:checkhealth fxls``."""
GRAPH = "fxls/graph"
"""Custom request ``{"uri", "className"}``: the self-contained HTML page of ``fxls graph`` for that
class, from the document's last capture (``{"html", "nodes"}``), or ``{"error"}``. The VS Code
"Show graph" view asks for it: no second capture, and the server's own settings apply."""


NOTEBOOK_SYNC = types.NotebookDocumentSyncOptions(
    notebook_selector=[
        types.NotebookDocumentFilterWithCells(
            notebook="jupyter-notebook",
            cells=[
                types.NotebookCellLanguage(language="python"),
                types.NotebookCellLanguage(language="markdown"),
            ],
        )
    ],
    save=True,
)
"""Jupyter notebooks: the editor syncs them as notebooks (each cell's text through
``notebookDocument/didChange``) and asks for features on each Python cell's URI. Markdown
cells are synced too, only so that cells are counted as the notebook shows them."""


class FxlsServer(LanguageServer):
    """The pygls server; all state lives in ``self.session``."""

    def __init__(self) -> None:
        super().__init__(
            "fxls",
            __version__,
            text_document_sync_kind=types.TextDocumentSyncKind.Incremental,
            notebook_document_sync=NOTEBOOK_SYNC,
            protocol_cls=FxlsProtocol,
        )
        self.session = Session(self)


server = FxlsServer()


@server.feature(types.INITIALIZE)
def initialize(ls: FxlsServer, params: types.InitializeParams) -> None:
    ls.session.initialize(params)


@server.feature(types.INITIALIZED)
async def initialized(ls: FxlsServer, params: types.InitializedParams) -> None:
    await ls.session.initialized()


@server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
async def did_change_configuration(
    ls: FxlsServer, params: types.DidChangeConfigurationParams
) -> None:
    await ls.session.configuration_changed(params.settings)


@server.feature(types.TEXT_DOCUMENT_DID_OPEN)
def did_open(ls: FxlsServer, params: types.DidOpenTextDocumentParams) -> None:
    item = params.text_document
    ls.session.did_open(item.uri, item.text, item.version)


@server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
def did_change(ls: FxlsServer, params: types.DidChangeTextDocumentParams) -> None:
    ls.session.did_change(params)


@server.feature(types.TEXT_DOCUMENT_DID_SAVE)
def did_save(ls: FxlsServer, params: types.DidSaveTextDocumentParams) -> None:
    ls.session.did_save(params.text_document.uri)


@server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
def did_close(ls: FxlsServer, params: types.DidCloseTextDocumentParams) -> None:
    ls.session.did_close(params.text_document.uri)


@server.feature(types.NOTEBOOK_DOCUMENT_DID_OPEN)
def did_open_notebook(ls: FxlsServer, params: types.DidOpenNotebookDocumentParams) -> None:
    ls.session.notebook_opened(params)


@server.feature(types.NOTEBOOK_DOCUMENT_DID_CHANGE)
def did_change_notebook(ls: FxlsServer, params: types.DidChangeNotebookDocumentParams) -> None:
    ls.session.notebook_changed(params)


@server.feature(types.NOTEBOOK_DOCUMENT_DID_SAVE)
def did_save_notebook(ls: FxlsServer, params: types.DidSaveNotebookDocumentParams) -> None:
    ls.session.did_save(params.notebook_document.uri)


@server.feature(types.NOTEBOOK_DOCUMENT_DID_CLOSE)
def did_close_notebook(ls: FxlsServer, params: types.DidCloseNotebookDocumentParams) -> None:
    ls.session.notebook_closed(params.notebook_document.uri)


@server.feature(types.TEXT_DOCUMENT_HOVER)
def on_hover(ls: FxlsServer, params: types.HoverParams) -> types.Hover | None:
    session, started = ls.session, time.perf_counter()
    uri, position = params.text_document.uri, params.position
    result = session.safely("hover", lambda: session.hover_at(uri, position), None)
    session.hover_seconds.append(time.perf_counter() - started)
    return result


@server.feature(types.TEXT_DOCUMENT_INLAY_HINT)
def on_inlay_hint(ls: FxlsServer, params: types.InlayHintParams) -> list[types.InlayHint]:
    session, uri, visible = ls.session, params.text_document.uri, params.range
    return session.safely("inlay hints", lambda: session.inlay_hints_in(uri, visible), [])


@server.feature(types.TEXT_DOCUMENT_CODE_LENS)
def on_code_lens(ls: FxlsServer, params: types.CodeLensParams) -> list[types.CodeLens]:
    session, uri = ls.session, params.text_document.uri
    return session.safely("code lens", lambda: session.code_lenses_of(uri), [])


@server.feature(
    types.TEXT_DOCUMENT_CODE_ACTION,
    types.CodeActionOptions(code_action_kinds=CODE_ACTION_KINDS, resolve_provider=True),
)
def on_code_action(ls: FxlsServer, params: types.CodeActionParams) -> list[types.CodeAction]:
    session, uri = ls.session, params.text_document.uri
    return session.safely(
        "code actions", lambda: session.code_actions_for(uri, params.range, params.context), []
    )


@server.feature(types.CODE_ACTION_RESOLVE)
async def on_code_action_resolve(ls: FxlsServer, params: types.CodeAction) -> types.CodeAction:
    return await ls.session.resolve_code_action(params)


@server.feature(STATS)
def on_stats(ls: FxlsServer, params: Any) -> dict[str, Any]:
    return ls.session.stats()


@server.command(TRACE_COMMAND)
async def on_trace_class(
    ls: FxlsServer, params: types.TextDocumentPositionParams
) -> dict[str, Any]:
    """Capture now and report the module class at a position (``fxls.lsp.features.trace``)."""
    return await ls.session.trace_class(params)


@server.feature(GRAPH)
def on_graph(ls: FxlsServer, params: Any) -> dict[str, Any]:
    def get(name: str) -> Any:
        return params.get(name) if isinstance(params, dict) else getattr(params, name, None)

    uri, cls = get("uri"), get("className")
    return ls.session.safely("graph", lambda: ls.session.graph(uri, cls), {"error": "failed"})


@server.feature(types.SHUTDOWN)
async def on_shutdown(ls: FxlsServer, params: None) -> None:
    await ls.session.stop()


def _protect_stdout() -> Any:
    """Keep JSON-RPC on a private copy of stdout; fd 1 then points at stderr, so a stray
    write from this process or anything it starts cannot corrupt the stream."""
    rpc_fd = os.dup(sys.stdout.fileno())
    os.set_inheritable(rpc_fd, False)
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    sys.stdout = sys.stderr
    return os.fdopen(rpc_fd, "wb", buffering=0)


MAX_LOG_TRACEBACK = 20_000
"""Longest traceback in one log record (characters)."""


class InertFormatter(logging.Formatter):
    """Log lines for stderr (the editor's log, or a terminal) that a quoted file name, setting
    or error cannot forge or drive: each message stays on one line, without control or
    format characters (no terminal escapes, no bidi reordering), and is clipped
    (``markdown.plain``); a traceback keeps its line breaks only."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = markdown.plain(record.message)
        return super().formatMessage(record)

    def formatException(self, ei: Any) -> str:
        text = super().formatException(ei)
        return markdown.plain(text, MAX_LOG_TRACEBACK, newlines=True)


def _configure_logging() -> None:
    level = os.environ.get("FXLS_LOG_LEVEL", "WARNING").upper()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(InertFormatter(logging.BASIC_FORMAT))
    logging.basicConfig(handlers=[handler], level=getattr(logging, level, logging.WARNING))


def main_stdio(prestarted: WorkerClient | None = None) -> int:
    """Serve one client on stdin/stdout (``prestarted``: see ``Session.prestarted``)."""
    _configure_logging()
    out = _protect_stdout()
    server.session.prestarted = prestarted
    return serve_stdio(server, sys.stdin.buffer, out)


def main_listen(where: Listener, prestarted: WorkerClient | None = None) -> int:
    """Serve one client at a time on a loopback TCP port or a UNIX socket
    (``fxls.lsp.rpc.serve_listener``)."""
    _configure_logging()
    server.session.prestarted = prestarted
    return serve_listener(server, where)
