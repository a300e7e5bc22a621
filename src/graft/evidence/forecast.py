"""What `graft probe` reports, from plain counts (pure: no model, no I/O).

Per model, from each prompt's number of correct responses out of n: pass@1, and the shares of
prompts whose group is all-fail, all-pass and mixed (only mixed groups carry a GRPO signal),
each with a 95% interval over prompts; and the chance of a mixed group at a larger n under the
measured per-prompt accuracies. Per direction A -> B: B's all-fail share, the paper's
complementarity (of B's all-fail prompts, the share A solves at least once), the gate's candidate
share after balancing, the compatibility scores s of A's correct and wrong responses under B,
the share each documented weight admits, and the forecast per step with intervals over the
probe's steps (each step's prompts are an independent draw, so steps are the clusters).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from graft.evidence.regime import STARVED_BELOW
from graft.evidence.stats import paired_interval, t_quantile
from graft.exchange.diagnostics import quantiles

Z95 = 1.959963984540054
"""The 97.5% quantile of the standard normal."""
LITTLE_TO_DO = 0.05
"""Below this all-fail share of a receiver, GRAFT has little to replace."""
WEIGHTS = ("paper", "per_byte", "receiver_relative", "none")
"""The documented weights whose admission the probe reports."""


def wilson(k: int, n: int) -> tuple[float, float]:
    """The 95% Wilson score interval of a share k / n (exact at the ends: 0 and 1 stay inside)."""
    if n <= 0:
        return (0.0, 1.0)
    p = k / n
    z2 = Z95 * Z95
    center = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = Z95 * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return (max(0.0, center - half), min(1.0, center + half))


def share(k: int, n: int) -> dict[str, float]:
    low, high = wilson(k, n)
    return {
        "count": float(k),
        "of": float(n),
        "share": k / n if n else 0.0,
        "low": low,
        "high": high,
    }


def mean_interval(
    values: Sequence[float], *, floor: float | None = None
) -> dict[str, float | None]:
    """Mean with its 95% Student t interval (None with fewer than 2 values); `floor` bounds the
    interval below (0 for counts)."""
    if not values:
        return {"mean": 0.0, "low": None, "high": None}
    iv = paired_interval(values)
    low = iv.low if iv.low is None or floor is None else max(floor, iv.low)
    return {"mean": iv.mean, "low": low, "high": iv.high}


def ratio_interval(num_C: Sequence[float], den_C: Sequence[float]) -> dict[str, float | None]:
    """sum(num) / sum(den) over clusters, with the 95% interval of the ratio estimator
    (linearized: the residuals num_c - r den_c, t with C - 1 degrees of freedom). None where
    the denominator is 0 or there is one cluster."""
    total = sum(den_C)
    if total <= 0:
        return {"ratio": None, "low": None, "high": None}
    r = sum(num_C) / total
    c = len(den_C)
    if c < 2:
        return {"ratio": r, "low": None, "high": None}
    mean_den = total / c
    residuals = [a - r * b for a, b in zip(num_C, den_C)]
    se = math.sqrt(sum(e * e for e in residuals) / (c * (c - 1))) / mean_den
    half = t_quantile(0.975, c - 1) * se
    return {"ratio": r, "low": max(0.0, r - half), "high": min(1.0, r + half)}


def mixed_probability(num_correct_P: Sequence[int], n: int, n_new: int) -> float:
    """The mean chance that a group of n_new responses is mixed, with each prompt's accuracy
    taken as measured (c / n). A prompt with no correct response out of n counts as never
    solved, so for n_new > n this is a lower bound."""
    if not num_correct_P:
        return 0.0
    total = 0.0
    for c in num_correct_P:
        p = c / n
        total += 1.0 - p**n_new - (1.0 - p) ** n_new
    return total / len(num_correct_P)


def resample_need(p: float, *, prompts: int, n: int, max_rounds: int) -> dict[str, float]:
    """Dynamic sampling (`zero_contrast.mode=resample`) at a mixed share p per fresh prompt.

    Each round samples as many prompts as the batch misses, so each of the `prompts` places of
    the batch is filled independently, after a geometric number of extra draws: it is still empty
    after r extra rounds with probability (1 - p)^(r + 1). Hence, per step:
    - to fill the batch whatever it takes: n P (1 - p) / p extra responses on average, and
      sum_r [1 - (1 - (1 - p)^(r + 1))^P] extra rounds (the slowest place decides);
    - within `max_rounds` rounds: n P sum_{r=1..R} (1 - p)^r extra responses, a mean fill of
      1 - (1 - p)^(R + 1), and a full batch with probability (1 - (1 - p)^(R + 1))^P.
    `zero_contrast.max_responses` is not modelled (it can only lower the responses and the fill).
    """
    q = 1.0 - p
    if p <= 0.0:
        inf = math.inf
        return {
            "responses_to_fill": inf,
            "rounds_to_fill": inf,
            "responses": n * prompts * max_rounds,
            "fill": 0.0,
            "full": 0.0,
        }
    rounds, r = 0.0, 0
    while (term := 1.0 - (1.0 - q ** (r + 1)) ** prompts) > 1e-9 and r < 100_000:
        rounds, r = rounds + term, r + 1
    return {
        "responses_to_fill": n * prompts * q / p,
        "rounds_to_fill": rounds,
        "responses": n * prompts * sum(q**k for k in range(1, max_rounds + 1)),
        "fill": 1.0 - q ** (max_rounds + 1),
        "full": (1.0 - q ** (max_rounds + 1)) ** prompts,
    }


def resample_forecast(
    mixed: Mapping[str, float], *, prompts: int, n: int, max_rounds: int
) -> dict[str, Any]:
    """`resample_need` at the measured mixed share, with the interval its Wilson interval gives
    (every figure is monotone in p); None where it is infinite (no mixed group: never full)."""
    at = {
        k: resample_need(mixed[k], prompts=prompts, n=n, max_rounds=max_rounds)
        for k in ("share", "low", "high")
    }

    def finite(x: float) -> float | None:  # None: never (JSON has no infinity)
        return None if math.isinf(x) else x

    return {
        "prompts": prompts,
        "n": n,
        "max_rounds": max_rounds,
        **{
            key: {
                "mean": finite(at["share"][key]),
                "low": finite(min(at["low"][key], at["high"][key])),
                "high": finite(max(at["low"][key], at["high"][key])),
            }
            for key in at["share"]
        },
    }


def resample_verdict(m: Mapping[str, Any], *, name: str) -> str:
    """One model under dynamic sampling, in plain words."""
    r = m["resample"]
    step = r["prompts"] * r["n"]
    need = r["responses_to_fill"]["mean"]
    if need is None:
        return (
            f"{name}: dynamic sampling cannot fill a batch (no mixed group measured); within "
            f"{r['max_rounds']} rounds it would sample {r['responses']['mean']:.0f} extra "
            "responses a step for nothing"
        )
    rounds, fill, full = (r[k]["mean"] for k in ("rounds_to_fill", "fill", "full"))
    return (
        f"{name}: dynamic sampling would need about {need:.0f} extra responses per step "
        f"({100 * need / step:.0f}% more than the step's {step}) and {rounds:.1f} extra rounds "
        f"to fill the batch with mixed groups; within {r['max_rounds']} rounds it fills "
        f"{100 * fill:.0f}% of it on average ({100 * full:.0f}% of steps full) for "
        f"{r['responses']['mean']:.0f} extra responses"
    )


def model_summary(num_correct_P: Sequence[int], n: int) -> dict[str, Any]:
    """pass@1 and the group shares of one model over the probe's prompts."""
    prompts = len(num_correct_P)
    fail = sum(c == 0 for c in num_correct_P)
    passed = sum(c == n for c in num_correct_P)
    return {
        "prompts": prompts,
        "n": n,
        "pass1": mean_interval([c / n for c in num_correct_P]),
        "all_fail": share(fail, prompts),
        "all_pass": share(passed, prompts),
        "mixed": share(prompts - fail - passed, prompts),
        "mixed_if_n": {str(k): mixed_probability(num_correct_P, n, k) for k in (n, 2 * n, 4 * n)},
    }


