"""What the sandbox's own processes do to themselves (standard library only: the zygote imports
it from beside itself, inside the namespaces, where graft is not importable): mounts, the
read-only root, per-program namespaces and identity, resource limits, capabilities, a fresh
session keyring and the seccomp filter. Run as a script (`unsafe_local`), it only places the
pipes, sets the limits and runs the candidate in the staged files' directory (a Python script
in this interpreter, as `program.py` runs it; anything else through exec): NO isolation."""

from __future__ import annotations

import ctypes
import fcntl
import json
import os
import resource
import sys

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_SECCOMP = 1, 4, 22
PR_SET_SECUREBITS, PR_SET_NO_NEW_PRIVS = 28, 38
SECCOMP_MODE_FILTER = 2
SECBIT_ALL_LOCKED = 0x2F  # NOROOT, NO_SETUID_FIXUP, KEEP_CAPS, each with its lock
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
PROGRAM_NAMESPACES = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWNET
"""What each program gets new: its own user namespace (nothing of the init's is its own, and
keyrings start empty), mounts (its scratch), IPC (System V objects, POSIX message queues), UTS
(its host name) and network (loopback, abstract unix sockets, network sysctls)."""
KEYCTL_JOIN_SESSION_KEYRING = 1
DEVICES = ("null", "zero", "urandom", "random")
STD_LINKS = (("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
             ("stderr", "/proc/self/fd/2"), ("fd", "/proc/self/fd"))  # fmt: skip
"""The links in /dev a standard system has to a process's own standard streams and fds."""
SELF_PID = 0x5EC0FFEE
"""Stands for the program's own pid in the seccomp filter (`seccomp.py`) until the program's
process puts its pid there (`install_seccomp`)."""
SCRATCH = ("/work", "/tmp", "/dev/shm")
HOSTNAME = b"sandbox"

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


def scratch_dirs(size_bytes: int, inodes: int) -> None:
    """Fresh, empty size- and file-capped /work, /tmp and /dev/shm (in the program's own mount
    namespace: they go with it)."""
    for path in SCRATCH:
        tmpfs(path, size_bytes, inodes)


def build_root(cfg: dict) -> None:
    """Make `cfg["root"]` (a tmpfs holding only what Python needs, read-only, with /proc and
    empty mount points for the scratch directories) the root of this mount namespace, with
    nothing of the host's tree left in it (pivot_root, then the old root detached)."""
    root = cfg["root"]
    mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing mounted here reaches the host
    tmpfs(root, 8 << 20, 4096, mode="0755")
    for path in cfg["readonly"]:
        if os.path.lexists(path):
            bind_readonly(path, root)
    for path in SCRATCH:
        os.makedirs(root + path, exist_ok=True)
    for device in DEVICES:
        open(root + "/dev/" + device, "a").close()
        mount("/dev/" + device, root + "/dev/" + device, None, MS_BIND)
    for name, target in STD_LINKS:
        os.symlink(target, root + "/dev/" + name)
    os.makedirs(root + "/proc", exist_ok=True)
    mount("proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    os.makedirs(root + "/.old", exist_ok=True)
    _check(libc.syscall(cfg["pivot_root_nr"], root.encode(), (root + "/.old").encode()), "pivot")
    os.chdir("/")
    _check(libc.umount2(b"/.old", MNT_DETACH), "umount the old root")
    os.rmdir("/.old")
    mount(None, "/", None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)


def new_session_keyring(keyctl_nr: int) -> None:
    """Join a new, empty, anonymous session keyring: nothing of the keyring this process was
    started with (a login session's tokens) is reachable from here on. Kernels built without
    keys have no keyring to leave."""
    if keyctl_nr and libc.syscall(keyctl_nr, KEYCTL_JOIN_SESSION_KEYRING, None) < 0:
        err = ctypes.get_errno()
        if err != 38:  # ENOSYS
            raise OSError(err, f"a new session keyring: {os.strerror(err)}")


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def enter_own_namespaces(program_id: int) -> None:
    """Become the program's identity: `program_id` of the init's user namespace (which maps it
    to an unprivileged host uid; 0 where the init has only one id), then root of a user
    namespace of its own, mapped to that id alone, with new mount, IPC, UTS and network
    namespaces, and its own host name."""
    if program_id:
        os.setgroups([])
        os.setresgid(program_id, program_id, program_id)
        os.setresuid(program_id, program_id, program_id)
    _check(libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0), "dumpable")  # its /proc/self files its own
    _check(libc.unshare(PROGRAM_NAMESPACES), "unshare")
    _write("/proc/self/uid_map", f"0 {program_id} 1\n")
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/gid_map", f"0 {program_id} 1\n")
    _check(libc.sethostname(HOSTNAME, len(HOSTNAME)), "sethostname")


def proc_read_only() -> None:
    """/proc, in this mount namespace, read-only: no sysctl, no process attribute is writable."""
    mount(None, "/proc", None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)


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
    """No capability now, and none gained by an exec (no_new_privs; root gets none either)."""
    _check(libc.prctl(PR_SET_SECUREBITS, SECBIT_ALL_LOCKED, 0, 0, 0), "securebits")
    header, data = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0), (_CapData * 2)()
    _check(libc.capset(ctypes.byref(header), ctypes.byref(data)), "capset")
    _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]


def install_seccomp(bpf: bytes) -> None:
    """Install a compiled filter (struct sock_filter entries) on this process, with its own pid
    in place of `SELF_PID`; after no_new_privs. Empty: none (the doctor names the defence as
    weaker)."""
    if bpf:
        own = os.getpid().to_bytes(4, sys.byteorder)
        bpf = bpf.replace(SELF_PID.to_bytes(4, sys.byteorder), own)
        prog = _SockFprog(len(bpf) // 8, bpf)
        _check(libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0), "seccomp")


def main() -> None:
    """`unsafe_local`: the pipes at their numbers, the limits, then exec (no isolation)."""
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
    os.chdir(cfg["files"])
    limit(cfg)
    argv = cfg["argv"]
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/work",
           "PYTHONDONTWRITEBYTECODE": "1"}  # fmt: skip
    if argv[0] == "python":  # this interpreter (-I -S -B) runs it, as the warm sandbox does
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import program

        sys.path.pop(0)
        os.environ.clear()
        os.environ.update(env)
        os._exit(program.run_python(argv[1], argv[2:]))
    os.execve(argv[0], argv, env)


if __name__ == "__main__":
    main()
