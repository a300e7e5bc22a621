"""What the sandbox enforces on this machine: its tier, each limit and each defence, with
whether and how it is enforced (`graft code doctor`, the run metadata of a code run, the line
training logs). Where it can, the report reads a defence off what a real program saw."""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Any

from graft.sandbox.identity import identity
from graft.sandbox.limits import DEFAULT_POOL_THREADS
from graft.sandbox.run import DEFAULT_LIMITS, PROBE, Limits, isolation_problem, placement
from graft.sandbox.run import run_sandboxed as _run
from graft.sandbox.seccomp import compiled
from graft.sandbox.warm import SETTLED_BYTES

YES, WEAKER, NO = "enforced", "weaker", "not enforced"
TASKS = (
    f" (threads count: twice a default thread pool's {DEFAULT_POOL_THREADS} workers, "
    "graft.sandbox.limits.DEFAULT_POOL_THREADS)"
)


def _tier_rows(tier: str, where: str, limits: Limits) -> list[tuple[str, str, str]]:
    mib = limits.memory_bytes >> 20
    if tier == "cgroup_v2":
        return [
            ("memory, all processes together", YES, f"{mib} MiB: memory.max of a group in {where}"),
            ("processes", YES, f"{limits.processes} tasks: pids.max of the same group{TASKS}"),
        ]
    if tier == "cgroup_v1":
        return [
            ("memory, all processes together", YES, f"{mib} MiB: memory.limit_in_bytes in {where}"),
            ("processes", YES, f"{limits.processes} tasks: pids.max in the pids hierarchy{TASKS}"),
        ]
    return [
        ("memory, all processes together", WEAKER,
         f"{mib} MiB: RLIMIT_AS per process, and their resident memory summed every 10 ms by the "
         "sandbox's init (a burst between two looks is not seen)"),
        ("processes", WEAKER,
         f"{limits.processes}: counted every 10 ms by the sandbox's init, and bounded by the PID "
         "namespace's pid_max where the kernel gives each namespace its own (Linux 6.14+)"),
    ]  # fmt: skip


OBSERVE = b"""\
import errno, json
seen = {}
for line in open("/proc/self/status"):
    key, _, value = line.partition(":")
    if key in ("Seccomp", "NoNewPrivs", "CapEff"):
        seen[key] = value.strip()
try:
    open("/proc/sys/kernel/hostname", "r+").close()
    seen["proc_sys"] = "writable"
except OSError as exc:
    seen["proc_sys"] = errno.errorcode.get(exc.errno, str(exc.errno))
seen["uid_map"] = open("/proc/self/uid_map").read().split()
for line in open("/proc/self/mountinfo"):
    fields = line.split()
    if fields[4] == "/proc":
        seen["proc_mount"] = fields[5]
import builtins, signal, sys
seen["flags"] = {k: getattr(sys.flags, k) for k in ("isolated", "no_site", "dont_write_bytecode")}
seen["site_names"] = [n for n in ("exit", "quit", "help", "copyright", "credits", "license")
                      if hasattr(builtins, n)]
def _handler(name):
    h = signal.getsignal(getattr(signal, name))
    return {signal.SIG_IGN: "ignored", signal.SIG_DFL: "default",
            signal.default_int_handler: "KeyboardInterrupt"}.get(h, "a handler")
seen["signals"] = {name: _handler(name) for name in ("SIGPIPE", "SIGXFSZ", "SIGINT")}
print(json.dumps(seen))
"""
"""What a program sees of its own confinement (the doctor's second program): its seccomp mode,
no_new_privs, capabilities, whether /proc/sys opens for writing, its user namespace's map; and
of its interpreter: its flags, site's names in builtins and its signal dispositions."""