def direction_summary(
    receiver_P: Sequence[int],
    source_P: Sequence[int],
    n: int,
    steps: Sequence[Mapping[str, float]],
    scores: Sequence[tuple[float, bool]],
) -> dict[str, Any]:
    """One direction source -> receiver over the probe. `receiver_P`, `source_P`: correct
    responses per prompt (the same prompts, in order); `steps`: the exchange's count diagnostics
    of each step (`candidates`, `responses_sent`, `admitted`, `admit_if/<score>/<label>`, ...);
    `scores`: (s, correct) of every response sent (NaN: dropped before scoring)."""
    prompts = len(receiver_P)
    failed = [i for i, c in enumerate(receiver_P) if c == 0]
    rescued = sum(source_P[i] > 0 for i in failed)
    mixed = sum(0 < source_P[i] < n for i in failed)

    def col(key: str) -> list[float]:
        return [s.get(key, 0.0) for s in steps]

    sent, sent_correct = col("responses_sent"), col("sent_correct")
    sent_wrong = [a - b for a, b in zip(sent, sent_correct)]
    admitted = {
        w: {
            "correct": ratio_interval(col(f"admit_if/{w}/correct"), sent_correct),
            "wrong": ratio_interval(col(f"admit_if/{w}/wrong"), sent_wrong),
        }
        for w in WEIGHTS
        if w != "none"
    }
    kept = [a - b - c for a, b, c in zip(sent, col("dropped_too_long"), col("dropped_empty"))]
    admitted["none"] = {"all": ratio_interval(kept, sent)}
    valid = [(s, ok) for s, ok in scores if not math.isnan(s)]
    return {
        "prompts": prompts,
        "receiver_all_fail": share(len(failed), prompts),
        "complementarity": share(rescued, len(failed)),
        "peer_mixed_on_all_fail": share(mixed, len(failed)),
        "candidates": share(int(sum(col("candidates"))), prompts),
        "selected": share(int(sum(col("selected"))), prompts),
        "sent": sum(sent),
        "sent_correct": sum(sent_correct),
        "admitted": ratio_interval(col("admitted"), sent),
        "admitted_correct": ratio_interval(col("admitted_correct"), sent_correct),
        "admitted_wrong": ratio_interval(col("admitted_wrong"), sent_wrong),
        "admitted_if": admitted,
        "s_correct": quantiles([s for s, ok in valid if ok]),
        "s_wrong": quantiles([s for s, ok in valid if not ok]),
        "per_step": {
            "grafted_groups": mean_interval(col("prompts_grafted"), floor=0.0),
            "admitted_responses": mean_interval(col("admitted"), floor=0.0),
            "candidates": mean_interval(col("candidates"), floor=0.0),
        },
    }


