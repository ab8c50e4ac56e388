"""Isolation of one job child: session, fds, rlimits, Landlock and seccomp-BPF.

Everything here is unprivileged and written against the Linux syscall interface with ctypes,
so the worker needs nothing beyond the standard library. Each layer degrades: a kernel without
Landlock (or an unknown architecture for seccomp) runs the job without that layer, and the
layers that were active are reported with every result.

``setup_child`` runs in the freshly forked child, in this order: setsid; PDEATHSIG (then a
re-check that the zygote is still the parent); fds (/dev/null -> 0, capture pipe -> 1 and 2,
result pipe -> 3, everything else closed); default signal handlers; faulthandler; the job dir
(chdir, umask 077, TMPDIR); rlimits; no_new_privs; network namespace; Landlock; seccomp;
PR_SET_DUMPABLE 0. rlimits come before seccomp because the filter forbids raising them.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import faulthandler
import math
import os
import platform
import resource
import signal
import struct
import sys
import tempfile
from dataclasses import dataclass

from fxls.protocol.model import Isolation, Limits

_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.prctl.restype = ctypes.c_int
_libc.prctl.argtypes = [
    ctypes.c_int,
    ctypes.c_ulong,
    ctypes.c_ulong,
    ctypes.c_ulong,
    ctypes.c_ulong,
]

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_SECCOMP = 22
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38
SECCOMP_MODE_FILTER = 2
CLONE_THREAD = 0x00010000
CLONE_NEWNET = 0x40000000
CLONE_NEWUSER = 0x10000000
_SYS_UNSHARE = 272 if platform.machine() == "x86_64" else 97  # aarch64 and the generic table

RESULT_FD = 3

_fds_moved = False


def fds_moved() -> bool:
    """True once ``setup_child`` has put the result pipe on fd 3."""
    return _fds_moved


class SandboxError(RuntimeError):
    """A layer that was requested and available could not be set up."""


def _check(ret: int, what: str) -> int:
    if ret < 0:
        err = ctypes.get_errno()
        raise SandboxError(f"{what}: {os.strerror(err)} (errno {err})")
    return ret


def prctl(option: int, arg2: int = 0, arg3: int = 0, arg4: int = 0, arg5: int = 0) -> int:
    """``prctl(2)``; raises SandboxError on failure."""
    return _check(_libc.prctl(option, arg2, arg3, arg4, arg5), f"prctl({option})")


def set_child_subreaper() -> bool:
    """Make orphaned descendants reparent to this process (the zygote)."""
    try:
        prctl(PR_SET_CHILD_SUBREAPER, 1)
    except SandboxError:
        return False
    return True


# ---------------------------------------------------------------------------------------
# seccomp-BPF
# ---------------------------------------------------------------------------------------

_BPF_LD_W_ABS = 0x20
_BPF_JEQ_K = 0x15
_BPF_JGE_K = 0x35
_BPF_JSET_K = 0x45
_BPF_RET_K = 0x06
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000
_RET_KILL_PROCESS = 0x80000000


@dataclass(frozen=True)
class _Arch:
    audit: int
    blocked: dict[str, int]
    clone: int
    clone3: int
    set_limit: dict[str, int]
    """Syscalls that change rlimits: setrlimit (always), prlimit64 (when new_limit != NULL)."""
    x32_bit: int = 0


_X86_64 = {
    "socket": 41, "connect": 42, "accept": 43, "bind": 49, "listen": 50, "accept4": 288,
    "execve": 59, "execveat": 322, "ptrace": 101, "process_vm_readv": 310,
    "process_vm_writev": 311, "mount": 165, "umount2": 166, "unshare": 272, "setns": 308,
    "bpf": 321, "userfaultfd": 323, "perf_event_open": 298, "keyctl": 250, "add_key": 248,
    "request_key": 249, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
    "pivot_root": 155, "chroot": 161, "kexec_load": 246, "init_module": 175,
    "finit_module": 313, "delete_module": 176, "reboot": 169, "open_tree": 428,
    "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
    "mount_setattr": 442, "fork": 57, "vfork": 58,
}  # fmt: skip
_AARCH64 = {
    "socket": 198, "bind": 200, "listen": 201, "accept": 202, "connect": 203, "accept4": 242,
    "execve": 221, "execveat": 281, "ptrace": 117, "process_vm_readv": 270,
    "process_vm_writev": 271, "mount": 40, "umount2": 39, "unshare": 97, "setns": 268,
    "bpf": 280, "userfaultfd": 282, "perf_event_open": 241, "keyctl": 219, "add_key": 217,
    "request_key": 218, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
    "pivot_root": 41, "chroot": 51, "kexec_load": 104, "init_module": 105,
    "finit_module": 273, "delete_module": 106, "reboot": 142, "open_tree": 428,
    "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
    "mount_setattr": 442,
}  # fmt: skip

_ARCHES = {
    "x86_64": _Arch(0xC000003E, _X86_64, 56, 435, {"setrlimit": 160, "prlimit64": 302},
                    x32_bit=0x40000000),
    "aarch64": _Arch(0xC00000B7, _AARCH64, 220, 435, {"setrlimit": 164, "prlimit64": 261}),
}  # fmt: skip


def _arch() -> _Arch | None:
    return _ARCHES.get(platform.machine())


def seccomp_program() -> bytes:
    """The BPF program as raw ``struct sock_filter`` bytes (raises SandboxError if no arch).

    Blocked syscalls fail with EPERM; clone without CLONE_THREAD (a new process) too; clone3
    fails with ENOSYS so libc falls back to clone for threads; raising an rlimit is EPERM; a
    foreign architecture's syscall ABI kills the process.
    """
    arch = _arch()
    if arch is None:
        raise SandboxError(f"seccomp filter not written for {platform.machine()}")
    ins: list[tuple[int, int, int, int]] = []
    # Forward jumps to shared return blocks are patched once the labels are known.
    pending: list[tuple[int, str]] = []
    labels: dict[str, int] = {}

    def emit(code: int, jt: int = 0, jf: int = 0, k: int = 0) -> None:
        ins.append((code, jt, jf, k))

    def jeq_to(k: int, label: str) -> None:
        pending.append((len(ins), label))
        emit(_BPF_JEQ_K, 0, 0, k)

    emit(_BPF_LD_W_ABS, k=4)  # seccomp_data.arch
    emit(_BPF_JEQ_K, 1, 0, arch.audit)
    emit(_BPF_RET_K, k=_RET_KILL_PROCESS)
    emit(_BPF_LD_W_ABS, k=0)  # seccomp_data.nr
    if arch.x32_bit:
        emit(_BPF_JGE_K, 0, 1, arch.x32_bit)
        emit(_BPF_RET_K, k=_RET_KILL_PROCESS)
    for name in sorted(arch.blocked):
        jeq_to(arch.blocked[name], "eperm")
    jeq_to(arch.clone3, "enosys")
    jeq_to(arch.set_limit["setrlimit"], "eperm")
    jeq_to(arch.clone, "clone")
    jeq_to(arch.set_limit["prlimit64"], "prlimit")
    emit(_BPF_RET_K, k=_RET_ALLOW)
    labels["clone"] = len(ins)
    emit(_BPF_LD_W_ABS, k=16)  # args[0] low word: clone flags
    emit(_BPF_JSET_K, 1, 0, CLONE_THREAD)
    emit(_BPF_RET_K, k=_RET_ERRNO | errno.EPERM)
    emit(_BPF_RET_K, k=_RET_ALLOW)
    labels["prlimit"] = len(ins)
    emit(_BPF_LD_W_ABS, k=32)  # args[2] low word: new_limit pointer
    emit(_BPF_JEQ_K, 1, 0, 0)
    emit(_BPF_RET_K, k=_RET_ERRNO | errno.EPERM)
    emit(_BPF_LD_W_ABS, k=36)  # args[2] high word
    emit(_BPF_JEQ_K, 1, 0, 0)
    emit(_BPF_RET_K, k=_RET_ERRNO | errno.EPERM)
    emit(_BPF_RET_K, k=_RET_ALLOW)
    labels["eperm"] = len(ins)
    emit(_BPF_RET_K, k=_RET_ERRNO | errno.EPERM)
    labels["enosys"] = len(ins)
    emit(_BPF_RET_K, k=_RET_ERRNO | errno.ENOSYS)
    for index, label in pending:
        offset = labels[label] - index - 1
        if not 0 <= offset < 256:
            raise SandboxError("seccomp program too long for a BPF jump")
        code, _, jf, k = ins[index]
        ins[index] = (code, offset, jf, k)
    return b"".join(struct.pack("=HBBI", *i) for i in ins)


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def install_seccomp() -> None:
    """Install the filter on the calling thread (needs no_new_privs)."""
    program = seccomp_program()
    buf = ctypes.create_string_buffer(program, len(program))
    prog = _SockFprog(len(program) // 8, ctypes.addressof(buf))
    _check(
        _libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(prog), 0, 0),
        "seccomp filter",
    )


# ---------------------------------------------------------------------------------------
# Landlock
# ---------------------------------------------------------------------------------------

_SYS_LANDLOCK_CREATE_RULESET = 444
_SYS_LANDLOCK_ADD_RULE = 445
_SYS_LANDLOCK_RESTRICT_SELF = 446
_LANDLOCK_CREATE_RULESET_VERSION = 1
_LANDLOCK_RULE_PATH_BENEATH = 1

FS_EXECUTE = 1 << 0
FS_WRITE_FILE = 1 << 1
FS_READ_FILE = 1 << 2
FS_READ_DIR = 1 << 3
FS_TRUNCATE = 1 << 14
FS_IOCTL_DEV = 1 << 15
_FS_WRITE_ABI1 = FS_WRITE_FILE | sum(1 << b for b in range(4, 13))  # remove/make *
_FS_REFER = 1 << 13
NET_BIND_TCP = 1 << 0
NET_CONNECT_TCP = 1 << 1
SCOPE_ABSTRACT_UNIX = 1 << 0
SCOPE_SIGNAL = 1 << 1


def landlock_abi() -> int:
    """The kernel's Landlock ABI version, 0 when unavailable."""
    ret = _libc.syscall(_SYS_LANDLOCK_CREATE_RULESET, None, 0, _LANDLOCK_CREATE_RULESET_VERSION)
    return max(int(ret), 0)


