"""The verifier pool beyond tests/test_verify.py: a code problem's deadline grows with its tests,
verdicts stream as they arrive, the workers' CPU seconds are counted, and staging directories of
killed sandbox makers are cleaned."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from graft.sandbox import isolation_problem
from graft.verify.pool import VerifierPool

TESTS_DIR = str(Path(__file__).resolve().parent)
if TESTS_DIR not in sys.path:  # workers import plug-ins from the parent's sys.path
    sys.path.insert(0, TESTS_DIR)
needs_sandbox = pytest.mark.skipif(bool(isolation_problem()), reason=isolation_problem() or "ok")


@needs_sandbox
def test_a_correct_stdio_program_whose_tests_outlast_timeout_s_is_correct_through_the_pool():
    # Each of the 4 tests is its own sandboxed run of >= 0.25 s: together well past timeout_s.
    program = "import time\ntime.sleep(0.25)\na, b = map(int, input().split())\nprint(a + b)\n"
    gold = json.dumps(
        {"form": "stdio", "stdin": [f"{i} 1\n" for i in range(4)], "stdout": ["1", "2", "3", "4"]}
    )
    wrong = program.replace("a + b", "a - b")
    items = [("code", f"```python\n{p}```", gold, "") for p in (program, wrong)]
    start = time.monotonic()
    with VerifierPool(workers=2, timeout_s=0.5) as pool:
        verdicts = pool.verify(items)
    assert time.monotonic() - start > 1.0  # the tests did take longer than timeout_s
    assert [v.category for v in verdicts] == ["correct", "wrong"], verdicts


def test_verdicts_stream_in_completion_order():
    items = [("hanging_verifier:check", "HANG", "x"), ("hanging_verifier:check", "ok", "ok")]
    with VerifierPool(workers=2, timeout_s=1.0) as pool:
        start = time.monotonic()
        verdicts = pool.verify_iter(items)
        got = [next(verdicts)]
        got += list(verdicts)
        waited = time.monotonic() - start
    # The fast verdict came first, while the other item still hung to its deadline.
    assert waited >= 1.0
    assert [i for i, _ in got] == [1, 0]
    assert [v.category for _, v in got] == ["correct", "timeout"]


@needs_sandbox
def test_the_pool_counts_the_cpu_its_verifiers_and_their_programs_spend():
    import cpu_verifier

    items = [("cpu_verifier:burn", "1+1=2", "2")] * 3
    with VerifierPool(workers=2, timeout_s=10.0) as pool:
        before = pool.cpu_s
        verdicts = pool.verify(items)
        spent = pool.cpu_s - before
    assert [v.category for v in verdicts] == ["correct"] * 3, verdicts
    assert spent >= 3 * cpu_verifier.KNOWN_S, spent
    assert spent < 3 * cpu_verifier.KNOWN_S + 10.0  # not wildly over (no runaway sum)
