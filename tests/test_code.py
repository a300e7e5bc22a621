"""The code verifier: test specs in their normalized forms, the program taken from the last fenced
Python block, a reward only when every test passes, and the whole path through the verifier pool."""

import json
from pathlib import Path

import pytest
import yaml

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
MBPP = CodeTests(
    "assert", "add", tests=("assert add(2, 3) == 5", "assert add(10, -4) == 6")
).to_gold()
HUMANEVAL = CodeTests(
    "assert",
    "add",
    tests=("def check(candidate):\n    for a in range(5):\n"
           "        assert candidate(a, 1) == a + 1\n"
           "    assert abs(candidate(0.1, 0.2) - 0.3) < 1e-9\ncheck(candidate)",),
).to_gold()  # fmt: skip
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
        ('{"form": "unit", "tests": []}', "form 'unit' is not supported"),
        ('{"form": "assert", "tests": ["assert f(1) == 1"]}', "function is missing"),
        ('{"form": "assert", "function": "f", "tests": []}', "non-empty list"),
        ('{"form": "assert", "function": "f", "tests": ["assert f(1 =="]}', r"tests\[0\] is not"),
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
        (block("def add(a, b):\n    return a + b"), MBPP, "correct", "passed 100% of 2 tests"),
        (block("def add(a, b):\n    return 5"), MBPP, "wrong", "wrong: passed 50% of 2 tests"),
        (block("def add(a, b):\n    return a + b"), HUMANEVAL, "correct", "passed 100% of 1"),
        (block("def add(a, b):\n    return a - b"), HUMANEVAL, "wrong", "wrong: passed 0%"),
        (block("def plus(a, b):\n    return a + b"), MBPP, "wrong", "runtime_error: passed 0%"),
        (block("import time\ntime.sleep(60)"), MBPP, "timeout", "timeout: passed 0%"),
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


# Hostile candidates against assert-style checks: the checks run in another process, so none of
# these can make a check pass (each would pass a check that ran in its own process).
HOSTILE_TO_ASSERTS = [
    "class T:\n    def __eq__(self, o):\n        return True\ndef add(a, b):\n    return T()",
    "import builtins\nbuiltins.AssertionError = type('X', (BaseException,), {})\n"
    "def add(a, b):\n    return 0",
    "import sys\ndef add(a, b):\n"
    "    sys._getframe(1).f_globals['__builtins__']['abs'] = lambda x: 0\n    return 0",
    # forged result lines on its reply channel: the checker reads them as (bad) replies
    'import os\nos.write(3, b\'{"i": 0, "passed": true}\\n{"i": 1, "passed": true}\\n\')\n'
    "def add(a, b):\n    return 0",
    "import sys\nsys.exit(0)",
    "import os\ndef add(a, b):\n    os._exit(0)",
    # rewrites every result line it could reach into a pass (it reaches none: its process only
    # ever writes replies)
    "import json\n_dumps = json.dumps\n"
    "def _forged(o, *a, **k):\n"
    "    return _dumps({**o, 'passed': True} if isinstance(o, dict) and 'i' in o else o, *a, **k)\n"
    "json.dumps = _forged\ndef add(a, b):\n    return 0",
]


@needs_sandbox
@pytest.mark.parametrize("source", HOSTILE_TO_ASSERTS)
def test_a_hostile_candidate_cannot_pass_an_assert_style_check(source):
    verdict = verify_code(block(source), MBPP)
    assert not verdict.correct and verdict.category in ("wrong", "timeout"), verdict


BENIGN = yaml.safe_load((Path(__file__).parent / "code_benign.yaml").read_text())


def _gold(row: dict) -> str:
    keys = ("form", "function", "calls", "expected", "rel_tol", "unordered", "stdin", "stdout")
    return json.dumps({k: row[k] for k in (*keys, "tests") if k in row})


@needs_sandbox
@pytest.mark.parametrize("row", BENIGN, ids=[f"{r['form']}-{i}" for i, r in enumerate(BENIGN)])
def test_hand_checked_programs_are_scored_as_a_careful_reviewer_would(row):
    verdict = verify_code(block(row["program"]), _gold(row))
    assert verdict.correct == row["correct"], verdict


def test_the_benign_table_covers_the_three_forms():
    forms = [r["form"] for r in BENIGN]
    assert len(BENIGN) >= 60 and {forms.count(f) >= 10 for f in ("call", "stdio", "assert")} == {
        True
    }
