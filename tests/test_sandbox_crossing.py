"""One program against the next: an attacker, then a victim, through the same warm sandbox and
through one verifier pool worker, beside the victim alone in a sandbox of its own. Each class of
what the sandbox once let cross has its tests (tests/sandbox_channels.py holds the programs):
1. the host's kernel settings (the program is never host root; /proc is read-only);
2. answers passed from one program to the next (System V IPC, POSIX message queues, keyrings,
   the host name, IPC and network sysctls, an rlimit of the init, /proc/1, abstract sockets);
3. a sandbox broken for every later program (the init's rlimits, memory left charged);
4. the trainer's session keyring;
5. results a program writes itself."""

import ctypes
import os
import platform
import time
from pathlib import Path

import pytest

from graft.sandbox import Limits, call_in_sandbox, isolation_problem
from graft.sandbox.calls import judge_calls
from graft.verify.code.verifier import CodeTests
from graft.verify.pool import VerifierPool
from sandbox_channels import (
    BREAKER_VICTIMS,
    BREAKERS,
    CHANNELS,
    CORRECT,
    FORGES_RESULTS,
    HOST_SYSCTLS,
    KEY_QUOTA,
    READS_TRAINER_KEYRING,
    WRITES_HOST_SYSCTLS,
    attacker,
    breaker,
    victim,
)

pytestmark = [
    pytest.mark.skipif(bool(isolation_problem()), reason=isolation_problem() or "ok"),
    pytest.mark.xdist_group("sandbox-crossing"),
]
LIMITS = Limits(wall_s=4.0, cpu_s=3)
CALLS, EXPECTED = [[2, 3], [10, -4]], [5, 6]
GOLD = CodeTests("call", "add", ((2, 3), (10, -4)), (5, 6)).to_gold()
KEYS = {"x86_64": (248, 250), "aarch64": (217, 219)}.get(platform.machine())


def correct_in_process(source: str, *, warm: bool = True) -> bool:
    limits = Limits(wall_s=LIMITS.wall_s, cpu_s=LIMITS.cpu_s, warm=warm)
    outcome, returns = call_in_sandbox(source, "add", CALLS, limits=limits)
    return judge_calls(outcome, returns, EXPECTED)[0]


@pytest.fixture(scope="module")
def pool():
    with VerifierPool(workers=1, timeout_s=20) as p:
        yield p


def correct_in_pool(pool: VerifierPool, source: str) -> bool:
    (verdict,) = pool.verify([("code", f"```python\n{source}```", GOLD, "")])
    return verdict.correct


def after(pool: VerifierPool | None, first: str, second: str) -> bool:
    """Whether `second` is correct right after `first` ran in the same warm sandbox (or
    `pool`'s one worker)."""
    if pool is None:
        correct_in_process(first)
        return correct_in_process(second)
    correct_in_pool(pool, first)
    return correct_in_pool(pool, second)


# ---------------------------------------------------------------- 2. answers passed on


@pytest.mark.parametrize("channel", sorted(CHANNELS))
def test_answers_left_by_one_program_never_reach_the_next(channel, pool):
    if "keyring" in channel and KEYS is None:
        pytest.skip(f"no keyring system call numbers for {platform.machine()}")
    assert not correct_in_process(victim(channel), warm=False)  # alone: wrong
    assert correct_in_process(attacker(channel))  # the attacker itself is right
    assert not after(None, attacker(channel), victim(channel)), "through the warm sandbox"
    assert not after(pool, attacker(channel), victim(channel)), "through a pool worker"


# ---------------------------------------------------------------- 3. a sandbox broken for later


@pytest.mark.parametrize("name", sorted(BREAKERS))
def test_no_program_breaks_the_programs_after_it(name, pool):
    later = BREAKER_VICTIMS.get(name, CORRECT)
    assert correct_in_process(later, warm=False)  # alone: right
    for where in (None, pool):
        assert after(where, breaker(name), later), ("pool" if where else "warm", name)
        assert after(where, breaker(name), CORRECT), ("pool" if where else "warm", name)


def _key_users() -> dict[str, tuple[int, int]]:
    """/proc/key-users: the keys and key bytes charged to each uid."""
    path = Path("/proc/key-users")
    if not path.exists():
        return {}
    out = {}
    for line in path.read_text().splitlines():
        fields = line.split()
        keys, size = (int(f.split("/")[0]) for f in fields[3:5])
        out[fields[0].rstrip(":")] = (keys, size)
    return out


