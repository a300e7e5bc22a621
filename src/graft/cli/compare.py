"""`graft compare`: paired comparisons of runs over seeds, with intervals."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from graft.cli.common import add_report_to_argument


def add_parser(sub: Any) -> None:
    compare = sub.add_parser(
        "compare",
        help="paired per-seed differences between methods, with 95%% intervals",
        description="Groups the runs by method (their config difference, or run.label) and seed, "
        "and reports for every evaluated metric (per policy, suite and skill, at each evaluation "
        "step, or at equal compute with --compute, and as the mean over the curve) the per-seed "
        "difference against the baseline: its mean and a 95% Student t interval over seeds, "
        "with what each method's runs cost. A verdict needs 3 seeds; the primary "
        "endpoints are corrected together (Holm), every other cell is exploratory. Writes "
        "compare.md, compare.json and compare.png, with the exchange regime of every run that "
        "exchanged.",
    )
    compare.add_argument(
        "runs", nargs="+", metavar="RUN_DIR", help="run directories, or folders holding them"
    )
    compare.add_argument(
        "--baseline",
        metavar="NAME",
        help="the method to compare against (default: the one with exchange.enabled=false)",
    )
    compare.add_argument(
        "--primary",
        action="append",
        metavar="ENDPOINT",
        help="a primary endpoint, e.g. 'eval/test/avg@4' or 'm/llama/eval/test/avg@4 final' "
        "(repeatable; default: the runs' eval.primary); Holm's correction runs over them",
    )
    compare.add_argument(
        "--compute",
        choices=("steps", "gen_tokens", "flops", "responses"),
        default="steps",
        help="the axis the evaluation curves are read on: steps (default), or the run's "
        "cumulative generated tokens, FLOP estimate or responses, at evenly spaced points every "
        "run reached (linear between evaluations, never past a run's end)",
    )
    compare.add_argument("--out", metavar="DIR", help="output folder (default: the first RUN_DIR)")
    add_report_to_argument(compare, "compare.png, compare.md and compare.json")
    compare.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from graft.evidence.compare import compare_runs
    from graft.evidence.compare_report import write_report
    from graft.rundir.trackers import check_trackers, report_outputs

    check_trackers(args.report_to)
    result = compare_runs(
        args.runs, baseline=args.baseline, primary=args.primary, compute=args.compute
    )
    out = Path(args.out or args.runs[0])
    text = write_report(result, out)
    print(text)
    files = [out / "compare.md", out / "compare.json", out / "compare.png"]
    print(f"files: {', '.join(map(str, files))}")
    config = {
        "runs": [str(r) for r in args.runs],
        "baseline": args.baseline or "",
        "compute": args.compute,
    }
    report_outputs(
        args.report_to, out, kind="compare", files=files, config=config, project=args.project
    )
    return 0
