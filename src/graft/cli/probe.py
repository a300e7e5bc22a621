"""`graft probe`: before training, what GRPO and GRAFT can learn from these models and prompts."""

from __future__ import annotations

import argparse
from typing import Any

from graft.cli.common import add_set_argument

PROBE_EPILOG = """examples:
  graft probe --config configs/graft_tiny.yaml --steps 10
  graft probe --model Qwen/Qwen2.5-1.5B-Instruct --model meta-llama/Llama-3.2-1B-Instruct \\
      --data train.jsonl --limit 200 --n 8 --config my_pair.yaml
  graft probe --config runs/my_run/config.yaml --steps 10   # the run's first 10 steps' prompts
"""


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "probe",
        help="before training: all-fail shares, complementarity, what the gate admits",
        description="Runs the first steps of a run without training: each model samples n "
        "responses per prompt (the run's prompts and seeds), the verifier scores them, and the "
        "exchange runs as in training. Reports per model pass@1 and the all-fail / all-pass / "
        "mixed shares; per direction the complementarity, the gate's candidates, the "
        "compatibility scores and what each weight admits; and a forecast per step with a "
        "verdict in plain words. Writes probe.md, probe.json and probe.png.",
        epilog=PROBE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--model",
        action="append",
        default=[],
        metavar="[NAME=]PATH",
        help="a model (hub name, directory, .gguf, tiny:<preset>); repeat for each; default: "
        "the config's models. Each takes the settings of the config's model at its position",
    )
    p.add_argument("--config", help="the run's config: sampling, exchange and task settings")
    p.add_argument("--data", help="problems (.jsonl/.parquet with problem and answer columns)")
    p.add_argument("--n", type=int, default=0, help="responses per prompt (default: the config's)")
    p.add_argument("--limit", type=int, default=0, help="the first N problems of the data")
    p.add_argument(
        "--split",
        choices=("train", "val", "test"),
        default="train",
        help="the task's split whose prompts are probed (default: train, the run's own; val or "
        "test: prompts the models were not trained on)",
    )
    p.add_argument(
        "--steps",
        type=int,
        default=0,
        help="steps of prompts to probe (default: enough for --limit, else 10)",
    )
    p.add_argument(
        "--out",
        default="probe",
        help="output folder (default: ./probe); each model's rollouts are kept in OUT/cache and "
        "reused by the next probe with the same model and settings",
    )
    p.add_argument("--fresh", action="store_true", help="sample again, ignoring OUT/cache")
    add_set_argument(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    import time
    from pathlib import Path

    from graft.cli.common import load
    from graft.config import ConfigError
    from graft.evidence.probe import default_steps, probe_config, run_probe, summarize
    from graft.evidence.probe_report import write_report

    if not args.model and not args.config:
        raise ConfigError("graft probe: name the models with --model, or a --config that has them")
    for flag, value in (("--n", args.n), ("--limit", args.limit), ("--steps", args.steps)):
        if value < 0:
            raise ConfigError(f"graft probe: {flag} must be positive, got {value}")
    cfg = load(args.config, args.overrides)
    cfg = probe_config(cfg, models=args.model, data=args.data or "", n=args.n)
    steps = args.steps or default_steps(cfg, args.limit)
    out = Path(args.out)
    cache = out / "cache"
    if args.fresh and cache.is_dir():
        import shutil

        shutil.rmtree(cache)
    start = time.perf_counter()
    raw = run_probe(cfg, steps=steps, limit=args.limit, cache_dir=cache, split=args.split)
    seconds = time.perf_counter() - start
    summary = summarize(raw, cfg)
    print(write_report(raw, summary, out, seconds=seconds))
    print(f"files: {out / 'probe.md'}, {out / 'probe.json'}, {out / 'probe.png'}")
    return 0
