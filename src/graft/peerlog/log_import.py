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
`completion`, one column per reward function, the `log_extra` columns, `advantage`); verl's
`trainer.rollout_data_dir` JSON lines (`input`, `output`, `gts`, `score`, `step`)."""
READ = {
    "plain": ("prompt", "response", "reward", "gold", "step", "id", "finish_reason"),
    "trl": ("step", "prompt", "completion", "advantage", "image"),
    "verl": ("input", "output", "gts", "score", "step"),
}
"""The columns graft reads as what they are; every other column of a row is kept beside it in
the store (`log_columns`), never summed."""
Message = tuple[str, str]
"""One turn of a conversation: (role, content)."""


@dataclass(frozen=True)
class LogRow:
    """One response of a log, where it came from, and what the log said of it."""

    file: str
    row: int
    prompt: str
    """The task's text of the prompt (a conversation's last message), by which its problem is
    found."""
    response: str
    reward: float | None = None
    """The log's reward: the sum of its reward columns (None: the log gives none)."""
    gold: str | None = None
    step: int = 0
    id: str | None = None
    stopped: bool | None = True
    """It stopped on the source's EOS; False: cut at the length limit; None: the log does not say
    (TRL's: decided by its token count against the limit)."""
    context: str | tuple[Message, ...] | None = None
    """What the source sampled after, as the log holds it: a conversation (TRL's conversational
    prompts), a rendered prompt (verl's input, TRL's plain prompt), or None (a plain log: the task
    prompt in the config's template)."""
    special: bool = False
    """Tokenize a rendered `context` with the tokenizer's special tokens (TRL's plain prompts)."""
    values: tuple[tuple[str, Any], ...] = ()
    """The log's own columns of the row (its reward columns and the rest), for `log_columns`."""


@dataclass(frozen=True)
class BadRow:
    file: str
    row: int
    why: str

    def __str__(self) -> str:
        return f"{self.file} row {self.row}: {self.why}"


@dataclass(frozen=True)
class LogFile:
    """One log file: its format, its reward columns and, for a TRL run, what its trainer state
    says (the reward functions' names, the completion limit)."""

    path: Path
    format: str
    columns: tuple[str, ...]
    rewards: tuple[str, ...]
    limit: int | None = None
    """The source's completion limit in tokens, where known (--max-completion-length, or a TRL
    run's clipped completions)."""
    stopped_all: bool = False
    """The log shows that no completion was cut (a TRL run that never clipped one)."""


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


def trl_run_state(path: Path) -> dict[str, Any]:
    """What a TRL run says of itself in its trainer state (`trainer_state.json` in its output
    folder, or in its newest `checkpoint-N`; the completions log lies in `completions/` there):
    the reward functions' names in the order it logs them, and its completion limit where a
    completion was clipped (`completions/max_length` of a step with clipped completions), or
    that none ever was. Empty where there is no trainer state."""
    out_dir = path.parent.parent
    found = [out_dir / "trainer_state.json"]
    steps = sorted(out_dir.glob("checkpoint-*/trainer_state.json"),
                   key=lambda p: int(p.parent.name.rpartition("-")[2] or 0)
                   if p.parent.name.rpartition("-")[2].isdigit() else -1)  # fmt: skip
    found += steps[::-1]
    state = next((p for p in found if p.is_file()), None)
    if state is None:
        return {}
    try:
        history = json.loads(state.read_text(encoding="utf-8")).get("log_history", [])
    except (ValueError, OSError, AttributeError) as err:
        raise DataError(f"{state}: not a readable trainer state ({err})") from None
    names: dict[str, None] = {}
    clipped: list[int] = []
    seen_clip = False
    for entry in history if isinstance(history, list) else []:
        for key in entry if isinstance(entry, dict) else {}:
            if key.startswith("rewards/") and key.endswith("/mean") and key.count("/") == 2:
                names.setdefault(key.split("/")[1])
        ratio = entry.get("completions/clipped_ratio") if isinstance(entry, dict) else None
        if isinstance(ratio, int | float):
            seen_clip = True
            if ratio > 0 and isinstance(entry.get("completions/max_length"), int | float):
                clipped.append(int(entry["completions/max_length"]))
    return {
        "state": str(state),
        "rewards": tuple(names),
        "limit": max(clipped) if clipped else None,
        "stopped_all": seen_clip and not clipped,
    }


