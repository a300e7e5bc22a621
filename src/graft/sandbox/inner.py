"""The first process inside a sandbox's namespaces (standard library only; run by `run.py` as
`unshare ... python -I -S inner.py CONFIG`). It is PID 1 of a new PID namespace and root of a new
user namespace (root of nothing on the host). It builds a root file system that holds only what
Python needs, read-only, and a size- and file-capped scratch directory; mounts private /tmp,
/dev/shm, /dev and /proc; enters it with chroot; sets resource limits; drops every capability;
and execs the candidate. When PID 1 exits, the kernel kills every process left in the
namespace, detached or not. With `unsafe_local` it only places the pipes, sets the limits and
execs the candidate in the staged files' directory."""

from __future__ import annotations

import ctypes
import fcntl
import json
import os
import resource
import shutil
import sys

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
PR_SET_NO_NEW_PRIVS, PR_CAPBSET_DROP = 38, 24
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
DEVICES = ("null", "zero", "urandom", "random")

libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str = "") -> None:
    enc = [None if x is None else x.encode() for x in (source, target, fstype)]
    _check(libc.mount(enc[0], enc[1], enc[2], flags, data.encode() or None), f"mount {target}")


def bind_readonly(path: str, root: str) -> None:
    target = root + path
    if os.path.islink(path):
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if not os.path.lexists(target):
            os.symlink(os.readlink(path), target)
        return
    if os.path.isdir(path):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        open(target, "a").close()
    mount(path, target, None, MS_BIND | MS_REC)
    mount(None, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)


def tmpfs(target: str, size_bytes: int, inodes: int, mode: str = "1777") -> None:
    os.makedirs(target, exist_ok=True)
    mount(
        "tmpfs",
        target,
        "tmpfs",
        MS_NOSUID | MS_NODEV,
        f"size={size_bytes},nr_inodes={inodes},mode={mode}",
    )


SCRATCH = ("/work", "/tmp", "/dev/shm")
MNT_DETACH = 2


def scratch_dirs(root: str, size_bytes: int, inodes: int) -> None:
    """Fresh, empty size- and file-capped /work, /tmp and /dev/shm under `root` (any earlier
    ones detached first, with whatever a program left in them)."""
    for path in SCRATCH:
        target = root + path
        if os.path.ismount(target):
            _check(libc.umount2(target.encode(), MNT_DETACH), f"umount {target}")
        tmpfs(target, size_bytes, inodes)


def build_root(cfg: dict) -> str:
    root = cfg["root"]
    mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing mounted here reaches the host
    tmpfs(root, 8 << 20, 4096, mode="0755")
    for path in cfg["readonly"]:
        if os.path.lexists(path):
            bind_readonly(path, root)
    scratch_dirs(root, cfg["scratch_bytes"], cfg["scratch_files"])
    if cfg.get("files"):
        for name in os.listdir(cfg["files"]):
            shutil.copyfile(os.path.join(cfg["files"], name), os.path.join(root, "work", name))
    os.makedirs(root + "/dev", exist_ok=True)
    for device in DEVICES:
        open(root + "/dev/" + device, "a").close()
        mount("/dev/" + device, root + "/dev/" + device, None, MS_BIND)
    os.makedirs(root + "/proc", exist_ok=True)
    mount("proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    mount(None, root, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    return root


def limit(cfg: dict) -> None:
    cpu = int(cfg["cpu_s"])
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_NOFILE, (cfg["open_files"], cfg["open_files"]))
    resource.setrlimit(resource.RLIMIT_FSIZE, (cfg["file_bytes"], cfg["file_bytes"]))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_STACK, (cfg["stack_bytes"], cfg["stack_bytes"]))


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint32) for n in ("effective", "permitted", "inheritable")]


def drop_capabilities() -> None:
    _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    for cap in range(64):
        libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)  # EINVAL past the last capability
    header, data = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0), (_CapData * 2)()
    _check(libc.capset(ctypes.byref(header), ctypes.byref(data)), "capset")


def main() -> None:
    with open(sys.argv[1]) as f:
        cfg = json.load(f)
    # Pipes to the host at the fd numbers the program expects (3: results, 4: requests, ...),
    # through copies above every target, so that no dup2 overwrites a pipe not yet placed.
    copies = {
        int(inner): fcntl.fcntl(host, fcntl.F_DUPFD, 100) for inner, host in cfg["fds"].items()
    }
    for host in cfg["fds"].values():
        os.close(host)
    for inner, copy in copies.items():
        os.dup2(copy, inner)
        os.set_inheritable(inner, True)
        os.close(copy)
    if cfg.get("unsafe_local"):  # no namespaces, no new root: the limits only
        os.chdir(cfg["files"])
        limit(cfg)
    else:
        root = build_root(cfg)
        os.chroot(root)
        os.chdir("/work")
        limit(cfg)
        drop_capabilities()
    env = {
        "PATH": "/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "HOME": "/work",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    os.execve(cfg["argv"][0], cfg["argv"], env)


if __name__ == "__main__":
    main()
