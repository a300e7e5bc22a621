"""GRAFT, part 2: what a receiver trains on for the prompts it takes from a peer (pure).

Paper sections 3-4. The receiver's failed group is replaced by the source's WHOLE group; each peer
response keeps the advantage computed on the source's full group, never re-normalised. Its weight:
    s(o) = exp( l(pi_old^B, o^B) - l(pi_A_gen, o^A) ),  l = mean token log-likelihood
    w(o) = 1[s > delta] * min(s, 1)
Responses with s <= delta are dropped: they leave both the loss sum and the token-mean
denominator, and their siblings keep their pre-drop advantages. If all are dropped, the prompt
contributes nothing (the receiver's own failed group is not put back).

The receiver-side numbers (its tokenization o^B and its behavior log-probs) come from
`Policy.import_responses`; everything here is arithmetic on those records.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from graft.config import ExchangeConfig
from graft.exchange import Selection
from graft.groups import group_advantages, self_train_group
from graft.types import Completion, Group, Imported, PeerResponse, TrainGroup, TrainSequence


def transfer_requests(
    selection: Selection,
    source: Sequence[Group],
    *,
    replacement: str = "whole",
    peer_update: str = "graft",
    seed: int = 0,
) -> list[PeerResponse]:
    """The source responses a receiver must import for one direction's selected prompts."""
    rng = random.Random(seed)
    out = []
    for i in selection.selected:
        group = source[i]
        members = list(range(group.size))
        if replacement == "success_only" or peer_update == "sgt":
            members = [j for j in members if group.verdicts_G[j].correct]
        if peer_update == "sgt":  # SGT imitates ONE uniformly chosen correct response
            members = [rng.choice(members)] if members else []
        for j in members:
            c = group.rollout.completions_G[j]
            out.append(PeerResponse(i, j, group.problem.prompt, c.text, c.finish_reason == "stop"))
    return out


def mean_logprob(logprobs: Sequence[float], *, stopped: bool, eos_in_score: bool) -> float:
    """Mean token log-likelihood; the final EOS token is left out when `eos_in_score` is off."""
    values = list(logprobs)
    if stopped and not eos_in_score and len(values) > 1:
        values = values[:-1]
    return sum(values) / len(values) if values else float("-inf")


def compatibility(
    source: Completion,
    imported: Imported,
    *,
    mode: str,
    eos_in_score: bool = True,
    receiver_own_mean: float = 0.0,
) -> float:
    """The compatibility score s of one peer response (before the floor)."""
    stopped = source.finish_reason == "stop" and not imported.truncated
    l_r = mean_logprob(imported.logprobs, stopped=stopped, eos_in_score=eos_in_score)
    if mode in ("paper", "none"):
        l_s = mean_logprob(
            source.logprobs, stopped=source.finish_reason == "stop", eos_in_score=eos_in_score
        )
        return math.exp(l_r - l_s)
    if mode == "per_byte":
        keep_r = _scored(imported.logprobs, stopped, eos_in_score)
        keep_s = _scored(source.logprobs, source.finish_reason == "stop", eos_in_score)
        num_bytes = max(len(source.text.encode("utf-8")), 1)
        return math.exp((sum(keep_r) - sum(keep_s)) / num_bytes)
    if mode == "receiver_relative":
        return math.exp(l_r - receiver_own_mean)
    raise ValueError(f"unknown exchange.weight {mode!r}")


def own_mean_logprob(group: Group, *, eos_in_score: bool) -> float:
    """The receiver's mean over its own responses of their mean token log-likelihood."""
    own = group.rollout.completions_G
    return sum(
        mean_logprob(c.logprobs, stopped=c.finish_reason == "stop", eos_in_score=eos_in_score)
        for c in own
    ) / len(own)


def _scored(logprobs: Sequence[float], stopped: bool, eos_in_score: bool) -> list[float]:
    values = list(logprobs)
    return values[:-1] if stopped and not eos_in_score and len(values) > 1 else values