def _landlock_fs_rights(abi: int) -> int:
    rights = FS_EXECUTE | _FS_WRITE_ABI1
    if abi >= 2:
        rights |= _FS_REFER
    if abi >= 3:
        rights |= FS_TRUNCATE
    if abi >= 5:
        rights |= FS_IOCTL_DEV
    return rights


def install_landlock(writable_dir: str, abi: int) -> None:
    """Deny writes outside ``writable_dir``, exec, TCP and (ABI >= 6) signals/abstract sockets.

    Reading stays allowed everywhere (imports need it); Landlock's ptrace rules also deny
    ``/proc/<pid>/mem`` of processes outside the sandbox.
    """
    handled_fs = _landlock_fs_rights(abi)
    handled_net = NET_BIND_TCP | NET_CONNECT_TCP if abi >= 4 else 0
    scoped = SCOPE_ABSTRACT_UNIX | SCOPE_SIGNAL if abi >= 6 else 0
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8
    attr = struct.pack("=QQQ", handled_fs, handled_net, scoped)[:size]
    attr_buf = ctypes.create_string_buffer(attr, size)
    ruleset = _check(
        _libc.syscall(_SYS_LANDLOCK_CREATE_RULESET, attr_buf, ctypes.c_size_t(size), 0),
        "landlock_create_ruleset",
    )
    try:
        file_rights = FS_WRITE_FILE | (handled_fs & (FS_TRUNCATE | FS_IOCTL_DEV))
        rules = [(writable_dir, handled_fs & ~FS_EXECUTE), (os.devnull, file_rights)]
        for path, rights in rules:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            try:
                rule = ctypes.create_string_buffer(struct.pack("=Qi", rights, fd), 12)
                _check(
                    _libc.syscall(_SYS_LANDLOCK_ADD_RULE, ruleset, _LANDLOCK_RULE_PATH_BENEATH,
                                  rule, 0),
                    f"landlock_add_rule({path})",
                )  # fmt: skip
            finally:
                os.close(fd)
        _check(_libc.syscall(_SYS_LANDLOCK_RESTRICT_SELF, ruleset, 0), "landlock_restrict_self")
    finally:
        os.close(ruleset)


