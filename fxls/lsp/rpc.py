"""The server's JSON-RPC transport: message framing with limits, and pygls's protocol with
the answers the specifications require.

pygls 2.1 reads messages in ``pygls.io_.run_async``: a header line of any length, then
``readexactly(Content-Length)``, so ``Content-Length: 1000000000000`` raised MemoryError and
ended the server. A request whose params do not structure was logged and never answered, and
so was every request after ``shutdown``. This module replaces that loop:

- a header line is at most :data:`MAX_HEADER_LINE` bytes and a header block at most
  :data:`MAX_HEADER_LINES` lines; a body is at most :data:`MAX_MESSAGE` bytes. A message over
  a limit is skipped without being held in memory: the reader discards bytes until the next
  ``Content-Length: N\\r\\n`` header (a raw CR LF cannot occur inside JSON text, so that is a
  real header) and the client gets one ``window/showMessage``;
- a body that is not JSON gets a ParseError response (-32700), a message that is not a
  JSON-RPC 2.0 request or notification an InvalidRequest (-32600), a request whose params do
  not fit its method an InvalidParams (-32602), and a request after ``shutdown`` an
  InvalidRequest, as the LSP specification says;
- ``didOpen``/``didChange``/``didClose`` go straight to fxls's handlers: fxls keeps its own copy
  of each document (``fxls.lsp.documents``), so pygls's workspace copy is not maintained (for a
  large document it cost a copy and a re-split of every line on each change);
- every ``window/showMessage`` and ``window/logMessage`` passes ``markdown.notice`` on its way
  out, so a file name, settings value or error it quotes cannot become a link in the editor;
- a listening server (:func:`serve_listener`: a UNIX socket in a private folder, or a loopback
  TCP port with a token) acts on nothing a connection sends until its first message is an
  ``initialize`` that carries the token, and serves one session at a time.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import hmac
import ipaddress
import json
import logging
import os
import socket
import stat
import sys
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, BinaryIO

import attrs
from lsprotocol import types
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.language_server import lsp_method

from fxls.lsp.features import markdown

logger = logging.getLogger(__name__)

MAX_MESSAGE = 64 * 1024 * 1024
"""Largest message body (bytes) the server reads; larger ones are skipped."""
MAX_HEADER_LINE = 8 * 1024
MAX_HEADER_LINES = 32
_CHUNK = 1024 * 1024
_HEADER = b"Content-Length:"
"""What a resync looks for (the spelling every client writes; parsing is case-insensitive)."""

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
INVALID_PARAMS = -32602

ReadSome = Callable[[int], Awaitable[bytes]]
"""Reads up to n bytes; returns b"" at the end of the stream."""


@dataclass
class Skipped:
    """A message that was not read (over a limit, or no usable header)."""

    reason: str


class LspMessageReader:
    """Length-prefixed messages (``Content-Length: N\\r\\n\\r\\n`` + N bytes) from a byte
    stream, with the limits above. Standard library only."""

    def __init__(
        self,
        read_some: ReadSome,
        *,
        max_message: int = MAX_MESSAGE,
        max_header_line: int = MAX_HEADER_LINE,
    ) -> None:
        self._read_some = read_some
        self._buf = bytearray()
        self._eof = False
        self.max_message = max_message
        self.max_header_line = max_header_line

    async def _fill(self) -> bool:
        """Read more into the buffer; False at the end of the stream."""
        if self._eof:
            return False
        data = await self._read_some(_CHUNK)
        if not data:
            self._eof = True
            return False
        self._buf += data
        return True

    async def _line(self) -> bytes | Skipped | None:
        """One header line (with its terminator); None at the end of the stream."""
        searched = 0
        while True:
            end = self._buf.find(b"\n", searched)
            if end != -1 and end < self.max_header_line:
                line = bytes(self._buf[: end + 1])
                del self._buf[: end + 1]
                return line
            if end != -1 or len(self._buf) >= self.max_header_line:
                return Skipped(f"a header line longer than {self.max_header_line} bytes")
            searched = len(self._buf)
            if not await self._fill():
                return None

    async def _exactly(self, n: int) -> bytes | None:
        while len(self._buf) < n:
            if not await self._fill():
                return None
        body = bytes(self._buf[:n])
        del self._buf[:n]
        return body

    def _header_at(self, index: int) -> bool | None:
        """Whether a complete ``Content-Length: N\\r\\n`` starts at ``index`` of the buffer
        (None: not enough bytes yet to tell)."""
        buf = self._buf
        pos = index + len(_HEADER)
        while pos < len(buf) and buf[pos] == 0x20 and pos - index < 64:
            pos += 1
        first_digit = pos
        while pos < len(buf) and 0x30 <= buf[pos] <= 0x39 and pos - first_digit < 20:
            pos += 1
        if pos + 2 > len(buf):
            return None if pos - index < 64 else False
        return pos > first_digit and buf[pos : pos + 2] == b"\r\n"

    async def _resync(self) -> bool:
        """Discard bytes up to the next real header; False at the end of the stream."""
        while True:
            index = self._buf.find(_HEADER)
            while index != -1:
                found = self._header_at(index)
                if found is None:
                    break  # need more bytes to decide
                if found:
                    del self._buf[:index]
                    return True
                index = self._buf.find(_HEADER, index + 1)
            # keep what may be the start of a header, drop the rest
            keep = index if index != -1 else max(len(self._buf) - len(_HEADER), 0)
            del self._buf[:keep]
            if not await self._fill():
                return False

    async def read(self) -> bytes | Skipped | None:
        """The next message body, a Skipped, or None at the end of the stream."""
        length: int | None = None
        lines = 0
        while True:
            line = await self._line()
            if line is None:
                return None
            if isinstance(line, Skipped):
                return await self._skip(line.reason)
            if line.strip() == b"":
                if lines == 0:
                    continue  # a stray blank line between messages
                break
            lines += 1
            if lines > MAX_HEADER_LINES:
                return await self._skip(f"more than {MAX_HEADER_LINES} header lines")
            name, sep, value = line.partition(b":")
            if sep and name.strip().lower() == b"content-length":
                text = value.strip()
                if not text.isdigit() or len(text) > 20:
                    return await self._skip(f"an invalid Content-Length {text[:40]!r}")
                length = int(text)
        if length is None:
            return await self._skip("a message without Content-Length")
        if length > self.max_message:
            return await self._skip(
                f"a message of {length:,} bytes (the limit is {self.max_message:,})"
            )
        return await self._exactly(length)

    async def _skip(self, reason: str) -> Skipped | None:
        """Resynchronise after a message that is not read; None at the end of the stream."""
        return Skipped(reason) if await self._resync() else None


# ---------------------------------------------------------------------------------------
# Dispatch
# ---------------------------------------------------------------------------------------


class FxlsProtocol(LanguageServerProtocol):
    """pygls's protocol, except that document notifications reach fxls's handlers untouched,
    and every message to the user passes :func:`fxls.lsp.features.markdown.notice`.

    fxls applies edits to its own copy of each document and notebook cell
    (``convert.apply_change``); pygls's workspace copy is not kept (pygls also rewrote a position past the end of the last line in
    place, and raised for an unknown document before the handler ran).
    """

    def notify(self, method: str, params: Any | None = None) -> None:
        """Send a notification. A ``window/showMessage`` or ``window/logMessage`` often quotes
        a settings value, a file name or an error from the workspace: whoever sends it (fxls
        or pygls), its text is made inert here, the one place all of them pass."""
        if isinstance(params, types.ShowMessageParams):
            params = attrs.evolve(params, message=markdown.notice(params.message))
        elif isinstance(params, types.LogMessageParams):
            limit = markdown.MAX_LOG_NOTICE
            params = attrs.evolve(params, message=markdown.notice(params.message, limit))
        super().notify(method, params)

    def _forward(self, method: str, params: Any) -> Any:
        handler = self.fm.features.get(method)
        if handler is not None:
            yield handler, (params,), None

    @lsp_method(types.TEXT_DOCUMENT_DID_OPEN)
    def lsp_text_document__did_open(self, params: types.DidOpenTextDocumentParams) -> Any:
        yield from self._forward(types.TEXT_DOCUMENT_DID_OPEN, params)

    @lsp_method(types.TEXT_DOCUMENT_DID_CHANGE)
    def lsp_text_document__did_change(self, params: types.DidChangeTextDocumentParams) -> Any:
        yield from self._forward(types.TEXT_DOCUMENT_DID_CHANGE, params)

    @lsp_method(types.TEXT_DOCUMENT_DID_CLOSE)
    def lsp_text_document__did_close(self, params: types.DidCloseTextDocumentParams) -> Any:
        yield from self._forward(types.TEXT_DOCUMENT_DID_CLOSE, params)

    @lsp_method(types.NOTEBOOK_DOCUMENT_DID_OPEN)
    def lsp_notebook_document__did_open(self, params: types.DidOpenNotebookDocumentParams) -> Any:
        yield from self._forward(types.NOTEBOOK_DOCUMENT_DID_OPEN, params)

    @lsp_method(types.NOTEBOOK_DOCUMENT_DID_CHANGE)
    def lsp_notebook_document__did_change(
        self, params: types.DidChangeNotebookDocumentParams
    ) -> Any:
        yield from self._forward(types.NOTEBOOK_DOCUMENT_DID_CHANGE, params)

    @lsp_method(types.NOTEBOOK_DOCUMENT_DID_CLOSE)
    def lsp_notebook_document__did_close(self, params: types.DidCloseNotebookDocumentParams) -> Any:
        yield from self._forward(types.NOTEBOOK_DOCUMENT_DID_CLOSE, params)

    # -- incoming messages -----------------------------------------------------------------

    def reply_error(self, msg_id: Any, code: int, message: str) -> None:
        """A JSON-RPC error response (``msg_id`` None when it could not be read)."""
        self._send_data(
            {"jsonrpc": "2.0", "id": msg_id, "error": {"code": code, "message": message}}
        )

    def receive(self, body: bytes) -> None:
        """Handle one message body: answer what pygls would drop, pass the rest on."""
        try:
            data = json.loads(body)
        except (ValueError, RecursionError) as exc:
            self.reply_error(None, PARSE_ERROR, f"the message is not JSON: {exc}")
            return
        if not isinstance(data, dict):
            self.reply_error(None, INVALID_REQUEST, "a message must be a JSON object")
            return
        msg_id = data.get("id")
        method = data.get("method")
        is_request = "id" in data and "method" in data
        if data.get("jsonrpc") != "2.0" or ("method" in data and not isinstance(method, str)):
            looks_like_response = "method" not in data and ("result" in data or "error" in data)
            if "id" in data and not looks_like_response:
                self.reply_error(msg_id, INVALID_REQUEST, "not a JSON-RPC 2.0 request")
            return
        if is_request and self._shutdown and method != types.EXIT:
            self.reply_error(msg_id, INVALID_REQUEST, "the server is shutting down")
            return
        try:
            message = self.structure_message(data)
        except Exception as exc:
            if is_request:
                lines = str(exc.__cause__ or exc).strip().splitlines()
                detail = f": {lines[0][:500]}" if lines else ""
                self.reply_error(msg_id, INVALID_PARAMS, f"invalid params for {method}{detail}")
            else:
                logger.warning("ignored %s: its params do not structure", method)
            return
        try:
            self.handle_message(message)
        except (asyncio.InvalidStateError, concurrent.futures.InvalidStateError):
            # the answer to a request of ours that was cancelled meanwhile (a progress or a
            # refresh request while the server shuts down)
            logger.debug("ignored an answer to a cancelled request (id %r)", msg_id)
        except Exception:
            logger.exception("cannot handle %s", method)


# ---------------------------------------------------------------------------------------
# Transports
# ---------------------------------------------------------------------------------------


class _StdoutWriter:
    def __init__(self, out: BinaryIO) -> None:
        self._out = out

    def write(self, data: bytes) -> None:
        self._out.write(data)
        self._out.flush()

    def close(self) -> None:
        self._out.close()


def _stdin_reader(stdin: BinaryIO, loop: asyncio.AbstractEventLoop) -> ReadSome:
    """Reads stdin in a daemon thread (it never keeps the process alive) into a short queue:
    at most four chunks wait, so a client that floods the server is slowed, not buffered.
    The thread reads the file descriptor itself: a daemon thread blocked inside a buffered
    reader holds its lock, and Python aborts at exit when it finds that lock taken."""
    chunks: asyncio.Queue[bytes] = asyncio.Queue(maxsize=4)
    fd = stdin.fileno()

    def run() -> None:
        while True:
            try:
                data = os.read(fd, _CHUNK)
            except OSError:
                data = b""
            try:
                asyncio.run_coroutine_threadsafe(chunks.put(data), loop).result()
            except Exception:
                return  # the loop is gone
            if not data:
                return

    threading.Thread(target=run, name="fxls-stdin", daemon=True).start()

    async def read_some(n: int) -> bytes:
        return await chunks.get()

    return read_some


async def _serve(server: Any, reader: LspMessageReader, stop: threading.Event) -> None:
    protocol: FxlsProtocol = server.protocol
    warned = False
    while not stop.is_set():
        message = await reader.read()
        if message is None:
            return
        if isinstance(message, Skipped):
            logger.warning("skipped %s", message.reason)
            if not warned:
                warned = True
                text = f"fxls skipped {message.reason}; the editor and fxls may now disagree."
                protocol.notify(
                    types.WINDOW_SHOW_MESSAGE,
                    types.ShowMessageParams(type=types.MessageType.Warning, message=text),
                )
            continue
        protocol.receive(message)


def serve_stdio(server: Any, stdin: BinaryIO, stdout: BinaryIO) -> int:
    """Serve one client over a pair of pipes; returns the exit code (0 after shutdown and
    exit, 1 after exit without shutdown, as the LSP specification says)."""
    stop = threading.Event()
    server._stop_event = stop
    server.protocol.set_writer(_StdoutWriter(stdout))

    async def main() -> None:
        reader = LspMessageReader(_stdin_reader(stdin, asyncio.get_running_loop()))
        await _serve(server, reader, stop)

    code = 0
    try:
        asyncio.run(main())
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 0
    except (BrokenPipeError, KeyboardInterrupt):
        logger.error("the connection to the client is lost")
    finally:
        server.shutdown()
    return code


# ---------------------------------------------------------------------------------------
# Listening: a loopback TCP port or a UNIX socket, for one client that shows the token
# ---------------------------------------------------------------------------------------

TOKEN_ENV = "FXLS_TOKEN"
"""The environment variable that holds the token when no ``--token-file`` is given."""
MIN_TOKEN = 16
"""Shortest token accepted (characters)."""
MAX_TOKEN_FILE = 4096
MAX_FIRST_MESSAGE = 1024 * 1024
"""Largest first message (``initialize``) of a connection that has not shown the token."""
FIRST_MESSAGE_TIMEOUT_S = 10.0
FIRST_MESSAGE = (
    "fxls: the first message must be initialize with the server's token in "
    "initializationOptions.token"
)
MAX_WAITING = 8
"""Connections that may wait to show the token at one time; more are closed at once."""


class ListenError(Exception):
    """An address, socket folder or token ``fxls serve`` refuses; the message says why."""


@dataclass(frozen=True)
class Listener:
    """Where ``fxls serve`` listens instead of stdio, and the token a client must show.

    Either ``hosts`` (loopback addresses only) and ``port``, or ``path`` (a UNIX socket in a
    folder only this user can use). With a ``token``, a connection's first message must be an
    ``initialize`` request whose ``initializationOptions.token`` is that token, or the
    connection is closed before anything it sent is acted on; ``--tcp`` always has one.
    """

    token: str | None
    hosts: tuple[str, ...] = ()
    port: int = 0
    path: str | None = None

    async def start(self, handle: Any) -> asyncio.Server:
        """Listen and return the asyncio server (``handle(reader, writer)`` per connection)."""
        if self.path is None:
            return await asyncio.start_server(handle, list(self.hosts), self.port)
        return await asyncio.start_unix_server(handle, sock=_bind_unix(self.path))

    def close(self) -> None:
        """Remove the socket file (the server has stopped listening)."""
        if self.path is not None:
            with contextlib.suppress(OSError):
                if stat.S_ISSOCK(os.lstat(self.path).st_mode):
                    os.unlink(self.path)


def listener(tcp: str | None, socket_path: str | None, token_file: str | None) -> Listener:
    """The :class:`Listener` of ``--tcp HOST:PORT`` or ``--socket PATH``, after checking the
    address, the socket's folder and the token (``--token-file`` or ``$FXLS_TOKEN``); raises
    :class:`ListenError`. Anyone who can connect could choose the worker's interpreter and
    isolation in ``initialize``, that is run programs as this user: so TCP is loopback only
    and needs a token, and a socket lives where only this user can reach it."""
    token = read_token(token_file)
    if socket_path is not None:
        return Listener(token, path=_socket_path(socket_path))
    host, _, port = (tcp or "").rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit() or int(port) > 65535:
        raise ListenError(f"--tcp expects HOST:PORT, got {tcp!r}")
    if token is None:
        raise ListenError(
            f"--tcp needs a token: put one (at least {MIN_TOKEN} characters) in a file only "
            f"you can read and pass --token-file FILE, or set ${TOKEN_ENV}; clients send it as "
            "initializationOptions.token. Or use --socket PATH, which needs none"
        )
    return Listener(token, hosts=_loopback(host), port=int(port))


def read_token(path: str | None) -> str | None:
    """The token in the file ``path`` (a regular file of this user that no one else may read
    or write), else in ``$FXLS_TOKEN``, else None; raises :class:`ListenError`."""
    if path is None:
        value = os.environ.get(TOKEN_ENV)
        return None if not value else _token(value, f"${TOKEN_ENV}")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise ListenError(f"cannot open the token file {path!r}: {exc.strerror}") from exc
    try:
        info = os.fstat(fd)
        _own_and_private(path, info, "the token file")
        if not stat.S_ISREG(info.st_mode):
            raise ListenError(f"the token file {path!r} is not a regular file")
        data = os.read(fd, MAX_TOKEN_FILE + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_TOKEN_FILE:
        raise ListenError(f"the token file {path!r} is longer than {MAX_TOKEN_FILE} bytes")
    try:
        return _token(data.decode("utf-8"), f"the token file {path!r}")
    except UnicodeDecodeError as exc:
        raise ListenError(f"the token file {path!r} is not UTF-8 text") from exc


def _token(value: str, where: str) -> str:
    token = value.strip()
    if len(token) < MIN_TOKEN:
        raise ListenError(f"the token in {where} is shorter than {MIN_TOKEN} characters")
    return token


def _own_and_private(path: str, info: os.stat_result, what: str) -> None:
    """Refuse what another user owns, or what others may read, write or enter."""
    if info.st_uid != os.getuid():
        raise ListenError(f"{what} {path!r} belongs to another user (uid {info.st_uid})")
    if info.st_mode & 0o077:
        raise ListenError(
            f"{what} {path!r} is open to other users (mode {stat.S_IMODE(info.st_mode):o}); "
            "make it yours only (chmod go-rwx)"
        )


def _loopback(host: str) -> tuple[str, ...]:
    """The addresses of ``host``, all of which must be loopback (127.0.0.0/8, ::1)."""
    try:
        found = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise ListenError(f"cannot resolve the --tcp host {host!r}: {exc}") from exc
    addresses = tuple(sorted({str(info[4][0]) for info in found}))
    if not addresses or not all(ipaddress.ip_address(a).is_loopback for a in addresses):
        raise ListenError(
            f"--tcp listens on loopback only (127.0.0.1, ::1, localhost); {host!r} is "
            f"{', '.join(addresses) or 'nothing'}. To reach fxls from elsewhere, tunnel to a "
            "loopback port (ssh -L) or a socket"
        )
    return addresses


def _socket_path(path: str) -> str:
    """``path`` made absolute, in a folder that is this user's and closed to others (created
    with mode 0700 when missing); a stale socket there is removed, anything else refused."""
    path = os.path.abspath(path)
    folder = os.path.dirname(path)
    with contextlib.suppress(FileExistsError):
        try:
            os.mkdir(folder, 0o700)
        except FileNotFoundError as exc:
            raise ListenError(f"the socket's folder {folder!r} cannot be created: {exc}") from exc
    info = os.lstat(folder)
    if not stat.S_ISDIR(info.st_mode):
        raise ListenError(f"the socket's folder {folder!r} is not a folder (or is a link)")
    _own_and_private(folder, info, "the socket's folder")
    try:
        found = os.lstat(path)
    except FileNotFoundError:
        return path
    if not stat.S_ISSOCK(found.st_mode):
        raise ListenError(f"{path!r} exists and is not a socket; fxls leaves it alone")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(path)
        except ConnectionRefusedError:
            os.unlink(path)  # a socket nothing listens on: left by a server that ended
            return path
        except OSError as exc:
            raise ListenError(f"cannot check the socket {path!r}: {exc}") from exc
    raise ListenError(f"another server listens on {path!r}")


def _bind_unix(path: str) -> socket.socket:
    """A listening UNIX socket at ``path`` with mode 0600 from its creation (the umask is
    narrowed around ``bind``; nothing else runs then)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        sock.bind(path)
    except OSError:
        sock.close()
        raise
    finally:
        os.umask(old)
    return sock


