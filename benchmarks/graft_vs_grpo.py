"""Question: what does the exchange cost? A GRAFT step vs a GRPO step of the same two models.

Two trainers on the same two-policy config, one with the exchange on (GRAFT) and one with it off
(each policy plain GRPO on the same prompts). The steps are paired: before each step the GRPO
trainer loads the GRAFT trainer's weights and optimizer state, and both take that step with the
same seeds, in alternating order. So both generate exactly the same rollouts (checked: equal
rewards and response lengths), and the two step times differ only by what GRAFT adds: the
exchange (gate, re-tokenization, receiver log-probs of peer responses) and the update training the
admitted peer responses where GRPO skips an all-fail group. The run follows the GRAFT trainer, so
transfers happen at GRAFT's own rate. Reports the ratio of median step times over all steps and
over the steps with a transfer, the median of the per-step (paired) ratios, each phase's paired
difference, the exchange's time, the update's time and the response tokens it
trained, and how much was transferred. The default config is the demo's complementary pair, where
transfers happen on most steps in both directions.

    .venv/bin/python benchmarks/graft_vs_grpo.py [--config configs/graft_mul.yaml] [--steps 20]
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from common import emit, peak_rss_mib, process_peak_rss_mib, step_arguments, summary

from graft.config import Config, load_config
from graft.trainer import Trainer


def _computed_tokens(metrics: dict[str, float], names: list[str]) -> float:
    """Response tokens that went through forward and backward this step, over all policies."""
    total = 0.0
    for name in names:
        tokens = metrics.get(f"m/{name}/train/tokens", 0.0)
        ran = 1.0 - metrics.get(f"m/{name}/train/skipped_frac", 0.0)
        total += tokens * (ran - metrics.get(f"m/{name}/train/duplicate_frac", 0.0))
    return total


def _check_same_rollouts(graft: dict[str, float], grpo: dict[str, float], step: int) -> None:
    """Paired steps must sample the same rollouts; anything else would confound the timing."""
    keys = [k for k in graft if k.endswith(("/reward/mean", "/response/mean_tokens"))]
    differ = [k for k in keys if graft[k] != grpo.get(k)]
    if not keys or differ:
        raise SystemExit(f"step {step}: GRAFT and GRPO rollouts differ ({differ or 'no metrics'})")


PHASES = ("generate_s", "verify_s", "exchange_s", "train_s", "rest_s")


def _phase(result: tuple[dict[str, float], float], key: str) -> float:
    """One phase of a timed step; `rest_s` is the wall time outside the trainer's phases."""
    metrics, wall = result
    return wall - metrics["time/step_s"] if key == "rest_s" else metrics[f"time/{key}"]


