"""The exchange regime of a run: where the gate finds candidates and how much the weight admits.

From the per-direction counts in metrics.jsonl (`x/<source>-><receiver>/...`, summed over steps
and seeds): for each direction, per skill, the receiver's all-fail share, the source's mixed share
on those prompts, and the admitted share of the source's correct and wrong responses, plus what
each documented score would have admitted. A direction that admits under STARVED_BELOW of the
peer's correct responses is starved by its gate, and the report says which score admits more.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

STARVED_BELOW = 0.2
"""A direction admitting less than this share of the peer's correct responses is "starved"."""

COUNT_KEYS = (
    "candidates",
    "selected",
    "prompts_grafted",
    "responses_sent",
    "admitted",
    "sent_correct",
    "admitted_correct",
    "admitted_wrong",
    "dropped_weight",
    "dropped_too_long",
    "dropped_empty",
)
"""Per-direction diagnostics that are counts, so they add up over steps and seeds."""


def is_count(metric: str) -> bool:
    return metric in COUNT_KEYS or metric.startswith(("by_skill/", "admit_if/"))


def direction_totals(
    records: Iterable[Mapping[str, Any]], *, receiver: str
) -> dict[int, dict[str, float]]:
    """Step -> the count diagnostics of every direction into `receiver` (`<src>-><receiver>/k`)."""
    out: dict[int, dict[str, float]] = {}
    for r in records:
        for key, value in r.items():
            if not key.startswith("x/") or not isinstance(value, int | float):
                continue
            direction, _, metric = key[2:].partition("/")
            dst = direction.partition("->")[2]
            if dst == receiver and is_count(metric):
                out.setdefault(int(r["step"]), {})[f"{direction}/{metric}"] = float(value)
    return out


def sum_totals(per_step: Iterable[Mapping[int, Mapping[str, float]]]) -> dict[str, float]:
    """Sum the step-wise counts of several runs (one mapping per run)."""
    total: dict[str, float] = {}
    for run in per_step:
        for counts in run.values():
            for key, value in counts.items():
                total[key] = total.get(key, 0.0) + value
    return total


def _share(num: float, den: float) -> float | None:
    return num / den if den > 0 else None


def direction_report(
    totals: Mapping[str, float], direction: str, *, weight: str, delta: float
) -> dict[str, Any]:
    """The regime of one direction from summed counts (keys `<direction>/<metric>`)."""

    def get(metric: str) -> float:
        return totals.get(f"{direction}/{metric}", 0.0)

    sent_c = get("sent_correct")
    sent_w = get("responses_sent") - sent_c
    report: dict[str, Any] = {
        "candidates": get("candidates"),
        "selected": get("selected"),
        "sent_correct": sent_c,
        "sent_wrong": sent_w,
        "admitted_correct_share": _share(get("admitted_correct"), sent_c),
        "admitted_wrong_share": _share(get("admitted_wrong"), sent_w),
        "skills": {},
        "if": {},
    }
    prefix = f"{direction}/by_skill/"
    skills = sorted({k[len(prefix) :].rsplit("/", 1)[0] for k in totals if k.startswith(prefix)})
    for skill in skills:

        def sk(metric: str, skill: str = skill) -> float:
            return get(f"by_skill/{skill}/{metric}")

        report["skills"][skill] = {
            "all_fail_share": _share(sk("all_fail"), sk("prompts")),
            "peer_mixed_share": _share(sk("peer_mixed"), sk("all_fail")),
            "admitted_correct_share": _share(sk("admitted_correct"), sk("sent_correct")),
            "admitted_wrong_share": _share(sk("admitted_wrong"), sk("sent_wrong")),
        }
    for score in ("paper", "per_byte", "receiver_relative"):
        if f"{direction}/admit_if/{score}/correct" in totals:
            report["if"][score] = {
                "correct": _share(get(f"admit_if/{score}/correct"), sent_c),
                "wrong": _share(get(f"admit_if/{score}/wrong"), sent_w),
            }
    report["starved"], report["message"] = _verdict(report, direction, weight=weight, delta=delta)
    return report


def _verdict(report: Mapping[str, Any], direction: str, *, weight: str, delta: float) -> tuple:
    share = report["admitted_correct_share"]
    if share is None:
        return False, f"{direction}: no peer responses were offered (the gate found no candidates)"
    if share >= STARVED_BELOW:
        return False, (
            f"{direction}: the weight admitted {100 * share:.0f}% of the peer's correct responses "
            f"(and {_pct(report['admitted_wrong_share'])} of its wrong ones)"
        )
    alternatives = {
        s: v["correct"] for s, v in report["if"].items() if s != weight and v["correct"]
    }
    text = (
        f"{direction}: the gate starves this direction: exchange.ablation.weight={weight} (delta "
        f"{delta:g}) admitted only {100 * share:.0f}% of the peer's correct responses"
    )
    if alternatives:
        best = max(alternatives, key=lambda s: alternatives[s])
        if alternatives[best] > share:
            wrong = report["if"][best]["wrong"]
            text += (
                f"; exchange.ablation.weight={best} would have admitted "
                f"{100 * alternatives[best]:.0f}% (and {_pct(wrong)} of the wrong ones)"
            )
    return True, text


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.0f}%"


def directions_into(totals: Mapping[str, float]) -> list[str]:
    """The direction names present in summed counts."""
    return sorted({k.split("/", 1)[0] for k in totals})


def regime_reports(
    runs: Sequence[Mapping[int, Mapping[str, float]]], *, weight: str, delta: float
) -> dict[str, dict[str, Any]]:
    """Per direction, the report over several runs (seeds) of one method and receiver."""
    totals = sum_totals(runs)
    return {
        d: direction_report(totals, d, weight=weight, delta=delta) for d in directions_into(totals)
    }
