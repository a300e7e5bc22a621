"""What a sandboxed run may use (`Limits`), how it ended (`Outcome`), and what the machine
offers: the interpreter the sandbox shows, the isolation tier (`cgroups.py`), and whether
namespaces can be made at all."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from functools import cache

from graft.sandbox.cgroups import Placement, find_placement

DEFAULT_POOL_THREADS = 32
"""The most threads a default `concurrent.futures.ThreadPoolExecutor` starts: min(32, cores + 4),
so 32 on any host of 28 cores or more."""


@dataclass(frozen=True)
class Limits:
    """What one run may use."""

    wall_s: float = 5.0
    cpu_s: int = 5
    memory_bytes: int = 256 << 20
    processes: int = 2 * DEFAULT_POOL_THREADS
    """Tasks, processes and threads together (the pids cgroup counts both): room for a default
    thread pool's 32 workers beside the program's own threads, twice over; a fork bomb stops
    here."""
    open_files: int = 64
    file_bytes: int = 8 << 20
    scratch_bytes: int = 16 << 20
    scratch_files: int = 256
    stdout_bytes: int = 1 << 20
    """Standard output, and each result channel, of one run (the code verifier raises it for a
    problem whose expected output is larger: `graft.verify.code.verifier.output_cap`)."""
    stderr_bytes: int = 64 << 10
    stack_bytes: int = 8 << 20
    unsafe_local: bool = False
    """No namespaces: a plain subprocess in the staged files' directory, with the resource
    limits, the cgroups where they can be made, and the wall clock, but NO isolation."""
    warm: bool = True
    """Reuse this process's warm sandboxes; False (or GRAFT_SANDBOX_COLD=1 in the environment,
    which reaches verifier workers too) starts one for this run alone: the cold path, one
    `unshare`, interpreter and root per program, kept for comparisons."""

    def cap(self, fd: int) -> int:
        return self.stderr_bytes if fd == 2 else self.stdout_bytes


DEFAULT_LIMITS = Limits()


@dataclass(frozen=True)
class Outcome:
    """How a run ended: `status` in STATUSES, the program's output (capped) and what it wrote on
    the result channel."""

    status: str
    stdout: bytes = b""
    stderr: bytes = b""
    channel: bytes = b""
    detail: str = ""
    exit_code: int | None = None
    seconds: float = 0.0
    usage: dict[str, float] = field(default_factory=dict)
    other: dict[int, bytes] = field(default_factory=dict)
    """What it wrote on its other result fds (4 and up)."""


class IsolationError(RuntimeError):
    """The machine cannot isolate untrusted programs (and `unsafe_local` was not chosen)."""


def _interpreter() -> tuple[str, str]:
    """(the base Python's real path, its installation prefix): what the sandbox can see."""
    exe = os.path.realpath(
        os.path.join(
            sys.base_prefix, "bin", f"python{sys.version_info.major}.{sys.version_info.minor}"
        )
    )
    if not os.path.exists(exe):
        exe = os.path.realpath(sys.executable)
    return exe, os.path.realpath(sys.base_prefix)


@cache
def placement() -> Placement:
    """This process's isolation tier and where it makes its groups (`cgroups.py`)."""
    return find_placement()


_PROBE = (
    "import ctypes, os, sys\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "if libc.unshare(int(sys.argv[1])) != 0:\n"
    "    sys.exit(os.strerror(ctypes.get_errno()))\n"
)
"""The isolation check's first step: can this process make the namespaces a sandbox uses?"""


def _namespaces_problem() -> str:
    """Empty when new user, mount, PID, network, IPC and UTS namespaces can be made here (and
    the programs' identity is valid), else one line saying what is missing and how to get it."""
    from graft.sandbox.identity import identity
    from graft.sandbox.inner import CLONE_NEWPID, PROGRAM_NAMESPACES
    from graft.sandbox.seccomp import syscall_numbers

    try:
        identity()
        syscall_numbers()
    except (ValueError, OSError) as err:
        return str(err)
    flags = str(PROGRAM_NAMESPACES | CLONE_NEWPID)
    exe, _ = _interpreter()
    probe = subprocess.run([exe, "-I", "-S", "-c", _PROBE, flags], capture_output=True, text=True)
    if probe.returncode != 0:
        return (
            "user, mount, PID, network, IPC and UTS namespaces are not available "
            f"({probe.stderr.strip()[:120]}): allow unprivileged user namespaces "
            "(sysctl kernel.unprivileged_userns_clone=1 and user.max_user_namespaces > 0) or run "
            "in a container that permits them (Docker: --security-opt seccomp=unconfined, or "
            "a profile allowing unshare and mount), or set the code task's sandbox to "
            "unsafe_local"
        )
    return ""


@cache
def _namespaces_problem_cached() -> str:
    return _namespaces_problem()