def main() -> None:
    args = step_arguments(__doc__, config="configs/graft_mul.yaml", steps=20)
    base = ["eval.every=0", "run.progress=false", "store.enabled=false"]
    graft = Trainer(load_config(Config, args.config, [*base, "exchange.enabled=true"]))
    grpo = Trainer(load_config(Config, args.config, [*base, "exchange.enabled=false"]))
    if len(graft.names) < 2:
        raise SystemExit("graft_vs_grpo needs a config with two or more models")
    times: dict[str, list[float]] = {"graft": [], "grpo": []}
    train_s: dict[str, list[float]] = {"graft": [], "grpo": []}
    computed: dict[str, list[float]] = {"graft": [], "grpo": []}  # response tokens trained
    exchange_s, grafted, admitted, sent = [], [], [], []
    phase_diff: dict[str, list[float]] = {k: [] for k in PHASES}  # paired GRAFT - GRPO
    prompts = graft.plan.prompts_per_step
    try:
        with tempfile.TemporaryDirectory() as tmp:
            state = Path(tmp)
            for step in range(args.warmup + args.steps):
                graft.backend.save(state)
                grpo.backend.load(state)  # GRPO takes this step from GRAFT's state
                order = (("graft", graft), ("grpo", grpo))
                results = {}
                for label, trainer in order if step % 2 == 0 else order[::-1]:
                    start = time.perf_counter()
                    results[label] = (trainer.step(step), time.perf_counter() - start)
                _check_same_rollouts(results["graft"][0], results["grpo"][0], step)
                if step < args.warmup:
                    continue
                for label, (m, seconds) in results.items():
                    times[label].append(seconds)
                    train_s[label].append(m["time/train_s"])
                    computed[label].append(_computed_tokens(m, graft.names))
                for key, diffs in phase_diff.items():
                    diffs.append(_phase(results["graft"], key) - _phase(results["grpo"], key))
                m = results["graft"][0]
                exchange_s.append(m["time/exchange_s"])
                grafted.append(sum(v for k, v in m.items() if k.endswith("/prompts_grafted")))
                admitted.append(sum(v for k, v in m.items() if k.endswith("/admitted")))
                sent.append(sum(v for k, v in m.items() if k.endswith("/responses_sent")))
        rss = {
            f"{label} worker {n}": process_peak_rss_mib(int(info["pid"]))
            for label, t in (("graft", graft), ("grpo", grpo))
            for n, info in t.backend.describe().items()
        }
    finally:
        graft.close()
        grpo.close()
    g, p = summary(times["graft"]), summary(times["grpo"])
    ratio = g["median_s"] / p["median_s"]
    med = {k: statistics.median(v) for k, v in train_s.items()}
    tokens = {k: statistics.fmean(v) for k, v in computed.items()}
    moved = [i for i, x in enumerate(grafted) if x > 0]
    with_transfer = len(moved) / len(grafted)
    ratio_moved = (
        statistics.median(times["graft"][i] for i in moved)
        / statistics.median(times["grpo"][i] for i in moved)
        if moved
        else float("nan")
    )
    paired = [a / b for a, b in zip(times["graft"], times["grpo"])]
    paired_moved = statistics.median(paired[i] for i in moved) if moved else float("nan")
    extra_update = statistics.median(a - b for a, b in zip(train_s["graft"], train_s["grpo"]))
    policies = len(graft.names)
    rows = [
        ("config", args.config),
        ("steps measured", str(args.steps)),
        ("median step, GRPO (exchange off)", f"{p['median_s'] * 1000:.0f} ms"),
        ("median step, GRAFT", f"{g['median_s'] * 1000:.0f} ms"),
        ("ratio GRAFT / GRPO", f"{ratio:.3f}"),
        (f"ratio on the {len(moved)} steps with a transfer", f"{ratio_moved:.3f}"),
        (
            "paired ratio (median of per-step GRAFT / GRPO): all / transfer steps",
            f"{statistics.median(paired):.3f} / {paired_moved:.3f}",
        ),
        ("median exchange time", f"{statistics.median(exchange_s) * 1000:.1f} ms"),
        ("median extra update time, paired", f"{extra_update * 1000:.1f} ms"),
        (
            "median update time, GRPO / GRAFT",
            f"{med['grpo'] * 1000:.0f} / {med['graft'] * 1000:.0f} ms",
        ),
        (
            "response tokens trained per step, GRPO / GRAFT",
            f"{tokens['grpo']:.0f} / {tokens['graft']:.0f} "
            f"(+{100 * (tokens['graft'] / max(tokens['grpo'], 1) - 1):.0f}%)",
        ),
        ("steps with a transfer", f"{100 * with_transfer:.0f}%"),
        (
            "groups replaced per step",
            f"{statistics.fmean(grafted):.2f} of {policies * prompts} "
            f"({100 * statistics.fmean(grafted) / (policies * prompts):.1f}%)",
        ),
        (
            "peer responses admitted / sent per step",
            f"{statistics.fmean(admitted):.1f} / {statistics.fmean(sent):.1f}",
        ),
        (
            "paired GRAFT - GRPO per phase (median)",
            ", ".join(f"{k[:-2]} {statistics.median(v) * 1000:+.1f}" for k, v in phase_diff.items())
            + " ms",
        ),
        ("peak RSS, driver", f"{peak_rss_mib():.0f} MiB"),
        *((f"peak RSS, {k}", f"{v:.0f} MiB") for k, v in rss.items()),
    ]
    emit(
        "graft_vs_grpo",
        rows,
        {
            "ratio": ratio,
            "ratio_steps_with_transfer": ratio_moved,
            "paired_ratio": statistics.median(paired),
            "paired_ratio_steps_with_transfer": paired_moved,
            "extra_update_s_median": extra_update,
            "graft": g,
            "grpo": p,
            "exchange_s_median": statistics.median(exchange_s),
            "train_s_median": med,
            "phase_diff_s_median": {k: statistics.median(v) for k, v in phase_diff.items()},
            "tokens_trained_per_step": tokens,
            "steps_with_transfer": with_transfer,
            "groups_replaced_per_step": statistics.fmean(grafted),
            "admitted_per_step": statistics.fmean(admitted),
            "sent_per_step": statistics.fmean(sent),
            "peak_rss_mib": peak_rss_mib(),
            "worker_rss_mib": rss,
        },
    )


if __name__ == "__main__":
    main()
