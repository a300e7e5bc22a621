"""A plug-in verifier that disagrees with the arithmetic verifier on every response, so that
stored-peer re-verification has rewards to change (loaded by import path in verifier workers)."""

from graft.types import Verdict
from graft.verify.math.grader import verify_final_number


def inverted(response: str, gold: str) -> Verdict:
    verdict = verify_final_number(response, gold)
    return Verdict("wrong" if verdict.correct else "correct", "inverted: " + verdict.detail)
