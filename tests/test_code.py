"""The code verifier: test specs in their normalized forms, the program chosen among the fenced
Python blocks, a reward only when every test passes, and the whole path through the verifier
pool."""

import json
from pathlib import Path

import pytest
import yaml

from graft.sandbox import isolation_problem
from graft.verify.code.blocks import choose_program
from graft.verify.code.verifier import (
    CodeTestError,
    CodeTests,
    parse_tests,
    same_stdout,
    verify_code,
)
from graft.verify.pool import VerifierPool

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


def test_the_program_of_a_stdio_problem_is_the_last_runnable_block():
    assert choose_program("```python\na = 1\n```\ntext\n```py\nb = 2\n```") == "b = 2\n"
    assert choose_program("```\nc = 3\n```") == "c = 3\n"
    assert choose_program("def add(a, b): return a + b") is None
    assert choose_program("```python\nunclosed") == "unclosed\n"  # generation stopped there
    reads = "```python\nn = int(input())\nprint(n * 2)\n```\n"
    assert choose_program(reads + "Output:\n```\n6\n```\n```bash\npython a.py\n```") == (
        "n = int(input())\nprint(n * 2)\n"
    )


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


# ------------------------------------------------ values keep their types between the sandboxes
def _asserting(*tests: str, function: str = "f") -> str:
    return CodeTests("assert", function, tests=tests).to_gold()


TYPED = _asserting(
    "assert candidate([]) == (0, 1) and type(candidate([])) is tuple",
    "assert candidate([1, 2]) == (3, 2)",
    "assert f([5]) == (5, 5)",
)
TYPES = _asserting(
    "import math\nv = g()\n"
    "assert v['nested'] == [(1, [2, (3,)])] and type(v['nested'][0][1][1]) is tuple\n"
    "assert v[(1, 2)] == {3} and type(v[(1, 2)]) is set and v[7] == frozenset({8})\n"
    "assert v['big'] == 3 ** 300 and math.isnan(v['nan']) and v['inf'] == float('inf')\n"
    "assert v['bytes'] == b'\\x00' and v['none'] is None and v['complex'] == 1j\n"
    "assert v['flag'] is True and type(v['int']) is int and type(v['float']) is float",
    "assert h((1, [2]), {3: (4,)}) == 'tuple list dict tuple'",
    function="g",
)  # fmt: skip
TYPES_PROGRAM = (
    "def g():\n"
    "    return {'nested': [(1, [2, (3,)])], (1, 2): {3}, 7: frozenset({8}), 'big': 3 ** 300,\n"
    "            'nan': float('nan'), 'inf': float('inf'), 'bytes': b'\\x00', 'none': None,\n"
    "            'complex': 1j, 'flag': True, 'int': 1, 'float': 1.0}\n"
    "def h(a, b):\n"
    "    return ' '.join(type(x).__name__ for x in (a, a[1], b, b[3]))\n"
)


@needs_sandbox
def test_a_tuple_comes_back_a_tuple_and_a_list_a_list():
    """HumanEval's `candidate([]) == (0, 1)` (sum_product and 7 more): the proxy gave a list."""
    program = "def f(xs):\n    return (sum(xs), len(xs) or 1) if xs != [5] else (5, 5)"
    assert verify_code(block(program), TYPED).correct
    as_list = "def f(xs):\n    return [sum(xs), len(xs) or 1] if xs != [5] else [5, 5]"
    assert verify_code(block(as_list), TYPED).category == "wrong"
    # and the other way: a tuple where the test wants a list is not correct either
    wants_list = _asserting("assert f(1) == [1, 1]")
    assert not verify_code(block("def f(x):\n    return (x, x)"), wants_list).correct
    assert verify_code(block("def f(x):\n    return [x, x]"), wants_list).correct


@needs_sandbox
def test_values_and_arguments_keep_their_python_types_both_ways():
    assert verify_code(block(TYPES_PROGRAM), TYPES).correct


