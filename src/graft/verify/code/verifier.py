"""Code problems: tests in one normalized form, the program a response proposes, and the verifier
that runs it in the sandbox (`graft.sandbox`).

A problem's gold is its tests as JSON (`CodeTests.to_gold`), in one of these forms:
- `call`: a function name, argument lists and expected return values (`rel_tol` for floats,
  `unordered` for lists whose order does not matter). The expected values are JSON data, which
  has no tuple and only string keys, so a returned value is compared as JSON would write it: a
  tuple equals the list of its items (at any depth) and a key 1 the key "1", as the APPS/TACO
  harness compares a returned tuple with its expected list; a set, bytes or complex value equals
  no expected value. A value with no tagged JSON form (`graft.sandbox.values`) is a runtime error.
- `stdio`: standard input and expected standard output per case, compared token by token after
  trailing whitespace (floats within `rel_tol`); one sandbox run per case, each with its own
  wall clock (`LIMITS.wall_s`), so a problem's budget grows with its cases (`time_budget_s`);
- `assert`: Python statements that call the entry function (by its name, or `candidate`), as
  MBPP's `test_list` or HumanEval's `check(candidate)`; they run in a sandbox of their own
  (`graft.sandbox.asserts`), in a namespace holding the candidate module's global names (its
  imports re-imported by name, its functions as proxies that call into the candidate's sandbox,
  small plain values copied), then the problem's `prelude` and `setup`, then the entry function.
  Arguments and return values cross in tagged JSON and keep their types (tuples, sets, big ints,
  nan, bytes...); the expected values never enter the candidate's sandbox. A NameError or
  ImportError of the check itself (not the candidate's), a `setup` or `prelude` that raises, or
  an argument with no tagged form, is a `check_error`: the verdict `error`, never `wrong`.
Every form may carry a `prelude`: trusted problem text (HumanEval's prompt: its imports and
helper functions) that the candidate's program starts with, as HumanEval's own harness runs
`prompt + completion`, and that the checks run too (so `poly` or `encode_cyclic` of the prompt
are the prompt's own, whatever the response redefines). `stdout_bytes` caps what one run may
print and send on its result channels (0: the sandbox's default, raised where a test's expected
output needs more: `output_cap`).

The program is chosen among the response's fenced Python blocks (`graft.verify.code.blocks`): the
last that defines the entry function (usage examples, `>>>` transcripts and ```bash/```text/
```output blocks are never run; a final fence left open still counts); a response without one
is `no_answer`.

Every form compiles to cases (`cases_of`: a call and its expected value, an input and its
expected output, an assert statement); its runner (`RUNNERS`) takes them to the sandbox under
the one set of limits (`LIMITS`, the problem's `stdout_bytes`), and one judge
(`graft.sandbox.judge`) maps how the runs ended and how each case did to a reason, the same for
every form. The reward is 1 only when every test passes; the share of tests passed goes to the
verdict's detail, for diagnostics.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from graft.sandbox import IsolationError, Limits, Outcome, call_in_sandbox, run_sandboxed
from graft.sandbox.asserts import run_asserts
from graft.sandbox.calls import returned
from graft.sandbox.judge import NO_RESULT, CaseResult, Judgement, judge
from graft.types import Verdict
from graft.verify.code.blocks import choose_program, solution_names

FORMS = ("call", "stdio", "assert")
LIMITS = Limits(wall_s=4.0, cpu_s=3)
"""One sandbox run's limits (a stdio problem makes one run per case)."""
STDOUT_BYTES = (1 << 10, 1 << 30)
"""The range `stdout_bytes` may take (bytes)."""
CODE_REASONS: dict[str, tuple[str, ...]] = {
    "wrong": ("wrong", "runtime_error", "memory", "output_limit"),
    "no_answer": ("no_code_block",),
    "error": ("unusable_tests", "no_sandbox", "check_error", "other"),
}
"""The reasons of this verifier's verdicts, by category; a program past its wall clock is the
category `timeout` (its reason `timeout`); `check_error`: the problem's check itself failed (a
NameError or ImportError of its own, a setup that raised), whatever the program did."""


class CodeTestError(ValueError):
    """A test spec that cannot be used (the message names the field)."""


