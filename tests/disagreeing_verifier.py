"""A plug-in verifier that disagrees with the arithmetic verifier on every response, so that
stored-peer re-verification has rewards to change (loaded by import path in verifier workers)."""

from graft.tasks.verify import verify_final_number
from graft.types import Verdict


def inverted(response: str, gold: str) -> Verdict:
    verdict = verify_final_number(response, gold)
    return Verdict("wrong" if verdict.correct else "correct", "inverted: " + verdict.detail)
