"""Math problems read from data files, judged by the strict `math` verifier.

Sources (`task.math.train` / `task.math.test`):
- `*.jsonl`: one JSON object per line (blank lines are skipped);
- `*.parquet`: read with pyarrow;
- anything else: a Hugging Face dataset name, loaded with `datasets.load_dataset(name, subset,
  split=..., revision=...)` (needs the `datasets` extra, `pip install -e '.[datasets]'` in a
  clone, and a network or the local cache; the tests serve look-alike local files in its
  place). A failure to load is one line that names the dataset, split and revision and the way
  out (the cache, a local file).

Required columns: `problem_column` (text) and `answer_column` (LaTeX or plain text, or a number);
an optional `skill` column tags problems for per-skill metrics. The task prompt is the problem text
(stripped) followed by `suffix`. A gold answer containing `\\boxed{...}` (a MATH-style solution) is
reduced to the content of its last box, so a `solution` column can serve as the answer column.
`limit` > 0 keeps the first `limit` rows of each source. Row numbers in error messages are 1-based;
for JSONL they are line numbers.

`FIXTURE_PATH` is a small MATH-style set shipped with the package, for tests and offline demos.
"""

from __future__ import annotations

import gzip
import json
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from graft.config import MathDataConfig
from graft.config.lib import expand_user
from graft.errors import DataError
from graft.extras import install_hint
from graft.tasks.splits import SplitTask
from graft.types import Problem
from graft.verify.math.answer import last_boxed

FIXTURE_PATH = Path(__file__).resolve().parents[1] / "data" / "math_fixture.jsonl"
_FILE_SUFFIXES = (".jsonl", ".parquet")
_UNSUPPORTED_SUFFIXES = (".json", ".csv", ".tsv", ".txt", ".arrow", ".gz", ".zip")

Row = tuple[int, dict[str, Any]]


def _read_jsonl(path: Path, limit: int) -> Iterator[Row]:
    """The rows of a .jsonl file (gzip-compressed when its name ends in .gz)."""
    with gzip.open(path, "rb") if path.name.lower().endswith(".gz") else path.open("rb") as f:
        count = 0
        for line_no, raw in enumerate(f, start=1):
            if limit and count >= limit:
                return
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise DataError(
                    f"line {line_no} of {path} is not UTF-8 text ({exc.reason} at byte {exc.start})"
                ) from None
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(
                    f"unreadable JSON on line {line_no} of {path}: {exc.msg} (column {exc.colno})"
                ) from None
            if not isinstance(row, dict):
                raise DataError(
                    f"line {line_no} of {path} is a JSON {type(row).__name__}, expected an object"
                )
            count += 1
            yield line_no, row


def _require_columns(columns: Iterable[str], wanted: tuple[str, ...], where: str) -> None:
    present = list(columns)
    for column in wanted:
        if column not in present:
            raise DataError(
                f"missing column {column!r} in {where}; the columns are {present} "
                "(set task.math.problem_column / task.math.answer_column)"
            )


def _read_parquet(path: Path, limit: int, wanted: tuple[str, ...]) -> Iterator[Row]:
    import pyarrow.parquet as pq

    try:
        names = pq.read_schema(path).names
    except Exception as exc:
        raise DataError(f"unreadable Parquet file {path}: {exc}") from None
    _require_columns(names, wanted, str(path))
    columns = [*wanted, "skill"] if "skill" in names else list(wanted)
    try:  # a damaged data page (e.g. corrupt compressed data) shows only when it is read
        table = pq.read_table(path, columns=columns)
        if limit:
            table = table.slice(0, limit)
        rows = table.to_pylist()
    except Exception as exc:
        raise DataError(f"unreadable Parquet file {path}: {' '.join(str(exc).split())}") from None
    yield from enumerate(rows, start=1)


def read_hub(name: str, split: str, cfg: Any, key: str, columns: tuple[str, ...]) -> Iterator[Row]:
    """(row number, row) of a Hugging Face dataset split at `cfg.subset` / `cfg.revision`, the
    first `cfg.limit` rows; DataError names the dataset, split and revision, and the ways out."""
    try:
        import datasets
    except ImportError:
        raise DataError(
            f"{key}={name!r} is not a .jsonl or .parquet file, so it is read as a Hugging Face "
            f"dataset, which needs the `datasets` package: {install_hint('datasets')}"
        ) from None
    revision = cfg.revision or None
    try:
        ds = datasets.load_dataset(name, cfg.subset or None, split=split, revision=revision)
    except Exception as exc:  # offline, unreachable, unknown name / split / revision, ...
        cause = " ".join(str(exc).split())[:200] or type(exc).__name__
        at = f" at revision {cfg.revision}" if cfg.revision else ""
        raise DataError(
            f"{key}: cannot load Hugging Face dataset {name!r} split {split!r}{at}: {cause}. "
            "Without a network, use a copy in the local cache (HF_DATASETS_OFFLINE=1) or "
            "download it elsewhere and pass a local .jsonl/.parquet file"
        ) from None
    _require_columns(ds.column_names, columns, f"dataset {name!r} split {split!r}")
    if cfg.limit:
        ds = ds.select(range(min(cfg.limit, len(ds))))
    yield from enumerate(ds, start=1)


