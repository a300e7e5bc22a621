"""`graft demo`: the built-in experiment, two tiny heterogeneous models in two regimes."""

from __future__ import annotations

import argparse
from pathlib import Path

from graft.cli.common import add_report_to_argument


def add_parser(sub: argparse._SubParsersAction) -> None:
    demo = sub.add_parser(
        "demo",
        help="GRPO vs GRAFT on two tiny heterogeneous models that write code, on the CPU",
        description="Takes two tiny models that differ in architecture and tokenizer (a Llama "
        "with a character tokenizer, a Qwen2 with a BPE; they ship pre-trained, and are built "
        "from their specs where torch or transformers differ from the pinned versions), each "
        "pre-trained almost only on one skill of a code task (one-line Python functions: the "
        "`list` and the `sum` reducer), so each fails whole groups on the other's; trains them "
        "with GRPO and with GRAFT (the paper's weight) from the same seed and per-model budget, "
        "side by side, every program run in the sandbox; evaluates held-out pass@1 per skill; "
        "and writes results.md, which opens with the answer of the pre-registered code-pair "
        "study (docs/evidence.md) as recorded with its commit, then what this run shows (one "
        "seed: an anecdote), results.json and curves.png (a row per model). The default is the "
        "study reduced to fit minutes; --study runs a pre-registered study itself. Finished runs "
        "are reused, so an interrupted demo or study resumes. --quick checks the pipeline on the "
        "multiplication pair.",
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
        choices=("graft", "baselines", "code", "reuse", "trio"),
        help="a pre-registered study (docs/evidence.md), 5 seeds, both regimes, resumable, about "
        "50 minutes (`baselines`) to hours (`code`) of runs on 2 cores: `graft` (the default) "
        "GRAFT, its variants and the paper's ablations against GRPO; `baselines` GRAFT against "
        "GRPO with 2x samples, GRPO + dynamic sampling and SFT on the peer's answers then GRPO, "
        "at equal steps and at equal generated tokens; `code` "
        "the code pair (list / sum reducers, programs run in the sandbox): GRAFT against GRPO, "
        "GRPO + dynamic sampling and SFT on the peer's programs then GRPO, at equal steps and "
        "at equal FLOPs; `reuse` the code pair's models trained alone against a stored peer log "
        "(the peer's GRPO log of the same or another seed, frozen logs of its final and its "
        "pre-trained model, a shuffled-reward control) beside GRPO, online GRAFT and the "
        "paper's three controls online (correct-only, no weight, no token clip); writes "
        "results.md, results.json and staleness.png; `trio` three models of three families "
        "(llama, qwen2, gpt2; reducers list / sum / max): GRAFT in each pair and in the pool "
        "of three against GRPO, each model alone against a stored GRPO log of each peer, the "
        "staleness of the learning peer's logs, and four arms on the own-skill cost; writes "
        "results.md, results.json, trio_gains.png and trio_staleness.png",
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
    if args.study in ("reuse", "trio"):
        return run_reuse_study(args)
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


def run_reuse_study(args: argparse.Namespace) -> int:
    """`--study reuse` (docs/evidence.md, "Trajectory reuse where GRAFT works") and `--study
    trio` ("Three models"): studies of their own runner and report."""
    from dataclasses import replace

    from graft.config.lib import ConfigError

    if args.study == "reuse":
        from graft.evidence.reuse import settings
        from graft.evidence.reuse_report import run_and_write
    else:
        from graft.evidence.trio import settings
        from graft.evidence.trio_report import run_and_write

    study = f"graft demo --study {args.study}"
    if args.reference or args.report_to:
        raise ConfigError(f"{study}: --reference and --report-to do not apply")
    s = settings()
    if args.seeds:
        if args.study == "reuse" and args.seeds < 2:
            raise ConfigError(f"{study}: --seeds needs at least 2 (arm b)")
        s = replace(s, seeds=tuple(range(args.seeds)))
    files = run_and_write(Path(args.out), s)
    print((Path(args.out) / "results.md").read_text())
    print(f"files: {', '.join(map(str, files))}")
    return 0