def admission_weight(s: float, *, delta: float, mode: str) -> float:
    """w = 1[s > delta] * min(s, 1); mode `none` admits everything with w = 1."""
    if mode == "none":
        return 1.0
    return min(s, 1.0) if s > delta else 0.0


@dataclass(frozen=True)
class DirectionResult:
    """The receiver's groups for the prompts of one direction, and what happened to them."""

    groups: dict[int, TrainGroup]
    """Replacement groups by prompt index (missing: every response was dropped)."""
    metrics: dict[str, float]


def graft_direction(
    selection: Selection,
    receiver: Sequence[Group],
    source: Sequence[Group],
    requests: Sequence[PeerResponse],
    imported: Sequence[Imported],
    cfg: ExchangeConfig,
    *,
    adv_mode: str = "grpo",
    adv_eps: float = 1e-6,
    seed: int = 0,
) -> DirectionResult:
    """Weights, drops and replacement groups for one (source -> receiver) direction."""
    eos = cfg.eos_in_score
    s_values, weights = [], []
    for req, imp in zip(requests, imported, strict=True):
        src = source[req.prompt_index].rollout.completions_G[req.member]
        own_mean = own_mean_logprob(receiver[req.prompt_index], eos_in_score=eos)
        if imp.drop:
            s_values.append(float("nan"))
            weights.append(0.0)
            continue
        s = compatibility(src, imp, mode=cfg.weight, eos_in_score=eos, receiver_own_mean=own_mean)
        s_values.append(s)
        weights.append(_peer_weight(s, cfg))
    if cfg.admission == "random":
        weights = _random_admission(weights, imported, seed=seed)
    elif cfg.admission != "weight":
        raise ValueError(f"unknown exchange.admission {cfg.admission!r}")
    groups = _replacement_groups(
        selection,
        receiver,
        source,
        requests,
        imported,
        weights,
        cfg,
        adv_mode=adv_mode,
        adv_eps=adv_eps,
    )
    metrics = direction_metrics(selection, receiver, source, requests, imported, s_values, weights)
    metrics["prompts_grafted"] = float(len(groups))
    metrics.update(skill_metrics(receiver, source, requests, weights))
    metrics.update(what_if_admission(receiver, source, requests, imported, cfg))
    return DirectionResult(groups=groups, metrics=metrics)


def _peer_weight(s: float, cfg: ExchangeConfig) -> float:
    if cfg.peer_update in ("sgt", "luffy"):
        return 1.0  # these baselines use no compatibility weight
    return admission_weight(s, delta=cfg.delta, mode=cfg.weight)


def _random_admission(
    weights: Sequence[float], imported: Sequence[Imported], *, seed: int
) -> list[float]:
    """Control: admit as many usable responses as the weight rule did, uniformly, with w = 1."""
    count = sum(w > 0 for w in weights)
    usable = [i for i, imp in enumerate(imported) if not imp.drop]
    chosen = set(random.Random(seed).sample(usable, min(count, len(usable))))
    return [1.0 if i in chosen else 0.0 for i in range(len(weights))]


