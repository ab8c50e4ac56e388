"""The zygote: a pre-warmed process that forks one sandboxed child per capture job.

It multiplexes (``selectors``) the control channel from the server, each child's result pipe
(fd 3 in the child) and output pipe (its fds 1 and 2: what the job prints), enforces wall
timeouts, cancels, reaps with ``wait4`` and classifies every outcome into a ``JobResult``. As
a child subreaper it also reaps and kills processes that escaped from a job (double forks,
``setsid``).

How a job process is created is behind ``Spawner`` so that a platform without a safe ``fork``
(macOS) can plug in pre-started single-use workers instead.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import ctypes
import errno
import functools
import gc
import hmac
import json
import os
import re
import secrets
import select
import selectors
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, get_args

from fxls.protocol.codec import ProtocolError, from_dict, to_dict
from fxls.protocol.copies import ExpansionTooLarge, check_received
from fxls.protocol.frames import (
    MAX_RESULT_BYTES,
    FrameReader,
    FrameTooLarge,
    decode_body,
    encode_frame,
    frame_of,
    write_all,
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
from fxls.worker.process import preload, sandbox
from fxls.worker.process.child import MAC_LEN, frame_mac

OUTPUT_HEAD_BYTES = 64 * 1024
MAX_JOBS = 2
ESCAPEE_WATCH_S = 5.0
"""How long after a job ends the zygote keeps looking for its escaped descendants."""
JOB_DIR_SIZE_FACTOR = 4
"""The job directory may hold this many times the file size limit (256 MiB by default)."""
JOB_DIR_MAX_ENTRIES = 10_000
JOB_DIR_MAX_DEPTH = 32
DISK_CHECK_S = 0.25
"""How often the zygote measures each running job's directory."""
MAX_JOB_THREADS = 2 * sandbox.JOB_TASKS
"""A job with more threads is killed. RLIMIT_NPROC (or a cgroup's ``pids.max``) stops a job
at ``JOB_TASKS`` new threads; the kernel does not apply RLIMIT_NPROC to uid 0, so without a
cgroup only this watch (every turn of the loop, at most 0.1 s apart while jobs run) keeps a
root job from taking the machine's process ids for its whole time limit."""
_PHASES = frozenset(get_args(Phase))
_LAYER_NAME = re.compile(r"[a-z0-9_-]{1,40}")
_OOM_MARKERS = ("can't allocate memory", "std::bad_alloc", "Cannot allocate memory")


# ---------------------------------------------------------------------------------------
# Spawning
# ---------------------------------------------------------------------------------------


@dataclass
class Spawned:
    pid: int
    result_fd: int
    output_fd: int
    frame_key: bytes = b""
    """The job's key for the MAC of its result frames (``fxls.worker.process.child``)."""
    cgroup: str | None = None
    """The job's memory cgroup, when there is one."""


class Spawner(Protocol):
    """Creates the isolated process for one job and returns its pid and read ends."""

    def spawn(self, request: JobRequest, job_dir: str) -> Spawned: ...

    def prepare(self) -> None:
        """Make the process of the next job ahead of it, if the spawner can."""

    def discard(self) -> None:
        """End a process made ahead (the zygote's state changes, or it stops)."""

    def spare_pid(self) -> int | None:
        """The process made ahead, waiting for its job (not an escapee)."""


@dataclass
class _Ends:
    """The child's ends of its pipes, its frame key and the zygote it belongs to."""

    output_w: int
    result_w: int
    frame_key: bytes
    zygote_pid: int
    seccomp: dict[bool, bytes] = field(default_factory=dict)
    """Its seccomp programs, made ahead (``sandbox.ChildSetup.seccomp``)."""


@dataclass
class _Spare:
    """A child forked ahead of its job, blocked reading the job from ``request_w``'s pipe."""

    pid: int
    request_w: int
    result_r: int
    output_r: int
    frame_key: bytes
    forked: float
    """``time.monotonic()`` when it was forked."""
    after: str | None
    """The kind of the job spawned last before it (its wait is kept by that kind)."""


