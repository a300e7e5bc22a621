"""The demo's figure, curves.png.

A grid read at a glance: one row per model (and regime, where a design has two), four columns:
its own (strong) skill and its peer's (weak) skill over the evaluations (one line per method,
mean over seeds, with its 95% band), what the exchange brought it over steps (the peer's correct
responses offered, and those admitted, correct and wrong, binned), and its training reward binned
over steps (a raw per-step reward zigzags too much to read).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from graft.evidence.compare import Unit
from graft.evidence.compare_report import draw_bands, method_colors
from graft.evidence.demo import ALL_METHODS
from graft.evidence.pairs import MODELS, PAIRS

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
    label = ALL_METHODS["graft"].label
    series = exchange_series(
        units, label=label, receiver=dst, direction=f"{src}->{dst}", metric="sent_correct"
    )
    if series:
        xs, ys = bin_series(series, width)
        ax.plot(xs, ys, "--", color="#888888", label="peer's correct responses offered")
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
    ax.set(title=f"{dst}: what the exchange brought from {src}", xlabel="step")
    ax.set_ylabel("responses per step")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    else:
        ax.text(0.5, 0.5, "no exchange in this design", ha="center", transform=ax.transAxes)


def _reward_panel(
    ax: Any, policy: Mapping[str, Any], model: str, colors: Mapping, width: int
) -> None:
    for label, entry in policy["methods"].items():
        series = {int(k): v for k, v in entry["reward"].items()}
        if series:
            xs, ys = bin_series(series, width)
            ax.plot(xs, ys, color=colors.get(label), label=label)
    ax.set(title=f"{model}: training reward (binned)", xlabel="step", ylabel="reward")
    ax.grid(alpha=0.3)


def plot_demo(results: Mapping[str, Any], units: Mapping[str, Sequence[Unit]], out: Path) -> None:
    """curves.png: rows by model (and regime), columns own skill | peer's skill | exchange |
    training reward."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pair = PAIRS[results["settings"].get("pair", "mul")]
    regimes = list(results["regimes"])
    width = max(results["settings"]["steps"] // 12, 1)
    rows = [(regime, m) for regime in regimes for m in MODELS]
    fig, axes = plt.subplots(len(rows), 4, figsize=(17, 3.6 * len(rows)), squeeze=False)
    colors = method_colors(list(results["labels"].values()))
    for row, (regime, m) in enumerate(rows):
        compare = results["regimes"][regime]["compare"]
        peer = next(x for x in MODELS if x != m)
        where = f"{regime}: " if len(regimes) > 1 else ""
        for col, (kind, skill) in enumerate(
            (("its own", pair.strong[m]), ("the peer's", pair.weak[m]))
        ):
            ax = axes[row][col]
            draw_bands(ax, compare["policies"][m], _skill_key(compare, m, skill), colors=colors)
            ax.set_title(f"{where}{m}: {pair.short(skill)} ({kind} skill), held-out", fontsize=10)
        _exchange_panel(axes[row][2], units[regime], peer, m, width)
        _reward_panel(axes[row][3], compare["policies"][m], m, colors, width)
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=80)
    plt.close(fig)


def _skill_key(compare: Mapping[str, Any], model: str, skill: str) -> str:
    points = next(iter(compare["policies"][model]["methods"].values()))["points"]
    return next(k for k in points if f"/{skill}/avg@" in k)
