"""The warm sandbox (standard library only; started by `warm.py` as `python -I -S -B zygote.py
CONFIG`, with nothing of the trainer's environment).

It first leaves everything the trainer holds: a new, empty session keyring, then new user,
mount, PID, network, IPC and UTS namespaces, whose user ids graft writes from outside
(`identity.py`: 0 for this init, and an unprivileged host uid for the programs where graft runs
as root). Its child becomes PID 1 of the new PID namespace: the minimal init. The init builds
the read-only root (`inner.build_root`, entered with pivot_root), imports the modules programs
use most, compiles graft's own sandbox scripts once, and then serves one program at a time on
its socket. For each, a forked child that
- starts its own session and process group (no host-side process shares either);
- joins the sandbox's memory and pids groups (or, with no cgroup, is watched from here);
- takes its stdin, stdout, stderr and pipes (sent by the host over the socket);
- becomes the programs' id, then root of a user namespace of its own with new mount, IPC, UTS
  and network namespaces (`inner.enter_own_namespaces`): nothing a program leaves in System V
  IPC, message queues, keyrings, its host name, sysctls or abstract sockets reaches the next;
- mounts fresh, size- and file-capped /work (the program's files), /tmp and /dev/shm, makes
  /proc read-only, and joins a new session keyring;
- sets its resource limits from graft's request, drops every capability, sets no_new_privs and
  installs the seccomp filter (`seccomp.py`), and runs the program: a Python script in this
  already warm interpreter, as the standard interpreter would run it (`program.py`: its own
  future flags, a fresh `__main__`, site's names, CPython's signal dispositions, fresh standard
  streams and random seed), anything else through exec.
A setup step that fails is reported as the sandbox's failure, never as the program's. When the
child ends (or the host says `kill`), every other process of the namespace is killed (`kill(-1)`
from init reaches them all, daemonized or not), all are reaped, and the host is told how the
child ended: its exit status or the name of the signal that killed it, and the CPU seconds of
everything the program ran. This process is not dumpable, no program shares its uid where graft
runs as root, and none can see its limits change: it checks its own limits, priority, CPU
affinity and scheduling policy after every program, and asks to be retired if any moved.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import gc
import json
import os
import resource
import select
import signal
import socket
import stat
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import inner  # beside this file; -I keeps it off sys.path
import program

sys.path.pop(0)

HERE = os.path.dirname(os.path.abspath(__file__))

WARM = (
    "json", "math", "re", "collections", "itertools", "functools", "heapq", "bisect", "string",
    "typing", "fractions", "decimal", "random", "statistics", "operator", "copy", "datetime",
    "hashlib", "io", "traceback", "dataclasses", "enum", "array", "cmath", "textwrap",
    "unicodedata", "threading", "atexit", "types", "site",
)  # fmt: skip
SCRIPTS = ("server.py", "checker.py", "values.py")
"""graft's own scripts, which the programs it runs start with: compiled once, here."""
HEADER = struct.Struct("!Q")
COMPILED: dict[tuple[str, bytes], object] = {}


def _exactly(sock: socket.socket, data: bytes, size: int) -> bytes | None:
    while len(data) < size:
        more = sock.recv(min(1 << 20, size - len(data)))
        if not more:
            return None
        data += more
    return data


def receive(sock: socket.socket) -> tuple[dict | None, list[int]]:
    """One framed message (8-byte length, JSON) and the fds sent with it; None at the end. It
    reads exactly one frame: a next one stays in the socket."""
    data, fds, _, _ = socket.recv_fds(sock, HEADER.size, 16)
    header = _exactly(sock, data, HEADER.size) if data else None
    if header is None:
        return None, fds
    body = _exactly(sock, b"", HEADER.unpack(header)[0])
    return (None if body is None else json.loads(body)), fds


def send(sock: socket.socket, message: dict) -> None:
    body = json.dumps(message).encode()
    sock.sendall(HEADER.pack(len(body)) + body)


def _place_fds(request: dict, fds: list[int]) -> None:
    """The received pipes at the fd numbers the program expects (through copies above every
    target, so that no dup2 overwrites a pipe not yet placed)."""
    targets = request["fds"]
    copies = [fcntl.fcntl(fd, fcntl.F_DUPFD, 100) for fd in fds]
    for inner_fd, copy in zip(targets, copies, strict=True):
        os.dup2(copy, inner_fd)
    for fd in range(3):
        if fd not in targets:
            os.close(fd)