class ForkSpawner:
    """Linux: fork the warm zygote; the child isolates itself (``fxls.worker.process.child``).

    Forking the zygote (~300 MiB of page tables to copy) takes 3-8 ms before the child runs;
    ``prepare`` forks a spare child while the zygote is idle, which waits for its job on a
    pipe, so a job starts without that wait. The spare is the same fork of the same state: the
    zygote makes one only once its warm-up is done (its state no longer changes), and it
    isolates itself after reading its job, as a child forked for the job does."""

    def __init__(
        self,
        available: list[str],
        landlock_abi: int,
        cgroup: sandbox.MemoryCgroup | None = None,
    ) -> None:
        self.available = available
        self.landlock_abi = landlock_abi
        self.cgroup = cgroup
        self.spare: _Spare | None = None
        self.waits: dict[str | None, collections.deque[float]] = {}
        """How long the last spares waited for their job (seconds), by the kind of the job
        spawned before each: a capture's compile check follows it at once, the next capture
        comes when the user has typed again."""
        self.last_kind: str | None = None

    def _setup(
        self, request: JobRequest, job_dir: str, ends: _Ends, cgroup: str | None
    ) -> sandbox.ChildSetup:
        return sandbox.ChildSetup(
            job_dir=job_dir,
            limits=request.limits,
            isolation=request.isolation,
            available=self.available,
            output_w=ends.output_w,
            result_w=ends.result_w,
            zygote_pid=ends.zygote_pid,
            landlock_abi=self.landlock_abi,
            cgroup=cgroup,
            frame_key=ends.frame_key,
            project=sandbox.project_folders(request.capture.path, request.capture.sys_path),
            seccomp=ends.seccomp,
        )

    def _job_cgroup(self, request: JobRequest) -> str | None:
        if self.cgroup is None:
            return None
        try:
            return self.cgroup.job_group(request.id, request.limits.memory_mb << 20)
        except OSError:  # the child falls back to the limits that work without it
            return None

    def spawn(self, request: JobRequest, job_dir: str) -> Spawned:
        self.last_kind = request.kind
        spare = self._take_spare(request, job_dir)
        if spare is not None:
            return spare
        frame_key = secrets.token_bytes(32)
        job_cgroup = self._job_cgroup(request)
        output_r, output_w = os.pipe()
        result_r, result_w = os.pipe()
        ends = _Ends(output_w, result_w, frame_key, os.getpid())
        setup = self._setup(request, job_dir, ends, job_cgroup)
        _flush_stdio()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child never returns
            try:
                from fxls.worker.process.child import run_child

                run_child(request, setup)
            finally:
                os._exit(71)
        os.close(output_w)
        os.close(result_w)
        return Spawned(pid, result_r, output_r, frame_key, job_cgroup)

    def _take_spare(self, request: JobRequest, job_dir: str) -> Spawned | None:
        """Give ``request`` to the spare child; None when there is none or it is gone."""
        spare, self.spare = self.spare, None
        if spare is None:
            return None
        self.note_wait(spare.after, time.monotonic() - spare.forked)
        job_cgroup = self._job_cgroup(request)
        message = {"request": to_dict(request), "job_dir": job_dir, "cgroup": job_cgroup}
        try:
            write_all(spare.request_w, json.dumps(message).encode())
        except OSError:  # it died (killed from outside): fork as usual
            _end_spare(spare)
            if job_cgroup is not None:
                sandbox.remove_cgroup(job_cgroup)
            return None
        os.close(spare.request_w)
        return Spawned(spare.pid, spare.result_r, spare.output_r, spare.frame_key, job_cgroup)

    def prepare(self) -> None:
        if self.spare is not None:
            return
        frame_key = secrets.token_bytes(32)
        output_r, output_w = os.pipe()
        result_r, result_w = os.pipe()
        request_r, request_w = os.pipe()
        zygote = os.getpid()
        _flush_stdio()
        forked = time.monotonic()
        until = self.expected(forked)
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child never returns
            try:
                for fd in (output_r, result_r, request_w):
                    os.close(fd)
                ends = _Ends(output_w, result_w, frame_key, zygote)
                self._wait_for_job(request_r, ends, until)
            finally:
                os._exit(71)
        for fd in (output_w, result_w, request_r):
            os.close(fd)
        self.spare = _Spare(pid, request_w, result_r, output_r, frame_key, forked, self.last_kind)

    def note_wait(self, after: str | None, seconds: float) -> None:
        """A spare forked after a job of kind ``after`` got its own job ``seconds`` later."""
        waits = self.waits.setdefault(after, collections.deque(maxlen=SPARE_WAITS))
        waits.append(seconds)

    def expected(self, forked: float) -> float | None:
        """When the job of a spare forked now (``forked``) is expected: as soon as the
        quickest of the last ones forked after a job of the kind spawned last; None when
        none was."""
        waits = self.waits.get(self.last_kind)
        return forked + min(waits) if waits else None

    def _wait_for_job(self, request_r: int, ends: _Ends, until: float | None) -> None:
        """In the spare child: read the job (the zygote's own pipe), then run it as a child
        forked for it does. A pipe closed without a job (the spare was discarded): exit. While
        it waits, it warms its memory up to ``until``, when its job is expected (the shortest
        wait of the last spares forked after a job of the same kind: a capture's compile check
        follows it at once, and captures started back to back leave a spare little time)."""
        sandbox.prctl(sandbox.PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != ends.zygote_pid:
            os._exit(0)  # the zygote died before prctl
        signal.set_wakeup_fd(-1)  # the zygote's wake-up pipe is not this process's
        with contextlib.suppress(sandbox.SandboxError):  # no filter for this machine
            ends.seccomp = {d: sandbox.seccomp_program(deny_memfd=d) for d in (True, False)}
        if os.environ.get(SPARE_WARM_ENV) != "0":  # each step first asks whether a job waits
            from fxls.worker.process import warmup

            warmup.warm_spare(lambda: _readable(request_r), until)
        chunks = []
        while chunk := os.read(request_r, 1 << 20):
            chunks.append(chunk)
        os.close(request_r)
        if not chunks:
            os._exit(0)
        message = json.loads(b"".join(chunks))
        request = from_dict(JobRequest, message["request"])
        setup = self._setup(request, message["job_dir"], ends, message["cgroup"])
        from fxls.worker.process.child import run_child

        run_child(request, setup)

    def discard(self) -> None:
        spare, self.spare = self.spare, None
        if spare is not None:
            _end_spare(spare)

    def spare_pid(self) -> int | None:
        return self.spare.pid if self.spare is not None else None


def _readable(fd: int) -> bool:
    """Whether ``fd`` has something to read now (a job already sent to the spare)."""
    return bool(select.select([fd], [], [], 0)[0])


def _end_spare(spare: _Spare) -> None:
    """Close a spare's pipes and kill it (the zygote's loop reaps it)."""
    for fd in (spare.request_w, spare.result_r, spare.output_r):
        with contextlib.suppress(OSError):
            os.close(fd)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(spare.pid, signal.SIGKILL)


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
    expands_past: str | None = None
    """Why the result, sent with copied records, would expand past its frame's budget."""
    payload: CaptureResult | None = None
    payload_wire: Any = None
    """The payload as the child sent it (checked: it decodes to ``payload``), forwarded to the
    server as is: copied sub-block records stay compact, and it is not encoded again."""
    frames: int = 0
    frames_in: FrameReader = field(
        default_factory=lambda: FrameReader(limit=MAX_RESULT_BYTES + 4096)
    )
    output_head: bytearray = field(default_factory=bytearray)
    output_bytes: int = 0
    status: int | None = None
    rusage: Any = None
    usage: tuple[float, int] | None = None
    """CPU seconds and peak memory (KiB) of a child answered before it exited (``rusage``
    once it has)."""
    peak_kb: int | None = None
    """The child's peak memory when it began to encode its result (its ``serialize`` phase):
    once the result has come, it is already exiting and its memory figures are gone."""
    answered: bool = False
    """Its result was sent when its result frame came (``Zygote._answer``); reaping it only
    cleans up."""
    disk_error: str | None = None
    """What the job directory exceeded, when the zygote killed the job for it."""
    next_disk_check: float = 0.0
    cgroup_oom: bool = False
    open_fds: set[int] = field(init=False)
    """Its pipes' read ends this zygote has not closed yet: a number closed at EOF may name
    another job's pipe by the time this job is reaped, and must not be read or closed then."""

    def __post_init__(self) -> None:
        self.open_fds = {self.spawned.result_fd, self.spawned.output_fd}

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


def _usage(job: Job) -> tuple[float, int] | None:
    """CPU seconds and peak memory (KiB) of a job's child: from ``wait4`` once it has exited,
    else as read when it was answered (``Zygote._answer``)."""
    if job.rusage is not None:
        return job.rusage.ru_utime + job.rusage.ru_stime, int(job.rusage.ru_maxrss)
    return job.usage


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
    usage = _usage(job)
    if usage is not None:
        cpu, result.max_rss_kb = usage
        result.cpu_s = round(cpu, 3)
    result.wall_limit_s = job.request.limits.timeout_s
    result.cpu_limit_s = job.request.limits.cpu_s
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
        "disk": ("file_size_limit", f"the job directory {job.disk_error}"),
        "threads": ("killed", f"the job started more than {MAX_JOB_THREADS} threads"),
    }
    if job.kill_reason in reasons:
        return done(*reasons[job.kill_reason])
    if job.too_large is not None:
        return done(
            "result_too_large",
            f"result of {job.too_large} bytes exceeds {MAX_RESULT_BYTES} bytes",
        )
    if job.expands_past is not None:
        return done("result_too_large", job.expands_past)
    if job.protocol_error is not None:
        return done("protocol_error", f"bad frame from the job: {job.protocol_error}")
    if signum is not None:
        if signum == signal.SIGXCPU or (signum == signal.SIGKILL and cpu >= limits.cpu_s + 1.0):
            return done("cpu_limit", f"CPU time limit of {limits.cpu_s:g} s reached")
        if signum == signal.SIGKILL and job.cgroup_oom:
            return done("oom", f"memory limit of {limits.memory_mb} MiB reached (cgroup)")
        if signum == signal.SIGXFSZ:
            return done("file_size_limit", f"file size limit of {limits.file_size_mb} MiB reached")
        if signum == signal.SIGABRT and "std::bad_alloc" in result.output_head:
            return done("oom", f"memory limit of {limits.memory_mb} MiB reached")
        if signum == signal.SIGKILL:
            return done("killed", "killed by SIGKILL from outside fxls")
        said = last_words(result.output_head)
        return done("signal", f"killed by signal {signum} ({signal.Signals(signum).name}){said}")
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