def admitted(body: bytes | Skipped | None, token: str | None) -> bytes | None:
    """The first message of a connection if it may be acted on, else None.

    Without a token, any message. With one: an ``initialize`` request whose
    ``initializationOptions.token`` equals it (compared in constant time); the token is taken
    out of the message, so it is neither a setting nor logged."""
    if not isinstance(body, bytes):
        return None
    if token is None:
        return body
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or data.get("method") != "initialize":
        return None
    params = data.get("params")
    options = params.get("initializationOptions") if isinstance(params, dict) else None
    shown = options.pop("token", None) if isinstance(options, dict) else None
    if not isinstance(shown, str):
        return None
    if not hmac.compare_digest(shown.encode("utf-8", "replace"), token.encode("utf-8")):
        return None
    return json.dumps(data).encode("utf-8")


def _refuse(writer: asyncio.StreamWriter, why: str) -> None:
    """Tell a refused client why (one JSON-RPC error, no id) and close its connection."""
    logger.warning("refused a connection: %s", why)
    body = json.dumps(
        {"jsonrpc": "2.0", "id": None, "error": {"code": INVALID_REQUEST, "message": why}}
    ).encode()
    with contextlib.suppress(Exception):
        writer.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
    writer.close()


def serve_listener(server: Any, where: Listener) -> int:
    """Serve one client at a time at ``where`` until a session ends; returns the exit code.

    A connection is a session only once its first message is :func:`admitted` and no other
    session is running: until then nothing it sends reaches the protocol (no settings, no
    worker), and the writer the server answers on stays the session's."""
    stop = threading.Event()
    server._stop_event = stop
    state = {"waiting": 0, "session": False}

    async def first_message(frames: LspMessageReader) -> bytes | Skipped | None:
        state["waiting"] += 1
        try:
            return await asyncio.wait_for(frames.read(), FIRST_MESSAGE_TIMEOUT_S)
        except asyncio.TimeoutError:
            return None
        finally:
            state["waiting"] -= 1

    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if state["session"] or state["waiting"] >= MAX_WAITING:
            _refuse(writer, "fxls serves one client at a time")
            return
        frames = LspMessageReader(reader.read, max_message=MAX_FIRST_MESSAGE)
        first = admitted(await first_message(frames), where.token)
        if first is None or state["session"]:
            _refuse(writer, FIRST_MESSAGE)
            return
        state["session"] = True
        frames.max_message = MAX_MESSAGE
        server.protocol.set_writer(writer)
        try:
            server.protocol.receive(first)
            await _serve(server, frames, stop)
        finally:
            server.shutdown()

    async def main() -> None:
        server._server = await where.start(connection)
        for sock in server._server.sockets:
            name = sock.getsockname()
            shown = name if isinstance(name, str) else f"{name[0]}:{name[1]}"
            print(f"fxls: listening on {shown}", file=sys.stderr, flush=True)
        async with server._server:
            await server._server.serve_forever()

    code = 0
    try:
        asyncio.run(main())
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 0
    except (asyncio.CancelledError, KeyboardInterrupt):
        pass
    except OSError as exc:
        print(f"fxls: cannot listen: {exc}", file=sys.stderr)
        code = 1
    finally:
        where.close()
    return code
