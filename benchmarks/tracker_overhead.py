"""Question: what does `run.report_to` cost a training step, per tracker?

Takes real steps of a config to get real metrics records and the step time, then hands the same
records to each tracker in its local mode (TensorBoard, W&B offline, MLflow on a SQLite file,
trackio's local store), one tracker at a time, timing the start of its run, each step's log call
(what the training loop waits for) and the finish. Reports each tracker's median log call as a
share of the median step. Needs the `trackers` extra (`make test-trackers` installs it).

    .venv/bin/python benchmarks/tracker_overhead.py [--steps 30] [--config configs/grpo_tiny.yaml]
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from common import emit, step_arguments, summary

from graft.config import Config, load_config, to_dict
from graft.rundir.trackers import TRACKERS, open_trackers
from graft.trainer import Trainer


def main() -> None:
    args = step_arguments(__doc__, config="configs/grpo_tiny.yaml", steps=30)
    cfg = load_config(Config, args.config, ["eval.every=0", "run.progress=false"])
    trainer = Trainer(cfg)
    records, step_times = [], []
    try:
        for step in range(args.warmup + args.steps):
            start = time.perf_counter()
            metrics = trainer.step(step)
            if step >= args.warmup:
                step_times.append(time.perf_counter() - start)
                records.append(metrics)
    finally:
        trainer.close()
    step = summary(step_times)
    rows = [
        ("config", args.config),
        ("steps", str(args.steps)),
        ("metrics per step", str(len(records[0]))),
        ("median step", f"{step['median_s'] * 1000:.1f} ms"),
    ]
    result: dict = {"step": step, "keys": len(records[0]), "trackers": {}}
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.update(
            WANDB_MODE="offline",
            WANDB_SILENT="true",
            MLFLOW_TRACKING_URI=f"sqlite:///{tmp}/mlflow.db",
            TRACKIO_DIR=f"{tmp}/trackio",
        )
        os.chdir(tmp)  # MLflow keeps a SQLite store's artifacts under ./mlruns
        for name in TRACKERS:
            run_dir = Path(tmp) / name
            run_dir.mkdir()
            start = time.perf_counter()
            trackers = open_trackers((name,), run_dir, project="bench", config=to_dict(cfg))
            opened = time.perf_counter() - start
            calls = []
            for i, metrics in enumerate(records, start=1):
                start = time.perf_counter()
                trackers.log(i, metrics)
                calls.append(time.perf_counter() - start)
            start = time.perf_counter()
            trackers.close()
            closed = time.perf_counter() - start
            log = summary(calls)
            share = log["median_s"] / step["median_s"]
            rows += [
                (f"{name}: start", f"{opened * 1000:.0f} ms"),
                (
                    f"{name}: log call (median, p90)",
                    f"{log['median_s'] * 1000:.2f} ms, {log['p90_s'] * 1000:.2f} ms",
                ),
                (f"{name}: share of a step", f"{share:.4f}"),
                (f"{name}: finish", f"{closed * 1000:.0f} ms"),
            ]
            result["trackers"][name] = {
                "start_s": opened,
                "log": log,
                "share_of_step": share,
                "finish_s": closed,
            }
    emit("tracker_overhead", rows, result)


if __name__ == "__main__":
    main()
