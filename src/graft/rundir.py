"""The run directory: resolved config, metrics log, checkpoints.

    RUN_DIR/config.yaml          the resolved config (every field, defaults included)
    RUN_DIR/metrics.jsonl        one JSON object per step: {"step": s, "<metric>": value, ...}
    RUN_DIR/checkpoints/step_NNNNNN/<policy>/   model + tokenizer (save_pretrained), optimizer.pt
        (a LoRA policy: adapter_model.safetensors + adapter_config.json instead of the model)
    RUN_DIR/checkpoints/step_NNNNNN/trainer_state.json   next step, RNG states, versions
    RUN_DIR/summary.json         final metrics of the run
    RUN_DIR/tensorboard/         event files, when tensorboard is installed

A checkpoint is written into a temporary folder and renamed when complete, so a crash never
leaves a checkpoint that resume would read half-written. A resume still checks every file of the
newest checkpoint and falls back to the newest intact one, naming what is damaged.

A directory that holds a run is never reused implicitly: a new run there needs `--overwrite`,
which moves the old run aside (`RUN_DIR.old-N`) rather than deleting it.
"""

from __future__ import annotations

import errno
import json
import math
import os
import random
import shutil
import struct
import time
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from graft.config import Config, to_dict
from graft.errors import DataError

CHECKPOINT_PREFIX = "step_"
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


def checkpoint_dirs(run_dir: Path) -> list[Path]:
    root = run_dir / "checkpoints"
    if not root.is_dir():
        return []
    done = [
        p
        for p in root.iterdir()
        if p.is_dir()
        and p.name.startswith(CHECKPOINT_PREFIX)
        and (p / "trainer_state.json").exists()
    ]
    return sorted(done, key=lambda p: int(p.name[len(CHECKPOINT_PREFIX) :]))


def latest_checkpoint(run_dir: Path) -> Path | None:
    dirs = checkpoint_dirs(run_dir)
    return dirs[-1] if dirs else None


def _safetensors_problem(path: Path) -> str:
    """'' when the header parses and the file is as long as the header says."""
    with path.open("rb") as f:
        raw = f.read(8)
        if len(raw) < 8:
            return "truncated (no header)"
        (size,) = struct.unpack("<Q", raw)
        if size > path.stat().st_size:
            return "truncated (header longer than the file)"
        try:
            header = json.loads(f.read(size))
            tensors = [v for k, v in header.items() if k != "__metadata__"]
            end = max((int(v["data_offsets"][1]) for v in tensors), default=0)
        except (ValueError, KeyError, TypeError, AttributeError, IndexError):
            return "unreadable header"
    if path.stat().st_size < 8 + size + end:
        return f"truncated ({path.stat().st_size} bytes, the header needs {8 + size + end})"
    return ""


def _zip_problem(path: Path) -> str:
    """'' when torch's zip container is complete and every record matches its checksum."""
    try:
        with zipfile.ZipFile(path) as z:
            bad = z.testzip()
    except (zipfile.BadZipFile, OSError, EOFError) as err:
        return f"truncated or not a torch file ({err})"
    return f"record {bad} fails its checksum" if bad else ""


def _json_problem(path: Path) -> str:
    try:
        json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as err:
        return f"unreadable JSON ({err})"
    return ""


CHECKS: dict[str, Callable[[Path], str]] = {
    "model.safetensors": _safetensors_problem,
    "optimizer.pt": _zip_problem,
    "policy_state.json": _json_problem,
}


def _policy_checks(folder: Path) -> dict[str, Callable[[Path], str]]:
    """The files of a policy's checkpoint: a LoRA policy stores its adapter, not the model."""
    if not (folder / "adapter_config.json").is_file():
        return CHECKS
    rest = {k: v for k, v in CHECKS.items() if k != "model.safetensors"}
    return {
        "adapter_model.safetensors": _safetensors_problem,
        "adapter_config.json": _json_problem,
        **rest,
    }


def checkpoint_problems(checkpoint: Path, policies: list[str]) -> list[str]:
    """Every missing or damaged file of a checkpoint, as 'PATH: why' (empty: intact)."""
    out = []
    state = checkpoint / "trainer_state.json"
    if why := _json_problem(state):
        out.append(f"{state}: {why}")
    for name in policies:
        for file, check in _policy_checks(checkpoint / name).items():
            path = checkpoint / name / file
            why = "missing" if not path.is_file() else check(path)
            if why:
                out.append(f"{path}: {why}")
    return out


def intact_checkpoint(
    run_dir: Path, policies: list[str], warn: Callable[[str], None]
) -> tuple[Path, list[Path]]:
    """(the newest checkpoint whose files are all present and readable, the damaged newer ones).
    Each damaged one is reported through `warn` by file name. Raises DataError when none is
    intact."""
    dirs = checkpoint_dirs(run_dir)
    if not dirs:
        raise DataError(f"--resume {run_dir}: no complete checkpoint in {run_dir / 'checkpoints'}")
    damaged: list[Path] = []
    first = ""
    for checkpoint in reversed(dirs):
        problems = checkpoint_problems(checkpoint, policies)
        if not problems:
            if damaged:
                warn(f"resuming from the intact checkpoint {checkpoint.name} instead")
            return checkpoint, damaged
        damaged.append(checkpoint)
        first = first or problems[0]
        warn(f"checkpoint {checkpoint.name} is damaged: {'; '.join(problems)}")
    raise DataError(f"--resume {run_dir}: no intact checkpoint; the newest is damaged: {first}")


