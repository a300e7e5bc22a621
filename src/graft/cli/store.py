"""`graft store`: inspect, check, export and import a trajectory store."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from graft.cli.common import add_set_argument


def add_parser(sub: argparse._SubParsersAction) -> None:
    store = sub.add_parser("store", help="inspect, check, export and import a trajectory store")
    store_sub = store.add_subparsers(dest="store_command", required=True)
    info = store_sub.add_parser("info", help="rows, models, steps, prompts, reward rate per model")
    info.add_argument("path", help="store path or URI (e.g. RUN_DIR/trajectories)")
    info.add_argument("--json", action="store_true", help="print JSON")
    validate = store_sub.add_parser("validate", help="check every file; exit 1 on any problem")
    validate.add_argument("path")
    export = store_sub.add_parser(
        "export",
        help="write the rows as JSON lines, or as a dataset (parquet + card) to share",
        description="jsonl: one JSON object per row, to a file or standard output. hf: a new "
        "folder --out holding the rows as parquet with a dataset card (README.md: schema, "
        "provenance, verifier versions, models) that datasets.load_dataset(OUT) reads; the "
        "folder is a graft store too, which exchange.stored.path takes as it is.",
    )
    export.add_argument("path")
    export.add_argument("--format", choices=["jsonl", "hf"], default="jsonl")
    export.add_argument(
        "--out", help="jsonl: output file (default: standard output); hf: the new folder"
    )
    export.add_argument("--model", action="append", help="only these models (repeatable)")
    _add_import_parser(store_sub)
    store.set_defaults(handler=run)


def _add_import_parser(store_sub: argparse._SubParsersAction) -> None:
    """`graft store import`: another tool's log as a store."""
    imp = store_sub.add_parser(
        "import",
        help="make a store of another tool's logged responses, verified by a task's verifier",
        description="A log of TRL (GRPOTrainer's log_completions parquet), of verl "
        "(trainer.rollout_data_dir JSON lines) or a plain one (JSON lines or parquet of prompt "
        "and response; optionally reward, gold, step, id, finish_reason), told apart by its "
        "columns; rows grouped by step and prompt, each response re-verified "
        "with the config's task verifier (the log's own reward kept beside as log_reward), "
        "written as a new store that exchange.stored.path takes. A prompt is looked up in the "
        "task's problems; one the task does not hold needs a gold of its own. With --model "
        "(the log's source model), each response is tokenized and scored by it after the "
        "context it was sampled from (a TRL conversation through the model's chat template, or "
        "--chat-template; verl's templated input and TRL's plain prompt as logged; a plain log's "
        "prompt in the config's template), so the paper's weight applies; without, the stored "
        "peer needs exchange.ablation.weight=receiver_relative or none. Reward columns are "
        "chosen, not guessed: a plain log's reward, verl's score, TRL's reward functions "
        "(--reward-columns, or the run's trainer_state.json); every other column is kept beside "
        "(log_columns), never summed. A bad row is named by file and row; the import refuses "
        "while there are any, unless --skip-bad-rows.",
    )
    imp.add_argument(
        "logs", nargs="+", metavar="LOG", help="a .jsonl or .parquet file, or a folder"
    )
    imp.add_argument("--config", required=True, help="the config whose task verifies the rows")
    imp.add_argument("--out", required=True, help="the new store (a folder)")
    imp.add_argument(
        "--model",
        default="",
        metavar="PATH_OR_NAME",
        help="the log's source model (hub name, folder, .gguf or tiny:<preset>) with the "
        "config's first model's other settings: token ids and log-probs for every response",
    )
    imp.add_argument("--name", default="imported", help="the source's model name in the store")
    imp.add_argument(
        "--reward-columns",
        default="",
        metavar="NAME[,NAME]",
        help="TRL: the columns that are rewards (its reward functions' names); default: as the "
        "run's trainer_state.json names them",
    )
    imp.add_argument(
        "--max-completion-length",
        type=int,
        default=0,
        metavar="N",
        help="the source's completion limit in tokens: a response of N tokens was cut (length, "
        "no EOS); default: what the log shows (TRL: its clipped completions' length)",
    )
    imp.add_argument(
        "--chat-template",
        default="",
        metavar="FILE",
        help="the Jinja chat template the source rendered conversations with, where its model "
        "does not carry it",
    )
    imp.add_argument("--skip-bad-rows", action="store_true", help="import the rest, counted")
    imp.add_argument("--workers", type=int, default=2, help="verifier processes (default 2)")
    add_set_argument(imp)


def run(args: argparse.Namespace) -> int:
    import json

    from graft.preflight import replaced_atomically, resolved
    from graft.store import TrajectoryStore

    if args.store_command == "import":
        return _import(args)

    if args.path.startswith("~"):  # a `~user` that does not resolve is named, not a traceback
        args.path = str(resolved(args.path, "store path"))
    # info and validate list every damaged shard (and exit 1); export refuses to skip one
    export = args.store_command == "export"
    if export and args.format == "hf":
        return _export_dataset(args)
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
            f"{len(report.problems)} problem files, {len(report.unverified)} files unverified"
        )
        return 0 if report.ok else 1
    if args.model:  # a model the store does not hold is a mistake, not an empty export
        for name in dict.fromkeys(args.model):
            store.pick_model(name, key="--model")
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


