"""Code problems: tests in one normalized form, the program a response proposes, and the verifier
that runs it in the sandbox (`graft.sandbox`).

A problem's gold is its tests as JSON (`CodeTests.to_gold`), in one of these forms:
- `call`: a function name, argument lists and expected return values (`rel_tol` for floats,
  `unordered` for lists whose order does not matter);
- `stdio`: standard input and expected standard output per case, compared token by token after
  trailing whitespace (floats within `rel_tol`);
- `assert`: Python statements that call the entry function (by its name, or `candidate`), as
  MBPP's `test_list` or HumanEval's `check(candidate)`; they run in a sandbox of their own and
  call the candidate's function through a JSON proxy (`graft.sandbox.asserts`), so arguments and
  return values are JSON data (a tuple comes back as a list).

The program is the LAST fenced Python block of the response (```python ... ``` or a bare ```
block); a response without one is `no_answer`. The reward is 1 only when every test passes; the
share of tests passed goes to the verdict's detail, for diagnostics.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

from graft.sandbox import IsolationError, Limits, call_in_sandbox, run_sandboxed
from graft.sandbox.asserts import run_asserts
from graft.sandbox.calls import judge_calls
from graft.types import Verdict

FORMS = ("call", "stdio", "assert")
_FENCE = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)
LIMITS = Limits(wall_s=4.0, cpu_s=3)


class CodeTestError(ValueError):
    """A test spec that cannot be used (the message names the field)."""


@dataclass(frozen=True)
class CodeTests:
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
    extra: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len({"call": self.calls, "stdio": self.stdin, "assert": self.tests}[self.form])

    def to_gold(self) -> str:
        body: dict[str, Any] = {"form": self.form, "rel_tol": self.rel_tol}
        if self.form == "call":
            body |= {"function": self.function, "calls": [list(c) for c in self.calls]}
            body |= {"expected": list(self.expected), "unordered": self.unordered}
        elif self.form == "assert":
            body |= {"function": self.function, "tests": list(self.tests), "setup": self.setup}
        else:
            body |= {"stdin": list(self.stdin), "stdout": list(self.stdout)}
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
    rel_tol = float(spec.get("rel_tol", 1e-9))
    if not 0 <= rel_tol < 1:
        raise CodeTestError(f"tests: rel_tol must be in [0, 1), got {rel_tol}")
    if form in ("call", "assert"):
        function = _need(spec, "function", str)
        if not function.isidentifier():
            raise CodeTestError(f"tests: function {function!r} is not a Python name")
    if form == "assert":
        tests = _need(spec, "tests", list)
        if not tests or not all(isinstance(t, str) and t.strip() for t in tests):
            raise CodeTestError("tests: tests must be a non-empty list of Python statements")
        for i, test in enumerate(tests):
            try:
                compile(test, f"tests[{i}]", "exec")
            except SyntaxError as err:
                raise CodeTestError(f"tests: tests[{i}] is not Python ({err.msg})") from None
        setup = spec.get("setup", "")
        if not isinstance(setup, str):
            raise CodeTestError("tests: setup must be a string of Python")
        return CodeTests("assert", function, tests=tuple(tests), setup=setup, rel_tol=rel_tol)
    if form == "call":
        calls, expected = _need(spec, "calls", list), _need(spec, "expected", list)
        if not calls or len(calls) != len(expected):
            raise CodeTestError(
                f"tests: {len(calls)} calls and {len(expected)} expected values (need the same, >0)"
            )
        for i, args in enumerate(calls):
            if not isinstance(args, list):
                raise CodeTestError(f"tests: calls[{i}] must be a list of arguments")
        return CodeTests(
            "call", function, tuple(tuple(c) for c in calls), tuple(expected), rel_tol=rel_tol,
            unordered=bool(spec.get("unordered", False)),
        )  # fmt: skip
    stdin, stdout = _need(spec, "stdin", list), _need(spec, "stdout", list)
    if (
        not stdin
        or len(stdin) != len(stdout)
        or not all(isinstance(x, str) for x in stdin + stdout)
    ):
        raise CodeTestError("tests: stdin and stdout must be lists of strings of the same length")
    return CodeTests("stdio", stdin=tuple(stdin), stdout=tuple(stdout), rel_tol=rel_tol)


def last_python_block(response: str) -> str | None:
    """The last fenced Python (or unlabeled) code block of a response, or None."""
    blocks = _FENCE.findall(response)
    return blocks[-1] if blocks else None


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


def run_tests(
    program: str, tests: CodeTests, limits: Limits = LIMITS, *, unsafe: bool = False
) -> tuple[bool, str, float]:
    """(all passed, reason, share passed): reason "" when passed, else timeout / memory /
    output_limit / runtime_error / wrong. `unsafe`: without isolation (`unsafe_local`)."""
    limits = dataclasses.replace(limits, unsafe_local=unsafe)
    if tests.form == "call":
        outcome, returns = call_in_sandbox(
            program, tests.function, [list(c) for c in tests.calls], limits=limits
        )
        return judge_calls(
            outcome, returns, list(tests.expected), rel_tol=tests.rel_tol, unordered=tests.unordered
        )
    if tests.form == "assert":
        return _run_asserts(program, tests, limits)
    passed, reason = 0, ""
    for stdin, want in zip(tests.stdin, tests.stdout, strict=True):
        outcome = run_sandboxed({"main.py": program.encode()}, ["python", "main.py"],
                                stdin=stdin.encode(), limits=limits)  # fmt: skip
        if outcome.status != "ok":
            reason = reason or outcome.status
            if outcome.status in ("timeout", "memory"):
                break  # the rest would cost as much again; the reward is 0 already
        elif same_stdout(outcome.stdout.decode("utf-8", "replace"), want, tests.rel_tol):
            passed += 1
        else:
            reason = reason or "wrong"
    return passed == len(tests), reason, passed / len(tests)


def _run_asserts(program: str, tests: CodeTests, limits: Limits) -> tuple[bool, str, float]:
    candidate, checker, results = run_asserts(
        program, tests.function, list(tests.tests), setup=tests.setup, limits=limits
    )
    share = sum(bool(r and r["passed"]) for r in results) / len(results)
    for outcome in (candidate, checker):
        if outcome.status in ("timeout", "memory", "output_limit"):
            return False, outcome.status, share
    if all(r and r["passed"] for r in results):
        return True, "", share
    failed = [r for r in results if not (r and r["passed"])]
    crashed = any(r is None or r["error"].startswith("candidate:") for r in failed)
    return False, "runtime_error" if crashed else "wrong", share


def verify_code_unsafe_local(response: str, gold: str, problem: str = "") -> Verdict:
    """`verify_code` WITHOUT isolation (`task.code.sandbox: unsafe_local`)."""
    return verify_code(response, gold, problem, unsafe=True)


def verify_code(response: str, gold: str, problem: str = "", *, unsafe: bool = False) -> Verdict:
    """Run the response's last Python block against the tests in `gold` (module docstring)."""
    try:
        tests = parse_tests(gold)
    except CodeTestError as err:
        return Verdict("error", f"unusable tests: {err}")
    program = last_python_block(response)
    if program is None:
        return Verdict("no_answer", "no fenced Python block")
    try:
        ok, reason, share = run_tests(program, tests, unsafe=unsafe)
    except IsolationError as err:
        return Verdict("error", f"no sandbox: {err}")
    detail = f"passed {share:.0%} of {len(tests)} tests"
    if ok:
        return Verdict("correct", detail)
    return Verdict("timeout" if reason == "timeout" else "wrong", f"{reason}: {detail}")


def code_reason(verdict: Verdict) -> str:
    """Why a code verdict is not `correct`: timeout, memory, output_limit, runtime_error, wrong,
    no_answer, or error (unusable tests, no sandbox); "" when correct."""
    if verdict.correct:
        return ""
    if verdict.category in ("no_answer", "error"):
        return verdict.category
    return verdict.detail.split(":", 1)[0]
