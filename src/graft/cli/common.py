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
