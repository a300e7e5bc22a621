"""Plug-in verifiers for the verifier interface: one reads the problem text, one predates it."""

from graft.types import Verdict


def sees_problem(response: str, gold: str, problem: str) -> Verdict:
    """Correct when the response names the problem's first word; the detail is the problem."""
    first = problem.split()[0] if problem.split() else ""
    return Verdict("correct" if first and first in response else "wrong", problem)


def two_args(response: str, gold: str) -> Verdict:
    return Verdict("correct" if response == gold else "wrong", "two-argument plug-in")