def _defence_rows(seen: dict[str, Any]) -> list[tuple[str, str, str]]:
    """Each defence a program has against the host and against the programs after it: enforced,
    or weaker and why; read from what a real program saw (`OBSERVE`) where it can be."""
    ident, seccomp = identity(), compiled()
    uid = (
        "program's host uid",
        YES,
        f"{ident.host_uid}: its own, not root, not the init's "
        f"(root only of a user namespace of its own: inside, {' '.join(seen['uid_map'])})",
    )
    if ident.why_shared:
        uid = (
            "program's host uid",
            WEAKER,
            f"{ident.host_uid}: the trainer's own ({ident.why_shared})",
        )
    proc, mount = seen["proc_sys"], seen.get("proc_mount", "?")
    read_only = proc != "writable" and mount.split(",")[0] == "ro"
    refused = [*seccomp.refused[:6], "..."]
    filtered = (
        (
            "seccomp filter",
            YES,
            f"{len(seccomp.refused)} system calls refused ({', '.join(refused)}), and "
            f"{'; '.join(seccomp.arguments)}: Docker's default profile as the anchor",
        )
        if seen.get("Seccomp") == "2"
        else ("seccomp filter", WEAKER, f"none: {seccomp.problem or 'not installed'}")
    )
    return [
        uid,
        ("/proc", YES if read_only else WEAKER,
         f"mounted {mount}; opening /proc/sys/kernel/hostname to write: {proc}"),
        ("namespaces per program: user, mount, IPC, UTS, network", YES,
         "new for every program: what it leaves in System V IPC, message queues, keyrings, "
         "its host name, sysctls or abstract sockets goes with it"),
        ("session keyring", YES, "a new, empty one per program; the trainer's out of reach"),
        filtered,
        ("capabilities", YES if seen.get("CapEff", "").strip("0") == "" else WEAKER,
         f"none (CapEff {seen.get('CapEff')}); no_new_privs {seen.get('NoNewPrivs')}"),
        ("the init's limits", YES, "set per program from graft's request; the init is out of "
         "the programs' reach, checks its own after each program and is replaced if any moved"),
        ("results", YES, "from graft only: each call asked and answered in turn, the program "
         "holds no result channel; assert checks run in a sandbox of their own"),
    ]  # fmt: skip


def _interpreter_rows(seen: dict[str, Any]) -> list[tuple[str, str, str]]:
    """How a Python program's interpreter is set up, read off what a real program saw."""
    flags = seen.get("flags", {})
    on = [f"-{flag}" for flag, key in (("I", "isolated"), ("S", "no_site"),
                                       ("B", "dont_write_bytecode")) if flags.get(key)]  # fmt: skip
    names = seen.get("site_names", [])
    signals = seen.get("signals", {})
    cpython = {"SIGPIPE": "ignored", "SIGXFSZ": "ignored", "SIGINT": "KeyboardInterrupt"}
    return [
        ("interpreter flags", YES if len(on) == 3 else WEAKER,
         f"{' '.join(on) or 'none'}: isolated (no environment, no user site, the script's "
         "directory off the path), no site (no site-packages or .pth files), no bytecode "
         "(graft.sandbox.program); the program compiled with its own future flags only, as "
         "the module __main__ (or solution)"),
        ("site's names", YES if len(names) == 6 else WEAKER,
         f"{', '.join(names) or 'none'} in builtins, made by site's own functions without the "
         "rest of what site does (graft.sandbox.program.site_names)"),
        ("signal dispositions", YES if signals == cpython else WEAKER,
         ", ".join(f"{k} {v}" for k, v in signals.items()) + ": CPython's start-up "
         "dispositions, whatever the sandbox's init had (graft.sandbox.program.python_signals)"),
    ]  # fmt: skip


def _memory_row(tier: str) -> tuple[str, str, str]:
    if tier == "namespaces":
        return ("memory returned", WEAKER, "no group to measure what a program leaves charged; "
                "sockets in flight are collected after each program")  # fmt: skip
    settled = SETTLED_BYTES >> 20
    return ("memory returned", YES, f"the group back under {settled} MiB after each program "
            "(sockets in flight collected, caches reclaimed), else a new sandbox")  # fmt: skip


