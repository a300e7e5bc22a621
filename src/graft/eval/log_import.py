"""`graft store import`: responses another tool logged, as a graft store that a stored peer
trains against. A log is TRL's (GRPOTrainer's completions parquet), verl's (its rollout data
JSON lines) or a plain one; each row comes to a prompt, a response and optionally the log's own
reward, a gold answer, the step it was sampled at, an id and why it stopped.

Each row's prompt is looked up in the task's problems (train, test and validation splits), which
give its id and gold answer; a prompt the task does not hold needs a gold of its own. Rows are
grouped by step and prompt, every response is re-verified with the task's verifier (the log's own
reward is kept beside, `log_reward`), and the groups' advantages follow from the verdicts as in a
run. With a model (`--model`, the log's source), each response is tokenized and scored by it, so
the paper's weight applies; without one the rows hold no token ids or log-probs, and the stored
peer then asks for a receiver-only weight. A bad row is named by file and row and counted; the
import refuses while there are any, unless told to leave them out (then the store's run metadata
counts them). Nothing is written on refusal.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from graft.config import Config, to_dict
from graft.errors import DataError
from graft.types import Completion, Problem, Rollout

SUFFIXES = (".jsonl", ".parquet")
FORMATS = {
    "plain": ("prompt", "response"),
    "trl": ("prompt", "completion", "advantage"),
    "verl": ("input", "output", "score"),
}
"""Each log format by the columns that name it: a plain log (optionally `reward`, `gold`, `step`,
`id`, `finish_reason`); TRL's GRPOTrainer `log_completions` parquet (`step`, `prompt`,
`completion`, one column per reward function, `advantage`); verl's `trainer.rollout_data_dir`
JSON lines (`input`, `output`, `gts`, `score`, `step`)."""
TRL_NOT_REWARDS = ("step", "prompt", "completion", "advantage", "image")


@dataclass(frozen=True)
class LogRow:
    """One response of a log, where it came from, and what the log said of it."""

    file: str
    row: int
    prompt: str
    response: str
    reward: float | None = None
    gold: str | None = None
    step: int = 0
    id: str | None = None
    stopped: bool = True


@dataclass(frozen=True)
class BadRow:
    file: str
    row: int
    why: str

    def __str__(self) -> str:
        return f"{self.file} row {self.row}: {self.why}"


def log_files(paths: Sequence[str]) -> list[Path]:
    """The files named, or found in the folders named (.jsonl and .parquet), in order."""
    files: list[Path] = []
    for name in paths:
        path = Path(name).expanduser()
        if path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.suffix in SUFFIXES and p.is_file())
            if not found:
                raise DataError(f"{path}: no .jsonl or .parquet log in this folder")
            files += found
        elif path.is_file():
            if path.suffix not in SUFFIXES:
                raise DataError(f"{path}: not a .jsonl or .parquet log")
            files.append(path)
        else:
            raise FileNotFoundError(f"{path}: no such file or folder")
    return files


def _raw_rows(path: Path) -> tuple[list[str], list[tuple[int, Any]]]:
    """(the file's columns, or its first object's keys; each row numbered from 1 as read). A JSON
    line that does not parse is given as the error it raised."""
    if path.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            table = pq.read_table(path)
        except (OSError, pa.ArrowException) as err:
            raise DataError(f"{path}: not a readable parquet file ({err})") from None
        return table.column_names, list(enumerate(table.to_pylist(), start=1))
    rows: list[tuple[int, Any]] = []
    try:
        with path.open(encoding="utf-8") as f:
            for i, line in enumerate(f, start=1):
                if line.strip():
                    try:
                        rows.append((i, json.loads(line)))
                    except ValueError as err:
                        rows.append((i, err))
    except UnicodeDecodeError:
        raise DataError(f"{path}: not UTF-8 text; a .jsonl log is JSON lines") from None
    first = next((raw for _, raw in rows if isinstance(raw, dict)), {})
    return list(first), rows


def log_format(path: Path, columns: Sequence[str]) -> str:
    """The format whose columns `columns` hold (the most specific); one line when none."""
    for name in ("trl", "verl", "plain"):
        if all(c in columns for c in FORMATS[name]):
            return name
    if "prompt" in columns and "response" not in columns and "completion" not in columns:
        return "plain"  # a plain log that lacks its response column: said below, by the column
    known = "; ".join(f"{k}: {', '.join(v)}" for k, v in FORMATS.items())
    shown = ", ".join(columns[:8]) or "none"
    raise DataError(f"{path}: not a log of a known format (columns {shown}; {known})")


def _text(value: Any) -> Any:
    """A TRL prompt or completion: its text, or a conversation's last message's content."""
    if isinstance(value, list) and value and isinstance(value[-1], dict):
        return value[-1].get("content")
    return value


def _plain_fields(fmt: str, raw: dict, columns: Sequence[str]) -> dict[str, Any]:
    """A row of format `fmt` as the plain log's fields."""
    if fmt == "trl":
        scores = [raw[c] for c in columns if c not in TRL_NOT_REWARDS and c in raw]
        numbers = [float(x) for x in scores if isinstance(x, int | float) and math.isfinite(x)]
        return {
            "prompt": _text(raw.get("prompt")),
            "response": _text(raw.get("completion")),
            "reward": sum(numbers) if numbers else None,
            "step": raw.get("step", 0),
        }
    if fmt == "verl":
        gold = raw.get("gts")
        return {
            "prompt": raw.get("input"),
            "response": raw.get("output"),
            "reward": raw.get("score"),
            "step": raw.get("step", 0),
            "gold": gold if isinstance(gold, str) else None,
            "id": raw.get("request_id"),
        }
    return raw


