"""Question: what does the exchange cost the driver, beyond the receivers' scoring forward?

Everything the driver computes in one GRAFT exchange between two policies (gate, balancing, the
requests, compatibility scores and weights, replacement groups, receiver batches and every
diagnostic), timed on synthetic verified groups: P prompts x n responses per policy, each policy
failing every other prompt on which the other is mixed. The import step (re-tokenizing and scoring
with the receiver's model, in the worker that holds it) is replaced by one that hands back fixed
records, so the figure is the driver's own arithmetic only.

    .venv/bin/python benchmarks/exchange_driver.py [--prompts 64] [--group 8] [--repeats 50]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

from common import emit, summary

from graft.config import ExchangeConfig
from graft.exchange import OnlinePeers, exchange
from graft.types import Imported

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from exchange_helpers import groups_for


class FixedImports:
    """The import step, with every peer response scored alike (no model runs)."""

    def import_responses(self, requests, *, too_long):
        return {n: [Imported((1,), (5, 6), (-0.1, -0.2)) for _ in rs] for n, rs in requests.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=50)
    args = parser.parse_args()
    rng = random.Random(0)

    def mixed() -> str:
        return "".join(rng.choice("0001") for _ in range(args.group))

    fail = "0" * args.group
    a = groups_for("a", [mixed() if i % 2 else fail for i in range(args.prompts)])
    b = groups_for("b", [fail if i % 2 else mixed() for i in range(args.prompts)])
    groups, backend, cfg = {"a": a, "b": b}, FixedImports(), ExchangeConfig(delta=0.5)
    outcome = exchange(groups, OnlinePeers(), backend, cfg, seed=0)
    times = []
    for _ in range(7):
        t0 = time.perf_counter()
        for _ in range(args.repeats):
            exchange(groups, OnlinePeers(), backend, cfg, seed=0)
        times.append((time.perf_counter() - t0) / args.repeats)
    result = {
        "prompts": args.prompts,
        "group": args.group,
        "responses_sent": sum(d.sent for d in outcome.directions.values()),
        "admitted": sum(d.admitted for d in outcome.directions.values()),
        **summary(times),
    }
    rows = [
        ("prompts x group", f"{args.prompts} x {args.group}, two policies"),
        ("responses sent / admitted", f"{result['responses_sent']} / {result['admitted']}"),
        ("driver time per exchange", f"{1000 * result['median_s']:.2f} ms (median of 7)"),
    ]
    emit("exchange_driver", rows, result)


if __name__ == "__main__":
    main()
