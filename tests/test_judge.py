"""The one judge of code tests (graft.sandbox.judge): every form's runs and cases map to a reason
by the same order, computed here by hand."""

from __future__ import annotations

import pytest

from graft.sandbox.judge import NO_RESULT, CaseResult, Judgement, judge
from graft.sandbox.limits import Outcome

OK, PASS = Outcome("ok"), CaseResult()
WRONG, RAISED = CaseResult("wrong", "another value"), CaseResult("runtime_error", "ValueError")
CHECK = CaseResult("check_error", "NameError (x)")
TIMEOUT, MEMORY = Outcome("timeout", detail="4 s"), Outcome("memory")
NO_START, DIED = Outcome("error", detail="no uid"), Outcome("runtime_error", detail="exit 1")


@pytest.mark.parametrize(
    ("runs", "results", "expected"),
    [
        ([OK], [PASS, PASS], Judgement(True, "", 1.0)),
        ([OK], [PASS, WRONG], Judgement(False, "wrong", 0.5, "another value")),
        ([OK], [WRONG, RAISED], Judgement(False, "runtime_error", 0.0, "ValueError")),
        ([OK, OK], [RAISED, CHECK], Judgement(False, "check_error", 0.0, "NameError (x)")),
        # a stdio program: the first input answered wrong, the second timed out
        ([OK, TIMEOUT], [WRONG, RAISED], Judgement(False, "timeout", 0.0, "4 s")),
        ([MEMORY, TIMEOUT], [NO_RESULT, NO_RESULT], Judgement(False, "memory", 0.0)),
        # a sandbox that did not start outranks everything: the program was never judged
        ([TIMEOUT, NO_START], [CHECK], Judgement(False, "sandbox_error", 0.0, "no uid")),
        # every case passed but a run ended badly (the candidate died after answering)
        ([OK, DIED], [PASS, PASS], Judgement(False, "runtime_error", 1.0, "exit 1")),
        ([OK], [], Judgement(False, "wrong", 0.0)),  # nothing tested is never correct
    ],
)  # fmt: skip
def test_the_judge_names_one_reason_in_one_order(runs, results, expected):
    assert judge(runs, results) == expected
