"""The host side of the warm sandbox (`zygote.py`): start one, give its user namespace its ids
(`identity.py`), hand it programs with their pipes, tell it to kill, read how each program
ended; and the idle ones this process keeps.

A zygote costs one interpreter start, its namespaces and one read-only root (tens of ms); each
program after that costs a fork, namespaces of its own and three small mounts. A process keeps
up to `KEEP_IDLE` zygotes between programs (assert-style tests run two programs at once: the
candidate's and the checker's, each in its own zygote). A zygote whose init reports itself
changed, or whose group keeps memory after its program, is not kept (`Zygotes.give_back`).
"""

from __future__ import annotations

import atexit
import base64
import collections
import contextlib
import json
import os
import select
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from graft.procutil import die_with_parent
from graft.sandbox import identity, seccomp
from graft.sandbox.cgroups import Group, Placement, locked_dir, maker_tag, sweep

ZYGOTE = Path(__file__).with_name("zygote.py")
HEADER = struct.Struct("!Q")
KEEP_IDLE = 4
START_S = 20.0
ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/work", "PYTHONDONTWRITEBYTECODE": "1"}
"""The zygote's whole environment, so every program's (nothing of the trainer's)."""


class StartError(RuntimeError):
    """A sandbox could not be started (the message says why)."""


def _frame(message: dict) -> bytes:
    body = json.dumps(message).encode()
    return HEADER.pack(len(body)) + body


