"""Question: do two policies in parallel worker processes beat running them one after the other?

The same two-policy GRAFT config, once on the `processes` backend (one worker per policy, one
core each, in parallel) and once on the `inprocess` backend (both policies in one process, one after
the other, each using both cores). Steps alternate between the two so machine noise hits both.

    .venv/bin/python benchmarks/parallel_policies.py [--steps 20] [--config configs/graft_tiny.yaml]
"""

from __future__ import annotations

import os
import time

from common import emit, peak_rss_mib, process_peak_rss_mib, step_arguments, summary

from graft.config import Config, load_config
from graft.trainer import Trainer


def main() -> None:
    args = step_arguments(__doc__, config="configs/graft_tiny.yaml", steps=20)
    cores = os.cpu_count() or 1
    base = ["eval.every=0", "run.progress=false", "store.enabled=false"]
    parallel_cfg = load_config(
        Config, args.config, [*base, "run.backend=processes", "run.threads=0"]
    )
    serial_cfg = load_config(
        Config, args.config, [*base, "run.backend=inprocess", f"run.threads={cores}"]
    )
    parallel, serial = Trainer(parallel_cfg), Trainer(serial_cfg)
    times: dict[str, list[float]] = {"parallel": [], "serial": []}
    workers = {name: int(info["pid"]) for name, info in parallel.backend.describe().items()}
    try:
        for step in range(args.warmup + args.steps):
            for label, trainer in (("parallel", parallel), ("serial", serial)):
                start = time.perf_counter()
                trainer.step(step)
                if step >= args.warmup:
                    times[label].append(time.perf_counter() - start)
        worker_rss = {name: process_peak_rss_mib(pid) for name, pid in workers.items()}
    finally:
        parallel.close()
        serial.close()
    par, ser = summary(times["parallel"]), summary(times["serial"])
    speedup = ser["median_s"] / par["median_s"]
    rows = [
        ("config", args.config),
        ("cores", str(cores)),
        ("steps measured", str(args.steps)),
        ("median step, one after the other", f"{ser['median_s'] * 1000:.0f} ms"),
        ("median step, parallel workers", f"{par['median_s'] * 1000:.0f} ms"),
        ("speed-up", f"{speedup:.2f}x"),
        ("peak RSS, driver (holds the serial policies)", f"{peak_rss_mib():.0f} MiB"),
        *((f"peak RSS, worker {n}", f"{v:.0f} MiB") for n, v in worker_rss.items()),
    ]
    emit(
        "parallel_policies",
        rows,
        {
            "speedup": speedup,
            "parallel": par,
            "serial": ser,
            "peak_rss_mib": peak_rss_mib(),
            "worker_rss_mib": worker_rss,
        },
    )


if __name__ == "__main__":
    main()
