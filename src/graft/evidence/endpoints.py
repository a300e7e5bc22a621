"""Primary endpoints and Holm's correction for `graft compare`.

A report tests many cells: every method against the baseline, on every metric (suite, skill,
avg@k, pass@k), at every evaluation and over the curve. Read one by one, about 1 in 20 of them
excludes 0 by chance when nothing changed. So the cells that decide the question are named in
advance, as primary endpoints (`eval.primary` in the runs' config, or `graft compare --primary`);
their p-values go through Holm's step-down correction as one family (every method and policy), so
that the chance of any false verdict among them stays at 5%. Every other cell is exploratory: its
interval is shown, and it is marked as such.

An endpoint is a metric as metrics.jsonl names it (`eval/test/avg@4`,
`eval/test/mul:3,1:2-5/avg@4`; with the policy prefix, `m/llama/eval/test/avg@4`, it is primary
for that policy only) or as compare.md shows it (`test avg@4`), optionally followed by ` final`
(the last evaluation) or ` curve` (the mean over the evaluations after step 0); without one, both
points are primary.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from graft.errors import DataError
from graft.evidence.stats import holm

CURVE_MEAN = "curve_mean"
"""The point name of the mean over the evaluations after step 0 (the area under the curve)."""
POINTS = {"final": "final", "curve": CURVE_MEAN}
ALPHA = 0.05


@dataclass(frozen=True)
class Endpoint:
    metric: str
    """The metric key, e.g. `eval/test/avg@4`."""
    point: str
    """`final` or `curve_mean`."""
    policy: str = ""
    """The policy it is primary for; empty: every policy."""

    def __str__(self) -> str:
        word = "final" if self.point == "final" else "curve"
        who = f"{self.policy} " if self.policy else ""
        return f"{who}{' '.join(self.metric.split('/')[1:])} {word}"


def parse_endpoint(spec: str) -> list[Endpoint]:
    """The endpoints one spec names (both points when it names none)."""
    words = spec.split()
    if not words:
        raise DataError("--primary / eval.primary: an empty endpoint")
    points = list(POINTS.values())
    if len(words) > 1 and words[-1] in POINTS:
        points, words = [POINTS[words[-1]]], words[:-1]
    policy = ""
    if len(words) == 1 and words[0].startswith("m/") and "/eval/" in words[0]:
        policy, rest = words[0][2:].split("/eval/", 1)
        words = [f"eval/{rest}"]
    keyed = len(words) == 1 and words[0].startswith("eval/")
    metric = words[0] if keyed else "eval/" + "/".join(words)
    return [Endpoint(metric, p, policy) for p in points]


def run_primary(units: Sequence[Any]) -> tuple[str, ...]:
    """The primary endpoints the runs name (`eval.primary`); runs that name other ones are
    refused, naming two of them."""
    named = {u.primary for u in units if u.primary}
    if len(named) > 1:
        a, b = (next(u for u in units if u.primary == p) for p in sorted(named)[:2])
        raise DataError(
            f"{a.run_dir} and {b.run_dir} name different primary endpoints (eval.primary: "
            f"{list(a.primary)} vs {list(b.primary)}); pick them with --primary"
        )
    return next(iter(named), ())


AXIS_PREFIXES = ("step_", "at_")
"""Point names along a curve: `step_<step>`, or `at_<j>` for point j of a compute axis."""


def axis_points(points: Sequence[str]) -> list[str]:
    """The points along the curve (not the curve mean), in order."""
    return sorted((p for p in points if p.startswith(AXIS_PREFIXES)), key=point_index)


def point_index(point: str) -> int:
    return int(point.rsplit("_", 1)[1])


def final_point(points: Sequence[str]) -> str:
    """The name of the last evaluation's point (`step_N` or `at_N` with the largest N)."""
    return axis_points(points)[-1]


def _cell(points: Mapping[str, Any], point: str) -> Mapping[str, Any] | None:
    if point == "final":
        return points[final_point(list(points))] if axis_points(list(points)) else None
    return points.get(point)


def apply_holm(result: dict[str, Any], endpoints: Sequence[Endpoint]) -> None:
    """Mark the primary cells of a `compare_units` result and correct them together.

    Each primary cell gets `primary: True`, `holm_p` (the adjusted p) and `holm_significant`;
    a cell without a verdict (fewer than 3 seeds, no spread) stays in the family with p = 1. The
    family is recorded as `result["primary"]` (the endpoints and the number of tests)."""
    endpoints = list(dict.fromkeys(endpoints))
    cells: list[dict[str, Any]] = []
    known: set[str] = set()
    for name, policy in result["policies"].items():
        for entry in policy["vs_baseline"].values():
            known.update(entry["metrics"])
            for e in endpoints:
                points = entry["metrics"].get(e.metric) if e.policy in ("", name) else None
                cell = _cell(points, e.point) if points else None
                if cell is not None:
                    cells.append(cell)  # type: ignore[arg-type]
    missing = sorted({e.metric for e in endpoints} - known) if known else []
    if missing:
        raise DataError(
            f"primary endpoint {missing[0]!r} names no compared metric; metrics: "
            + ", ".join(sorted(known)[:6])
            + (" ..." if len(known) > 6 else "")
        )
    adjusted = holm([c["p"] if c["p"] is not None else 1.0 for c in cells], alpha=ALPHA)
    for cell, (p_adj, reject) in zip(cells, adjusted):
        cell.update(primary=True, holm_p=p_adj, holm_significant=reject)
    result["primary"] = {
        "endpoints": [str(e) for e in endpoints],
        "tests": len(cells),
        "alpha": ALPHA,
    }


def holm_across(results: Sequence[dict[str, Any]], *, names: Sequence[str]) -> None:
    """One Holm family over the primary cells of several `compare_units` results (the same runs
    read on several axes: steps, and equal compute): each cell's `holm_p` and
    `holm_significant` are recomputed over all of them, and each result's `primary` records the
    whole family (`names`: what each result's endpoints are read at)."""
    cells = [
        cell
        for result in results
        for policy in result["policies"].values()
        for entry in policy["vs_baseline"].values()
        for points in entry["metrics"].values()
        for cell in points.values()
        if cell.get("primary")
    ]
    adjusted = holm([c["p"] if c["p"] is not None else 1.0 for c in cells], alpha=ALPHA)
    for cell, (p_adj, reject) in zip(cells, adjusted):
        cell.update(holm_p=p_adj, holm_significant=reject)
    endpoints = [
        f"{e} ({name})"
        for result, name in zip(results, names, strict=True)
        for e in result["primary"]["endpoints"]
    ]
    for result in results:
        result["primary"] = {"endpoints": endpoints, "tests": len(cells), "alpha": ALPHA}