def _log_row(file: str, i: int, raw: Any, fmt: str = "plain", columns: Sequence[str] = ()):
    """The row as a LogRow, or a BadRow saying what is wrong with it."""
    if isinstance(raw, ValueError):
        return BadRow(file, i, f"not JSON ({raw})")
    if not isinstance(raw, dict):
        return BadRow(file, i, "not an object")
    raw = _plain_fields(fmt, raw, columns)
    prompt, response = raw.get("prompt"), raw.get("response")
    if not isinstance(prompt, str) or not prompt.strip():
        return BadRow(file, i, "no prompt")
    if not isinstance(response, str):
        return BadRow(file, i, "no response")
    reward, gold, step = raw.get("reward"), raw.get("gold"), raw.get("step", 0)
    if reward is not None and not (isinstance(reward, int | float) and math.isfinite(reward)):
        return BadRow(file, i, f"reward {reward!r} is not a number")
    if gold is not None and not isinstance(gold, str):
        return BadRow(file, i, f"gold {gold!r} is not a string")
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        return BadRow(file, i, f"step {step!r} is not a step number")
    ident = raw.get("id")
    finish = raw.get("finish_reason", "stop")
    return LogRow(
        file, i, prompt, response, None if reward is None else float(reward), gold, step,
        None if ident is None else str(ident), finish != "length",
    )  # fmt: skip


def read_logs(files: Sequence[Path]) -> tuple[list[LogRow], list[BadRow], dict[str, str]]:
    """Every row of `files`, good or bad, and each file's format. A file of no known format, a
    parquet log without a column its format needs and a duplicated response id are refused in
    one line."""
    rows: list[LogRow] = []
    bad: list[BadRow] = []
    formats: dict[str, str] = {}
    for path in files:
        columns, raw_rows = _raw_rows(path)
        fmt = formats[str(path)] = log_format(path, columns)
        missing = [c for c in FORMATS[fmt] if c not in columns]
        if missing and path.suffix == ".parquet":
            raise DataError(
                f"{path}: no column {missing[0]!r} (a {fmt} log has {', '.join(FORMATS[fmt])}; "
                f"this file has {', '.join(columns)})"
            )
        read = [_log_row(str(path), i, raw, fmt, columns) for i, raw in raw_rows]
        rows += [r for r in read if isinstance(r, LogRow)]
        bad += [r for r in read if isinstance(r, BadRow)]
    seen: dict[str, LogRow] = {}
    for r in rows:
        if r.id is not None:
            if r.id in seen:
                first = seen[r.id]
                raise DataError(
                    f"{r.file} row {r.row}: response id {r.id!r} again (first at {first.file} "
                    f"row {first.row})"
                )
            seen[r.id] = r
    return rows, bad, formats


