"""`graft` command line: train, config, tiny, demo, eval, plot, compare."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
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


def _parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="graft",
        description="RLVR for language models: GRPO and GRAFT (peer-trajectory exchange).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)

    train = sub.add_parser(
        "train",
        help="train one or more policies",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    train.add_argument("config", nargs="?", help="YAML config file (see `graft config --docs`)")
    train.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config value, e.g. --set models.0.optim.lr=1e-5",
    )
    train.add_argument("--out", help="run directory (overrides run.out_dir)")
    train.add_argument(
        "--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR from its newest checkpoint"
    )
    train.add_argument(
        "--overwrite",
        action="store_true",
        help="start afresh in a run directory that holds a run: the old run is moved aside to "
        "RUN_DIR.old-N (never deleted)",
    )

    config = sub.add_parser("config", help="print the resolved config, or document every key")
    config.add_argument("config", nargs="?", help="YAML config file")
    config.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    config.add_argument("--docs", action="store_true", help="list every key with type and default")

    tiny = sub.add_parser("tiny", help="tiny CPU models built locally")
    tiny_sub = tiny.add_subparsers(dest="tiny_command", required=True)
    build = tiny_sub.add_parser("build", help="build (or reuse from the cache) a tiny preset")
    build.add_argument("preset", help="preset name (see `graft tiny list`)")
    tiny_sub.add_parser("list", help="list the tiny presets")

    store = sub.add_parser("store", help="inspect, check and export a trajectory store")
    store_sub = store.add_subparsers(dest="store_command", required=True)
    info = store_sub.add_parser("info", help="rows, models, steps, prompts, reward rate per model")
    info.add_argument("path", help="store path or URI (e.g. RUN_DIR/trajectories)")
    info.add_argument("--json", action="store_true", help="print JSON")
    validate = store_sub.add_parser("validate", help="check every file; exit 1 on any problem")
    validate.add_argument("path")
    export = store_sub.add_parser("export", help="write the rows as JSON lines")
    export.add_argument("path")
    export.add_argument("--format", choices=["jsonl"], default="jsonl")
    export.add_argument("--out", help="output file (default: standard output)")
    export.add_argument("--model", action="append", help="only these models (repeatable)")

    from graft.cli_compare import add_parser as add_compare
    from graft.cli_eval import add_parsers
    from graft.export import add_parser as add_export

    add_parsers(sub)
    add_export(sub)
    add_compare(sub)

    demo = sub.add_parser(
        "demo",
        help="where GRAFT helps and where its gate starves: two tiny models, two regimes, on CPU",
        description="Builds (or reuses) two tiny models that differ in architecture and tokenizer, "
        "pre-trained on complementary skills in two regimes (latent: the weak skill starts low; "
        "cold: it starts near 1-2%); runs GRPO, GRAFT with the paper's weight, GRAFT with the "
        "receiver-relative score and stored-peer GRAFT with the same seeds and per-model budget; "
        "evaluates held-out accuracy per skill during training; reports each method minus GRPO "
        "with 95% intervals over seeds and the exchange regime; writes results.json, results.md "
        "and curves.png. Finished runs are reused, so an interrupted demo or study resumes.",
    )
    demo.add_argument("--out", default="runs/demo", help="output directory (default: runs/demo)")
    demo.add_argument(
        "--seeds", type=int, default=0, help="seeds 0..N-1 (default: 1; --study: 5; --quick: 2)"
    )
    mode = demo.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="a few-minute pipeline check")
    mode.add_argument(
        "--study",
        action="store_true",
        help="the pre-registered study (docs/evidence.md): 5 seeds, both regimes, the paper's "
        "ablations; hours on 2 cores, resumable",
    )
    demo.add_argument(
        "--reference", action="store_true", help="also run GRPO with 4x the group size"
    )
    return parser


def _load(config_path: str | None, overrides: Sequence[str], out: str | None = None):
    """The config of `config_path` with `overrides`; `out` (a path, taken as it is, not parsed
    as YAML) replaces run.out_dir."""
    from graft.config import Config, load_config

    cfg = load_config(Config, config_path, overrides)
    return cfg if out is None else _with_out_dir(cfg, out)


def _with_out_dir(cfg, out: str):
    import dataclasses

    if cfg.run.out_dir == out:
        return cfg
    return dataclasses.replace(cfg, run=dataclasses.replace(cfg.run, out_dir=out))


def cmd_train(args: argparse.Namespace) -> int:
    from graft.configlib import ConfigError
    from graft.preflight import check_writable_dir, resolved
    from graft.rundir import refuse_reuse, same_models
    from graft.trainer import train

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
        cfg = _load(str(run_dir / "config.yaml"), args.overrides, str(run_dir))
        same_models(_load(str(run_dir / "config.yaml"), ()), cfg, run_dir)
        check_writable_dir(run_dir, "--resume")
    else:
        if args.out is not None and not args.out.strip():
            raise ConfigError("--out: empty; name the run directory")
        cfg = _load(args.config, args.overrides, args.out)
        key = "--out" if args.out is not None else "run.out_dir"
        run_dir = resolved(cfg.run.out_dir, key)
        cfg = _with_out_dir(cfg, str(run_dir))  # `~` expanded
        if not args.overwrite:
            refuse_reuse(run_dir)
        check_writable_dir(run_dir, key)
    result = train(cfg, resume=resume, overwrite=args.overwrite)
    if result.finished_before:
        print(
            f"run {run_dir} already finished at step {result.steps}; nothing to do "
            f"(to train on, raise run.steps: --set run.steps=N)"
        )
        return 0
    _print_summary(result.run_dir, result.final_metrics)
    return 0


def _print_summary(run_dir: Path, metrics: dict[str, float]) -> None:
    keys = [k for k in sorted(metrics) if k.endswith(("reward/mean", "avg@1")) or "/avg@" in k]
    print(f"run directory: {run_dir}")
    for key in keys:
        print(f"  {key:48s} {metrics[key]:.4f}")


def cmd_config(args: argparse.Namespace) -> int:
    import yaml

    from graft.config import Config, to_dict
    from graft.configlib import describe

    if args.docs:
        for key, tp, default, doc in describe(Config):
            print(f"{key}  ({tp}, default {default})" if default else f"{key}  ({tp})")
            if doc:
                print(f"    {doc}")
        return 0
    cfg = _load(args.config, args.overrides)
    print(yaml.safe_dump(to_dict(cfg), sort_keys=False), end="")
    return 0


def cmd_tiny(args: argparse.Namespace) -> int:
    from graft.configlib import ConfigError
    from graft.models.tiny import TINY_PRESETS, build_tiny

    if args.tiny_command == "list":
        for name, spec in TINY_PRESETS.items():
            print(
                f"{name:20s} {spec.arch:6s} {spec.tokenizer:5s} skills={','.join(spec.task.skills)}"
            )
        return 0
    if args.preset not in TINY_PRESETS:
        raise ConfigError(f"unknown tiny preset {args.preset!r}; known: {', '.join(TINY_PRESETS)}")
    print(build_tiny(args.preset, progress=True))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """GRPO vs GRAFT variants on two tiny heterogeneous models, in two regimes."""
    from graft.configlib import ConfigError
    from graft.demo import DemoSettings
    from graft.demo_report import run_demo

    if args.seeds < 0:
        raise ConfigError(f"--seeds must be at least 1, got {args.seeds}")
    settings = DemoSettings.make(
        seeds=args.seeds, quick=args.quick, study=args.study, reference=args.reference
    )
    out = Path(args.out)
    run_demo(out, settings)
    print()
    print((out / "results.md").read_text())
    print(f"files: {out / 'results.json'}, {out / 'results.md'}, {out / 'curves.png'}")
    return 0


def cmd_store(args: argparse.Namespace) -> int:
    import json

    from graft.preflight import replaced_atomically, resolved
    from graft.store import TrajectoryStore

    if args.path.startswith("~"):  # a `~user` that does not resolve is named, not a traceback
        args.path = str(resolved(args.path, "store path"))
    # info and validate list every damaged shard (and exit 1); export refuses to skip one
    export = args.store_command == "export"
    target = _export_target(args.path, args.out) if export else None  # before reading the store
    store = TrajectoryStore(args.path, strict=export)
    if args.store_command == "info":
        info = store.info()
        if args.json:  # the same exit status as the table: 1 when anything is damaged
            print(json.dumps(info, indent=2))
            return 1 if info["problems"] else 0
        print(
            f"store {info['uri']}: {info['rows']} rows, {info['prompts']} prompts, "
            f"schema versions {info['schema_versions']}"
        )
        print(f"  {'model':16s} {'rows':>8s} {'prompts':>8s} {'steps':>11s} {'reward':>7s}  runs")
        for name, m in info["models"].items():
            steps = f"{m['steps'][0]}-{m['steps'][1]}"
            print(
                f"  {name:16s} {m['rows']:8d} {m['prompts']:8d} {steps:>11s} "
                f"{m['reward_rate']:7.3f}  {', '.join(m['runs'])}"
            )
        for path, why in info["problems"]:
            print(f"  problem: {path}: {why}")
        if info["unverified"]:
            print(
                f"  unverified: {len(info['unverified'])} shards have no checksum (written before "
                f"graft recorded checksums); their rows are read but cannot be proven intact"
            )
        if info["problems"]:
            print(
                f"NOT OK: {len(info['problems'])} damaged or foreign files left out of the counts "
                f"(see `graft store validate {args.path}`)"
            )
        return 1 if info["problems"] else 0
    if args.store_command == "validate":
        report = store.validate()
        for path, why in report.problems:
            print(f"problem: {path}: {why}")
        for path in report.incomplete:
            print(f"ignored: {path}: an interrupted write (never read)")
        for path in report.unverified:
            print(f"unverified: {path}: no checksum (written before graft recorded checksums)")
        status = "NOT OK" if not report.ok else "unverified" if report.unverified else "ok"
        print(
            f"{status}: {report.shards} readable shards, {report.rows} rows, "
            f"{len(report.problems)} problem files, {len(report.unverified)} shards unverified"
        )
        return 0 if report.ok else 1
    table = store.scan(models=args.model)  # read whole before any output: all rows or none
    if store.unverified:
        print(
            f"warning: {len(store.unverified)} shards have no checksum (unverified)",
            file=sys.stderr,
        )
    if target is None:
        _write_rows(table, sys.stdout)
        return 0
    with replaced_atomically(target) as tmp, tmp.open("w", encoding="utf-8") as out:
        _write_rows(table, out)
    return 0


def _export_target(store_path: str, out: str | None) -> Path | None:
    """The file `graft store export --out` writes (None: standard output), checked before the
    store is read: a writable file outside the store, never one of the store's own files."""
    from graft.preflight import check_output_file, resolved

    if out is None:
        return None
    target = resolved(out, "--out")
    local = store_path[len("file://") :] if store_path.startswith("file://") else store_path
    root = Path(local) if "://" not in local else None
    check_output_file(target, "--out", not_inside=root)
    return target


