"""What `graft probe` writes: probe.md, probe.json and probe.png from the probe's summary."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from graft.evidence.forecast import WEIGHTS

MEANING = (
    "Shares are over the probe's prompts with 95% Wilson intervals; pass@1 and the per-step "
    "forecast carry 95% t intervals (per step: over the probe's steps); admitted shares are "
    "ratios over the responses sent, with intervals over steps. all-fail: every response wrong "
    "(GRPO learns nothing there); mixed: the only groups with a GRPO signal; complementarity: of "
    "the receiver's all-fail prompts, the share the source solves at least once (the paper's "
    "Figure 1); candidates: the gate's prompts after balancing; s: the compatibility score under "
    "the receiver, as training computes it. P(mixed), plug-in: the chance that a group of that "
    "size is mixed if each prompt's accuracy is what was measured (a prompt never solved counts "
    "as unsolvable, so the larger sizes are lower bounds)."
)


RESAMPLE_MEANING = (
    "What GRPO with dynamic sampling (models.N.zero_contrast.mode=resample) would spend per step "
    "for each model alone, from its measured mixed share: each round samples as many fresh "
    "prompts as the batch misses, and a place of the batch stays empty after r rounds with "
    "probability (1 - mixed)^(r + 1). Intervals come from the mixed share's interval; "
    "max_responses is not modelled. GRAFT fills a receiver's all-fail places from a peer's "
    "groups instead, without sampling (its forecast is under Directions)."
)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _share(s: Mapping[str, float]) -> str:
    return f"{_pct(s['share'])} [{_pct(s['low'])}, {_pct(s['high'])}]"


def _ratio(r: Mapping[str, float | None]) -> str:
    if r["ratio"] is None:
        return "-"
    if r["low"] is None:
        return _pct(r["ratio"])
    return f"{_pct(r['ratio'])} [{_pct(r['low'])}, {_pct(r['high'])}]"


def _mean(m: Mapping[str, float | None], scale: float = 1.0, unit: str = "") -> str:
    mean = f"{scale * m['mean']:.1f}{unit}"
    if m["low"] is None:
        return mean
    return f"{mean} [{scale * m['low']:.1f}, {scale * m['high']:.1f}]"


def model_lines(summary: Mapping[str, Any]) -> list[str]:
    n = summary["n"]
    lines = [
        "| model | pass@1 | all-fail | all-pass | mixed | P(mixed), plug-in: "
        f"n={n} / {2 * n} / {4 * n} |",
        "|---|---|---|---|---|---|",
    ]
    for name, m in summary["models"].items():
        cells = [
            _mean(m["pass1"], 100, "%"),
            _share(m["all_fail"]),
            _share(m["all_pass"]),
            _share(m["mixed"]),
            " / ".join(_pct(m["mixed_if_n"][str(k * n)]) for k in (1, 2, 4)),
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def resample_lines(summary: Mapping[str, Any]) -> list[str]:
    """What dynamic sampling (`zero_contrast.mode=resample`) would cost each model alone."""
    lines = [
        "| model | mixed | extra responses to fill a step | extra rounds to fill | within "
        "max_rounds: extra responses / mean fill / full steps |",
        "|---|---|---|---|---|",
    ]
    for name, m in summary["models"].items():
        r = m["resample"]

        def num(key: str, r=r) -> str:
            v = r[key]
            if v["mean"] is None:
                return "never"
            high = "never" if v["high"] is None else f"{v['high']:.1f}"
            return f"{v['mean']:.1f} [{v['low']:.1f}, {high}]"

        within = (
            f"{r['max_rounds']}: {num('responses')} / {_pct(r['fill']['mean'])} / "
            f"{_pct(r['full']['mean'])}"
        )
        cells = [_share(m["mixed"]), num("responses_to_fill"), num("rounds_to_fill"), within]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def direction_lines(summary: Mapping[str, Any]) -> list[str]:
    weight = summary["weight"]
    lines = [
        "| direction | receiver all-fail | complementarity | candidates | admitted correct / "
        f"wrong ({weight}) | grafted groups per step | admitted per step |",
        "|---|---|---|---|---|---|---|",
    ]
    for key, d in summary["directions"].items():
        per = d["per_step"]
        cells = [
            _share(d["receiver_all_fail"]),
            _share(d["complementarity"]),
            _share(d["candidates"]),
            f"{_ratio(d['admitted_correct'])} / {_ratio(d['admitted_wrong'])}",
            _mean(per["grafted_groups"]),
            _mean(per["admitted_responses"]),
        ]
        lines.append(f"| {key} | " + " | ".join(cells) + " |")
    lines += [
        "",
        f"What each weight would admit at delta {summary['delta']:g} (correct / wrong; none: "
        "every response that imports), and the scores s (p10 / p50 / p90):",
        "",
        "| direction | " + " | ".join(WEIGHTS) + " | s of correct | s of wrong |",
        "|---|" + "---|" * (len(WEIGHTS) + 2),
    ]
    for key, d in summary["directions"].items():
        admit = d["admitted_if"]
        cells = [
            f"{_ratio(admit[w]['correct'])} / {_ratio(admit[w]['wrong'])}"
            for w in WEIGHTS
            if w != "none"
        ]
        cells.append(_ratio(admit["none"]["all"]))
        for label in ("s_correct", "s_wrong"):
            q = d[label]
            cells.append(" / ".join(f"{q[k]:.2f}" for k in ("p10", "p50", "p90")) if q else "-")
        lines.append(f"| {key} | " + " | ".join(cells) + " |")
    return lines


SKILL_MEANING = (
    "Per model and skill, the share of prompts on which the model's whole group fails, and of "
    "prompts on which it fails while another model's group is mixed: where GRAFT can graft "
    "(before the compatibility weight)."
)


def skill_lines(skills: Mapping[str, Mapping[str, Mapping[str, float]]]) -> list[str]:
    names = list(skills)
    keys = list(next(iter(skills.values())))
    head = "| model | " + " | ".join(f"{k}: all fail / fail, peer mixed" for k in keys) + " |"
    lines = [head, "|---" * (len(keys) + 1) + "|"]
    for m in names:
        cells = [
            f"{skills[m][k]['all_fail']:.0%} / {skills[m][k]['fail_peer_mixed']:.0%}" for k in keys
        ]
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    prompts = ", ".join(f"{k} {skills[names[0]][k]['prompts']}" for k in keys)
    return [*lines, "", f"Prompts per skill: {prompts}."]


def markdown(summary: Mapping[str, Any], *, seconds: float) -> str:
    text = [
        f"# graft probe: {summary['prompts']} prompts ({summary['steps']} steps), "
        f"n = {summary['n']}",
        "",
        *[f"- {v}" for v in summary["verdicts"]],
        "",
        MEANING,
        "",
        "## Models",
        "",
        *model_lines(summary),
        "",
    ]
    text += [
        "## Dynamic sampling instead",
        "",
        RESAMPLE_MEANING,
        "",
        *resample_lines(summary),
        "",
    ]
    if summary.get("skills"):
        text += ["## Per skill", "", SKILL_MEANING, "", *skill_lines(summary["skills"]), ""]
    if summary["directions"]:
        text += ["## Directions", "", *direction_lines(summary), ""]
    text.append(
        f"Sampled, verified and exchanged in {summary['seconds_steps']:.0f} s "
        f"({seconds:.0f} s with loading the models)."
    )
    reused = [name for name, k in summary["sampled_steps"].items() if k < summary["steps"]]
    if reused:
        text.append(f"Rollouts reused from the cache: {', '.join(reused)}.")
    return "\n".join(text) + "\n"


def plot(raw: Mapping[str, Any], summary: Mapping[str, Any], out: Path) -> None:
    """probe.png: per direction, the histogram of s for the source's correct and wrong responses,
    with the configured delta."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = list(summary["directions"]) or ["(one model: no direction)"]
    fig, axes = plt.subplots(1, len(keys), figsize=(4.5 * len(keys), 3.4), squeeze=False)
    for ax, key in zip(axes[0], keys):
        scores = [
            (s, ok)
            for st in raw["steps"]
            for s, ok in st["directions"].get(key, {}).get("scores", [])
            if not math.isnan(s)
        ]
        for want, color, label in ((True, "#2ca02c", "correct"), (False, "#d62728", "wrong")):
            values = [s for s, ok in scores if ok == want]
            if values:
                ax.hist(values, bins=30, alpha=0.6, color=color, label=f"{label} ({len(values)})")
        ax.axvline(summary["delta"], color="k", ls="--", lw=1, label=f"delta {summary['delta']:g}")
        ax.set(title=key, xlabel=f"s ({summary['weight']})", ylabel="responses")
        if scores:
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


def write_report(
    raw: Mapping[str, Any], summary: Mapping[str, Any], out: Path, *, seconds: float
) -> str:
    """Write probe.md, probe.json (the summary and every step's counts) and probe.png."""
    out.mkdir(parents=True, exist_ok=True)
    text = markdown(summary, seconds=seconds)
    (out / "probe.md").write_text(text)
    body = {"summary": summary, "raw": raw, "seconds": seconds}
    (out / "probe.json").write_text(json.dumps(body, indent=1, sort_keys=True))
    plot(raw, summary, out / "probe.png")
    return text
