"""Grouping and group-relative advantages (pure).

GRPO (Shao et al., 2024): a_i = (r_i - mean(R)) / (std(R) + eps) with the unbiased sample std
(divide by n - 1, as torch.std and verl do). Dr. GRPO (Liu et al., 2025): a_i = r_i - mean(R).
A group with zero reward variance (all-pass or all-fail) gets advantage 0 for every member.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from graft.config import AlgoConfig
from graft.types import Group, Rollout, TrainGroup, TrainSequence, Verdict
from graft.verify.registry import verdict_counts


def grpo_advantages(rewards_PG: torch.Tensor, *, eps: float = 1e-6) -> torch.Tensor:
    """(r - mean) / (std + eps) per row; std is the unbiased sample std (n - 1)."""
    if rewards_PG.dim() != 2 or rewards_PG.shape[1] < 2:
        raise ValueError(f"rewards_PG must be [P, G] with G >= 2, got {tuple(rewards_PG.shape)}")
    rewards_PG = rewards_PG.to(torch.float64)
    mean_P1 = rewards_PG.mean(dim=1, keepdim=True)
    std_P1 = rewards_PG.std(dim=1, keepdim=True, correction=1)
    return (rewards_PG - mean_P1) / (std_P1 + eps)


def drgrpo_advantages(rewards_PG: torch.Tensor, *, eps: float = 1e-6) -> torch.Tensor:
    """r - mean per row (no std normalisation); `eps` is unused and accepted for a uniform call."""
    del eps
    rewards_PG = rewards_PG.to(torch.float64)
    return rewards_PG - rewards_PG.mean(dim=1, keepdim=True)


ADVANTAGES: dict[str, Callable[..., torch.Tensor]] = {
    "grpo": grpo_advantages,
    "drgrpo": drgrpo_advantages,
}


@dataclass(frozen=True)
class Advantage:
    """How group-relative advantages are computed (`algo.advantage`, `algo.adv_eps`): one record
    from the config to every place that computes them (a run's groups, a stored peer's, the
    pooled-groups ablation)."""

    mode: str
    eps: float

    @classmethod
    def of(cls, algo: AlgoConfig) -> Advantage:
        return cls(algo.advantage, algo.adv_eps)


ADVANTAGE = Advantage.of(AlgoConfig())
"""The config's default: `algo.advantage` and `algo.adv_eps` as AlgoConfig sets them."""


def group_advantages(
    rewards_PG: torch.Tensor, *, mode: str = "grpo", eps: float = 1e-6
) -> torch.Tensor:
    return ADVANTAGES[mode](rewards_PG, eps=eps)


def make_groups(
    rollouts_P: Sequence[Rollout],
    verdicts_P: Sequence[Sequence[Verdict]],
    adv: Advantage = ADVANTAGE,
) -> tuple[Group, ...]:
    """Attach verdicts and advantages (over each whole group) to a policy's rollouts."""
    if len(rollouts_P) != len(verdicts_P):
        raise ValueError(f"{len(rollouts_P)} rollouts but {len(verdicts_P)} verdict lists")
    if not rollouts_P:
        return ()
    sizes = {len(r.completions_G) for r in rollouts_P}
    for rollout, verdicts in zip(rollouts_P, verdicts_P):
        if len(verdicts) != len(rollout.completions_G):
            raise ValueError(f"group {rollout.problem.id}: verdicts do not match completions")
    rows = [[v.reward for v in vs] for vs in verdicts_P]
    if len(sizes) == 1:
        adv_PG = group_advantages(torch.tensor(rows), mode=adv.mode, eps=adv.eps).tolist()
    else:  # unequal groups (possible with stored data): one row at a time
        adv_PG = [
            group_advantages(torch.tensor([row]), mode=adv.mode, eps=adv.eps)[0].tolist()
            for row in rows
        ]
    return tuple(
        Group(rollout=r, verdicts_G=tuple(vs), advantages_G=tuple(a))
        for r, vs, a in zip(rollouts_P, verdicts_P, adv_PG)
    )


def self_train_group(group: Group) -> TrainGroup:
    """A policy's own group as training data: its tokens, generation log-probs, advantages."""
    sequences = tuple(
        TrainSequence(
            prompt_ids=group.rollout.prompt_ids,
            response_ids=c.token_ids,
            old_logprobs=c.logprobs,
            advantage=a,
        )
        for c, a in zip(group.rollout.completions_G, group.advantages_G)
        if c.token_ids
    )
    return TrainGroup(problem_id=group.problem.id, sequences=sequences, is_peer=False)


def group_metrics(groups: Sequence[Group], verifier: str = "") -> dict[str, float]:
    """Reward, degenerate-group fractions and verdict counts of one policy's rollout batch
    (`verifier` names the reasons counted: `graft.verify.registry.verdict_counts`)."""
    if not groups:
        return {}
    num_groups = len(groups)
    verdicts = [v for g in groups for v in g.verdicts_G]
    completions = [c for g in groups for c in g.rollout.completions_G]
    out = {
        "reward/mean": sum(v.reward for v in verdicts) / len(verdicts),
        "groups/all_fail_frac": sum(g.all_fail for g in groups) / num_groups,
        "groups/all_pass_frac": sum(g.all_pass for g in groups) / num_groups,
        "groups/mixed_frac": sum(g.mixed for g in groups) / num_groups,
        "response/mean_tokens": sum(c.num_tokens for c in completions) / len(completions),
        "response/length_frac": sum(c.finish_reason == "length" for c in completions)
        / len(completions),
    }
    out.update(verdict_counts(verdicts, verifier))
    return out
