"""The run directory's files other than checkpoints: config.yaml, metrics.jsonl, summary.json,
and the rule that a directory holding a run is never reused implicitly."""

from __future__ import annotations

import errno
import json
import math
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import yaml

from graft.config import Config, to_dict
from graft.errors import DataError
from graft.rundir.progress import warn as _warn

if TYPE_CHECKING:
    from graft.rundir.trackers import Trackers

RUN_FILES = ("config.yaml", "metrics.jsonl", "run.json", "checkpoints", "trajectories")
"""What makes a directory hold a run (any one of them)."""


def holds_run(run_dir: Path) -> bool:
    return any((run_dir / name).exists() for name in RUN_FILES)


def refuse_reuse(run_dir: Path) -> None:
    """Raise when `run_dir` holds a run: a new run never writes over an old one implicitly."""
    if run_dir.exists() and not run_dir.is_dir():
        raise DataError(f"run directory {run_dir}: is a file, not a directory")
    if holds_run(run_dir):
        raise DataError(
            f"run directory {run_dir} already holds a run; continue it with --resume {run_dir}, "
            f"move it aside with --overwrite, or choose another --out"
        )


def move_aside(run_dir: Path) -> Path | None:
    """Rename a directory that holds a run to the first free `RUN_DIR.old-N`; returns the new
    name (None when there was no run to move)."""
    if not holds_run(run_dir):
        return None
    n = 1
    while (aside := run_dir.with_name(f"{run_dir.name}.old-{n}")).exists():
        n += 1
    os.replace(run_dir, aside)
    return aside


class _Runner(Protocol):
    def run(self, run_dir: Path, *, resume: bool) -> Any: ...
    def close(self) -> None: ...


def run_then_close(runner: _Runner, out_dir: str, *, resume: bool, overwrite: bool) -> Any:
    """`runner.run` in `out_dir` (a run already there is moved aside first when `overwrite`,
    once the runner was built, so every check passed), then `runner.close()` whatever happens."""
    try:
        run_dir = Path(out_dir)
        if overwrite and (aside := move_aside(run_dir)) is not None:
            print(f"moved the previous run in {run_dir} to {aside}", file=sys.stderr)
        return runner.run(run_dir, resume=resume)
    finally:
        runner.close()


def same_models(saved: Config, wanted: Config, run_dir: Path) -> None:
    """A resume continues the checkpoint's models: refuse a config whose models differ from the
    ones the run was trained with (before any model is loaded or any file written)."""
    if len(saved.models) != len(wanted.models):
        raise DataError(
            f"models: the run in {run_dir} trains {len(saved.models)} models; a resume cannot "
            f"change that (got {len(wanted.models)})"
        )
    for i, (old, new) in enumerate(zip(saved.models, wanted.models)):
        for key in ("name", "path", "tokenizer"):
            if getattr(old, key) != getattr(new, key):
                raise DataError(
                    f"models.{i}.{key}: the run in {run_dir} was trained with "
                    f"{getattr(old, key)!r}; a resume cannot change it (got {getattr(new, key)!r})"
                )
        for key in ("r", "target_modules"):  # the checkpoint holds a whole model or an adapter
            was, got = getattr(old.lora, key), getattr(new.lora, key)
            if was != got:
                off = " (0: without LoRA)" if key == "r" else ""
                raise DataError(
                    f"models.{i}.lora.{key}: the run in {run_dir} was trained with {was!r}{off}; "
                    f"a resume cannot change it (got {got!r})"
                )


def is_disk_full(err: BaseException) -> bool:
    """An OSError ENOSPC, or torch's zip writer failing mid-file (which it reports without
    errno: `[enforce fail at inline_container.cc] . unexpected pos ...`)."""
    if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    text = str(err)
    return "No space left on device" in text or (
        "inline_container" in text and ("unexpected pos" in text or "file write failed" in text)
    )