@dataclass(frozen=True)
class CodeTests:
    """A problem's tests in one of `FORMS` (module docstring). `function`: the entry function
    (call and assert forms; "" for assert tests whose entry is any name they call that nothing
    else defines); `prelude`: trusted problem code run ahead of the program and the checks;
    `stdout_bytes`: the cap on a run's standard output and result channels (0: the sandbox's
    default)."""

    form: str
    function: str = ""
    calls: tuple[tuple[Any, ...], ...] = ()
    expected: tuple[Any, ...] = ()
    tests: tuple[str, ...] = ()
    setup: str = ""
    stdin: tuple[str, ...] = ()
    stdout: tuple[str, ...] = ()
    rel_tol: float = 1e-9
    unordered: bool = False
    prelude: str = ""
    stdout_bytes: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        """The number of tests: one per call, input or assert statement (`cases_of`)."""
        return len(cases_of(self))

    def to_gold(self) -> str:
        body: dict[str, Any] = {"form": self.form, "rel_tol": self.rel_tol}
        if self.form == "call":
            body |= {"function": self.function, "calls": [list(c) for c in self.calls]}
            body |= {"expected": list(self.expected), "unordered": self.unordered}
        elif self.form == "assert":
            body |= {"function": self.function, "tests": list(self.tests), "setup": self.setup}
        else:
            body |= {"stdin": list(self.stdin), "stdout": list(self.stdout)}
        if self.prelude:
            body["prelude"] = self.prelude
        if self.stdout_bytes:
            body["stdout_bytes"] = self.stdout_bytes
        return json.dumps(body, sort_keys=True)


def _need(spec: dict, key: str, kind: type | tuple[type, ...]) -> Any:
    if key not in spec:
        raise CodeTestError(f"tests: {key} is missing")
    value = spec[key]
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise CodeTestError(
            f"tests: {key} must be {getattr(kind, '__name__', kind)}, got {value!r:.60}"
        )
    return value


def _python(source: Any, key: str) -> str:
    if not isinstance(source, str):
        raise CodeTestError(f"tests: {key} must be a string of Python, got {source!r:.60}")
    try:
        compile(source, key, "exec")
    except SyntaxError as err:
        raise CodeTestError(f"tests: {key} is not Python ({err.msg}, line {err.lineno})") from None
    except ValueError as err:  # a null byte
        raise CodeTestError(f"tests: {key} is not Python ({err})") from None
    return source


def _common(spec: dict) -> dict[str, Any]:
    """The keys every form may have: rel_tol, prelude, stdout_bytes."""
    try:
        rel_tol = float(spec.get("rel_tol", 1e-9))
    except (TypeError, ValueError):
        got = spec["rel_tol"]
        raise CodeTestError(f"tests: rel_tol must be a number, got {got!r:.60}") from None
    if not 0 <= rel_tol < 1:
        raise CodeTestError(f"tests: rel_tol must be in [0, 1), got {rel_tol}")
    cap = spec.get("stdout_bytes", 0)
    low, high = STDOUT_BYTES
    if isinstance(cap, bool) or not isinstance(cap, int) or not (cap == 0 or low <= cap <= high):
        raise CodeTestError(
            f"tests: stdout_bytes must be an integer in [{low}, {high}] (0: the default), "
            f"got {cap!r:.60}"
        )
    prelude = _python(spec.get("prelude", ""), "prelude")
    return {"rel_tol": rel_tol, "prelude": prelude, "stdout_bytes": cap}


def _assert_tests(spec: dict, common: dict[str, Any]) -> CodeTests:
    function = _need(spec, "function", str)
    if function and not function.isidentifier():
        raise CodeTestError(f"tests: function {function!r} is not a Python name")
    tests = _need(spec, "tests", list)
    if not tests or not all(isinstance(t, str) and t.strip() for t in tests):
        raise CodeTestError("tests: tests must be a non-empty list of Python statements")
    for i, test in enumerate(tests):
        _python(test, f"tests[{i}]")
    setup = _python(spec.get("setup", ""), "setup")
    return CodeTests("assert", function, tests=tuple(tests), setup=setup, **common)


