"""The zygote: a pre-warmed process that forks one sandboxed child per capture job.

It multiplexes (``selectors``) the control channel from the server, each child's result pipe
(fd 3 in the child) and capture pipe (its fds 1 and 2), enforces wall timeouts, cancels, reaps
with ``wait4`` and classifies every outcome into a ``JobResult``. As a child subreaper it also
reaps and kills processes that escaped from a job (double forks, ``setsid``).

How a job process is created is behind ``Spawner`` so that a platform without a safe ``fork``
(macOS) can plug in pre-started single-use workers instead.
"""

from __future__ import annotations

import argparse
import collections
import ctypes
import errno
import gc
import os
import selectors
import shutil
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol, get_args

from fxls.protocol.codec import ProtocolError, from_dict, to_dict
from fxls.protocol.frames import (
    MAX_RESULT_BYTES,
    FrameReader,
    FrameTooLarge,
    decode_body,
    encode_frame,
)
from fxls.protocol.model import (
    PROTOCOL_VERSION,
    CaptureResult,
    ErrorInfo,
    JobRequest,
    JobResult,
    Limits,
    Phase,
    ReadyInfo,
    ResultKind,
)
from fxls.worker.process import sandbox

OUTPUT_HEAD_BYTES = 64 * 1024
MAX_JOBS = 2
ESCAPEE_WATCH_S = 5.0
"""How long after a job ends the zygote keeps looking for its escaped descendants."""
_PHASES = frozenset(get_args(Phase))
_OOM_MARKERS = ("can't allocate memory", "std::bad_alloc", "Cannot allocate memory")


# ---------------------------------------------------------------------------------------
# Spawning
# ---------------------------------------------------------------------------------------


@dataclass
class Spawned:
    pid: int
    result_fd: int
    capture_fd: int


class Spawner(Protocol):
    """Creates the isolated process for one job and returns its pid and read ends."""

    def spawn(self, request: JobRequest, job_dir: str) -> Spawned: ...


class ForkSpawner:
    """Linux: fork the warm zygote; the child isolates itself (``fxls.worker.process.child``)."""

    def __init__(self, available: list[str], landlock_abi: int) -> None:
        self.available = available
        self.landlock_abi = landlock_abi

    def spawn(self, request: JobRequest, job_dir: str) -> Spawned:
        capture_r, capture_w = os.pipe()
        result_r, result_w = os.pipe()
        plan = sandbox.ChildPlan(
            job_dir=job_dir,
            limits=request.limits,
            isolation=request.isolation,
            available=self.available,
            capture_w=capture_w,
            result_w=result_w,
            zygote_pid=os.getpid(),
            landlock_abi=self.landlock_abi,
        )
        _flush_stdio()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child never returns
            try:
                from fxls.worker.process.child import run_child

                run_child(request, plan)
            finally:
                os._exit(71)
        os.close(capture_w)
        os.close(result_w)
        return Spawned(pid, result_r, capture_r)


def _flush_stdio() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    try:
        ctypes.CDLL(None).fflush(None)
    except OSError:
        pass


# ---------------------------------------------------------------------------------------
# Job bookkeeping and classification
# ---------------------------------------------------------------------------------------


@dataclass
class Job:
    request: JobRequest
    job_dir: str
    spawned: Spawned
    started: float
    deadline: float
    kill_reason: str | None = None
    phase: Phase | None = "setup"
    current_class: str | None = None
    isolation: list[str] = field(default_factory=list)
    setup_error: str | None = None
    protocol_error: str | None = None
    too_large: int | None = None
    payload: CaptureResult | None = None
    frames: int = 0
    frames_in: FrameReader = field(
        default_factory=lambda: FrameReader(limit=MAX_RESULT_BYTES + 4096)
    )
    output_head: bytearray = field(default_factory=bytearray)
    output_bytes: int = 0
    status: int | None = None
    rusage: Any = None

    @property
    def id(self) -> int:
        return self.request.id


def sane_limits(limits: Limits) -> Limits:
    """Clamp limits to values the sandbox can enforce (a limit can be raised, not removed)."""

    def clamp(value: float, low: float, high: float) -> float:
        return min(max(value, low), high) if value == value else high  # NaN -> high

    return Limits(
        timeout_s=clamp(limits.timeout_s, 0.1, 3600.0),
        cpu_s=clamp(limits.cpu_s, 1.0, 3600.0),
        memory_mb=int(clamp(limits.memory_mb, 64, 1 << 20)),
        file_size_mb=int(clamp(limits.file_size_mb, 1, 1 << 20)),
        nofile=int(clamp(limits.nofile, 32, 65536)),
    )


