"""Isolation of one job child: session, fds, rlimits, Landlock and seccomp-BPF.

Everything here is unprivileged and written against the Linux syscall interface with ctypes,
so the worker needs nothing beyond the standard library. Each layer degrades: a kernel without
Landlock (or an unknown architecture for seccomp) runs the job without that layer, and the
layers that were active are reported with every result.

``setup_child`` runs in the freshly forked child, in this order: setsid; PDEATHSIG (then a
re-check that the zygote is still the parent); fds (/dev/null -> 0, output pipe -> 1 and 2,
result pipe -> 3, everything else closed); default signal handlers; faulthandler; the job dir
(chdir, umask 077, TMPDIR); the job's memory cgroup (when the zygote has one); rlimits;
no_new_privs; network namespace; all capabilities dropped; PR_SET_DUMPABLE 0; Landlock;
seccomp. rlimits come before seccomp because the filter forbids raising them, the cgroup
before Landlock because joining it writes outside the job dir, the namespace before dropping
capabilities (root needs CAP_SYS_ADMIN for it), and seccomp last because it forbids changing
PDEATHSIG and the dumpable flag.
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
import stat
import struct
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

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
PR_GET_PDEATHSIG = 2
PR_SET_DUMPABLE = 4
PR_SET_SECCOMP = 22
PR_CAPBSET_READ = 23
PR_CAPBSET_DROP = 24
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
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
_BPF_ALU_AND_K = 0x54
_BPF_JA = 0x05
_BPF_JEQ_K = 0x15
_BPF_JGE_K = 0x35
_BPF_JSET_K = 0x45
_BPF_RET_K = 0x06
RET_ALLOW = 0x7FFF0000
RET_ERRNO = 0x00050000
RET_KILL_PROCESS = 0x80000000
_OFF_NR = 0
_OFF_ARCH = 4


def _arg_low(index: int) -> int:
    """Offset of the low 32 bits of ``seccomp_data.args[index]`` (little-endian arches).

    The checked arguments are C ``int``/``unsigned int`` (pids, options, commands, modes) or
    flag words whose interesting bits are low: the kernel truncates ``int`` arguments to 32
    bits, so the high word must not be compared (userspace may leave garbage there).
    """
    return 16 + 8 * index


# The policy, by syscall name. Names an architecture does not have (aarch64 has no chmod,
# fork, mknod...) are skipped for it.
SECCOMP_DENIED: tuple[str, ...] = (
    # new processes, other programs, other processes' memory
    "fork", "vfork", "execve", "execveat", "ptrace", "process_vm_readv", "process_vm_writev",
    "process_madvise", "pidfd_getfd",
    # sockets (pathname UNIX sockets, TCP, UDP)
    "socket", "connect", "accept", "accept4", "bind", "listen",
    # mounts, namespaces, the kernel
    "mount", "umount2", "open_tree", "open_tree_attr", "move_mount", "fsopen", "fsconfig",
    "fsmount", "fspick", "mount_setattr", "pivot_root", "chroot", "unshare", "setns", "bpf",
    "userfaultfd", "perf_event_open", "keyctl", "add_key", "request_key", "io_uring_setup",
    "io_uring_enter", "io_uring_register", "kexec_load", "kexec_file_load", "init_module",
    "finit_module", "delete_module", "reboot", "sethostname", "setdomainname", "acct",
    "syslog", "fanotify_init", "swapon", "swapoff", "quotactl", "quotactl_fd",
    "settimeofday", "clock_settime", "iopl", "ioperm", "vhangup", "uselib", "open_by_handle_at",
    # file modes, owners, times and extended attributes (Landlock does not cover them)
    "chmod", "fchmod", "fchmodat", "fchmodat2", "chown", "fchown", "lchown", "fchownat",
    "utime", "utimes", "futimesat", "utimensat", "setxattr", "lsetxattr", "fsetxattr",
    "removexattr", "lremovexattr", "fremovexattr", "setxattrat", "removexattrat",
    "file_setattr",
    # truncating by path (Landlock before ABI 3 does not cover it; ftruncate needs a writable fd)
    "truncate",
    # signals that may reach other processes (kill/tgkill are checked below)
    "tkill", "pidfd_send_signal",
    # memory outside RLIMIT_AS that outlives or escapes the job
    "memfd_secret", "shmget", "shmat", "shmctl", "shmdt", "msgget", "msgsnd", "msgrcv",
    "msgctl", "semget", "semop", "semctl", "semtimedop", "mq_open",
    # raising a resource limit (prlimit64 is checked below)
    "setrlimit",
)  # fmt: skip

S_IFMT = 0o170000
S_IFCHR = 0o020000
S_IFBLK = 0o060000
F_SETOWN = 8
F_SETOWN_EX = 15
FIOSETOWN = 0x8901
SIOCSPGRP = 0x8902
FS_IOC_SETFLAGS = 0x40086602
FS_IOC32_SETFLAGS = 0x40046602
FS_IOC_FSSETXATTR = 0x401C5820
O_ACCMODE = 0o3
O_TRUNC = 0o1000


@dataclass(frozen=True)
class SeccompArch:
    name: str
    audit: int
    """``AUDIT_ARCH_*`` value the filter requires in ``seccomp_data.arch``."""
    nr: dict[str, int]
    x32_bit: int = 0
    """Syscall numbers with this bit set belong to another ABI (x32) and kill the process."""


_X86_64_NR = {
    "fork": 57, "vfork": 58, "execve": 59, "execveat": 322, "ptrace": 101,
    "process_vm_readv": 310, "process_vm_writev": 311, "process_madvise": 440,
    "pidfd_getfd": 438, "socket": 41, "connect": 42, "accept": 43, "accept4": 288, "bind": 49,
    "listen": 50, "mount": 165, "umount2": 166, "open_tree": 428, "open_tree_attr": 467,
    "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
    "mount_setattr": 442, "pivot_root": 155, "chroot": 161, "unshare": 272, "setns": 308,
    "bpf": 321, "userfaultfd": 323, "perf_event_open": 298, "keyctl": 250, "add_key": 248,
    "request_key": 249, "io_uring_setup": 425, "io_uring_enter": 426,
    "io_uring_register": 427, "kexec_load": 246, "kexec_file_load": 320, "init_module": 175,
    "finit_module": 313, "delete_module": 176, "reboot": 169, "sethostname": 170,
    "setdomainname": 171, "acct": 163, "syslog": 103, "fanotify_init": 300, "swapon": 167,
    "swapoff": 168, "quotactl": 179, "quotactl_fd": 443, "settimeofday": 164,
    "clock_settime": 227, "iopl": 172, "ioperm": 173, "vhangup": 153, "uselib": 134,
    "open_by_handle_at": 304, "chmod": 90, "fchmod": 91, "fchmodat": 268, "fchmodat2": 452,
    "chown": 92, "fchown": 93, "lchown": 94, "fchownat": 260, "utime": 132, "utimes": 235,
    "futimesat": 261, "utimensat": 280, "setxattr": 188, "lsetxattr": 189, "fsetxattr": 190,
    "removexattr": 197, "lremovexattr": 198, "fremovexattr": 199, "setxattrat": 463,
    "removexattrat": 466, "file_setattr": 469, "tkill": 200, "pidfd_send_signal": 424,
    "truncate": 76, "memfd_create": 319, "memfd_secret": 447, "shmget": 29, "shmat": 30, "shmctl": 31,
    "shmdt": 67, "msgget": 68, "msgsnd": 69, "msgrcv": 70, "msgctl": 71, "semget": 64,
    "semop": 65, "semctl": 66, "semtimedop": 220, "mq_open": 240, "setrlimit": 160,
    # checked arguments
    "clone": 56, "clone3": 435, "prlimit64": 302, "mknod": 133, "mknodat": 259, "kill": 62,
    "tgkill": 234, "rt_sigqueueinfo": 129, "rt_tgsigqueueinfo": 297, "prctl": 157,
    "fcntl": 72, "ioctl": 16, "open": 2, "openat": 257, "openat2": 437,
}  # fmt: skip
_AARCH64_NR = {  # the generic table (include/uapi/asm-generic/unistd.h)
    "execve": 221, "execveat": 281, "ptrace": 117, "process_vm_readv": 270,
    "process_vm_writev": 271, "process_madvise": 440, "pidfd_getfd": 438, "socket": 198,
    "connect": 203, "accept": 202, "accept4": 242, "bind": 200, "listen": 201, "mount": 40,
    "umount2": 39, "open_tree": 428, "open_tree_attr": 467, "move_mount": 429, "fsopen": 430,
    "fsconfig": 431, "fsmount": 432, "fspick": 433, "mount_setattr": 442, "pivot_root": 41,
    "chroot": 51, "unshare": 97, "setns": 268, "bpf": 280, "userfaultfd": 282,
    "perf_event_open": 241, "keyctl": 219, "add_key": 217, "request_key": 218,
    "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "kexec_load": 104,
    "kexec_file_load": 294, "init_module": 105, "finit_module": 273, "delete_module": 106,
    "reboot": 142, "sethostname": 161, "setdomainname": 162, "acct": 89, "syslog": 116,
    "fanotify_init": 262, "swapon": 224, "swapoff": 225, "quotactl": 60, "quotactl_fd": 443,
    "settimeofday": 170, "clock_settime": 112, "vhangup": 58, "open_by_handle_at": 265,
    "fchmod": 52, "fchmodat": 53, "fchmodat2": 452, "fchown": 55, "fchownat": 54,
    "utimensat": 88, "setxattr": 5, "lsetxattr": 6, "fsetxattr": 7, "removexattr": 14,
    "lremovexattr": 15, "fremovexattr": 16, "setxattrat": 463, "removexattrat": 466,
    "file_setattr": 469, "truncate": 45, "tkill": 130, "pidfd_send_signal": 424, "memfd_create": 279,
    "memfd_secret": 447, "shmget": 194, "shmat": 196, "shmctl": 195, "shmdt": 197,
    "msgget": 186, "msgsnd": 189, "msgrcv": 188, "msgctl": 187, "semget": 190, "semop": 193,
    "semctl": 191, "semtimedop": 192, "mq_open": 180, "setrlimit": 164,
    # checked arguments
    "clone": 220, "clone3": 435, "prlimit64": 261, "mknodat": 33, "kill": 129, "tgkill": 131,
    "rt_sigqueueinfo": 138, "rt_tgsigqueueinfo": 240, "prctl": 167, "fcntl": 25, "ioctl": 29,
    "openat": 56, "openat2": 437,
}  # fmt: skip

SECCOMP_ARCHES = {
    "x86_64": SeccompArch("x86_64", 0xC000003E, _X86_64_NR, x32_bit=0x40000000),
    "aarch64": SeccompArch("aarch64", 0xC00000B7, _AARCH64_NR),
}


def _arch() -> SeccompArch | None:
    return SECCOMP_ARCHES.get(platform.machine())


class _Bpf:
    """A tiny classic-BPF assembler with labels (jumps are resolved in ``assemble``)."""

    def __init__(self) -> None:
        self.ins: list[list[int]] = []
        self.labels: dict[str, int] = {}
        self.fixups: list[tuple[int, int, str]] = []  # (instruction, field 1=jt 2=jf 3=k, label)

    def label(self, name: str) -> None:
        self.labels[name] = len(self.ins)

    def load(self, offset: int) -> None:
        self.ins.append([_BPF_LD_W_ABS, 0, 0, offset])

    def and_(self, mask: int) -> None:
        self.ins.append([_BPF_ALU_AND_K, 0, 0, mask])

    def ret(self, value: int) -> None:
        self.ins.append([_BPF_RET_K, 0, 0, value])

    def jump(self, code: int, k: int, jt: str | None = None, jf: str | None = None) -> None:
        """A conditional jump; a ``None`` target falls through to the next instruction."""
        for field_index, target in ((1, jt), (2, jf)):
            if target is not None:
                self.fixups.append((len(self.ins), field_index, target))
        self.ins.append([code, 0, 0, k])

    def goto(self, target: str) -> None:
        self.fixups.append((len(self.ins), 3, target))
        self.ins.append([_BPF_JA, 0, 0, 0])

    def assemble(self) -> bytes:
        for index, field_index, target in self.fixups:
            offset = self.labels[target] - index - 1
            if offset < 0 or (field_index != 3 and offset > 255):
                raise SandboxError(f"seccomp jump to {target} out of range ({offset})")
            self.ins[index][field_index] = offset
        if len(self.ins) > 4096:
            raise SandboxError("seccomp program longer than 4096 instructions")
        return b"".join(struct.pack("=HBBI", *i) for i in self.ins)


def seccomp_program(
    machine: str | None = None, *, pid: int | None = None, deny_memfd: bool = True
) -> bytes:
    """The BPF program as raw ``struct sock_filter`` bytes (raises SandboxError if no arch).

    ``machine`` selects the syscall table (default: this machine); ``pid`` is the job's own
    pid, the only process it may signal (default: the caller's); ``deny_memfd`` denies
    ``memfd_create`` (when no memory cgroup counts its pages).

    Verdicts: the syscalls in ``SECCOMP_DENIED`` fail with EPERM; ``clone`` without
    CLONE_THREAD (a new process) too, and ``clone3`` with ENOSYS so libc falls back to clone
    for threads; ``prlimit64`` may only read limits; ``mknod``/``mknodat`` may not create
    character or block devices; ``kill`` may target only the job itself (its pid, 0 or its
    own process group, which has the same id after ``setsid``), ``tgkill``/``rt_sigqueueinfo``/
    ``rt_tgsigqueueinfo`` only its own thread group; ``prctl`` may not change the parent-death
    signal or the dumpable flag; ``fcntl(F_SETOWN*)`` and ``ioctl(FIOSETOWN, SIOCSPGRP)``
    (SIGIO to another process) and the ``FS_IOC_SETFLAGS``/``FS_IOC_FSSETXATTR`` attribute
    ioctls fail with EPERM; so does opening a file read-only with ``O_TRUNC`` (before ABI 3,
    Landlock does not ask for write access to truncate), and ``openat2``, whose flags the
    filter cannot see, fails with ENOSYS (callers fall back to ``openat``). A foreign
    architecture's syscall ABI (e.g. x32, i386 via int 0x80)
    kills the process.
    """
    arch = SECCOMP_ARCHES.get(machine or platform.machine())
    if arch is None:
        raise SandboxError(f"seccomp filter not written for {machine or platform.machine()}")
    own = (os.getpid() if pid is None else pid) & 0xFFFFFFFF
    own_group = -own & 0xFFFFFFFF
    eperm = RET_ERRNO | errno.EPERM
    nr = arch.nr
    asm = _Bpf()
    asm.load(_OFF_ARCH)
    asm.jump(_BPF_JEQ_K, arch.audit, jt="arch_ok")
    asm.ret(RET_KILL_PROCESS)
    asm.label("arch_ok")
    asm.load(_OFF_NR)
    if arch.x32_bit:
        asm.jump(_BPF_JGE_K, arch.x32_bit, jf="native")
        asm.ret(RET_KILL_PROCESS)
        asm.label("native")

    denied = [n for n in SECCOMP_DENIED if n in nr]
    if deny_memfd:
        denied.append("memfd_create")
    checked = {
        "clone": "clone", "clone3": "enosys", "prlimit64": "prlimit", "mknod": "mknod",
        "mknodat": "mknodat", "kill": "kill", "tgkill": "own_tgid",
        "rt_sigqueueinfo": "own_tgid", "rt_tgsigqueueinfo": "own_tgid", "prctl": "prctl",
        "fcntl": "fcntl", "ioctl": "ioctl", "open": "open", "openat": "openat",
        "openat2": "enosys",
    }  # fmt: skip
    for name in sorted(denied, key=nr.__getitem__):
        asm.jump(_BPF_JEQ_K, nr[name], jf="next_" + name)
        asm.ret(eperm)
        asm.label("next_" + name)
    for name, block in checked.items():
        if name in nr:
            asm.jump(_BPF_JEQ_K, nr[name], jt=block)
    asm.ret(RET_ALLOW)

    asm.label("clone")  # a thread (CLONE_THREAD) is fine, a new process is not
    asm.load(_arg_low(0))
    asm.jump(_BPF_JSET_K, CLONE_THREAD, jt="allow")
    asm.goto("eperm")

    asm.label("prlimit")  # prlimit64(pid, resource, new_limit, old_limit): new_limit NULL
    asm.load(_arg_low(2))
    asm.jump(_BPF_JEQ_K, 0, jf="eperm")
    asm.load(_arg_low(2) + 4)
    asm.jump(_BPF_JEQ_K, 0, jt="allow")
    asm.goto("eperm")

    for label, mode_arg in (("mknod", 1), ("mknodat", 2)):
        asm.label(label)  # FIFOs, sockets and regular files yes; devices no
        asm.load(_arg_low(mode_arg))
        asm.and_(S_IFMT)
        asm.jump(_BPF_JEQ_K, S_IFCHR, jt="eperm")
        asm.jump(_BPF_JEQ_K, S_IFBLK, jt="eperm")
        asm.goto("allow")

    asm.label("kill")  # kill(pid, sig): itself, its process group (0 or -pid)
    asm.load(_arg_low(0))
    for target in (own, 0, own_group):
        asm.jump(_BPF_JEQ_K, target, jt="allow")
    asm.goto("eperm")

    asm.label("own_tgid")  # tgkill / rt_(tg)sigqueueinfo(tgid, ...): its own thread group
    asm.load(_arg_low(0))
    asm.jump(_BPF_JEQ_K, own, jt="allow")
    asm.goto("eperm")

    asm.label("prctl")
    asm.load(_arg_low(0))
    asm.jump(_BPF_JEQ_K, PR_SET_PDEATHSIG, jt="eperm")
    asm.jump(_BPF_JEQ_K, PR_SET_DUMPABLE, jt="eperm")
    asm.goto("allow")

    asm.label("fcntl")
    asm.load(_arg_low(1))
    asm.jump(_BPF_JEQ_K, F_SETOWN, jt="eperm")
    asm.jump(_BPF_JEQ_K, F_SETOWN_EX, jt="eperm")
    asm.goto("allow")

    asm.label("ioctl")
    asm.load(_arg_low(1))
    for command in (FIOSETOWN, SIOCSPGRP, FS_IOC_SETFLAGS, FS_IOC32_SETFLAGS, FS_IOC_FSSETXATTR):
        asm.jump(_BPF_JEQ_K, command, jt="eperm")
    asm.goto("allow")

    for label, flags_arg in (("open", 1), ("openat", 2)):
        asm.label(label)  # O_RDONLY | O_TRUNC truncates without Landlock (< ABI 3) asking
        asm.load(_arg_low(flags_arg))
        asm.and_(O_ACCMODE | O_TRUNC)
        asm.jump(_BPF_JEQ_K, O_TRUNC, jt="eperm")
        asm.goto("allow")

    asm.label("allow")
    asm.ret(RET_ALLOW)
    asm.label("eperm")
    asm.ret(eperm)
    asm.label("enosys")
    asm.ret(RET_ERRNO | errno.ENOSYS)
    return asm.assemble()


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def install_seccomp(*, deny_memfd: bool = True, program: bytes | None = None) -> None:
    """Install the filter on the calling thread (needs no_new_privs); ``program``: the one
    :func:`seccomp_program` gives this process, made ahead."""
    if program is None:
        program = seccomp_program(deny_memfd=deny_memfd)
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
FS_MAKE_CHAR = 1 << 6
FS_MAKE_BLOCK = 1 << 11
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


def project_folders(path: str, roots: Sequence[str]) -> list[str]:
    """The folders of the project a job checks, top first: from the highest folder that
    holds the checked file and is a workspace root (``roots``) or holds a ``.git``, down to
    the file's own folder. Their dot entries (``.git``, ``.env``...) are kept from the job
    (``install_landlock``). Empty when the file's folder does not exist (an unsaved buffer)."""
    try:
        folder = os.path.realpath(os.path.dirname(os.path.abspath(path)))
    except (OSError, ValueError):  # a NUL in the path
        return []
    if not os.path.isdir(folder):
        return []
    chain = [folder]
    while (parent := os.path.dirname(chain[-1])) != chain[-1]:
        chain.append(parent)
    tops = {os.path.realpath(r) for r in roots if r}
    top = max(
        (i for i, f in enumerate(chain) if f in tops or os.path.lexists(os.path.join(f, ".git"))),
        default=0,
    )
    return chain[top::-1]


def interpreter_folders() -> list[str]:
    """What a job reads to run Python and torch even inside a project's dot folder (a
    ``.venv``): the interpreter's prefixes, every ``sys.path`` entry and fxls's own folder."""
    fxls_folder = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    found = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, fxls_folder]
    return [p for p in found + sys.path if p and os.path.exists(p)]


