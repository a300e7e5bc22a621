"""Function-call tests through the sandbox: the candidate's module is loaded in the sandbox by
`server.py`, and graft asks for one call at a time on the program's request pipe (fd 4), reading
one reply per call on its reply pipe (fd 3): the return value in tagged JSON (`values.py`:
tuples, sets, big ints, nan... keep their types), compared here, outside, with the expected
values (which never enter the sandbox).

The program holds no result channel: graft is the harness, and a reply is only ever the answer
to the call graft asked last. A line on the reply pipe when no call is waiting (results written
ahead, a second answer, a first line that is not the server's) ends the run as `runtime_error`.
A program could still answer with values of its own making, but only one per call, after
seeing that call: what any function could return.

The expected values are JSON data, which has no tuples and only string keys, so a returned value
is compared as JSON would write it (`json_shape`: tuples as lists, keys as JSON's strings), as
the APPS/TACO harness compares a returned tuple with its expected list; a set, bytes or a complex
number equals no JSON value, and an iterator is no value (`unencodable: iterator`)."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from graft.sandbox.judge import NO_RESULT, CaseResult, judge
from graft.sandbox.run import DEFAULT_LIMITS, Limits, Outcome, Sandbox, supervise
from graft.sandbox.values import Unencodable, from_data, to_data

HERE = Path(__file__).parent
REQUESTS, REPLIES = 4, 3
"""The candidate's pipes, inside: graft's calls in, its answers out."""


@dataclass(frozen=True)
class CallReturn:
    """What one call gave back: a value (decoded from tagged JSON), or the name of the
    exception it raised (`unencodable: <type>` for a value with no tagged JSON form)."""

    value: Any = None
    error: str = ""


def candidate_sandbox(source: str, limits: Limits) -> Sandbox:
    """The candidate's module `source`, loaded by `server.py` in a sandbox of its own, which
    answers calls on its request pipe."""
    files = {"solution.py": source.encode(), "server.py": (HERE / "server.py").read_bytes(),
             "values.py": (HERE / "values.py").read_bytes()}  # fmt: skip
    return Sandbox(files, ["python", "server.py"], limits, inner_out=(REPLIES,),
                   inner_in=(REQUESTS,))  # fmt: skip


def _reply(record: Any) -> CallReturn | None:
    """One reply line's record as a CallReturn; None when it is not a reply."""
    if not isinstance(record, dict):
        return None
    if "error" in record:
        return CallReturn(error=str(record["error"]))
    try:
        value = from_data(record["value"])
    except (KeyError, ValueError, TypeError, RecursionError):
        return None
    if isinstance(value, Iterator):  # equals no expected (JSON) value
        return CallReturn(error="unencodable: iterator")
    return CallReturn(value)


class Conversation:
    """graft's side of the calls: after the server's first line, each call asked once its
    predecessor is answered; the program's input closed after the last."""

    def __init__(self, box: Sandbox, function: str, calls: list[list[Any]]) -> None:
        self.box, self.function, self.calls = box, function, calls
        self.returns: list[CallReturn | None] = [None] * len(calls)
        self.started, self.waiting, self.broken = False, -1, False

    def on_line(self, line: bytes) -> None:
        if self.broken:
            return
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            record = None
        if not self.started:  # the server's: the module's names, or why it did not load
            self.started = True
            said = record if isinstance(record, dict) else {}
            if isinstance(said.get("names"), dict):
                self._ask(0)
            elif not str(said.get("error", "")).startswith("load:"):
                self._out_of_turn("a first line that is not the harness's")
            return
        if self.waiting < 0:
            self._out_of_turn("a line when no call was waiting")
            return
        i, self.waiting = self.waiting, -1
        self.returns[i] = _reply(record)
        self._ask(i + 1)

    def _ask(self, i: int) -> None:
        if i == len(self.calls):
            self.box.close_input(REQUESTS, drained=True)
            return
        try:
            args = to_data(list(self.calls[i]))
        except (Unencodable, RecursionError) as exc:
            raise ValueError(f"calls[{i}] has no tagged JSON form ({exc})") from None
        self.waiting = i
        request = {"function": self.function, "args": args, "kwargs": {}}
        self.box.write(REQUESTS, json.dumps(request).encode() + b"\n")

    def _out_of_turn(self, what: str) -> None:
        self.broken, self.returns = True, [None] * len(self.calls)
        self.box.stop("runtime_error", f"it wrote on its reply pipe out of turn ({what})")


def call_in_sandbox(
    source: str, function: str, calls: list[list[Any]], *, limits: Limits = DEFAULT_LIMITS
) -> tuple[Outcome, list[CallReturn | None]]:
    """Call `function(*args)` of `source` for each argument list; None for a call with no answer
    (the program died, timed out, answered garbage or out of turn before it)."""
    box = candidate_sandbox(source, limits)
    talk = Conversation(box, function, calls)
    try:
        box.close_input(0)
        supervise([box], {(0, REPLIES): talk.on_line}, wall_s=limits.wall_s)
    except BaseException:
        box.stop("runtime_error", "interrupted")
        box.finish()
        raise
    return box.finish(), talk.returns


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


def returned(got: CallReturn | None, want: Any, **compare: Any) -> CaseResult:
    """How one call did against its expected value (`same_value` of its `json_shape`)."""
    if got is None:
        return NO_RESULT
    if got.error:
        return CaseResult("runtime_error", got.error)
    if same_value(json_shape(got.value), want, **compare):
        return CaseResult()
    return CaseResult("wrong", "another value")


def judge_calls(
    outcome: Outcome, returns: list[CallReturn | None], expected: list[Any], **compare: Any
) -> tuple[bool, str, float]:
    """(correct, reason, share of calls passed) of one run's calls, by the one judge
    (`graft.sandbox.judge`)."""
    results = [returned(r, want, **compare) for r, want in zip(returns, expected, strict=True)]
    verdict = judge([outcome], results)
    return verdict.passed, verdict.reason, verdict.share
