"""The run directory as a training run keeps it, step by step: what is written when the run starts,
checkpoints (the trajectory store flushed first), the best checkpoint per policy, the checks and
the loading of a resume, and the one line that says where a stopped run stands.

The trainer calls this and nothing else of the run directory's layout; the backend (any object
with the `Backend` methods `save` and `load`) writes and reads the policies' own files.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

from graft.config import Config, ConfigError
from graft.errors import DataError
from graft.preflight import check_run_json
from graft.rundir.checkpoints import (
    CHECKPOINT_PREFIX,
    begin_checkpoint,
    checkpoint_dirs,
    commit_checkpoint,
    intact_checkpoint,
    latest_checkpoint,
    read_best,
    read_trainer_state,
    save_best,
    set_aside,
    set_rng_state,
)
from graft.rundir.files import check_metrics, is_disk_full, write_config, write_json


class DiskFullError(DataError):
    """The disk filled up while writing; the message says so and names the path."""


def where_it_stands(run_dir: Path) -> str:
    """Where a stopped run stands, for its one-line message."""
    last = latest_checkpoint(run_dir)
    if last is None:
        return "no checkpoint was written yet (a resume starts from step 0)"
    return f"the last checkpoint (step {int(last.name[len(CHECKPOINT_PREFIX) :])}) is intact"


class RunBook:
    """One run's directory: `resume_point` checks and loads (writing nothing), `start` writes the
    run's files once every check passed, `save` and `track_best` write checkpoints."""

    def __init__(
        self,
        cfg: Config,
        run_dir: Path,
        backend: Any,
        *,
        prefix: Mapping[str, str],
        warn: Callable[[str], None],
    ) -> None:
        self.cfg, self.run_dir, self.backend = cfg, run_dir, backend
        self.names = list(prefix)
        self.prefix = dict(prefix)
        self.warn = warn
        self.best: dict[str, Any] = {}

    # ------------------------------------------------------------------ resume
    def resume_point(self) -> tuple[int, list[Path]]:
        """Every check of a resume, made before anything is written: run.json and metrics.jsonl
        readable, the newest intact checkpoint loaded, run.steps not below it. Returns its next
        step and the damaged newer checkpoints (set aside by `start`)."""
        run_dir = self.run_dir
        if self.cfg.store.enabled:
            check_run_json(run_dir)
        check_metrics(run_dir)
        start, damaged = self._restore()
        if start > self.cfg.run.steps:
            raise ConfigError(
                f"run.steps: the run in {run_dir} already reached step {start}; a resume can only "
                f"extend it (got run.steps={self.cfg.run.steps})"
            )
        return start, damaged

    def _restore(self) -> tuple[int, list[Path]]:
        """Load the newest intact checkpoint: (its next step, the damaged newer ones); (0, [])
        when the run has none yet. A damaged checkpoint is named and skipped; one that does not
        fit the models is an error."""
        run_dir = self.run_dir
        if not checkpoint_dirs(run_dir):
            return 0, []
        checkpoint, damaged = intact_checkpoint(run_dir, self.names, self.warn)
        state = read_trainer_state(checkpoint)
        try:
            self.backend.load(checkpoint)
        except Exception as err:
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise ConfigError(
                f"--resume {run_dir}: checkpoint {checkpoint.name} does not fit the configured "
                f"models: {first}"
            ) from None
        set_rng_state(state["rng"])
        return int(state["next_step"]), damaged

    # ------------------------------------------------------------------ writing
    def start(self, *, resume: bool, damaged: list[Path], workers: Mapping[str, Any]) -> None:
        """Every check passed: from here on the run directory is written."""
        for old in damaged:  # out of resume's way, and out of the count of kept checkpoints
            self.warn(f"moved the damaged checkpoint {old.name} to {set_aside(old).name}")
        write_config(self.run_dir, self.cfg)
        self.best = read_best(self.run_dir) if resume else {}
        write_json(self.run_dir / "workers.json", dict(workers))

    def save_if_due(self, done: int, *, flush: Callable[[], None] = lambda: None) -> None:
        """Save after the last step and every `run.save_every` steps (0: the last only)."""
        every = self.cfg.run.save_every
        if done == self.cfg.run.steps or (every > 0 and done % every == 0):
            self.save(done, flush=flush)

    def save(self, next_step: int, *, flush: Callable[[], None] = lambda: None) -> None:
        """A checkpoint of every policy; `flush` first writes out the trajectory store, so a
        checkpoint implies the store holds every earlier step."""
        flush()
        tmp = begin_checkpoint(self.run_dir, next_step)
        try:
            self.backend.save(tmp)
            commit_checkpoint(
                self.run_dir,
                tmp,
                next_step,
                keep=self.cfg.run.keep_checkpoints,
                extra={"policies": self.names},
            )
        except Exception as err:
            if not is_disk_full(err):
                raise
            shutil.rmtree(tmp, ignore_errors=True)  # the earlier checkpoints stay intact
            raise DiskFullError(
                f"no space left on device while writing checkpoint {tmp}; free space and "
                f"continue with --resume {self.run_dir}"
            ) from None

    def track_best(
        self,
        step: int,
        results: Mapping[str, float],
        *,
        suite: str,
        ties: Literal["earliest", "latest"] = "earliest",
    ) -> None:
        """Keep, per policy, the checkpoint with the best validation avg@k (checkpoints/best); on
        a tie the earliest of them, or with `ties="latest"` the latest."""
        if not suite:
            return
        key = f"eval/{suite}/avg@{self.cfg.eval.samples}"
        improved = []
        for name in self.names:
            value = results.get(self.prefix[name] + key)
            held = self.best.get(name, {}).get("value")
            held = -1.0 if held is None else held
            if value is not None and (value > held or (ties == "latest" and value == held)):
                self.best[name] = {"step": step, "value": value, "suite": suite}
                improved.append(name)
        if improved:
            save_best(self.run_dir, self.backend, improved, self.best)

    def keep_as_best(self, step: int, *, why: str) -> None:
        """The current weights as checkpoints/best, for a run with nothing to validate on
        (`why` says so in best.json and summary.json)."""
        self.best = {name: {"step": step, "value": None, "suite": why} for name in self.names}
        save_best(self.run_dir, self.backend, self.names, self.best)

    @contextlib.contextmanager
    def writing_store(self, uri: str) -> Iterator[None]:
        """A full disk under the trajectory store ends the run in one line, before a checkpoint
        could claim rows the store does not hold (the rows of earlier steps stay intact)."""
        try:
            yield
        except (OSError, RuntimeError) as err:
            if not (is_disk_full(err) or (err.__cause__ and is_disk_full(err.__cause__))):
                raise
            raise DiskFullError(
                f"no space left on device while writing the trajectory store {uri}; "
                f"{where_it_stands(self.run_dir)}, with the store rows up to it; free space and "
                f"continue with --resume {self.run_dir}"
            ) from None
