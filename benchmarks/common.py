"""Shared helpers for the benchmark scripts: timing summaries, peak memory, a JSON result line."""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
from collections.abc import Sequence


def peak_rss_mib() -> float:
    """Peak resident memory of this process (and of its finished children) in MiB."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return max(own, children) / 1024


def process_peak_rss_mib(pid: int) -> float:
    """Peak resident memory (VmHWM) of a live process, in MiB (Linux)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def summary(times: Sequence[float]) -> dict[str, float]:
    ordered = sorted(times)
    return {
        "median_s": statistics.median(ordered),
        "p10_s": ordered[int(0.1 * (len(ordered) - 1))],
        "p90_s": ordered[int(0.9 * (len(ordered) - 1))],
        "n": float(len(ordered)),
    }


def emit(name: str, rows: Sequence[tuple[str, str]], result: dict) -> None:
    """Print a small table, then one JSON line (`BENCH {...}`) for tools to pick up."""
    width = max(len(k) for k, _ in rows)
    print(f"== {name}")
    for key, value in rows:
        print(f"  {key:<{width}}  {value}")
    print("BENCH " + json.dumps({"benchmark": name, **result}, sort_keys=True))
    sys.stdout.flush()


def step_arguments(doc: str, *, config: str, steps: int) -> argparse.Namespace:
    """--config, --steps and --warmup (3): the command line of a benchmark that times steps."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--config", default=config)
    parser.add_argument("--steps", type=int, default=steps)
    parser.add_argument("--warmup", type=int, default=3)
    return parser.parse_args()