MAX_ANCESTOR_ENTRIES = 256
"""A folder above the project (other than ``/``) with more entries gives the job none of
them: one Landlock rule per entry costs ~10 us in every job (a /tmp of 5,000 entries cost
60 ms)."""


def readable_paths(project: Sequence[str], interpreter: Sequence[str]) -> list[str]:
    """The paths a job may read files beneath when it checks ``project`` (from
    ``project_folders``): every entry of ``/`` and of the folders down to the project except
    the next folder down (none of a folder with more than ``MAX_ANCESTOR_ENTRIES``), every
    entry of the project's folders whose name does not start with ``.``, and
    ``interpreter``. Symlinks get no rule of their own: Landlock checks what they resolve
    to, so a link to ``.git/config`` is denied like the file."""
    chain = [os.path.dirname(project[0])] if project[0] != "/" else []
    while chain and chain[-1] != "/":
        chain.append(os.path.dirname(chain[-1]))
    descended = set(chain) | set(project)
    guarded = set(project)
    paths = []
    for folder in sorted(descended):
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        if folder not in guarded and folder != "/" and len(entries) > MAX_ANCESTOR_ENTRIES:
            continue
        for entry in entries:
            if entry.path in descended or entry.is_symlink():
                continue
            if folder in guarded and entry.name.startswith("."):
                continue
            paths.append(entry.path)
    for path in interpreter:
        real = os.path.realpath(path)
        if real not in descended:
            paths.append(real)
    return paths


