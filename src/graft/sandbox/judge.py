"""The one judge of a problem's tests, for every test form: how each case did (`CaseResult`) and
how each sandbox run ended (`Outcome`) in, how the program did (`Judgement`) out.

Whatever the form (a function called, standard input fed, an assert run in the checker), the
reason a program failed is named here, in this order:
1. `sandbox_error`: a sandbox did not start (the verdict `error`: the program was never judged);
2. `timeout`, `memory`, `output_limit`: a run reached a limit (the first such run);
3. `check_error`: the problem's check itself failed (a NameError of its own, a setup that
   raised), whatever the program did;
4. `runtime_error`: a case raised, died or gave no answer, or a run ended with an error;
5. `wrong`: every case answered, and one answered wrong.
A program is correct only when every case passed and every run ended `ok`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from graft.sandbox.run import Outcome

Failure = Literal["", "wrong", "runtime_error", "check_error"]
LIMIT_STATUSES = ("timeout", "memory", "output_limit")


@dataclass(frozen=True)
class CaseResult:
    """How one case did: `failure` "" when it passed; `detail` says more."""

    failure: Failure = ""
    detail: str = ""

    @property
    def passed(self) -> bool:
        return not self.failure


NO_RESULT = CaseResult("runtime_error", "no result")
"""A case the program never answered (it died, timed out or answered garbage before it)."""


@dataclass(frozen=True)
class Judgement:
    """How a program did on its tests: `reason` "" when correct, else one of the module
    docstring's; `share` the share of cases passed (diagnostics); `detail` says more."""

    passed: bool
    reason: str
    share: float
    detail: str = ""


def judge(runs: Sequence[Outcome], results: Sequence[CaseResult]) -> Judgement:
    """The program's judgement from its runs and its cases' results (module docstring)."""
    share = sum(r.passed for r in results) / len(results) if results else 0.0
    failed = [r for r in results if not r.passed]
    for run in runs:
        if run.status == "error":
            return Judgement(False, "sandbox_error", share, run.detail)
    for run in runs:
        if run.status in LIMIT_STATUSES:
            return Judgement(False, run.status, share, run.detail)
    for failure in ("check_error", "runtime_error"):
        first = next((r for r in failed if r.failure == failure), None)
        if first is not None:
            return Judgement(False, failure, share, first.detail)
    ended = next((run for run in runs if run.status != "ok"), None)
    if ended is not None:
        return Judgement(False, "runtime_error", share, ended.detail)
    if failed:
        return Judgement(False, "wrong", share, failed[0].detail)
    return Judgement(bool(results), "" if results else "wrong", share)
