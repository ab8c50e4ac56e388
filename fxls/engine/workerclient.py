"""Server-side client of the worker zygote (asyncio; never imports torch).

``WorkerClient`` starts ``python -m fxls.worker`` in the project's interpreter, submits capture
jobs and cancels them, and supervises the process: when the zygote dies, pending jobs return
``worker_died`` and it restarts with backoff; after ``MAX_RESTARTS`` restarts within a minute
tracing is disabled and every job returns ``worker_died`` at once.

The zygote gets its own session and pipes for stdin, stdout and stderr, so nothing it or a
job prints can reach the server's own stdout (the JSON-RPC stream).

States: ``stopped`` (not started or closed), ``starting``, ``running``, ``errored`` (the
first start failed; see ``start_error``), ``disabled`` (too many crashes).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

from fxls.protocol.codec import ProtocolError, from_dict
from fxls.protocol.copies import ExpansionTooLarge, check_received
from fxls.protocol.frames import FrameReader, decode_body, encode_frame
from fxls.protocol.model import (
    PROTOCOL_VERSION,
    CaptureJob,
    CompileJob,
    Isolation,
    JobKind,
    JobRequest,
    JobResult,
    Limits,
    ReadyInfo,
    RewriteJob,
)

State = Literal["stopped", "starting", "running", "errored", "disabled"]

MAX_RESTARTS = 5
"""Restarts allowed within ``RESTART_WINDOW_S`` before tracing is disabled."""
RESTART_WINDOW_S = 60.0
START_TIMEOUT_S = 120.0
"""How long the zygote may take to import torch and pre-warm."""
RESULT_GRACE_S = 30.0
"""Extra time after a job's own timeout before the zygote is considered hung and killed."""
_STDERR_TAIL = 40

_logger = logging.getLogger("fxls.worker")

WORKER_ENV_NAMES = frozenset(
    {
        "PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "TMP", "TEMP",
        "PYTHONPATH", "PYTHONHOME", "PYTHONSAFEPATH", "PYTHONNOUSERSITE", "PYTHONUSERBASE",
        "PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX", "PYTHONIOENCODING", "PYTHONUTF8",
        "PYTHONWARNINGS", "PYTHONHASHSEED", "PYTHONUNBUFFERED", "VIRTUAL_ENV", "CONDA_PREFIX",
        "LD_LIBRARY_PATH",
    }
)  # fmt: skip
WORKER_ENV_PREFIXES = ("LC_", "FXLS_", "OMP_", "MKL_", "OPENBLAS_", "KMP_", "TORCH_", "PYTORCH_")
"""The worker runs user code: it gets only these variables of the server's environment (the
locale, paths, Python's and the thread pools' settings, fxls's own), never API tokens."""
WORKER_ENV_SECRETS = frozenset({"FXLS_TOKEN"})
"""fxls's own variables that are secrets (a listening server's token): never passed on."""