def install_landlock(writable_dir: str, abi: int, readable: Sequence[str] | None = None) -> None:
    """Deny writes outside ``writable_dir``, exec, TCP and (ABI >= 6) signals/abstract sockets.

    Inside ``writable_dir`` everything but executing and creating device nodes is allowed.
    With ``readable`` (``readable_paths``), reading files is allowed only beneath those paths
    and ``writable_dir`` (listing folders stays allowed everywhere); without it reading stays
    allowed everywhere. Landlock's ptrace rules also deny ``/proc/<pid>/mem`` of processes
    outside the sandbox.
    """
    handled_fs = _landlock_fs_rights(abi)
    if readable is not None:
        handled_fs |= FS_READ_FILE | FS_READ_DIR
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
        file_rights = FS_WRITE_FILE | (handled_fs & (FS_TRUNCATE | FS_IOCTL_DEV | FS_READ_FILE))
        dir_rights = handled_fs & ~(FS_EXECUTE | FS_MAKE_CHAR | FS_MAKE_BLOCK | FS_IOCTL_DEV)
        rules = [(writable_dir, dir_rights), (os.devnull, file_rights)]
        if readable is not None:
            rules.append(("/", FS_READ_DIR))
            rules.extend((path, FS_READ_FILE | FS_READ_DIR) for path in readable)
        for path, rights in rules:
            _add_path_rule(ruleset, path, rights)
        _check(_libc.syscall(_SYS_LANDLOCK_RESTRICT_SELF, ruleset, 0), "landlock_restrict_self")
    finally:
        os.close(ruleset)