def _replacement_groups(
    selection: Selection,
    receiver: Sequence[Group],
    source: Sequence[Group],
    requests: Sequence[PeerResponse],
    imported: Sequence[Imported],
    weights: Sequence[float],
    cfg: ExchangeConfig,
    *,
    adv_mode: str,
    adv_eps: float,
) -> dict[int, TrainGroup]:
    by_prompt: dict[int, list[int]] = {}
    for r, req in enumerate(requests):
        by_prompt.setdefault(req.prompt_index, []).append(r)
    objective = "luffy" if cfg.peer_update == "luffy" else "pg"
    out: dict[int, TrainGroup] = {}
    for i in selection.selected:
        own, src = receiver[i], source[i]
        src_adv = list(src.advantages_G)
        own_seqs: tuple[TrainSequence, ...] = ()
        if cfg.replacement == "pooled" and cfg.peer_update == "graft":
            pooled = torch.tensor([[*own.rewards_G, *src.rewards_G]])
            adv = group_advantages(pooled, mode=adv_mode, eps=adv_eps)[0].tolist()
            own_adv, src_adv = adv[: own.size], adv[own.size :]
            own_seqs = self_train_group(_with_advantages(own, own_adv)).sequences
        peer = []
        for r in by_prompt.get(i, []):
            imp, w = imported[r], weights[r]
            if imp.drop or w <= 0:
                continue
            if cfg.peer_update == "sgt":
                peer.append(
                    TrainSequence(
                        imp.prompt_ids,
                        imp.response_ids,
                        imp.logprobs,
                        advantage=0.0,
                        weight=cfg.sgt_coef,
                        is_peer=True,
                        objective="sft",
                    )
                )
            else:
                peer.append(
                    TrainSequence(
                        imp.prompt_ids,
                        imp.response_ids,
                        imp.logprobs,
                        advantage=src_adv[requests[r].member],
                        weight=w,
                        is_peer=True,
                        objective=objective,
                    )
                )
        if cfg.peer_update == "sgt":  # SGT keeps the receiver's own GRPO group
            own_seqs = self_train_group(own).sequences
            if not peer:
                out[i] = TrainGroup(own.problem.id, own_seqs, is_peer=False)
                continue
        if peer:
            out[i] = TrainGroup(own.problem.id, (*own_seqs, *peer), is_peer=True)
    return out


def _with_advantages(group: Group, advantages: Sequence[float]) -> Group:
    return Group(group.rollout, group.verdicts_G, tuple(advantages))


def _quantiles(values: Sequence[float]) -> dict[str, float]:
    if not values:
        return {}
    ordered = sorted(values)
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1) + 0.5))]  # noqa: E731
    return {"p10": pick(0.1), "p50": pick(0.5), "p90": pick(0.9)}


def _mean_token_logprob(groups: Sequence[Group]) -> float:
    values = [lp for g in groups for c in g.rollout.completions_G for lp in c.logprobs]
    return sum(values) / len(values) if values else 0.0


def direction_metrics(
    selection: Selection,
    receiver: Sequence[Group],
    source: Sequence[Group],
    requests: Sequence[PeerResponse],
    imported: Sequence[Imported],
    s_values: Sequence[float],
    weights: Sequence[float],
) -> dict[str, float]:
    """Diagnostics of one direction in one step (logged under x/<source>-><receiver>/)."""
    all_fail = [i for i, g in enumerate(receiver) if g.all_fail]
    correct = [source[r.prompt_index].verdicts_G[r.member].correct for r in requests]
    out = {
        "candidates": float(len(selection.candidates)),
        "selected": float(len(selection.selected)),
        "responses_sent": float(len(requests)),
        "admitted": float(sum(w > 0 for w in weights)),
        "sent_correct": float(sum(correct)),
        "admitted_correct": float(sum(w > 0 and c for w, c in zip(weights, correct))),
        "admitted_wrong": float(sum(w > 0 and not c for w, c in zip(weights, correct))),
        "dropped_weight": float(sum(w <= 0 and not imp.drop for w, imp in zip(weights, imported))),
        "dropped_too_long": float(sum(imp.drop == "too_long" for imp in imported)),
        "dropped_empty": float(sum(imp.drop == "empty" for imp in imported)),
        "truncated": float(sum(imp.truncated for imp in imported)),
        "roundtrip_mismatch": float(sum(not imp.roundtrip_ok for imp in imported)),
        "receiver_all_fail_frac": len(all_fail) / max(len(receiver), 1),
        "peer_solved_frac": (
            sum(source[i].num_correct > 0 for i in all_fail) / len(all_fail) if all_fail else 0.0
        ),
        "peer_mixed_frac": (
            sum(source[i].mixed for i in all_fail) / len(all_fail) if all_fail else 0.0
        ),
        "confidence_gap": _mean_token_logprob(source) - _mean_token_logprob(receiver),
    }
    admitted_w = [w for w in weights if w > 0]
    if admitted_w:
        out["w_mean"] = sum(admitted_w) / len(admitted_w)
    for label, want in (("correct", True), ("wrong", False)):
        vals = [
            s
            for s, req in zip(s_values, requests)
            if not math.isnan(s) and source[req.prompt_index].verdicts_G[req.member].correct == want
        ]
        for q, v in _quantiles(vals).items():
            out[f"s_{q}_{label}"] = v
    src_tokens = sum(
        source[req.prompt_index].rollout.completions_G[req.member].num_tokens
        for req, imp in zip(requests, imported)
        if not imp.drop
    )
    dst_tokens = sum(len(imp.response_ids) for imp in imported if not imp.drop)
    if src_tokens:
        out["len_ratio"] = dst_tokens / src_tokens
    return out


