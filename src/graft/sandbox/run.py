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

import contextlib
import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
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
    unsafe_local: bool = False
    """No namespaces: a plain subprocess in the staged files' directory, with the resource
    limits, the cgroups where they can be made, and the wall clock, but NO isolation."""


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


def _cgroups_usable() -> bool:
    return all(_cgroup_dir(c) is not None for c in ("memory", "pids"))


class _NoCgroups:
    """Where no cgroup can be made (only with `unsafe_local`): no memory or process bound
    across processes."""

    leftover = 0

    def join(self) -> None:
        die_with_parent()

    def ran_out_of_memory(self) -> bool:
        return False

    def peak_memory(self) -> float:
        return float("nan")

    def remove(self) -> None:
        pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def remove_stale_cgroups(parent: Path) -> int:
    """Remove the empty sandbox groups under `parent` whose creator is dead (a verifier worker
    killed between making a group and removing it); returns how many."""
    removed = 0
    for d in parent.glob(f"{CGROUP_PREFIX}*-*"):
        creator = d.name.removeprefix(CGROUP_PREFIX).split("-", 1)[0]
        if creator.isdigit() and not _alive(int(creator)):
            with contextlib.suppress(OSError):  # not empty, or gone already
                d.rmdir()
                removed += 1
    return removed


CGROUP_PREFIX = "graft-sandbox-"


class _Cgroups:
    """A memory and a pids cgroup for one run, named after this process; removed afterwards,
    and by the next run when this process dies first (`remove_stale_cgroups`)."""

    def __init__(self, limits: Limits) -> None:
        name = f"{CGROUP_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:12]}"
        parents = (_cgroup_dir("memory"), _cgroup_dir("pids"))
        for parent in parents:
            remove_stale_cgroups(parent)  # type: ignore[arg-type]
        self.memory = parents[0] / name  # type: ignore[operator]
        self.pids = parents[1] / name  # type: ignore[operator]
        self.memory.mkdir()
        self.pids.mkdir()
        (self.memory / "memory.limit_in_bytes").write_text(str(limits.memory_bytes))
        swap = self.memory / "memory.memsw.limit_in_bytes"
        if swap.exists():
            swap.write_text(str(limits.memory_bytes))
        (self.pids / "pids.max").write_text(str(limits.processes))
        self.leftover = 0
        """Processes still in a group after the run, killed by `remove` (should stay 0)."""

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
        """Delete both groups; any process still in one (none should be: the namespace died
        with its PID 1) is killed first."""
        for d in (self.memory, self.pids):
            for attempt in range(100):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if attempt == 50:
                        for pid in (d / "cgroup.procs").read_text().split():
                            self.leftover += 1
                            with contextlib.suppress(ProcessLookupError):
                                os.kill(int(pid), signal.SIGKILL)
                    time.sleep(0.02)  # its last processes are still being reaped


