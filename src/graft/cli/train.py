"""`graft train`: train one or more policies from a config, or resume a run."""

from __future__ import annotations

import argparse
from pathlib import Path

from graft.cli.common import EPILOG, add_set_argument, load, with_out_dir


def add_parser(sub: argparse._SubParsersAction) -> None:
    train = sub.add_parser(
        "train",
        help="train one or more policies",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    train.add_argument("config", nargs="?", help="YAML config file (see `graft config --docs`)")
    add_set_argument(train)
    train.add_argument("--out", help="run directory (overrides run.out_dir)")
    train.add_argument(
        "--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR from its newest checkpoint"
    )
    train.add_argument(
        "--overwrite",
        action="store_true",
        help="start afresh in a run directory that holds a run: the old run is moved aside to "
        "RUN_DIR.old-N (never deleted)",
    )
    train.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from graft.config.lib import ConfigError
    from graft.preflight import check_writable_dir, resolved
    from graft.rundir import refuse_reuse, same_models
    from graft.training.trainer import train

    resume = args.resume is not None
    if resume:
        run_dir = resolved(args.resume, "--resume")
        for flag, given in (("a config file", args.config), ("--out", args.out)):
            if given is not None:
                raise ConfigError(
                    f"--resume {run_dir} reads the run's own config.yaml; do not pass {flag} "
                    f"({given!r})"
                )
        if args.overwrite:
            raise ConfigError("--resume continues a run and --overwrite moves it aside; pick one")
        if not (run_dir / "config.yaml").is_file():
            raise FileNotFoundError(f"--resume {run_dir}: no config.yaml in that directory")
        cfg = load(str(run_dir / "config.yaml"), args.overrides, str(run_dir))
        same_models(load(str(run_dir / "config.yaml"), ()), cfg, run_dir)
        check_writable_dir(run_dir, "--resume")
    else:
        if args.out is not None and not args.out.strip():
            raise ConfigError("--out: empty; name the run directory")
        cfg = load(args.config, args.overrides, args.out)
        key = "--out" if args.out is not None else "run.out_dir"
        run_dir = resolved(cfg.run.out_dir, key)
        cfg = with_out_dir(cfg, str(run_dir))  # `~` expanded
        if not args.overwrite:
            refuse_reuse(run_dir)
        check_writable_dir(run_dir, key)
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
