"""GRAFT step 5 (paper section 4): the compatibility score s and the weight w of a peer response.

    s(o) = exp( l(pi_old^B, o^B) - l(pi_A_gen, o^A) ),  l = mean token log-likelihood
    w(o) = 1[s > delta] * min(s, 1)

The receiver-side numbers (its tokenization o^B and its behavior log-probs) come from
`Policy.import_responses`; everything here is arithmetic on those records (pure).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from graft.exchange.records import Direction
from graft.types import Completion, Group, Imported

SCORES = ("paper", "none", "per_byte", "receiver_relative")
"""The documented scores s (`exchange.ablation.weight`)."""


def scored_logprobs(logprobs: Sequence[float], *, stopped: bool, eos_in_score: bool) -> list[float]:
    """The log-probs a score counts: the final EOS token is left out when `eos_in_score` is off."""
    values = list(logprobs)
    return values[:-1] if stopped and not eos_in_score and len(values) > 1 else values


def mean_logprob(logprobs: Sequence[float], *, stopped: bool, eos_in_score: bool) -> float:
    """l: the mean token log-likelihood of a response."""
    values = scored_logprobs(logprobs, stopped=stopped, eos_in_score=eos_in_score)
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
    source_stopped = source.finish_reason == "stop"
    if mode in ("paper", "none"):
        l_r = mean_logprob(imported.logprobs, stopped=stopped, eos_in_score=eos_in_score)
        l_s = mean_logprob(source.logprobs, stopped=source_stopped, eos_in_score=eos_in_score)
        return math.exp(l_r - l_s)
    if mode == "per_byte":
        keep_r = scored_logprobs(imported.logprobs, stopped=stopped, eos_in_score=eos_in_score)
        keep_s = scored_logprobs(source.logprobs, stopped=source_stopped, eos_in_score=eos_in_score)
        num_bytes = max(len(source.text.encode("utf-8")), 1)
        return math.exp((sum(keep_r) - sum(keep_s)) / num_bytes)
    if mode == "receiver_relative":
        l_r = mean_logprob(imported.logprobs, stopped=stopped, eos_in_score=eos_in_score)
        return math.exp(l_r - receiver_own_mean)
    raise ValueError(f"unknown exchange.ablation.weight {mode!r}; known: {', '.join(SCORES)}")


def own_mean_logprob(group: Group, *, eos_in_score: bool) -> float:
    """The receiver's mean over its own responses of their mean token log-likelihood."""
    own = group.rollout.completions_G
    return sum(
        mean_logprob(c.logprobs, stopped=c.finish_reason == "stop", eos_in_score=eos_in_score)
        for c in own
    ) / len(own)


def own_means(d: Direction, *, eos_in_score: bool) -> dict[int, float]:
    """`own_mean_logprob` of the receiver on every prompt the direction sends responses for."""
    prompts = dict.fromkeys(req.prompt_index for req in d.requests)
    return {i: own_mean_logprob(d.receiver[i], eos_in_score=eos_in_score) for i in prompts}


def compatibility_scores(d: Direction, *, mode: str, eos_in_score: bool) -> list[float]:
    """s of every peer response of one direction (NaN for one that could not be imported)."""
    own = own_means(d, eos_in_score=eos_in_score)
    out = []
    for req, imp in zip(d.requests, d.imported, strict=True):
        if imp.drop:
            out.append(float("nan"))
            continue
        src = d.source[req.prompt_index].rollout.completions_G[req.member]
        out.append(
            compatibility(
                src,
                imp,
                mode=mode,
                eos_in_score=eos_in_score,
                receiver_own_mean=own[req.prompt_index],
            )
        )
    return out


def admission_weight(s: float, *, delta: float, mode: str) -> float:
    """w = 1[s > delta] * min(s, 1); mode `none` admits everything with w = 1."""
    if mode == "none":
        return 1.0
    return min(s, 1.0) if s > delta else 0.0


def admission_weights(
    s_values: Sequence[float], imported: Sequence[Imported], *, delta: float, mode: str
) -> list[float]:
    """w of every peer response of one direction; 0 for one that could not be imported."""
    return [
        0.0 if imp.drop else admission_weight(s, delta=delta, mode=mode)
        for s, imp in zip(s_values, imported, strict=True)
    ]
