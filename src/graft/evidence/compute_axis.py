"""`graft compare --compute`: evaluation curves read at equal compute instead of equal steps (pure).

A method that samples more per step (dynamic sampling, a larger group, a peer to co-train) reaches
step 60 at a higher cost than GRPO; compared at equal steps it is compared at unequal compute.
On a compute axis each run's evaluation curve becomes a function of what the run had spent when
it was evaluated: the run's cumulative count (`cost/cum/<key>` in metrics.jsonl, all its
policies together, since co-training a peer is part of what a method costs), 0 at step 0.

Per policy, every unit (run) is read at the same compute points: k + 1 evenly spaced points from
the largest first evaluation's compute (0 when every run evaluates at step 0) to the smallest
last evaluation's compute, k being the fewest evaluations after the first that any unit has.
Between two evaluations the curve is interpolated linearly in compute; no run is read beyond its
last evaluation (never extrapolated). The points are then paired over seeds as on the step axis,
with the same verdict rules; `at_<j>` names point j, and the curve mean is the mean over the
points after the first.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from graft.errors import DataError

AXES = {
    "gen_tokens": "generated tokens",
    "flops": "FLOPs (estimate)",
    "responses": "responses sampled",
}
"""The compute axes `graft compare --compute` offers: cumulative run totals in metrics.jsonl."""
COST_KEYS = (
    "responses",
    "gen_tokens",
    "forward_tokens",
    "train_tokens",
    "flops",
    "generate_cpu_s",
    "score_cpu_s",
    "train_cpu_s",
    "verify_cpu_s",
)
"""The run totals a compare reads from each run (its cost table shows them)."""


def run_compute(records: Sequence[Mapping[str, Any]]) -> dict[int, dict[str, float]]:
    """Step -> the run's cumulative cost totals logged at that step (`cost/cum/<key>`)."""
    out: dict[int, dict[str, float]] = {}
    for r in records:
        found = {k: float(r[f"cost/cum/{k}"]) for k in COST_KEYS if f"cost/cum/{k}" in r}
        if found:
            out[int(r["step"])] = found
    return out


def compute_at(unit: Any, step: int, key: str) -> float:
    """What a unit's run had spent (`key`) when it was evaluated at `step`."""
    if step == 0:
        return 0.0
    value = unit.compute.get(step, {}).get(key)
    if value is None:
        raise DataError(
            f"{unit.run_dir}: metrics.jsonl has no cost/cum/{key} at step {step} (a run from "
            f"before graft counted compute); compare it on steps (leave out --compute)"
        )
    return value


def interpolate(points: Sequence[tuple[float, float]], x: float) -> float:
    """The piecewise-linear curve through (x, y) points (x increasing) at x, inside its range."""
    for (x0, y0), (x1, y1) in itertools.pairwise(points):
        if x0 <= x <= x1:
            return y0 if x1 == x0 else y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    if len(points) == 1 and points[0][0] == x:
        return points[0][1]
    raise ValueError(f"{x} lies outside [{points[0][0]}, {points[-1][0]}]")


def compute_grid(units: Sequence[Any], key: str) -> list[float]:
    """The common compute points of one policy's units (see the module docstring)."""
    spans, evaluations = [], []
    for u in units:
        steps = sorted(next(iter(u.curves.values()), {}))
        if not steps:
            raise DataError(f"{u.run_dir}: no evaluation in metrics.jsonl (set eval.every > 0)")
        spans.append((compute_at(u, steps[0], key), compute_at(u, steps[-1], key)))
        evaluations.append(len(steps) - 1)
    low, high, k = max(a for a, _ in spans), min(b for _, b in spans), min(evaluations)
    if high <= low or k == 0:
        raise DataError(
            f"the runs share no stretch of {AXES[key]} between evaluations (from {low:.4g} to "
            f"{high:.4g}): compare them on steps"
        )
    return [low + (high - low) * j / k for j in range(k + 1)]


def on_grid(unit: Any, grid: Sequence[float], key: str) -> Any:
    """The unit with each curve read at the grid's points (keyed 0..k) instead of its steps."""
    curves = {}
    for metric, curve in unit.curves.items():
        points = sorted((compute_at(unit, s, key), v) for s, v in curve.items())
        curves[metric] = {j: interpolate(points, x) for j, x in enumerate(grid)}
    return replace(unit, curves=curves)


def to_compute_axis(units: Sequence[Any], key: str) -> tuple[list[Any], dict[str, list[float]]]:
    """Every unit on its policy's compute grid, and the grid per policy."""
    if key not in AXES:
        raise DataError(f"--compute {key!r}: use steps, {', '.join(AXES)}")
    grids = {
        policy: compute_grid([u for u in units if u.policy == policy], key)
        for policy in sorted({u.policy for u in units})
    }
    return [on_grid(u, grids[u.policy], key) for u in units], grids