def skill_metrics(
    receiver: Sequence[Group],
    source: Sequence[Group],
    requests: Sequence[PeerResponse],
    weights: Sequence[float],
) -> dict[str, float]:
    """Counts per skill (`by_skill/<skill>/...`), summable over steps and seeds: the receiver's
    prompts and all-fail prompts, the source's mixed groups on those, and the source's correct and
    wrong responses sent and admitted. Empty when the problems carry no skill tag."""
    out: dict[str, float] = {}

    def add(skill: str, key: str, value: float) -> None:
        if skill:
            name = f"by_skill/{skill}/{key}"
            out[name] = out.get(name, 0.0) + value

    for r, s in zip(receiver, source):
        add(r.problem.skill, "prompts", 1.0)
        add(r.problem.skill, "all_fail", float(r.all_fail))
        add(r.problem.skill, "peer_mixed", float(r.all_fail and s.mixed))
    for req, w in zip(requests, weights):
        group = source[req.prompt_index]
        label = "correct" if group.verdicts_G[req.member].correct else "wrong"
        add(group.problem.skill, f"sent_{label}", 1.0)
        add(group.problem.skill, f"admitted_{label}", float(w > 0))
    return out


WHAT_IF_SCORES = ("paper", "per_byte", "receiver_relative")
"""The scores whose admission is also counted for every direction (diagnostics only)."""


def what_if_admission(
    receiver: Sequence[Group],
    source: Sequence[Group],
    requests: Sequence[PeerResponse],
    imported: Sequence[Imported],
    cfg: ExchangeConfig,
) -> dict[str, float]:
    """How many of the peer's correct and wrong responses each documented score would admit at
    the configured delta (`admit_if/<score>/{correct,wrong}`): which score would feed a direction
    that the configured one starves. Pure arithmetic on the same records; changes no weight."""
    out = {f"admit_if/{m}/{k}": 0.0 for m in WHAT_IF_SCORES for k in ("correct", "wrong")}
    eos = cfg.eos_in_score
    for req, imp in zip(requests, imported, strict=True):
        if imp.drop:
            continue
        group = source[req.prompt_index]
        own_mean = own_mean_logprob(receiver[req.prompt_index], eos_in_score=eos)
        label = "correct" if group.verdicts_G[req.member].correct else "wrong"
        src = group.rollout.completions_G[req.member]
        for mode in WHAT_IF_SCORES:
            s = compatibility(src, imp, mode=mode, eos_in_score=eos, receiver_own_mean=own_mean)
            out[f"admit_if/{mode}/{label}"] += float(s > cfg.delta)
    return out


def receiver_batch(
    receiver: Sequence[Group], replacements: Mapping[int, TrainGroup | None], selected: set[int]
) -> list[TrainGroup]:
    """The receiver's training groups: its own, except on selected prompts, where the replacement
    (or nothing, when every peer response was dropped) takes the place of its failed group."""
    out = []
    for i, own in enumerate(receiver):
        if i in selected:
            group = replacements.get(i)
            if group is not None:
                out.append(group)
        else:
            out.append(self_train_group(own))
    return out
