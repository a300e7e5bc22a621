"""The exchange's controls and baselines (docs/method.md, "Controls and baselines"), each selected
by one config value; the paper's path (gate, weight, replace) never branches on them.

    exchange.ablation.selection=random          as many prompts as the gate chose, at random
    exchange.ablation.replacement=success_only  only the source's correct responses are sent
    exchange.ablation.replacement=pooled        own + peer responses, advantages pooled
    exchange.ablation.admission=random          as many responses as w admitted, at random, w = 1
    exchange.ablation.peer_update=sgt           GRPO kept, + sgt_coef x NLL of one correct response
    exchange.ablation.peer_update=luffy         pi / (pi + gamma) on the peer tokens, no clip
    exchange.ablation.peer_update=unclipped     the paper's update, the peer tokens' ratio unclipped
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from functools import partial

import torch

from graft.config import ExchangeConfig
from graft.exchange.records import Direction
from graft.exchange.replace import Members, admitted_rows, peer_sequence, replacement_groups
from graft.groups import Advantage, group_advantages, self_train_group
from graft.types import Group, Imported, TrainGroup, TrainSequence

Replace = Callable[[Direction, Sequence[float]], dict[int, TrainGroup]]
"""A replacement rule: (direction, weights) -> replacement groups by prompt index."""


def random_prompts(
    names: Sequence[str],
    chosen: Mapping[tuple[str, str], tuple[int, ...]],
    *,
    num_prompts: int,
    seed: int,
) -> dict[tuple[str, str], tuple[int, ...]]:
    """selection=random: per receiver, as many prompts as the gate chose, drawn from the batch."""
    rng = random.Random(seed)
    out: dict[tuple[str, str], tuple[int, ...]] = {}
    for b in names:
        free = list(range(num_prompts))
        rng.shuffle(free)
        for a in names:
            if a != b:
                count = len(chosen[a, b])
                out[a, b], free = tuple(sorted(free[:count])), free[count:]
    return out


def members_for(replacement: str, peer_update: str, *, seed: int) -> Members | None:
    """success_only: the correct members; sgt: ONE uniformly chosen correct member (one random
    stream over the direction's prompts); None: the paper's whole group."""
    if replacement != "success_only" and peer_update != "sgt":
        return None
    rng = random.Random(seed)

    def members(group: Group) -> list[int]:
        correct = [j for j in range(group.size) if group.verdicts_G[j].correct]
        if peer_update == "sgt":
            return [rng.choice(correct)] if correct else []
        return correct

    return members


def weights_for(
    weights: Sequence[float], imported: Sequence[Imported], cfg: ExchangeConfig, *, seed: int
) -> list[float]:
    """The weights the configured update uses: the paper's w, w = 1 for the baselines that use no
    compatibility weight (sgt, luffy), or a random admission of as many responses."""
    out = list(weights)
    if cfg.ablation.peer_update in ("sgt", "luffy"):
        out = [0.0 if imp.drop else 1.0 for imp in imported]
    if cfg.ablation.admission == "random":
        return random_admission(out, imported, seed=seed)
    if cfg.ablation.admission != "weight":
        raise ValueError(
            f"unknown exchange.ablation.admission {cfg.ablation.admission!r}; use weight or random"
        )
    return out


def random_admission(
    weights: Sequence[float], imported: Sequence[Imported], *, seed: int
) -> list[float]:
    """admission=random: admit as many usable responses as the weight rule did, uniformly, w = 1."""
    count = sum(w > 0 for w in weights)
    usable = [i for i, imp in enumerate(imported) if not imp.drop]
    chosen = set(random.Random(seed).sample(usable, min(count, len(usable))))
    return [1.0 if i in chosen else 0.0 for i in range(len(weights))]


def pooled_groups(
    d: Direction, weights: Sequence[float], *, adv: Advantage
) -> dict[int, TrainGroup]:
    """replacement=pooled: the receiver keeps its n responses and gets the admitted peer ones, with
    advantages over the pooled rewards (nothing when no peer response is admitted)."""
    out: dict[int, TrainGroup] = {}
    for i, rows in admitted_rows(d, weights).items():
        if rows:
            own, src = d.receiver[i], d.source[i]
            pooled = torch.tensor([[*own.rewards_G, *src.rewards_G]])
            adv_G = group_advantages(pooled, mode=adv.mode, eps=adv.eps)[0].tolist()
            own_group = Group(own.rollout, own.verdicts_G, tuple(adv_G[: own.size]))
            src_adv = adv_G[own.size :]
            peer = [
                peer_sequence(d.imported[r], src_adv[d.requests[r].member], weights[r])
                for r in rows
            ]
            own_seqs = self_train_group(own_group).sequences
            out[i] = TrainGroup(own.problem.id, (*own_seqs, *peer), is_peer=True)
    return out


def sgt_groups(d: Direction, weights: Sequence[float], *, coef: float) -> dict[int, TrainGroup]:
    """peer_update=sgt: the receiver's own GRPO group, plus coef x NLL of the sent peer response."""
    out: dict[int, TrainGroup] = {}
    for i, rows in admitted_rows(d, weights).items():
        own = d.receiver[i]
        sft = [
            TrainSequence(
                d.imported[r].prompt_ids,
                d.imported[r].response_ids,
                d.imported[r].logprobs,
                advantage=0.0,
                weight=coef,
                is_peer=True,
                objective="sft",
            )
            for r in rows
        ]
        out[i] = TrainGroup(
            own.problem.id, (*self_train_group(own).sequences, *sft), is_peer=bool(sft)
        )
    return out


def replacement_for(cfg: ExchangeConfig, *, adv: Advantage) -> Replace:
    """The replacement rule of the configured update (the paper's unless an ablation is set)."""
    if cfg.ablation.peer_update == "sgt":
        return partial(sgt_groups, coef=cfg.ablation.sgt_coef)
    if cfg.ablation.peer_update in ("luffy", "unclipped"):
        return partial(replacement_groups, objective=cfg.ablation.peer_update)
    if cfg.ablation.replacement == "pooled":
        return partial(pooled_groups, adv=adv)
    return replacement_groups
