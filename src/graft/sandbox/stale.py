"""Staging directories left behind by a process that was killed (a verifier worker past its
deadline gets SIGKILL, so its sandboxes' staging directories are never cleaned by it).

A staging directory is named `<prefix>ns<pid namespace inode>-pid<pid>-<random>` (`stage_prefix`,
for `tempfile.mkdtemp(prefix=...)`; the form of `cgroups.maker_tag`): its maker's PID namespace
(the inode of `/proc/self/ns/pid`) and its process id there. `remove_stale_stages` removes the
directories whose maker is gone: made in this process's PID namespace by a process that no longer
runs, and whose `flock` (which a maker may hold for the directory's lifetime, `cgroups.locked_dir`)
is free. A directory of another PID namespace is left alone (a PID says nothing across
namespaces), as are other users' directories and names not in this form. A reused PID keeps a
dead maker's directory until that PID is free again: never a live one removed.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path

_TAG = re.compile(r"ns(\d+)-pid(\d+)-.")


def _pid_namespace() -> int:
    """The inode of this process's PID namespace (0 where /proc does not say)."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


def stage_prefix(prefix: str) -> str:
    """`prefix` followed by this process's PID namespace and PID: the prefix to give
    `tempfile.mkdtemp` for a staging directory `remove_stale_stages` can judge."""
    return f"{prefix}ns{_pid_namespace()}-pid{os.getpid()}-"


def _maker(name: str, prefix: str) -> tuple[int, int] | None:
    """(namespace, pid) of a staging directory's name; None for another name."""
    if not name.startswith(prefix):
        return None
    match = _TAG.match(name, len(prefix))
    return (int(match[1]), int(match[2])) if match else None


def _gone(namespace: int, pid: int) -> bool:
    """Is the maker gone? Only a maker of this PID namespace can be judged."""
    if namespace == 0 or namespace != _pid_namespace() or pid == os.getpid():
        return False
    return not os.path.exists(f"/proc/{pid}")


def _force_writable(function: Callable[[str], object], path: str, _exc_info: object) -> None:
    """Let rmtree into a directory a program made read-only, then retry; give up quietly when
    that fails (another cleaner may have removed it first)."""
    with contextlib.suppress(OSError):
        os.chmod(os.path.dirname(path), stat.S_IRWXU)
        if os.path.isdir(path) and not os.path.islink(path):
            os.chmod(path, stat.S_IRWXU)
        function(path)


def _remove_if_unlocked(path: str) -> bool:
    """Remove `path` holding its lock; False when someone holds the lock or it is gone."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return False
    try:
        shutil.rmtree(path, onerror=_force_writable)
    finally:
        os.close(fd)
    return not os.path.lexists(path)


def remove_stale_stages(prefix: str, root: str | os.PathLike[str] | None = None) -> list[Path]:
    """Remove the staging directories under `root` (default: the temporary directory) named
    with `stage_prefix(prefix)` whose maker is gone (module docstring); the paths removed."""
    root = Path(root if root is not None else tempfile.gettempdir())
    removed: list[Path] = []
    try:
        entries = list(os.scandir(root))
    except OSError:
        return removed
    uid = os.getuid()
    for entry in entries:
        maker = _maker(entry.name, prefix)
        if maker is None or not _gone(*maker):
            continue
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISDIR(info.st_mode) and info.st_uid == uid and _remove_if_unlocked(entry.path):
            removed.append(Path(entry.path))
    return removed