def parse_tests(spec: Any) -> CodeTests:
    """A test spec (a dict, or its JSON) as CodeTests; CodeTestError names what is wrong."""
    if isinstance(spec, str):
        try:
            spec = json.loads(spec)
        except ValueError as err:
            raise CodeTestError(f"tests: not JSON ({err})") from None
    if not isinstance(spec, dict):
        raise CodeTestError("tests: an object with a 'form' is expected")
    form = spec.get("form")
    if form not in FORMS:
        raise CodeTestError(f"tests: form {form!r} is not supported; use one of {list(FORMS)}")
    common = _common(spec)
    if form == "assert":
        return _assert_tests(spec, common)
    if form == "call":
        function = _need(spec, "function", str)
        if not function.isidentifier():
            raise CodeTestError(f"tests: function {function!r} is not a Python name")
        calls, expected = _need(spec, "calls", list), _need(spec, "expected", list)
        if not calls or len(calls) != len(expected):
            raise CodeTestError(
                f"tests: {len(calls)} calls and {len(expected)} expected values (need the same, >0)"
            )
        for i, args in enumerate(calls):
            if not isinstance(args, list):
                raise CodeTestError(f"tests: calls[{i}] must be a list of arguments")
        return CodeTests(
            "call", function, tuple(tuple(c) for c in calls), tuple(expected),
            unordered=bool(spec.get("unordered", False)), **common,
        )  # fmt: skip
    stdin, stdout = _need(spec, "stdin", list), _need(spec, "stdout", list)
    if (
        not stdin
        or len(stdin) != len(stdout)
        or not all(isinstance(x, str) for x in stdin + stdout)
    ):
        raise CodeTestError("tests: stdin and stdout must be lists of strings of the same length")
    return CodeTests("stdio", stdin=tuple(stdin), stdout=tuple(stdout), **common)


def same_stdout(got: str, want: str, rel_tol: float) -> bool:
    """Token by token, lines and trailing whitespace aside; numbers within rel_tol."""
    g, w = got.split(), want.split()
    if len(g) != len(w):
        return False
    for a, b in zip(g, w, strict=True):
        if a == b:
            continue
        try:
            if not math.isclose(float(a), float(b), rel_tol=rel_tol, abs_tol=1e-12):
                return False
        except ValueError:
            return False
    return True


def entry_names(tests: CodeTests) -> tuple[str, ...]:
    """The names a program must define for `tests`: the function (call and assert forms), or,
    for assert tests with none given, the names the tests call that nothing else defines; ()
    for stdio."""
    if tests.form == "stdio":
        return ()
    if tests.function:
        return (tests.function,)
    return tuple(solution_names(tests.tests, (tests.setup, tests.prelude)))


def with_prelude(tests: CodeTests, code: str) -> str:
    """`code` after the problem's prelude (HumanEval's harness runs `prompt + completion`): a
    whole module redefines what the prelude only declared, and a function body written alone
    continues the prelude's last function."""
    return f"{tests.prelude}\n{code}" if tests.prelude else code


def program_of(response: str, tests: CodeTests) -> str | None:
    """The program to run for `response`: its chosen block (`code_blocks.choose_program`),
    after the problem's prelude; None when it has no Python block."""
    block = choose_program(response, entry_names(tests))
    return None if block is None else with_prelude(tests, block)


def time_budget_s(tests: CodeTests) -> float:
    """Wall-clock seconds that verifying one response against `tests` may take: one sandbox
    run's wall clock per run (a stdio problem makes one run per case; the others one), plus the
    sandboxes' start and clean-up."""
    runs = len(tests) if tests.form == "stdio" else 1
    return runs * (LIMITS.wall_s + 0.5) + 2.0


def gold_time_budget_s(gold: str) -> float:
    """`time_budget_s` of a gold's tests; 0 for tests that do not parse (scored `error` at once)."""
    try:
        return time_budget_s(parse_tests(gold))
    except CodeTestError:
        return 0.0


@dataclass(frozen=True)
class Case:
    """One test of a problem, whatever its form: what the program is given and what it must give
    back (the expected value of a call, the standard output of an input; an assert statement
    checks itself, in the checker's sandbox, and has none)."""

    given: Any
    expected: Any = None


def cases_of(tests: CodeTests) -> tuple[Case, ...]:
    """A problem's tests as cases, one per call, input or assert statement."""
    if tests.form == "call":
        return tuple(Case(list(c), e) for c, e in zip(tests.calls, tests.expected, strict=True))
    if tests.form == "stdio":
        return tuple(Case(i, o) for i, o in zip(tests.stdin, tests.stdout, strict=True))
    return tuple(Case(t) for t in tests.tests)


Runs = tuple[list[Outcome], list[CaseResult]]
"""What running a program's cases gave: each sandbox run's outcome, each case's result."""


def _run_calls(program: str, tests: CodeTests, cases: Sequence[Case], limits: Limits) -> Runs:
    """One sandbox, the calls asked in turn; the returns compared here (`graft.sandbox.calls`)."""
    calls = [c.given for c in cases]
    outcome, returns = call_in_sandbox(program, tests.function, calls, limits=limits)
    compare = {"rel_tol": tests.rel_tol, "unordered": tests.unordered}
    return [outcome], [returned(r, c.expected, **compare) for r, c in zip(returns, cases)]


