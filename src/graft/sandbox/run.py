"""Run an untrusted program in a sandbox, and say why it ended (host side).

The program runs in the sandbox's user, mount, PID, network, IPC and UTS namespaces and in
user, mount, IPC, UTS and network namespaces of its own, under a host uid that is neither root
nor the sandbox's init's (`identity.py`), in a root file system of read-only system directories
with /proc read-only and fresh, size- and file-capped scratch directories, with a new session
keyring, no capabilities, a seccomp filter (`seccomp.py`), no network, no controlling terminal
and no view of any host process. It runs as a child of a warm sandbox (`zygote.py`, PID 1 of
the sandbox's namespaces, kept by this process between programs: `warm.py`), in its own session
and process group. Limits and who enforces them:
- wall clock: this process tells the zygote to kill the program, and kills the whole
  namespace if it does not answer (`timeout`); when the program ends, every process it left is
  killed, detached or not;
- CPU time: RLIMIT_CPU (`timeout`); memory of all its processes together and their number: a
  memory and a pids cgroup (v2 or v1), or where no cgroup can be made, the zygote's watch and
  RLIMIT_AS (`cgroups.py`: the tiers); a death by signal is named (`runtime_error`, "killed by
  SIGSEGV");
- open files: RLIMIT_NOFILE; file size: RLIMIT_FSIZE and the scratch tmpfs; captured output:
  counted here per stream, the run killed past a cap (`output_limit`): stdout and the other
  pipes out `stdout_bytes` each, stderr `stderr_bytes`.
The verdict never comes from the program's exit status or output markers: graft talks to it on
pipes (`calls.py`, `asserts.py`) and judges what comes back. A sandbox that cannot start is the
status `error`, with the reason, never an exception. `unsafe_local` runs the program as a plain
subprocess instead (no isolation).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import selectors
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from functools import cache
from pathlib import Path

from graft.procutil import die_with_parent
from graft.sandbox.cgroups import Group, tier_cap
from graft.sandbox.limits import (
    DEFAULT_LIMITS,
    IsolationError,
    Limits,
    Outcome,
    _interpreter,
    _namespaces_problem,
    _namespaces_problem_cached,
    placement,
)
from graft.sandbox.warm import ZYGOTES, StartError, Zygote

INNER = Path(__file__).with_name("inner.py")
READONLY = ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/etc/alternatives")
STATUSES = ("ok", "timeout", "memory", "output_limit", "runtime_error", "error")
PROBE = b"import os\nprint(6 * 7 if os.path.exists(os.__file__) else 0)\n"
"""The isolation check's program: it needs the interpreter's own files, as every program does."""
COLD_ENV = "GRAFT_SANDBOX_COLD"
PROGRAM_CPU_S = 0.0
"""CPU seconds of every program this process has run in a sandbox (all their processes)."""


@cache
def isolation_problem() -> str:
    """ "" when this machine can sandbox programs, else one line saying what is missing and how
    to get it. It runs one real program in the sandbox and compares what it prints."""
    try:
        tier_cap()
    except ValueError as err:
        return str(err)
    problem = _namespaces_problem()
    if problem:
        return problem
    probe = run_sandboxed({"probe.py": PROBE}, ["python", "probe.py"])
    if probe.status == "error":
        return f"a test program could not be run in the sandbox: {probe.detail}"
    if (probe.status, probe.stdout) != ("ok", b"42\n"):
        exe, prefix = _interpreter()
        said = " ".join(probe.stderr.decode("utf-8", "replace").split())[-160:]
        return (
            f"a test program did not run in the sandbox ({probe.status}: {probe.detail}; "
            f"{said or 'no output'}): the sandbox shows the Python at {exe} (prefix {prefix}) "
            f"and {', '.join(READONLY)} read-only, with private /tmp and /dev/shm, so a Python "
            "installed under /tmp or /dev/shm cannot run there: install it elsewhere"
        )
    return ""


def _new_zygote() -> Zygote:
    exe, prefix = _interpreter()
    return Zygote(placement(), exe, (*READONLY, prefix), DEFAULT_LIMITS.processes)


class _LocalGroup:
    """`unsafe_local`: the cgroups where they can be made, joined before exec."""

    def __init__(self) -> None:
        self.group = Group(placement()) if placement().parents else None

    def join(self) -> None:
        die_with_parent()
        if self.group is not None:
            for fd in self.group.procs_fds():
                os.write(fd, b"0")
                os.close(fd)


class Sandbox:
    """One started sandboxed program. Inside it, fd 0 is its stdin, fds 1 and 2 its output, and
    each of `inner_out` (e.g. 3) / `inner_in` (e.g. 4) a pipe to this process: `readers[fd]`
    reads what it writes there, `writers[fd]` writes what it reads there. A sandbox that could
    not start has no pipes and finishes with the status `error`."""

    def __init__(
        self,
        files: dict[str, bytes],
        argv: list[str],
        limits: Limits,
        *,
        inner_out: tuple[int, ...] = (3,),
        inner_in: tuple[int, ...] = (),
    ) -> None:
        problem = "" if limits.unsafe_local else _namespaces_problem_cached()
        if problem:
            raise IsolationError(problem)
        for name in files:
            if "/" in name or name.startswith("."):
                raise ValueError(f"sandbox file name {name!r}: a plain name is expected")
        self.limits, self.start = limits, time.monotonic()
        self.warm = limits.warm and os.environ.get(COLD_ENV) != "1"
        self.readers: dict[int, int] = {}
        self.writers: dict[int, int] = {}
        self.received: dict[int, bytearray] = {}
        self.outbox: dict[int, bytearray] = {}
        self.closing: set[int] = set()
        self.status, self.detail = "", ""
        self._feeder: threading.Thread | None = None
        self.zygote: Zygote | None = None
        self.proc: subprocess.Popen | None = None
        theirs: dict[int, int] = {}
        for fd in (1, 2, *inner_out):
            self.readers[fd], theirs[fd] = os.pipe()
        for fd in (0, *inner_in):
            theirs[fd], self.writers[fd] = os.pipe()
        self.received = {fd: bytearray() for fd in self.readers}
        try:
            if limits.unsafe_local:
                self._start_local(files, argv, theirs)
            else:
                self._start_warm(files, argv, theirs)
        except (OSError, StartError, ValueError) as exc:
            self.status, self.detail = "error", f"the sandbox did not start: {exc}"
            for fds in (self.readers, self.writers):
                for fd in fds.values():
                    os.close(fd)
                fds.clear()
        finally:
            for fd in theirs.values():
                os.close(fd)

    def _start_warm(self, files: dict[str, bytes], argv: list[str], fds: dict[int, int]) -> None:
        take = ZYGOTES.take if self.warm else (lambda make: make())
        for attempt in range(2):  # a kept zygote may have died since: a fresh one, once
            self.zygote = take(_new_zygote)
            limits = self.limits
            if self.zygote.group is not None:
                self.zygote.group.set_limits(limits.memory_bytes, limits.processes)
                self.zygote.group.reset_peak()
                self.oom_before = self.zygote.group.out_of_memory_count()
            request = {
                k: getattr(limits, k)
                for k in ("cpu_s", "open_files", "file_bytes", "stack_bytes", "memory_bytes",
                          "processes", "scratch_bytes", "scratch_files")
            }  # fmt: skip
            try:
                self.zygote.run(files, argv, fds, request)
                self.start = time.monotonic()
                return
            except OSError:
                self.zygote.destroy()
                self.zygote.close()
                self.zygote = None
                if attempt:
                    raise

    def _start_local(self, files: dict[str, bytes], argv: list[str], fds: dict[int, int]) -> None:
        exe, _ = _interpreter()
        self._stage = tempfile.TemporaryDirectory(prefix="graft-local-")
        stage = Path(self._stage.name)
        (stage / "files").mkdir()
        for name, data in files.items():
            (stage / "files" / name).write_bytes(data)
        cfg = {
            "files": str(stage / "files"),
            "argv": argv,
            "fds": {str(inner): host for inner, host in fds.items() if inner > 2},
            "unsafe_local": True,
            **{k: getattr(self.limits, k) for k in ("cpu_s", "open_files", "file_bytes",
                                                     "stack_bytes")},
        }  # fmt: skip
        (stage / "config.json").write_text(json.dumps(cfg))
        self.local = _LocalGroup()
        self.proc = subprocess.Popen(
            [exe, "-I", "-S", "-B", str(INNER), str(stage / "config.json")],
            stdin=fds[0],
            stdout=fds[1],
            stderr=fds[2],
            pass_fds=tuple(v for k, v in fds.items() if k > 2),
            start_new_session=True,  # no controlling terminal, its own process group
            preexec_fn=self.local.join,
        )

    def write(self, fd: int, data: bytes) -> None:
        """Queue `data` for the program's fd and send what the pipe takes now, never blocking
        this process; `supervise` sends the rest as the program reads (at most `stdout_bytes`
        can be queued, as no reader takes more)."""
        if fd in self.writers:
            self.outbox.setdefault(fd, bytearray()).extend(data)
            self.send(fd)

    def send(self, fd: int) -> None:
        """Write what the pipe takes of `fd`'s queue; close it once drained if asked."""
        queue = self.outbox.get(fd)
        try:
            if queue and fd in self.writers:
                os.set_blocking(self.writers[fd], False)
                del queue[: os.write(self.writers[fd], queue)]
        except BlockingIOError:
            pass
        except OSError:  # the program closed its end: nothing more reaches it
            queue.clear()  # type: ignore[union-attr]
        if not queue and fd in self.closing:
            self.close_input(fd)

    def feed(self, data: bytes) -> None:
        """Its whole stdin, from a thread (a program may read it slowly while it writes), then
        closed; a program that never reads it blocks only the thread, until the run ends."""
        if 0 not in self.writers:
            return
        fd = self.writers[0]
        if len(data) <= select.PIPE_BUF:  # fits in the empty pipe at once: no thread needed
            with contextlib.suppress(OSError):
                os.write(fd, data)
            self.close_input(0)
            return

        def pour() -> None:
            with contextlib.suppress(OSError):
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
            self.close_input(0)

        self._feeder = threading.Thread(target=pour, name="graft-sandbox-stdin", daemon=True)
        self._feeder.start()

    def close_input(self, fd: int, *, drained: bool = False) -> None:
        """Close the program's input `fd` (`drained`: once what is queued for it is sent)."""
        if drained and self.outbox.get(fd):
            self.closing.add(fd)
            return
        self.outbox.pop(fd, None)
        host = self.writers.pop(fd, None)
        if host is not None:
            with contextlib.suppress(OSError):
                os.close(host)

    def stop(self, status: str, detail: str) -> None:
        """End it now (and everything it started), recording why."""
        if self.status:
            return  # stopped already
        self.status, self.detail = status, detail
        if self.zygote is not None:
            self.zygote.kill()
        elif self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)

    def _wait(self) -> dict:
        """How the program ended, as the zygote reports it ({} when it could not say)."""
        if self.proc is not None:
            try:
                code = self.proc.wait(timeout=2.0)
            except subprocess.TimeoutExpired:
                self.stop("timeout", "the program did not exit")
                code = self.proc.wait()
            if code < 0:
                return {"signal": signal.Signals(-code).name}
            return {"exit": code}
        if self.zygote is None:
            return {}
        ended = self.zygote.reply(2.0)
        if ended is None and self.zygote.alive():
            self.stop("timeout", "the program did not exit")
            ended = self.zygote.reply(2.0)
        if ended is None:  # the zygote itself is stuck or gone: its whole namespace goes
            self.zygote.destroy()
            if not self.status:
                self.status, self.detail = "error", "the sandbox died"
            return {}
        return ended

    def finish(self) -> Outcome:
        """Wait for it (it was stopped, or its outputs closed), then clean up."""
        ended = self._wait()
        if self._feeder is not None:  # the program is gone: its stdin pipe is broken
            self._feeder.join(timeout=5.0)
        for fd in list(self.writers):
            self.close_input(fd)
        for fd in self.readers.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        seconds = time.monotonic() - self.start
        group = self.zygote.group if self.zygote is not None else getattr(self, "local", None)
        group = getattr(group, "group", group)
        status, detail = (self.status, self.detail) if self.status else self._ended(ended, group)
        usage = {"seconds": seconds, "cpu_s": float(ended.get("cpu_s", 0.0))}
        usage["peak_memory_bytes"] = group.peak_memory() if group else ended.get("max_rss", 0.0)
        usage["leftover_processes"] = float(group.kill_all() if group else 0)
        global PROGRAM_CPU_S
        PROGRAM_CPU_S += usage["cpu_s"]
        self._release(group, ended.get("retire", ""))
        got = {fd: bytes(v[: self.limits.cap(fd)]) for fd, v in self.received.items()}
        code = ended.get("exit")
        return Outcome(
            status, got.get(1, b""), got.get(2, b""), got.get(3, b""), detail, code, seconds,
            usage, {fd: v for fd, v in got.items() if fd > 3},
        )  # fmt: skip

    def _release(self, group: Group | None, changed: str) -> None:
        if self.zygote is not None:
            if self.warm:
                ZYGOTES.give_back(self.zygote, changed)
            else:
                self.zygote.close()
        elif self.proc is not None:
            if group is not None:
                group.remove()
            self._stage.cleanup()

    def _ended(self, ended: dict, group: Group | None) -> tuple[str, str]:
        oom = self.zygote is not None and group is not None
        if oom and group.out_of_memory_count() > self.oom_before:  # type: ignore[union-attr]
            return "memory", "its processes together went over the memory limit"
        if ended.get("over") == "memory":
            return "memory", "its processes together went over the memory limit (watched)"
        if ended.get("over") == "processes":
            return "runtime_error", f"more than {self.limits.processes} processes (watched)"
        if "failed" in ended:
            return "error", f"the sandbox could not start the program: {ended['failed']}"
        sig = ended.get("signal")
        cpu_out = float(ended.get("cpu_s", 0.0)) >= self.limits.cpu_s - 0.05
        if sig == "SIGXCPU" or (sig == "SIGKILL" and cpu_out):
            return "timeout", "over the CPU-time limit"
        if sig == "SIGXFSZ":
            return "output_limit", "a file over the size limit"
        if sig:
            return "runtime_error", f"killed by {sig}"
        if ended.get("exit", 0) != 0:
            return "runtime_error", f"exit status {ended['exit']}"
        return "ok", ""