# ---------------------------------------------------------------------------------------
# Network namespace
# ---------------------------------------------------------------------------------------


def enter_netns() -> None:
    """A private network namespace (only loopback, down): connect fails with ENETUNREACH."""
    uid, gid = os.getuid(), os.getgid()
    if _libc.syscall(_SYS_UNSHARE, CLONE_NEWNET) == 0:
        return
    _check(_libc.syscall(_SYS_UNSHARE, CLONE_NEWUSER | CLONE_NEWNET), "unshare(user+net)")
    with open("/proc/self/setgroups", "w") as f:
        f.write("deny")
    with open("/proc/self/uid_map", "w") as f:
        f.write(f"{uid} {uid} 1")
    with open("/proc/self/gid_map", "w") as f:
        f.write(f"{gid} {gid} 1")


# ---------------------------------------------------------------------------------------
# Probing and the child set-up
# ---------------------------------------------------------------------------------------


def probe_layers() -> tuple[list[str], dict[str, str]]:
    """Which optional layers work here: fork a throw-away child that tries each one.

    Returns (available, missing-with-reason). Never runs user code.
    """
    available: list[str] = []
    missing: dict[str, str] = {}
    abi = landlock_abi()
    checks: list[tuple[str, str | None]] = [
        ("seccomp", None if _arch() else f"no seccomp filter for {platform.machine()}"),
        ("landlock", None if abi else "kernel has no Landlock (syscall 444 failed)"),
        ("netns", None),
    ]
    for name, reason in checks:
        if reason is not None:
            missing[name] = reason
            continue
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - runs in the probe child
            os.close(r)
            code = 0
            try:
                prctl(PR_SET_NO_NEW_PRIVS, 1)
                if name == "seccomp":
                    install_seccomp()
                elif name == "landlock":
                    install_landlock(tempfile.gettempdir(), abi)
                else:
                    enter_netns()
            except BaseException as exc:
                os.write(w, str(exc).encode()[:500])
                code = 1
            os._exit(code)
        os.close(w)
        message = b""
        while chunk := os.read(r, 4096):
            message += chunk
        os.close(r)
        _, status = os.waitpid(pid, 0)
        if os.waitstatus_to_exitcode(status) == 0:
            available.append(name)
        else:
            missing[name] = message.decode(errors="replace") or f"probe status {status}"
    return available, missing


