"""The code verifier: test specs in their normalized forms, the program taken from the last fenced
Python block, a reward only when every test passes, and the whole path through the verifier pool."""

import pytest

from graft.sandbox import isolation_problem
from graft.tasks.code import (
    CodeTestError,
    CodeTests,
    last_python_block,
    parse_tests,
    same_stdout,
    verify_code,
)
from graft.tasks.pool import VerifierPool

needs_sandbox = pytest.mark.skipif(bool(isolation_problem()), reason=isolation_problem() or "ok")
ADD = CodeTests("call", "add", ((2, 3), (10, -4)), (5, 6)).to_gold()
SUM = CodeTests("stdio", stdin=("1 2\n", "3 4\n"), stdout=("3\n", "7")).to_gold()


def block(code: str, lang: str = "python") -> str:
    return f"Here is my solution.\n```{lang}\n{code}\n```\n"


def test_the_program_is_the_last_fenced_python_block():
    assert last_python_block("```python\na = 1\n```\ntext\n```py\nb = 2\n```") == "b = 2\n"
    assert last_python_block("```\nc = 3\n```") == "c = 3\n"
    assert last_python_block("def add(a, b): return a + b") is None
    assert last_python_block("```python\nunclosed") is None


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ('{"form": "assert", "tests": []}', "form 'assert' is not supported"),
        ('{"form": "call", "calls": [[1]], "expected": [1]}', "function is missing"),
        ('{"form": "call", "function": "1x", "calls": [[1]], "expected": [1]}', "not a Python"),
        ('{"form": "call", "function": "f", "calls": [[1], [2]], "expected": [1]}', "2 calls"),
        ('{"form": "call", "function": "f", "calls": [1], "expected": [1]}', r"calls\[0\]"),
        ('{"form": "stdio", "stdin": ["1"], "stdout": []}', "same length"),
        ("not json", "not JSON"),
        ('{"form": "stdio", "stdin": ["1"], "stdout": ["1"], "rel_tol": 2}', "rel_tol"),
    ],
)
def test_a_malformed_test_spec_is_refused_naming_the_field(spec, message):
    with pytest.raises(CodeTestError, match=message):
        parse_tests(spec)
    assert verify_code(block("x = 1"), spec).category == "error"


def test_stdout_is_compared_by_tokens_with_a_float_tolerance():
    assert same_stdout("3 \n\n", "3", 1e-9) and same_stdout("0.30000000000000004", "0.3", 1e-9)
    assert not same_stdout("3 4", "3", 1e-9) and not same_stdout("0.31", "0.3", 1e-9)


@needs_sandbox
@pytest.mark.parametrize(
    ("response", "gold", "category", "detail"),
    [
        (block("def add(a, b):\n    return a + b"), ADD, "correct", "passed 100% of 2 tests"),
        (block("def add(a, b):\n    return 5"), ADD, "wrong", "wrong: passed 50% of 2 tests"),
        ("def add(a, b): return a + b", ADD, "no_answer", "no fenced Python block"),
        (block("import time\ntime.sleep(30)"), ADD, "timeout", "timeout: passed 0% of 2 tests"),
        (block("a, b = map(int, input().split())\nprint(a + b)"), SUM, "correct", "passed 100%"),
        (block("print(3)"), SUM, "wrong", "wrong: passed 50% of 2 tests"),
        (block("raise SystemExit(1)"), SUM, "wrong", "runtime_error: passed 0% of 2 tests"),
    ],
)
def test_the_reward_needs_every_test_and_the_share_is_kept(response, gold, category, detail):
    verdict = verify_code(response, gold)
    assert verdict.category == category and verdict.detail.startswith(detail), verdict


@needs_sandbox
def test_code_runs_through_the_verifier_pool_and_a_hang_never_stops_it():
    items = [
        ("code", block("def add(a, b):\n    return a + b"), ADD, "Write add."),
        ("code", block("import time\ntime.sleep(60)"), ADD, "Write add."),
        ("code", block("def add(a, b):\n    return a * b"), ADD, "Write add."),
    ]
    with VerifierPool(workers=2, timeout_s=2.0) as pool:  # below the sandbox's own 4 s
        verdicts = pool.verify(items)
        assert [v.category for v in verdicts] == ["correct", "timeout", "wrong"]
        assert pool.verify(items[:1])[0].correct  # the pool goes on after a killed worker
