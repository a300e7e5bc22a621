"""What the exchange reports per direction and step, under `x/<source>-><receiver>/...` (pure; no
weight depends on any of it), and the warning for a direction that admits nothing."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from graft.config import ExchangeConfig
from graft.exchange.records import Direction, DirectionResult
from graft.exchange.weight import compatibility, own_means
from graft.types import Group


def quantiles(values: Sequence[float]) -> dict[str, float]:
    """p10, p50 and p90 (nearest rank), as the s_p* metrics report them."""
    if not values:
        return {}
    ordered = sorted(values)
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1) + 0.5))]  # noqa: E731
    return {"p10": pick(0.1), "p50": pick(0.5), "p90": pick(0.9)}


def _mean_token_logprob(groups: Sequence[Group]) -> float:
    values = [lp for g in groups for c in g.rollout.completions_G for lp in c.logprobs]
    return sum(values) / len(values) if values else 0.0


def direction_metrics(
    d: Direction,
    s_values: Sequence[float],
    weights: Sequence[float],
) -> dict[str, float]:
    """Diagnostics of one direction in one step (logged under x/<source>-><receiver>/)."""
    selection, receiver, source, requests, imported = (
        d.selection,
        d.receiver,
        d.source,
        d.requests,
        d.imported,
    )
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
        for q, v in quantiles(vals).items():
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


def skill_metrics(d: Direction, weights: Sequence[float]) -> dict[str, float]:
    """Counts per skill (`by_skill/<skill>/...`), summable over steps and seeds: the receiver's
    prompts and all-fail prompts, the source's mixed groups on those, and the source's correct and
    wrong responses sent and admitted. Empty when the problems carry no skill tag."""
    out: dict[str, float] = {}

    def add(skill: str, key: str, value: float) -> None:
        if skill:
            name = f"by_skill/{skill}/{key}"
            out[name] = out.get(name, 0.0) + value

    for r, s in zip(d.receiver, d.source):
        add(r.problem.skill, "prompts", 1.0)
        add(r.problem.skill, "all_fail", float(r.all_fail))
        add(r.problem.skill, "peer_mixed", float(r.all_fail and s.mixed))
    for req, w in zip(d.requests, weights):
        group = d.source[req.prompt_index]
        label = "correct" if group.verdicts_G[req.member].correct else "wrong"
        add(group.problem.skill, f"sent_{label}", 1.0)
        add(group.problem.skill, f"admitted_{label}", float(w > 0))
    return out


WHAT_IF_SCORES = ("paper", "per_byte", "receiver_relative")
"""The scores whose admission is also counted for every direction (diagnostics only)."""


def what_if_admission(d: Direction, cfg: ExchangeConfig) -> dict[str, float]:
    """How many of the peer's correct and wrong responses each documented score would admit at
    the configured delta (`admit_if/<score>/{correct,wrong}`): which score would feed a direction
    that the configured one starves. Pure arithmetic on the same records; changes no weight."""
    out = {f"admit_if/{m}/{k}": 0.0 for m in WHAT_IF_SCORES for k in ("correct", "wrong")}
    eos = cfg.ablation.eos_in_score
    own = own_means(d, eos_in_score=eos)
    for req, imp in zip(d.requests, d.imported, strict=True):
        if imp.drop:
            continue
        group = d.source[req.prompt_index]
        own_mean = own[req.prompt_index]
        label = "correct" if group.verdicts_G[req.member].correct else "wrong"
        src = group.rollout.completions_G[req.member]
        for mode in WHAT_IF_SCORES:
            s = compatibility(src, imp, mode=mode, eos_in_score=eos, receiver_own_mean=own_mean)
            out[f"admit_if/{mode}/{label}"] += float(s > cfg.delta)
    return out


class AdmissionMonitor:
    """Warns when a direction keeps offering responses but admits none (s is driven by confidence;
    with delta = 0.8 a less confident receiver can admit nothing for a whole run)."""

    def __init__(self, warn_after: int) -> None:
        self.warn_after = warn_after
        self.streak: dict[str, int] = {}

    def update(self, directions: Mapping[tuple[str, str], DirectionResult]) -> list[str]:
        messages = []
        for (source, receiver), result in directions.items():
            direction = f"x/{source}->{receiver}"
            if result.sent > 0 and result.admitted == 0:
                self.streak[direction] = self.streak.get(direction, 0) + 1
            elif result.admitted > 0:
                self.streak[direction] = 0
            if self.streak.get(direction, 0) == self.warn_after:
                messages.append(
                    f"exchange {source}->{receiver}: responses were offered but none admitted for "
                    f"{self.warn_after} steps; see {direction}/s_p50_* (compatibility scores vs "
                    f"exchange.delta) and consider exchange.ablation.weight=receiver_relative"
                )
        return messages
