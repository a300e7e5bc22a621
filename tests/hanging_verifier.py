"""Plug-in verifiers for tests/test_verify.py, loaded by import path ("hanging_verifier:check")
inside the pool's worker processes, the same way a user's own verifier is."""

from __future__ import annotations

import os
import sys
import time

from graft.types import Verdict


def check(response: str, gold: str) -> Verdict:
    """Exact string match; "HANG" sleeps forever, "CRASH" kills the process, "RAISE" raises."""
    if "HANG" in response:
        while True:
            time.sleep(0.05)
    if "CRASH" in response:
        os._exit(3)
    if "RAISE" in response:
        raise ZeroDivisionError("verifier bug")
    return Verdict("correct" if response == gold else "wrong", response)


def loaded_modules(response: str, gold: str) -> Verdict:
    """Reports whether this worker has imported math-verify / sympy (they must load lazily)."""
    names = [m for m in ("math_verify", "sympy") if m in sys.modules]
    return Verdict("correct", ",".join(names))


def not_a_verdict(response: str, gold: str) -> object:
    return True


def hang_on_seven(response: str, gold: str) -> Verdict:
    """The arithmetic verifier, except that a response ending in 7 hangs forever."""
    from graft.verify.math.grader import verify_final_number

    if response.strip().endswith("7"):
        while True:
            time.sleep(0.05)
    return verify_final_number(response, gold)


class Spelling:
    """A verifier object with its own kind, reasons and version (the `Verifier` protocol)."""

    def __init__(self) -> None:
        self.name, self.version = "spelling", "spelling;2"
        self.reasons = {"wrong": ("american",), "no_answer": ("empty",)}

    @property
    def kind(self):
        from graft.verify.registry import VerifierKind

        return VerifierKind.TEXT

    def time_budget(self, gold: str) -> float:
        return 60.0

    def prepare(self) -> None:
        return None

    def __call__(self, response: str, gold: str, problem: str = "") -> Verdict:
        if not response:
            return Verdict("no_answer", "", "empty")
        return Verdict.judged(response == gold, response, "american")


SPELLING = Spelling()