class Sandbox:
    """One started sandboxed program. Inside it, fd 0 is its stdin, fds 1 and 2 its output, and
    each of `inner_out` (e.g. 3) / `inner_in` (e.g. 4) a pipe to this process: `readers[fd]`
    reads what it writes there, `writers[fd]` writes what it reads there."""

    def __init__(
        self,
        files: dict[str, bytes],
        argv: list[str],
        limits: Limits,
        *,
        inner_out: tuple[int, ...] = (3,),
        inner_in: tuple[int, ...] = (),
    ) -> None:
        problem = "" if limits.unsafe_local else isolation_problem()
        if problem:
            raise IsolationError(problem)
        self.limits = limits
        exe, prefix = _interpreter()
        argv = [exe, "-I", "-S", "-B", *argv[1:]] if argv and argv[0] == "python" else argv
        self._stage = tempfile.TemporaryDirectory(prefix="graft-sandbox-")
        stage = Path(self._stage.name)
        (stage / "files").mkdir()
        for name, data in files.items():
            if "/" in name or name.startswith("."):
                raise ValueError(f"sandbox file name {name!r}: a plain name is expected")
            (stage / "files" / name).write_bytes(data)
        (stage / "root").mkdir()
        self.readers: dict[int, int] = {}
        self.writers: dict[int, int] = {}
        child_fds: dict[int, int] = {}
        for fd in inner_out:
            self.readers[fd], child_fds[fd] = os.pipe()
        for fd in inner_in:
            child_fds[fd], self.writers[fd] = os.pipe()
        cfg = {
            "root": str(stage / "root"),
            "files": str(stage / "files"),
            "readonly": [*READONLY, prefix],
            "argv": argv,
            "fds": {str(inner): host for inner, host in child_fds.items()},
            "cpu_s": limits.cpu_s,
            "open_files": limits.open_files,
            "file_bytes": limits.file_bytes,
            "stack_bytes": limits.stack_bytes,
            "scratch_bytes": limits.scratch_bytes,
            "scratch_files": limits.scratch_files,
            "unsafe_local": limits.unsafe_local,
        }
        (stage / "config.json").write_text(json.dumps(cfg))
        self.groups = _Cgroups(limits) if _cgroups_usable() else _NoCgroups()
        launch = [argv[0], "-I", "-S", "-B", str(INNER), str(stage / "config.json")]
        isolate = [
            "unshare", "--user", "--map-root-user", "--mount", "--pid", "--net", "--ipc", "--uts",
            "--fork", "--kill-child=SIGKILL",
        ]  # fmt: skip
        self._popen(launch if limits.unsafe_local else isolate + launch, fds=child_fds)

    def _popen(self, command: list[str], *, fds: dict[int, int]) -> None:
        self.start = time.monotonic()
        try:
            self.proc = subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                pass_fds=tuple(fds.values()),
                start_new_session=True,  # no controlling terminal, its own process group
                preexec_fn=self.groups.join,
            )
        except BaseException:
            self.groups.remove()
            self._stage.cleanup()
            raise
        finally:
            for fd in fds.values():
                os.close(fd)
        self.readers[1] = self.proc.stdout.fileno()  # type: ignore[union-attr]
        self.readers[2] = self.proc.stderr.fileno()  # type: ignore[union-attr]
        self.writers[0] = self.proc.stdin.fileno()  # type: ignore[union-attr]
        self.received: dict[int, bytearray] = {fd: bytearray() for fd in self.readers}
        self.status, self.detail = "", ""
        self._feeder: threading.Thread | None = None

    def write(self, fd: int, data: bytes) -> None:
        """Send `data` to the program's fd without ever blocking this process: a program that
        stopped reading gets no more (what does not fit in the pipe is dropped)."""
        if fd in self.writers:
            with contextlib.suppress(OSError):  # BlockingIOError and BrokenPipeError included
                os.set_blocking(self.writers[fd], False)
                os.write(self.writers[fd], data)

    def feed(self, data: bytes) -> None:
        """Its whole stdin, from a thread (a program may read it slowly while it writes), then
        closed; a program that never reads it blocks only the thread, until the run ends."""

        def pour() -> None:
            with contextlib.suppress(OSError):
                fd = self.writers[0]
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
            self.close_input(0)

        self._feeder = threading.Thread(target=pour, name="graft-sandbox-stdin", daemon=True)
        self._feeder.start()

    def close_input(self, fd: int) -> None:
        host = self.writers.pop(fd, None)
        if host is not None:
            with contextlib.suppress(OSError):
                os.close(host)

    def stop(self, status: str, detail: str) -> None:
        """End it now (the whole namespace), recording why."""
        if not self.status:
            self.status, self.detail = status, detail
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)

    def finish(self) -> Outcome:
        """Wait for it (it was stopped, or its outputs closed), then clean up."""
        try:
            code = self.proc.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            self.stop("timeout", "the program did not exit")
            code = self.proc.wait()
        if self._feeder is not None:  # the program is gone: its stdin pipe is broken
            self._feeder.join(timeout=5.0)
        for fd in list(self.writers):
            self.close_input(fd)
        for f in (self.proc.stdout, self.proc.stderr, self.proc.stdin):
            with contextlib.suppress(OSError):
                f.close()  # type: ignore[union-attr]
        for fd in self.readers:
            if fd > 2:
                with contextlib.suppress(OSError):
                    os.close(self.readers[fd])
        seconds = time.monotonic() - self.start
        status, detail = (self.status, self.detail) if self.status else _ended(code, self.groups)
        usage = {"peak_memory_bytes": self.groups.peak_memory(), "seconds": seconds}
        self.groups.remove()
        usage["leftover_processes"] = float(self.groups.leftover)
        self._stage.cleanup()
        cap = self.limits.output_bytes
        got = {fd: bytes(v[:cap]) for fd, v in self.received.items()}
        return Outcome(
            status, got[1], got[2], got.get(3, b""), detail, code, seconds, usage,
            {fd: v for fd, v in got.items() if fd > 3},
        )  # fmt: skip


def supervise(
    sandboxes: list[Sandbox],
    relays: dict[tuple[int, int], tuple[int, int]] | None = None,
    *,
    wall_s: float,
) -> None:
    """Read every sandbox's outputs until all close, forwarding whole lines of `relays`
    ((sandbox index, its out fd) -> (sandbox index, its in fd)); past `wall_s`, or past a
    sandbox's output limit, stop them all."""
    relays = relays or {}
    sel = selectors.DefaultSelector()
    for k, box in enumerate(sandboxes):
        for fd, host in box.readers.items():
            sel.register(host, selectors.EVENT_READ, (k, fd))
    pending: dict[tuple[int, int], bytearray] = {key: bytearray() for key in relays}
    deadline = time.monotonic() + wall_s
    while sel.get_map():
        left = deadline - time.monotonic()
        if left <= 0:
            for box in sandboxes:
                box.stop("timeout", f"still running after {wall_s:g} s wall clock")
            return
        for key, _ in sel.select(timeout=left):
            k, fd = key.data
            chunk = os.read(key.fd, 65536)
            if not chunk:
                sel.unregister(key.fd)
                if (k, fd) in relays:  # the writer is gone: its reader sees the end too
                    sandboxes[relays[k, fd][0]].close_input(relays[k, fd][1])
                continue
            box = sandboxes[k]
            box.received[fd] += chunk
            if (k, fd) in relays:
                buf = pending[k, fd]
                buf += chunk
                *lines, rest = bytes(buf).split(b"\n")
                pending[k, fd] = bytearray(rest)
                to, to_fd = relays[k, fd]
                for line in lines:
                    sandboxes[to].write(to_fd, line + b"\n")
            if sum(len(v) for v in box.received.values()) > box.limits.output_bytes:
                box.stop("output_limit", f"more than {box.limits.output_bytes} bytes of output")
                for other in sandboxes:
                    other.stop("output_limit", "its partner went over the output limit")
                return


def run_sandboxed(
    files: dict[str, bytes],
    argv: list[str],
    *,
    stdin: bytes = b"",
    limits: Limits | None = None,
) -> Outcome:
    """Run `argv` (its first word `python` means the sandbox's Python) in /work holding `files`,
    with `stdin`; its results on fd 3. Raises IsolationError when the machine cannot isolate it."""
    limits = limits or DEFAULT_LIMITS
    box = Sandbox(files, argv, limits)
    try:
        box.feed(stdin)
        supervise([box], wall_s=limits.wall_s)
    except BaseException:
        box.stop("runtime_error", "interrupted")
        box.finish()
        raise
    return box.finish()


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