@needs_sandbox
def test_an_unencodable_return_value_is_the_candidates_error_not_a_crash():
    from graft.sandbox import Limits, call_in_sandbox

    program = "def f(x):\n    return object() if x else lambda: 0"
    outcome, returns = call_in_sandbox(program, "f", [[1], [0]], limits=Limits(wall_s=4.0))
    assert outcome.status == "ok"
    assert [r.error for r in returns] == ["unencodable: object", "unencodable: function"]
    verdict = verify_code(block(program), CodeTests("call", "f", ((1,),), (1,)).to_gold())
    assert verdict.category == "wrong" and verdict.detail.startswith("runtime_error"), verdict
    verdict = verify_code(block(program), _asserting("assert f(1) is not None"))
    assert verdict.category == "wrong" and verdict.detail.startswith("runtime_error"), verdict


@needs_sandbox
def test_the_call_form_compares_a_returned_value_as_json_writes_it():
    """Expected values are JSON: a returned tuple equals the list, as APPS/TACO's harness has it;
    a set equals no JSON value; ints stay exact."""
    gold = CodeTests("call", "f", ((1,), (2,)), ([1, [2, 3]], {"1": 2})).to_gold()
    program = "def f(x):\n    return (1, (2, 3)) if x == 1 else {1: 2}"
    assert verify_code(block(program), gold).correct
    assert not verify_code(block("def f(x):\n    return {1, 2}"), gold).correct
    big = CodeTests("call", "f", ((),), (3**200 + 1,)).to_gold()
    assert verify_code(block("def f():\n    return 3 ** 200 + 1"), big).correct
    assert not verify_code(block("def f():\n    return 3 ** 200"), big).correct


# ---------------------------------------------- the program is the block that defines the entry
ADD_BLOCK = "def add(a, b):\n    return a + b"
EXAMPLE = "\n\nExample usage:\n```python\nprint(add(2, 3))  # 5\nassert add(1, 1) == 3\n```\n"
TRANSCRIPT = "\n\nFor example:\n```python\n>>> add(2, 3)\n5\n```\n"
STYLES = {
    "example usage after it": block(ADD_BLOCK) + EXAMPLE,
    ">>> transcript after it": block(ADD_BLOCK) + TRANSCRIPT,
    "a shell and an output block after it": block(ADD_BLOCK)
    + "```bash\npython add.py\n```\n```output\n5\n```\n```text\nadd(2, 3) = 5\n```\n",
    "unclosed final fence": f"Here it is.\n```python\n{ADD_BLOCK}\n",
    "cut right after the next opening fence": block(ADD_BLOCK) + "Usage:\n```python\n",
    "cut inside an example": block(ADD_BLOCK) + "Usage:\n```python\nprint(add(",
    "a draft, then the final version": block("def add(a, b):\n    return a - b")
    + "Fixed:\n"
    + block(ADD_BLOCK)
    + EXAMPLE,
    "closing fence on the code's last line": f"```python\n{ADD_BLOCK}```",
    "indented fence in a list": "1. Code:\n   ```python\n   def add(a, b):\n       return a + b\n"
    "   ```\n",
}  # fmt: skip


@needs_sandbox
@pytest.mark.parametrize("style", list(STYLES))
@pytest.mark.parametrize("gold", [ADD, MBPP, HUMANEVAL], ids=["call", "mbpp", "humaneval"])
def test_a_correct_solution_is_read_as_models_write_it(style, gold):
    verdict = verify_code(STYLES[style], gold)
    assert verdict.correct, verdict


DEGENERATE = [
    "", "def add(a, b):\n    return a + b", block("pass"), block("return None"),
    block("    return None"), "```python\n```", "```python\n", block(">>> add(2, 3)\n5"),
    block("print(add(2, 3))") , "```bash\necho 5\n```", block("add = lambda a, b: None"),
]  # fmt: skip


@needs_sandbox
@pytest.mark.parametrize("response", DEGENERATE)
def test_a_degenerate_response_is_never_correct(response):
    for gold in (ADD, MBPP, HUMANEVAL):
        verdict = verify_code(response, gold)
        assert not verdict.correct, (gold, verdict)