def _is_oom(error: ErrorInfo) -> bool:
    return error.type == "MemoryError" or any(m in error.message for m in _OOM_MARKERS)


def _first_oom(payload: CaptureResult) -> tuple[ErrorInfo, str | None] | None:
    if payload.error is not None and _is_oom(payload.error):
        return payload.error, None
    for module in payload.modules:
        if module.error is not None and _is_oom(module.error):
            return module.error, module.name
    return None


def classify(job: Job) -> JobResult:
    """Turn everything known about a finished job into its ``JobResult``.

    Precedence: set-up failure, the zygote's own kill reason (timeout, cancel, protocol),
    the child's frames, how the process ended (signals, exit codes), then the payload. A
    delivered payload is ``ok``: exceptions, ``SystemExit`` and ``RecursionError`` the capture
    caught are in its file and module errors. Only an allocation failure caught there (a
    MemoryError or torch's "can't allocate memory") makes the job ``oom``, with ``phase`` and
    ``current_class`` of that error.
    """
    result = JobResult(
        id=job.id,
        kind="ok",
        phase=job.phase,
        current_class=job.current_class,
        output_head=bytes(job.output_head).decode("utf-8", "replace"),
        output_bytes=job.output_bytes,
        isolation=list(job.isolation),
        duration_s=round(time.monotonic() - job.started, 4),
    )
    status = job.status if job.status is not None else 0
    cpu = 0.0
    if job.rusage is not None:
        result.max_rss_kb = int(job.rusage.ru_maxrss)
        cpu = job.rusage.ru_utime + job.rusage.ru_stime
    signum = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
    result.signal, result.exit_code = signum, code
    limits = job.request.limits

    def done(kind: ResultKind, message: str) -> JobResult:
        result.kind = kind
        result.message = message
        return result

    if job.setup_error is not None:
        return done("sandbox_setup", f"sandbox set-up failed: {job.setup_error}")
    reasons: dict[str, tuple[ResultKind, str]] = {
        "timeout": ("timeout", f"wall time limit of {limits.timeout_s:g} s reached"),
        "cancelled": ("cancelled", "cancelled"),
        "shutdown": ("cancelled", "the worker shut down"),
    }
    if job.kill_reason in reasons:
        return done(*reasons[job.kill_reason])
    if job.too_large is not None:
        return done(
            "result_too_large",
            f"result of {job.too_large} bytes exceeds {MAX_RESULT_BYTES} bytes",
        )
    if job.protocol_error is not None:
        return done("protocol_error", f"bad frame from the job: {job.protocol_error}")
    if signum is not None:
        if signum == signal.SIGXCPU or (signum == signal.SIGKILL and cpu >= limits.cpu_s + 1.0):
            return done("cpu_limit", f"CPU time limit of {limits.cpu_s:g} s reached")
        if signum == signal.SIGXFSZ:
            return done("file_size_limit", f"file size limit of {limits.file_size_mb} MiB reached")
        if signum == signal.SIGABRT and "std::bad_alloc" in result.output_head:
            return done("oom", f"memory limit of {limits.memory_mb} MiB reached")
        if signum == signal.SIGKILL:
            return done("killed", "killed by SIGKILL from outside fxls")
        return done("signal", f"killed by signal {signum} ({signal.Signals(signum).name})")
    if job.payload is None or code != 0:
        return done("exit", f"exited with code {code} without a result")
    result.payload = job.payload
    oom = _first_oom(job.payload)
    if oom is None:
        return done("ok", "")
    error, result.current_class = oom
    result.phase = error.phase
    summary = f"{error.type}: {error.message}"[:500]
    return done("oom", f"memory limit of {limits.memory_mb} MiB reached ({summary})")


# ---------------------------------------------------------------------------------------
# The event loop
# ---------------------------------------------------------------------------------------


