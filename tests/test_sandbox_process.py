"""The sandbox's process model: a program is a child of the sandbox's init, in its own session,
so a death by signal is a death (and named), no host-side process is within its reach, and two
graft processes in different PID namespaces never remove each other's groups. Its tiers: the
cgroup v1 groups of this machine, cgroup v2 on a directory laid out like one, and the
namespaces-only tier with its watch."""

import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from graft.sandbox import Limits, call_in_sandbox, isolation_problem, run_sandboxed
from graft.sandbox.calls import judge_calls
from graft.sandbox.cgroups import Group, Placement, find_placement, sweep

ROOT = Path(__file__).resolve().parents[1]
needs_sandbox = pytest.mark.skipif(bool(isolation_problem()), reason=isolation_problem() or "ok")
LIMITS = Limits(wall_s=3.0, cpu_s=2, memory_bytes=128 << 20, processes=16)
CALLS, EXPECTED = [[2, 3], [10, -4]], [5, 6]
ADD = "def add(a, b):\n    return a + b\n"


SELF_KILLS = {
    "SIGSEGV": "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n",
    "SIGKILL": "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n",
    "SIGTERM": "import os, signal\nos.kill(os.getpid(), signal.SIGTERM)\n",
    "SIGABRT": "import os\nos.abort()\n",
    "faulthandler": "import faulthandler\nfaulthandler._sigsegv()\n",
}


@needs_sandbox
@pytest.mark.parametrize("name", sorted(SELF_KILLS))
def test_a_program_that_kills_itself_is_not_correct_and_the_signal_is_named(name):
    """As PID 1 of its namespace, a program's signals to itself were dropped and it went on to
    score correct; as a child of the sandbox's init they end it."""
    outcome, returns = call_in_sandbox(ADD + SELF_KILLS[name], "add", CALLS, limits=LIMITS)
    correct, reason, _ = judge_calls(outcome, returns, EXPECTED)
    assert (correct, reason) == (False, "runtime_error"), outcome
    signal_name = "SIGSEGV" if name == "faulthandler" else name
    assert outcome.detail == f"killed by {signal_name}", outcome.detail


@needs_sandbox
def test_a_program_is_alone_in_its_session_and_cannot_reach_any_host_side_process():
    """It leads its own session and process group; SIGSTOP and SIGKILL to its parent, to every
    process it may signal and to its parent's group (which it cannot even name: its id is 0
    from inside) reach nobody but the sandbox's init, which ignores them, so its correct answer
    stays correct and on time."""
    source = ADD + textwrap.dedent("""
        import os, signal
        alone = os.getsid(0) == os.getpid() == os.getpgrp()
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            for send in (lambda: os.kill(os.getppid(), sig),
                         lambda: os.killpg(os.getpgid(os.getppid()) or -1, sig),
                         lambda: os.kill(-1, sig)):
                try:
                    send()
                except OSError:
                    pass
        if not alone:
            raise SystemExit(3)
    """)
    outcome, returns = call_in_sandbox(source, "add", CALLS, limits=LIMITS)
    assert judge_calls(outcome, returns, EXPECTED)[0], (outcome.status, outcome.detail)
    assert outcome.status == "ok"  # on time: nothing it sent stopped or delayed it
    again = call_in_sandbox(ADD, "add", CALLS, limits=LIMITS)  # the sandbox still serves
    assert judge_calls(*again, EXPECTED)[0]


@needs_sandbox
def test_nothing_a_program_leaves_reaches_the_next_program():
    """Files in /work, /tmp and /dev/shm and a detached process are gone before the next
    program starts (a policy must not read what an earlier response cached)."""
    plant = textwrap.dedent("""
        import os, time
        for d in ("/work", "/tmp", "/dev/shm"):
            open(d + "/cache", "w").write("5")
        if os.fork() == 0:
            os.setsid()
            time.sleep(30)
        print("planted")
    """)
    look = textwrap.dedent("""
        import os
        seen = [d for d in ("/work", "/tmp", "/dev/shm") if os.path.exists(d + "/cache")]
        others = [p for p in os.listdir("/proc") if p.isdigit() and int(p) not in (1, os.getpid())]
        print(seen, others)
    """)
    first = run_sandboxed({"m.py": plant.encode()}, ["python", "m.py"], limits=LIMITS)
    assert (first.status, first.stdout) == ("ok", b"planted\n")
    second = run_sandboxed({"m.py": look.encode()}, ["python", "m.py"], limits=LIMITS)
    assert (second.status, second.stdout) == ("ok", b"[] []\n")


