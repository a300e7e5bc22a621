"""`graft demo`: the built-in experiment, two tiny heterogeneous models in two regimes."""

from __future__ import annotations

import argparse
from pathlib import Path

from graft.cli.common import add_report_to_argument


def add_parser(sub: argparse._SubParsersAction) -> None:
    demo = sub.add_parser(
        "demo",
        help="GRPO vs GRAFT on two tiny heterogeneous models, on the CPU, in minutes",
        description="Builds (or reuses) two tiny models that differ in architecture and tokenizer, "
        "pre-trained on complementary skills (each weak where the other is strong); trains them "
        "with GRPO and with GRAFT (the paper's weight) from the same seed and per-model budget; "
        "evaluates held-out accuracy per skill; reports each method minus GRPO (with 95% "
        "intervals when there are several seeds) and the exchange regime; writes results.json, "
        "results.md and curves.png. This default is a reduced version of the study that fits "
        "ten minutes (docs/evidence.md); --study runs the study itself: both regimes (latent, "
        "and cold: the weak skill starts near 1-2%), GRAFT with the receiver-relative score and "
        "from a "
        "stored peer, the ablations, five seeds. Finished runs are reused, so an interrupted demo "
        "or study resumes.",
    )
    demo.add_argument("--out", default="runs/demo", help="output directory (default: runs/demo)")
    demo.add_argument(
        "--seeds", type=int, default=0, help="seeds 0..N-1 (default: 1; --study: 5; --quick: 2)"
    )
    mode = demo.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="a few-minute pipeline check")
    mode.add_argument(
        "--study",
        nargs="?",
        const="graft",
        default="",
        choices=("graft", "baselines", "code"),
        help="a pre-registered study (docs/evidence.md), 5 seeds, both regimes, hours on 2 cores, "
        "resumable: `graft` (the default) GRAFT, its variants and the paper's ablations against "
        "GRPO; `baselines` GRAFT against GRPO with 2x samples, GRPO + dynamic sampling and SFT "
        "on the peer's answers then GRPO, at equal steps and at equal generated tokens; `code` "
        "the code pair (list / sum reducers, programs run in the sandbox): GRAFT against GRPO, "
        "GRPO + dynamic sampling and SFT on the peer's programs then GRPO, at equal steps and "
        "at equal FLOPs",
    )
    demo.add_argument(
        "--reference", action="store_true", help="also run GRPO with 4x the group size"
    )
    add_report_to_argument(demo, "results.md, results.json and curves.png")
    demo.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """GRPO vs GRAFT variants on two tiny heterogeneous models, in two regimes."""
    from graft.config.lib import ConfigError
    from graft.evidence.demo import DemoSettings
    from graft.evidence.demo_report import run_demo

    if args.seeds < 0:
        raise ConfigError(f"--seeds must be at least 1, got {args.seeds}")
    settings = DemoSettings.make(
        seeds=args.seeds, quick=args.quick, study=args.study, reference=args.reference
    )
    from graft.rundir.trackers import check_trackers, report_outputs

    check_trackers(args.report_to)  # before the hours of training
    out = Path(args.out)
    run_demo(out, settings)
    print()
    print((out / "results.md").read_text())
    files = [out / "results.json", out / "results.md", out / "curves.png"]
    print(f"files: {', '.join(map(str, files))}")
    config = {"seeds": args.seeds, "quick": args.quick, "study": args.study or ""}
    report_outputs(
        args.report_to, out, kind="demo", files=files, config=config, project=args.project
    )
    return 0
