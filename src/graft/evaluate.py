"""Held-out evaluation: avg@k (pass@1 as the mean over k samples) and unbiased pass@k.

Uses the task's verifier through the same pool as training rewards.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from math import comb

from graft.backends import Backend
from graft.rollout import SamplingParams
from graft.tasks.pool import VerifierPool
from graft.tasks.scoring import verify_rollouts
from graft.types import VERDICT_CATEGORIES, Problem, Verdict


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k, n samples with c correct (Chen et al., 2021): 1 - C(n-c, k) / C(n, k)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass_at_k needs 0 <= c <= n and 1 <= k <= n (got n={n}, c={c}, k={k})")
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def avg_at_k(correct_PK: Sequence[Sequence[bool]]) -> float:
    """Mean correctness over all problems and samples (pass@1 estimated from k samples)."""
    total = sum(len(row) for row in correct_PK)
    return sum(sum(row) for row in correct_PK) / total if total else 0.0


def suite_metrics(
    problems: Sequence[Problem], verdicts_P: Sequence[Sequence[Verdict]], *, suite: str
) -> dict[str, float]:
    """avg@k, pass@k, per-skill avg@k and verdict counts of one policy on one suite."""
    k = len(verdicts_P[0]) if verdicts_P else 0
    correct_PK = [[v.correct for v in vs] for vs in verdicts_P]
    out = {
        f"eval/{suite}/avg@{k}": avg_at_k(correct_PK),
        f"eval/{suite}/pass@{k}": sum(pass_at_k(k, sum(row), k) for row in correct_PK)
        / max(len(correct_PK), 1),
    }
    by_skill: dict[str, list[list[bool]]] = defaultdict(list)
    for problem, row in zip(problems, correct_PK):
        if problem.skill:
            by_skill[problem.skill].append(row)
    if len(by_skill) > 1:
        for skill, rows in sorted(by_skill.items()):
            out[f"eval/{suite}/{skill}/avg@{k}"] = avg_at_k(rows)
    counts = Counter(v.category for vs in verdicts_P for v in vs)
    for category in VERDICT_CATEGORIES:
        out[f"eval/{suite}/verdict/{category}"] = float(counts.get(category, 0))
    return out


def evaluate_backend(
    backend: Backend,
    problems: Sequence[Problem],
    *,
    pool: VerifierPool,
    verifier: str,
    k: int,
    params: SamplingParams,
    seeds: Mapping[str, int],
    suite: str = "test",
) -> dict[str, dict[str, float]]:
    """Per policy: sample k responses per problem, verify, and summarise."""
    rollouts = backend.generate(problems, n=k, params=params, seeds=seeds)
    return {
        name: suite_metrics(problems, verify_rollouts(pool, verifier, rs), suite=suite)
        for name, rs in rollouts.items()
    }
