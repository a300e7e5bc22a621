"""`graft demo`, part 4: curves.png.

One row per regime: weak- and strong-skill accuracy of each model over the evaluations (one line
per method, mean over seeds, with its 95% band), the exchange of each direction over steps
(candidates, admitted correct and admitted wrong peer responses, binned), and the training reward
binned over steps (a raw per-step reward zigzags too much to read).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from graft.evidence.compare import Unit
from graft.evidence.compare_report import draw_bands, method_colors
from graft.evidence.demo import ALL_METHODS, MODELS, STRONG, WEAK

EXCHANGE_METHODS = ("graft", "graft_rr")


def bin_series(series: Mapping[int, float], width: int) -> tuple[list[float], list[float]]:
    """Means over consecutive bins of `width` steps, placed at each bin's centre."""
    bins: dict[int, list[float]] = {}
    for step, value in series.items():
        bins.setdefault((step - 1) // width if step > 0 else 0, []).append(value)
    xs = [b * width + (width + 1) / 2 for b in sorted(bins)]
    return xs, [statistics.fmean(bins[b]) for b in sorted(bins)]


def _mean_over_seeds(per_seed: Sequence[Mapping[int, float]]) -> dict[int, float]:
    steps = sorted(set().union(*per_seed)) if per_seed else []
    return {s: statistics.fmean(d.get(s, 0.0) for d in per_seed) for s in steps}


def exchange_series(
    units: Sequence[Unit], *, label: str, receiver: str, direction: str, metric: str
) -> dict[int, float]:
    """Mean over seeds of one direction's per-step count (0 on steps with no candidates)."""
    per_seed = [
        {step: counts.get(f"{direction}/{metric}", 0.0) for step, counts in u.exchange.items()}
        for u in units
        if u.label == label and u.policy == receiver
    ]
    return _mean_over_seeds(per_seed)


def _exchange_panel(ax: Any, units: Sequence[Unit], src: str, dst: str, width: int) -> None:
    colors = {"graft": "#1f77b4", "graft_rr": "#d62728"}
    for key in EXCHANGE_METHODS:
        label = ALL_METHODS[key].label
        for metric, style in (("admitted_correct", "-"), ("admitted_wrong", ":")):
            series = exchange_series(
                units, label=label, receiver=dst, direction=f"{src}->{dst}", metric=metric
            )
            if series:
                xs, ys = bin_series(series, width)
                name = f"{label}: {metric.replace('_', ' ')}"
                ax.plot(xs, ys, style, color=colors[key], label=name)
    label = ALL_METHODS["graft"].label
    series = exchange_series(
        units, label=label, receiver=dst, direction=f"{src}->{dst}", metric="sent_correct"
    )
    if series:
        xs, ys = bin_series(series, width)
        ax.plot(xs, ys, "--", color="#888888", label="peer correct responses offered")
    ax.set(title=f"exchange {src}->{dst} (per step, binned)", xlabel="step", ylabel="responses")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6)


def _reward_panel(ax: Any, compare: Mapping[str, Any], colors: Mapping, width: int) -> None:
    labels = list(compare["policies"][MODELS[0]]["methods"])
    for label in labels:
        per_model = [
            {int(k): v for k, v in compare["policies"][m]["methods"][label]["reward"].items()}
            for m in MODELS
            if label in compare["policies"][m]["methods"]
        ]
        series = _mean_over_seeds(per_model)
        if series:
            xs, ys = bin_series(series, width)
            ax.plot(xs, ys, color=colors.get(label), label=label)
    ax.set(title="training reward, both models (binned)", xlabel="step", ylabel="reward")
    ax.grid(alpha=0.3)


def plot_demo(results: Mapping[str, Any], units: Mapping[str, Sequence[Unit]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    regimes = list(results["regimes"])
    steps = results["settings"]["steps"]
    width = max(steps // 12, 1)
    fig, axes = plt.subplots(len(regimes), 7, figsize=(30, 4.2 * len(regimes)), squeeze=False)
    labels = list(results["labels"].values())
    colors = method_colors(labels)
    for row, regime in enumerate(regimes):
        compare = results["regimes"][regime]["compare"]
        col = 0
        for m in MODELS:
            for kind, skill in (("weak", WEAK[m]), ("strong", STRONG[m])):
                ax = axes[row][col]
                key = _skill_key(compare, m, skill)
                draw_bands(ax, compare["policies"][m], key, colors=colors)
                ax.set_title(f"{regime}: {m} {skill.split(':')[-1]} ({kind} skill)", fontsize=9)
                col += 1
        _exchange_panel(axes[row][4], units[regime], MODELS[0], MODELS[1], width)
        _exchange_panel(axes[row][5], units[regime], MODELS[1], MODELS[0], width)
        _reward_panel(axes[row][6], compare, colors, width)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=80)
    plt.close(fig)


def _skill_key(compare: Mapping[str, Any], model: str, skill: str) -> str:
    points = next(iter(compare["policies"][model]["methods"].values()))["points"]
    return next(k for k in points if f"/{skill}/avg@" in k)
