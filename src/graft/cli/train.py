"""`graft train`: train one or more policies from a config, or resume a run."""

from __future__ import annotations

import argparse
from pathlib import Path

from graft.cli.common import EPILOG, add_run_arguments, run_config


def add_parser(sub: argparse._SubParsersAction) -> None:
    train = sub.add_parser(
        "train",
        help="train one or more policies",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    train.add_argument("config", nargs="?", help="YAML config file (see `graft config --docs`)")
    add_run_arguments(train)
    train.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    cfg, run_dir, resume = run_config(args)
    from graft.trainer import train

    result = train(cfg, resume=resume, overwrite=args.overwrite)
    if result.finished_before:
        print(
            f"run {run_dir} already finished at step {result.steps}; nothing to do "
            f"(to train on, raise run.steps: --set run.steps=N)"
        )
        return 0
    _print_summary(result.run_dir, result.final_metrics)
    return 0


def _print_summary(run_dir: Path, metrics: dict[str, float]) -> None:
    keys = [k for k in sorted(metrics) if k.endswith(("reward/mean", "avg@1")) or "/avg@" in k]
    print(f"run directory: {run_dir}")
    for key in keys:
        print(f"  {key:48s} {metrics[key]:.4f}")
