"""GRPO against GRPO + dynamic sampling (`zero_contrast.mode=resample`) on the demo pair's cold
regime: how often a step trains on a full batch of groups with reward contrast, and what it costs.

The design, fixed before any of its runs: the cold regime's two models (each weak skill near
1-2%, so most of a batch's weak-skill groups are all-fail), the default demo's run otherwise (60
steps x 8 prompts x 8 responses, lr 2e-5, evaluation at steps 0, 30, 60 on 100 problems), seeds
0, 1, 2; GRPO (`exchange.enabled=false`, `keep`) and GRPO with `resample` on both models at the
default budget (`max_rounds=4`, no response cap).
- The measured outcome, per model: the share of steps whose training batch held 8 groups with
  contrast (`contrast/fill_frac == 1`), its per-seed difference between the methods with a 95% t
  interval over the 3 seeds (graft.evidence.stats), and the mean fill fraction.
- The cost per step, per model and run: responses, generated tokens, trained tokens, FLOPs,
  process CPU seconds of sampling and of the update (means over steps and seeds).
- Accuracy is reported as exploratory only, at equal steps and at equal generated tokens
  (`graft compare --compute gen_tokens`): three seeds, no primary endpoint.
Runs are resumable (a finished run is reused). Prints markdown and writes `OUT/dynamic_sampling.png`
(the fill fraction per step, per model and method, mean over seeds).

    .venv/bin/python benchmarks/dynamic_sampling.py --out runs/bench_dynamic_sampling
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time
from pathlib import Path
from typing import Any

from graft.evidence.compare import compare_runs
from graft.evidence.demo import (
    MODELS,
    WEAK,
    DemoSettings,
    build_presets,
    is_done,
    run_configs,
    run_inprocess,
)
from graft.evidence.endpoints import final_point
from graft.evidence.stats import paired_interval
from graft.rundir import read_metrics

METHODS = ("grpo", "grpo_ds")
LABELS = {"grpo": "GRPO", "grpo_ds": "GRPO + dynamic sampling"}
SEEDS = (0, 1, 2)
COSTS = ("responses", "gen_tokens", "train_tokens", "flops", "generate_cpu_s", "train_cpu_s")


def settings() -> DemoSettings:
    s = DemoSettings.make()
    return dataclasses.replace(s, regimes=("cold",), methods=METHODS, seeds=SEEDS)


def run_all(root: Path) -> dict[tuple[str, int], Path]:
    from graft.trainer import train

    s = settings()
    build_presets(s)
    out = {}
    for seed in SEEDS:
        for method, (cfg,) in run_configs(s, root, "cold", seed).items():
            if not is_done(cfg):
                start = time.perf_counter()
                run_inprocess(cfg, train)
                print(f"  {method} seed {seed}: {time.perf_counter() - start:.0f} s", flush=True)
            out[method, seed] = Path(cfg.run.out_dir)
    return out


def per_run(run: Path) -> dict[str, Any]:
    steps = [r for r in read_metrics(run) if "tokens_per_s" in r]
    out: dict[str, Any] = {}
    for m in MODELS:
        fill = [r[f"m/{m}/contrast/fill_frac"] for r in steps]
        out[m] = {
            "full": statistics.fmean(f >= 1.0 for f in fill),
            "fill": statistics.fmean(fill),
            "fill_curve": fill,
            **{k: statistics.fmean(r[f"m/{m}/cost/{k}"] for r in steps) for k in COSTS},
        }
    return out


def report(runs: dict[tuple[str, int], Path], root: Path) -> str:
    stats = {key: per_run(run) for key, run in runs.items()}
    lines = [
        "| model | method | full batches (share of steps) | mean fill | responses / step | "
        "generated tokens / step | trained tokens / step | GFLOPs / step | CPU s / step: "
        "sampling, update |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for m in MODELS:
        for method in METHODS:
            rows = [stats[method, seed][m] for seed in SEEDS]

            def mean(key: str, rows=rows) -> float:
                return statistics.fmean(r[key] for r in rows)

            full = " / ".join(f"{100 * r['full']:.0f}%" for r in rows)
            cells = [
                f"{100 * mean('full'):.0f}% (seeds: {full})",
                f"{100 * mean('fill'):.0f}%",
                f"{mean('responses'):.0f}",
                f"{mean('gen_tokens'):.0f}",
                f"{mean('train_tokens'):.0f}",
                f"{mean('flops') / 1e9:.2f}",
                f"{mean('generate_cpu_s'):.2f}, {mean('train_cpu_s'):.2f}",
            ]
            lines.append(f"| {m} | {LABELS[method]} | " + " | ".join(cells) + " |")
    lines += ["", "Paired over seeds 0-2 (dynamic sampling minus GRPO), 95% t interval:", ""]
    for m in MODELS:
        diffs = [stats["grpo_ds", s][m]["full"] - stats["grpo", s][m]["full"] for s in SEEDS]
        iv = paired_interval(diffs)
        lines.append(
            f"- {m}: full-batch share {100 * iv.mean:+.0f} points "
            f"[{100 * iv.low:+.0f}, {100 * iv.high:+.0f}]"
            + (f" (no verdict: {iv.no_verdict})" if iv.no_verdict else "")
        )
    lines += ["", *accuracy_lines(runs), ""]
    plot(stats, root / "dynamic_sampling.png")
    return "\n".join(lines)


def accuracy_lines(runs: dict[tuple[str, int], Path]) -> list[str]:
    """Weak-skill accuracy at the end, at equal steps and at equal generated tokens
    (exploratory: three seeds, no primary endpoint)."""
    paths = [str(p) for p in runs.values()]
    out = ["Weak-skill held-out accuracy, dynamic sampling minus GRPO (exploratory):", ""]
    for axis in ("steps", "gen_tokens"):
        result = compare_runs(paths, baseline=LABELS["grpo"], compute=axis)
        for m in MODELS:
            entry = result["policies"][m]["vs_baseline"][LABELS["grpo_ds"]]
            metric = next(k for k in entry["metrics"] if WEAK[m] in k and "/avg@" in k)
            points = entry["metrics"][metric]
            iv = points[final_point(list(points))]
            where = (
                "step 60" if axis == "steps" else "equal generated tokens (the last common point)"
            )
            out.append(
                f"- {m}, {WEAK[m]}, at {where}: {100 * iv['mean']:+.1f} points "
                f"[{100 * iv['low']:+.1f}, {100 * iv['high']:+.1f}]"
            )
    return out


def plot(stats: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(MODELS), figsize=(9, 3.2), squeeze=False)
    for ax, m in zip(axes[0], MODELS):
        for method, color in zip(METHODS, ("#444444", "#1f77b4")):
            curves = [stats[method, s][m]["fill_curve"] for s in SEEDS]
            mean = [statistics.fmean(v) for v in zip(*curves)]
            ax.plot(
                range(1, len(mean) + 1), [100 * v for v in mean], label=LABELS[method], color=color
            )
        ax.set(
            title=f"{m} (cold regime)",
            xlabel="step",
            ylabel="batch with contrast (%)",
            ylim=(0, 105),
        )
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/bench_dynamic_sampling")
    args = parser.parse_args()
    root = Path(args.out)
    runs = run_all(root)
    print(report(runs, root))


if __name__ == "__main__":
    main()
