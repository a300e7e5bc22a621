"""Evaluation: avg@k (pass@1 as the mean over k samples), unbiased pass@k, per suite and averaged.

The paper's protocol: k = 8 samples per problem at temperature 0.6, top-p 0.95, five evaluation runs
with different seeds, mean +- std over the runs (sample std), and the unweighted average over the
benchmarks. The verifier is the same as in training.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from math import comb
from typing import Any

from tqdm.auto import tqdm

from graft.backends.base import Generator
from graft.eval.suites import Suite
from graft.rollout import SamplingParams
from graft.seeds import derive_seed
from graft.types import Problem, Verdict
from graft.verify.pool import VerifierPool
from graft.verify.registry import verdict_counts
from graft.verify.scoring import verify_rollouts


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


def pass_ks(n: int) -> list[int]:
    """The k of pass@k reported for n samples: 1, 2, 4, ... up to n (and n itself)."""
    ks = [1]
    while ks[-1] * 2 <= n:
        ks.append(ks[-1] * 2)
    return ks if ks[-1] == n else [*ks, n]


def suite_metrics(
    problems: Sequence[Problem],
    verdicts_P: Sequence[Sequence[Verdict]],
    *,
    suite: str,
    verifier: str = "",
) -> dict[str, float]:
    """avg@k, pass@k, per-skill avg@k and verdict counts (with the reasons of `verifier`) of one
    policy on one suite (one run)."""
    k = len(verdicts_P[0]) if verdicts_P else 0
    correct_PK = [[v.correct for v in vs] for vs in verdicts_P]
    out = {f"eval/{suite}/avg@{k}": avg_at_k(correct_PK)}
    for kk in pass_ks(k):
        total = sum(pass_at_k(k, sum(row), kk) for row in correct_PK)
        out[f"eval/{suite}/pass@{kk}"] = total / max(len(correct_PK), 1)
    by_skill: dict[str, list[list[bool]]] = defaultdict(list)
    for problem, row in zip(problems, correct_PK):
        if problem.skill:
            by_skill[problem.skill].append(row)
    if len(by_skill) > 1:
        for skill, rows in sorted(by_skill.items()):
            out[f"eval/{suite}/{skill}/avg@{k}"] = avg_at_k(rows)
    counts = verdict_counts((v for vs in verdicts_P for v in vs), verifier)
    out.update({f"eval/{suite}/{key}": value for key, value in counts.items()})
    if reads_tails_strictly(verifier):
        careful_PK = [[v.correct or v.reason == TAIL_VALUE for v in vs] for vs in verdicts_P]
        out[f"eval/{suite}/{CAREFUL}avg@{k}"] = avg_at_k(careful_PK)
    return out


TAIL_VALUE = "tail_value"
CAREFUL = "careful_"
"""Prefix of avg@k under the careful reading of what follows the final box: evaluation reports it
beside the training verdict's avg@k (a `tail_value` verdict, right under the careful reading,
counts there)."""


def reads_tails_strictly(verifier: str) -> bool:
    """Does the verifier withhold a reward for another value after the box (the training
    verdict of `graft.verify.math.tail`), so that evaluation reports the careful reading too?"""
    from graft.verify.registry import resolve_verifier

    reasons = resolve_verifier(verifier).reasons if verifier else {}
    return TAIL_VALUE in reasons.get("no_answer", ())


def evaluate_once(
    generator: Generator,
    suites: Sequence[Suite],
    *,
    pool: VerifierPool,
    k: int,
    params: SamplingParams,
    seed: int,
    verifier: str | None = None,
) -> dict[str, dict[str, float]]:
    """One evaluation run: per policy, the metrics of every suite (keys `eval/<suite>/...`)."""
    out: dict[str, dict[str, float]] = {name: {} for name in generator.names}
    for suite in suites:
        seeds = {name: derive_seed(seed, "eval", suite.name) for name in generator.names}
        rollouts = generator.generate(suite.problems, n=k, params=params, seeds=seeds)
        for name, rs in rollouts.items():
            used = verifier or suite.verifier
            verdicts = verify_rollouts(pool, used, rs)
            out[name].update(
                suite_metrics(suite.problems, verdicts, suite=suite.name, verifier=used)
            )
    return out


@dataclass(frozen=True)
class EvalSettings:
    k: int = 8
    runs: int = 5
    temperature: float = 0.6
    top_p: float = 0.95
    max_new_tokens: int = 1024
    seed: int = 0

    def run_seeds(self) -> list[int]:
        return [derive_seed(self.seed, "eval-run", r) for r in range(self.runs)]


def _mean_std(values: Sequence[float]) -> dict[str, Any]:
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return {"mean": statistics.fmean(values), "std": std, "runs": list(values)}


def evaluate_runs(
    generator: Generator,
    suites: Sequence[Suite],
    settings: EvalSettings,
    *,
    pool: VerifierPool,
    progress: bool = True,
) -> dict[str, Any]:
    """`settings.runs` evaluation runs with different seeds; mean +- std per policy and suite.

    Returns the content of eval.json: settings (with each suite's dataset, split and revision, and
    its unusable golds and skipped long prompts), and per policy every suite's avg@k / pass@k
    (mean, std, per-run values), verdict counts summed over runs (and per reason: why the
    `no_answer`, `wrong` and `error` verdicts are so), per-skill avg@k, and the
    unweighted average of avg@k over the suites.
    """
    params = SamplingParams(settings.max_new_tokens, settings.temperature, settings.top_p, 0)
    per_run = []
    for seed in tqdm(settings.run_seeds(), desc="eval runs", disable=not progress):
        per_run.append(
            evaluate_once(generator, suites, pool=pool, k=settings.k, params=params, seed=seed)
        )
    models: dict[str, Any] = {}
    avg_key = f"avg@{settings.k}"
    for name in generator.names:
        suites_out: dict[str, Any] = {}
        for suite in suites:
            prefix = f"eval/{suite.name}/"
            keys = sorted(
                {k[len(prefix) :] for r in per_run for k in r[name] if k.startswith(prefix)}
            )
            entry: dict[str, Any] = {
                "problems": len(suite.problems),
                "verdicts": {},
                "verdict_reasons": {},
                "skills": {},
            }
            for key in keys:
                values = [r[name][prefix + key] for r in per_run]
                if key.startswith("verdict/"):
                    verdict = key[len("verdict/") :]
                    group = "verdict_reasons" if "/" in verdict else "verdicts"
                    entry[group][verdict] = int(sum(values))
                elif "/" in key:
                    entry["skills"][key] = _mean_std(values)
                else:
                    entry[key] = _mean_std(values)
            suites_out[suite.name] = entry
        average = {}
        for key in (avg_key, CAREFUL + avg_key):
            if all(f"eval/{s.name}/{key}" in r[name] for s in suites for r in per_run):
                average[key] = _mean_std(
                    [
                        statistics.fmean(r[name][f"eval/{s.name}/{key}"] for s in suites)
                        for r in per_run
                    ]
                )
        models[name] = {"suites": suites_out, "average": average}
    return {
        "settings": {
            **settings.__dict__,
            "run_seeds": settings.run_seeds(),
            "suites": [s.name for s in suites],
            "datasets": {s.name: dict(s.source) for s in suites},
        },
        "models": models,
    }