def _run_stdio(program: str, tests: CodeTests, cases: Sequence[Case], limits: Limits) -> Runs:
    """One sandbox run per input; its standard output compared here (`same_stdout`). After a
    run that timed out or ran out of memory the rest are not run: the reward is 0 already."""
    runs: list[Outcome] = []
    results: list[CaseResult] = []
    for case in cases:
        outcome = run_sandboxed({"main.py": program.encode()}, ["python", "main.py"],
                                stdin=case.given.encode(), limits=limits)  # fmt: skip
        runs.append(outcome)
        if outcome.status != "ok":
            results.append(CaseResult("runtime_error", outcome.status))
            if outcome.status in ("error", "timeout", "memory"):
                break
        elif same_stdout(outcome.stdout.decode("utf-8", "replace"), case.expected, tests.rel_tol):
            results.append(CaseResult())
        else:
            results.append(CaseResult("wrong", "another output"))
    return runs, results + [NO_RESULT] * (len(cases) - len(results))


def _run_asserts(program: str, tests: CodeTests, cases: Sequence[Case], limits: Limits) -> Runs:
    """The candidate in one sandbox, the statements in the checker's (`graft.sandbox.asserts`)."""
    candidate, checker, results = run_asserts(
        program, tests.function, [c.given for c in cases], setup=tests.setup,
        prelude=tests.prelude, expected=() if tests.function else entry_names(tests),
        limits=limits,
    )  # fmt: skip
    return [candidate, checker], results


RUNNERS: dict[str, Callable[[str, CodeTests, Sequence[Case], Limits], Runs]] = {
    "call": _run_calls,
    "stdio": _run_stdio,
    "assert": _run_asserts,
}
"""How each form's cases reach the sandbox; the one judge (`graft.sandbox.judge`) maps what
came back to a reason, the same for every form."""


OUTPUT_MARGIN = 64 << 10
"""What a run may print beyond twice the largest expected output (`output_cap`)."""


def output_cap(tests: CodeTests, default: int) -> int:
    """The cap on one run's standard output and result channels: the problem's `stdout_bytes`
    when it sets one; else the sandbox's default, raised where the largest expected output (a
    stdio case's standard output, a call's value as JSON on the reply pipe) needs more: twice it
    and `OUTPUT_MARGIN`, at most the largest cap a problem may set. An endless printer stops
    there all the same."""
    if tests.stdout_bytes:
        return tests.stdout_bytes
    if tests.form == "stdio":
        sizes = [len(out.encode()) for out in tests.stdout]
    elif tests.form == "call":
        sizes = [len(json.dumps(value)) for value in tests.expected]
    else:  # assert statements hold their expected values in the checker's sandbox
        sizes = []
    return min(max(default, 2 * max(sizes, default=0) + OUTPUT_MARGIN), STDOUT_BYTES[1])


def run_tests(
    program: str, tests: CodeTests, limits: Limits = LIMITS, *, unsafe: bool = False
) -> Judgement:
    """Run `program` (whole, prelude included) against `tests` and judge it. `unsafe`: without
    isolation (`unsafe_local`)."""
    cap = output_cap(tests, limits.stdout_bytes)
    limits = dataclasses.replace(limits, unsafe_local=unsafe, stdout_bytes=cap)
    return judge(*RUNNERS[tests.form](program, tests, cases_of(tests), limits))


def verify_code_unsafe_local(response: str, gold: str, problem: str = "") -> Verdict:
    """`verify_code` WITHOUT isolation (`task.code.sandbox: unsafe_local`)."""
    return verify_code(response, gold, problem, unsafe=True)


def verify_code(response: str, gold: str, problem: str = "", *, unsafe: bool = False) -> Verdict:
    """Run the response's program (module docstring) against the tests in `gold`."""
    try:
        tests = parse_tests(gold)
    except CodeTestError as err:
        return Verdict("error", f"unusable tests: {err}", "unusable_tests")
    program = program_of(response, tests)
    if program is None:
        return Verdict("no_answer", "no fenced Python block", "no_code_block")
    try:
        run = run_tests(program, tests, unsafe=unsafe)
    except IsolationError as err:
        return Verdict("error", f"no sandbox: {err}", "no_sandbox")
    detail = f"passed {run.share:.0%} of {len(tests)} tests"
    if run.passed:
        return Verdict("correct", detail)
    if run.reason == "sandbox_error":
        return Verdict("error", f"no sandbox: {run.detail}", "no_sandbox")
    if run.reason == "check_error":
        return Verdict("error", f"check error: {run.detail}: {detail}", "check_error")
    category = "timeout" if run.reason == "timeout" else "wrong"
    return Verdict(category, f"{run.reason}: {detail}", run.reason)