def write_json(path: Path, body: Any) -> None:
    """Write JSON atomically (temporary file, then rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(body, indent=2, sort_keys=True))
    os.replace(tmp, path)


def write_config(run_dir: Path, cfg: Config) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    tmp = run_dir / "config.yaml.tmp"
    tmp.write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False))
    os.replace(tmp, run_dir / "config.yaml")


def policy_prefix(policy: str, *, several: bool) -> str:
    """Where a policy's metrics stand in metrics.jsonl: under `m/<policy>/` when several policies
    train, at the top level when one does."""
    return f"m/{policy}/" if several else ""


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


class MetricsLog:
    """Appends one JSON object per step to metrics.jsonl, and hands each step to the run's
    experiment trackers (`run.report_to`)."""

    def __init__(self, run_dir: Path, *, start_step: int, trackers: Trackers | None = None) -> None:
        self.path = run_dir / "metrics.jsonl"
        self._truncate_from(start_step)
        self._file = self.path.open("a")
        self.trackers = trackers

    def _truncate_from(self, step: int) -> None:
        """On resume from a checkpoint taken after `step` steps, drop the records of later steps
        (they will be run again), and a torn final line (a crash mid-write)."""
        if not self.path.exists():
            return
        kept = [
            line
            for line, record in _records(self.path, warn=_warn)
            if record.get("step", 0) <= step
        ]
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text("".join(k + "\n" for k in kept))
        os.replace(tmp, self.path)

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        record = {"step": step, **{k: _clean(v) for k, v in metrics.items()}}
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        if self.trackers is not None:
            self.trackers.log(step, metrics)

    def artifact(self, path: Path, step: int) -> None:
        """A file (a PNG of the run's curves) for the trackers that keep files."""
        if self.trackers is not None:
            self.trackers.artifact(path, step)

    def close(self, ok: bool = True) -> None:
        """`ok`: the run ended normally (trackers mark a run that did not as failed)."""
        self._file.close()
        if self.trackers is not None:
            self.trackers.close(ok=ok)


def write_summary(
    run_dir: Path, metrics: Mapping[str, float], *, best: Mapping[str, Any] | None = None
) -> None:
    """summary.json: the last step's metrics (evaluation included, when it ran), and per policy
    the best-by-validation checkpoint (`best/<policy>/step`, `best/<policy>/value`, and every
    other field of its entry)."""
    body = {k: _clean(v) for k, v in metrics.items()}
    for name, info in (best or {}).items():
        for field, value in info.items():
            body[f"best/{name}/{field}"] = value
    tmp = run_dir / "summary.json.tmp"
    tmp.write_text(json.dumps(body, indent=2, sort_keys=True))
    os.replace(tmp, run_dir / "summary.json")


def _records(
    path: Path, *, warn: Callable[[str], None] = _warn
) -> list[tuple[str, dict[str, Any]]]:
    """(line, record) of a metrics log. A torn final line is dropped with a warning; any other
    unreadable line is an error naming the file and line."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as err:
        raise DataError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") from None
    out = []
    numbered = [(i, line) for i, line in enumerate(lines, start=1) if line.strip()]
    for pos, (line_no, line) in enumerate(numbered):
        try:
            record = json.loads(line)
        except ValueError as err:
            if pos == len(numbered) - 1:
                warn(f"{path}: dropped the torn last line {line_no} (an interrupted write)")
                break
            raise DataError(f"{path}: unreadable JSON on line {line_no}: {err}") from None
        if not isinstance(record, dict):
            raise DataError(f"{path}: line {line_no} is not a JSON object")
        out.append((line, record))
    return out


def check_metrics(run_dir: Path) -> None:
    """Raise DataError when metrics.jsonl has an unreadable line other than a torn last one. Reads
    only: a resume checks the log before it writes anything."""
    if (run_dir / "metrics.jsonl").exists():
        _records(run_dir / "metrics.jsonl", warn=lambda _message: None)


def is_timing(key: str) -> bool:
    """A metric that measures time (`time/..._s`, `tokens_per_s`, the cost's `..._cpu_s` and
    `..._gpu_s`): every one ends in `_s`, and two runs that compute the same numbers differ there
    only."""
    return key.endswith("_s")


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    return [record for _, record in _records(Path(run_dir) / "metrics.jsonl")]
