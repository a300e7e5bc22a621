"""`graft export-merged`: one policy of a run as a plain transformers model."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "export-merged",
        help="write one policy of a run as a plain transformers model (LoRA adapters merged)",
        description="Loads a policy's checkpoint from RUN_DIR (for a LoRA policy: its base model "
        "with the adapter merged into the weights) and writes model and tokenizer to --out, "
        "loadable with transformers' AutoModelForCausalLM.from_pretrained.",
    )
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run directory of `graft train`")
    p.add_argument("--policy", help="the policy's name (models.N.name); needed when several")
    p.add_argument(
        "--checkpoint",
        default="final",
        help="`final` (the newest checkpoint, default), `best`, or a folder name like step_000020",
    )
    p.add_argument("--out", required=True, help="new (or empty) directory to write the model to")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from graft.preflight import resolved
    from graft.rundir.export import export_merged

    out = resolved(args.out, "--out")
    run_dir = resolved(args.run_dir, "RUN_DIR")
    folder = export_merged(run_dir, out, policy=args.policy, checkpoint=args.checkpoint)
    print(f"wrote {out} (from {folder})")
    return 0
