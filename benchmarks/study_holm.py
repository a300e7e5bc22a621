"""The pre-registered study's primary cells under the rules `graft compare` now applies.

Reads the study's tables in BENCHMARKS.md (section "Does GRAFT help, and where?"): for every
primary cell (per regime, model and online or stored GRAFT variant: weak skill and mix, final and
over the curve; 48 cells), the mean and 95% t interval over 5 seeds. From them it recovers the
paired t test's p-value (se = half-width / t(0.975, 4)), applies Holm's correction over the 48
cells as one family, and estimates the study's power: per cell family, the smallest effect that 5
seeds detect with 80% probability, at alpha 0.05 (one cell read alone) and at 0.05 / 48 (Holm's
first step), from the median spread of that family's cells.

The tables are rounded to 0.1 points, so the p-values are approximate (a half-width of 0.4 may be
0.35-0.45); the conclusions below hold with a wide margin. Prints markdown.

    .venv/bin/python benchmarks/study_holm.py
"""

from __future__ import annotations

import math
import re
import statistics
from pathlib import Path

import numpy as np

from graft.evidence.stats import holm, t_cdf, t_quantile

SEEDS = 5
ROOT = Path(__file__).resolve().parents[1]
CELL = re.compile(r"\*{0,2}([+-]?\d+\.\d) \[([+-]?\d+\.\d), ([+-]?\d+\.\d)\]\*{0,2}")
COLUMNS = [
    ("llama", "weak", "final"),
    ("llama", "weak", "curve"),
    ("llama", "mix", "final"),
    ("llama", "mix", "curve"),
    ("qwen", "weak", "final"),
    ("qwen", "weak", "curve"),
    ("qwen", "mix", "final"),
    ("qwen", "mix", "curve"),
]


def study_cells(text: str) -> list[dict]:
    """The primary cells of the study's latent and cold tables."""
    section = text.split("## Does GRAFT help, and where?")[1].split("\n## ")[0]
    cells, regime = [], None
    for line in section.splitlines():
        if line.startswith("**Latent regime**"):
            regime = "latent"
        elif line.startswith("**Cold regime**"):
            regime = "cold"
        elif line.startswith("**Ablations**") or line.startswith("**Stored / online"):
            regime = None
        if regime and line.startswith("| GRAFT ("):
            parts = [p.strip() for p in line.strip("|").split("|")]
            method = parts[0]
            for (model, what, point), raw in zip(COLUMNS, parts[1:]):
                m = CELL.fullmatch(raw)
                if not m:
                    raise ValueError(f"cannot read cell {raw!r} of {method} ({regime})")
                mean, low, high = (float(g) for g in m.groups())
                cells.append(
                    dict(
                        regime=regime,
                        method=method,
                        cell=f"{model} {what}, {point}",
                        family=f"{what} {point}",
                        mean=mean,
                        low=low,
                        high=high,
                    )
                )
    return cells


def p_value(mean: float, low: float, high: float) -> tuple[float, float]:
    """(p, sd of the per-seed differences) of a 5-seed t interval."""
    se = (high - low) / 2 / t_quantile(0.975, SEEDS - 1)
    t = abs(mean) / se
    return min(1.0, 2 * (1 - t_cdf(t, SEEDS - 1))), se * math.sqrt(SEEDS)


def power(effect_sd: float, alpha: float, *, draws: int = 200_000, seed: int = 0) -> float:
    """P(the paired t test over 5 seeds rejects) for a true effect of `effect_sd` sds."""
    rng = np.random.default_rng(seed)
    z = rng.standard_normal(draws) + effect_sd * math.sqrt(SEEDS)
    s = np.sqrt(rng.chisquare(SEEDS - 1, draws) / (SEEDS - 1))
    crit = t_quantile(1 - alpha / 2, SEEDS - 1)
    return float(np.mean(np.abs(z / s) > crit))


def smallest_detectable(alpha: float, target: float = 0.8) -> float:
    """The effect (in sds of the per-seed difference) detected with probability `target`."""
    lo, hi = 0.0, 20.0
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if power(mid, alpha) < target else (lo, mid)
    return hi


def main() -> None:
    cells = study_cells((ROOT / "BENCHMARKS.md").read_text())
    for c in cells:
        c["p"], c["sd"] = p_value(c["mean"], c["low"], c["high"])
    adjusted = holm([c["p"] for c in cells])
    for c, (p_adj, reject) in zip(cells, adjusted):
        c["holm_p"], c["holm"] = p_adj, reject
    m = len(cells)
    print(f"## Primary cells under Holm's correction ({m} tests, family-wise 5%)\n")
    print("| regime | method | cell | Δ [95% CI] | p | Holm p |")
    print("|---|---|---|---|---|---|")
    for c in sorted(cells, key=lambda c: c["p"])[:10]:
        ci = f"{c['mean']:+.1f} [{c['low']:+.1f}, {c['high']:+.1f}]"
        print(
            f"| {c['regime']} | {c['method']} | {c['cell']} | {ci} | {c['p']:.3f} | "
            f"{c['holm_p']:.2f} |"
        )
    print(f"\ncells significant after Holm: {sum(c['holm'] for c in cells)} of {m}")
    print(f"cells whose interval excludes 0 (uncorrected): {sum(c['p'] < 0.05 for c in cells)}")
    d_single, d_holm = smallest_detectable(0.05), smallest_detectable(0.05 / m)
    print(
        f"\n## Power: 5 seeds detect with 80% probability an effect of {d_single:.2f} sd of the "
        f"per-seed difference at alpha 0.05, {d_holm:.2f} sd at 0.05/{m}\n"
    )
    print(
        "| cell family | median sd of the per-seed difference (points) | smallest effect "
        "detected, alpha 0.05 | at 0.05/48 (Holm's first step) |"
    )
    print("|---|---|---|---|")
    for family in ("weak final", "weak curve", "mix final", "mix curve"):
        sd = statistics.median(c["sd"] for c in cells if c["family"] == family)
        print(f"| {family} | {sd:.1f} | {d_single * sd:.1f} | {d_holm * sd:.1f} |")


if __name__ == "__main__":
    main()
