"""Keeping what a job captured when it reaches its CPU limit.

A job child runs under a soft ``RLIMIT_CPU`` (the hard limit is two seconds more). Reaching
the soft limit sends ``SIGXCPU``, which kills the child by default, and the classes it had
already captured are lost with it. While the classes of a job are captured,
:func:`stop_at_cpu_limit` turns the first ``SIGXCPU`` into :class:`OutOfCpu`, raised in the
code that runs: the capture stops there and the child sends the classes it has done
(``CaptureResult.unfinished`` names the others, which the server captures in another job).
Later signals are ignored; code that catches the exception and goes on is killed by the hard
limit two seconds later, as without the handler.
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import threading
from collections.abc import Iterator
from types import FrameType


class OutOfCpu(BaseException):
    """The job reached its soft CPU limit (a ``BaseException``: no ``except Exception`` of a
    capture step or of user code takes it for an error of its own)."""


def passed_on(exc: BaseException) -> None:
    """Raise ``exc`` again when it is :class:`OutOfCpu`: for a step that catches everything
    user code raises."""
    if isinstance(exc, OutOfCpu):
        raise exc


class Watch:
    """Whether the soft CPU limit was reached while it was watched (:func:`stop_at_cpu_limit`)."""

    def __init__(self) -> None:
        self.fired = False
        self.stopped = False

    def on_limit(self, signum: int, frame: FrameType | None) -> None:
        """``SIGXCPU``: raise :class:`OutOfCpu` in the code that runs, each time (once a
        second until the hard limit) until the capture has stopped."""
        self.fired = True
        if not self.stopped:
            raise OutOfCpu

    def check(self) -> None:
        """Raise :class:`OutOfCpu` when the limit was reached (code that caught the exception
        went on: what it made is not kept)."""
        if self.fired:
            raise OutOfCpu


@contextlib.contextmanager
def stop_at_cpu_limit() -> Iterator[Watch]:
    """While the block runs, ``SIGXCPU`` raises :class:`OutOfCpu`; once the block is left the
    later ones are ignored until the process ends (the result is being sent), or, when the
    limit was not reached, the process's handling is as before. Off the main thread, nothing
    changes."""
    watch = Watch()
    if threading.current_thread() is not threading.main_thread():
        yield watch
        return
    previous = signal.signal(signal.SIGXCPU, watch.on_limit)
    try:
        yield watch
    finally:
        watch.stopped = True
        signal.signal(signal.SIGXCPU, signal.SIG_IGN if watch.fired else previous)


def soft_limit_s() -> float | None:
    """This process's soft CPU limit in seconds (a job child's), None without one."""
    soft = resource.getrlimit(resource.RLIMIT_CPU)[0]
    return None if soft == resource.RLIM_INFINITY else float(soft)


def die_of_cpu_limit() -> None:
    """End this process as the soft CPU limit does by default (the worker reports it as the
    job's CPU limit): for a job that captured nothing before it."""
    signal.signal(signal.SIGXCPU, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGXCPU)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGXCPU})
    while True:  # the signal is delivered before kill returns; never reached
        signal.pause()
