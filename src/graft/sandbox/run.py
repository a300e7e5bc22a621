"""Run an untrusted program in a sandbox, and say why it ended (host side).

The program runs in new user, mount, PID, network, IPC and UTS namespaces (`unshare`), in a
root file system of read-only system directories and a scratch directory capped in size and
files (`inner.py`), with no capabilities, no network, no controlling terminal and no view of any
host process. Limits and who enforces them:
- wall clock: this process SIGKILLs `unshare`, whose PID-1 child dies with it, and the kernel
  kills everything else in the namespace (daemonized or `setsid` children included): `timeout`;
- CPU time: RLIMIT_CPU (`timeout`); memory of all its processes together: a memory cgroup
  (`memory`, read from the cgroup's own OOM counter); processes: a pids cgroup (fork fails);
- open files: RLIMIT_NOFILE; file size: RLIMIT_FSIZE and the scratch tmpfs; captured output:
  counted here, the run killed past it (`output_limit`).
The verdict never comes from the program's exit status or output markers: results travel on a
pipe (fd 3 inside) as JSON and are judged by the caller.
"""

from __future__ import annotations

import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from graft.procutil import die_with_parent

INNER = Path(__file__).with_name("inner.py")
READONLY = ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/etc/alternatives")
STATUSES = ("ok", "timeout", "memory", "output_limit", "runtime_error")
_CGROUP_ROOT = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class Limits:
    """What one run may use."""

    wall_s: float = 5.0
    cpu_s: int = 5
    memory_bytes: int = 256 << 20
    processes: int = 32
    open_files: int = 64
    file_bytes: int = 8 << 20
    scratch_bytes: int = 16 << 20
    scratch_files: int = 256
    output_bytes: int = 64 << 10
    stack_bytes: int = 8 << 20


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


def _cgroup_dir(controller: str) -> Path | None:
    """This process's cgroup (v1) for `controller`, when it can hold child groups."""
    base = _CGROUP_ROOT / controller
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, names, path = line.split(":", 2)
        if controller in names.split(","):
            d = base / path.lstrip("/")
            return d if os.access(d, os.W_OK) else None
    return None


@cache
def isolation_problem() -> str:
    """ "" when this machine can sandbox programs, else one line saying what is missing and how
    to get it."""
    if shutil.which("unshare") is None:
        return "the unshare command (util-linux) is missing: install util-linux"
    for controller in ("memory", "pids"):
        if _cgroup_dir(controller) is None:
            return (
                f"no writable {controller} cgroup (v1 at /sys/fs/cgroup/{controller}): run where "
                "cgroups can be created, or set the code task's sandbox to unsafe_local"
            )
    probe = subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", "--pid", "--net", "--fork", "true"],
        capture_output=True,
        text=True,
    )
    if probe.returncode != 0:
        return (
            "user, mount, PID and network namespaces are not available "
            f"({probe.stderr.strip()[:120]}): allow unprivileged user namespaces "
            "(sysctl kernel.unprivileged_userns_clone=1) or run in a container that permits them"
        )
    return ""


class _Cgroups:
    """A memory and a pids cgroup for one run; removed afterwards."""

    def __init__(self, limits: Limits) -> None:
        name = f"graft-sandbox-{uuid.uuid4().hex[:12]}"
        self.memory = _cgroup_dir("memory") / name  # type: ignore[operator]
        self.pids = _cgroup_dir("pids") / name  # type: ignore[operator]
        self.memory.mkdir()
        self.pids.mkdir()
        (self.memory / "memory.limit_in_bytes").write_text(str(limits.memory_bytes))
        swap = self.memory / "memory.memsw.limit_in_bytes"
        if swap.exists():
            swap.write_text(str(limits.memory_bytes))
        (self.pids / "pids.max").write_text(str(limits.processes))

    def join(self) -> None:
        """In the child, before exec: move it into both groups, and have it killed (with the
        whole namespace) when the process that started it dies (a verifier worker killed for
        its time limit)."""
        die_with_parent()
        pid = str(os.getpid())
        (self.memory / "cgroup.procs").write_text(pid)
        (self.pids / "cgroup.procs").write_text(pid)

    def ran_out_of_memory(self) -> bool:
        control = (self.memory / "memory.oom_control").read_text()
        killed = [
            int(line.split()[1]) for line in control.splitlines() if line.startswith("oom_kill ")
        ]
        return (
            bool(killed and killed[0] > 0) or int((self.memory / "memory.failcnt").read_text()) > 0
        )

    def peak_memory(self) -> float:
        return float((self.memory / "memory.max_usage_in_bytes").read_text())

    def remove(self) -> None:
        for d in (self.memory, self.pids):
            for _ in range(50):
                try:
                    d.rmdir()
                    break
                except OSError:
                    time.sleep(0.02)  # its last processes are still being reaped