def _add_path_rule(ruleset: int, path: str, rights: int) -> None:
    """Allow ``rights`` beneath ``path`` (only the file rights for a file); a path that went
    away since it was listed, or that cannot be reached, gets no rule."""
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            rights &= FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV
        rule = ctypes.create_string_buffer(struct.pack("=Qi", rights, fd), 12)
        _check(
            _libc.syscall(_SYS_LANDLOCK_ADD_RULE, ruleset, _LANDLOCK_RULE_PATH_BENEATH, rule, 0),
            f"landlock_add_rule({path})",
        )
    finally:
        os.close(fd)


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
# Capabilities
# ---------------------------------------------------------------------------------------

_LINUX_CAPABILITY_VERSION_3 = 0x20080522


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def _last_cap() -> int:
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 63


def drop_capabilities() -> None:
    """Drop every capability: the bounding set (when allowed), ambient, then capset to zero.

    As root this leaves uid 0 without CAP_SYS_ADMIN, CAP_MKNOD, CAP_DAC_OVERRIDE...; as an
    ordinary user the sets are already empty except the bounding set, which needs
    CAP_SETPCAP to shrink and is harmless under no_new_privs (exec cannot gain capabilities).
    """
    for cap in range(_last_cap() + 1):
        if _libc.prctl(PR_CAPBSET_READ, cap, 0, 0, 0) != 1:
            continue
        if _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            err = ctypes.get_errno()
            if err == errno.EPERM:  # no CAP_SETPCAP: an unprivileged user
                break
            raise SandboxError(f"PR_CAPBSET_DROP({cap}): {os.strerror(err)}")
    _libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)  # EINVAL before 4.3: none
    header = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    _check(_libc.capset(ctypes.byref(header), data), "capset")


