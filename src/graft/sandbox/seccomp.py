"""The sandbox's second wall: a seccomp filter on the system calls a candidate program never
needs (host side). Docker's default profile is the anchor; everything not named here is allowed.

The filter is compiled by libseccomp (the library Docker, runc and systemd use; graft calls the
few functions it needs through ctypes: no binding on PyPI is both maintained and installable)
into a classic BPF program for this machine's architecture, once per process, and handed to the
sandbox's init as bytes; each program installs it on itself just before its code runs
(`zygote.py`), after `no_new_privs`. A refused call fails with EPERM (ENOSYS for clone3, so that
glibc falls back to clone, whose flags the filter can read); it never kills the program.

Refused:
- the kernel keyring: add_key, keyctl, request_key (a program has no keyring to reach);
- System V IPC and POSIX message queues (shared memory, semaphores, message queues);
- the mount family, and new namespaces (unshare, setns, clone with a CLONE_NEW* flag);
- reaching other processes: ptrace, process_vm_readv/writev, pidfd_getfd, kcmp, and prlimit64
  on any process but itself (pid 0, or its own pid: a few instructions ahead of libseccomp's
  filter hold `inner.SELF_PID`, which each program replaces with its pid as it installs it);
- the kernel's own state: bpf, perf_event_open, userfaultfd, io_uring, module and kexec
  loading, reboot, swap, accounting, quotas, clocks, the host and domain name, the kernel log,
  file handles (open_by_handle_at), fanotify, NUMA policy and page migration, personality.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import struct
import sys
import tempfile
from dataclasses import dataclass, field
from functools import cache

from graft.sandbox.inner import SELF_PID

REFUSED = (
    # keyrings
    "add_key", "keyctl", "request_key",
    # System V IPC and POSIX message queues
    "shmget", "shmat", "shmdt", "shmctl", "semget", "semop", "semtimedop", "semctl", "msgget",
    "msgsnd", "msgrcv", "msgctl", "ipc", "mq_open", "mq_unlink", "mq_timedsend",
    "mq_timedreceive", "mq_notify", "mq_getsetattr",
    # mounts and namespaces
    "mount", "umount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen",
    "fsconfig", "fsmount", "fspick", "mount_setattr", "unshare", "setns",
    # other processes
    "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "kcmp",
    "process_madvise",
    # the kernel's own state
    "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter",
    "io_uring_register", "init_module", "finit_module", "delete_module", "kexec_load",
    "kexec_file_load", "reboot", "swapon", "swapoff", "acct", "quotactl", "quotactl_fd",
    "settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "stime", "sethostname",
    "setdomainname", "syslog", "vhangup", "lookup_dcookie", "open_by_handle_at",
    "name_to_handle_at", "fanotify_init", "mbind", "set_mempolicy", "migrate_pages",
    "move_pages", "personality", "iopl", "ioperm", "uselib", "ustat", "sysfs", "nfsservctl",
)  # fmt: skip
NAMESPACE_FLAGS = {
    "CLONE_NEWNS": 0x00020000, "CLONE_NEWCGROUP": 0x02000000, "CLONE_NEWUTS": 0x04000000,
    "CLONE_NEWIPC": 0x08000000, "CLONE_NEWUSER": 0x10000000, "CLONE_NEWPID": 0x20000000,
    "CLONE_NEWNET": 0x40000000, "CLONE_NEWTIME": 0x00000080,
}  # fmt: skip
"""clone's flags (its first argument on x86-64 and arm64) that make a namespace."""
CLONE_FLAGS_FIRST = {"x86_64", "aarch64", "riscv64", "ppc64le", "loongarch64"}

_ALLOW = 0x7FFF0000
_CMP_NE, _CMP_MASKED_EQ = 1, 7
_LD_ABS, _JEQ_K, _RET_K = 0x20, 0x15, 0x06  # BPF_LD|BPF_W|BPF_ABS, BPF_JMP|BPF_JEQ|BPF_K, BPF_RET
AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
"""The kernel's names (AUDIT_ARCH_*) of the architectures whose own-pid rule is written here."""
_ATTR_NNP = 3  # libseccomp sets no_new_privs when it loads a filter; the zygote does it itself


def _errno(code: int) -> int:
    return 0x00050000 | (code & 0xFFFF)


class _ArgCmp(ctypes.Structure):
    _fields_ = [
        ("arg", ctypes.c_uint),
        ("op", ctypes.c_int),
        ("datum_a", ctypes.c_uint64),
        ("datum_b", ctypes.c_uint64),
    ]


@dataclass(frozen=True)
class Filter:
    """The compiled filter (`bpf`: struct sock_filter entries, 8 bytes each) and what it refuses
    here; `problem` says why there is none ("" when there is)."""

    bpf: bytes = b""
    refused: tuple[str, ...] = ()
    arguments: tuple[str, ...] = field(default_factory=tuple)
    problem: str = ""


