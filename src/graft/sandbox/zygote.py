"""The warm sandbox (standard library only; runs inside the namespaces, started by `warm.py` as
`unshare ... python -I -S -B zygote.py CONFIG`).

It is PID 1 of its PID namespace: the minimal init. It builds the read-only root once
(`inner.build_root`), enters it, imports the modules programs use most, and then serves one
program at a time on its socket: for each, fresh scratch directories (/work with the program's
files, /tmp, /dev/shm), then a forked child that
- starts its own session and process group (no host-side process shares either);
- joins the sandbox's memory and pids groups (or, with no cgroup, is watched from here);
- takes its stdin, stdout, stderr and result pipes (sent by the host over the socket);
- sets its resource limits, drops every capability, and runs the program: a Python script in
  this already warm interpreter (a fresh `__main__`, fresh standard streams, a fresh random
  seed), anything else through exec.
When the child ends (or the host says `kill`), every other process of the namespace is killed
(`kill(-1)` from init reaches them all, daemonized or not), all are reaped, and the host is told
how the child ended: its exit status or the name of the signal that killed it, and the CPU
seconds of everything the program ran. This process is not dumpable (no program can trace it or
read its memory) and keeps no state from one program to the next.
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
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import inner  # beside this file; -I keeps it off sys.path

sys.path.pop(0)

WARM = (
    "json", "math", "re", "collections", "itertools", "functools", "heapq", "bisect", "string",
    "typing", "fractions", "decimal", "random", "statistics", "operator", "copy", "datetime",
    "hashlib", "io", "traceback", "dataclasses", "enum", "array", "cmath", "textwrap",
    "unicodedata", "threading", "atexit", "types",
)  # fmt: skip
PR_SET_DUMPABLE = 4
HEADER = struct.Struct("!Q")
ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/work", "PYTHONDONTWRITEBYTECODE": "1"}


def receive(sock: socket.socket) -> tuple[dict | None, list[int]]:
    """One framed message (8-byte length, JSON) and the fds sent with it; None at the end."""
    data, fds, _, _ = socket.recv_fds(sock, 1 << 16, 16)
    if not data:
        return None, fds
    while len(data) < HEADER.size:
        more = sock.recv(1 << 16)
        if not more:
            return None, fds
        data += more
    (size,) = HEADER.unpack_from(data)
    body = bytearray(data[HEADER.size :])
    while len(body) < size:
        more = sock.recv(min(1 << 20, size - len(body)))
        if not more:
            return None, fds
        body += more
    return json.loads(bytes(body)), fds


def send(sock: socket.socket, message: dict) -> None:
    body = json.dumps(message).encode()
    sock.sendall(HEADER.pack(len(body)) + body)


def _std_streams() -> None:
    sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115
    sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False)  # noqa: SIM115
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr


def _run_python(path: str, argv: list[str]) -> int:
    """Run the script as `python -I -S -B path argv...` would; its exit status."""
    import atexit
    import random
    import threading
    import traceback
    import types

    _std_streams()
    random.seed()
    sys.argv = [path, *argv]
    main = types.ModuleType("__main__")
    main.__file__ = path
    main.__builtins__ = __builtins__
    sys.modules["__main__"] = main
    code = 0
    try:
        with open(path, "rb") as f:
            source = f.read()
        exec(compile(source, path, "exec"), main.__dict__)
    except SystemExit as exc:
        if exc.code is None:
            code = 0
        elif isinstance(exc.code, int):
            code = exc.code & 0xFF
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except BaseException as exc:
        traceback.print_exception(exc)
        code = 1
    for finish in (threading._shutdown, atexit._run_exitfuncs):  # as the interpreter's exit
        with contextlib.suppress(BaseException):
            finish()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            code = code or 120
    return code


def child(request: dict, fds: list[int], cfg: dict) -> None:
    """In the forked child: become the program (never returns)."""
    try:
        os.setsid()
        targets = request["fds"]  # the inner fd number of each received fd, in order
        copies = [fcntl.fcntl(fd, fcntl.F_DUPFD, 100) for fd in fds]  # above every target
        for inner_fd, copy in zip(targets, copies, strict=True):
            os.dup2(copy, inner_fd)
        for group_fd in cfg["group_fds"]:
            os.write(group_fd, b"0")
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")  # the program, never this init, is what an OOM kill takes
        os.closerange(max(targets) + 1, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
        for fd in range(3):
            if fd not in targets:
                os.close(fd)
        os.chdir("/work")
        inner.limit(request)
        if cfg["watch"]:  # no memory group: a per-process bound too
            memory = request["memory_bytes"]
            resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        inner.drop_capabilities()
        for sig in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT):
            signal.signal(sig, signal.SIG_DFL)
        os.environ.clear()
        os.environ.update(ENV)
        argv = request["argv"]
        if argv[0] == "python":
            os._exit(_run_python(argv[1], argv[2:]))
        os.execve(argv[0], argv, ENV)
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


def serve(sock: socket.socket, cfg: dict) -> None:
    while True:
        request, fds = receive(sock)
        if request is None:
            return
        try:
            inner.scratch_dirs("", request["scratch_bytes"], request["scratch_files"])
            for name, data in request["files"].items():
                with open(os.path.join("/work", name), "wb") as f:
                    f.write(base64.b64decode(data))
            pid = os.fork()
        except OSError as exc:
            for fd in fds:
                os.close(fd)
            send(sock, {"failed": f"{type(exc).__name__}: {exc}"})
            continue
        if pid == 0:
            sock.close()
            child(request, fds, cfg)
        for fd in fds:
            os.close(fd)
        send(sock, wait_for(pid, sock, request, cfg))


def _relocate(fd: int) -> int:
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD, 50)
    os.close(fd)
    return moved


def main() -> None:
    with open(sys.argv[1]) as f:
        cfg = json.load(f)
    # The socket and the group fds move above the fd numbers a program gets (0-5).
    sock = socket.socket(fileno=_relocate(cfg["socket_fd"]))
    cfg["group_fds"] = [_relocate(fd) for fd in cfg["group_fds"]]
    root = inner.build_root(cfg)
    os.chroot(root)
    os.chdir("/")
    inner.libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
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
