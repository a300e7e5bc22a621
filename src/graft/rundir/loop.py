"""The one run loop of `graft train` and `graft sft`: the run directory started (or resumed), the
trackers and the metrics log opened, then for each step the step itself, the evaluation when due
(one rule: `evaluation_due`), the metrics line, the checkpoint when due; Ctrl-C ends it with one
line that says where the run stands and how to resume it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from graft.config import Config, to_dict
from graft.errors import RunStopped
from graft.rundir.book import RunBook, where_it_stands
from graft.rundir.files import MetricsLog, read_metrics
from graft.rundir.progress import progress_bar
from graft.rundir.trackers import open_trackers
from graft.training.cost import CostLog, last_cumulative


@dataclass(frozen=True)
class RunResult:
    """What `graft train` and `graft sft` return: where the run is and how it ended."""

    run_dir: Path
    steps: int
    final_metrics: dict[str, float]
    finished_before: bool = False
    """A resume of a run that had already reached run.steps: nothing was run or written."""


def check_finite(cfg: Config, step: int, stats: Mapping[str, Mapping[str, float]]) -> None:
    """algo.nonfinite=stop: a policy whose update met a NaN or infinite loss or gradient norm
    (and took no optimizer step on it) ends the run here, before this step is logged or
    checkpointed; `skip` leaves the count in optim/nonfinite_steps. `stats`: each policy's
    update metrics."""
    if cfg.algo.nonfinite != "stop":
        return
    for name, policy_stats in stats.items():
        if policy_stats.get("optim/nonfinite_steps", 0.0) > 0:
            raise RunStopped(
                f"policy {name!r}: non-finite loss or gradient norm at step {step + 1}; "
                f"stopped before its optimizer step, {where_it_stands(Path(cfg.run.out_dir))}. "
                "Lower the learning rate, or skip such steps with --set algo.nonfinite=skip"
            )


def evaluation_due(step: int, *, every: int, steps: int, at_ends: bool = False) -> bool:
    """When a run evaluates: at step 0, every `every` steps and after the last step; `every` 0
    turns it off, except in a run that validates `at_ends` (graft sft, which picks its best
    checkpoint on its held-out set): that one still evaluates at step 0 and after the last."""
    if step in (0, steps):
        return every > 0 or at_ends
    return every > 0 and step % every == 0


class StepJob(Protocol):
    """What the loop runs: a training run's steps and evaluations."""

    def step(self, step: int) -> dict[str, float]:
        """Step `step` (0-based); its metrics."""

    def evaluate(self, step: int) -> dict[str, float]:
        """The evaluation after `step` steps; its metrics."""

    def logged(self, step: int, metrics: Mapping[str, float]) -> dict[str, str]:
        """Called once step `step`'s line is written; the progress bar's postfix."""

    def flush(self) -> None:
        """Make what the run wrote so far durable (before a checkpoint, and at the end)."""

    def finish(self, log: MetricsLog) -> None:
        """After the last step, before the log closes."""


@dataclass(frozen=True)
class Loop:
    """How one command runs the loop: its name (for the resume hint), the suite that picks the
    best checkpoint ("" for none), which of tied checkpoints wins, and `at_ends`
    (`evaluation_due`)."""

    command: str
    best_by: str = ""
    ties: Literal["earliest", "latest"] = "earliest"
    at_ends: bool = False


def open_log(
    cfg: Config, run_dir: Path, prefix: Mapping[str, str], *, start: int
) -> tuple[MetricsLog, CostLog]:
    """The metrics log (handing each line to the trackers `run.report_to` names) and the cost
    counts, continued from the last line of a resumed run."""
    trackers = open_trackers(
        cfg.run.report_to, run_dir, project=cfg.run.project, config=to_dict(cfg), start_step=start
    )
    log = MetricsLog(run_dir, start_step=start, trackers=trackers)
    return log, CostLog(prefix, previous=last_cumulative(read_metrics(run_dir)))


def run_steps(
    job: StepJob, book: RunBook, log: MetricsLog, cfg: Config, *, start: int, loop: Loop
) -> dict[str, float]:
    """Steps `start` to `run.steps` of `job` (module docstring); the last line's metrics."""
    run_dir, steps = book.run_dir, cfg.run.steps
    due = dict(every=cfg.eval.every, steps=steps, at_ends=loop.at_ends)
    last: dict[str, float] = {}
    step, ok = start, False
    try:
        if start == 0 and evaluation_due(0, **due):
            last = job.evaluate(0)
            log.log(0, last)
            book.track_best(0, last, suite=loop.best_by, ties=loop.ties)
        bar = progress_bar(run_dir, start=start, steps=steps, enabled=cfg.run.progress)
        for step in bar:
            metrics = job.step(step)
            done = step + 1
            if evaluation_due(done, **due):
                metrics.update(job.evaluate(done))
                book.track_best(done, metrics, suite=loop.best_by, ties=loop.ties)
            log.log(done, metrics)
            bar.set_postfix(job.logged(done, metrics))
            last = metrics
            book.save_if_due(done, flush=job.flush)
        job.flush()
        job.finish(log)
        ok = True
    except KeyboardInterrupt:  # Ctrl-C: one line that says where the run stands
        raise KeyboardInterrupt(
            f"interrupted at step {step + 1} of {steps}; {where_it_stands(run_dir)}; "
            f"resume with graft {loop.command} --resume {run_dir}"
        ) from None
    finally:
        log.close(ok=ok)
    return last


def begin(book: RunBook, *, resume: bool, workers: Mapping[str, Any]) -> int | None:
    """Start (or resume) the run directory: the step to start from, or None when a resumed run
    had already finished (nothing is written then)."""
    start, damaged = book.resume_point() if resume else (0, [])
    if resume and start == book.cfg.run.steps:
        return None
    book.start(resume=resume, damaged=damaged, workers=workers)
    return start