LAST_WORDS_CHARS = 160
"""The most characters of a crashed child's output a crash message quotes."""
_UNPRINTABLE = re.compile(r"[^\x20-\x7e]+")
_TELLING = ("what():", "Fatal Python error", "terminate called", "Assertion")
"""Lines of a crash's output that say what happened, best first (C++'s uncaught exception,
Python's fatal error handler, a failed C assertion)."""


def last_words(output: str) -> str:
    """``; it wrote: "…"``: what a crashed child wrote that says why (C++'s ``what():`` line
    before a SIGABRT, "Fatal Python error: …"), else its last line; printable ASCII only,
    quotes and backticks made plain, at most ``LAST_WORDS_CHARS``; empty when it wrote
    nothing."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    if not lines:
        return ""
    told = (line for marker in _TELLING for line in lines if marker in line)
    text = _UNPRINTABLE.sub(" ", next(told, lines[-1])).replace("`", "'").replace('"', "'")
    if len(text) > LAST_WORDS_CHARS:
        text = text[: LAST_WORDS_CHARS - 1] + "…"
    return f'; it wrote: "{text}"'


def _phase(job: Job, message: dict[str, Any]) -> str | None:
    """Take a child's phase frame (its peak memory at ``serialize``); the error if it is bad."""
    phase, name = message.get("phase"), message.get("class")
    if phase not in _PHASES or not (name is None or isinstance(name, str)):
        return "bad phase frame"
    job.phase, job.current_class = phase, name
    if phase == "serialize":
        job.peak_kb = sandbox.peak_memory_kb(job.spawned.pid)
    return None


def _classified(job: Job) -> JobResult:
    """``classify(job)``; a job is never lost to a classification bug."""
    try:
        return classify(job)
    except Exception as exc:
        return JobResult(job.id, "protocol_error", message=f"unclassifiable result: {exc}")


# ---------------------------------------------------------------------------------------
# The event loop
# ---------------------------------------------------------------------------------------


PREVIEW_GRACE_S = 0.05
"""After ready, how long the zygote waits for a preview job before it starts the imports every
capture needs (the server sends the first one as soon as it reads the ready frame; a step of
those imports, up to 0.7 s, would delay its result)."""

PREVIEW_WAIT_S = 0.5
"""How long the imports captures need wait for a running preview job (a small file's takes
~0.05 s); past it they go on beside it, and its result is read between their steps."""

SPARE_ENV = "FXLS_SPARE_CHILD"
"""``0`` in the worker's environment: every job's child is forked when the job comes (no spare
child forked ahead, see ``ForkSpawner``)."""

SPARE_WAITS = 5
"""Spares whose wait for their job the next spare's warm-up is planned by (the shortest of
those forked after a job of the same kind)."""

SPARE_WARM_ENV = "FXLS_SPARE_WARM"
"""``0`` in the worker's environment: the spare child waits for its job without the small
captures that make its memory its own first (``warmup.warm_spare``)."""