def worker_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The allow-listed part of ``environ`` that the worker is started with."""
    return {
        name: value
        for name, value in environ.items()
        if (name in WORKER_ENV_NAMES or name.startswith(WORKER_ENV_PREFIXES))
        and name not in WORKER_ENV_SECRETS
    }


class WorkerStartError(RuntimeError):
    """The zygote did not become ready (bad interpreter, torch missing, crash in start-up)."""


def _package_root() -> str:
    """The folder that contains the ``fxls`` package (goes on the worker's PYTHONPATH)."""
    return str(Path(__file__).resolve().parents[2])


_REPLACED_LAYERS = frozenset({"cgroup"})
"""Layers whose absence another rule makes up for (no memory cgroup: memfd_create denied and
open files capped), so it is logged, not warned about."""


async def _read_frame(
    reader: asyncio.StreamReader, frames: FrameReader
) -> tuple[dict[str, Any], int]:
    """The next message from the zygote and its frame's size; IncompleteReadError at EOF."""
    while (body := frames.next_body()) is None:
        chunk = await reader.read(1 << 20)
        if not chunk:
            raise asyncio.IncompleteReadError(b"", None)
        frames.feed(chunk)
    return decode_body(body), len(body)


def decode_result(message: Any, frame_bytes: int) -> JobResult:
    """A ``JobResult`` from the zygote's result frame of ``frame_bytes``, as the worker sent
    it: copied records stay copies (``fxls.protocol.copies.expanded`` makes them whole);
    ``ProtocolError`` when it does not decode or its copies do not fit.

    The job may have forged the payload (its MAC key is in its own memory), so what the
    copies expand to is checked against the frame's budget here, before anyone expands
    them (``check_received``); a result over it becomes ``result_too_large`` for that job
    only.
    """
    result = from_dict(JobResult, message)
    if result.payload is None:
        return result
    try:
        check_received(result.payload.modules, frame_bytes)
    except ExpansionTooLarge as exc:
        return replace(result, kind="result_too_large", message=str(exc), payload=None)
    return result


class _Adopted:
    """A zygote started by ``subprocess.Popen`` before the event loop ran, with the parts of
    ``asyncio.subprocess.Process`` the client uses (streams, ``pid``, ``returncode``,
    ``wait``)."""

    def __init__(
        self,
        popen: subprocess.Popen[bytes],
        stdin: asyncio.StreamWriter,
        stdout: asyncio.StreamReader,
        stderr: asyncio.StreamReader,
    ) -> None:
        self._popen = popen
        self.stdin, self.stdout, self.stderr = stdin, stdout, stderr
        self.pid = popen.pid

    @classmethod
    async def adopt(cls, popen: subprocess.Popen[bytes]) -> _Adopted:
        assert popen.stdin is not None and popen.stdout is not None and popen.stderr is not None
        loop = asyncio.get_running_loop()
        readers = []
        for pipe in (popen.stdout, popen.stderr):
            reader = asyncio.StreamReader(loop=loop)
            await loop.connect_read_pipe(
                functools.partial(asyncio.StreamReaderProtocol, reader), pipe
            )
            readers.append(reader)
        transport, protocol = await loop.connect_write_pipe(
            asyncio.streams.FlowControlMixin, popen.stdin
        )
        writer = asyncio.StreamWriter(transport, protocol, None, loop)
        return cls(popen, writer, readers[0], readers[1])

    @property
    def returncode(self) -> int | None:
        return self._popen.poll()

    async def wait(self) -> int:
        return await asyncio.to_thread(self._popen.wait)


class WorkerClient:
    """Start, use and supervise one worker zygote.

    Args:
        python: interpreter that runs the worker (needs torch); default ``sys.executable``.
        env: environment for the worker; default the allow-listed part of the server's
            (``worker_environment``). ``PYTHONPATH`` gets the folder of this ``fxls`` package
            prepended, and ``PYTHONHASHSEED`` is 0 unless it is set.
        log: receives the zygote's log lines and stderr; default the ``fxls.worker`` logger.
        scratch_dir: folder for per-job directories; default a private temporary folder that
            ``close()`` removes.
    """

    def __init__(
        self,
        python: str | None = None,
        *,
        env: dict[str, str] | None = None,
        log: Callable[[str], None] | None = None,
        scratch_dir: str | None = None,
    ) -> None:
        self.python = python or sys.executable
        self._frames = FrameReader()
        """Frames from the running zygote (a new reader per start)."""
        self._env = worker_environment(os.environ) if env is None else dict(env)
        root = _package_root()
        existing = self._env.get("PYTHONPATH")
        self._env["PYTHONPATH"] = root + (os.pathsep + existing if existing else "")
        # one file, one result, in every run: a model that iterates a set of strings (a
        # configuration's ``set(layer_types)``) takes them in the same order each time
        self._env.setdefault("PYTHONHASHSEED", "0")
        self._log = log or _logger.info
        self._own_scratch = scratch_dir is None
        self._scratch = scratch_dir
        self._state: State = "stopped"
        self.ready: ReadyInfo | None = None
        self.captures_ready = False
        """The running zygote has imported what captures need (its ``captures`` frame): until
        then it runs ``preview`` jobs first (``fxls.engine.analyze.preview``)."""
        self.start_error: str | None = None
        self._proc: asyncio.subprocess.Process | None = None
        self._pending: dict[int, asyncio.Future[JobResult]] = {}
        self._pongs: dict[int, asyncio.Future[float]] = {}
        self._next_id = 1
        self._tasks: set[asyncio.Task[Any]] = set()
        self._reader: asyncio.Task[None] | None = None
        self._restarter: asyncio.Task[None] | None = None
        self._restarts: collections.deque[float] = collections.deque()
        self._available = asyncio.Event()
        self._closing = False
        self._start_lock = asyncio.Lock()
        self._prestarted: subprocess.Popen[bytes] | None = None

    # -- public API ------------------------------------------------------------------------

    @property
    def state(self) -> State:
        return self._state

    def set_log(self, log: Callable[[str], None]) -> None:
        """Send the zygote's log lines and stderr to ``log`` from now on."""
        self._log = log

    def prestart(self) -> None:
        """Start the zygote now, before an event loop runs (the language server calls this
        before importing its LSP libraries, so torch loads meanwhile); ``start`` then adopts
        it. Raises ``OSError`` when the interpreter cannot be run."""
        if self._prestarted is not None:
            return
        self._prestarted = subprocess.Popen(
            self._command(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=self._env,
            cwd=self._scratch,
            start_new_session=True,
        )

    @property
    def prestarted(self) -> bool:
        """Whether a zygote from ``prestart`` waits to be adopted by ``start``."""
        return self._prestarted is not None

    @property
    def pid(self) -> int | None:
        """Process id of the current zygote, if one runs."""
        return self._proc.pid if self._proc is not None and self._state == "running" else None

    async def start(self) -> ReadyInfo:
        """Start the zygote and wait until it is warm; raises WorkerStartError on failure."""
        async with self._start_lock:
            if self._state == "running" and self.ready is not None:
                return self.ready
            self._closing = False
            try:
                return await self._spawn()
            except WorkerStartError as exc:
                self._state = "errored"
                self.start_error = str(exc)
                self._available.set()
                raise

    async def run(
        self,
        job: CaptureJob,
        limits: Limits | None = None,
        isolation: Isolation | None = None,
        *,
        rewrite: RewriteJob | None = None,
        compile: CompileJob | None = None,
    ) -> JobResult:
        """Run one capture job (a rewrite job with ``rewrite``, a compile check with
        ``compile``) and return its result (never raises for job failures).

        Cancelling the awaiting task cancels the job in the worker and re-raises.
        """
        kind = _kind(rewrite, compile)
        return await self.submit(
            lambda job_id: JobRequest(
                job_id,
                job,
                limits or Limits(),
                isolation or Isolation(),
                kind=kind,
                rewrite=rewrite,
                compile=compile,
            )
        )

    async def preview(
        self, job: CaptureJob, limits: Limits | None = None, isolation: Isolation | None = None
    ) -> JobResult:
        """Run one ``preview`` job (``fxls.worker.capture.preview``), like :meth:`run`."""
        return await self.submit(
            lambda job_id: JobRequest(
                job_id, job, limits or Limits(), isolation or Isolation(), kind="preview"
            )
        )

    async def submit(self, make: Callable[[int], JobRequest]) -> JobResult:
        """Send the job ``make`` returns for a new job id, once the worker runs, and return
        its result (never raises for job failures; cancelling cancels the job)."""
        job_id = self._next_id
        self._next_id += 1
        if self._state == "stopped":
            try:
                await self.start()
            except WorkerStartError as exc:
                return JobResult(job_id, "worker_died", message=f"the worker did not start: {exc}")
        if self._state == "starting":
            await self._available.wait()
        if self._state != "running" or self._proc is None or self._proc.stdin is None:
            return JobResult(job_id, "worker_died", message=self._unavailable_message())
        request = make(job_id)
        future: asyncio.Future[JobResult] = asyncio.get_running_loop().create_future()
        self._pending[job_id] = future
        proc = self._proc
        try:
            try:
                self._send({"type": "job", "job": request})
            except ConnectionError as exc:
                self._pending.pop(job_id, None)
                return JobResult(job_id, "worker_died", message=f"the worker is gone: {exc}")
            done, _ = await asyncio.wait(
                {future}, timeout=request.limits.timeout_s + RESULT_GRACE_S
            )
            if not done:
                self._log(f"worker did not answer job {job_id} in time; restarting it")
                self._kill(proc)
            return await future
        except asyncio.CancelledError:
            self._pending.pop(job_id, None)
            if not future.done():
                future.cancel()
                with contextlib.suppress(Exception):
                    self._send({"type": "cancel", "id": job_id})
            raise

    async def ping(self, timeout: float = 5.0) -> float:
        """Round trip through the zygote's event loop, in seconds."""
        if self._state != "running":
            raise RuntimeError(f"worker is {self._state}")
        ping_id = self._next_id
        self._next_id += 1
        future: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self._pongs[ping_id] = future
        started = time.perf_counter()
        try:
            self._send({"type": "ping", "id": ping_id})
            await asyncio.wait_for(future, timeout)
        finally:
            self._pongs.pop(ping_id, None)
        return time.perf_counter() - started

    async def close(self) -> None:
        """Stop the zygote (which kills and reaps every job child) and wait for it to exit."""
        self._closing = True
        early, self._prestarted = self._prestarted, None
        if early is not None:
            self._kill(early)
            await asyncio.to_thread(early.wait)
            for stream in (early.stdin, early.stdout, early.stderr):
                if stream is not None:
                    stream.close()
        if self._restarter is not None:
            self._restarter.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._restarter
        proc = self._proc
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(Exception):
                self._send({"type": "shutdown"})
                if proc.stdin is not None:
                    proc.stdin.close()
            try:
                await asyncio.wait_for(proc.wait(), 5.0)
            except asyncio.TimeoutError:
                self._kill(proc)
                await proc.wait()
        if self._reader is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, asyncio.TimeoutError):
                await asyncio.wait_for(task, 2.0)
        self._fail_pending("the worker was closed")
        self._state = "stopped"
        self._proc = None
        if self._own_scratch and self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None

    # -- process management ----------------------------------------------------------------

    def _unavailable_message(self) -> str:
        if self._state == "disabled":
            return (
                f"tracing is disabled: the worker crashed {MAX_RESTARTS} times within "
                f"{RESTART_WINDOW_S:g} seconds; restart the server to try again"
            )
        if self._state == "errored":
            return f"the worker did not start: {self.start_error}"
        return f"the worker is {self._state}"

    def _send(self, message: Any) -> None:
        proc = self._proc
        if proc is None or proc.stdin is None or proc.stdin.is_closing():
            raise ConnectionResetError("worker control channel is closed")
        proc.stdin.write(encode_frame(message))

    def _kill(self, proc: asyncio.subprocess.Process | _Adopted | subprocess.Popen[bytes]) -> None:
        for kill in (os.killpg, os.kill):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                kill(proc.pid, signal.SIGKILL)

    def _spawn_task(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _command(self) -> list[str]:
        if self._scratch is None:
            self._scratch = tempfile.mkdtemp(prefix="fxls-scratch-")
        os.makedirs(self._scratch, mode=0o700, exist_ok=True)
        extra = ["--remove-scratch"] if self._own_scratch else []
        return [self.python, "-m", "fxls.worker", "--scratch", self._scratch, *extra]

    async def _spawn(self) -> ReadyInfo:
        self._state = "starting"
        self._available.clear()
        early, self._prestarted = self._prestarted, None
        proc: Any
        try:
            if early is not None and early.poll() is None:
                proc = await _Adopted.adopt(early)
            else:
                proc = await asyncio.create_subprocess_exec(
                    *self._command(),
                    stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.PIPE,
                    env=self._env,
                    cwd=self._scratch,
                    start_new_session=True,
                )
        except OSError as exc:
            raise WorkerStartError(f"cannot run {self.python}: {exc}") from exc
        except BaseException:
            if early is not None:  # cancelled while adopting it: nobody else will reap it
                self._kill(early)
                await asyncio.shield(asyncio.to_thread(early.wait))
            raise
        assert proc.stdout is not None and proc.stderr is not None
        tail: collections.deque[str] = collections.deque(maxlen=_STDERR_TAIL)
        self._spawn_task(self._pump_stderr(proc.stderr, tail))
        messages: list[str] = []
        self._frames = FrameReader()
        self.captures_ready = False
        try:
            ready = await asyncio.wait_for(
                self._await_ready(proc.stdout, messages), START_TIMEOUT_S
            )
        except asyncio.CancelledError:
            self._kill(proc)
            # reap it: an adopted zygote (a Popen) is waited for by nobody else, and stays a
            # zombie of the server until it exits (a shutdown while the worker warms up)
            await asyncio.shield(proc.wait())
            raise
        except (asyncio.IncompleteReadError, ProtocolError, asyncio.TimeoutError) as exc:
            self._kill(proc)
            code = await proc.wait()
            await asyncio.sleep(0.05)  # let the stderr pump collect the last lines
            why = "; ".join(messages) or (
                "timed out" if isinstance(exc, asyncio.TimeoutError) else f"exit code {code}"
            )
            detail = "\n".join(tail)
            raise WorkerStartError(
                f"{self.python} -m fxls.worker failed to start ({why})"
                + (f":\n{detail}" if detail else "")
            ) from exc
        self._proc = proc
        self.ready = ready
        self.start_error = None
        self._state = "running"
        self._available.set()
        self._reader = asyncio.ensure_future(self._read_loop(proc))
        self._log(
            f"worker {ready.pid} ready in {ready.warm_s:.2f}s (torch {ready.torch_version}; "
            f"isolation {', '.join(ready.isolation_available) or 'none'})"
        )
        replaced = {k: why for k, why in ready.isolation_missing.items() if k in _REPLACED_LAYERS}
        lost = {k: why for k, why in ready.isolation_missing.items() if k not in replaced}
        if replaced:
            self._log("sandbox: " + "; ".join(f"{k}: {why}" for k, why in replaced.items()))
        if lost:
            missing = "; ".join(f"{k}: {why}" for k, why in lost.items())
            warning = (
                f"warning: sandbox layers unavailable, jobs run with less isolation: {missing}"
            )
            _logger.warning(warning)
            if self._log != _logger.info:
                self._log(warning)
        return ready

    async def _await_ready(self, reader: asyncio.StreamReader, messages: list[str]) -> ReadyInfo:
        while True:
            frame, _ = await _read_frame(reader, self._frames)
            if frame["type"] == "ready":
                ready = from_dict(ReadyInfo, {k: v for k, v in frame.items() if k != "type"})
                if ready.protocol != PROTOCOL_VERSION:
                    raise ProtocolError(
                        f"the worker speaks protocol {ready.protocol}, this server "
                        f"{PROTOCOL_VERSION}: its fxls is another version"
                    )
                return ready
            if frame["type"] == "log":
                messages.append(str(frame.get("message")))
                self._log(str(frame.get("message")))

    async def _pump_stderr(
        self, stream: asyncio.StreamReader, tail: collections.deque[str]
    ) -> None:
        while True:
            try:
                line = await stream.readline()
            except (ValueError, asyncio.LimitOverrunError):
                continue
            if not line:
                return
            text = line.decode("utf-8", "replace").rstrip()
            tail.append(text)
            self._log(f"worker: {text}")

    async def _read_loop(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        frames = self._frames
        try:
            while True:
                self._dispatch(*await _read_frame(proc.stdout, frames))
        except (asyncio.IncompleteReadError, ProtocolError, ConnectionError) as exc:
            if not isinstance(exc, asyncio.IncompleteReadError):
                self._log(f"worker control channel broken: {exc}")
        self._kill(proc)  # a zygote that closed its channel is useless; make sure it is gone
        code = await proc.wait()
        if proc is not self._proc:
            return
        self._proc = None
        self._fail_pending(f"the worker exited unexpectedly (exit status {code})")
        if self._closing:
            self._state = "stopped"
            return
        self._log(f"worker exited unexpectedly (exit status {code}); restarting")
        self._state = "starting"
        self._available.clear()
        self._restarter = asyncio.ensure_future(self._restart_loop())

    def _dispatch(self, frame: dict[str, Any], size: int) -> None:
        kind = frame["type"]
        if kind == "result":
            result = decode_result(frame.get("result"), size)
            future = self._pending.pop(result.id, None)
            if future is not None and not future.done():
                future.set_result(result)
        elif kind == "pong":
            pong = self._pongs.pop(frame.get("id"), None)  # type: ignore[arg-type]
            if pong is not None and not pong.done():
                pong.set_result(0.0)
        elif kind == "log":
            self._log(str(frame.get("message")))
        elif kind == "captures":
            self.captures_ready = True
        else:
            self._log(f"unexpected frame from the worker: {kind!r}")

    def _fail_pending(self, message: str) -> None:
        for job_id, future in list(self._pending.items()):
            if not future.done():
                future.set_result(JobResult(job_id, "worker_died", message=message))
        self._pending.clear()
        for pong in self._pongs.values():
            if not pong.done():
                pong.set_exception(ConnectionResetError(message))
        self._pongs.clear()

    async def _restart_loop(self) -> None:
        while not self._closing:
            now = time.monotonic()
            while self._restarts and now - self._restarts[0] > RESTART_WINDOW_S:
                self._restarts.popleft()
            if len(self._restarts) >= MAX_RESTARTS:
                self._state = "disabled"
                self._available.set()
                self._log(self._unavailable_message())
                return
            delay = 0.0 if not self._restarts else min(0.5 * 2 ** (len(self._restarts) - 1), 8.0)
            self._restarts.append(now)
            await asyncio.sleep(delay)
            try:
                await self._spawn()
                return
            except WorkerStartError as exc:
                self._log(str(exc))
                self._state = "starting"


def _kind(rewrite: RewriteJob | None, compile: CompileJob | None) -> JobKind:
    if compile is not None:
        return "compile"
    return "capture" if rewrite is None else "rewrite"
