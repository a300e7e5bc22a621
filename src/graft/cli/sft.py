"""`graft sft`: supervised fine-tuning of one policy on a store's verified-correct responses."""

from __future__ import annotations

import argparse
import json

from graft.cli.common import add_run_arguments, run_config


def add_parser(sub: argparse._SubParsersAction) -> None:
    sft = sub.add_parser(
        "sft",
        help="fine-tune one policy on a trajectory store's verified-correct responses",
        description="Supervised fine-tuning on the responses of one model's run in a trajectory "
        "store (a peer's run, say) that this config's verifier calls correct: re-verified, "
        "re-tokenized with the policy's own template, deduplicated, with a held-out share of "
        "the prompts for the validation loss and accuracy that pick checkpoints/best. Each step "
        "is one AdamW step on the token-mean negative log-likelihood of sft.batch_size "
        "responses. Its checkpoints are model paths for graft train (models.N.path).",
        epilog="examples:\n"
        "  graft sft configs/sft_tiny.yaml --store runs/graft_tiny/trajectories\n"
        "  graft sft --resume runs/sft_tiny --set run.steps=200\n"
        "  graft train configs/grpo_tiny.yaml \\\n"
        "      --set models.0.path=runs/sft_tiny/checkpoints/best/qwen   # then RL from it",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sft.add_argument("config", nargs="?", help="YAML config file (see `graft config --docs`)")
    sft.add_argument("--store", help="the trajectory store to learn from (overrides sft.store)")
    add_run_arguments(sft)
    sft.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.store is not None:
        if args.resume is not None:
            from graft.config import ConfigError

            raise ConfigError(
                f"--resume {args.resume} learns from the run's own sft.store; do not pass --store"
            )
        args.overrides = [*args.overrides, f"sft.store={args.store}"]
    cfg, run_dir, resume = run_config(args)
    from graft.sft.loop import best_entries, best_line, sft

    result = sft(cfg, resume=resume, overwrite=args.overwrite)
    if result.finished_before:
        print(f"run {run_dir} already finished at step {result.steps}; nothing to do")
        return 0
    print(f"run directory: {run_dir}")
    for key in sorted(result.final_metrics):
        if "/avg@" in key or key == "sft/val_loss":
            print(f"  {key:48s} {result.final_metrics[key]:.4f}")
    summary = json.loads((run_dir / "summary.json").read_text())
    for name, info in best_entries(summary).items():
        print(best_line(info, run_dir / "checkpoints" / "best" / name))
    return 0
