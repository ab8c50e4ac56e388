"""The seccomp-BPF programs for every architecture, run through a classic-BPF interpreter.

The kernel runs only the program of the machine's own architecture (``test_sandbox.py``
checks that one through the real worker); these tests build the x86_64 and the aarch64
program on any machine and check their verdicts: the architecture check, the syscall numbers
of each table and the argument checks.
"""

from __future__ import annotations

import errno
import struct

import pytest

from fxls.worker.process import sandbox

ALLOW = sandbox.RET_ALLOW
KILL = sandbox.RET_KILL_PROCESS
EPERM = sandbox.RET_ERRNO | errno.EPERM
ENOSYS = sandbox.RET_ERRNO | errno.ENOSYS
PID = 4242
ARCHES = sorted(sandbox.SECCOMP_ARCHES)


def run_bpf(program: bytes, arch: int, nr: int, args: tuple[int, ...] = ()) -> int:
    """Evaluate a seccomp filter on one syscall, as the kernel does (classic BPF subset)."""
    padded = (list(args) + [0] * 6)[:6]
    data = struct.pack("<iIQ6Q", nr, arch, 0, *(a & (2**64 - 1) for a in padded))
    ins = [struct.unpack("=HBBI", program[i : i + 8]) for i in range(0, len(program), 8)]
    acc, pc = 0, 0
    for _ in range(len(ins) + 1):  # every jump is forward: one pass at most
        code, jt, jf, k = ins[pc]
        pc += 1
        if code == 0x20:  # ld w abs
            acc = struct.unpack_from("<I", data, k)[0]
        elif code == 0x54:  # alu and k
            acc &= k
        elif code == 0x05:  # ja
            pc += k
        elif code == 0x15:  # jeq k
            pc += jt if acc == k else jf
        elif code == 0x35:  # jge k
            pc += jt if acc >= k else jf
        elif code == 0x45:  # jset k
            pc += jt if acc & k else jf
        elif code == 0x06:  # ret k
            return k
        else:
            raise AssertionError(f"unexpected BPF opcode {code:#x}")
    raise AssertionError("program did not return")


@pytest.fixture(params=ARCHES)
def arch(request: pytest.FixtureRequest) -> sandbox.SeccompArch:
    return sandbox.SECCOMP_ARCHES[request.param]


def verdict(arch: sandbox.SeccompArch, name: str, *args: int, deny_memfd: bool = True) -> int:
    program = sandbox.seccomp_program(arch.name, pid=PID, deny_memfd=deny_memfd)
    return run_bpf(program, arch.audit, arch.nr[name], args)


def test_both_architectures_have_a_filter() -> None:
    assert {"x86_64", "aarch64"} <= set(sandbox.SECCOMP_ARCHES)
    assert sandbox.SECCOMP_ARCHES["x86_64"].audit == 0xC000003E  # AUDIT_ARCH_X86_64
    assert sandbox.SECCOMP_ARCHES["aarch64"].audit == 0xC00000B7  # AUDIT_ARCH_AARCH64


def test_key_syscall_numbers() -> None:
    x86, arm = sandbox.SECCOMP_ARCHES["x86_64"].nr, sandbox.SECCOMP_ARCHES["aarch64"].nr
    expected = {
        "socket": (41, 198), "connect": (42, 203), "execve": (59, 221), "clone": (56, 220),
        "clone3": (435, 435), "ptrace": (101, 117), "kill": (62, 129), "tgkill": (234, 131),
        "fchmodat": (268, 53), "fchownat": (260, 54), "utimensat": (280, 88),
        "setxattr": (188, 5), "mknodat": (259, 33), "memfd_create": (319, 279),
        "prctl": (157, 167), "prlimit64": (302, 261), "unshare": (272, 97),
        "fchmodat2": (452, 452), "pidfd_send_signal": (424, 424),
    }  # fmt: skip
    for name, (x86_nr, arm_nr) in expected.items():
        assert (x86[name], arm[name]) == (x86_nr, arm_nr), name
    # aarch64 has only the *at variants
    assert not {"chmod", "chown", "mknod", "fork", "utime"} & set(arm)


def test_every_denied_name_is_in_some_table() -> None:
    known = set().union(*(a.nr for a in sandbox.SECCOMP_ARCHES.values()))
    assert set(sandbox.SECCOMP_DENIED) <= known


def test_other_architecture_is_killed(arch: sandbox.SeccompArch) -> None:
    program = sandbox.seccomp_program(arch.name, pid=PID)
    other = next(a for a in sandbox.SECCOMP_ARCHES.values() if a is not arch)
    assert run_bpf(program, other.audit, 0) == KILL
    assert run_bpf(program, 0x40000003, 0) == KILL  # AUDIT_ARCH_I386


def test_x32_abi_is_killed() -> None:
    arch = sandbox.SECCOMP_ARCHES["x86_64"]
    program = sandbox.seccomp_program("x86_64", pid=PID)
    assert run_bpf(program, arch.audit, 0x40000000 | 59) == KILL  # x32 execve
    assert run_bpf(program, arch.audit, 0x40000000) == KILL


def test_ordinary_syscalls_are_allowed(arch: sandbox.SeccompArch) -> None:
    program = sandbox.seccomp_program(arch.name, pid=PID)
    read, write, futex = {"x86_64": (0, 1, 202), "aarch64": (63, 64, 98)}[arch.name]
    for nr in (read, write, futex):
        assert run_bpf(program, arch.audit, nr) == ALLOW