@needs_sandbox
def test_a_sandbox_that_cannot_start_is_the_status_error_not_an_exception(monkeypatch):
    import graft.sandbox.warm as warm

    monkeypatch.setattr(warm, "ZYGOTE", ROOT / "no-such-zygote.py")
    outcome = run_sandboxed({"m.py": b"print(1)"}, ["python", "m.py"], limits=Limits(warm=False))
    assert outcome.status == "error" and "did not start" in outcome.detail, outcome


def test_the_python_under_tmp_is_reported_by_the_isolation_check(tmp_path):
    """The sandbox has private /tmp and /dev/shm: an interpreter installed there cannot run
    inside, and the isolation check, which runs one real program, says so before training."""
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("needs root to bind-mount an interpreter under /tmp")
    prefix = os.path.realpath(sys.base_prefix)
    if prefix.startswith(("/tmp", "/dev/shm")):
        pytest.skip("this Python is under /tmp already")
    under_tmp = Path("/tmp") / f"graft-py-{os.getpid()}"
    exe = under_tmp / "bin" / Path(os.path.realpath(sys.executable)).name
    site = [p for p in sys.path if p.endswith("site-packages")]
    script = "from graft.sandbox import isolation_problem; print(isolation_problem())"
    shell = (
        f"mkdir -p {under_tmp} && mount --bind {prefix} {under_tmp} && "
        f"{exe} -c {script!r}; umount {under_tmp}; rmdir {under_tmp}"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), *site])}
    out = subprocess.run(["unshare", "--mount", "sh", "-c", shell], capture_output=True,
                         text=True, env=env, timeout=120)  # fmt: skip
    assert "a test program did not run in the sandbox" in out.stdout, (out.stdout, out.stderr)
    assert "installed under /tmp" in out.stdout


# ------------------------------------------------------------------------ tiers


@needs_sandbox
def test_the_namespaces_tier_watches_memory_and_processes(monkeypatch):
    """With no writable cgroup, the init sums its processes' memory and counts them: a program
    whose processes together go over the memory limit is `memory`, a fork bomb is stopped, and
    a plain program still runs."""
    import graft.sandbox.run as run

    monkeypatch.setattr(run, "placement", lambda: Placement("namespaces"))
    limits = Limits(wall_s=5.0, cpu_s=4, memory_bytes=96 << 20, processes=8, warm=False)
    hog = textwrap.dedent("""
        import os, time
        os.fork(); os.fork()  # four processes, 40 MiB each: 160 MiB together
        block = bytearray(40 << 20)
        time.sleep(3)
    """)
    outcome = run_sandboxed({"m.py": hog.encode()}, ["python", "m.py"], limits=limits)
    assert outcome.status == "memory", outcome
    bomb = "import os, time\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n" \
           "        time.sleep(0.01)\n"  # fmt: skip
    outcome = run_sandboxed({"m.py": bomb.encode()}, ["python", "m.py"], limits=limits)
    assert (outcome.status, outcome.detail) == ("runtime_error", "more than 8 processes (watched)")
    assert outcome.usage["leftover_processes"] == 0
    plain = run_sandboxed({"m.py": b"print(sum(range(10)))"}, ["python", "m.py"], limits=limits)
    assert (plain.status, plain.stdout) == ("ok", b"45\n")


def _fake_v2(tmp_path: Path) -> tuple[Path, Path]:
    """A cgroup v2 tree as the kernel lays it out, this process in /user/app (a leaf), its
    parent /user delegated (memory and pids enabled for its children); and a /proc/self."""
    mount = tmp_path / "cgroup"
    for d, controllers, enabled in (
        (mount, "cpu io memory pids", "memory pids"),
        (mount / "user", "memory pids", "memory pids"),
        (mount / "user" / "app", "memory pids", ""),
    ):
        d.mkdir(parents=True, exist_ok=True)
        (d / "cgroup.controllers").write_text(controllers + "\n")
        (d / "cgroup.subtree_control").write_text(enabled + "\n")
        (d / "cgroup.procs").write_text("")
    (mount / "user" / "app" / "cgroup.procs").write_text(f"{os.getpid()}\n")
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "cgroup").write_text("0::/user/app\n")
    (proc / "mountinfo").write_text(
        f"30 1 0:26 / {mount} rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 "
        "rw,nsdelegate,memory_recursiveprot\n"
    )
    return mount, proc