def _write_rows(table, out) -> None:
    import json

    for batch in table.to_batches(max_chunksize=1024):
        for row in batch.to_pylist():
            out.write(json.dumps(row, ensure_ascii=False) + "\n")


COMMANDS = {
    "train": cmd_train,
    "config": cmd_config,
    "tiny": cmd_tiny,
    "store": cmd_store,
    "demo": cmd_demo,
    "eval": lambda args: _eval_cli().cmd_eval(args),
    "plot": lambda args: _eval_cli().cmd_plot(args),
    "export-merged": lambda args: _export_cli(args),
    "compare": lambda args: _compare_cli(args),
}


def _compare_cli(args: argparse.Namespace) -> int:
    from graft.cli_compare import cmd_compare

    return cmd_compare(args)


def _export_cli(args: argparse.Namespace) -> int:
    from graft.export import cmd_export_merged

    return cmd_export_merged(args)


def _eval_cli():
    from graft import cli_eval

    return cli_eval


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from graft.errors import RunStopped, user_errors

    try:
        return COMMANDS[args.command](args)
    except user_errors() as err:
        print(f"graft: error: {' '.join(str(err).split())}", file=sys.stderr)  # one line
        return 2
    except KeyboardInterrupt as err:  # Ctrl-C: the trainer says where it stopped
        print(f"graft: {' '.join(str(err).split()) or 'interrupted'}", file=sys.stderr)
        return 130
    except OSError as err:
        return _os_error(err)
    except RunStopped as err:
        print(f"graft: error: {' '.join(str(err).split())}", file=sys.stderr)
        return 1


def _os_error(err: OSError) -> int:
    """A full disk or a place we may not write to: one line naming the path; else re-raised."""
    import errno

    from graft.rundir import is_disk_full

    where = err.filename or " ".join(str(err).split())
    if is_disk_full(err):
        print(f"graft: error: no space left on device writing {where}", file=sys.stderr)
        return 2
    if err.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        why = "a read-only file system" if err.errno == errno.EROFS else "permission denied"
        print(f"graft: error: cannot write {where}: {why}", file=sys.stderr)
        return 2
    raise err


if __name__ == "__main__":
    sys.exit(main())