def test_denied_syscalls(arch: sandbox.SeccompArch) -> None:
    for name in sandbox.SECCOMP_DENIED:
        if name in arch.nr:
            assert verdict(arch, name) == EPERM, name


def test_memfd_create_denied_unless_a_cgroup_counts_it(arch: sandbox.SeccompArch) -> None:
    assert verdict(arch, "memfd_create") == EPERM
    assert verdict(arch, "memfd_create", deny_memfd=False) == ALLOW


def test_threads_but_not_processes(arch: sandbox.SeccompArch) -> None:
    thread = 0x3D0F00  # glibc's pthread_create flags (CLONE_VM|CLONE_FS|...|CLONE_THREAD...)
    assert verdict(arch, "clone", thread) == ALLOW
    assert verdict(arch, "clone", 0x11) == EPERM  # SIGCHLD: fork
    assert verdict(arch, "clone3") == ENOSYS


def test_rlimits_can_be_read_not_raised(arch: sandbox.SeccompArch) -> None:
    assert verdict(arch, "prlimit64", 0, 9, 0, 0x7FFF0000) == ALLOW  # read only
    assert verdict(arch, "prlimit64", 0, 9, 0x7FFF0000, 0) == EPERM
    assert verdict(arch, "prlimit64", 0, 9, 1 << 40, 0) == EPERM  # high word only
    assert verdict(arch, "setrlimit", 9, 0x7FFF0000) == EPERM


def test_device_nodes_but_not_fifos(arch: sandbox.SeccompArch) -> None:
    for mode, expected in ((0o020600, EPERM), (0o060600, EPERM), (0o010600, ALLOW),
                           (0o100600, ALLOW), (0o140600, ALLOW)):  # fmt: skip
        assert verdict(arch, "mknodat", -100, 0, mode, 0) == expected, oct(mode)
        if "mknod" in arch.nr:
            assert verdict(arch, "mknod", 0, mode, 0) == expected, oct(mode)


def test_signals_only_to_the_job_itself(arch: sandbox.SeccompArch) -> None:
    for target in (PID, 0, -PID):
        assert verdict(arch, "kill", target, 9) == ALLOW, target
    for target in (-1, 1, PID + 1, -(PID + 1)):
        assert verdict(arch, "kill", target, 9) == EPERM, target
    # Only the low 32 bits count (the kernel truncates pid_t): garbage above is ignored.
    assert verdict(arch, "kill", (0xDEAD << 32) | PID, 9) == ALLOW
    assert verdict(arch, "kill", (0xDEAD << 32) | 1, 9) == EPERM
    for name in ("tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo"):
        assert verdict(arch, name, PID, PID + 3, 9) == ALLOW, name
        assert verdict(arch, name, 1, 1, 9) == EPERM, name
    assert verdict(arch, "tkill", PID, 9) == EPERM
    assert verdict(arch, "pidfd_send_signal", 3, 9, 0, 0) == EPERM


def test_prctl_keeps_pdeathsig_and_dumpable(arch: sandbox.SeccompArch) -> None:
    assert verdict(arch, "prctl", sandbox.PR_SET_PDEATHSIG, 0) == EPERM
    assert verdict(arch, "prctl", sandbox.PR_SET_DUMPABLE, 1) == EPERM
    assert verdict(arch, "prctl", sandbox.PR_GET_PDEATHSIG, 0) == ALLOW
    assert verdict(arch, "prctl", 15, 0) == ALLOW  # PR_SET_NAME


def test_no_sigio_to_other_processes_no_file_flags(arch: sandbox.SeccompArch) -> None:
    for cmd in (sandbox.F_SETOWN, sandbox.F_SETOWN_EX):
        assert verdict(arch, "fcntl", 3, cmd, 1) == EPERM
    assert verdict(arch, "fcntl", 3, 1, 0) == ALLOW  # F_GETFD
    for cmd in (sandbox.FIOSETOWN, sandbox.SIOCSPGRP, sandbox.FS_IOC_SETFLAGS,
                sandbox.FS_IOC_FSSETXATTR):  # fmt: skip
        assert verdict(arch, "ioctl", 3, cmd, 0) == EPERM, hex(cmd)
    assert verdict(arch, "ioctl", 1, 0x5401, 0) == ALLOW  # TCGETS


def test_no_truncation_by_path(arch: sandbox.SeccompArch) -> None:
    o_rdonly, o_wronly, o_rdwr, o_creat, o_trunc = 0, 1, 2, 0o100, 0o1000
    assert verdict(arch, "truncate", 0, 0) == EPERM
    assert verdict(arch, "openat", -100, 0, o_rdonly | o_trunc) == EPERM
    for flags in (o_rdonly, o_wronly | o_trunc, o_rdwr | o_creat | o_trunc, o_rdonly | o_creat):
        assert verdict(arch, "openat", -100, 0, flags) == ALLOW, oct(flags)
    if "open" in arch.nr:
        assert verdict(arch, "open", 0, o_rdonly | o_trunc) == EPERM
        assert verdict(arch, "open", 0, o_wronly | o_trunc) == ALLOW
    assert verdict(arch, "openat2", -100, 0, 0, 24) == ENOSYS


def test_unknown_architecture_has_no_filter() -> None:
    with pytest.raises(sandbox.SandboxError, match="not written for"):
        sandbox.seccomp_program("riscv64")