class Zygote:
    """Serves the control channel until shutdown or EOF; at most ``max_jobs`` run at once."""

    def __init__(
        self,
        ctl_in: int,
        ctl_out: int,
        scratch: str,
        spawner: Spawner,
        *,
        max_jobs: int = MAX_JOBS,
    ) -> None:
        self.ctl_in, self.ctl_out = ctl_in, ctl_out
        self.scratch = scratch
        self.spawner = spawner
        self.max_jobs = max_jobs
        self.sel = selectors.DefaultSelector()
        self.jobs: dict[int, Job] = {}  # by pid
        self.queue: collections.deque[JobRequest] = collections.deque()
        self.control = FrameReader()
        self.stopping = False
        self.watch_until = 0.0
        os.set_blocking(ctl_in, False)
        self.sel.register(ctl_in, selectors.EVENT_READ, self._on_control)
        self.wake_r, wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        self.sel.register(self.wake_r, selectors.EVENT_READ, self._on_wakeup)

    # -- sending ---------------------------------------------------------------------------

    def send(self, message: Any) -> None:
        data = memoryview(encode_frame(message))
        os.set_blocking(self.ctl_out, True)
        try:
            while data:
                data = data[os.write(self.ctl_out, data) :]
        except BrokenPipeError:  # the server is gone: stop everything
            self.stopping = True
            for job in self.jobs.values():
                self._kill(job, "shutdown")

    def log(self, message: str) -> None:
        self.send({"type": "log", "message": message})

    # -- control channel -------------------------------------------------------------------

    def _on_control(self, fd: int) -> None:
        try:
            chunk = os.read(fd, 1 << 20)
        except BlockingIOError:
            return
        if not chunk:
            self.sel.unregister(fd)
            self._shutdown()
            return
        self.control.feed(chunk)
        while True:
            try:
                body = self.control.next_body()
                if body is None:
                    return
                message = decode_body(body)
            except ProtocolError as exc:
                self.log(f"bad control frame, closing: {exc}")
                self._shutdown()
                return
            self._handle(message)

    def _handle(self, message: dict[str, Any]) -> None:
        kind = message["type"]
        if kind == "ping":
            self.send({"type": "pong", "id": message.get("id")})
        elif kind == "job":
            try:
                request = from_dict(JobRequest, message.get("job"))
            except ProtocolError as exc:
                job_id = (message.get("job") or {}).get("id")
                self.log(f"invalid job request: {exc}")
                if isinstance(job_id, int):
                    self.send(_result(JobResult(job_id, "protocol_error", message=str(exc))))
                return
            if self.stopping:
                self.send(_result(JobResult(request.id, "cancelled", message="shutting down")))
            else:
                request.limits = sane_limits(request.limits)
                self.queue.append(request)
        elif kind == "cancel":
            self._cancel(message.get("id"))
        elif kind == "shutdown":
            self._shutdown()
        else:
            self.log(f"unknown control frame type {kind!r}")

    def _cancel(self, job_id: Any) -> None:
        for request in list(self.queue):
            if request.id == job_id:
                self.queue.remove(request)
                self.send(_result(JobResult(request.id, "cancelled", message="cancelled")))
                return
        for job in self.jobs.values():
            if job.id == job_id:
                self._kill(job, "cancelled")

    def _shutdown(self) -> None:
        self.stopping = True
        for request in self.queue:
            self.send(_result(JobResult(request.id, "cancelled", message="the worker shut down")))
        self.queue.clear()
        for job in self.jobs.values():
            self._kill(job, "shutdown")

    # -- jobs ------------------------------------------------------------------------------

    def _start_queued(self) -> None:
        while self.queue and len(self.jobs) < self.max_jobs and not self.stopping:
            request = self.queue.popleft()
            started = time.monotonic()
            job_dir = None
            try:
                os.makedirs(self.scratch, mode=0o700, exist_ok=True)
                job_dir = tempfile.mkdtemp(prefix=f"job{request.id}-", dir=self.scratch)
                spawned = self.spawner.spawn(request, job_dir)
            except OSError as exc:
                if job_dir is not None:
                    shutil.rmtree(job_dir, ignore_errors=True)
                message = f"could not start the job: {exc}"
                self.send(_result(JobResult(request.id, "sandbox_setup", message=message)))
                continue
            job = Job(request, job_dir, spawned, started, started + request.limits.timeout_s)
            self.jobs[spawned.pid] = job
            for fd, callback in (
                (spawned.result_fd, self._on_result),
                (spawned.capture_fd, self._on_capture),
            ):
                os.set_blocking(fd, False)
                self.sel.register(
                    fd, selectors.EVENT_READ, lambda fd, j=job, cb=callback: cb(j, fd)
                )

    def _kill(self, job: Job, reason: str | None) -> None:
        if job.kill_reason is None and reason is not None:
            job.kill_reason = reason
        for kill in (os.killpg, os.kill):
            try:
                kill(job.spawned.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def _close(self, fd: int) -> None:
        try:
            self.sel.unregister(fd)
        except (KeyError, ValueError):
            pass
        try:
            os.close(fd)
        except OSError:
            pass

    def _chunks(self, fd: int, size: int, reads: int) -> Iterator[bytes]:
        """Up to ``reads`` non-blocking reads of ``fd``; closes it at EOF (or a read error)."""
        for _ in range(reads):
            try:
                chunk = os.read(fd, size)
            except BlockingIOError:
                return
            except OSError:
                chunk = b""
            if not chunk:
                self._close(fd)
                return
            yield chunk

    def _on_capture(self, job: Job, fd: int, drain: bool = False) -> None:
        for chunk in self._chunks(fd, 1 << 16, 64 if drain else 1):
            room = OUTPUT_HEAD_BYTES - len(job.output_head)
            if room > 0:
                job.output_head += chunk[:room]
            job.output_bytes += len(chunk)

    def _on_result(self, job: Job, fd: int, drain: bool = False) -> None:
        for chunk in self._chunks(fd, 1 << 20, 4096 if drain else 1):
            job.frames_in.feed(chunk)
            if not self._parse_child_frames(job):
                self._close(fd)
                self._kill(job, None)
                return

    def _parse_child_frames(self, job: Job) -> bool:
        """Consume complete frames; False when the job must be stopped."""
        while True:
            try:
                body = job.frames_in.next_body()
            except FrameTooLarge as exc:
                if exc.head == b'{"type":"result"':
                    job.too_large = exc.length
                else:
                    job.protocol_error = f"frame header announces {exc.length} bytes"
                return False
            if body is None:
                return True
            error = self._child_frame(job, body)
            if error is not None:
                job.protocol_error = error
                return False

    def _child_frame(self, job: Job, body: bytes) -> str | None:
        try:
            message = decode_body(body)
        except ProtocolError as exc:
            return str(exc)
        kind = message["type"]
        job.frames += 1
        finished = job.payload is not None or job.too_large is not None
        if finished:
            return f"unexpected {kind!r} frame after the result"
        if kind == "setup_error" and job.frames == 1:
            job.setup_error = str(message.get("message"))[:2000]
        elif kind == "isolation" and job.frames == 1:
            layers = message.get("layers")
            if not isinstance(layers, list) or not all(isinstance(x, str) for x in layers):
                return "bad isolation frame"
            job.isolation = layers
        elif kind == "phase" and job.frames > 1:
            phase, name = message.get("phase"), message.get("class")
            if phase not in _PHASES or not (name is None or isinstance(name, str)):
                return "bad phase frame"
            job.phase, job.current_class = phase, name
        elif kind == "result" and job.frames > 1:
            try:
                job.payload = from_dict(CaptureResult, message.get("payload"))
            except ProtocolError as exc:
                return str(exc)[:2000]
        elif kind == "result_too_large" and job.frames > 1:
            size = message.get("bytes")
            job.too_large = size if isinstance(size, int) else -1
        else:
            return f"unexpected {kind!r} frame"
        return None

    def _reap(self) -> None:
        while True:
            try:
                pid, status, rusage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            job = self.jobs.get(pid)
            if job is not None:
                job.status, job.rusage = status, rusage
                self._finish(job)

    def _finish(self, job: Job) -> None:
        self._kill(job, None)  # the rest of its process group
        for fd, drain in (
            (job.spawned.result_fd, self._on_result),
            (job.spawned.capture_fd, self._on_capture),
        ):
            if fd in self.sel.get_map():
                drain(job, fd, True)
            self._close(fd)
        del self.jobs[job.spawned.pid]
        pending = job.frames_in.pending
        if pending and job.protocol_error is None and job.too_large is None:
            job.protocol_error = f"{pending} bytes of an unfinished frame"
        try:
            result = classify(job)
        except Exception as exc:  # never lose a job to a classification bug
            result = JobResult(job.id, "protocol_error", message=f"unclassifiable result: {exc}")
        shutil.rmtree(job.job_dir, ignore_errors=True)
        self.send(_result(result))
        self.watch_until = time.monotonic() + ESCAPEE_WATCH_S

    def _check_deadlines(self) -> None:
        now = time.monotonic()
        for job in self.jobs.values():
            if job.kill_reason is None and now >= job.deadline:
                self._kill(job, "timeout")

    def _kill_escapees(self) -> None:
        """Kill children of ours that are not jobs: descendants orphaned by a job."""
        for pid in _own_children():
            if pid in self.jobs:
                continue
            for kill in (os.killpg, os.kill):
                try:
                    kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass

    def _on_wakeup(self, fd: int) -> None:
        try:
            while os.read(fd, 512):
                pass
        except BlockingIOError:
            pass

    def run(self) -> None:
        while not (self.stopping and not self.jobs):
            self._start_queued()
            now = time.monotonic()
            timeout: float | None = None
            if self.jobs:
                timeout = max(0.0, min(j.deadline for j in self.jobs.values()) - now)
            if self.jobs or now < self.watch_until:
                timeout = min(timeout if timeout is not None else 0.1, 0.1)
            for key, _ in self.sel.select(timeout):
                callback: Callable[[int], None] = key.data
                callback(key.fd)
            self._reap()
            self._check_deadlines()
            if self.jobs or time.monotonic() < self.watch_until:
                self._kill_escapees()
        self._kill_escapees()


def _own_children() -> set[int]:
    pids: set[int] = set()
    try:
        tids = os.listdir("/proc/self/task")
        for tid in tids:
            with open(f"/proc/self/task/{tid}/children") as f:
                pids.update(int(p) for p in f.read().split())
        return pids
    except OSError:
        pass
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                if int(fields[1]) == me:
                    pids.add(int(entry))
            except (OSError, IndexError, ValueError):
                pass
    return pids


def _result(result: JobResult) -> dict[str, Any]:
    return {"type": "result", "result": result}


# ---------------------------------------------------------------------------------------
# Start-up
# ---------------------------------------------------------------------------------------


def main(ctl_in: int, ctl_out: int, argv: list[str]) -> int:
    """Zygote entry (after ``__main__`` moved the control channel to ``ctl_in``/``ctl_out``)."""
    parser = argparse.ArgumentParser(prog="python -m fxls.worker")
    parser.add_argument("--scratch", default=None, help="folder for per-job directories")
    parser.add_argument(
        "--remove-scratch", action="store_true", help="delete the scratch folder on exit"
    )
    args = parser.parse_args(argv)
    scratch = args.scratch or tempfile.mkdtemp(prefix="fxls-jobs-")
    try:
        return _serve(ctl_in, ctl_out, scratch)
    finally:
        if args.remove_scratch or not args.scratch:
            shutil.rmtree(scratch, ignore_errors=True)


def _serve(ctl_in: int, ctl_out: int, scratch: str) -> int:
    started = time.monotonic()
    try:
        from fxls.worker.process.warmup import warm_up

        version = warm_up()
    except BaseException as exc:  # report why, then exit
        traceback.print_exc()
        try:
            encoded = encode_frame({"type": "log", "message": f"worker start-up failed: {exc!r}"})
            os.write(ctl_out, encoded)
        except OSError:
            pass
        return 3
    gc.collect()
    gc.freeze()
    available, missing = sandbox.probe_layers()
    if not sandbox.set_child_subreaper():
        missing["subreaper"] = "PR_SET_CHILD_SUBREAPER failed"
    abi = sandbox.landlock_abi()
    if "landlock" in available:
        for name, min_abi, what in (
            ("landlock-net", 4, "TCP bind/connect rules"),
            ("landlock-scope", 6, "signal and abstract-socket scoping"),
        ):
            if abi >= min_abi:
                available.append(name)
            else:
                missing[name] = f"Landlock ABI {abi} < {min_abi}: no {what}"
    ready = ReadyInfo(
        pid=os.getpid(),
        protocol=PROTOCOL_VERSION,
        python=sys.executable,
        torch_version=version,
        isolation_available=available,
        isolation_missing=missing,
        warm_s=round(time.monotonic() - started, 3),
    )
    zygote = Zygote(ctl_in, ctl_out, scratch, ForkSpawner(available, abi))
    zygote.send({"type": "ready", **to_dict(ready)})
    if abi:
        zygote.log(f"Landlock ABI {abi}")
    try:
        zygote.run()
    except OSError as exc:
        if exc.errno != errno.EPIPE:
            raise
    return 0