@pytest.mark.skipif(KEYS is None, reason="no keyring system call numbers here")
def test_a_program_cannot_fill_a_key_quota(pool):
    """The quota is per host uid: filling it (as host root, the trainer's own) once left later
    key operations failing; now no program can make a key, so no uid's count moves beyond the
    session keyrings of the sandboxes themselves (one each)."""
    before = _key_users()
    for where in (None, pool):
        assert after(where, KEY_QUOTA, CORRECT)
    now = _key_users()
    for uid, (keys, size) in now.items():
        was_keys, was_size = before.get(uid, (0, 0))
        assert keys <= was_keys + 8 and size <= was_size + 8 * 64, (uid, before, now)


# ---------------------------------------------------------------- 1. the host's kernel settings


def _sysctls() -> dict[str, str]:
    return {name: Path("/proc/sys", name).read_text() for name in HOST_SYSCTLS}


def test_a_program_cannot_write_the_hosts_kernel_settings(pool):
    """It writes each sysctl's own value back: the write itself is refused (cold, warm, pool),
    and nothing changes on the host."""
    before = _sysctls()
    assert correct_in_process(WRITES_HOST_SYSCTLS, warm=False)
    assert correct_in_process(WRITES_HOST_SYSCTLS)
    assert correct_in_pool(pool, WRITES_HOST_SYSCTLS)
    assert _sysctls() == before


def test_a_program_runs_under_a_host_uid_of_its_own():
    """Seen from the host while it runs: never uid 0, never the sandbox's init's uid (where
    graft runs as root: without root, a process can map only its own uid)."""
    import threading

    from graft.sandbox.warm import ZYGOTES

    if os.geteuid() != 0:
        pytest.skip("graft is not root here: programs run as its own uid")
    assert correct_in_process(CORRECT)
    zygote = ZYGOTES.idle[-1]
    if zygote.group is None:
        pytest.skip("no cgroup to find the program's processes by")
    done = threading.Event()
    sleeper = "import time\ntime.sleep(1.0)\n" + CORRECT
    threading.Thread(target=lambda: (correct_in_process(sleeper), done.set())).start()
    seen: set[tuple[str, ...]] = set()
    while not done.is_set():
        for pid in zygote.group.pids.joinpath("cgroup.procs").read_text().split():
            seen.add(tuple(_status(pid, "Uid")))
        time.sleep(0.05)
    inits = {tuple(_status(str(p), "Uid")) for p in _tree(zygote.proc.pid)}
    assert seen and not seen & inits, (seen, inits)
    assert all(len(set(uids)) == 1 and uids[0] != "0" for uids in seen), seen


def _tree(pid: int) -> list[int]:
    out = [pid]
    for task in Path(f"/proc/{pid}/task").iterdir():
        children = (task / "children").read_text().split()
        for child in children:
            out += _tree(int(child))
    return out


def _status(pid: str, field: str) -> list[str]:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return line.split()[1:]
    return []


# ---------------------------------------------------------------- 4. the trainer's keyring

_libc = ctypes.CDLL(None, use_errno=True)


@pytest.mark.skipif(KEYS is None, reason="no keyring system call numbers here")
def test_the_trainers_session_keyring_is_out_of_reach():
    """A key in the session keyring of the process that starts the sandbox (a login session's
    token) is neither readable nor replaceable by a program, in a new warm sandbox or a new
    pool worker (both inherit the keyring the trainer has when they start)."""
    add_key, keyctl = KEYS
    if _libc.syscall(keyctl, 1, b"graft-test-session") < 0:  # join a session keyring of our own
        pytest.skip(f"no session keyring here ({os.strerror(ctypes.get_errno())})")
    secret = b"trainer-token"
    key = _libc.syscall(add_key, b"user", b"graft-answers", secret, len(secret), -3)
    assert key > 0
    from graft.sandbox.warm import ZYGOTES

    ZYGOTES.close()  # the next sandboxes start now, under this keyring
    assert correct_in_process(READS_TRAINER_KEYRING)
    assert correct_in_process(READS_TRAINER_KEYRING, warm=False)
    with VerifierPool(workers=1, timeout_s=20) as fresh:
        assert correct_in_pool(fresh, READS_TRAINER_KEYRING)
    buf = ctypes.create_string_buffer(64)
    n = _libc.syscall(keyctl, 11, key, buf, 64)
    assert buf.raw[:n] == secret


# ---------------------------------------------------------------- 5. results it writes itself


def test_results_a_program_writes_itself_are_never_taken(pool):
    assert not correct_in_process(FORGES_RESULTS, warm=False)
    assert not correct_in_process(FORGES_RESULTS)
    assert not correct_in_pool(pool, FORGES_RESULTS)
    assert correct_in_process(CORRECT)  # and the sandbox still serves