IDLE_AFTER_S = 0.25
"""Idle work (the rest of the warm-up) runs while jobs run (their children work on the other
core), or after this long without one: the first job, sent as soon as the zygote is ready,
never waits behind it."""

PRELOAD_STEP_S = 0.05
"""How long one step of the zygote's imports of installed libraries goes on (see
``Zygote._preload_step``)."""


@dataclass
class Background:
    """The zygote's own work between jobs (the warm-up after ready), in the order it runs."""

    required: list[Callable[[], None]] = field(default_factory=list)
    idle: list[Callable[[], None]] = field(default_factory=list)
    quiet: list[Callable[[], None]] = field(default_factory=list)


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
        background: Background | None = None,
    ) -> None:
        self.ctl_in, self.ctl_out = ctl_in, ctl_out
        background = background or Background()
        self.required = background.required
        """Work before any job but a ``preview`` is forked (the imports every capture needs),
        one item per turn of the loop, never while a preview job runs or waits."""
        self.required_after = time.monotonic() + PREVIEW_GRACE_S
        self.idle = background.idle
        """Work for the moments no job waits to be forked (the rest of the warm-up), in order,
        one item per turn of the loop (see ``IDLE_AFTER_S``), also while jobs run."""
        self.quiet = background.quiet
        """Longer work, after ``idle``: only while no job runs or waits (a job's result is not
        read while an item runs)."""
        self.busy_until = time.monotonic() + IDLE_AFTER_S
        self.scratch = scratch
        self.spawner = spawner
        self.max_jobs = max_jobs
        self.sel = selectors.DefaultSelector()
        self.jobs: dict[int, Job] = {}  # by pid
        self.queue: collections.deque[JobRequest] = collections.deque()
        self.control = FrameReader()
        self.stopping = False
        self.watch_until = 0.0
        self.stale_cgroups: list[str] = []
        self.to_preload: collections.deque[str] = collections.deque()
        """Module names queued for :meth:`_preload_step`."""
        self.preloaded: dict[str, float] = {}
        """Top-level package -> seconds its modules took to import, since the last log."""
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
        self._send_frame(encode_frame(message))

    def send_result(self, result: JobResult, wire: Any = None) -> None:
        """Send a job's result; one that cannot be encoded fails that job, not the zygote.

        Its strings come from the job (lone surrogates do not encode as UTF-8) and its payload
        from a frame the job could have forged; a failure here must never end the zygote.
        ``wire``: the payload as the child sent it, sent in place of ``result.payload``.
        """
        try:
            frame = _result_frame(result, wire)
        except (ValueError, RecursionError) as exc:  # UnicodeEncodeError, ProtocolError
            fallback = JobResult(
                result.id,
                "protocol_error",
                message=f"the job's result cannot be forwarded ({type(exc).__name__})",
                output_head=result.output_head,
                output_bytes=result.output_bytes,
                isolation=[x for x in result.isolation if _LAYER_NAME.fullmatch(x)],
                duration_s=result.duration_s,
                max_rss_kb=result.max_rss_kb,
            )
            frame = encode_frame(_result(fallback))
        self._send_frame(frame)

    def _send_frame(self, frame: bytes) -> None:
        data = memoryview(frame)
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
                    self.send_result(JobResult(job_id, "protocol_error", message=str(exc)))
                return
            if self.stopping:
                self.send_result(JobResult(request.id, "cancelled", message="shutting down"))
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
                self.send_result(JobResult(request.id, "cancelled", message="cancelled"))
                return
        for job in self.jobs.values():
            if job.id == job_id:
                self._kill(job, "cancelled")

    def _shutdown(self) -> None:
        self.stopping = True
        for request in self.queue:
            self.send_result(JobResult(request.id, "cancelled", message="the worker shut down"))
        self.queue.clear()
        for job in self.jobs.values():
            self._kill(job, "shutdown")

    # -- jobs ------------------------------------------------------------------------------

    def _start_queued(self) -> None:
        while self.queue and len(self.jobs) < self.max_jobs and not self.stopping:
            request = self._next_request()
            if request is None:
                return
            started = time.monotonic()
            job_dir = None
            try:
                os.makedirs(self.scratch, mode=0o700, exist_ok=True)
                job_dir = tempfile.mkdtemp(prefix=f"job{request.id}-", dir=self.scratch)
                spawned = self.spawner.spawn(request, job_dir)
            except OSError as exc:
                if job_dir is not None:
                    remove_tree(job_dir)
                message = f"could not start the job: {exc}"
                self.send_result(JobResult(request.id, "sandbox_setup", message=message))
                continue
            job = Job(request, job_dir, spawned, started, started + request.limits.timeout_s)
            self.jobs[spawned.pid] = job
            for fd, callback in (
                (spawned.result_fd, self._on_result),
                (spawned.output_fd, self._on_output),
            ):
                os.set_blocking(fd, False)
                self.sel.register(
                    fd, selectors.EVENT_READ, lambda fd, j=job, cb=callback: cb(j, fd)
                )

    def _next_request(self) -> JobRequest | None:
        """The first queued job that is not a compile check, else the first one: compile
        checks wait behind captures and rewrites (the shapes come first). While the
        ``required`` work is not done, only a preview job; None when there is none."""
        if self.required:
            preview = next((r for r in self.queue if r.kind == "preview"), None)
            if preview is not None:
                self.queue.remove(preview)
            return preview
        for request in self.queue:
            if request.kind != "compile":
                self.queue.remove(request)
                return request
        return self.queue.popleft()

    def _kill(self, job: Job, reason: str | None) -> None:
        if job.kill_reason is None and reason is not None:
            job.kill_reason = reason
        for kill in (os.killpg, os.kill):
            try:
                kill(job.spawned.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def _close(self, job: Job, fd: int) -> None:
        """Close ``job``'s pipe ``fd``, once (see ``Job.open_fds``)."""
        if fd not in job.open_fds:
            return
        job.open_fds.discard(fd)
        try:
            self.sel.unregister(fd)
        except (KeyError, ValueError):
            pass
        try:
            os.close(fd)
        except OSError:
            pass

    def _chunks(self, job: Job, fd: int, size: int, reads: int) -> Iterator[bytes]:
        """Up to ``reads`` non-blocking reads of ``job``'s pipe ``fd``; closes it at EOF (or a
        read error)."""
        for _ in range(reads):
            try:
                chunk = os.read(fd, size)
            except BlockingIOError:
                return
            except OSError:
                chunk = b""
            if not chunk:
                self._close(job, fd)
                return
            yield chunk

    def _on_output(self, job: Job, fd: int, drain: bool = False) -> None:
        for chunk in self._chunks(job, fd, 1 << 16, 64 if drain else 1):
            room = OUTPUT_HEAD_BYTES - len(job.output_head)
            if room > 0:
                job.output_head += chunk[:room]
            job.output_bytes += len(chunk)

    def _on_result(self, job: Job, fd: int, drain: bool = False) -> None:
        for chunk in self._chunks(job, fd, 1 << 20, 4096 if drain else 1):
            job.frames_in.feed(chunk)
            if not self._parse_child_frames(job):
                self._close(job, fd)
                self._kill(job, None)
                return
        if job.payload is not None:
            self._answer(job)

    def _answer(self, job: Job) -> None:
        """Send a job's result as soon as its result frame has come, before the child has
        exited: all it does after that frame is exit, and the exit of a process that has
        used torch (its address space torn down) takes milliseconds the server need not wait
        for. The child is killed (it may not go on running once answered); its CPU time is
        read from the kernel first, its peak memory is that of its ``serialize`` phase.
        Reaping it later only cleans up (``_finish``). A child that has already exited is
        answered when it is reaped, as before."""
        if job.answered or job.status is not None or job.kill_reason is not None:
            return
        cpu = sandbox.process_cpu(job.spawned.pid)
        if cpu is None or job.peak_kb is None:
            return
        self._kill(job, None)
        if job.spawned.output_fd in job.open_fds:  # what it printed before its result
            self._on_output(job, job.spawned.output_fd, True)
        self._check_disk(job)
        job.usage = (cpu, job.peak_kb)
        job.answered = True
        self.send_result(_classified(job), job.payload_wire)
        self._plan_preload(job)

    def _plan_preload(self, job: Job) -> None:
        """Queue the imports a capture reported (what :func:`preload.wanted` lets through) as
        ``idle`` work (:meth:`_preload_step`): not while a job waits to be forked, but while
        jobs run (``fxls check`` keeps one running; a result that comes meanwhile is read after
        the step)."""
        payload = job.payload
        if payload is None or job.request.kind != "capture":
            return
        names = preload.wanted(payload.imported, job.request.isolation.preload)
        queued = set(self.to_preload)
        names = [name for name in names if name not in queued]
        if not names:
            return
        if not self.to_preload:
            self.idle.append(self._preload_step)
        self.to_preload.extend(names)

    def _preload_step(self) -> None:
        """Imports for up to ``PRELOAD_STEP_S`` (one import may take longer), passing over the
        modules an earlier one imported; the next step is queued while names are left, else
        :meth:`_preloaded` runs. While jobs run, the loop takes a step every 0.1 s."""
        started = time.monotonic()
        while self.to_preload and time.monotonic() - started < PRELOAD_STEP_S:
            name = self.to_preload.popleft()
            if name not in sys.modules:  # else imported with an earlier one
                self._preload(name)
        if self.to_preload:
            self.idle.append(self._preload_step)
        else:
            self._preloaded()

    def _preload(self, name: str) -> None:
        top = name.partition(".")[0]
        refused_before = top in preload.REFUSED
        started = time.monotonic()
        why = preload.load(name)
        if why is None:
            self.preloaded[top] = self.preloaded.get(top, 0.0) + time.monotonic() - started
        elif not refused_before:
            self.log(f"not kept imported between jobs: {why}")

    def _preloaded(self) -> None:
        """After imports: the heap frozen (as after the warm-up), the child forked ahead
        replaced by one that has them."""
        if not self.preloaded:
            return
        gc.collect()
        gc.freeze()
        self.spawner.discard()
        done = ", ".join(f"{top} {seconds:.2f} s" for top, seconds in self.preloaded.items())
        self.preloaded.clear()
        self.log(f"kept imported for the next jobs: {done}")

    def _parse_child_frames(self, job: Job) -> bool:
        """Consume complete frames; False when the job must be stopped."""
        while True:
            try:
                frame = job.frames_in.next_body()
            except FrameTooLarge as exc:
                if exc.head == b'{"type":"result"':
                    job.too_large = exc.length
                else:
                    job.protocol_error = f"frame header announces {exc.length} bytes"
                return False
            if frame is None:
                return True
            body, mac = frame[:-MAC_LEN], frame[-MAC_LEN:]
            if len(frame) < MAC_LEN or not hmac.compare_digest(
                mac, frame_mac(job.spawned.frame_key, job.frames, body)
            ):
                job.protocol_error = "a frame the capture did not write (no valid job MAC)"
                return False
            error = self._child_frame(job, body)
            if error is not None:
                job.protocol_error = error
                return False

    def _child_frame(self, job: Job, body: bytes) -> str | None:
        try:
            message, wire = _result_message(body) or (decode_body(body), None)
        except ProtocolError as exc:
            return str(exc)
        kind = message["type"]
        job.frames += 1
        finished = any(x is not None for x in (job.payload, job.too_large, job.expands_past))
        if finished:
            return f"unexpected {kind!r} frame after the result"
        if kind == "setup_error" and job.frames == 1:
            job.setup_error = str(message.get("message"))[:2000]
        elif kind == "isolation" and job.frames == 1:
            layers = message.get("layers")
            if not isinstance(layers, list) or not all(
                isinstance(x, str) and _LAYER_NAME.fullmatch(x) for x in layers
            ):
                return "bad isolation frame"
            job.isolation = layers
        elif kind == "phase" and job.frames > 1:
            return _phase(job, message)
        elif kind == "result" and job.frames > 1:
            try:
                payload = from_dict(CaptureResult, message.get("payload"))
                check_received(payload.modules, len(body))  # expanded by the server
            except ProtocolError as exc:
                return str(exc)[:2000]
            except ExpansionTooLarge as exc:
                job.expands_past = str(exc)
                return None
            job.payload = payload
            job.payload_wire = wire if wire is not None else message.get("payload")
        elif kind == "result_too_large" and job.frames > 1:
            size = message.get("bytes")
            job.too_large = size if isinstance(size, int) else -1
        else:
            return f"unexpected {kind!r} frame"
        return None

    def _reap(self) -> None:
        while True:
            try:
                info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                return
            if info is None:
                return
            pid = info.si_pid
            job = self.jobs.get(pid)
            if job is not None:
                # The rest of its process group, while the unreaped child still holds the pid
                # and the group id (after wait4 both could name an unrelated process).
                self._kill(job, None)
            try:
                _, status, rusage = os.wait4(pid, 0)
            except ChildProcessError:
                continue
            if job is not None:
                job.status, job.rusage = status, rusage
                self._finish(job)

    def _finish(self, job: Job) -> None:
        for fd, drain in (
            (job.spawned.result_fd, self._on_result),
            (job.spawned.output_fd, self._on_output),
        ):
            if fd in job.open_fds:
                drain(job, fd, True)
            self._close(job, fd)
        del self.jobs[job.spawned.pid]
        pending = job.frames_in.pending
        if pending and job.protocol_error is None and job.too_large is None:
            job.protocol_error = f"{pending} bytes of an unfinished frame"
        if job.kill_reason is None and not job.answered:
            self._check_disk(job)
        cgroup = job.spawned.cgroup
        if cgroup is not None:
            job.cgroup_oom = sandbox.cgroup_oom_kills(cgroup) > 0
            if not sandbox.remove_cgroup(cgroup):
                self.stale_cgroups.append(cgroup)
        result = None if job.answered else _classified(job)
        if not remove_tree(job.job_dir):
            self.log(f"could not remove the job directory {job.job_dir}")
        if result is not None:
            self.send_result(result, job.payload_wire)
            self._plan_preload(job)
        self.watch_until = time.monotonic() + ESCAPEE_WATCH_S

    def _check_deadlines(self) -> None:
        now = time.monotonic()
        for job in self.jobs.values():
            if job.kill_reason is None and now >= job.deadline:
                self._kill(job, "timeout")
            if job.kill_reason is None and sandbox.task_threads(job.spawned.pid) > MAX_JOB_THREADS:
                self._kill(job, "threads")
            if job.kill_reason is None and now >= job.next_disk_check:
                job.next_disk_check = now + DISK_CHECK_S
                self._check_disk(job)

    def _check_disk(self, job: Job) -> None:
        """RLIMIT_FSIZE caps each file; this caps the job directory as a whole."""
        limit = JOB_DIR_SIZE_FACTOR * job.request.limits.file_size_mb * 1024 * 1024
        error = job_dir_excess(job.job_dir, limit)
        if error is not None:
            job.disk_error = error
            self._kill(job, "disk")

    def kill_all(self) -> None:
        """Kill every job's process group this zygote knows of, and escaped descendants."""
        for job in self.jobs.values():
            self._kill(job, "shutdown")
        self.spawner.discard()
        self._kill_escapees()
        self.stale_cgroups = [c for c in self.stale_cgroups if not sandbox.remove_cgroup(c)]

    def _kill_escapees(self) -> None:
        """Kill children of ours that are not jobs: descendants orphaned by a job."""
        spare = self.spawner.spare_pid()
        for pid in _own_children():
            if pid in self.jobs or pid == spare:
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

    def _previewing(self) -> bool:
        """A preview job the ``required`` work waits for: one that waits for a free slot, or
        runs since less than ``PREVIEW_WAIT_S`` (a slow one, a file that imports a large
        library, must not hold back every capture)."""
        now = time.monotonic()
        running = any(
            j.request.kind == "preview" and now - j.started < PREVIEW_WAIT_S
            for j in self.jobs.values()
        )
        waiting = len(self.jobs) < self.max_jobs and any(r.kind == "preview" for r in self.queue)
        return running or waiting

    def run(self) -> None:
        try:
            self._run()
        finally:
            self.kill_all()

    def _run(self) -> None:
        while not (self.stopping and not self.jobs):
            self._start_queued()
            for key, _ in self.sel.select(self._timeout()):
                callback: Callable[[int], None] = key.data
                callback(key.fd)
            busy = bool(self.jobs or self.queue)
            self._reap()
            self._check_deadlines()
            if self.jobs or time.monotonic() < self.watch_until:
                self._kill_escapees()
            if busy and not self.jobs:
                self.busy_until = time.monotonic() + IDLE_AFTER_S
            if not self.stopping:
                self._background_step()
                self._prepare_spare()

    def _timeout(self) -> float | None:
        """How long the loop may wait for a frame: until the next job's deadline, 0.1 s while
        jobs run or escapees are watched, until the background work is due."""
        now = time.monotonic()
        timeout: float | None = None
        if self.jobs:
            timeout = max(0.0, min(j.deadline for j in self.jobs.values()) - now)
        if self.jobs or now < self.watch_until:
            timeout = min(timeout if timeout is not None else 0.1, 0.1)
        due = None
        if self.required and not self._previewing():
            due = self.required_after
        elif not self.required and (self.idle or self.quiet) and not self.jobs:
            due = self.busy_until
        if due is not None:
            wait = max(0.0, due - now)
            timeout = wait if timeout is None else min(timeout, wait)
        return timeout

    def _background_step(self) -> None:
        """One item of background work when it is due: ``required`` first (not while a
        preview job runs or waits), then ``idle`` and ``quiet`` (see ``IDLE_AFTER_S``)."""
        now = time.monotonic()
        if self.required:
            if not self._previewing() and now >= self.required_after:
                self.required.pop(0)()
            return
        if self.queue:
            return
        rested = now >= self.busy_until
        if self.idle and (self.jobs or rested):
            self.idle.pop(0)()
        elif self.quiet and not self.jobs and rested:
            self.quiet.pop(0)()

    def _prepare_spare(self) -> None:
        """A child forked ahead of the next job, once the warm-up is done (the zygote's state
        no longer changes) and no job runs or waits (``SPARE_ENV=0``: none)."""
        if self.required or self.idle or self.quiet or self.queue or self.jobs:
            return
        if self.spawner.spare_pid() is not None or os.environ.get(SPARE_ENV) == "0":
            return
        try:
            self.spawner.prepare()
        except OSError as exc:  # jobs are forked when they come, as without it
            self.log(f"could not fork a spare child: {exc}")

    def say_ready(self, ready: ReadyInfo) -> None:
        """The ready frame, then ``captures`` at once when no ``required`` work is left (else
        when it is done): until then the server sends preview jobs first."""
        self.send({"type": "ready", **to_dict(ready)})
        if not self.required:
            self.send({"type": "captures"})


# ---------------------------------------------------------------------------------------
# Job directories: measuring and removing what a job left
# ---------------------------------------------------------------------------------------

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _open_dir(name: str, dir_fd: int | None = None) -> int:
    """Open a directory (never through a symlink), giving it u+rwx first when it lacks read.

    The job owns nothing the zygote does not (same user), and a mode-0 directory it made must
    not hide its content from the size cap or from removal. The mode is changed through an
    ``O_PATH`` descriptor, so a directory swapped for a symlink is never followed.
    """
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except PermissionError:
        pass
    path_fd = os.open(
        name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd
    )
    try:
        os.chmod(f"/proc/self/fd/{path_fd}", 0o700)
    finally:
        os.close(path_fd)
    return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)