def _setup(request: dict, fds: list[int], cfg: dict, failed: int) -> None:
    """In the forked child, before any of the program's code: everything that makes it a
    program of its own (module docstring). Of this init's fds, only `failed` stays open."""
    os.setsid()
    _place_fds(request, fds)
    for fd in (0, 1, 2):  # its standard streams, reopened by path (/dev/stdin) as its own:
        with contextlib.suppress(OSError):  # pipes, reachable through this program's fds only
            if stat.S_ISFIFO(os.fstat(fd).st_mode):
                os.fchmod(fd, 0o666)
    for group_fd in cfg["group_fds"]:
        os.write(group_fd, b"0")
    top = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    os.closerange(max(request["fds"]) + 1, failed)
    os.closerange(failed + 1, top)
    inner.libc.prctl(inner.PR_SET_DUMPABLE, 1, 0, 0, 0)  # its /proc/self files are its own
    with open("/proc/self/oom_score_adj", "w") as f:
        f.write("1000")  # the program, never this init, is what an OOM kill takes
    inner.enter_own_namespaces(cfg["program_id"])
    inner.scratch_dirs(request["scratch_bytes"], request["scratch_files"])
    for name, data in request["files"].items():
        with open(os.path.join("/work", name), "wb") as f:
            f.write(base64.b64decode(data))
    inner.proc_read_only()
    inner.new_session_keyring(cfg["keyctl_nr"])
    os.chdir("/work")
    inner.limit(request)
    if cfg["watch"]:  # no memory group: a per-process bound too
        memory = request["memory_bytes"]
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    inner.drop_capabilities()
    inner.install_seccomp(cfg["seccomp"])
    # A program exec'd starts from the defaults; a Python script gets CPython's (`program.py`).
    for sig in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT):
        signal.signal(sig, signal.SIG_DFL)


def child(request: dict, fds: list[int], cfg: dict, failed: int) -> None:
    """In the forked child: become the program (never returns). A setup step that fails
    writes why on `failed` (the init's pipe, closed before the program runs)."""
    try:
        _setup(request, fds, cfg, failed)
        os.close(failed)
    except BaseException as exc:
        with contextlib.suppress(BaseException):
            os.write(failed, f"{type(exc).__name__}: {exc}".encode()[:4000])
        os._exit(127)
    try:
        argv = request["argv"]
        if argv[0] == "python":
            os._exit(program.run_python(argv[1], argv[2:], COMPILED))
        os.execve(argv[0], argv, os.environ)
    except BaseException:
        os._exit(127)


def _processes() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and p != "1"]


def _over(request: dict) -> str:
    """With no cgroup: "" while the program's processes are within their memory and count,
    else what they went over."""
    pids, resident = _processes(), 0
    if len(pids) > request["processes"]:
        return "processes"
    page = os.sysconf("SC_PAGE_SIZE")
    for pid in pids:
        try:
            with open(f"/proc/{pid}/statm") as f:
                resident += int(f.read().split()[1]) * page
        except (OSError, IndexError, ValueError):
            continue
    return "memory" if resident > request["memory_bytes"] else ""


def kill_the_rest() -> None:
    """SIGKILL every process of the namespace but this one, and reap them all."""
    deadline = time.monotonic() + 5.0
    while True:
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:  # nobody else in the namespace
            return
        try:
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        except ChildProcessError:
            pass
        if not _processes() or time.monotonic() > deadline:
            return
        time.sleep(0.001)


def wait_for(pid: int, sock: socket.socket, request: dict, cfg: dict) -> dict:
    """Wait until the child ends or the host says `kill`; how it ended."""
    pidfd = os.pidfd_open(pid)
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    poller.register(sock, select.POLLIN)
    over, killed = "", False
    while True:
        ready = dict(poller.poll(10 if cfg["watch"] else None))
        if pidfd in ready:
            break
        if sock.fileno() in ready:
            message, extra = receive(sock)
            for fd in extra:
                os.close(fd)
            if message is None:  # the host is gone
                kill_the_rest()
                os._exit(0)
            killed = True
            os.kill(pid, signal.SIGKILL)
        if cfg["watch"] and not over:
            over = _over(request)
            if over:
                os.kill(pid, signal.SIGKILL)
    os.close(pidfd)
    _, status, usage = os.wait4(pid, 0)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    kill_the_rest()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    others = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    ended = {
        "cpu_s": usage.ru_utime + usage.ru_stime + others,
        "max_rss": usage.ru_maxrss * 1024,
        "killed": killed,
        "over": over,
    }
    if os.WIFSIGNALED(status):
        ended["signal"] = signal.Signals(os.WTERMSIG(status)).name
    else:
        ended["exit"] = os.WEXITSTATUS(status)
    return ended