def test_cgroup_v2_groups_are_made_in_the_delegated_subtree_with_their_limits(tmp_path):
    mount, proc = _fake_v2(tmp_path)
    place = find_placement(proc)
    assert place == Placement("cgroup_v2", (mount / "user",))
    group = Group(place)
    (d,) = group.dirs
    assert d.parent == mount / "user" and d.name.startswith("graft-sandbox-")
    group.set_limits(64 << 20, 12)
    assert (d / "memory.max").read_text() == str(64 << 20)
    assert (d / "pids.max").read_text() == "12"
    assert (d / "memory.swap.max").read_text() == "0"
    (d / "memory.events").write_text("low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n")
    before = group.out_of_memory_count()
    (d / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n")
    assert group.out_of_memory_count() > before
    assert sweep(mount / "user") == 0  # its maker (this process) holds its lock
    for name in ("memory.max", "pids.max", "memory.swap.max", "memory.events"):
        (d / name).unlink()  # the kernel's files go with the group; a plain directory's do not
    group.remove()
    assert not d.exists()


def test_a_cgroup_v2_tree_with_no_delegated_subtree_falls_back_with_the_reason(tmp_path):
    mount, proc = _fake_v2(tmp_path)
    (mount / "user" / "cgroup.subtree_control").write_text("")
    (mount / "user" / "cgroup.procs").write_text("1\n")
    (mount / "user" / "cgroup.controllers").write_text("cpu\n")  # memory not handed down
    (mount / "cgroup.controllers").write_text("cpu\n")
    place = find_placement(proc)
    assert place.tier != "cgroup_v2"
    assert "no delegated cgroup v2 subtree above /user/app" in place.why


def test_the_sweep_removes_only_groups_whose_maker_is_gone_in_any_pid_namespace(tmp_path):
    """A group locked by a live maker in another PID namespace stays; a group whose maker died
    (its lock released) goes."""
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("needs root to make a PID namespace")
    parent = tmp_path / "memory"
    live, dead = parent / "graft-sandbox-1-7-live", parent / "graft-sandbox-1-7-dead"
    live.mkdir(parents=True)
    dead.mkdir()
    holder = textwrap.dedent(f"""
        import fcntl, os, sys, time
        fd = os.open({str(live)!r}, os.O_RDONLY | os.O_DIRECTORY)
        fcntl.flock(fd, fcntl.LOCK_EX)
        print(os.getpid(), flush=True)
        time.sleep(60)
    """)
    command = ["unshare", "--pid", "--fork", "--kill-child", sys.executable, "-c", holder]
    maker = subprocess.Popen(command, stdout=subprocess.PIPE)
    try:
        assert maker.stdout.readline().strip() == b"1"  # PID 1 of its own namespace
        assert sweep(parent) == 1
        assert live.exists() and not dead.exists()
    finally:
        maker.kill()
        maker.wait()
    time.sleep(0.2)
    assert sweep(parent) == 1 and not live.exists()


# ------------------------------------------------------------------------ doctor and limits


def _doctor(**env: str) -> subprocess.CompletedProcess:
    graft = Path(sys.executable).with_name("graft")
    return subprocess.run([str(graft), "code", "doctor"], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=120)  # fmt: skip


@needs_sandbox
def test_graft_code_doctor_prints_the_tier_and_every_limit_with_its_status():
    done = _doctor()
    lines = done.stdout.splitlines()
    tier = find_placement().tier
    assert done.returncode == 0 and lines[0] == f"sandbox tier: {tier}", done.stdout
    rows = [x for x in lines if "  enforced  " in x or "  weaker  " in x]
    assert len(rows) == 22 and "a real program: ok, printed '42'" in lines[-1]
    if tier in ("cgroup_v1", "cgroup_v2") and os.geteuid() == 0:  # this machine's: all enforced
        assert all("  enforced  " in x for x in rows), done.stdout
    row = {x.split("  ")[1].strip(): x for x in rows}
    if os.geteuid() == 0:
        assert "2000000000: its own, not root, not the init's" in row["program's host uid"]
    assert "mounted ro," in row["/proc"] and "to write: E" in row["/proc"]
    # The interpreter a program gets, read off a real program, each with where it comes from.
    assert "  enforced  " in row["interpreter flags"] and "-I -S -B:" in row["interpreter flags"]
    assert "exit, quit, help, copyright, credits, license in builtins" in row["site's names"]
    assert row["signal dispositions"].split("enforced")[1].split(":")[0].strip() == (
        "SIGPIPE ignored, SIGXFSZ ignored, SIGINT KeyboardInterrupt"
    )
    assert "64 tasks" in row["processes"] and "DEFAULT_POOL_THREADS" in row["processes"]
    assert "output_cap" in row["output"]
    weaker = _doctor(GRAFT_SANDBOX_TIER="namespaces")
    assert weaker.stdout.startswith("sandbox tier: namespaces (weaker)")
    weaker_rows = [x for x in weaker.stdout.splitlines() if "  weaker  " in x]
    assert [x.split("  ")[1].strip() for x in weaker_rows] == [
        "memory, all processes together",
        "processes",
        "memory returned",
    ]
    bad = _doctor(GRAFT_SANDBOX_TIER="cgroup_v3")
    assert bad.returncode == 1 and bad.stdout.strip() == (
        "sandbox: cannot isolate programs here: GRAFT_SANDBOX_TIER=cgroup_v3: "
        "use one of cgroup_v2, cgroup_v1, namespaces"
    )


@needs_sandbox
def test_a_warm_sandbox_takes_a_higher_memory_limit_after_a_lower_one():
    """cgroup v1 refuses a memory limit above memory+swap's: raised in the right order."""
    for memory in (128 << 20, 256 << 20, 64 << 20, 512 << 20):
        limits = Limits(memory_bytes=memory)
        outcome = run_sandboxed({"m.py": b"print(1)"}, ["python", "m.py"], limits=limits)
        assert outcome.status == "ok", (memory, outcome.detail)


@needs_sandbox
def test_a_reply_larger_than_a_pipe_reaches_the_checker_whole():
    """The relay between the two sandboxes queues what a pipe cannot take at once."""
    import json

    from graft.verify.code.verifier import verify_code

    gold = json.dumps({"form": "assert", "function": "f",
                       "tests": ["assert f(200000) == 'x' * 200000"]})  # fmt: skip
    verdict = verify_code("```python\ndef f(n):\n    return 'x' * n\n```", gold)
    assert verdict.correct, verdict


# ------------------------------------------------------------------------ the programs' identity


def test_the_programs_ids_by_where_graft_runs():
    """Root of the host: programs get a uid of their own; not root: the trainer's (weaker, and
    said); root of a user namespace mapped to an unprivileged id: that id; root of one that maps
    only the host's root: refused, as is a bad GRAFT_SANDBOX_UID."""
    from graft.sandbox.identity import PROGRAM_ID, choose

    host = "0 0 4294967295\n"
    ident = choose(0, 0, True, host, host)
    assert (ident.host_uid, ident.program_id, ident.why_shared) == (2_000_000_000, PROGRAM_ID, "")
    assert ident.uid_map == f"0 0 1\n{PROGRAM_ID} 2000000000 1\n" and not ident.deny_setgroups
    assert choose(0, 0, True, host, host, named="123456").host_uid == 123456
    user = choose(1000, 1000, False, host, host)
    assert (user.host_uid, user.program_id, user.uid_map) == (1000, 0, "0 1000 1\n")
    assert user.deny_setgroups and "not root" in user.why_shared
    remapped = choose(0, 0, True, "0 100000 65536\n", "0 100000 65536\n")
    assert remapped.program_id == 0 and "GRAFT_SANDBOX_UID" in remapped.why_shared
    assert choose(0, 0, True, "0 100000 65536\n", "0 100000 65536\n", "40000").program_id
    with pytest.raises(ValueError, match="would run as root of the host"):
        choose(0, 0, True, "0 0 1\n", "0 0 1\n")  # `unshare -r` run by root
    for bad in ("0", "-5", "x", "4294967295"):
        with pytest.raises(ValueError, match="GRAFT_SANDBOX_UID"):
            choose(0, 0, True, host, host, named=bad)


@needs_sandbox
def test_a_sandbox_with_one_id_runs_programs_as_root_of_their_own_namespace_only(monkeypatch):
    """Where only one id can be mapped (graft not root), a program is root of a user namespace
    of its own: /proc stays read-only and the filter on."""
    import graft.sandbox.warm as warm
    from graft.sandbox.identity import Identity

    uid, gid = os.geteuid(), os.getegid()
    single = Identity(uid, gid, 0, f"0 {uid} 1\n", f"0 {gid} 1\n", True, "one id")
    monkeypatch.setattr(warm.identity, "identity", lambda: single)
    look = (
        "import os\n"
        "try:\n    open('/proc/sys/vm/swappiness', 'r+')\n"
        "except OSError as e:\n    print(e.errno)\n"
        "print(open('/proc/self/uid_map').read().split())\n"
        "print([l.split()[1] for l in open('/proc/self/status') if l.startswith('Seccomp:')])\n"
    )
    outcome = run_sandboxed({"m.py": look.encode()}, ["python", "m.py"],
                            limits=Limits(warm=False))  # fmt: skip
    import errno

    assert outcome.status == "ok", outcome
    assert outcome.stdout.decode().splitlines() == [str(errno.EROFS), str(["0", "0", "1"]), "['2']"]


@needs_sandbox
def test_without_libseccomp_the_doctor_names_the_filter_weaker(monkeypatch):
    """No filter where libseccomp is missing: the sandbox still runs (its namespaces are the
    first wall), and the doctor says which defence is weaker and why, from what a program saw."""
    import graft.sandbox.doctor as doctor
    import graft.sandbox.warm as warm
    from graft.sandbox.seccomp import Filter

    missing = Filter(problem="libseccomp is not installed (Debian and Ubuntu: apt install ...)")
    monkeypatch.setattr(warm.seccomp, "compiled", lambda: missing)
    monkeypatch.setattr(doctor, "compiled", lambda: missing)
    warm.ZYGOTES.close()  # the next sandbox starts without the filter
    try:
        rows = {r["limit"]: r for r in doctor.report()["limits"]}
    finally:
        warm.ZYGOTES.close()
    assert rows["seccomp filter"]["status"] == "weaker"
    assert rows["seccomp filter"]["how"] == f"none: {missing.problem}"
    assert rows["/proc"]["status"] == "enforced"


@needs_sandbox
def test_an_init_whose_limits_were_changed_is_replaced():
    """Its limits changed from outside between two programs (no program can: they run under
    another uid, and prlimit on another process is filtered), the init says so after the next
    program, and graft starts a new sandbox rather than keep it."""
    import resource

    import graft.sandbox.warm as warm

    assert run_sandboxed({"m.py": b"print(1)"}, ["python", "m.py"]).status == "ok"
    zygote = warm.ZYGOTES.idle[-1]
    (init,) = (int(c) for t in Path(f"/proc/{zygote.proc.pid}/task").iterdir()
               for c in (t / "children").read_text().split())  # fmt: skip
    resource.prlimit(init, resource.RLIMIT_NOFILE, (200, 200))
    before = warm.RETIRED["changed"]
    first = run_sandboxed({"m.py": b"print(2)"}, ["python", "m.py"])
    assert (first.status, first.stdout) == ("ok", b"2\n")
    assert warm.RETIRED["changed"] == before + 1 and zygote not in warm.ZYGOTES.idle
    assert not zygote.alive()
    second = run_sandboxed({"m.py": b"print(3)"}, ["python", "m.py"])
    assert (second.status, second.stdout) == ("ok", b"3\n")


def test_a_group_that_keeps_memory_after_its_program_is_not_kept():
    """Memory a program left charged (as memfds in flight once did) is waited for, with the
    kernel asked to collect and reclaim; what stays past the allowance retires the sandbox."""
    import graft.sandbox.warm as warm

    class Group:
        def __init__(self, left: list[int]) -> None:
            self.left, self.reclaimed = left, 0

        def memory_used(self) -> int:
            return self.left.pop(0) if len(self.left) > 1 else self.left[0]

        def reclaim(self) -> None:
            self.reclaimed += 1

    settles = Group([100 << 20, 50 << 20, 1 << 20])
    assert warm.memory_left(settles) == 0 and settles.reclaimed == 1
    stays = Group([120 << 20])
    assert warm.memory_left(stays) == (120 << 20) - warm.SETTLED_BYTES
    assert warm.memory_left(Group([1 << 20])) == 0
