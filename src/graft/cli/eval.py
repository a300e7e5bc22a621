"""`graft eval`: avg@k and pass@k of models, or of the checkpoints of runs."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

EVAL_EPILOG = """examples:
  graft eval --model runs/grpo_tiny/checkpoints/step_000040/llama --suite test --k 4 --runs 3
  graft eval --run runs/graft_tiny --run runs/grpo_tiny --baseline grpo_tiny/llama/final
  graft eval --model HuggingFaceTB/SmolLM2-135M-Instruct --chat-template --suite paper
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    ev = sub.add_parser(
        "eval",
        help="avg@k / pass@k of models or of a run's checkpoints",
        epilog=EVAL_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    what = ev.add_argument_group("what to evaluate (one or more)")
    what.add_argument(
        "--model",
        action="append",
        default=[],
        metavar="PATH_OR_NAME",
        help="hub name, local directory, .gguf file or tiny:<preset>",
    )
    what.add_argument(
        "--run",
        action="append",
        default=[],
        metavar="RUN_DIR",
        help="every policy of a run: its final and its best checkpoint",
    )
    ev.add_argument(
        "--suite",
        action="append",
        default=[],
        help="suite (math500, aime2024, aime2025, amc23, minerva, paper, test, val, "
        "fixture, PATH.jsonl); default: the run's eval suites, else test",
    )
    ev.add_argument("--config", help="config whose task defines the test/val suites (--model)")
    ev.add_argument("--k", type=int, default=8, help="samples per problem (default 8)")
    ev.add_argument("--runs", type=int, default=5, help="evaluation runs (default 5)")
    ev.add_argument("--temperature", type=float, default=0.6, help="default 0.6")
    ev.add_argument("--top-p", type=float, default=0.95, help="default 0.95")
    ev.add_argument(
        "--max-new-tokens", type=int, default=0, help="default: the run's limit, else 1024"
    )
    ev.add_argument(
        "--max-prompt-tokens",
        type=int,
        default=4096,
        help="prompts longer than this (after the template) are skipped and counted (default 4096)",
    )
    ev.add_argument("--limit", type=int, default=0, help="first N problems of each suite")
    ev.add_argument("--seed", type=int, default=0)
    ev.add_argument("--prompt-template", default="{prompt}", help="for --model")
    ev.add_argument("--chat-template", action="store_true", help="for --model")
    ev.add_argument("--baseline", help="label of the row the table's delta column compares to")
    ev.add_argument("--out", help="output folder for eval.json and eval.md")
    ev.add_argument("--workers", type=int, default=2, help="verifier processes")

    ev.set_defaults(handler=run)


def _unique_labels(paths: list[str]) -> list[str]:
    """Each path's folder name, lengthened by parent folders where two would share one
    (two checkpoints of one policy: `step_000020/llama`, `step_000040/llama`)."""
    labels = []
    for path in paths:
        if path.startswith("tiny:"):
            labels.append(path)
            continue
        parts = Path(path).parts
        depth = 1
        while depth < len(parts) and any(
            Path(other).parts[-depth:] == parts[-depth:] for other in paths if other != path
        ):
            depth += 1
        labels.append("/".join(parts[-depth:]))
    return labels


def _check_args(args: argparse.Namespace) -> None:
    from graft.config.lib import ConfigError

    for flag, value, least in (
        ("--k", args.k, 1),
        ("--runs", args.runs, 1),
        ("--workers", args.workers, 1),
        ("--limit", args.limit, 0),
        ("--max-new-tokens", args.max_new_tokens, 0),
        ("--max-prompt-tokens", args.max_prompt_tokens, 1),
    ):
        if value < least:
            raise ConfigError(f"graft eval {flag}: must be at least {least}, got {value}")
    from graft.config.checks import check_eval_sampling

    check_eval_sampling(
        args.temperature, args.top_p, keys=("graft eval --temperature", "graft eval --top-p")
    )
    if len(set(args.model)) != len(args.model):
        raise ConfigError(f"graft eval --model: a path is given twice ({args.model})")


def _check_targets(targets: list, baseline: str | None) -> None:
    """Every target on the same suites (one table), and the baseline among them."""
    from graft.config.lib import ConfigError

    suites = {label: list(names) for label, _, _, names, _ in targets}
    if len({tuple(v) for v in suites.values()}) > 1:
        raise ConfigError(
            f"graft eval: the targets have different eval suites ({suites}); pass --suite to "
            f"evaluate them all on the same suites"
        )
    if baseline is not None and baseline not in suites:
        raise ConfigError(
            f"graft eval --baseline {baseline!r}: not among the targets {list(suites)}"
        )


def _targets(args: argparse.Namespace):
    """(label, ModelConfig, config, suites, default max_new_tokens) for every model."""
    from graft.config import Config, LoRAConfig, ModelConfig, load_config
    from graft.rundir import latest_checkpoint, verify_checkpoint

    targets = []
    for path, label in zip(args.model, _unique_labels(args.model)):
        cfg = load_config(Config, args.config) if args.config else Config()
        model = ModelConfig(
            name="model",
            path=path,
            prompt_template=args.prompt_template,
            chat_template=args.chat_template,
        )
        targets.append((label, model, cfg, args.suite or list(cfg.eval.suites), 1024))
    for run in args.run:
        run_dir = Path(run)
        cfg = load_config(Config, run_dir / "config.yaml")
        final = latest_checkpoint(run_dir)
        if final is None:
            raise FileNotFoundError(f"--run {run_dir}: no checkpoint in {run_dir / 'checkpoints'}")
        limit = cfg.eval.max_new_tokens or cfg.rollout.max_new_tokens
        suites = args.suite or list(cfg.eval.suites)
        for m in cfg.models:
            best = run_dir / "checkpoints" / "best" / m.name
            for tag, ckpt in (("final", final / m.name), ("best", best)):
                if ckpt.is_dir():
                    verify_checkpoint(ckpt)  # every file as it was written (MANIFEST.json)
                    # a LoRA checkpoint loads as its base with the adapter merged in
                    model = dataclasses.replace(m, path=str(ckpt), tokenizer="", lora=LoRAConfig())
                    targets.append((f"{run_dir.name}/{m.name}/{tag}", model, cfg, suites, limit))
    if not targets:
        from graft.config.lib import ConfigError

        raise ConfigError("graft eval: give --model or --run")
    _check_targets(targets, args.baseline)
    return targets


def run(args: argparse.Namespace) -> int:
    from graft.backends.inprocess import InProcessBackend
    from graft.eval.evaluate import EvalSettings, evaluate_runs
    from graft.eval.report import write_eval
    from graft.eval.suites import check_suite_golds, drop_long_prompts, load_suites
    from graft.training.policy import PolicySpec
    from graft.verify.pool import VerifierPool

    _check_args(args)
    targets = _targets(args)
    loaded = [load_suites(t[3], task=t[2].task, limit=args.limit) for t in targets]
    results: dict = {"models": {}}
    with VerifierPool(workers=args.workers) as pool:
        for (label, model, cfg, _, default_limit), suites in zip(targets, loaded):
            max_new = args.max_new_tokens or default_limit
            settings = EvalSettings(
                args.k, args.runs, args.temperature, args.top_p, max_new, args.seed
            )
            rollout = dataclasses.replace(
                cfg.rollout, max_new_tokens=max_new, max_prompt_tokens=args.max_prompt_tokens
            )
            suites = check_suite_golds(suites, pool, max_fraction=cfg.verify.max_unparseable_golds)
            spec = PolicySpec(
                model=dataclasses.replace(model, name="policy"),
                rollout=rollout,
                algo=cfg.algo,
                seed=args.seed,
            )
            backend = InProcessBackend([spec])
            try:
                length = backend.policies["policy"].prompt_length
                suites = drop_long_prompts(suites, length, args.max_prompt_tokens)
                print(f"evaluating {label} on {', '.join(s.name for s in suites)}")
                result = evaluate_runs(backend, suites, settings, pool=pool)
            finally:
                backend.close()
            results.setdefault("settings", result["settings"])
            results["models"][label] = {
                **result["models"]["policy"],
                "settings": result["settings"],
            }
    out = Path(args.out) if args.out else (Path(args.run[0]) / "eval" if args.run else Path("eval"))
    table = write_eval(out, results, baseline=args.baseline)
    print(table)
    print(f"wrote {out / 'eval.json'} and {out / 'eval.md'}")
    return 0
