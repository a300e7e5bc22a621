"""The sandbox against hostile programs: each one is scored not correct with its reason, the run
goes on, and nothing on the host changes (the project's file tree, a canary file outside the
scratch directory, a localhost socket that must receive nothing, no process left behind). And
benign programs across the function-call form, scored as written."""

import hashlib
import os
import socket
import tempfile
import textwrap
from pathlib import Path

import pytest
import yaml

from graft.sandbox import Limits, call_in_sandbox, isolation_problem
from graft.sandbox.calls import judge_calls, same_value

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(bool(isolation_problem()), reason=isolation_problem() or "ok")

LIMITS = Limits(wall_s=3.0, cpu_s=2, memory_bytes=128 << 20, processes=16, stdout_bytes=32 << 10)
CALLS, EXPECTED = [[2, 3], [10, -4]], [5, 6]
PORT = "__PORT__"
SKIPPED_DIRS = {".venv", ".git", "runs", ".ruff_cache", "__pycache__", ".pytest_cache"}
CANARY = "__CANARY__"

# (name, source of `add`, the reasons a careful judge accepts)
HOSTILE = [
    (case["name"], case["source"], set(case["reasons"]))
    for case in yaml.safe_load((ROOT / "tests" / "sandbox_red_team.yaml").read_text())
]


def _tree_digest() -> str:
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(ROOT):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIPPED_DIRS)
        for name in sorted(filenames):
            p = Path(dirpath) / name
            st = p.lstat()
            h.update(f"{p.relative_to(ROOT)} {st.st_size} {st.st_mtime_ns}\n".encode())
    return h.hexdigest()


@pytest.fixture(scope="module")
def listener():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.setblocking(False)
    yield server
    server.close()


@pytest.mark.parametrize("case", HOSTILE, ids=[c[0] for c in HOSTILE])
def test_a_hostile_program_is_not_correct_and_changes_nothing(case, tmp_path, listener):
    _, source, reasons = case
    canary = tmp_path / "canary"
    canary.write_text("intact")
    source = source.replace(CANARY, str(canary)).replace(PORT, str(listener.getsockname()[1]))
    before = _tree_digest()
    outcome, returns = call_in_sandbox(source, "add", CALLS, limits=LIMITS)
    correct, reason, _ = judge_calls(outcome, returns, EXPECTED)
    assert not correct and reason in reasons, (reason, outcome.status, outcome.detail, returns)
    assert canary.read_text() == "intact"
    assert _tree_digest() == before
    with pytest.raises(BlockingIOError):
        listener.accept()
    assert outcome.usage["leftover_processes"] == 0  # no process outlived the run
    assert not any(Path(p).exists() for p in ("/usr/pwned", "/etc/pwned", "/pwned", "/bin/pwned"))


def test_the_red_team_table_is_large_enough():
    assert len(HOSTILE) >= 40


def test_a_daemonized_grandchild_dies_with_the_run(tmp_path):
    """It would write the canary after 1 s; the run ends first, and with it the namespace."""
    canary = tmp_path / "canary"
    source = textwrap.dedent("""
        import os, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                time.sleep(1)
                open('/work/late', 'w').write('x')
            os._exit(0)
        def add(a, b):
            return a + b
    """)
    outcome, returns = call_in_sandbox(source, "add", CALLS, limits=LIMITS)
    assert judge_calls(outcome, returns, EXPECTED)[0]
    import time

    time.sleep(1.5)
    assert outcome.usage["leftover_processes"] == 0 and not canary.exists()