class Zygote:
    """One warm sandbox: a process tree `unshare` -> zygote (PID 1 of its namespaces)."""

    def __init__(
        self, placement: Placement, exe: str, readonly: tuple[str, ...], processes: int
    ) -> None:
        self.group = Group(placement) if placement.parents else None
        temp = Path(tempfile.gettempdir())
        sweep(temp, shutil.rmtree)  # the staging directories of killed makers
        stage, self._stage_lock = locked_dir(lambda: Path(tempfile.mkdtemp(prefix=maker_tag())))
        self.stage = str(stage)
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        group_fds = self.group.procs_fds() if self.group else []
        self.identity = identity.identity()
        cfg = {
            "root": str(Path(self.stage) / "root"),
            "readonly": list(readonly),
            "socket_fd": theirs.fileno(),
            "group_fds": group_fds,
            "watch": self.group is None,
            "processes": processes,
            "program_id": self.identity.program_id,
            "seccomp": base64.b64encode(seccomp.compiled().bpf).decode(),
            **{f"{name}_nr": nr for name, nr in seccomp.syscall_numbers().items()},
        }
        (Path(self.stage) / "root").mkdir()
        config = str(Path(self.stage) / "zygote.json")
        Path(config).write_text(json.dumps(cfg))
        try:
            self.proc = subprocess.Popen(
                [exe, "-I", "-S", "-B", str(ZYGOTE), config],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                pass_fds=(theirs.fileno(), *group_fds),
                start_new_session=True,
                preexec_fn=die_with_parent,
                env=ENV,
            )
        except BaseException:
            self.close()
            raise
        finally:
            theirs.close()
            for fd in group_fds:
                os.close(fd)
        self.busy = False
        self._handshake()

    def _handshake(self) -> None:
        """Its namespaces made, give its user namespace its ids; then wait until it is ready."""
        unshared = self.reply(START_S)
        if unshared and "unshared" in unshared:
            try:
                identity.write_maps(self.proc.pid, self.identity)
                self.sock.sendall(_frame({"mapped": True}))
            except OSError as err:
                self.close()
                raise StartError(f"the sandbox's user namespace got no ids: {err}") from None
            ready = self.reply(START_S)
        else:
            ready = unshared
        if not ready or "ready" not in ready:
            why = self._stderr() or "it did not say it was ready"
            self.close()
            raise StartError(f"the sandbox did not start: {why}")

    def _stderr(self) -> str:
        if self.proc.poll() is None:
            self.destroy()
        with contextlib.suppress(OSError, ValueError):
            return " ".join(self.proc.stderr.read().decode("utf-8", "replace").split())[-300:]  # type: ignore[union-attr]
        return ""

    def alive(self) -> bool:
        return getattr(self, "proc", None) is not None and self.proc.poll() is None

    def run(
        self, files: dict[str, bytes], argv: list[str], fds: dict[int, int], request: dict
    ) -> None:
        """Hand it a program: `fds` maps each fd number inside to the host fd to send."""
        message = {
            **request,
            "files": {n: base64.b64encode(d).decode() for n, d in files.items()},
            "argv": argv,
            "fds": list(fds),
        }
        data = _frame(message)
        sent = socket.send_fds(self.sock, [data[: 1 << 16]], list(fds.values()))
        self.sock.sendall(data[sent:])
        self.busy = True

    def kill(self) -> None:
        """Kill the running program (and everything it started)."""
        with contextlib.suppress(OSError):
            self.sock.sendall(_frame({"op": "kill"}))

    def reply(self, timeout_s: float) -> dict | None:
        """Its next message, or None (it died, or said nothing within `timeout_s`)."""
        deadline = time.monotonic() + timeout_s
        data = bytearray()
        while len(data) < HEADER.size or len(data) < HEADER.size + HEADER.unpack_from(data)[0]:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.sock], [], [], left)[0]:
                return None
            try:
                chunk = self.sock.recv(1 << 16)
            except OSError:
                return None
            if not chunk:
                return None
            data += chunk
        self.busy = False
        return json.loads(bytes(data[HEADER.size :]))

    def destroy(self) -> None:
        """Kill it and its whole namespace now."""
        with contextlib.suppress(ProcessLookupError, AttributeError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(AttributeError):
            self.proc.wait()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()
        if getattr(self, "proc", None) is not None:
            try:
                self.proc.wait(timeout=2.0)
            except subprocess.TimeoutExpired:
                self.destroy()
            if self.proc.stderr is not None:
                self.proc.stderr.close()
        if self.group is not None:
            self.group.remove()
        if getattr(self, "stage", None):
            shutil.rmtree(self.stage, ignore_errors=True)
            os.close(self._stage_lock)
            self.stage = ""


SETTLED_BYTES = 4 << 20
"""Memory a group may still hold after its program and be kept: kernel caches of the files a
program looked up and the like (a benign program leaves well under 1 MiB)."""
SETTLE_S = 0.25
RETIRED: collections.Counter[str] = collections.Counter()
"""Zygotes this process did not keep after a program: `changed` (its init saw its own limits,
priority, affinity or policy moved) or `memory left` (its group did not settle)."""


def memory_left(group: Group) -> int:
    """Bytes a group holds past `SETTLED_BYTES` once its program is gone (0: settled). Before
    it says so, caches are reclaimed, and frees the kernel defers (the sockets a program left
    in flight, which the init has the kernel collect after every program; an IPC namespace's
    segments) get `SETTLE_S` to happen."""
    used = group.memory_used()
    if used <= SETTLED_BYTES:
        return 0
    group.reclaim()
    deadline = time.monotonic() + SETTLE_S
    while (used := group.memory_used()) > SETTLED_BYTES and time.monotonic() < deadline:
        time.sleep(0.01)
    return max(0, used - SETTLED_BYTES)


class Zygotes:
    """The idle zygotes of this process (not shared with a forked child)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.idle: list[Zygote] = []
        self.owner = os.getpid()
        atexit.register(self.close)

    def take(self, make: Callable[[], Zygote]) -> Zygote:
        with self.lock:
            if self.owner != os.getpid():  # a forked copy: those are the parent's
                self.idle, self.owner = [], os.getpid()
            while self.idle:
                z = self.idle.pop()
                if z.alive():
                    return z
                z.close()
        return make()

    def give_back(self, z: Zygote, changed: str = "") -> None:
        """Keep `z` for the next program, unless its init saw itself `changed`, its group still
        holds memory, or it is busy, dead or one too many (then it is killed)."""
        retire = "changed" if changed else ""
        if not retire and z.group is not None and not z.busy and z.alive():
            retire = "memory left" if memory_left(z.group) else ""
        if retire:
            RETIRED[retire] += 1
        with self.lock:
            if (
                not retire
                and z.alive()
                and not z.busy
                and self.owner == os.getpid()
                and len(self.idle) < KEEP_IDLE
            ):
                self.idle.append(z)
                return
        if z.busy or retire:
            z.destroy()
        z.close()

    def close(self) -> None:
        with self.lock:
            idle, self.idle = self.idle, []
        if self.owner == os.getpid():
            for z in idle:
                z.close()


ZYGOTES = Zygotes()
