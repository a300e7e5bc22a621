"""Question: how much does writing every rollout to the trajectory store slow a training step?

Two trainers on the same config, one with the store and one without, take steps in alternation
(same prompts, same seeds), so machine noise hits both alike. Reports the ratio of median step
times; the store's own writing time is measured on its background thread. Then the store written
is read back: per shard, the sha256 alone, a verified read (hash + parse, what every reader does)
and a plain Parquet read without verification.

    .venv/bin/python benchmarks/store_overhead.py [--steps 30] [--config configs/grpo_tiny.yaml]
"""

from __future__ import annotations

import hashlib
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pyarrow.parquet as pq
from common import emit, peak_rss_mib, step_arguments, summary

from graft.config import Config, load_config
from graft.peerlog.recorder import Recorder
from graft.store import TrajectoryStore
from graft.trainer import Trainer


def main() -> None:
    args = step_arguments(__doc__, config="configs/grpo_tiny.yaml", steps=30)
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
            writing_cpu = recorded.recorder.writer.cpu_seconds_writing
            reading = read_costs(recorded.recorder.uri)
        finally:
            plain.close()
            recorded.close()
    off, on = summary(times["off"]), summary(times["on"])
    ratio = on["median_s"] / off["median_s"]
    num_steps = args.warmup + args.steps
    rows = [
        ("config", args.config),
        ("steps measured", str(args.steps)),
        ("median step, store off", f"{off['median_s'] * 1000:.1f} ms"),
        ("median step, store on", f"{on['median_s'] * 1000:.1f} ms"),
        ("ratio on / off", f"{ratio:.3f}"),
        ("background writing per step", f"{writing / num_steps * 1000:.1f} ms"),
        ("  of which CPU time", f"{writing_cpu / num_steps * 1000:.1f} ms"),
        ("final flush", f"{final_flush * 1000:.1f} ms"),
        ("shard size (median)", f"{reading['shard_bytes'] / 1024:.1f} KiB"),
        ("sha256 of a shard", f"{reading['hash_s'] * 1000:.3f} ms"),
        ("verified read of a shard", f"{reading['verified_s'] * 1000:.2f} ms"),
        ("plain Parquet read", f"{reading['plain_s'] * 1000:.2f} ms"),
        ("peak RSS", f"{peak_rss_mib():.0f} MiB"),
    ]
    emit(
        "store_overhead",
        rows,
        {
            "ratio": ratio,
            "off": off,
            "on": on,
            "writing_s_per_step": writing / num_steps,
            "writing_cpu_s_per_step": writing_cpu / num_steps,
            "read_back": reading,
            "peak_rss_mib": peak_rss_mib(),
        },
    )


def _best(read: Callable[[], object], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        read()
        best = min(best, time.perf_counter() - start)
    return best


def read_costs(uri: str, repeats: int = 5) -> dict[str, float]:
    """Median seconds per shard (best of `repeats` each) to hash it, to read it verified, and to
    read it with Parquet alone; and the median shard size."""
    store = TrajectoryStore(uri)
    shards = store.shards()
    costs: dict[str, list[float]] = {"hash_s": [], "verified_s": [], "plain_s": []}
    sizes = []
    for shard in shards:
        data = Path(shard.path).read_bytes()
        sizes.append(len(data))
        costs["hash_s"].append(_best(partial(hashlib.sha256, data), repeats))
        costs["verified_s"].append(_best(partial(store.read_shard, shard), repeats))
        costs["plain_s"].append(
            _best(partial(pq.read_table, shard.path, partitioning=None), repeats)
        )
    assert store.validate().ok and not store.unverified
    out = {key: summary(values)["median_s"] for key, values in costs.items()}
    return {**out, "shard_bytes": summary(sizes)["median_s"], "shards": len(shards)}


if __name__ == "__main__":
    main()
