"""Function-call tests through the sandbox: the candidate's function is called with each argument
list inside the sandbox (`harness.py`); its return values come back in tagged JSON (`values.py`:
tuples, sets, big ints, nan... keep their types) on the result channel and are compared here,
outside, with the expected values (which never enter the sandbox).

The expected values are JSON data, which has no tuples and only string keys, so a returned value
is compared as JSON would write it (`json_shape`: tuples as lists, keys as JSON's strings), as
the APPS/TACO harness compares a returned tuple with its expected list; a set, bytes or a complex
number equals no JSON value."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from graft.sandbox.run import DEFAULT_LIMITS, Limits, Outcome, run_sandboxed
from graft.sandbox.values import from_data

HARNESS = Path(__file__).with_name("harness.py")
CODEC = Path(__file__).with_name("values.py")


@dataclass(frozen=True)
class CallReturn:
    """What one call gave back: a value (decoded from tagged JSON), or the name of the
    exception it raised (`unencodable: <type>` for a value with no tagged JSON form)."""

    value: Any = None
    error: str = ""


def call_in_sandbox(
    source: str, function: str, calls: list[list[Any]], *, limits: Limits = DEFAULT_LIMITS
) -> tuple[Outcome, list[CallReturn | None]]:
    """Run `function(*args)` of `source` for each argument list; None for a call with no answer
    (the program died, timed out or wrote garbage before it)."""
    spec = json.dumps({"function": function, "calls": calls}).encode()
    files = {"solution.py": source.encode(), "calls.json": spec, "harness.py": HARNESS.read_bytes(),
             "values.py": CODEC.read_bytes()}  # fmt: skip
    outcome = run_sandboxed(files, ["python", "harness.py"], limits=limits)
    returns: list[CallReturn | None] = [None] * len(calls)
    for line in outcome.channel.decode("utf-8", "replace").splitlines():
        try:
            record = json.loads(line)
            i = record["i"]
            if not (isinstance(i, int) and 0 <= i < len(calls)) or returns[i] is not None:
                continue
            error = str(record.get("error", ""))
            value = None if error else from_data(record["value"])
            returns[i] = CallReturn(value, error)
        except (ValueError, KeyError, TypeError, RecursionError):
            continue  # not a line the harness wrote: no answer
    return outcome, returns


def same_value(got: Any, want: Any, *, rel_tol: float = 1e-9, unordered: bool = False) -> bool:
    """JSON values equal: ints exactly, floats (or a float and an int) within `rel_tol` (and
    1e-12 absolute), lists in order unless `unordered`; a bool is never a number."""
    if isinstance(want, bool) or isinstance(got, bool):
        return type(got) is type(want) and got == want
    if isinstance(want, int) and isinstance(got, int):
        return got == want  # exact: 10**9 and 10**9 + 1 are within a rel_tol of 1e-9
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


def _json_key(key: Any) -> Any:
    if isinstance(key, str):
        return key
    if key is None or isinstance(key, bool | float):
        return json.dumps(key)
    return str(key) if isinstance(key, int) else key


def json_shape(value: Any) -> Any:
    """`value` as JSON would write it, where it can: tuples (at any depth) as lists, dict keys
    as JSON's strings; anything JSON has no form for (sets, bytes, complex) is left as it is."""
    if isinstance(value, list | tuple):
        return [json_shape(v) for v in value]
    if isinstance(value, dict):
        return {_json_key(k): json_shape(v) for k, v in value.items()}
    return value


def judge_calls(
    outcome: Outcome, returns: list[CallReturn | None], expected: list[Any], **compare: Any
) -> tuple[bool, str, float]:
    """(correct, reason, share of calls passed). Correct only when the run ended `ok` and every
    call returned its expected value; the reason is the run's status when it did not end `ok`,
    `runtime_error` for a call that raised or gave no answer, else `wrong`."""
    passed = [
        r is not None and not r.error and same_value(json_shape(r.value), want, **compare)
        for r, want in zip(returns, expected, strict=True)
    ]
    share = sum(passed) / len(passed) if passed else 0.0
    if outcome.status != "ok":
        return False, outcome.status, share
    if any(r is None or r.error for r in returns):
        return False, "runtime_error", share
    return all(passed), "" if all(passed) else "wrong", share