def _make_writable(fd: int) -> None:
    mode = os.fstat(fd).st_mode
    if mode & 0o700 != 0o700:
        os.fchmod(fd, (mode | 0o700) & 0o7777)


class _Excess(Exception):
    pass


def job_dir_excess(root: str, max_bytes: int) -> str | None:
    """None while the tree under ``root`` is within the caps, else what it exceeded.

    Counts allocated blocks (sparse files cost what they use) of everything under ``root``,
    with at most ``JOB_DIR_MAX_ENTRIES`` entries and ``JOB_DIR_MAX_DEPTH`` levels, so one
    measurement is bounded however the job shapes the tree. Files the job deleted while
    keeping them open are not visible here; they are bounded by RLIMIT_NOFILE x RLIMIT_FSIZE.
    """
    totals = [0, 0]  # bytes, entries

    def walk(dir_fd: int, depth: int) -> None:
        with os.scandir(dir_fd) as entries:
            for entry in entries:
                totals[1] += 1
                if totals[1] > JOB_DIR_MAX_ENTRIES:
                    raise _Excess(f"holds more than {JOB_DIR_MAX_ENTRIES} files and folders")
                try:
                    totals[0] += entry.stat(follow_symlinks=False).st_blocks * 512
                    is_dir = entry.is_dir(follow_symlinks=False)
                except OSError:  # removed meanwhile
                    continue
                if totals[0] > max_bytes:
                    raise _Excess(f"grew over {max_bytes >> 20} MiB")
                if not is_dir:
                    continue
                if depth >= JOB_DIR_MAX_DEPTH:
                    raise _Excess(f"is nested deeper than {JOB_DIR_MAX_DEPTH} levels")
                try:
                    fd = _open_dir(entry.name, dir_fd)
                except OSError:
                    continue
                try:
                    walk(fd, depth + 1)
                finally:
                    os.close(fd)

    try:
        top = _open_dir(root)
    except OSError:
        return None
    try:
        walk(top, 1)
    except _Excess as exc:
        return str(exc)
    except OSError:
        return None
    finally:
        os.close(top)
    return None