# ---------------------------------------------------------------------------------------
# Memory cgroup (cgroup v2)
# ---------------------------------------------------------------------------------------

NOFILE_WITHOUT_CGROUP = 64
"""RLIMIT_NOFILE cap when no memory cgroup counts kernel-held pages (pipes, unlinked files)."""


def _cgroup_write(path: str, value: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def _own_cgroup_dir() -> tuple[str | None, str]:
    """This process's cgroup v2 folder, or None and why not."""
    try:
        with open("/proc/self/cgroup") as f:
            rel = next((ln[3:].strip() for ln in f if ln.startswith("0::")), None)
        with open("/proc/self/mountinfo") as f:
            mounts = [ln.split() for ln in f]
    except OSError as exc:
        return None, f"cannot read /proc/self/cgroup: {exc}"
    if rel is None:
        return None, "not in a cgroup v2 hierarchy"
    for fields in mounts:
        if "-" not in fields:
            continue
        fstype = fields[fields.index("-") + 1]
        root, mount_point = fields[3], fields[4]
        if fstype == "cgroup2" and (rel + "/").startswith(root.rstrip("/") + "/"):
            path = os.path.join(mount_point, rel[len(root.rstrip("/")) :].lstrip("/"))
            if os.path.isdir(path):
                return os.path.normpath(path), ""
    return None, "no cgroup2 file system mounted"


@dataclass
class MemoryCgroup:
    """A cgroup v2 folder delegated to this zygote; each job gets a group with ``memory.max``
    (and ``pids.max`` when the pids controller is delegated too).

    Unlike RLIMIT_AS, the cgroup counts every page charged to the job: memfd and tmpfs pages,
    the page cache it fills, pipe buffers. fxls uses only a cgroup that is its own to manage
    (cgroup v2 delegation): the folder named by ``FXLS_CGROUP``, or the zygote's own cgroup
    when the zygote is the only process in it (a launcher started it in a delegated scope).
    It never creates groups in a hierarchy that another manager (systemd, a container
    runtime) owns, and uses the cgroup only after a trial of the whole cycle (create a group,
    limit it, move a process in, remove it) succeeded.
    """

    path: str
    pids: bool = False
    """The pids controller is delegated too: each job group gets ``pids.max``."""

    @classmethod
    def probe(cls, requested: str | None = None) -> tuple[MemoryCgroup | None, str]:
        """The delegated cgroup to use, or None and why there is none."""
        path = requested
        try:
            if path is None:
                own, why = _own_cgroup_dir()
                if own is None:
                    return None, why
                with open(os.path.join(own, "cgroup.procs")) as f:
                    if f.read().split() != [str(os.getpid())]:
                        return None, (
                            "the worker shares its cgroup with other processes and "
                            "FXLS_CGROUP names no delegated cgroup"
                        )
                path = own
            with open(os.path.join(path, "cgroup.controllers")) as f:
                controllers = f.read().split()
            if "memory" not in controllers:
                return None, f"{path}: the memory controller is not delegated"
            group = cls(path, pids="pids" in controllers)
            group._prepare()
            return group, ""
        except OSError as exc:
            return None, f"{path or 'own cgroup'}: {exc}"

    def _prepare(self) -> None:
        """Enable the memory controller for child groups and try one job group."""
        with open(os.path.join(self.path, "cgroup.procs")) as f:
            procs = f.read().split()
        if procs:
            # A cgroup with processes cannot enable controllers for its children: move
            # ourselves (the only process, checked) into a leaf first.
            if procs != [str(os.getpid())]:
                raise OSError(errno.EBUSY, "other processes are in it")
            leaf = os.path.join(self.path, "zygote")
            os.makedirs(leaf, 0o755, exist_ok=True)
            _cgroup_write(os.path.join(leaf, "cgroup.procs"), str(os.getpid()))
        _cgroup_write(os.path.join(self.path, "cgroup.subtree_control"), "+memory")
        if self.pids:
            try:
                _cgroup_write(os.path.join(self.path, "cgroup.subtree_control"), "+pids")
            except OSError:  # the memory limit still works; RLIMIT_NPROC bounds threads
                self.pids = False
        trial = self.job_group(0, 256 * 1024 * 1024)
        try:
            pid = os.fork()
            if pid == 0:  # pragma: no cover - runs in the probe child
                code = 0
                try:
                    join_cgroup(trial)
                except BaseException:
                    code = 1
                os._exit(code)
            _, status = os.waitpid(pid, 0)
            if os.waitstatus_to_exitcode(status) != 0:
                raise OSError(errno.EACCES, "cannot move a process into a job group")
        finally:
            remove_cgroup(trial)

    def job_group(self, job_id: int, memory_bytes: int) -> str:
        """Create the group of one job with its memory limit (no swap; OOM kills the group)."""
        path = os.path.join(self.path, f"fxls-job-{os.getpid()}-{job_id}")
        os.mkdir(path, 0o755)
        try:
            _cgroup_write(os.path.join(path, "memory.max"), str(memory_bytes))
            if self.pids:
                _cgroup_write(os.path.join(path, "pids.max"), str(JOB_TASKS))
            for name, value in (("memory.swap.max", "0"), ("memory.oom.group", "1")):
                try:
                    _cgroup_write(os.path.join(path, name), value)
                except OSError:  # no swap accounting / an older kernel
                    pass
        except OSError:
            remove_cgroup(path)
            raise
        return path


def join_cgroup(path: str) -> None:
    """Move the calling process into the cgroup at ``path`` (in the child, before Landlock)."""
    _cgroup_write(os.path.join(path, "cgroup.procs"), "0")


def cgroup_oom_kills(path: str) -> int:
    """How many processes of the group the kernel's OOM killer killed (memory.events)."""
    try:
        with open(os.path.join(path, "memory.events")) as f:
            for line in f:
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
    except (OSError, ValueError):
        pass
    return 0


def remove_cgroup(path: str) -> bool:
    """Kill what is left in a job group and remove it; False when it is still busy."""
    try:
        _cgroup_write(os.path.join(path, "cgroup.kill"), "1")  # Linux >= 5.14
    except OSError:
        pass
    try:
        os.rmdir(path)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True


# ---------------------------------------------------------------------------------------
# Probing and the child set-up
# ---------------------------------------------------------------------------------------


def probe_layers(abi: int | None = None) -> tuple[list[str], dict[str, str]]:
    """Which optional layers work here: fork a throw-away child that tries each one.

    ``abi`` is the Landlock ABI to use (default: the kernel's; lower to simulate an older
    kernel). Returns (available, missing-with-reason). Never runs user code.
    """
    available: list[str] = []
    missing: dict[str, str] = {}
    if abi is None:
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
class ChildSetup:
    """Everything the child needs to isolate itself; built by the zygote before fork."""

    job_dir: str
    limits: Limits
    isolation: Isolation
    available: list[str]
    output_w: int
    result_w: int
    zygote_pid: int
    landlock_abi: int = 0
    cgroup: str | None = None
    """The job's memory cgroup to join, when the zygote has one."""
    frame_key: bytes = b""
    """Per-job key of the result frames' MAC (see ``fxls.worker.process.child``)."""
    project: list[str] = field(default_factory=list)
    """The folders of the checked project (``project_folders``): with Landlock, the job
    reads no dot entry of theirs."""
    seccomp: dict[bool, bytes] = field(default_factory=dict)
    """The seccomp programs of this process by ``deny_memfd``, when made ahead (a child
    forked before its job makes them while it waits)."""


def _vm_size_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


JOB_TASKS = 256
"""Threads a job may start: RLIMIT_NPROC is the user's tasks at the job's start plus this,
and a job's cgroup (when delegated) has ``pids.max`` = this. torch's thread pools need one
per core. The zygote also kills a job with more than twice this many threads (for uid 0,
which RLIMIT_NPROC does not bind)."""


def user_tasks(uid: int) -> int:
    """Tasks (processes and threads) whose real user id is ``uid``, as RLIMIT_NPROC counts
    them (the owner of ``/proc/<pid>`` is root for a non-dumpable process, such as a job, so
    the ``Uid:`` line of its status is read instead)."""
    total = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            real, threads = _uid_and_threads(entry)
            if real == uid:
                total += threads
    return total


def task_threads(pid: int) -> int:
    """How many threads process ``pid`` has (0 once it is gone)."""
    return _uid_and_threads(str(pid))[1]


def process_cpu(pid: int) -> float | None:
    """CPU seconds (user and system, all threads) process ``pid`` has used so far, as
    ``wait4`` gives them once it has exited; None once it is gone."""
    clock = ((~pid) << 3) | 2  # the kernel's CPU-time clock of a whole process (CPUCLOCK_SCHED)
    try:
        return time.clock_gettime(clock)
    except OSError:
        return None


def peak_memory_kb(pid: int) -> int | None:
    """Peak resident memory (KiB) of process ``pid`` so far; None once it is gone or has
    begun to exit (its memory released)."""
    for line in _status_lines(str(pid)):
        if line.startswith(b"VmHWM:"):
            return int(line.split()[1])
    return None


def _status_lines(pid: str) -> list[bytes]:
    """The lines of ``/proc/<pid>/status``; none once the process is gone."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            return f.read(4096).split(b"\n")
    except OSError:
        return []


def _uid_and_threads(pid: str) -> tuple[int, int]:
    """The real user id and the thread count of process ``pid``; (-1, 0) once it is gone."""
    real = -1
    for line in _status_lines(pid):
        if line.startswith(b"Uid:"):
            real = int(line.split()[1])
        elif line.startswith(b"Threads:"):
            return real, int(line.split()[1])
    return real, 0


def _limit_tasks() -> None:
    """RLIMIT_NPROC = the user's tasks now + ``JOB_TASKS``: a thread bomb stops there (EAGAIN,
    "can't start new thread") instead of taking every process id of the machine. The kernel
    does not apply RLIMIT_NPROC to uid 0 even without capabilities (``copy_process`` exempts
    the root user), so as root a cgroup's ``pids.max`` bounds a job's threads, or else the
    zygote's watch (``fxls.worker.process.zygote.MAX_JOB_THREADS``)."""
    uid = os.getuid()
    if uid == 0:
        return
    nproc = user_tasks(uid) + JOB_TASKS
    resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))


