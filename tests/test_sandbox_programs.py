"""Correct programs judged correct: what the standard interpreter gives a program, the sandbox
gives it too, through the verifier pool that training uses, on every path (warm, cold and
`unsafe_local`). Each class has its hostile twin, which the defence it borders on still refuses.

The classes (each failed before: a reward of 0 for a right answer):
- a program's own future flags only (a dataclass field's type used at run time), and its module
  in `sys.modules` (dataclasses, pickle);
- the names `site` gives an interpreter (`exit()`, `quit()`), without site's other effects
  (site-packages on the path);
- CPython's signal dispositions (SIGPIPE ignored, SIGINT as KeyboardInterrupt);
- a default thread pool (32 workers on a host of 28 cores or more), while a fork bomb and a
  thread bomb stop at the task limit;
- an expected output larger than the default cap, while an endless printer is still cut off;
- /dev/stdin, and prlimit on its own pid, while another process's fds and limits stay out of
  reach.
"""

from __future__ import annotations

import os

import pytest

from graft.sandbox import isolation_problem
from graft.sandbox.limits import DEFAULT_POOL_THREADS
from graft.verify.code.verifier import CodeTests, verify_code
from graft.verify.pool import VerifierPool

pytestmark = pytest.mark.skipif(bool(isolation_problem()), reason=isolation_problem() or "ok")


def stdio(out: str, given: str = "") -> CodeTests:
    return CodeTests("stdio", stdin=(given,), stdout=(out,))


DATACLASS = """from dataclasses import dataclass, fields

@dataclass
class Row:
    n: int

row = Row(fields(Row)[0].type(input()))
print(row.n * 2)
"""
OWN_FUTURE = """from __future__ import annotations
from dataclasses import dataclass, fields

@dataclass
class Row:
    n: int

print(fields(Row)[0].type)
"""
PICKLED = """import pickle
from dataclasses import dataclass

@dataclass(frozen=True)
class P:
    x: int
    y: int

def add(a, b):
    return pickle.loads(pickle.dumps(P(a, b))).x + P(a, b).y
"""
THREAD_POOL = f"""import threading
from concurrent.futures import ThreadPoolExecutor

workers = {DEFAULT_POOL_THREADS}
together = threading.Barrier(workers + 1)  # every worker alive at once

def square(i):
    together.wait()
    return i * i

with ThreadPoolExecutor(max_workers=workers) as pool:
    done = [pool.submit(square, i) for i in range(workers)]
    together.wait()
    print(sum(f.result() for f in done))
"""
BIG = 3 << 20  # three times the sandbox's default output cap

LEGITIMATE = {
    "a dataclass field's type used at run time": (DATACLASS, stdio("42\n", "21\n")),
    "its own `from __future__ import annotations`": (OWN_FUTURE, stdio("int\n")),
    "a dataclass pickled through its module (call)": (
        PICKLED,
        CodeTests("call", "add", ((2, 3),), (5,)),
    ),
    "a dataclass pickled through its module (assert)": (
        PICKLED,
        CodeTests("assert", "add", tests=("assert add(2, 3) == 5",)),
    ),
    "exit() after the answer": ("print(int(input()) + 1)\nexit()", stdio("2\n", "1\n")),
    "quit(0) after the answer": ("print(int(input()) + 1)\nquit(0)", stdio("2\n", "1\n")),
    "SIGPIPE ignored: a closed pipe is BrokenPipeError": (
        "import os, signal\nr, w = os.pipe()\nos.close(r)\n"
        "try:\n    os.write(w, b'x')\nexcept BrokenPipeError:\n    print('caught')\n",
        stdio("caught\n"),
    ),
    "SIGINT as KeyboardInterrupt": (
        "import _thread, time\ntry:\n    _thread.interrupt_main()\n    time.sleep(2)\n"
        "except KeyboardInterrupt:\n    print('interrupted')\n",
        stdio("interrupted\n"),
    ),
    "a default thread pool's 32 workers at once": (
        THREAD_POOL,
        stdio(f"{sum(i * i for i in range(DEFAULT_POOL_THREADS))}\n"),
    ),
    "an expected output of 3 MiB": (f"print('x' * {BIG})", stdio("x" * BIG + "\n")),
    "reading /dev/stdin": (
        "print(open('/dev/stdin').read().strip()[::-1])",
        stdio("cba\n", "abc\n"),
    ),
    "prlimit on its own pid": (
        "import os, resource\nlimits = resource.prlimit(os.getpid(), resource.RLIMIT_NOFILE)\n"
        "resource.prlimit(os.getpid(), resource.RLIMIT_NOFILE, limits)\nprint('kept')\n",
        stdio("kept\n"),
    ),
}