def remove_tree(root: str) -> bool:
    """Remove ``root`` and whatever a job left in it; True when it is gone.

    Unlike ``shutil.rmtree`` it survives folders without u+rwx (made writable first), any
    depth (subfolders are moved up into ``root`` and handled there, so neither the recursion
    nor the open descriptors grow with depth, and paths never get long) and symlinks (never
    followed). Never raises.
    """
    try:
        top = _open_dir(root)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    prefix = f".fxls-rm-{secrets.token_hex(4)}-"
    moved = 0
    try:
        while True:
            _make_writable(top)
            with os.scandir(top) as it:
                names = [(e.name, e.is_dir(follow_symlinks=False)) for e in it]
            if not names:
                break
            progress = False
            for name, is_dir in names:
                try:
                    if not is_dir:
                        os.unlink(name, dir_fd=top)
                        progress = True
                        continue
                    sub = _open_dir(name, top)
                    try:
                        _make_writable(sub)
                        with os.scandir(sub) as it:
                            children = [(e.name, e.is_dir(follow_symlinks=False)) for e in it]
                        for child, child_is_dir in children:
                            if child_is_dir:
                                moved += 1
                                os.rename(child, f"{prefix}{moved}", src_dir_fd=sub, dst_dir_fd=top)
                            else:
                                os.unlink(child, dir_fd=sub)
                    finally:
                        os.close(sub)
                    os.rmdir(name, dir_fd=top)
                    progress = True
                except FileNotFoundError:
                    progress = True
                except OSError:
                    pass
            if not progress:
                return False
    except OSError:
        return False
    finally:
        os.close(top)
    try:
        os.rmdir(root)
    except FileNotFoundError:
        pass
    except OSError:
        return False
    return True


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