def run_sandboxed(
    files: dict[str, bytes],
    argv: list[str],
    *,
    stdin: bytes = b"",
    limits: Limits | None = None,
) -> Outcome:
    """Run `argv` (its first word `python` means the sandbox's Python) in /work holding `files`.
    Raises IsolationError when the machine cannot isolate it."""
    limits = limits or DEFAULT_LIMITS
    problem = isolation_problem()
    if problem:
        raise IsolationError(problem)
    exe, prefix = _interpreter()
    argv = [exe, "-I", "-S", "-B", *argv[1:]] if argv and argv[0] == "python" else argv
    with tempfile.TemporaryDirectory(prefix="graft-sandbox-") as stage:
        staged = Path(stage) / "files"
        staged.mkdir()
        for name, data in files.items():
            if "/" in name or name.startswith("."):
                raise ValueError(f"sandbox file name {name!r}: a plain name is expected")
            (staged / name).write_bytes(data)
        (Path(stage) / "root").mkdir()
        read_fd, write_fd = os.pipe()
        cfg = {
            "root": str(Path(stage) / "root"),
            "files": str(staged),
            "readonly": [*READONLY, prefix],
            "argv": argv,
            "channel_fd": write_fd,
            "cpu_s": limits.cpu_s,
            "open_files": limits.open_files,
            "file_bytes": limits.file_bytes,
            "stack_bytes": limits.stack_bytes,
            "scratch_bytes": limits.scratch_bytes,
            "scratch_files": limits.scratch_files,
        }
        (Path(stage) / "config.json").write_text(json.dumps(cfg))
        groups = _Cgroups(limits)
        try:
            return _supervise(cfg, Path(stage), stdin, limits, groups, read_fd, write_fd)
        finally:
            groups.remove()


def _supervise(cfg, stage, stdin, limits, groups, read_fd, write_fd) -> Outcome:
    command = [
        "unshare", "--user", "--map-root-user", "--mount", "--pid", "--net", "--ipc", "--uts",
        "--fork", "--kill-child=SIGKILL",
        cfg["argv"][0], "-I", "-S", "-B", str(INNER), str(stage / "config.json"),
    ]  # fmt: skip
    start = time.monotonic()
    proc = subprocess.Popen(
        command,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        pass_fds=(write_fd,),
        start_new_session=True,  # no controlling terminal, its own process group
        preexec_fn=groups.join,
    )
    os.close(write_fd)
    try:
        proc.stdin.write(stdin)  # type: ignore[union-attr]
        proc.stdin.close()  # type: ignore[union-attr]
    except BrokenPipeError:
        pass
    out = {"stdout": bytearray(), "stderr": bytearray(), "channel": bytearray()}
    status, detail = "", ""
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ, "stdout")  # type: ignore[arg-type]
    sel.register(proc.stderr, selectors.EVENT_READ, "stderr")  # type: ignore[arg-type]
    channel = os.fdopen(read_fd, "rb", buffering=0)
    sel.register(channel, selectors.EVENT_READ, "channel")
    deadline = start + limits.wall_s
    while sel.get_map():
        left = deadline - time.monotonic()
        if left <= 0:
            status, detail = "timeout", f"still running after {limits.wall_s:g} s wall clock"
            break
        for key, _ in sel.select(timeout=left):
            chunk = os.read(key.fileobj.fileno(), 65536)  # type: ignore[union-attr]
            if not chunk:
                sel.unregister(key.fileobj)
                continue
            out[key.data] += chunk
        if sum(len(v) for v in out.values()) > limits.output_bytes:
            status, detail = "output_limit", f"more than {limits.output_bytes} bytes of output"
            break
    if status:
        os.killpg(proc.pid, signal.SIGKILL)
    try:
        code = proc.wait(timeout=max(0.1, deadline - time.monotonic()) + 1.0)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        code = proc.wait()
        status, detail = status or "timeout", detail or "the program did not exit"
    for f in (proc.stdout, proc.stderr, channel):
        f.close()  # type: ignore[union-attr]
    seconds = time.monotonic() - start
    if not status:
        status, detail = _ended(code, groups)
    usage = {"peak_memory_bytes": groups.peak_memory(), "seconds": seconds}
    cap = limits.output_bytes
    return Outcome(
        status, bytes(out["stdout"][:cap]), bytes(out["stderr"][:cap]), bytes(out["channel"][:cap]),
        detail, code, seconds, usage,
    )  # fmt: skip


def _ended(code: int, groups: _Cgroups) -> tuple[str, str]:
    if groups.ran_out_of_memory():
        return "memory", "its processes together went over the memory limit"
    if code in (-signal.SIGXCPU, 128 + signal.SIGXCPU) or code in (-signal.SIGKILL, 137):
        return "timeout", "over the CPU-time limit" if abs(code) != 9 and code != 137 else "killed"
    if code in (-signal.SIGXFSZ, 128 + signal.SIGXFSZ):
        return "output_limit", "a file over the size limit"
    if code != 0:
        return "runtime_error", f"exit status {code}"
    return "ok", ""
