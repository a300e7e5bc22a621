"""Assert-style tests (MBPP's `test_list`, HumanEval's `check(candidate)`) through two sandboxes:
the candidate's program in one (`server.py`), the checks in the other (`checker.py`), calls and
return values relayed between them by this process as lines of tagged JSON (`values.py`). The
checks hold the expected values; the candidate's process only ever sees arguments (and the
problem's prelude, which its program starts with)."""

from __future__ import annotations

import json
from pathlib import Path

from graft.sandbox.calls import candidate_sandbox
from graft.sandbox.judge import NO_RESULT, CaseResult, Failure
from graft.sandbox.run import DEFAULT_LIMITS, Limits, Outcome, Sandbox, supervise

HERE = Path(__file__).parent
CODEC = HERE / "values.py"
CANDIDATE, CHECKER = 0, 1


def run_asserts(
    source: str,
    entry: str,
    tests: list[str],
    *,
    setup: str = "",
    prelude: str = "",
    expected: tuple[str, ...] = (),
    limits: Limits = DEFAULT_LIMITS,
) -> tuple[Outcome, Outcome, list[CaseResult]]:
    """Run each test (Python source that calls `entry`, or `candidate`, or the `expected` names
    the candidate's module should define) against the module `source`; the checks' namespace is
    built as `checker.py` says, with `prelude` and `setup` run in it. Returns both sandboxes'
    outcomes and one `CaseResult` per test (`NO_RESULT` for a test with no result)."""
    spec = {"entry": entry, "setup": setup, "prelude": prelude, "expected": list(expected),
            "tests": tests}  # fmt: skip
    checks = {"check.json": json.dumps(spec).encode(), "values.py": CODEC.read_bytes(),
              "checker.py": (HERE / "checker.py").read_bytes()}  # fmt: skip
    candidate = candidate_sandbox(source, limits)
    try:
        checker = Sandbox(
            checks,
            ["python", "checker.py"],
            limits,
            inner_out=(3, 5),
            inner_in=(4,),
        )
    except BaseException:
        candidate.stop("runtime_error", "its checker did not start")
        candidate.finish()
        raise
    boxes = [candidate, checker]
    for box in boxes:
        box.close_input(0)
    relays = {(CHECKER, 3): (CANDIDATE, 4), (CANDIDATE, 3): (CHECKER, 4)}
    try:
        supervise(boxes, relays, wall_s=limits.wall_s)
    except BaseException:
        for box in boxes:
            box.stop("runtime_error", "interrupted")
            box.finish()
        raise
    outcomes = [box.finish() for box in boxes]
    results = [NO_RESULT] * len(tests)
    for line in outcomes[CHECKER].other.get(5, b"").decode("utf-8", "replace").splitlines():
        try:
            record = json.loads(line)
            if isinstance(record.get("i"), int) and 0 <= record["i"] < len(tests):
                results[record["i"]] = _checked(record)
        except (ValueError, AttributeError):
            continue
    return outcomes[CANDIDATE], outcomes[CHECKER], results


_FAILURES: dict[str, Failure] = {
    "candidate": "runtime_error",
    "check_error": "check_error",
    "wrong": "wrong",
}


def _checked(record: dict) -> CaseResult:
    """A checker's record (`checker.py`) as a CaseResult."""
    if record.get("passed") is True:
        return CaseResult()
    return CaseResult(_FAILURES.get(record.get("failure"), "wrong"), str(record.get("error", "")))