def set_aside(checkpoint: Path) -> Path:
    """Rename a damaged checkpoint out of resume's way (`damaged-step_N`), keeping its files."""
    n, target = 0, checkpoint.with_name(f"damaged-{checkpoint.name}")
    while target.exists():
        n += 1
        target = checkpoint.with_name(f"damaged-{checkpoint.name}.{n}")
    os.replace(checkpoint, target)
    return target


def rng_state() -> dict[str, Any]:
    """Global RNG states (JSON-safe). Sampling uses per-step seeded generators; these are saved
    so that anything else drawing from the global generators also resumes exactly."""
    np_state = np.random.get_state()
    return {
        "python": [random.getstate()[0], list(random.getstate()[1]), random.getstate()[2]],
        "numpy": [np_state[0], np_state[1].tolist(), *np_state[2:]],
        "torch": torch.get_rng_state().tolist(),
    }


def set_rng_state(state: Mapping[str, Any]) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(torch.tensor(state["torch"], dtype=torch.uint8))


def begin_checkpoint(run_dir: Path, step: int) -> Path:
    """A fresh temporary folder for the checkpoint taken after `step` steps."""
    tmp = run_dir / "checkpoints" / f".tmp_{CHECKPOINT_PREFIX}{step:06d}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    return tmp


def commit_checkpoint(run_dir: Path, tmp: Path, step: int, *, keep: int, extra: dict) -> Path:
    state = {"next_step": step, "rng": rng_state(), "time": time.time(), **extra}
    (tmp / "trainer_state.json").write_text(json.dumps(state))
    final = run_dir / "checkpoints" / f"{CHECKPOINT_PREFIX}{step:06d}"
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    for old in checkpoint_dirs(run_dir)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def read_trainer_state(checkpoint: Path) -> dict[str, Any]:
    return json.loads((checkpoint / "trainer_state.json").read_text())


def policy_prefix(policy: str, *, several: bool) -> str:
    """Where a policy's metrics stand in metrics.jsonl: under `m/<policy>/` when several policies
    train, at the top level when one does."""
    return f"m/{policy}/" if several else ""


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


class MetricsLog:
    """Appends one JSON object per step to metrics.jsonl (and TensorBoard when available)."""

    def __init__(self, run_dir: Path, *, start_step: int, tensorboard: bool) -> None:
        self.path = run_dir / "metrics.jsonl"
        self._truncate_from(start_step)
        self._file = self.path.open("a")
        self._tb = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self._tb = SummaryWriter(str(run_dir / "tensorboard"))
            except (ImportError, ModuleNotFoundError):
                self._tb = None

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
        if self._tb is not None:
            for key, value in metrics.items():
                if isinstance(value, int | float) and math.isfinite(value):
                    self._tb.add_scalar(key, value, step)

    def close(self) -> None:
        self._file.close()
        if self._tb is not None:
            self._tb.close()


def save_best(run_dir: Path, backend: Any, names: list[str], best: Mapping[str, Any]) -> None:
    """Replace checkpoints/best/<name> for the improved policies, then record best.json."""
    root = run_dir / "checkpoints" / "best"
    tmp = run_dir / "checkpoints" / ".tmp_best"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    backend.save(tmp, names=names)
    root.mkdir(parents=True, exist_ok=True)
    for name in names:
        if (root / name).exists():
            shutil.rmtree(root / name)
        os.replace(tmp / name, root / name)
    shutil.rmtree(tmp, ignore_errors=True)
    (root / "best.json.tmp").write_text(json.dumps(dict(best), indent=2, sort_keys=True))
    os.replace(root / "best.json.tmp", root / "best.json")


def read_best(run_dir: Path) -> dict[str, Any]:
    path = run_dir / "checkpoints" / "best" / "best.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def write_summary(
    run_dir: Path, metrics: Mapping[str, float], *, best: Mapping[str, Any] | None = None
) -> None:
    """summary.json: the last step's metrics (evaluation included, when it ran), and per policy
    the best-by-validation checkpoint (`best/<policy>/step`, `best/<policy>/value`)."""
    body = {k: _clean(v) for k, v in metrics.items()}
    for name, info in (best or {}).items():
        body[f"best/{name}/step"] = info["step"]
        body[f"best/{name}/value"] = info["value"]
        body[f"best/{name}/suite"] = info["suite"]
    tmp = run_dir / "summary.json.tmp"
    tmp.write_text(json.dumps(body, indent=2, sort_keys=True))
    os.replace(tmp, run_dir / "summary.json")


def _warn(message: str) -> None:
    from tqdm.auto import tqdm

    tqdm.write(f"warning: {message}")


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


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    return [record for _, record in _records(Path(run_dir) / "metrics.jsonl")]
