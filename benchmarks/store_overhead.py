"""Question: how much does writing every rollout to the trajectory store slow a training step?

Two trainers on the same config, one with the store and one without, take steps in alternation
(same prompts, same seeds), so machine noise hits both alike. Reports the ratio of median step
times; the store's own writing time is measured on its background thread.

    .venv/bin/python benchmarks/store_overhead.py [--steps 30] [--config configs/grpo_tiny.yaml]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from common import emit, peak_rss_mib, summary

from graft.config import Config, load_config
from graft.recorder import Recorder
from graft.trainer import Trainer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/grpo_tiny.yaml")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()
    cfg = load_config(Config, args.config, ["eval.every=0", "run.progress=false"])
    with tempfile.TemporaryDirectory() as tmp:
        plain, recorded = Trainer(cfg), Trainer(cfg)
        recorded.recorder = Recorder(
            cfg, Path(tmp), verifier=recorded.verifier, policies=recorded.backend.describe()
        )
        times = {"off": [], "on": []}
        try:
            for step in range(args.warmup + args.steps):
                for label, trainer in (("off", plain), ("on", recorded)):
                    start = time.perf_counter()
                    trainer.step(step)
                    if step >= args.warmup:
                        times[label].append(time.perf_counter() - start)
            start = time.perf_counter()
            recorded.recorder.flush()
            final_flush = time.perf_counter() - start
            writing = recorded.recorder.seconds_writing
        finally:
            plain.close()
            recorded.close()
    off, on = summary(times["off"]), summary(times["on"])
    ratio = on["median_s"] / off["median_s"]
    rows = [
        ("config", args.config),
        ("steps measured", str(args.steps)),
        ("median step, store off", f"{off['median_s'] * 1000:.1f} ms"),
        ("median step, store on", f"{on['median_s'] * 1000:.1f} ms"),
        ("ratio on / off", f"{ratio:.3f}"),
        ("background writing per step", f"{writing / (args.warmup + args.steps) * 1000:.1f} ms"),
        ("final flush", f"{final_flush * 1000:.1f} ms"),
        ("peak RSS", f"{peak_rss_mib():.0f} MiB"),
    ]
    emit(
        "store_overhead",
        rows,
        {
            "ratio": ratio,
            "off": off,
            "on": on,
            "writing_s_per_step": writing / (args.warmup + args.steps),
            "peak_rss_mib": peak_rss_mib(),
        },
    )


if __name__ == "__main__":
    main()