Relay = tuple[int, int] | Callable[[bytes], None]


def supervise(
    sandboxes: list[Sandbox],
    relays: dict[tuple[int, int], Relay] | None = None,
    *,
    wall_s: float,
) -> None:
    """Read every sandbox's outputs until all close, passing on whole lines of `relays`
    ((sandbox index, its out fd) -> (sandbox index, its in fd), or a function graft answers
    them with); past `wall_s`, or past a sandbox's output limit, stop them all."""
    relays = relays or {}
    sel = selectors.DefaultSelector()
    for k, box in enumerate(sandboxes):
        for fd, host in box.readers.items():
            sel.register(host, selectors.EVENT_READ, (k, fd))
    pending: dict[tuple[int, int], bytearray] = {key: bytearray() for key in relays}
    deadline = time.monotonic() + wall_s
    waiting: set[int] = set()  # input fds registered until their queue is sent
    while any(key.data[0] != "send" for key in sel.get_map().values()):
        for k, box in enumerate(sandboxes):
            for fd, queue in box.outbox.items():
                host = box.writers.get(fd)
                if queue and host is not None and host not in waiting:
                    sel.register(host, selectors.EVENT_WRITE, ("send", k, fd))
                    waiting.add(host)
        left = deadline - time.monotonic()
        if left <= 0:
            for box in sandboxes:
                box.stop("timeout", f"still running after {wall_s:g} s wall clock")
            return
        for key, _ in sel.select(timeout=left):
            if key.data[0] == "send":
                _, k, fd = key.data
                sel.unregister(key.fd)
                waiting.discard(key.fd)
                sandboxes[k].send(fd)
                continue
            k, fd = key.data
            chunk = os.read(key.fd, 65536)
            target = relays.get((k, fd))
            if not chunk:
                sel.unregister(key.fd)
                if isinstance(target, tuple):  # the writer is gone: its reader sees the end too
                    sandboxes[target[0]].close_input(target[1], drained=True)
                continue
            box = sandboxes[k]
            box.received[fd] += chunk
            if target is not None:
                buf = pending[k, fd]
                buf += chunk
                *lines, rest = bytes(buf).split(b"\n")
                pending[k, fd] = bytearray(rest)
                for line in lines:
                    if callable(target):
                        target(line)
                    else:
                        sandboxes[target[0]].write(target[1], line + b"\n")
            if len(box.received[fd]) > box.limits.cap(fd):
                what = {1: "standard output", 2: "standard error"}.get(fd, f"fd {fd}")
                box.stop("output_limit", f"more than {box.limits.cap(fd)} bytes on {what}")
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


__all__ = ["DEFAULT_LIMITS", "STATUSES", "IsolationError", "Limits", "Outcome", "Sandbox",
           "isolation_problem", "placement", "run_sandboxed", "supervise"]  # fmt: skip
