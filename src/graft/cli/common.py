"""What every command shares: the one-line argument errors, the examples, loading a config."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import NoReturn

EPILOG = """examples:
  graft train configs/grpo_tiny.yaml --set algo.clip_high=0.28 --set rollout.group_size=8
  graft train --resume runs/grpo_tiny --set run.steps=100
  graft config --docs                 every config key with its type, default and meaning
  graft tiny build llama-char-add     build (or reuse) a cached tiny model
  graft store info runs/grpo_tiny/trajectories
"""


class OneLineParser(argparse.ArgumentParser):
    """Argument errors as one line, `graft: error: ...`, exit code 2 (like every user error)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"graft: error: {self.prog}: {message} (see `{self.prog} --help`)\n")


def add_set_argument(parser: argparse.ArgumentParser) -> None:
    """`--set KEY=VALUE`, repeatable: a config override (dotted key, YAML value)."""
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config value, e.g. --set models.0.optim.lr=1e-5",
    )


def load(config_path: str | None, overrides: Sequence[str], out: str | None = None):
    """The config of `config_path` with `overrides`; `out` (a path, taken as it is, not parsed
    as YAML) replaces run.out_dir."""
    from graft.config import Config, load_config

    cfg = load_config(Config, config_path, overrides)
    return cfg if out is None else with_out_dir(cfg, out)


def with_out_dir(cfg, out: str):
    import dataclasses

    if cfg.run.out_dir == out:
        return cfg
    return dataclasses.replace(cfg, run=dataclasses.replace(cfg.run, out_dir=out))


def add_report_to_argument(parser: argparse.ArgumentParser, what: str) -> None:
    """--report-to / --project: the command's outputs also go to experiment trackers."""

    def names(text: str) -> tuple[str, ...]:
        from graft.rundir.trackers import TRACKERS

        chosen = tuple(n.strip() for n in text.split(",") if n.strip())
        unknown = [n for n in chosen if n not in TRACKERS]
        if unknown or not chosen:
            raise argparse.ArgumentTypeError(
                f"{', '.join(unknown) or 'nothing'}: expected any of {', '.join(TRACKERS)}"
            )
        return chosen

    parser.add_argument(
        "--report-to",
        type=names,
        default=(),
        metavar="NAMES",
        help=f"also log {what} to these trackers, comma-separated: tensorboard, wandb, mlflow, "
        "trackio (as run.report_to)",
    )
    parser.add_argument(
        "--project", default="graft", help="tracker project or experiment (default: graft)"
    )


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """--set, --out, --resume and --overwrite: the arguments of a command that writes a run."""
    add_set_argument(parser)
    parser.add_argument("--out", help="run directory (overrides run.out_dir)")
    parser.add_argument(
        "--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR from its newest checkpoint"
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="start afresh in a run directory that holds a run: the old run is moved aside to "
        "RUN_DIR.old-N (never deleted)",
    )


def run_config(args: argparse.Namespace):
    """(config, run directory, resume?) of a command that writes a run, every check of the
    arguments and of the directory made before anything is written."""
    from graft.config.lib import ConfigError
    from graft.preflight import check_engine, check_writable_dir, resolved

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
        check_engine(cfg)  # before the heavy imports (graft.rundir imports torch)
        from graft.rundir import same_models

        same_models(load(str(run_dir / "config.yaml"), ()), cfg, run_dir)
        check_writable_dir(run_dir, "--resume")
        return cfg, run_dir, True
    if args.out is not None and not args.out.strip():
        raise ConfigError("--out: empty; name the run directory")
    cfg = load(args.config, args.overrides, args.out)
    check_engine(cfg)  # before the heavy imports (graft.rundir imports torch)
    from graft.rundir import refuse_reuse

    key = "--out" if args.out is not None else "run.out_dir"
    run_dir = resolved(cfg.run.out_dir, key)
    cfg = with_out_dir(cfg, str(run_dir))  # `~` expanded
    if not args.overwrite:
        refuse_reuse(run_dir)
    check_writable_dir(run_dir, key)
    return cfg, run_dir, False
