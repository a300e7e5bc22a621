"""`graft plot`: the reward and accuracy curves of runs, overlaid in one PNG."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    plot = sub.add_parser("plot", help="reward and accuracy curves of runs, overlaid")
    plot.add_argument("runs", nargs="+", metavar="RUN_DIR")
    plot.add_argument("--out", default="curves.png", help="PNG file (default curves.png)")
    plot.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from graft.config import ConfigError
    from graft.eval.report import plot_runs
    from graft.preflight import check_output_file, resolved

    out = resolved(args.out, "--out")
    if out.suffix.lower() != ".png":  # never a run's own file (metrics.jsonl, config.yaml, ...)
        raise ConfigError(f"--out {args.out}: name a .png file")
    check_output_file(out, "--out")
    counts = plot_runs(args.runs, out)
    print(f"wrote {args.out}: {counts['reward']} reward curves, {counts['eval']} accuracy curves")
    return 0
