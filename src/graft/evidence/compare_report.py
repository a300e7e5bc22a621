"""What `graft compare` writes: compare.md, compare.json and compare.png from `compare_runs`."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from graft.evidence.compare import CURVE_MEAN
from graft.evidence.compute_axis import COST_KEYS
from graft.evidence.endpoints import axis_points, final_point, point_index

INTERVAL_RULE = (
    "Differences are method − baseline in points (percent), paired by seed (same seed: same "
    "initial weights, prompt order and evaluation samples; a seed without a partner is left out "
    "of the differences and named): the mean over seeds and its 95% Student t interval. A "
    "verdict needs 3 seeds or more and some spread between them; below that the interval is "
    "shown with 'no verdict'. The primary endpoints (eval.primary or --primary) are tested as "
    "one family with Holm's correction, so the chance of any false 'significant' among them is "
    "5%. Every other cell is exploratory: about 1 in 20 of them excludes 0 by chance when a "
    "method changes nothing."
)


def metric_name(key: str) -> str:
    """`eval/test/mul:3,1:2-5/avg@4` -> `test mul:3,1:2-5 avg@4`."""
    return " ".join(key.split("/")[1:])


def headline_metrics(metrics: Sequence[str]) -> list[str]:
    """The avg@k metrics (suite and per skill); pass@k stays in compare.json."""
    return [m for m in metrics if "/avg@" in m]


def fmt_interval(iv: Mapping[str, Any], *, scale: float = 100.0) -> str:
    """`+1.2 [-0.3, +2.7]`, or `+1.2 (one seed)`."""
    mean = f"{scale * iv['mean']:+.1f}"
    if iv["low"] is None:
        return f"{mean} (one seed)"
    return f"{mean} [{scale * iv['low']:+.1f}, {scale * iv['high']:+.1f}]"


def verdict(iv: Mapping[str, Any]) -> str:
    """A primary cell's verdict after Holm; an exploratory cell's reading; or why none."""
    if iv.get("no_verdict"):
        return f"no verdict ({iv['no_verdict']})"
    if iv.get("primary"):
        word = "**significant**" if iv["holm_significant"] else "not significant"
        return f"{word} (primary, Holm p={iv['holm_p']:.3g})"
    return "exploratory: excludes 0" if iv["significant"] else "exploratory"


def delta_table(policy: Mapping[str, Any], *, metrics: Sequence[str] | None = None) -> list[str]:
    """Final and curve-mean differences against the baseline, one row per method and metric."""
    lines = [
        "| method | metric | final Δ [95% CI] | | curve mean Δ [95% CI] | | seeds |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, entry in policy["vs_baseline"].items():
        for m in metrics or headline_metrics(list(entry["metrics"])):
            points = entry["metrics"][m]
            fin = points[final_point(list(points))]
            cells = [label, metric_name(m), fmt_interval(fin), verdict(fin)]
            if CURVE_MEAN in points:
                cells += [fmt_interval(points[CURVE_MEAN]), verdict(points[CURVE_MEAN])]
            else:
                cells += ["-", "-"]
            cells.append(str(len(entry["seeds"])))
            lines.append("| " + " | ".join(cells) + " |")
    return lines


def _seeds(seeds: Sequence[int]) -> str:
    return ", ".join(str(s) for s in seeds)


def si(value: float) -> str:
    """A count in three significant figures with an SI prefix: 1.23M, 45.6G."""
    for factor, unit in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.3g}{unit}"
    return f"{value:.3g}"


def point_label(policy: Mapping[str, Any], point: str) -> str:
    """`step 20`, or on a compute axis the compute of point j (`1.23M`)."""
    if point.startswith("at_"):
        return si(policy["axis"]["points"][point_index(point)])
    return point.replace("step_", "step ")


def point_x(policy: Mapping[str, Any], point: str) -> float:
    if point.startswith("at_"):
        return policy["axis"]["points"][point_index(point)]
    return float(point_index(point))


def step_table(policy: Mapping[str, Any], metric: str) -> list[str]:
    """Mean accuracy per method at every evaluation step or compute point (over all its seeds,
    named), and the difference at each (over the paired seeds, named)."""
    methods = policy["methods"]
    any_method = next(iter(methods.values()))
    points = axis_points(list(any_method["points"][metric]))
    head = ["method (seeds)", *(point_label(policy, p) for p in points)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label, entry in methods.items():
        row = [f"{100 * entry['points'][metric][p]['mean']:.1f}" for p in points]
        lines.append("| " + " | ".join([f"{label} ({_seeds(entry['seeds'])})", *row]) + " |")
    for label, entry in policy["vs_baseline"].items():
        row = [fmt_interval(entry["metrics"][metric][p]) for p in points]
        name = f"Δ {label} (paired: {_seeds(entry['seeds'])})"
        lines.append("| " + " | ".join([name, *row]) + " |")
    return lines


def pairing_lines(policy: Mapping[str, Any], baseline: str) -> list[str]:
    """Which seeds were left out of the differences, and methods with no seed to pair."""
    lines = []
    for label, entry in policy["vs_baseline"].items():
        alone = [
            f"seeds {_seeds(seeds)} of {who!r}"
            for who, seeds in (
                (label, entry["unpaired_seeds"]),
                (baseline, entry["baseline_unpaired_seeds"]),
            )
            if seeds
        ]
        if alone:
            lines.append(
                f"- {label!r} vs {baseline!r}: {' and '.join(alone)} have no partner and are left "
                f"out of the differences (the per-method means include them)."
            )
    for label, u in policy["unpaired"].items():
        lines.append(
            f"- {label!r}: no seed in common with the baseline ({label!r}: seeds "
            f"{_seeds(u['seeds'])}; {baseline!r}: seeds {_seeds(u['baseline'])}), so no "
            "difference is computed."
        )
    return lines


def regime_lines(policy: Mapping[str, Any]) -> list[str]:
    """The exchange regime of every method that exchanged into this policy."""
    lines: list[str] = []
    for label, entry in policy["methods"].items():
        for rep in entry.get("regime", {}).values():
            lines += [f"**{label}**: {rep['message']}.", ""]
            if rep["skills"]:
                lines += [
                    "| skill | receiver all-fail | peer mixed on those | admitted correct | "
                    "admitted wrong |",
                    "|---|---|---|---|---|",
                ]
                for skill, s in rep["skills"].items():
                    cells = [
                        _pct(s["all_fail_share"]),
                        _pct(s["peer_mixed_share"]),
                        _pct(s["admitted_correct_share"]),
                        _pct(s["admitted_wrong_share"]),
                    ]
                    lines.append("| " + " | ".join([skill, *cells]) + " |")
                lines.append("")
            if rep["if"] and rep["sent_correct"]:
                alts = ", ".join(
                    f"{score} {_pct(v['correct'])} / {_pct(v['wrong'])}"
                    for score, v in rep["if"].items()
                )
                lines += [f"Admitted correct / wrong under each score at this delta: {alts}.", ""]
    return lines


COST_RULE = (
    "What a run cost in all (every policy of the run together, as co-training a peer is part of "
    "a method's cost), the mean over its seeds: responses sampled, their tokens, tokens of "
    "forward passes without a backward (scoring peer responses, recomputed log-probs), tokens "
    "of the update's forward and backward passes, the FLOP estimate 2N per forward token and "
    "6N per trained token (docs/method.md), process CPU seconds per phase, and the CPU seconds "
    "spent verifying responses (the verifier workers and the programs they ran)."
)


def cpu_seconds(value: float) -> str:
    """CPU seconds to three significant figures (a short run's 0.042 s, not "0"); whole seconds
    from 1000 on."""
    if value == 0:
        return "0"
    if abs(value) >= 1000:
        return f"{value:.0f}"
    digits = max(0, 2 - math.floor(math.log10(abs(value))))
    return f"{value:.{digits}f}"


def cost_table(policy: Mapping[str, Any], baseline: str) -> list[str]:
    """The paper's cost comparison in miniature: one row per method that counted its cost."""
    rows = {label: e["cost"] for label, e in policy["methods"].items() if e.get("cost")}
    if not rows:
        return []
    base = rows.get(baseline, {}).get("flops", {}).get("mean")
    lines = [
        "| method | steps | responses | generated tokens | forward-only tokens | trained tokens "
        "| FLOPs | FLOPs vs baseline | CPU s: generate / score / train / verify |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for label, cost in rows.items():
        mean = {k: v["mean"] for k, v in cost.items()}
        ratio = f"{mean['flops'] / base:.2f}x" if base and "flops" in mean else "-"
        cpu = " / ".join(
            cpu_seconds(mean[k]) if (k := f"{p}_cpu_s") in mean else "-"
            for p in ("generate", "score", "train", "verify")
        )
        cells = [f"{mean['steps']:.0f}"]
        cells += [si(mean[k]) if k in mean else "-" for k in COST_KEYS[:5]]
        lines.append("| " + " | ".join([label, *cells, ratio, cpu]) + " |")
    return [COST_RULE, "", *lines]


def axis_rule(axis: Mapping[str, Any]) -> str:
    return (
        f"Curves are read at equal {axis['label']} (each run's cumulative total, all its "
        "policies together) instead of equal steps: per policy, evenly spaced points from the "
        "first evaluation every run has reached to the last one every run has reached, each "
        "run's curve interpolated linearly between its evaluations and never read beyond its "
        "last; the final point is the largest compute every run reached."
    )


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def markdown(result: Mapping[str, Any]) -> str:
    text = [
        f"# graft compare: baseline {result['baseline']!r}",
        "",
        INTERVAL_RULE,
        "",
        primary_line(result.get("primary", {})),
        "",
    ]
    axis = result.get("axis", {"name": "steps"})
    if axis["name"] != "steps":
        text += [axis_rule(axis), ""]
    for name, policy in result["policies"].items():
        text += [f"## {name}", "", "| method | seeds | runs |", "|---|---|---|"]
        for label, entry in policy["methods"].items():
            seeds = ", ".join(str(s) for s in entry["seeds"])
            text.append(f"| {label} | {seeds} | {len(entry['runs'])} |")
        text.append("")
        costs = cost_table(policy, result["baseline"])
        if costs:
            text += ["### Cost", "", *costs, ""]
        pairing = pairing_lines(policy, result["baseline"])
        if pairing:
            text += [*pairing, ""]
        if policy["vs_baseline"]:
            text += ["### Against the baseline: final and mean over the curve", ""]
            text += [*delta_table(policy), ""]
            any_method = next(iter(policy["methods"].values()))
            for metric in headline_metrics(list(any_method["points"])):
                where = "every evaluation" if axis["name"] == "steps" else f"equal {axis['label']}"
                text += [f"### {metric_name(metric)} at {where}", ""]
                text += [*step_table(policy, metric), ""]
        elif result["baseline"] not in policy["methods"]:
            text += [f"No runs of the baseline for {name}.", ""]
        regime = regime_lines(policy)
        if regime:
            text += ["### Exchange regime (summed over steps and seeds)", "", *regime]
    return "\n".join(text) + "\n"


def primary_line(primary: Mapping[str, Any]) -> str:
    if not primary.get("endpoints"):
        return (
            "No primary endpoints are named (eval.primary or --primary): every cell below is "
            "exploratory."
        )
    return (
        f"Primary endpoints: {', '.join(primary['endpoints'])}; {primary['tests']} tests "
        f"corrected together (Holm, family-wise {100 * primary['alpha']:g}%)."
    )


def draw_bands(ax: Any, policy: Mapping[str, Any], metric: str, *, colors: Mapping) -> None:
    """One line per method (mean over seeds) with its 95% band, on one axes."""
    for label, entry in policy["methods"].items():
        pts = entry["points"].get(metric)
        if not pts:
            continue
        steps = axis_points(list(pts))
        x = [point_x(policy, p) for p in steps]
        mean = [100 * pts[p]["mean"] for p in steps]
        ax.plot(x, mean, marker="o", ms=3, label=label, color=colors.get(label))
        if all(pts[p]["low"] is not None for p in steps):
            low = [100 * pts[p]["low"] for p in steps]
            high = [100 * pts[p]["high"] for p in steps]
            ax.fill_between(x, low, high, alpha=0.15, color=colors.get(label))
    ax.set(xlabel=policy.get("axis", {}).get("label", "step"), ylabel="accuracy (%)")
    ax.grid(alpha=0.3)


def method_colors(labels: Sequence[str]) -> dict[str, str]:
    palette = ["#444444", "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]
    palette += ["#e377c2", "#17becf", "#bcbd22"]
    return {label: palette[i % len(palette)] for i, label in enumerate(labels)}


def plot(result: Mapping[str, Any], out: Path) -> None:
    """compare.png: a row per policy, a column per avg@k metric, one band per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    policies = result["policies"]
    columns = {
        name: headline_metrics(list(next(iter(p["methods"].values()))["points"]))
        for name, p in policies.items()
    }
    ncols = max(len(c) for c in columns.values())
    fig, axes = plt.subplots(
        len(policies), ncols, figsize=(4.2 * ncols, 3.4 * len(policies)), squeeze=False
    )
    colors = method_colors(result["methods"])
    for row, (name, policy) in enumerate(policies.items()):
        for col in range(ncols):
            ax = axes[row][col]
            if col >= len(columns[name]):
                ax.axis("off")
                continue
            draw_bands(ax, policy, columns[name][col], colors=colors)
            ax.set_title(f"{name}: {metric_name(columns[name][col])}", fontsize=9)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


def to_json(result: Mapping[str, Any]) -> dict[str, Any]:
    body = {k: v for k, v in result.items() if k != "units"}
    body["interval_rule"] = INTERVAL_RULE
    return body


def write_report(result: Mapping[str, Any], out: Path) -> str:
    """Write compare.md, compare.json and compare.png into `out`; returns the markdown."""
    out.mkdir(parents=True, exist_ok=True)
    text = markdown(result)
    (out / "compare.md").write_text(text)
    (out / "compare.json").write_text(json.dumps(to_json(result), indent=2, sort_keys=True))
    plot(result, out / "compare.png")
    return text