def test_the_program_is_the_last_block_that_defines_the_entry():
    assert choose_program(STYLES["example usage after it"], ["add"]) == ADD_BLOCK + "\n"
    assert choose_program(STYLES[">>> transcript after it"], ["add"]) == ADD_BLOCK + "\n"
    assert choose_program(STYLES["unclosed final fence"], ["add"]) == ADD_BLOCK + "\n"
    assert choose_program(STYLES["a draft, then the final version"], ["add"]) == ADD_BLOCK + "\n"
    body = "```python\n    return a + b\n```\n```python\nprint(add(1, 2))\n```"
    assert choose_program(body, ["add"]) == "    return a + b\n"  # a body alone, for a prelude
    broken = "```python\ndef add(a, b):\n    return a +\n```\n" + EXAMPLE
    assert choose_program(broken, ["add"]).startswith("def add")  # judged: a runtime error
    assert choose_program("```text\nadd(1, 2) = 3\n```", ["add"]) is None


def test_what_the_compiler_warns_about_a_candidate_stays_off_the_trainers_console():
    import warnings

    response = "```python\ndef add(a, b):\n    return 3(a) + '\\d'\n```"
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert choose_program(response, ["add"]).startswith("def add")
    assert [str(w.message) for w in seen] == []


# ------------------------------------------------------- the check's own failures are not wrong
@needs_sandbox
def test_a_name_error_inside_the_check_is_a_check_error_not_a_wrong_answer():
    from graft.verify.registry import verdict_counts

    gold = _asserting("assert f(1) == helper_from_nowhere.VALUE", "assert f(2) == 2")
    verdict = verify_code(block("def f(x):\n    return x"), gold)
    assert verdict.category == "error" and verdict.detail.startswith("check error: NameError")
    assert verdict.reason == "check_error"
    assert verdict_counts([verdict], "code")["verdict/error/check_error"] == 1
    importing = _asserting("import module_that_is_not_there\nassert f(1) == 1")
    verdict = verify_code(block("def f(x):\n    return x"), importing)
    assert verdict.reason == "check_error" and "ModuleNotFoundError" in verdict.detail
    # the candidate's own NameError stays the candidate's
    alone = _asserting("assert f(2) == 2")
    verdict = verify_code(block("def f(x):\n    return undefined_name"), alone)
    assert verdict.category == "wrong" and verdict.detail.startswith("runtime_error"), verdict


def test_a_stdio_problem_has_a_wall_clock_per_case_in_its_budget():
    from graft.verify.code.verifier import LIMITS, time_budget_s

    one = parse_tests(SUM)
    ten = CodeTests("stdio", stdin=("1 2\n",) * 10, stdout=("3\n",) * 10)
    assert time_budget_s(ten) > 10 * LIMITS.wall_s > time_budget_s(one) > 2 * LIMITS.wall_s
    assert LIMITS.wall_s < time_budget_s(parse_tests(MBPP)) < 2 * LIMITS.wall_s


@needs_sandbox
def test_stdout_bytes_caps_what_a_run_may_print():
    loud = block("def add(a, b):\n    print('x' * 4000)\n    return a + b")
    assert verify_code(loud, ADD).correct  # the default (1 MiB) lets 8 KB through
    capped = json.dumps({**json.loads(ADD), "stdout_bytes": 2048})
    verdict = verify_code(loud, capped)
    assert verdict.detail.startswith("output_limit"), verdict
    with pytest.raises(CodeTestError, match="stdout_bytes must be an integer in"):
        parse_tests(json.dumps({**json.loads(SUM), "stdout_bytes": 10}))


@needs_sandbox
def test_a_stdio_program_wrong_then_hanging_is_a_timeout_as_in_every_form():
    """One judge for every form: a limit reached outranks an earlier wrong answer."""
    tests = CodeTests("stdio", stdin=("1\n", "2\n"), stdout=("1", "2"))
    program = "x = int(input())\nwhile x == 2:\n    pass\nprint(x + 1)"
    verdict = verify_code(block(program), tests.to_gold())
    assert (verdict.category, verdict.reason) == ("timeout", "timeout"), verdict