def own_state() -> dict[str, object]:
    """What a process of the same uid could change in this init from outside it: every
    resource limit, the nice value, the CPU affinity and the scheduling policy."""
    limits = {
        name: resource.getrlimit(getattr(resource, name))
        for name in dir(resource)
        if name.startswith("RLIMIT_")
    }
    return {
        **limits,
        "nice": os.getpriority(os.PRIO_PROCESS, 0),
        "affinity": sorted(os.sched_getaffinity(0)),
        "policy": os.sched_getscheduler(0),
    }


def _changed(start: dict[str, object]) -> str:
    now = own_state()
    moved = [k for k in start if now[k] != start[k]]
    return f"the sandbox's init was changed ({', '.join(moved)})" if moved else ""


def serve(sock: socket.socket, cfg: dict) -> None:
    start = own_state()
    while True:
        request, fds = receive(sock)
        if request is None:
            return
        if request.get("op") == "kill":  # for a program that had ended already
            continue
        reader, writer = (_relocate(fd) for fd in os.pipe())  # above every fd a program gets
        try:
            pid = os.fork()
        except OSError as exc:
            for fd in (*fds, reader, writer):
                os.close(fd)
            send(sock, {"failed": f"{type(exc).__name__}: {exc}"})
            continue
        if pid == 0:
            sock.close()
            child(request, fds, cfg, writer)
        for fd in (*fds, writer):
            os.close(fd)
        ended = wait_for(pid, sock, request, cfg)
        a, b = socket.socketpair()  # closing a unix socket: the kernel collects the sockets
        a.close()  # a program left in flight, and the fds in them (memfds, pipes)
        b.close()
        with os.fdopen(reader, "rb") as f:
            failed = f.read().decode("utf-8", "replace")
        if failed:
            ended["failed"] = failed
        changed = _changed(start)
        if changed:
            ended["retire"] = changed
        send(sock, ended)


def _relocate(fd: int) -> int:
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD, 50)
    os.close(fd)
    return moved


def _leave_the_host(sock: socket.socket, cfg: dict) -> None:
    """New keyring and namespaces; graft writes the ids; the child goes on as PID 1 of the new
    PID namespace while this process waits for it (as `unshare --fork` would) and ends as it
    ends (returns in the child only)."""
    inner.new_session_keyring(cfg["keyctl_nr"])
    flags = inner.PROGRAM_NAMESPACES | inner.CLONE_NEWPID
    inner._check(inner.libc.unshare(flags), "unshare")
    send(sock, {"unshared": os.getpid()})
    mapped, _ = receive(sock)
    if not mapped:
        sys.exit(1)
    pid = os.fork()
    if pid == 0:
        inner.libc.prctl(inner.PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        return
    sock.close()
    for fd in cfg["group_fds"]:
        os.close(fd)
    _, status = os.waitpid(pid, 0)
    os._exit(os.waitstatus_to_exitcode(status) & 0xFF)


def main() -> None:
    with open(sys.argv[1]) as f:
        cfg = json.load(f)
    # The socket and the group fds move above the fd numbers a program gets (0-5).
    sock = socket.socket(fileno=_relocate(cfg["socket_fd"]))
    cfg["group_fds"] = [_relocate(fd) for fd in cfg["group_fds"]]
    cfg["seccomp"] = base64.b64decode(cfg["seccomp"])
    for name in SCRIPTS:
        with open(os.path.join(HERE, name), "rb") as f:
            source = f.read()
        COMPILED[name, source] = compile(source, name, "exec", dont_inherit=True)
    _leave_the_host(sock, cfg)
    inner.build_root(cfg)
    inner.libc.prctl(inner.PR_SET_DUMPABLE, 0, 0, 0, 0)
    for name in WARM:
        with contextlib.suppress(ImportError):
            __import__(name)
    if cfg["watch"]:
        try:  # where PID namespaces have their own pid_max (Linux 6.14+), a hard bound too
            with open("/proc/sys/kernel/pid_max", "w") as f:
                f.write(str(max(301, cfg["processes"] + 2)))
        except OSError:
            pass
    gc.collect()
    gc.freeze()  # what exists now is never scanned again: a forked child does not copy it
    send(sock, {"ready": os.getpid()})
    serve(sock, cfg)


if __name__ == "__main__":
    main()
