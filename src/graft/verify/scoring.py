"""Score rollouts with a task's verifier (the one path for training rewards and evaluation)."""

from __future__ import annotations

from collections.abc import Sequence

from graft.types import Rollout, Verdict
from graft.verify.pool import VerifierPool


def verify_rollouts(
    pool: VerifierPool, verifier: str, rollouts_P: Sequence[Rollout]
) -> list[tuple[Verdict, ...]]:
    """Verdicts for every completion of every rollout, in the same nesting."""
    items = [
        (verifier, c.text, r.problem.gold, r.problem.prompt)
        for r in rollouts_P
        for c in r.completions_G
    ]
    flat = pool.verify(items)
    out, pos = [], 0
    for r in rollouts_P:
        n = len(r.completions_G)
        out.append(tuple(flat[pos : pos + n]))
        pos += n
    return out