def _set_rlimits(limits: Limits, in_cgroup: bool) -> None:
    # the limit counts the whole process: a spare child's CPU before its job is not the job's
    used = resource.getrusage(resource.RUSAGE_SELF)
    cpu = max(1, math.ceil(limits.cpu_s) + round(used.ru_utime + used.ru_stime))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 2))
    mem = _vm_size_bytes() + limits.memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
    fsize = limits.file_size_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
    nofile = limits.nofile if in_cgroup else min(limits.nofile, NOFILE_WITHOUT_CGROUP)
    resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    _limit_tasks()


def setup_child(setup: ChildSetup) -> list[str]:
    """Isolate the calling (freshly forked) process; returns the active layer names.

    Raises SandboxError (or OSError) when a step fails; the caller reports ``sandbox_setup``.
    """
    active: list[str] = []
    os.setsid()
    active.append("setsid")
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != setup.zygote_pid:
        os._exit(137)  # the zygote died between fork and prctl
    active.append("pdeathsig")

    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(setup.output_w, 1)
    os.dup2(setup.output_w, 2)
    os.dup2(setup.result_w, RESULT_FD)
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

    os.chdir(setup.job_dir)
    os.umask(0o077)
    os.environ["TMPDIR"] = setup.job_dir
    tempfile.tempdir = setup.job_dir
    sys.dont_write_bytecode = True

    in_cgroup = False
    if setup.cgroup is not None:
        try:
            join_cgroup(setup.cgroup)
            in_cgroup = True
            active.append("cgroup")
        except OSError:  # fall back to the limits that work without it
            pass
    _set_rlimits(setup.limits, in_cgroup)
    active.append("rlimits")
    prctl(PR_SET_NO_NEW_PRIVS, 1)
    active.append("no_new_privs")
    if setup.isolation.netns and "netns" in setup.available:
        enter_netns()
        active.append("netns")
    drop_capabilities()
    active.append("capabilities")
    prctl(PR_SET_DUMPABLE, 0)
    active.append("dumpable")
    if setup.isolation.landlock and "landlock" in setup.available:
        readable = readable_paths(setup.project, interpreter_folders()) if setup.project else None
        install_landlock(setup.job_dir, setup.landlock_abi, readable)
        active.append("landlock")
        if setup.landlock_abi >= 4:
            active.append("landlock-net")
        if setup.landlock_abi >= 6:
            active.append("landlock-scope")
    if setup.isolation.seccomp and "seccomp" in setup.available:
        install_seccomp(deny_memfd=not in_cgroup, program=setup.seccomp.get(not in_cgroup))
        active.append("seccomp")
    return active