def verdict(d: Mapping[str, Any], *, source: str, receiver: str, weight: str) -> str:
    """The forecast of one direction in plain words."""
    fail = d["receiver_all_fail"]
    if fail["share"] < LITTLE_TO_DO:
        return (
            f"GRAFT has little to do here: {receiver} fails every rollout on only "
            f"{100 * fail['share']:.1f}% of prompts"
        )
    if d["candidates"]["count"] == 0:
        return (
            f"GRAFT has little to do here: {source} rescues none of {receiver}'s "
            f"{int(fail['count'])} all-fail prompts with a mixed group"
        )
    got = d["admitted_correct"]["ratio"]
    if got is not None and got < STARVED_BELOW:
        others = {
            w: v["correct"]["ratio"]
            for w, v in d["admitted_if"].items()
            if w not in (weight, "none") and v["correct"]["ratio"] is not None
        }
        best = max(others, key=lambda w: others[w]) if others else None
        alt = f"; {best} admits {100 * others[best]:.0f}%" if best else ""
        return (
            f"the {weight} weight would starve {source} -> {receiver} (it admits "
            f"{100 * got:.0f}% of {source}'s correct responses){alt}"
        )
    per = d["per_step"]
    return (
        f"expect about {per['grafted_groups']['mean']:.1f} grafted groups and "
        f"{per['admitted_responses']['mean']:.1f} admitted responses per step "
        f"({source} -> {receiver})"
    )


def grpo_verdict(m: Mapping[str, Any], *, name: str) -> str:
    """One model alone: how much of its batch carries a GRPO signal."""
    zero = 1.0 - m["mixed"]["share"]
    n = m["n"]
    now, bigger = m["mixed_if_n"][str(n)], m["mixed_if_n"][str(4 * n)]
    return (
        f"{name}: {100 * zero:.0f}% of groups carry no GRPO signal (all-fail "
        f"{100 * m['all_fail']['share']:.0f}%, all-pass {100 * m['all_pass']['share']:.0f}%); "
        f"under the measured per-prompt accuracies a group is mixed with probability "
        f"{100 * now:.0f}% at n={n} and {100 * bigger:.0f}% at n={4 * n}"
    )
