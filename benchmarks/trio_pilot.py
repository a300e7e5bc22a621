"""The three-model study's pilot (docs/evidence.md, "Three models"): how far gpt2, the peer that
learns, is pre-trained. Never reported as a result.

For each candidate number of pre-training steps, gpt2 (`gpt2-bpe-trio-max` with that many steps)
trains alone with GRPO at the study's settings on seed 200, evaluated on the VALIDATION split
(300 problems, avg@4 at temperature 1) at steps 0 and 40. The rule, fixed before it ran: the
candidate whose own skill (`max`) rises most from step 0 to step 40, among those that start at
10% or more (GRPO needs some signal); a tie (within 1 point) goes to fewer steps. Resumable.

    .venv/bin/python benchmarks/trio_pilot.py --out runs/trio_pilot
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from graft.evidence.demo import is_done, run_inprocess
from graft.evidence.trio import PILOT_SEED, PRESETS, run_config, settings
from graft.rundir import read_metrics

CANDIDATES = (100, 200, 300)
FLOOR = 0.10


def pilot_run(out: Path, steps: int) -> dict[str, float]:
    """gpt2 pre-trained `steps` steps, then GRPO alone; its `max` val avg@4 at steps 0 and 40."""
    from graft.models.tiny import build_tiny
    from graft.models.tiny_specs import TINY_PRESETS
    from graft.trainer import train

    spec = dataclasses.replace(TINY_PRESETS[PRESETS["gpt2"]], pretrain_steps=steps)
    path = str(build_tiny(spec))
    s = settings(seeds=(PILOT_SEED,), eval_suite="val", eval_every=40,
                 presets={"trio": {"gpt2": path}})  # fmt: skip
    cfg = run_config(s, out / f"pretrain_{steps}", PILOT_SEED, "grpo", ("gpt2",),
                     "exchange.enabled=false", "run.threads=2")  # fmt: skip
    if not is_done(cfg):
        run_inprocess(cfg, train)
    key = "eval/val/max/avg@4"  # a run of one model: no policy prefix
    values = [r[key] for r in read_metrics(Path(cfg.run.out_dir)) if key in r]
    return {"start": values[0], "end": values[-1], "rise": values[-1] - values[0]}


def choose(results: dict[int, dict[str, float]]) -> int | None:
    """The rule above: the largest rise among candidates starting at FLOOR or more."""
    ok = {k: r for k, r in results.items() if r["start"] >= FLOOR}
    if not ok:
        return None
    best = max(r["rise"] for r in ok.values())
    return min(k for k, r in ok.items() if r["rise"] >= best - 0.01)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="runs/trio_pilot")
    args = p.parse_args()
    results = {steps: pilot_run(Path(args.out), steps) for steps in CANDIDATES}
    print("| gpt2 pre-training steps | `max` val avg@4, step 0 | step 40 | rise |")
    print("|---|---|---|---|")
    for steps, r in results.items():
        print(f"| {steps} | {r['start']:.1%} | {r['end']:.1%} | {r['rise'] * 100:+.1f} points |")
    print(f"\nchosen: {choose(results)} pre-training steps")


if __name__ == "__main__":
    main()
