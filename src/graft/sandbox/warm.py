"""The host side of the warm sandbox (`zygote.py`): start one, hand it programs with their
pipes, tell it to kill, read how each program ended; and the idle ones this process keeps.

A zygote costs one `unshare`, one interpreter start and one read-only root (tens of ms); each
program after that costs a fork and three small mounts. A process keeps up to `KEEP_IDLE`
zygotes between programs (assert-style tests run two programs at once: the candidate's and the
checker's, each in its own zygote, so in separate namespaces).
"""

from __future__ import annotations

import atexit
import base64
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
from graft.sandbox.cgroups import Group, Placement, locked_dir, maker_tag, sweep

ZYGOTE = Path(__file__).with_name("zygote.py")
HEADER = struct.Struct("!Q")
KEEP_IDLE = 4
START_S = 20.0
ISOLATE = [
    "unshare", "--user", "--map-root-user", "--mount", "--pid", "--net", "--ipc", "--uts",
    "--fork", "--kill-child=SIGKILL",
]  # fmt: skip


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
        cfg = {
            "root": str(Path(self.stage) / "root"),
            "readonly": list(readonly),
            "socket_fd": theirs.fileno(),
            "group_fds": group_fds,
            "watch": self.group is None,
            "processes": processes,
            "scratch_bytes": 1 << 20,
            "scratch_files": 64,
        }
        (Path(self.stage) / "root").mkdir()
        config = str(Path(self.stage) / "zygote.json")
        Path(config).write_text(json.dumps(cfg))
        command = [
            *ISOLATE,
            exe,
            "-I",
            "-S",
            "-B",
            str(ZYGOTE),
            str(Path(self.stage) / "zygote.json"),
        ]
        try:
            self.proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                pass_fds=(theirs.fileno(), *group_fds),
                start_new_session=True,
                preexec_fn=die_with_parent,
            )
        except BaseException:
            self.close()
            raise
        finally:
            theirs.close()
            for fd in group_fds:
                os.close(fd)
        self.busy = False
        ready = self.reply(START_S)
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

    def give_back(self, z: Zygote) -> None:
        with self.lock:
            if (
                z.alive()
                and not z.busy
                and self.owner == os.getpid()
                and len(self.idle) < KEEP_IDLE
            ):
                self.idle.append(z)
                return
        if z.busy:
            z.destroy()
        z.close()

    def close(self) -> None:
        with self.lock:
            idle, self.idle = self.idle, []
        if self.owner == os.getpid():
            for z in idle:
                z.close()


ZYGOTES = Zygotes()