def _import(args: argparse.Namespace) -> int:
    """`graft store import`: every check (the target, the config, the model, each row) before
    anything is written."""
    import dataclasses

    from graft.cli.common import load
    from graft.errors import ConfigError
    from graft.peerlog.log_import import ImportSettings, import_logs
    from graft.preflight import check_writable_dir, resolved
    from graft.verify.pool import VerifierPool

    out = resolved(args.out, "--out")
    check_writable_dir(out, "--out")
    if out.is_dir() and any(out.iterdir()):
        raise ConfigError(f"--out {out}: not empty; name a new folder for the store")
    if args.workers < 1:
        raise ConfigError(f"graft store import --workers: must be at least 1, got {args.workers}")
    if not args.name or "/" in args.name or "=" in args.name:
        raise ConfigError(f"--name {args.name!r}: a model name, without '/' or '='")
    cfg = load(args.config, args.overrides)
    spec = None
    if args.model:
        from graft.models.load import looks_local
        from graft.training.policy import PolicySpec

        if not Path(args.model).expanduser().exists() and looks_local(args.model):
            raise FileNotFoundError(f"--model {args.model}: no such file or directory")
        model = dataclasses.replace(cfg.models[0], name=args.name, path=args.model, tokenizer="")
        spec = PolicySpec(model=model, rollout=cfg.rollout, algo=cfg.algo, seed=cfg.run.seed,
                          threads=cfg.run.threads)  # fmt: skip
    settings = ImportSettings(
        name=args.name,
        skip_bad_rows=args.skip_bad_rows,
        read=_read_settings(args),
        chat_template=_chat_template(args.chat_template),
    )
    if out.is_dir():
        out.rmdir()  # empty: the store takes its place whole
    with VerifierPool(workers=args.workers) as pool:
        done = import_logs(args.logs, cfg, out, settings, pool=pool, spec=spec)
    print(import_summary(done, out, args.model if spec else ""))
    return 0


def _read_settings(args: argparse.Namespace) -> Any:
    from graft.errors import ConfigError
    from graft.peerlog.log_import import ReadSettings

    names = tuple(n.strip() for n in args.reward_columns.split(",") if n.strip())
    if args.reward_columns and len(names) != len(args.reward_columns.split(",")):
        raise ConfigError(f"--reward-columns {args.reward_columns!r}: an empty column name")
    if args.max_completion_length < 0:
        raise ConfigError(
            f"--max-completion-length: a number of tokens, got {args.max_completion_length}"
        )
    return ReadSettings(names, args.max_completion_length)


def _chat_template(path: str) -> str:
    """The text of --chat-template FILE ("" without one)."""
    from graft.errors import DataError

    if not path:
        return ""
    file = Path(path).expanduser()
    if not file.is_file():
        raise FileNotFoundError(f"--chat-template {path}: no such file")
    try:
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise DataError(f"--chat-template {path}: not UTF-8 text (a Jinja template)") from None
    if not text.strip():
        raise DataError(f"--chat-template {path}: empty")
    return text


def import_summary(done: dict[str, Any], out: Path, model: str) -> str:
    """What an import says when it is done: the rows, and per reward column its agreement with
    graft's verdicts (a shaping term is not compared), what else the log kept, what was cut and
    what could not be scored."""
    skipped = f", {done['bad_rows']} bad rows left out" if done["bad_rows"] else ""
    said = []
    for name, seen in done["rewards"].items():
        if seen.get("shaping"):
            said.append(f"{name}: a shaping term, not compared")
        else:
            said.append(f"{name} {seen['agree']}/{seen['rows']} agree")
    rewards = "; ".join(said) if said else "no reward in the log: nothing to compare"
    extras = f"; kept beside (log_columns): {', '.join(done['extras'])}" if done["extras"] else ""
    if model:
        scored = f"; {done['scored']} scored by {model}"
        if done["too_long_to_score"]:
            scored += f", {done['too_long_to_score']} too long to score (left out of exchanges)"
    else:
        scored = (
            "; no token ids or log-probs (train with exchange.ablation.weight=receiver_relative "
            "or none)"
        )
    unread = done["finish_unread"]
    finish = f"{done['length_rows']} cut at the length limit" + (
        f", {unread} whose finish the log does not say taken as stopped "
        "(--max-completion-length, with --model, reads it)"
        if unread
        else ""
    )
    return (
        f"imported {done['rows']} rows ({done['groups']} groups over {done['steps']} steps"
        f"{skipped}) into {out} as model {done['model']}: {done['correct']} verified correct; "
        f"the log's rewards against graft's verdicts: {rewards}{extras}; {finish}{scored}"
    )


def _export_dataset(args: argparse.Namespace) -> int:
    """`--format hf`: the store as a dataset folder, `--out`, new or empty; checked before the
    store is read."""
    from graft.errors import ConfigError
    from graft.preflight import check_writable_dir, resolved
    from graft.store import TrajectoryStore
    from graft.store.dataset import export_dataset

    if not args.out:
        raise ConfigError("--out: --format hf writes a folder; name it with --out DIR")
    out = resolved(args.out, "--out")
    check_writable_dir(out, "--out")
    if out.is_dir() and any(out.iterdir()):
        raise ConfigError(f"--out {out}: not empty; name a new folder for the dataset")
    local = args.path[len("file://") :] if args.path.startswith("file://") else args.path
    if "://" not in local:
        root, target = Path(local).resolve(), out.resolve()
        if target == root or root in target.parents:
            raise ConfigError(f"--out {out}: inside the store {args.path}; write it elsewhere")
    store = TrajectoryStore(args.path, strict=True)
    if args.model:
        for name in dict.fromkeys(args.model):
            store.pick_model(name, key="--model")
    if out.is_dir():
        out.rmdir()  # empty: the export's folder takes its place whole
    done = export_dataset(store, out, models=args.model)
    print(
        f"exported {done.rows} rows ({done.shards} shards; models {', '.join(done.models)}; "
        f"runs {', '.join(done.runs)}) to {done.path}: datasets.load_dataset({str(done.path)!r}) "
        "reads it, and exchange.stored.path takes it"
    )
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
