"""`graft probe` checked against training, on the demo's pair in both regimes.

For each regime (the study's models, learning rate and batch, seed 0): `graft probe` on the first
10 steps' prompts with the run's seeds, then the GRAFT run itself for 10 steps. The probe's first
step must equal the run's first step in every exchange count, and the admitted share the run
realizes over its 10 steps (its policies learning as they go) is compared with the probe's 95%
interval (the starting models). Then the time of a 200-prompt probe (25 steps of 8, n = 8) with
the models cached. Prints markdown; `--json FILE` also writes the numbers.

    .venv/bin/python benchmarks/probe_demo.py --out runs/probe_demo
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path
from typing import Any

from graft.config import Config
from graft.evidence.demo import DemoSettings, build_presets, run_configs
from graft.evidence.probe import probe_config, run_probe, summarize
from graft.rundir import read_metrics

STEPS = 10


def _with(cfg: Config, **sections: dict[str, Any]) -> Config:
    return dataclasses.replace(
        cfg,
        **{k: dataclasses.replace(getattr(cfg, k), **v) for k, v in sections.items()},
    )


def check_regime(regime: str, root: Path) -> dict[str, Any]:
    """Probe and train one regime; what matched and what the run realized."""
    from graft.trainer import train

    s = DemoSettings.make(study="graft")
    build_presets(dataclasses.replace(s, regimes=(regime,)))
    (cfg,) = run_configs(s, root, regime, 0)["graft"]
    cfg = _with(
        cfg, run={"steps": STEPS, "out_dir": str(root / regime / "graft")}, eval={"every": 0}
    )
    pcfg = probe_config(cfg)
    start = time.perf_counter()
    raw = run_probe(pcfg, steps=STEPS, progress=False)
    probe_s = time.perf_counter() - start
    summary = summarize(raw, pcfg)
    train(cfg)
    records = read_metrics(Path(cfg.run.out_dir))
    first, out = raw["steps"][0], {"regime": regime, "probe_s": probe_s, "directions": {}}
    mismatched = [
        f"{d}/{k}"
        for d, v in first["directions"].items()
        for k, value in v["counts"].items()
        if records[0].get(f"x/{d}/{k}") != value
    ]
    out["step1_counts_compared"] = sum(len(v["counts"]) for v in first["directions"].values())
    out["step1_mismatched"] = mismatched
    for d, forecast in summary["directions"].items():
        sent = sum(r.get(f"x/{d}/responses_sent", 0.0) for r in records)
        admitted = sum(r.get(f"x/{d}/admitted", 0.0) for r in records)
        interval = forecast["admitted"]
        realized = admitted / sent if sent else None
        inside = (
            realized is not None
            and interval["low"] is not None
            and interval["low"] <= realized <= interval["high"]
        )
        out["directions"][d] = {
            "probe": interval,
            "realized": realized,
            "inside": inside,
            "verdict": forecast["verdict"],
            "probe_candidates_step1": first["directions"]
            .get(d, {})
            .get("counts", {})
            .get("candidates"),
            "run_candidates_step1": records[0].get(f"x/{d}/candidates"),
        }
    return out


def time_probe(regime: str, root: Path) -> float:
    """Seconds of `graft probe` over 200 prompts (25 steps of 8), n = 8, models cached."""
    s = DemoSettings.make(study="graft")
    (cfg,) = run_configs(s, root, regime, 0)["graft"]
    cfg = _with(cfg, rollout={"prompts_per_step": 8, "group_size": 8})
    start = time.perf_counter()
    run_probe(probe_config(cfg), steps=25, progress=False)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="runs/probe_demo")
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    root = Path(args.out)
    results = [check_regime(r, root) for r in ("latent", "cold")]
    timing = {r: time_probe(r, root) for r in ("latent", "cold")}
    print(
        "| regime | direction | step 1 candidates (probe / run) | admitted share: probe [95%] "
        "| realized over 10 steps | inside |"
    )
    print("|---|---|---|---|---|---|")
    for res in results:
        for d, v in res["directions"].items():
            p = v["probe"]
            probe = (
                "-"
                if p["ratio"] is None
                else (f"{100 * p['ratio']:.1f}% [{100 * p['low']:.1f}, {100 * p['high']:.1f}]")
            )
            real = "-" if v["realized"] is None else f"{100 * v['realized']:.1f}%"
            print(
                f"| {res['regime']} | {d} | {v['probe_candidates_step1']:g} / "
                f"{v['run_candidates_step1']:g} | {probe} | {real} | {v['inside']} |"
            )
    for res in results:
        print(
            f"\n{res['regime']}: step 1, {res['step1_counts_compared']} exchange counts compared, "
            f"mismatched: {res['step1_mismatched'] or 'none'}; verdicts: "
            + "; ".join(v["verdict"] for v in res["directions"].values())
        )
    print(
        "\n200-prompt probe (n = 8, models cached): "
        + ", ".join(f"{r} {t:.0f} s" for r, t in timing.items())
    )
    if args.json:
        Path(args.json).write_text(json.dumps({"results": results, "timing": timing}, indent=1))


if __name__ == "__main__":
    main()