def _result(result: JobResult, wire: Any = None) -> dict[str, Any]:
    if wire is None or result.payload is None:  # no payload (a failed job): nothing to forward
        return {"type": "result", "result": result}
    fields = to_dict(replace(result, payload=None))
    fields["payload"] = wire
    return {"type": "result", "result": fields}


def _result_frame(result: JobResult, wire: Any) -> bytes:
    """The frame of a job's result; ``wire``: the payload as the child sent it, a decoded
    value or the JSON text of one (:func:`_result_message`), put in the frame as it is."""
    if not isinstance(wire, str) or result.payload is None:
        return encode_frame(_result(result, wire))
    fields = to_dict(replace(result, payload=None))
    del fields["payload"]
    head = json.dumps({"type": "result", "result": fields}, separators=(",", ":"))
    return frame_of(head[:-2] + ',"payload":' + wire + "}}")


_RESULT_HEAD = '{"type":"result","payload":'
_DECODER = json.JSONDecoder()
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _result_message(body: bytes) -> tuple[dict[str, Any], str] | None:
    """A result frame as the child writes it (``{"type":"result","payload":...}``, compact):
    the message and the payload's JSON text, exactly one JSON value, so that the zygote sends
    on the text it checked instead of encoding the payload again. None for anything else
    (another frame, another spelling, text that is not UTF-8 or escapes a surrogate), which is
    decoded as usual."""
    head = _RESULT_HEAD.encode()
    if not body.startswith(head) or not body.endswith(b"}"):
        return None
    try:
        text = body.decode()
        payload, end = _DECODER.raw_decode(text, len(_RESULT_HEAD))
    except (ValueError, RecursionError):
        return None
    if end != len(text) - 1:  # anything after the payload but the closing brace
        return None
    if _SURROGATE_ESCAPE.search(text):  # the usual path refuses lone surrogates
        return None
    return {"type": "result", "payload": payload}, text[len(_RESULT_HEAD) : end]


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
            remove_tree(scratch)


