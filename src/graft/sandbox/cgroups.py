"""Where a sandbox's memory and process limits come from: the isolation tier (host side).

Tiers, tried in order:
- `cgroup_v2`: the unified hierarchy. Groups are made in a delegated subtree: the nearest
  ancestor of this process's cgroup (`/proc/self/cgroup`, `0::/path`) that this process can
  write and whose `cgroup.subtree_control` has (or can be given) `memory` and `pids`; or the
  directory named by `GRAFT_SANDBOX_CGROUP`. Limits: `memory.max` (and `memory.swap.max` 0),
  `pids.max`; out of memory is read from `memory.events`.
- `cgroup_v1`: writable `memory` and `pids` hierarchies (`memory.limit_in_bytes`,
  `pids.max`; out of memory from `memory.oom_control` and `memory.failcnt`).
- `namespaces`: no writable cgroup (or `GRAFT_SANDBOX_TIER=namespaces`). The namespaces and
  per-process rlimits still hold; memory of all processes together and their number are
  watched by the sandbox's init every few milliseconds (`RLIMIT_AS` per process as well),
  which is weaker: a burst between two looks is not seen.

A group is named `graft-sandbox-ns<pid namespace inode>-pid<pid>-<random>` and its maker holds an
exclusive `flock` on its directory for as long as the group lives. The sweep of stale groups
removes only groups whose lock it can take, so a group is removed only when its maker is gone,
whatever PID namespace the maker ran in (a PID says nothing across namespaces).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

PREFIX = "graft-sandbox-"
TIERS = ("cgroup_v2", "cgroup_v1", "namespaces")
ENV_PARENT = "GRAFT_SANDBOX_CGROUP"
ENV_TIER = "GRAFT_SANDBOX_TIER"
PROC = Path("/proc/self")


@dataclass(frozen=True)
class Placement:
    """Where this process makes its groups: the tier and the parent directories (v1: the
    memory and the pids hierarchy's; v2: one; namespaces: none). `why` says why a better tier
    was not available."""

    tier: str
    parents: tuple[Path, ...] = ()
    why: str = ""


def _mounts(mountinfo: Path) -> list[tuple[str, str, str, set[str]]]:
    """(mount root, mount point, fs type, super options) of each mount."""
    out = []
    for line in mountinfo.read_text().splitlines():
        left, _, right = line.partition(" - ")
        fields, rest = left.split(), right.split()
        if len(fields) >= 5 and len(rest) >= 3:
            out.append((fields[3], fields[4], rest[0], set(rest[2].split(","))))
    return out


def _under(mount_root: str, point: str, path: str) -> Path:
    rel = path
    if mount_root != "/" and (path + "/").startswith(mount_root.rstrip("/") + "/"):
        rel = path[len(mount_root.rstrip("/")) :]
    return Path(point) / rel.lstrip("/")


def _v1_parents(proc: Path) -> tuple[tuple[Path, ...], str]:
    mounts = [m for m in _mounts(proc / "mountinfo") if m[2] == "cgroup"]
    own = {}
    for line in (proc / "cgroup").read_text().splitlines():
        _, names, path = line.split(":", 2)
        for name in names.split(","):
            own[name] = path
    parents = []
    for controller in ("memory", "pids"):
        where = next((m for m in mounts if controller in m[3]), None)
        if where is None or controller not in own:
            return (), f"no cgroup v1 {controller} hierarchy mounted"
        d = _under(where[0], where[1], own[controller])
        if not os.access(d, os.W_OK):
            return (), f"the cgroup v1 {controller} group {d} is not writable"
        parents.append(d)
    return tuple(parents), ""


def _controllers(d: Path, name: str) -> set[str]:
    with contextlib.suppress(OSError):
        return set((d / name).read_text().split())
    return set()


def _delegated(d: Path) -> bool:
    """Can groups with memory and pids limits be made under `d` (enabling them when `d` holds
    no process)?"""
    if not os.access(d, os.W_OK) or not {"memory", "pids"} <= _controllers(d, "cgroup.controllers"):
        return False
    if {"memory", "pids"} <= _controllers(d, "cgroup.subtree_control"):
        return True
    try:
        (d / "cgroup.subtree_control").write_text("+memory +pids")
    except OSError:
        return False  # processes in it (EBUSY), or not ours to change
    return {"memory", "pids"} <= _controllers(d, "cgroup.subtree_control")


def _v2_parent(proc: Path) -> tuple[Path | None, str]:
    mount = next((m for m in _mounts(proc / "mountinfo") if m[2] == "cgroup2"), None)
    if mount is None:
        return None, "no cgroup v2 hierarchy mounted"
    named = os.environ.get(ENV_PARENT, "")
    if named:
        d = Path(named)
        if _delegated(d):
            return d, ""
        return None, (
            f"{ENV_PARENT}={named} is not a writable cgroup v2 directory with memory and pids "
            "in its cgroup.subtree_control"
        )
    line = next((x for x in (proc / "cgroup").read_text().splitlines() if x.startswith("0::")), "")
    if not line:
        return None, "this process is in no cgroup v2 group"
    d = _under(mount[0], mount[1], line[3:])
    root = Path(mount[1])
    while True:
        if _delegated(d):
            return d, ""
        if d == root or root not in d.parents:
            break
        d = d.parent
    return None, (
        f"no delegated cgroup v2 subtree above {line[3:]} (one this process can write, with "
        "memory and pids enabled for its children)"
    )


def tier_cap() -> str:
    """The best tier `GRAFT_SANDBOX_TIER` allows ("" when unset: any); ValueError for a name
    that is not a tier."""
    cap = os.environ.get(ENV_TIER, "")
    if cap and cap not in TIERS:
        raise ValueError(f"{ENV_TIER}={cap}: use one of {', '.join(TIERS)}")
    return cap


def find_placement(proc: Path = PROC) -> Placement:
    """The best tier this process can use (module docstring), or the best one at or below
    `GRAFT_SANDBOX_TIER` when that is set."""
    cap = tier_cap()
    allowed = TIERS[TIERS.index(cap) :] if cap else TIERS
    why = [f"{ENV_TIER}={cap}"] if cap and cap != TIERS[0] else []
    if "cgroup_v2" in allowed:
        v2, why_v2 = _v2_parent(proc)
        if v2 is not None:
            return Placement("cgroup_v2", (v2,))
        why.append(why_v2)
    if "cgroup_v1" in allowed:
        v1, why_v1 = _v1_parents(proc)
        if v1:
            return Placement("cgroup_v1", v1, "; ".join(why))
        why.append(why_v1)
    return Placement("namespaces", (), "; ".join(why))


def maker_tag(pid: int | None = None) -> str:
    """`graft-sandbox-ns<pid namespace inode>-pid<pid>-`: who made a group or directory (for
    people reading the tree; the sweep goes by the lock)."""
    namespace = os.stat("/proc/self/ns/pid").st_ino
    return f"{PREFIX}ns{namespace}-pid{os.getpid() if pid is None else pid}-"


def _lock(d: Path) -> int | None:
    """An fd of `d` holding its exclusive lock, or None when someone else holds it (or it is
    gone)."""
    try:
        fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def sweep(parent: Path, remove: Callable[[Path], object] = Path.rmdir) -> int:
    """Remove the directories `PREFIX*` under `parent` (sandbox groups; staging directories,
    with `remove=shutil.rmtree`) whose maker is gone: their lock is free. How many."""
    removed = 0
    for d in parent.glob(f"{PREFIX}*"):
        fd = _lock(d)
        if fd is None:
            continue  # its maker is alive (in this PID namespace or another)
        try:
            remove(d)
            removed += 1
        except OSError:
            pass  # processes still in it, or gone already
        finally:
            os.close(fd)
    return removed


def locked_dir(make: Callable[[], Path]) -> tuple[Path, int]:
    """A directory made by `make` and the fd holding its lock (made again when a sweeper took
    it between the two)."""
    for _ in range(8):
        d = make()
        fd = _lock(d)
        if fd is not None and d.is_dir():
            return d, fd
        if fd is not None:
            os.close(fd)
    raise OSError(f"could not lock a directory made by {make}")


class Group:
    """One sandbox's memory and pids group(s), locked by this process for their lifetime."""

    def __init__(self, placement: Placement) -> None:
        self.v2 = placement.tier == "cgroup_v2"
        for parent in placement.parents:
            sweep(parent)
        name = f"{maker_tag()}{uuid.uuid4().hex[:10]}"
        self.dirs: tuple[Path, ...] = ()
        self._locks: list[int] = []
        for parent in placement.parents:
            d, fd = locked_dir(lambda p=parent: _mkdir(p / name))
            self.dirs, self._locks = (*self.dirs, d), [*self._locks, fd]
        self.memory, self.pids = self.dirs[0], self.dirs[-1]
        if self.v2:
            _write(self.memory / "memory.swap.max", "0", optional=True)
        self.leftover = 0
        """Processes still in a group when it was removed, killed then (should stay 0)."""

    def procs_fds(self) -> list[int]:
        """Write-only fds of each group's `cgroup.procs`: a process writing "0" joins."""
        return [os.open(d / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC) for d in self.dirs]

    def set_limits(self, memory_bytes: int, processes: int) -> None:
        if self.v2:
            _write(self.memory / "memory.max", str(memory_bytes))
        else:  # memory+swap may never be below memory: raise it first, lower it last
            order = ["memory.limit_in_bytes", "memory.memsw.limit_in_bytes"]
            if (self.memory / order[1]).exists():
                current = int((self.memory / order[0]).read_text() or 0)
                order = order[::-1] if memory_bytes > current else order
            for name in order:
                _write(self.memory / name, str(memory_bytes), optional=True)
        _write(self.pids / "pids.max", str(processes))

    def out_of_memory_count(self) -> int:
        """How often the group hit its memory limit so far (compare before and after a run)."""
        if self.v2:
            events = dict(
                line.split() for line in (self.memory / "memory.events").read_text().splitlines()
            )
            return int(events.get("oom_kill", 0)) + int(events.get("max", 0))
        control = (self.memory / "memory.oom_control").read_text()
        killed = sum(int(x.split()[1]) for x in control.splitlines() if x.startswith("oom_kill "))
        return killed + int((self.memory / "memory.failcnt").read_text())

    def reset_peak(self) -> None:
        name = "memory.peak" if self.v2 else "memory.max_usage_in_bytes"
        _write(self.memory / name, "0", optional=True)

    def peak_memory(self) -> float:
        name = "memory.peak" if self.v2 else "memory.max_usage_in_bytes"
        with contextlib.suppress(OSError, ValueError):
            return float((self.memory / name).read_text())
        return float("nan")

    def memory_used(self) -> int:
        """Bytes charged to the group now (its processes' and what they left: tmpfs and memfd
        pages, kernel objects)."""
        name = "memory.current" if self.v2 else "memory.usage_in_bytes"
        return int((self.memory / name).read_text())

    def reclaim(self) -> None:
        """Free what the kernel can take back (caches) from a group with no process in it."""
        name = "memory.reclaim" if self.v2 else "memory.force_empty"
        with contextlib.suppress(OSError):  # EAGAIN: less could be taken back than asked
            (self.memory / name).write_text(str(self.memory_used()) if self.v2 else "0")

    def kill_all(self) -> int:
        """SIGKILL every process still in the groups; how many there were."""
        pids = set()
        for d in self.dirs:
            with contextlib.suppress(OSError):
                pids |= set((d / "cgroup.procs").read_text().split())
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), signal.SIGKILL)
        return len(pids)

    def remove(self) -> None:
        """Delete the groups (any process still in one is killed first) and drop the locks."""
        for d in getattr(self, "dirs", ()):
            for attempt in range(100):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if attempt == 50:
                        self.leftover += self.kill_all()
                    time.sleep(0.02)
        for fd in getattr(self, "_locks", []):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._locks = []


def _mkdir(d: Path) -> Path:
    with contextlib.suppress(FileExistsError):
        d.mkdir()
    return d


def _write(path: Path, text: str, *, optional: bool = False) -> None:
    try:
        path.write_text(text)
    except OSError:
        if not (optional and not path.exists()):
            raise
