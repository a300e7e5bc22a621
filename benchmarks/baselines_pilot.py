"""The pilot of the baselines study and of the code-pair study (docs/evidence.md): the
dynamic-sampling budget B whose compute is closest to GRAFT's. Compute only, seed 100, never
reported as a result.

In each regime of the study, at its budget (baselines: 60 steps x 8 prompts x 8 responses; code:
40 steps x 8 prompts x 8 programs): GRAFT (paper weight) and GRPO + dynamic sampling
(`max_rounds=4`, `max_responses=B` per model and step) for B in {8, 16, 24, 32}. B is the value
whose run-total FLOP estimate (`cost/cum/flops` at the last step) is closest to GRAFT's, on
average over the regimes. Also the wall time of each run. Runs are resumable. Prints markdown.

    .venv/bin/python benchmarks/baselines_pilot.py --out runs/baselines_pilot
    .venv/bin/python benchmarks/baselines_pilot.py --study code --out runs/code_pilot
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
from pathlib import Path

from graft.config import Config
from graft.evidence.demo import DemoSettings, build_presets, is_done, run_configs, run_inprocess
from graft.rundir import read_metrics

SEED, BUDGETS = 100, (8, 16, 24, 32)


def with_budget(cfg: Config, budget: int, out: Path) -> Config:
    models = tuple(
        dataclasses.replace(
            m, zero_contrast=dataclasses.replace(m.zero_contrast, max_responses=budget)
        )
        for m in cfg.models
    )
    return dataclasses.replace(
        cfg, models=models, run=dataclasses.replace(cfg.run, out_dir=str(out))
    )


def flops(cfg: Config) -> tuple[float, float]:
    """(run-total FLOPs at the end, seconds the run took)."""
    last = read_metrics(Path(cfg.run.out_dir))[-1]
    done = json.loads((Path(cfg.run.out_dir) / "done.json").read_text())
    return last["cost/cum/flops"], done["seconds"]


def main() -> None:
    from graft.trainer import train

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/baselines_pilot")
    parser.add_argument("--study", default="baselines", choices=("baselines", "code"))
    args = parser.parse_args()
    root = Path(args.out)
    s = dataclasses.replace(DemoSettings.make(study=args.study), seeds=(SEED,))
    build_presets(s)
    rows, ratios = [], {b: [] for b in BUDGETS}
    one_regime = len(s.regimes) == 1  # the code study: stop at the first B that reaches GRAFT
    for regime in s.regimes:
        cfgs = run_configs(s, root, regime, SEED)
        graft_cfg = cfgs["graft"][0]
        runs = {"GRAFT (paper weight)": graft_cfg}
        for b in BUDGETS:
            runs[f"dynamic sampling, B = {b}"] = with_budget(
                cfgs["grpo_ds"][0], b, root / regime / f"ds_{b}"
            )
        for label, cfg in list(runs.items()):
            if not is_done(cfg):
                run_inprocess(cfg, train)
                print(f"{regime} {label}: {flops(cfg)[1]:.0f} s", flush=True)
            if one_regime and cfg is not graft_cfg and flops(cfg)[0] >= flops(graft_cfg)[0]:
                # FLOPs grow with B: the closest B is this one or the one before it.
                runs = {k: v for k, v in runs.items() if k == label or is_done(v)}
                break
        graft_flops, _ = flops(graft_cfg)
        for label, cfg in runs.items():
            value, seconds = flops(cfg)
            ratio = value / graft_flops
            rows.append(
                f"| {regime} | {label} | {value / 1e12:.3f} | {ratio:.2f} | {seconds:.0f} |"
            )
            if label.startswith("dynamic"):
                ratios[int(label.rsplit(" ", 1)[1])].append(value / graft_flops)
    print(f"| regime | method | TFLOPs (run total, {s.steps} steps) | vs GRAFT | wall s |")
    print("|---|---|---|---|---|")
    print("\n".join(rows))
    mean = {b: statistics.fmean(r) for b, r in ratios.items() if r}
    chosen = min(mean, key=lambda b: abs(mean[b] - 1.0))
    print()
    print(
        "mean FLOPs vs GRAFT over the regimes: " + ", ".join(f"B={b}: {mean[b]:.2f}" for b in mean)
    )
    print(f"chosen: B = {chosen}")


if __name__ == "__main__":
    main()
