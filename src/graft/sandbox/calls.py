"""Function-call tests through the sandbox: the candidate's function is called with each argument
list inside the sandbox (`harness.py`); its return values come back as JSON on the result channel
and are compared here, outside, with the expected values (which never enter the sandbox)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from graft.sandbox.run import DEFAULT_LIMITS, Limits, Outcome, run_sandboxed

HARNESS = Path(__file__).with_name("harness.py")


@dataclass(frozen=True)
class CallReturn:
    """What one call gave back: a JSON value, or the name of the exception it raised."""

    value: Any = None
    error: str = ""


def call_in_sandbox(
    source: str, function: str, calls: list[list[Any]], *, limits: Limits = DEFAULT_LIMITS
) -> tuple[Outcome, list[CallReturn | None]]:
    """Run `function(*args)` of `source` for each argument list; None for a call with no answer
    (the program died, timed out or wrote garbage before it)."""
    spec = json.dumps({"function": function, "calls": calls}).encode()
    files = {"solution.py": source.encode(), "calls.json": spec, "harness.py": HARNESS.read_bytes()}
    outcome = run_sandboxed(files, ["python", "harness.py"], limits=limits)
    returns: list[CallReturn | None] = [None] * len(calls)
    for line in outcome.channel.decode("utf-8", "replace").splitlines():
        try:
            record = json.loads(line)
            i = record["i"]
            if not (isinstance(i, int) and 0 <= i < len(calls)) or returns[i] is not None:
                continue
            returns[i] = CallReturn(record.get("value"), str(record.get("error", "")))
        except (ValueError, KeyError, TypeError):
            continue  # not a line the harness wrote: no answer
    return outcome, returns


def same_value(got: Any, want: Any, *, rel_tol: float = 1e-9, unordered: bool = False) -> bool:
    """JSON values equal: floats within `rel_tol` (and 1e-12 absolute), lists in order unless
    `unordered`; a bool is never a number."""
    if isinstance(want, bool) or isinstance(got, bool):
        return type(got) is type(want) and got == want
    if isinstance(want, int | float) and isinstance(got, int | float):
        return math.isclose(got, want, rel_tol=rel_tol, abs_tol=1e-12)
    if isinstance(want, list) and isinstance(got, list):
        if len(got) != len(want):
            return False
        if unordered:
            rest = list(got)
            for w in want:
                hit = next(
                    (k for k, g in enumerate(rest) if same_value(g, w, rel_tol=rel_tol)), None
                )
                if hit is None:
                    return False
                rest.pop(hit)
            return True
        return all(same_value(g, w, rel_tol=rel_tol) for g, w in zip(got, want, strict=True))
    if isinstance(want, dict) and isinstance(got, dict):
        return got.keys() == want.keys() and all(
            same_value(got[k], want[k], rel_tol=rel_tol) for k in want
        )
    return type(got) is type(want) and got == want


def judge_calls(
    outcome: Outcome, returns: list[CallReturn | None], expected: list[Any], **compare: Any
) -> tuple[bool, str, float]:
    """(correct, reason, share of calls passed). Correct only when the run ended `ok` and every
    call returned its expected value; the reason is the run's status when it did not end `ok`,
    `runtime_error` for a call that raised or gave no answer, else `wrong`."""
    passed = [
        r is not None and not r.error and same_value(r.value, want, **compare)
        for r, want in zip(returns, expected, strict=True)
    ]
    share = sum(passed) / len(passed) if passed else 0.0
    if outcome.status != "ok":
        return False, outcome.status, share
    if any(r is None or r.error for r in returns):
        return False, "runtime_error", share
    return all(passed), "" if all(passed) else "wrong", share
