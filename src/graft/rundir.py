"""The run directory: resolved config, metrics log, checkpoints.

    RUN_DIR/config.yaml          the resolved config (every field, defaults included)
    RUN_DIR/metrics.jsonl        one JSON object per step: {"step": s, "<metric>": value, ...}
    RUN_DIR/checkpoints/step_NNNNNN/<policy>/   model + tokenizer (save_pretrained), optimizer.pt
    RUN_DIR/checkpoints/step_NNNNNN/trainer_state.json   next step, RNG states, versions
    RUN_DIR/summary.json         final metrics of the run
    RUN_DIR/tensorboard/         event files, when tensorboard is installed

A checkpoint is written into a temporary folder and renamed when complete, so a crash never
leaves a checkpoint that resume would read half-written.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from graft.config import Config, to_dict

CHECKPOINT_PREFIX = "step_"


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
        (they will be run again)."""
        if not self.path.exists():
            return
        kept = []
        for line in self.path.read_text().splitlines():
            if line.strip() and json.loads(line).get("step", 0) <= step:
                kept.append(line)
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


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    path = Path(run_dir) / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
