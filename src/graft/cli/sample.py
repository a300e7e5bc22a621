"""`graft sample`: a peer log (a trajectory store) sampled from any model over a task's prompts."""

from __future__ import annotations

import argparse
from typing import Any

from graft.cli.common import add_set_argument

SAMPLE_EPILOG = """examples:
  graft sample --run runs/code_grpo --policy qwen --out logs/qwen_final     # a run's checkpoint
  graft sample --config configs/graft_code.yaml --policy qwen --out logs/qwen_pre   # its start
  graft sample --config my_pair.yaml --model Qwen/Qwen2.5-1.5B-Instruct --out logs/qwen --n 16
  graft train configs/graft_stored_tiny.yaml --set exchange.stored.path=logs/qwen_final
"""


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "sample",
        help="a peer log: a model's verified responses over a task's prompts, as a store",
        description="Samples --n responses from a model to every prompt of a task's split, "
        "verifies each with the task's verifier and writes the groups (token ids, generation "
        "log-probs, rewards, advantages) to the trajectory store at --out, with the model, its "
        "weights' digest, the settings and the versions in the store's run metadata: a store "
        "that exchange.stored.path takes as it is. The task, its verifier and the default sampling "
        "settings (rollout.group_size, temperature, top_p, top_k, max_new_tokens) come from "
        "--config, or from the run of --run. A sampling killed and started again with the "
        "same arguments goes on where it stopped (no row lost or doubled).",
        epilog=SAMPLE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    what = p.add_argument_group("the model (one of --config and --run)")
    what.add_argument("--config", help="a config: its task, sampling settings and models")
    what.add_argument("--run", metavar="RUN_DIR", help="a run: its config and a checkpoint")
    what.add_argument(
        "--policy", default="", help="which of the config's or run's models (default: the only)"
    )
    what.add_argument(
        "--checkpoint",
        default="final",
        help="with --run: final (the latest, default), best, or a step_NNNNNNNN folder",
    )
    what.add_argument(
        "--model",
        default="",
        metavar="PATH_OR_NAME",
        help="the weights instead (hub name, local directory, .gguf file or tiny:<preset>), "
        "with the policy's other settings (prompt template...)",
    )
    p.add_argument("--out", required=True, help="the trajectory store to write (a folder)")
    p.add_argument("--split", default="train", choices=("train", "test", "val"))
    p.add_argument("--n", type=int, default=0, help="responses per prompt (default: group_size)")
    p.add_argument("--limit", type=int, default=0, help="the split's first N prompts (0: all)")
    p.add_argument(
        "--steps-of",
        default="",
        metavar="RUN_DIR",
        help="only the prompts that RUN_DIR's training draws (its seed, batch size and steps), "
        "in the order it first draws them: a log for a receiver with that run's prompt order",
    )
    p.add_argument("--temperature", type=float, default=None, help="default: the config's")
    p.add_argument("--top-p", type=float, default=None, help="default: the config's")
    p.add_argument("--top-k", type=int, default=None, help="default: the config's")
    p.add_argument("--max-new-tokens", type=int, default=0, help="default: the config's")
    p.add_argument("--seed", type=int, default=0, help="the sampling's seed (default 0)")
    p.add_argument("--chunk", type=int, default=64, help="prompts per shard (default 64)")
    p.add_argument("--workers", type=int, default=2, help="verifier processes (default 2)")
    add_set_argument(p)
    p.set_defaults(handler=run)