def _reward_columns(
    fmt: str, path: Path, columns: Sequence[str], given: Sequence[str], state: Mapping[str, Any]
) -> tuple[str, ...]:
    """A file's reward columns: chosen, never guessed (module docstring of `read_logs`)."""
    if fmt == "verl":
        return ("score",)
    if fmt == "plain":
        return ("reward",) if "reward" in columns else ()
    names = tuple(given) or tuple(state.get("rewards", ()))
    if not names:
        others = [c for c in columns if c not in READ["trl"]]
        raise DataError(
            f"{path}: which of its columns ({', '.join(others) or 'none'}) are TRL's rewards is "
            "not known: give --reward-columns (the reward functions' names), or import from the "
            "TRL run's output folder, whose trainer_state.json names them"
        )
    for name in names:
        if name not in columns:
            where = "--reward-columns" if given else state.get("state", "the trainer state")
            raise DataError(f"{path}: no reward column {name!r} ({where} names it)")
    return names


def _text(value: Any) -> Any:
    """A TRL prompt or completion: its text, or a conversation's last message's content."""
    if isinstance(value, list) and value and isinstance(value[-1], dict):
        return value[-1].get("content")
    return value


def _conversation(value: Any) -> tuple[Message, ...] | None:
    """A TRL prompt that is a conversation, as (role, content) turns; None for a plain one."""
    if not (isinstance(value, list) and value and all(isinstance(m, dict) for m in value)):
        return None
    turns = [(m.get("role"), m.get("content")) for m in value]
    if not all(isinstance(r, str) and isinstance(c, str) for r, c in turns):
        return None
    return tuple(turns)  # type: ignore[arg-type]


def _plain_fields(log: LogFile, raw: dict) -> dict[str, Any]:
    """A row of its file's format as the plain log's fields, its reward the sum of its reward
    columns (a TRL reward function that gave a row no reward, NaN, is left out of it)."""
    scores = [raw.get(c) for c in log.rewards]
    if any(not (x is None or isinstance(x, int | float)) for x in scores):
        bad = next(c for c, x in zip(log.rewards, scores) if not isinstance(x, int | float | None))
        return {"error": f"reward column {bad!r} holds {raw.get(bad)!r}, not a number"}
    numbers = [float(x) for x in scores if x is not None and math.isfinite(x)]
    reward = sum(numbers) if numbers else None
    values = tuple((k, v) for k, v in raw.items() if k not in READ[log.format] or k in log.rewards)
    if log.format == "trl":
        return {
            "prompt": _text(raw.get("prompt")),
            "response": _text(raw.get("completion")),
            "reward": reward,
            "step": raw.get("step", 0),
            "context": _conversation(raw.get("prompt")) or raw.get("prompt"),
            "special": _conversation(raw.get("prompt")) is None,
            "stopped": True if log.stopped_all else None,
            "values": values,
        }
    if log.format == "verl":
        gold = raw.get("gts")
        return {
            "prompt": raw.get("input"),
            "response": raw.get("output"),
            "reward": reward,
            "step": raw.get("step", 0),
            "gold": gold if isinstance(gold, str) else None,
            "id": raw.get("request_id"),
            "context": raw.get("input"),
            "values": values,
        }
    return {**raw, "reward": raw.get("reward"), "values": values}