def _rows(source: str, split: str, cfg: MathDataConfig, key: str) -> tuple[Iterator[Row], str]:
    """Rows of a source and the name to use for it in messages."""
    path = Path(expand_user(source, key))
    suffix = path.suffix.lower()
    if suffix in _FILE_SUFFIXES or suffix in _UNSUPPORTED_SUFFIXES or path.is_dir():
        if path.is_dir():
            raise DataError(f"{key}: {source} is a directory; name a .jsonl or .parquet file")
        if not path.is_file():
            raise FileNotFoundError(
                f"{key}: data file not found: {source} (resolved: {path.resolve()})"
            )
        if suffix == ".jsonl":
            return _read_jsonl(path, cfg.limit), str(path)
        if suffix == ".parquet":
            wanted = (cfg.problem_column, cfg.answer_column)
            return _read_parquet(path, cfg.limit, wanted), str(path)
        raise DataError(f"{key}: unsupported data file {source}: use .jsonl or .parquet")
    columns = (cfg.problem_column, cfg.answer_column)
    return read_hub(source, split, cfg, key, columns), f"dataset {source!r} split {split!r}"


def _text(row: dict[str, Any], column: str, what: str, where: str) -> str:
    if column not in row:
        raise DataError(
            f"missing column {column!r} in {where}; the columns there are {sorted(row)} "
            "(set task.math.problem_column / task.math.answer_column)"
        )
    value = row[column]
    if isinstance(value, bool) or not isinstance(value, str | int | float | type(None)):
        raise DataError(f"{what} in {where} is a {type(value).__name__}, expected text")
    text = "" if value is None else str(value).strip()
    if not text:
        raise DataError(f"empty or null {what} (column {column!r}) in {where}")
    return text


def load_problems(source: str, split: str, cfg: MathDataConfig, *, key: str) -> tuple[Problem, ...]:
    """Problems of one source; `key` names the config field in messages (task.math.train)."""
    if not source:
        raise DataError(f"{key}: set a .jsonl/.parquet file or a Hugging Face dataset name")
    rows, name = _rows(source, split, cfg, key)
    problems = []
    answers: dict[str, tuple[int, str]] = {}  # problem text -> (first row, its answer)
    conflicting: set[str] = set()
    for n, row in rows:
        where = f"row {n} of {name}"
        text = _text(row, cfg.problem_column, "problem", where)
        gold = _text(row, cfg.answer_column, "answer", where)
        if "\\boxed" in gold or "\\fbox" in gold:
            boxed = last_boxed(gold)
            if not boxed:
                raise DataError(f"answer in {where} has an unclosed or empty \\boxed{{}}")
            gold = boxed
        first, first_gold = answers.setdefault(text, (n, gold))
        if first_gold != gold:
            if cfg.conflicts == "refuse":
                raise DataError(
                    f"{key}: rows {first} and {n} of {name} give one problem two answers "
                    f"({first_gold!r} and {gold!r}); no reward can be right for both: fix the "
                    f"data, or leave out every such problem with task.math.conflicts=drop"
                )
            conflicting.add(text)
        skill = row.get("skill")
        problem = Problem(text + cfg.suffix, gold, skill="" if skill is None else str(skill))
        problems.append((text, problem))
    if conflicting:
        print(
            f"warning: {key}: left out {len(conflicting)} problems that {name} gives two or more "
            "answers (task.math.conflicts=drop)",
            file=sys.stderr,
        )
    kept = tuple(p for text, p in problems if text not in conflicting)
    if not kept:
        raise DataError(f"{key}: {name} has no rows" + (" left" if problems else ""))
    return kept


class MathTask(SplitTask):
    """Math problems from JSONL / Parquet / Hugging Face data; see the module docstring."""

    name = "math"
    verifier = "math"

    def __init__(self, cfg: MathDataConfig) -> None:
        self.cfg = cfg
        self._train = load_problems(cfg.train, cfg.train_split, cfg, key="task.math.train")
        self._test = (
            load_problems(cfg.test, cfg.test_split, cfg, key="task.math.test") if cfg.test else ()
        )
        self._val = (
            load_problems(cfg.val, cfg.val_split, cfg, key="task.math.val") if cfg.val else ()
        )
