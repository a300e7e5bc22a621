"""Choose the study's learning rate on seeds and a split that are never reported.

docs/evidence.md pre-registers the `graft demo --study` design; its one tuned setting, the
learning rate, is chosen here: GRPO (the baseline, so that the comparison is not tuned in GRAFT's
favour) on seeds 100-101, evaluated on the VALIDATION split, for each candidate lr; the lr with the
highest weak-skill validation accuracy averaged over the curve (after step 0), both models and
both regimes, wins. The test split and seeds 0-4 are not touched.

    .venv/bin/python benchmarks/demo_pilot.py --out runs/pilot
"""

from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import replace
from pathlib import Path

from graft.evidence.compare import CURVE_MEAN
from graft.evidence.demo import MODELS, WEAK, DemoSettings
from graft.evidence.demo_report import regime_result, run_all


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/pilot")
    parser.add_argument("--lrs", default="2e-5,5e-5", help="candidate learning rates")
    parser.add_argument("--seeds", default="100,101", help="pilot seeds (never reported)")
    args = parser.parse_args()
    seeds = tuple(int(s) for s in args.seeds.split(","))
    scores = {}
    for lr in (float(x) for x in args.lrs.split(",")):
        s = replace(
            DemoSettings.make(study="graft"),
            lr=lr,
            seeds=seeds,
            methods=("grpo",),
            ablations=(),
            eval_suite="val",
            eval_problems=200,
            mode="pilot",
        )
        out = Path(args.out) / f"lr_{lr:g}"
        run_all(s, out)
        per = {}
        for regime in s.regimes:
            policies = regime_result(s, out, regime)["policies"]
            for m in MODELS:
                points = policies[m]["methods"]["GRPO"]["points"]
                key = next(k for k in points if f"/{WEAK[m]}/avg@" in k)
                per[f"{regime}/{m}"] = {
                    "start": points[key]["step_0"]["mean"],
                    "curve_mean": points[key][CURVE_MEAN]["mean"],
                }
        scores[lr] = {
            "criterion": statistics.fmean(v["curve_mean"] for v in per.values()),
            "per": per,
        }
        print(f"lr {lr:g}: criterion {scores[lr]['criterion']:.4f}  {json.dumps(per)}", flush=True)
    best = max(scores, key=lambda lr: scores[lr]["criterion"])
    body = {"seeds": list(seeds), "scores": scores, "chosen_lr": best}
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "pilot.json").write_text(json.dumps(body, indent=2))
    criteria = {k: v["criterion"] for k, v in scores.items()}
    print(f"BENCH {json.dumps({'chosen_lr': best, 'criteria': criteria})}")


if __name__ == "__main__":
    main()