def _library() -> ctypes.CDLL:
    name = ctypes.util.find_library("seccomp") or "libseccomp.so.2"
    try:
        lib = ctypes.CDLL(name, use_errno=True)
    except OSError:
        raise OSError(
            "libseccomp is not installed (Debian and Ubuntu: apt install libseccomp2; "
            "Fedora: dnf install libseccomp)"
        ) from None
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add_array.argtypes = [
        ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint, ctypes.POINTER(_ArgCmp),
    ]  # fmt: skip
    lib.seccomp_attr_set.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32]
    lib.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
    return lib


def _rule(lib: ctypes.CDLL, ctx: int, action: int, number: int, *cmps: _ArgCmp) -> None:
    array = (_ArgCmp * len(cmps))(*cmps) if cmps else None
    result = lib.seccomp_rule_add_array(ctx, action, number, len(cmps), array)
    if result < 0:
        raise OSError(-result, f"seccomp_rule_add: {os.strerror(-result)}")


def _compile(lib: ctypes.CDLL) -> Filter:
    ctx = lib.seccomp_init(_ALLOW)
    if not ctx:
        raise OSError("seccomp_init failed")
    refused, arguments = [], []
    try:
        lib.seccomp_attr_set(ctx, _ATTR_NNP, 0)
        eperm = _errno(errno.EPERM)
        for name in REFUSED:
            number = lib.seccomp_syscall_resolve_name(name.encode())
            if number < 0:  # a call this architecture does not have
                continue
            _rule(lib, ctx, eperm, number)
            refused.append(name)
        clone3 = lib.seccomp_syscall_resolve_name(b"clone3")
        if clone3 >= 0:
            _rule(lib, ctx, _errno(errno.ENOSYS), clone3)
            arguments.append("clone3 (ENOSYS: glibc falls back to clone)")
        if os.uname().machine in CLONE_FLAGS_FIRST:
            clone = lib.seccomp_syscall_resolve_name(b"clone")
            for flag in NAMESPACE_FLAGS.values():
                _rule(lib, ctx, eperm, clone, _ArgCmp(0, _CMP_MASKED_EQ, flag, flag))
            arguments.append("clone with a CLONE_NEW* flag")
        prlimit = lib.seccomp_syscall_resolve_name(b"prlimit64")
        if prlimit >= 0:
            _rule(lib, ctx, eperm, prlimit, _ArgCmp(0, _CMP_NE, 0, 0))
        with tempfile.TemporaryFile() as out:
            result = lib.seccomp_export_bpf(ctx, out.fileno())
            if result < 0:
                raise OSError(-result, f"seccomp_export_bpf: {os.strerror(-result)}")
            out.seek(0)
            bpf = out.read()
    finally:
        lib.seccomp_release(ctx)
    own = own_pid_prefix(prlimit)
    if own and SELF_PID.to_bytes(4, sys.byteorder) not in bpf:
        bpf = own + bpf
        arguments.append("prlimit64 on another process than itself")
    elif prlimit >= 0:
        arguments.append("prlimit64 on another process (on itself too, by its pid)")
    return Filter(bpf, tuple(refused), tuple(arguments))


def _instruction(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def own_pid_prefix(prlimit: int) -> bytes:
    """Instructions run before libseccomp's filter: prlimit64 on the caller's own pid (`SELF_PID`,
    which each program replaces with its pid as it installs the filter) is allowed, as with pid
    0; every other call goes on to the filter. Empty where the architecture is not known here."""
    arch = AUDIT_ARCH.get(os.uname().machine)
    if arch is None or prlimit < 0:
        return b""
    low = 16 if sys.byteorder == "little" else 20  # seccomp_data.args[0]'s low 32 bits (pid_t)
    go_on = 7  # the first instruction of libseccomp's filter
    return b"".join(
        (
            _instruction(_LD_ABS, 4),  # the architecture
            _instruction(_JEQ_K, arch, 0, go_on - 2),
            _instruction(_LD_ABS, 0),  # the system call
            _instruction(_JEQ_K, prlimit, 0, go_on - 4),
            _instruction(_LD_ABS, low),  # its first argument, the pid
            _instruction(_JEQ_K, SELF_PID, 0, go_on - 6),
            _instruction(_RET_K, _ALLOW),
        )
    )


NUMBERS = {
    "x86_64": {"pivot_root": 155, "keyctl": 250},
    "aarch64": {"pivot_root": 41, "keyctl": 219},
}
"""The system calls the sandbox's init makes that Python has no function for, where libseccomp
is not there to name them."""


@cache
def syscall_numbers() -> dict[str, int]:
    """pivot_root's and keyctl's numbers on this machine (libseccomp's names, else `NUMBERS`);
    OSError on an architecture neither knows."""
    try:
        lib = _library()
        found = {n: lib.seccomp_syscall_resolve_name(n.encode()) for n in ("pivot_root", "keyctl")}
        if all(v >= 0 for v in found.values()):
            return found
    except OSError:
        pass
    machine = os.uname().machine
    if machine not in NUMBERS:
        raise OSError(f"the sandbox does not know this architecture's system calls ({machine})")
    return NUMBERS[machine]


@cache
def compiled() -> Filter:
    """This machine's filter, compiled once per process; `problem` set when it cannot be."""
    try:
        return _compile(_library())
    except OSError as err:
        return Filter(problem=str(err))