def _log_row(log: LogFile, i: int, raw: Any) -> LogRow | BadRow:
    """The row as a LogRow, or a BadRow saying what is wrong with it."""
    file = str(log.path)
    if isinstance(raw, ValueError):
        return BadRow(file, i, f"not JSON ({raw})")
    if not isinstance(raw, dict):
        return BadRow(file, i, "not an object")
    if log.rewards and not all(c in raw for c in log.rewards):
        missing = next(c for c in log.rewards if c not in raw)
        return BadRow(file, i, f"no {missing!r} (the file's reward column)")
    raw = _plain_fields(log, raw)
    if "error" in raw:
        return BadRow(file, i, raw["error"])
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
    stopped = raw["stopped"] if "stopped" in raw else raw.get("finish_reason", "stop") != "length"
    return LogRow(
        file, i, prompt, response, None if reward is None else float(reward), gold, step,
        None if ident is None else str(ident), stopped, raw.get("context"),
        bool(raw.get("special", False)), raw.get("values", ()),
    )  # fmt: skip


@dataclass(frozen=True)
class ReadSettings:
    """What the command line says of the logs: the TRL reward columns (else the run's trainer
    state names them) and the source's completion limit in tokens (else what the log shows)."""

    reward_columns: tuple[str, ...] = ()
    max_completion_length: int = 0


def read_logs(
    files: Sequence[Path], settings: ReadSettings = ReadSettings()
) -> tuple[list[LogRow], list[BadRow], dict[str, LogFile]]:
    """Every row of `files`, good or bad, and each file as read (`LogFile`). Reward columns are
    chosen, not guessed: a plain log's `reward`, verl's `score`, TRL's reward functions' names
    (`--reward-columns`, or its trainer state); every other column is kept beside, never summed.
    A file of no known format, a parquet log without a column its format needs, a file whose
    reward columns differ from the others' and a duplicated response id are refused in one
    line."""
    rows: list[LogRow] = []
    bad: list[BadRow] = []
    logs: dict[str, LogFile] = {}
    for path in files:
        columns, raw_rows = _raw_rows(path)
        fmt = log_format(path, columns)
        missing = [c for c in FORMATS[fmt] if c not in columns]
        if missing and path.suffix == ".parquet":
            raise DataError(
                f"{path}: no column {missing[0]!r} (a {fmt} log has {', '.join(FORMATS[fmt])}; "
                f"this file has {', '.join(columns)})"
            )
        state = trl_run_state(path) if fmt == "trl" else {}
        rewards = _reward_columns(fmt, path, columns, settings.reward_columns, state)
        limit = settings.max_completion_length or state.get("limit")
        stopped_all = not settings.max_completion_length and bool(state.get("stopped_all"))
        log = LogFile(path, fmt, tuple(columns), rewards, limit, stopped_all)
        logs[str(path)] = log
        read = [_log_row(log, i, raw) for i, raw in raw_rows]
        rows += [r for r in read if isinstance(r, LogRow)]
        bad += [r for r in read if isinstance(r, BadRow)]
    _same_rewards(list(logs.values()))
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
    return rows, bad, logs


def _same_rewards(logs: Sequence[LogFile]) -> None:
    """Every file of a format has the same reward columns, or the import refuses naming the file
    and the column that differs."""
    first: dict[str, LogFile] = {}
    for log in logs:
        other = first.setdefault(log.format, log)
        for name in (*other.rewards, *log.rewards):
            if (name in other.rewards) != (name in log.rewards):
                lacking, having = (log, other) if name in other.rewards else (other, log)
                raise DataError(
                    f"{lacking.path}: no reward column {name!r}, which {having.path} has (every "
                    "file of a log gives the same rewards)"
                )


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


def file_hashes(logs: Mapping[str, LogFile]) -> list[dict[str, Any]]:
    """Each file with its format, content hash, size, reward columns and completion limit."""
    out = []
    for log in logs.values():
        digest = hashlib.sha256(log.path.read_bytes()).hexdigest()
        out.append({"path": str(log.path), "format": log.format, "sha256": digest,
                    "bytes": log.path.stat().st_size, "reward_columns": list(log.rewards),
                    "completion_limit": log.limit})  # fmt: skip
    return out