def report(limits: Limits = DEFAULT_LIMITS) -> dict[str, Any]:
    """The tier, each limit and defence (name, enforced / weaker / not enforced, how), and one
    real program's result; `problem` is "" when programs can be isolated here."""
    problem = isolation_problem()
    if problem:
        return {"tier": "none", "problem": problem, "limits": [], "probe": {}}
    place = placement()
    where = ", ".join(str(p) for p in place.parents)
    seen = json.loads(_run({"observe.py": OBSERVE}, ["python", "observe.py"]).stdout or b"{}")
    rows = [
        ("namespaces: user, mount, PID, network, IPC, UTS", YES, "the sandbox's, from its start"),
        *_defence_rows(seen),
        ("file system", YES, "read-only root; fresh /work, /tmp, /dev/shm per program"),
        ("wall clock", YES, f"{limits.wall_s:g} s a run (graft kills it and all it started)"),
        ("CPU time", YES, f"{limits.cpu_s} s: RLIMIT_CPU"),
        *_tier_rows(place.tier, where, limits),
        _memory_row(place.tier),
        ("open files", YES, f"{limits.open_files}: RLIMIT_NOFILE"),
        ("file size", YES, f"{limits.file_bytes >> 20} MiB: RLIMIT_FSIZE"),
        ("scratch space", YES, f"{limits.scratch_bytes >> 20} MiB, "
                               f"{limits.scratch_files} files: tmpfs"),
        ("output", YES, f"stdout {limits.stdout_bytes >> 10} KiB, "
                        f"stderr {limits.stderr_bytes >> 10} KiB: counted by graft; a code "
                        "problem's stdout is raised to twice its largest expected output and "
                        "64 KiB (graft.verify.code.verifier.output_cap)"),
        *_interpreter_rows(seen),
    ]  # fmt: skip
    start = time.perf_counter()
    probe = _run({"probe.py": PROBE}, ["python", "probe.py"], limits=limits)
    return {
        "tier": place.tier,
        "problem": "",
        "why_not_better": place.why,
        "limits": [{"limit": n, "status": s, "how": h} for n, s, h in rows],
        "probe": {
            "status": probe.status,
            "stdout": probe.stdout.decode("utf-8", "replace").strip(),
            "ms": round(1000 * (time.perf_counter() - start), 1),
        },
    }


def render(found: dict[str, Any]) -> str:
    """`report` as the lines `graft code doctor` prints."""
    if found["problem"]:
        return f"sandbox: cannot isolate programs here: {found['problem']}"
    weaker = any(row["status"] != YES for row in found["limits"])
    lines = [f"sandbox tier: {found['tier']}" + (" (weaker)" if weaker else "")]
    if found["why_not_better"]:
        lines.append(f"  (not a better tier: {found['why_not_better']})")
    width = max(len(row["limit"]) for row in found["limits"])
    for row in found["limits"]:
        lines.append(f"  {row['limit']:<{width}}  {row['status']:<12}  {row['how']}")
    probe = found["probe"]
    lines.append(
        f"  a real program: {probe['status']}, printed {probe['stdout']!r} in {probe['ms']:g} ms"
    )
    return "\n".join(lines)


def summary(limits: Limits = DEFAULT_LIMITS) -> dict[str, Any]:
    """The tier, where its groups are made and why no better tier, and each limit with its
    status, without running a program (for a run's metadata)."""
    found: dict[str, Any] = dataclasses.asdict(placement())
    found["parents"] = [str(p) for p in found["parents"]]
    where = ", ".join(found["parents"])
    found["limits"] = {name: status for name, status, _ in _tier_rows(found["tier"], where, limits)}
    return found


def tier_line() -> str:
    """The one line training logs: the tier and whether memory and processes are enforced."""
    found = summary()
    limits = ", ".join(f"{k}: {v}" for k, v in found["limits"].items())
    return f"code sandbox: tier {found['tier']} ({limits}); `graft code doctor` for every limit"


CASES = {
    "ok": b"print(sum(range(10)))",
    "runtime_error": b"import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)",
    "memory": b"import time\nx = bytearray(200 << 20)\ntime.sleep(1)",
    "timeout": b"import time\ntime.sleep(10)",
}


def self_check(n: int = 50, *, skip: type[Exception], fail: type[Exception]) -> dict[str, Any]:
    """A correct, a self-killed, a memory-hungry and a hanging program judged on this machine,
    and warm programs per second (gpu_check's sandbox check). Raises `skip` where no sandbox
    can be made, `fail` when a status is not the expected one."""
    if isolation_problem():
        raise skip(f"no sandbox here: {isolation_problem()}")
    place = placement()
    limits = Limits(wall_s=2.0, cpu_s=2, memory_bytes=64 << 20)
    memory = YES if place.tier != "namespaces" else WEAKER
    # Under the weaker tier one process's allocation past the limit fails inside the program
    # (RLIMIT_AS): a runtime error rather than the memory status.
    want = {k: "runtime_error" if k == "memory" and memory != YES else k for k in CASES}
    got = {
        k: _run({"m.py": src}, ["python", "m.py"], limits=limits).status for k, src in CASES.items()
    }
    if got != want:
        raise fail(f"statuses {got}, expected {want}")
    start = time.perf_counter()
    for _ in range(n):
        _run({"m.py": b"print(1)"}, ["python", "m.py"], limits=limits)
    rate = n / (time.perf_counter() - start)
    return {"tier": place.tier, "memory_limit": memory, "programs_per_s": rate, **got}