def _serve(ctl_in: int, ctl_out: int, scratch: str) -> int:
    started = time.monotonic()
    steps: dict[str, float] = {}
    try:
        version = _warm_up_first(steps)
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
    abi = sandbox.landlock_abi()
    forced = _forced_landlock_abi()
    if forced is not None and forced < abi:
        abi = forced
    available, missing = sandbox.probe_layers(abi)
    if forced == 0:
        missing["landlock"] = "Landlock turned off with FXLS_LANDLOCK_ABI=0"
    if not sandbox.set_child_subreaper():
        missing["subreaper"] = "PR_SET_CHILD_SUBREAPER failed"
    cgroup, why = sandbox.MemoryCgroup.probe(os.environ.get("FXLS_CGROUP") or None)
    if cgroup is not None:
        available.append("cgroup")
    else:
        missing["cgroup"] = (
            f"{why}; instead memfd_create is denied and open files are capped at "
            f"{sandbox.NOFILE_WITHOUT_CGROUP}"
        )
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
        warm_steps=dict(steps),
    )
    background = Background()
    zygote = Zygote(
        ctl_in, ctl_out, scratch, ForkSpawner(available, abi, cgroup), background=background
    )
    if os.environ.get("FXLS_WARM_BEFORE_READY") != "1":
        _schedule_warm_up(zygote, background)
    try:
        zygote.say_ready(ready)
        if abi:
            zygote.log(f"Landlock ABI {abi}" + (" (FXLS_LANDLOCK_ABI)" if abi == forced else ""))
        zygote.run()
    except OSError as exc:
        if exc.errno != errno.EPIPE:
            raise
    finally:
        zygote.kill_all()
    return 0


def _warm_up_first(steps: dict[str, float]) -> str:
    """The warm-up before ready (:data:`~fxls.worker.process.warmup.FIRST`; all of it with
    ``FXLS_WARM_BEFORE_READY=1``, for benchmarks); returns the torch version."""
    from fxls.worker.process import warmup

    version = warmup.warm_up(steps)
    if os.environ.get("FXLS_WARM_BEFORE_READY") == "1":
        for step in warmup.BEFORE_CAPTURES + warmup.LATER + warmup.QUIET:
            warmup.run_step(step, steps)
        warmup.finish()
    return version


def _schedule_warm_up(zygote: Zygote, background: Background) -> None:
    """The rest of the warm-up as the zygote's background work: the imports captures need
    (then the ``captures`` frame), ``LATER`` and ``QUIET``; each part ends by freezing the heap
    and logging the time of its steps."""
    from fxls.worker.process import warmup

    later: dict[str, float] = {}

    def warmed(what: str) -> None:
        warmup.finish()
        gc.collect()
        gc.freeze()
        done = ", ".join(f"{name} {seconds:.2f} s" for name, seconds in later.items())
        later.clear()
        zygote.log(f"{what} finished while idle: {done}")

    def captures_ready() -> None:
        warmed("imports of the capture")
        zygote.send({"type": "captures"})

    for into, steps, last in (
        (background.required, warmup.BEFORE_CAPTURES, captures_ready),
        (background.idle, warmup.LATER, functools.partial(warmed, "warm-up")),
        (background.quiet, warmup.QUIET, functools.partial(warmed, "warm-up of common operators")),
    ):
        into.extend(functools.partial(warmup.run_step, step, later) for step in steps)
        if into:
            into.append(last)


def _forced_landlock_abi() -> int | None:
    """``FXLS_LANDLOCK_ABI``: use at most this Landlock ABI (simulates an older kernel)."""
    value = os.environ.get("FXLS_LANDLOCK_ABI", "").strip()
    try:
        return max(0, int(value)) if value else None
    except ValueError:
        return None