def test_the_groups_of_a_worker_killed_mid_run_are_removed_by_the_next_sandbox():
    """A verifier worker killed (for its time limit) while its program runs leaves its memory
    and pids groups behind; the next sandbox made removes them (their lock is free), and no
    other."""
    import signal
    import subprocess
    import sys
    import time

    from graft.sandbox.cgroups import maker_tag
    from graft.sandbox.run import placement

    program = repr("import time\ndef add(a, b):\n    time.sleep(30)")
    script = (
        "from graft.sandbox import Limits, call_in_sandbox\n"
        f"call_in_sandbox({program}, 'add', [[1, 2]], limits=Limits(wall_s=60.0))"
    )
    worker = subprocess.Popen([sys.executable, "-c", script])
    parents = placement().parents
    mine = maker_tag(worker.pid)
    deadline = time.monotonic() + 30
    while not all(any(p.glob(mine + "*")) for p in parents):
        assert time.monotonic() < deadline and worker.poll() is None
        time.sleep(0.05)
    worker.send_signal(signal.SIGKILL)
    worker.wait()
    time.sleep(0.5)  # its program dies with it (PDEATHSIG), emptying the groups
    assert all(any(p.glob(mine + "*")) for p in parents)  # left behind
    outcome, returns = call_in_sandbox(
        "def add(a, b):\n    return a + b", "add", CALLS, limits=Limits(warm=False)
    )
    assert judge_calls(outcome, returns, EXPECTED)[0]
    assert not any(any(p.glob(mine + "*")) for p in parents)
    assert not any(Path(tempfile.gettempdir()).glob(mine + "*"))  # its staging directory too


SQRT = "import math\ndef {}(x):\n    return math.sqrt(x)"
BENIGN = [
    ("def add(a, b):\n    return a + b", "add", [[2, 3], [10, -4]], [5, 6], {}),
    ("def f(x):\n    return x * 0.1", "f", [[3]], [0.30000000000000004], {}),
    ("def f(x):\n    return sum([0.1] * x)", "f", [[10]], [1.0], {}),  # 0.9999999999999999
    ("def f(xs):\n    return sorted(xs)", "f", [[[3, 1, 2]]], [[1, 2, 3]], {}),
    ("def f(xs):\n    return list(set(xs))", "f", [[[3, 1, 2, 3]]], [[1, 2, 3]], {"unordered": 1}),
    ("def f(s):\n    return s[::-1]", "f", [["abc"], [""]], ["cba", ""], {}),
    ("def f(d):\n    return {k: v * 2 for k, v in d.items()}", "f", [[{"a": 1}]], [{"a": 2}], {}),
    ("def f(n):\n    return n % 2 == 0", "f", [[4], [7]], [True, False], {}),
    ("def f():\n    return None", "f", [[]], [None], {}),
    (SQRT.format("f"), "f", [[2]], [1.4142135623], {"rel_tol": 1e-9}),
    (SQRT.format("g"), "g", [[2]], [1.41421], {"rel_tol": 1e-9}),
]


@pytest.mark.parametrize("case", BENIGN, ids=[c[0].splitlines()[-1].strip() for c in BENIGN])
def test_a_benign_program_is_scored_as_written(case):
    source, function, calls, expected, compare = case
    outcome, returns = call_in_sandbox(source, function, calls, limits=LIMITS)
    correct, reason, share = judge_calls(outcome, returns, expected, **compare)
    want = function != "g"  # 1.41421 is 2.5e-6 off, past the stated 1e-9
    assert (correct, share == 1.0) == (want, want), (reason, outcome, returns)


def test_same_value_is_strict_about_types_and_order():
    assert same_value(1, 1.0) and not same_value(True, 1) and not same_value("5", 5)
    assert not same_value([1, 2], [2, 1]) and same_value([1, 2], [2, 1], unordered=True)
    assert not same_value(float("nan"), float("nan"))


def test_a_large_stdin_is_fed_while_the_program_runs_and_an_unread_one_never_hangs():
    from graft.sandbox import run_sandboxed

    big = b"1\n" * 300_000  # far more than a pipe holds
    summing = b"import sys\nprint(sum(int(x) for x in sys.stdin))"
    outcome = run_sandboxed({"m.py": summing}, ["python", "m.py"], stdin=big, limits=LIMITS)
    assert (outcome.status, outcome.stdout) == ("ok", b"300000\n")
    ignoring = b"import time\ntime.sleep(60)"
    outcome = run_sandboxed({"m.py": ignoring}, ["python", "m.py"], stdin=big, limits=LIMITS)
    assert outcome.status == "timeout"  # killed at the wall clock: it would sleep for 60 s