HOSTILE_TWINS = {
    "a fork bomb at the default limits": (
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
        stdio("never\n"),
    ),
    "a thread bomb at the default limits": (
        "import threading, time\nwhile True:\n"
        "    threading.Thread(target=time.sleep, args=(60,)).start()\n",
        stdio("never\n"),
    ),
    "an endless printer where 3 MiB is expected": (
        "while True:\n    print('x' * 65536)",
        stdio("x" * BIG + "\n"),
    ),
    "a package from site-packages (site's path)": (
        "import pip\nprint('imported')",
        stdio("imported\n"),
    ),
    "another process's standard input": ("print(open('/proc/1/fd/0').read())", stdio("\n")),
    "prlimit on another process": (
        "import resource\nresource.prlimit(1, resource.RLIMIT_NOFILE, (1, 1))\nprint('lowered')",
        stdio("lowered\n"),
    ),
    "SIGINT and SIGTERM ignored, then a loop": (
        "import signal\nfor s in (signal.SIGINT, signal.SIGTERM):\n"
        "    signal.signal(s, signal.SIG_IGN)\nwhile True:\n    pass\n",
        stdio("never\n"),
    ),
}


def block(source: str) -> str:
    return f"My program:\n```python\n{source}\n```\n"


@pytest.fixture(scope="module")
def judged():
    """Every program above through the verifier pool: {name: verdict}."""
    rows = {**LEGITIMATE, **HOSTILE_TWINS}
    items = [("code", block(src), tests.to_gold(), "") for src, tests in rows.values()]
    with VerifierPool(workers=2, timeout_s=60) as pool:
        return dict(zip(rows, pool.verify(items), strict=True))


@pytest.mark.parametrize("name", LEGITIMATE)
def test_a_correct_program_is_judged_correct_through_the_pool(judged, name):
    verdict = judged[name]
    assert verdict.correct, (name, verdict)


@pytest.mark.parametrize("name", HOSTILE_TWINS)
def test_its_hostile_twin_is_still_refused(judged, name):
    verdict = judged[name]
    assert not verdict.correct, (name, verdict)
    if "printer" in name:
        assert verdict.reason == "output_limit", verdict
    if "bomb" in name or "loop" in name:
        assert verdict.reason in ("runtime_error", "memory", "timeout"), verdict


@pytest.mark.parametrize("path", ["cold", "unsafe_local"])
def test_every_path_gives_a_program_the_same_interpreter(path, monkeypatch):
    """The cold sandbox (one per program) and `unsafe_local` (no isolation) run Python programs
    as the warm sandbox does (graft.sandbox.program)."""
    if path == "cold":
        monkeypatch.setenv("GRAFT_SANDBOX_COLD", "1")
    names = ["a dataclass field's type used at run time", "exit() after the answer",
             "SIGINT as KeyboardInterrupt", "SIGPIPE ignored: a closed pipe is BrokenPipeError",
             "a dataclass pickled through its module (assert)"]  # fmt: skip
    for name in names:
        source, tests = LEGITIMATE[name]
        verdict = verify_code(block(source), tests.to_gold(), unsafe=path == "unsafe_local")
        assert verdict.correct, (path, name, verdict)


def test_the_task_limit_holds_a_default_thread_pool_on_any_host():
    """A default ThreadPoolExecutor starts min(32, cores + 4) workers; the limit holds 32 with
    the program's own threads beside them, whatever this machine's core count."""
    from graft.sandbox.limits import DEFAULT_LIMITS
    from graft.verify.code.verifier import LIMITS

    assert min(32, (os.cpu_count() or 1) + 4) <= DEFAULT_POOL_THREADS
    assert LIMITS.processes == DEFAULT_LIMITS.processes >= DEFAULT_POOL_THREADS + 16