@dataclass(frozen=True)
class Scored:
    """What the source model made of the log: each row's import (its token ids and log-probs,
    `scored[file, row]`), whether each row stopped, and what to record of the model and of the
    contexts it scored after."""

    imports: Mapping[tuple[str, int], Any]
    stopped: Mapping[tuple[str, int], bool]
    info: Mapping[str, Any]


def rollouts_of(
    name: str, groups: Sequence[tuple[Problem, list[LogRow]]], scored: Scored | None = None
) -> list[Rollout]:
    """The log's groups as rollouts of policy `name`: each response with the source model's
    token ids and log-probs where it was scored, else none; `length` where it was cut."""
    out = []
    for problem, rows in groups:
        completions = []
        for r in rows:
            key = (r.file, r.row)
            imp = scored.imports.get(key) if scored else None
            ids = tuple(imp.response_ids) if imp is not None and not imp.drop else ()
            lps = tuple(imp.logprobs) if ids else ()
            stopped = scored.stopped.get(key, r.stopped) if scored else r.stopped
            finish = "length" if stopped is False else "stop"
            completions.append(Completion(r.response, ids, lps, finish))
        out.append(Rollout(problem, name, (), tuple(completions)))
    return out


def run_meta(
    cfg: Config,
    run_id: str,
    logs: Mapping[str, LogFile],
    rows: Sequence[LogRow],
    **more: Any,
) -> dict[str, Any]:
    """The imported run's metadata: the config it was verified under, the source files with
    their hashes and reward columns, the steps the log holds and what else the import says."""
    from graft.peerlog.recorder import run_metadata

    steps = sorted({r.step for r in rows})
    kinds = sorted({log.format for log in logs.values()})
    source = {"format": ", ".join(kinds), "files": file_hashes(logs), "rows": len(rows),
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
    (counted) instead of refused, how to read the logs (`ReadSettings`), and the chat template
    the source rendered conversations with when its model does not carry it ("": the model's
    own)."""

    name: str = "imported"
    skip_bad_rows: bool = False
    read: ReadSettings = ReadSettings()
    chat_template: str = ""


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
    by it after the context it sampled from. Everything is read and checked before anything is
    written; the store appears whole. Returns a summary."""
    import contextlib
    import os
    import shutil

    from graft.tasks import build_task

    files = log_files(paths)
    rows, bad, logs = read_logs(files, settings.read)
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
    steps = grouped([r for r, _ in keep], [p for _, p in keep])
    scored = score_log(spec, settings, steps, logs)  # refuses a context it cannot render
    tmp = out.with_name(f".{out.name}.import-tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        summary = _write(
            files, logs, steps, cfg, tmp, settings, pool=pool, spec=spec, scored=scored,
            bad=len(bad), progress=progress,
        )  # fmt: skip
        os.replace(tmp, out)
    except BaseException:
        with contextlib.suppress(OSError):
            shutil.rmtree(tmp)
        raise
    return {**summary, "store": str(out), "bad_rows": len(bad)}


def _scoring_spec(spec: Any, logs: Mapping[str, LogFile]) -> Any:
    """The source's spec, its response limit raised to the log's completion limit (a row cut
    there is as long as the limit)."""
    import dataclasses

    limits = [log.limit for log in logs.values() if log.limit]
    longest = max([spec.rollout.max_new_tokens, *limits])
    rollout = dataclasses.replace(spec.rollout, max_new_tokens=longest)
    return dataclasses.replace(spec, rollout=rollout)


def context_ids(tokenizer: Any, row: LogRow, template: str) -> tuple[int, ...] | None:
    """The tokens the source sampled after, from what the log holds (`LogRow.context`): a
    conversation through the chat template (`template`, else the tokenizer's own), as TRL
    renders it (the generation prompt added, no special tokens beyond the template's); a
    rendered prompt as it is; None for a plain log (the task prompt in the config's template)."""
    if row.context is None:
        return None
    if isinstance(row.context, str):
        return tuple(tokenizer.encode(row.context, add_special_tokens=row.special))
    if not (template or getattr(tokenizer, "chat_template", None)):
        raise DataError(
            f"{row.file} row {row.row}: the prompt is a conversation and the source model has no "
            "chat template: give --chat-template FILE (the template it sampled with)"
        )
    messages = [{"role": role, "content": content} for role, content in row.context]
    rendered = tokenizer.apply_chat_template(
        messages, chat_template=template or None, add_generation_prompt=True, tokenize=True,
        return_dict=True,
    )  # fmt: skip
    return tuple(int(t) for t in rendered["input_ids"])


def _stopped(tokenizer: Any, row: LogRow, log: LogFile) -> bool | None:
    """Whether the row stopped: as the log says, else by its token count against the log's
    completion limit (cut there: `length`); None where neither tells."""
    if row.stopped is not None:
        return row.stopped
    if log.limit is None:
        return None
    return len(tokenizer.encode(row.response, add_special_tokens=False)) < log.limit


def score_log(
    spec: Any,
    settings: ImportSettings,
    steps: Mapping[int, list[tuple[Problem, list[LogRow]]]],
    logs: Mapping[str, LogFile],
) -> Scored:
    """Each row tokenized and scored by the source model after its own context (`context_ids`),
    and where the log does not say whether it stopped, that read off its token count; nothing
    without a model (every row then taken as the log says, or as stopped)."""
    from graft.training.policy import Policy
    from graft.types import PeerResponse

    rows = [r for groups in steps.values() for _, rs in groups for r in rs]
    if spec is None:
        unknown = sum(r.stopped is None for r in rows)
        info = {"model_revision": "", "tokenizer": "", "finish_unread": unknown}
        return Scored({}, {}, info)
    policy = Policy(_scoring_spec(spec, logs))
    try:
        tok = policy.tokenizer
        template = settings.chat_template or getattr(tok, "chat_template", None) or ""
        stopped = {(r.file, r.row): _stopped(tok, r, logs[r.file]) for r in rows}
        imports = {}
        for groups in steps.values():
            flat = [(gi, j, p, r) for gi, (p, rs) in enumerate(groups) for j, r in enumerate(rs)]
            reqs = [
                PeerResponse(gi, j, p.prompt, r.response, stopped[r.file, r.row] is not False,
                             settings.name, prompt_ids=context_ids(tok, r, settings.chat_template))
                for gi, j, p, r in flat
            ]  # fmt: skip
            answers = policy.import_responses(reqs, too_long="drop")
            imports.update({(r.file, r.row): imp for (*_, r), imp in zip(flat, answers)})
        conversations = any(isinstance(r.context, tuple) for r in rows)
        info = {
            **policy.describe(),
            "chat_template_sha256": hashlib.sha256(template.encode()).hexdigest()
            if conversations else "",
            "chat_template_from": ("--chat-template" if settings.chat_template else "the model")
            if conversations else "",
            "finish_unread": sum(v is None for v in stopped.values()),
        }  # fmt: skip
    finally:
        policy.close()
    return Scored(imports, stopped, info)


def agreement(
    rows: Sequence[LogRow], verdicts: Sequence[Any], logs: Mapping[str, LogFile]
) -> dict[str, dict[str, Any]]:
    """Per reward column, against graft's verdicts: a 0/1 column's agreement (rows, agree); any
    other column is a shaping term, not compared."""
    values: dict[str, list[tuple[float, float]]] = {}
    for r, v in zip(rows, verdicts, strict=True):
        own = dict(r.values)
        for name in logs[r.file].rewards:
            x = own.get(name)
            if isinstance(x, int | float) and math.isfinite(x):
                values.setdefault(name, []).append((float(x), v.reward))
    out: dict[str, dict[str, Any]] = {}
    for name, pairs in values.items():
        if all(x in (0.0, 1.0) for x, _ in pairs):
            out[name] = {"rows": len(pairs), "agree": sum(x == y for x, y in pairs)}
        else:
            out[name] = {"rows": len(pairs), "shaping": True}
    return out


def _json_value(value: Any) -> Any:
    """A log's value as JSON holds it (what JSON has no form for, as its text)."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, list | tuple):
        return [_json_value(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _json_value(v) for k, v in value.items()}
    return str(value)


def log_columns(row: LogRow) -> str | None:
    """The row's own columns as a JSON object (the store's `log_columns`); None: it has none."""
    if not row.values:
        return None
    return json.dumps({k: _json_value(v) for k, v in row.values}, sort_keys=True)


def _write(
    files: Sequence[Path],
    logs: Mapping[str, LogFile],
    steps: Mapping[int, list[tuple[Problem, list[LogRow]]]],
    cfg: Config,
    out: Path,
    settings: ImportSettings,
    *,
    pool: Any,
    spec: Any,
    scored: Scored,
    bad: int,
    progress: bool,
) -> dict[str, Any]:
    from tqdm.auto import tqdm

    from graft.groups import Advantage
    from graft.peerlog.writer import LogWriter, provenance, verified_groups
    from graft.tasks import build_task, run_verifier

    name = settings.name
    rows = [r for groups in steps.values() for _, rs in groups for r in rs]
    verifier = run_verifier(cfg.verify, build_task(cfg.task))
    run_id = import_id(name, cfg, files)
    too_long = sum(1 for imp in scored.imports.values() if imp.drop)
    info = scored.info
    meta = run_meta(
        cfg, run_id, logs, rows, bad_rows=bad, scored_by=spec.model.path if spec else "",
        too_long_to_score=too_long, chat_template_sha256=info.get("chat_template_sha256", ""),
        chat_template_from=info.get("chat_template_from", ""),
        finish_unread=info.get("finish_unread", 0),
    )  # fmt: skip
    limits = [log.limit for log in logs.values() if log.limit]
    prov = provenance(run_id, name, info, verifier, cfg.rollout,
                      max_new_tokens=max(limits) if limits else 0)  # fmt: skip
    writer = LogWriter(str(out), run_id=run_id, run_meta=meta, provenance={name: prov})
    correct, cut, all_verdicts = 0, 0, []
    for step, groups in tqdm(steps.items(), desc="import", unit="step", disable=not progress):
        rollouts = rollouts_of(name, groups, scored)
        cut += sum(c.finish_reason == "length" for ro in rollouts for c in ro.completions_G)
        made, verdicts = verified_groups(pool, verifier, rollouts, Advantage.of(cfg.algo))
        logged = [[row.reward for row in rs] for _, rs in groups]
        own = [[log_columns(row) for row in rs] for _, rs in groups]
        writer.write(name, step, made, log_rewards=logged, log_columns=own)
        correct += sum(v.correct for vs in verdicts for v in vs)
        all_verdicts += [v for vs in verdicts for v in vs]
    writer.close()
    return {"run_id": run_id, "model": name, "rows": len(rows), "steps": len(steps),
            "formats": sorted({log.format for log in logs.values()}),
            "groups": sum(len(g) for g in steps.values()), "correct": correct,
            "rewards": agreement(rows, all_verdicts, logs),
            "extras": sorted({k for row in rows for k, _ in row.values} -
                             {c for log in logs.values() for c in log.rewards}),
            "scored": len(scored.imports) - too_long, "too_long_to_score": too_long,
            "length_rows": cut, "finish_unread": info.get("finish_unread", 0)}  # fmt: skip