def _config_and_model(args: argparse.Namespace) -> tuple[Any, Any, dict[str, str]]:
    """(config, the chosen ModelConfig with its weights, what to record of where they came
    from)."""
    import dataclasses
    from pathlib import Path

    from graft.cli.common import load
    from graft.config import ConfigError, LoRAConfig

    if bool(args.config) == bool(args.run):
        raise ConfigError("graft sample: give one of --config and --run")
    run_dir = Path(args.run) if args.run else None
    if run_dir is not None and not (run_dir / "config.yaml").is_file():
        raise FileNotFoundError(f"--run {run_dir}: no run there (no config.yaml)")
    cfg = load(str(run_dir / "config.yaml") if run_dir else args.config, args.overrides)
    names = [m.name for m in cfg.models]
    if not args.policy and len(names) > 1:
        raise ConfigError(f"graft sample --policy: choose one of {', '.join(names)}")
    name = args.policy or names[0]
    if name not in names:
        raise ConfigError(f"graft sample --policy {name}: not a model here ({', '.join(names)})")
    model = cfg.models[names.index(name)]
    if args.model:
        path = args.model
        from graft.models.load import looks_local

        if not Path(path).expanduser().exists() and looks_local(path):
            raise FileNotFoundError(f"--model {path}: no such file or directory")
        return cfg, dataclasses.replace(model, path=path, tokenizer=""), {"model": path}
    if run_dir is None:
        return cfg, model, {"model": model.path}
    folder = _checkpoint(run_dir, args.checkpoint) / name
    if not folder.is_dir():
        raise FileNotFoundError(f"--run {run_dir}: no checkpoint of {name} at {folder}")
    # a LoRA checkpoint loads as its base with the adapter merged in
    chosen = dataclasses.replace(model, path=str(folder), tokenizer="", lora=LoRAConfig())
    return cfg, chosen, {"model": str(folder), "run": str(run_dir)}


def _checkpoint(run_dir: Any, which: str) -> Any:
    from graft.rundir import latest_checkpoint, verify_checkpoint

    if which == "final":
        folder = latest_checkpoint(run_dir)
        if folder is None:
            raise FileNotFoundError(f"--run {run_dir}: no checkpoint in {run_dir / 'checkpoints'}")
    else:
        folder = run_dir / "checkpoints" / which
        if not folder.is_dir():
            raise FileNotFoundError(f"--checkpoint {which}: no such checkpoint in {run_dir}")
    verify_checkpoint(folder)  # every file as it was written (MANIFEST.json)
    return folder


def _settings(args: argparse.Namespace, cfg: Any) -> Any:
    from pathlib import Path

    from graft.config import ConfigError
    from graft.config.checks import check_eval_sampling
    from graft.peerlog.sample import SampleSettings

    for flag, value, least in (("--n", args.n, 0), ("--limit", args.limit, 0),
                               ("--chunk", args.chunk, 1), ("--workers", args.workers, 1),
                               ("--max-new-tokens", args.max_new_tokens, 0)):  # fmt: skip
        if value < least:
            raise ConfigError(f"graft sample {flag}: must be at least {least}, got {value}")
    r = cfg.rollout
    pick = lambda given, default: default if given is None else given  # noqa: E731
    settings = SampleSettings(
        split=args.split, n=args.n or r.group_size,
        temperature=pick(args.temperature, r.temperature), top_p=pick(args.top_p, r.top_p),
        top_k=pick(args.top_k, r.top_k), max_new_tokens=args.max_new_tokens or r.max_new_tokens,
        seed=args.seed, limit=args.limit, chunk=args.chunk, steps_of=args.steps_of,
    )  # fmt: skip
    if args.steps_of and not (Path(args.steps_of) / "config.yaml").is_file():
        raise FileNotFoundError(f"--steps-of {args.steps_of}: no run there (no config.yaml)")
    check_eval_sampling(settings.temperature, settings.top_p,
                        keys=("graft sample --temperature", "graft sample --top-p"))  # fmt: skip
    if settings.top_k < 0:
        raise ConfigError(f"graft sample --top-k: must be at least 0, got {settings.top_k}")
    return settings


def run(args: argparse.Namespace) -> int:
    import dataclasses

    from graft.peerlog.sample import sample_to_store
    from graft.training.policy import PolicySpec
    from graft.verify.pool import VerifierPool

    cfg, model, describe = _config_and_model(args)
    settings = _settings(args, cfg)
    rollout = dataclasses.replace(cfg.rollout, max_new_tokens=settings.max_new_tokens)
    spec = PolicySpec(
        model=model, rollout=rollout, algo=cfg.algo, seed=cfg.run.seed, threads=cfg.run.threads
    )
    with VerifierPool(workers=args.workers) as pool:
        done = sample_to_store(cfg, spec, settings, args.out, pool=pool, describe=describe)
    before = f", {done['prompts_found_done']} found done" if done["prompts_found_done"] else ""
    print(
        f"sampled {done['prompts_sampled_now']} of {done['prompts']} prompts x {settings.n} "
        f"({settings.split}){before}: {done['correct_share_now']:.1%} verified correct; "
        f"wrote {args.out} (run {done['run_id']}, model {done['policy']})"
    )
    return 0
