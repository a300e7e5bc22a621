"""What counting a run's cost adds to a step: the two `Backend.usage()` calls a step makes (before
and after it) against the step itself, on the GRAFT tiny pair in worker processes (8 prompts x 8
responses). The meter inside each policy is a few `time.process_time()` calls per phase.

    .venv/bin/python benchmarks/cost_overhead.py
"""

from __future__ import annotations

import statistics
import time

from common import emit

from graft.config import Config, load_config
from graft.trainer import Trainer

CALLS, STEPS = 200, 7


def main() -> None:
    overrides = ["run.progress=false", "eval.every=0", "store.enabled=false"]
    overrides += ["run.out_dir=runs/bench_cost_overhead", "rollout.prompts_per_step=8"]
    cfg = load_config(Config, "configs/graft_tiny.yaml", overrides)
    trainer = Trainer(cfg)
    try:
        trainer.backend.usage()
        start = time.perf_counter()
        for _ in range(CALLS):
            trainer.backend.usage()
        call_s = (time.perf_counter() - start) / CALLS
        steps = []
        for s in range(STEPS):
            start = time.perf_counter()
            trainer.step(s)
            steps.append(time.perf_counter() - start)
    finally:
        trainer.close()
    step_s = statistics.median(steps)
    emit(
        "cost_overhead",
        [
            ("usage() call", f"{1e3 * call_s:.2f} ms"),
            ("step (median)", f"{1e3 * step_s:.0f} ms"),
            ("two calls / step", f"{2 * call_s / step_s:.4f}"),
        ],
        {"usage_call_s": call_s, "step_s": step_s, "share_of_step": 2 * call_s / step_s},
    )


if __name__ == "__main__":
    main()