def problems_for(
    rows: Sequence[LogRow], task_problems: Sequence[Problem]
) -> list[Problem | BadRow]:
    """Each row's problem: the task's of the same prompt, or else the task's whose prompt the
    row's holds inside a template (verl logs the templated prompt; the longest such), else one
    made from the row's own gold; a BadRow where there is none of these."""
    by_prompt = {p.prompt: p for p in task_problems}
    longest_first = sorted(task_problems, key=lambda p: -len(p.prompt))
    inside: dict[str, Problem | None] = {}
    out: list[Problem | BadRow] = []
    for r in rows:
        found = by_prompt.get(r.prompt)
        if found is None:
            if r.prompt not in inside:
                inside[r.prompt] = next((p for p in longest_first if p.prompt in r.prompt), None)
            found = inside[r.prompt]
        if found is not None:
            out.append(found)
        elif r.gold is not None:
            out.append(Problem(r.prompt, r.gold))
        else:
            out.append(BadRow(r.file, r.row, "a prompt the task does not hold, and no gold"))
    return out


def grouped(
    rows: Sequence[LogRow], problems: Sequence[Problem]
) -> dict[int, list[tuple[Problem, list[LogRow]]]]:
    """Step -> the groups of that step: each prompt's rows, in the order the log gives them."""
    steps: dict[int, dict[str, tuple[Problem, list[LogRow]]]] = {}
    for r, p in zip(rows, problems, strict=True):
        steps.setdefault(r.step, {}).setdefault(p.id, (p, []))[1].append(r)
    return {step: list(groups.values()) for step, groups in sorted(steps.items())}


def file_hashes(files: Sequence[Path], formats: Mapping[str, str]) -> list[dict[str, Any]]:
    out = []
    for path in files:
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        out.append({"path": str(path), "format": formats.get(str(path), ""), "sha256": digest,
                    "bytes": path.stat().st_size})  # fmt: skip
    return out


def rollouts_of(
    name: str,
    groups: Sequence[tuple[Problem, list[LogRow]]],
    scored: Mapping[tuple[str, int], Any] | None = None,
) -> list[Rollout]:
    """The log's groups as rollouts of policy `name`: each response with the source model's
    token ids and log-probs where it was scored (`scored[file, row]`), else none."""
    out = []
    for problem, rows in groups:
        completions = []
        for r in rows:
            imp = scored.get((r.file, r.row)) if scored else None
            ids = tuple(imp.response_ids) if imp is not None and not imp.drop else ()
            lps = tuple(imp.logprobs) if ids else ()
            completions.append(Completion(r.response, ids, lps, "stop" if r.stopped else "length"))
        out.append(Rollout(problem, name, (), tuple(completions)))
    return out


def run_meta(
    cfg: Config,
    run_id: str,
    files: Sequence[Path],
    formats: Mapping[str, str],
    rows: Sequence[LogRow],
    **more: Any,
) -> dict[str, Any]:
    """The imported run's metadata: the config it was verified under, the source files with
    their hashes, the steps the log holds and what else the import says (`more`)."""
    from graft.rundir.recorder import run_metadata

    steps = sorted({r.step for r in rows})
    kinds = sorted(set(formats.values()))
    source = {"format": ", ".join(kinds), "files": file_hashes(files, formats), "rows": len(rows),
              "steps": [steps[0], steps[-1]] if steps else []}  # fmt: skip
    return {**run_metadata(cfg, run_id), "import": {**source, **more}}


def import_id(name: str, cfg: Config, files: Sequence[Path]) -> str:
    """`import-<name>-<digest>` of the files' bytes and the task they were verified under."""
    h = hashlib.sha256(json.dumps(to_dict(cfg.task), sort_keys=True).encode())
    for path in files:
        h.update(hashlib.sha256(path.read_bytes()).digest())
    return f"import-{name}-{h.hexdigest()[:12]}"


@dataclass(frozen=True)
class ImportSettings:
    """What an import is told: the source's name in the store, whether bad rows are left out
    (counted) instead of refused."""

    name: str = "imported"
    skip_bad_rows: bool = False