@dataclass
class ChildPlan:
    """Everything the child needs to isolate itself; built by the zygote before fork."""

    job_dir: str
    limits: Limits
    isolation: Isolation
    available: list[str]
    capture_w: int
    result_w: int
    zygote_pid: int
    landlock_abi: int = 0


def _vm_size_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def _set_rlimits(limits: Limits) -> None:
    cpu = max(1, math.ceil(limits.cpu_s))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 2))
    mem = _vm_size_bytes() + limits.memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
    fsize = limits.file_size_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
    resource.setrlimit(resource.RLIMIT_NOFILE, (limits.nofile, limits.nofile))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def setup_child(plan: ChildPlan) -> list[str]:
    """Isolate the calling (freshly forked) process; returns the active layer names.

    Raises SandboxError (or OSError) when a step fails; the caller reports ``sandbox_setup``.
    """
    active: list[str] = []
    os.setsid()
    active.append("setsid")
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != plan.zygote_pid:
        os._exit(137)  # the zygote died between fork and prctl
    active.append("pdeathsig")

    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(plan.capture_w, 1)
    os.dup2(plan.capture_w, 2)
    os.dup2(plan.result_w, RESULT_FD)
    os.closerange(RESULT_FD + 1, 1 << 20)
    global _fds_moved
    _fds_moved = True
    sys.stdout = open(1, "w", closefd=False, errors="backslashreplace")  # noqa: SIM115
    sys.stderr = open(2, "w", closefd=False, errors="backslashreplace", buffering=1)  # noqa: SIM115
    sys.stdin = open(0, closefd=False)  # noqa: SIM115

    try:
        signal.set_wakeup_fd(-1)
    except (ValueError, OSError):
        pass
    for sig in signal.valid_signals():
        if sig in (signal.SIGKILL, signal.SIGSTOP):
            continue
        try:
            signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError):
            pass
    faulthandler.enable(file=sys.stderr, all_threads=True)

    os.chdir(plan.job_dir)
    os.umask(0o077)
    os.environ["TMPDIR"] = plan.job_dir
    tempfile.tempdir = plan.job_dir
    sys.dont_write_bytecode = True

    _set_rlimits(plan.limits)
    active.append("rlimits")
    prctl(PR_SET_NO_NEW_PRIVS, 1)
    if plan.isolation.netns and "netns" in plan.available:
        enter_netns()
        active.append("netns")
    if plan.isolation.landlock and "landlock" in plan.available:
        install_landlock(plan.job_dir, plan.landlock_abi)
        active.append("landlock")
    if plan.isolation.seccomp and "seccomp" in plan.available:
        install_seccomp()
        active.append("seccomp")
    prctl(PR_SET_DUMPABLE, 0)
    return active