def import_logs(
    paths: Sequence[str],
    cfg: Config,
    out: Path,
    settings: ImportSettings,
    *,
    pool: Any,
    spec: Any = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Import the logs at `paths` into the new store `out`, verified under `cfg`'s task and
    verifier and, with `spec` (a `PolicySpec` of the log's source model), tokenized and scored
    by it. Everything is read and checked before anything is written; the store appears whole.
    Returns a summary."""
    import contextlib
    import os
    import shutil

    from graft.tasks import build_task

    files = log_files(paths)
    rows, bad, formats = read_logs(files)
    task = build_task(cfg.task)
    found = problems_for(rows, [*task.train_problems(), *task.test_problems(),
                                *task.val_problems()])  # fmt: skip
    bad += [p for p in found if isinstance(p, BadRow)]
    keep = [(r, p) for r, p in zip(rows, found, strict=True) if isinstance(p, Problem)]
    if bad and not settings.skip_bad_rows:
        raise DataError(
            f"{len(bad)} bad rows; the first: {bad[0]} (--skip-bad-rows imports the others and "
            "counts these)"
        )
    if not keep:
        raise DataError(f"{', '.join(map(str, files))}: no row to import")
    tmp = out.with_name(f".{out.name}.import-tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        summary = _write(
            files, formats, [r for r, _ in keep], [p for _, p in keep], cfg, tmp, settings,
            pool=pool, spec=spec, bad=len(bad), progress=progress,
        )  # fmt: skip
        os.replace(tmp, out)
    except BaseException:
        with contextlib.suppress(OSError):
            shutil.rmtree(tmp)
        raise
    return {**summary, "store": str(out), "bad_rows": len(bad)}


def _scores(spec: Any, name: str, steps: Mapping[int, list[tuple[Problem, list[LogRow]]]]):
    """(each row's import by the source model, keyed by file and row; what to record of the
    model); nothing without a model."""
    if spec is None:
        return {}, {"model_revision": "", "tokenizer": ""}
    from graft.backends.inprocess import InProcessBackend
    from graft.types import PeerResponse

    backend = InProcessBackend([spec])
    policy = spec.model.name
    try:
        info = backend.describe()[policy]
        scored = {}
        for groups in steps.values():
            flat = [(gi, j, p, r) for gi, (p, rs) in enumerate(groups) for j, r in enumerate(rs)]
            reqs = [PeerResponse(gi, j, p.prompt, r.response, r.stopped, name)
                    for gi, j, p, r in flat]  # fmt: skip
            answers = backend.import_responses({policy: reqs}, too_long="drop")[policy]
            scored.update({(r.file, r.row): imp for (*_, r), imp in zip(flat, answers)})
    finally:
        backend.close()
    return scored, info


def _write(
    files: Sequence[Path],
    formats: Mapping[str, str],
    rows: Sequence[LogRow],
    problems: Sequence[Problem],
    cfg: Config,
    out: Path,
    settings: ImportSettings,
    *,
    pool: Any,
    spec: Any,
    bad: int,
    progress: bool,
) -> dict[str, Any]:
    from tqdm.auto import tqdm

    from graft.groups import make_groups
    from graft.store import Provenance, StoreWriter, group_rows
    from graft.tasks import build_task, run_verifier
    from graft.verify.registry import verifier_version
    from graft.verify.scoring import verify_rollouts

    name = settings.name
    steps = grouped(rows, problems)
    scored, info = _scores(spec, name, steps)
    verifier = run_verifier(cfg.verify, build_task(cfg.task))
    run_id = import_id(name, cfg, files)
    too_long = sum(1 for imp in scored.values() if imp.drop)
    meta = run_meta(cfg, run_id, files, formats, rows, bad_rows=bad, scored_by=spec.model.path
                    if spec else "", too_long_to_score=too_long)  # fmt: skip
    writer = StoreWriter(str(out), run_id=run_id, run_meta=meta, background=False)
    r = cfg.rollout
    prov = Provenance(
        run_id, name, info["model_revision"], info["tokenizer"], verifier,
        verifier_version(verifier), r.temperature, r.top_p, r.top_k, r.max_new_tokens,
    )  # fmt: skip
    correct = changed = 0
    for step, groups in tqdm(steps.items(), desc="import", unit="step", disable=not progress):
        rollouts = rollouts_of(name, groups, scored)
        verdicts = verify_rollouts(pool, verifier, rollouts)
        made = make_groups(rollouts, verdicts, mode=cfg.algo.advantage, eps=cfg.algo.adv_eps)
        logged = [[row.reward for row in rs] for _, rs in groups]
        writer.write(name, step, group_rows(made, step=step, prov=prov, log_rewards=logged))
        for vs, said in zip(verdicts, logged):
            correct += sum(v.correct for v in vs)
            changed += sum(s is not None and s != v.reward for v, s in zip(vs, said))
    writer.close()
    return {"run_id": run_id, "model": name, "rows": len(rows), "steps": len(steps),
            "formats": sorted(set(formats.values())),
            "groups": sum(len(g) for g in steps.values()), "correct": correct,
            "reward_changed": changed, "scored": len(scored) - too_long,
            "too_long_to_score": too_long}  # fmt: skip
