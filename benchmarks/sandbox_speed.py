"""Programs verified per second through the sandbox, against a bare `python -c` subprocess per
program (no isolation at all), on this machine's cores: one after another, and through the
verifier pool's workers. The difference per program is the sandbox's own overhead (namespaces,
the read-only root, cgroups, the harness).

    .venv/bin/python benchmarks/sandbox_speed.py --n 100
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

from graft.tasks.code import CodeTests
from graft.tasks.pool import VerifierPool

PROGRAM = "def add(a, b):\n    return a + b\n"
TESTS = CodeTests("call", "add", ((2, 3), (10, -4)), (5, 6)).to_gold()
BARE = PROGRAM + "assert add(2, 3) == 5 and add(10, -4) == 6\n"


def bare(n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        subprocess.run([sys.executable, "-I", "-S", "-c", BARE], check=True)
    return time.perf_counter() - start


def pooled(n: int, workers: int) -> float:
    items = [("code", f"```python\n{PROGRAM}```", TESTS, "")] * n
    with VerifierPool(workers=workers, timeout_s=30) as pool:
        pool.verify(items[:workers])  # start-up outside the timing
        start = time.perf_counter()
        verdicts = pool.verify(items)
        seconds = time.perf_counter() - start
    assert all(v.correct for v in verdicts), {v.category for v in verdicts}
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=100)
    n = parser.parse_args().n
    rows = [
        ("bare `python -c`, one after another", bare(n)),
        ("sandbox, 1 verifier worker", pooled(n, 1)),
        ("sandbox, 2 verifier workers", pooled(n, 2)),
    ]
    print(f"{n} programs (two function-call tests each)\n")
    print("| how | seconds | programs / s | ms / program |")
    print("|---|---|---|---|")
    for name, s in rows:
        print(f"| {name} | {s:.1f} | {n / s:.1f} | {1000 * s / n:.0f} |")
    overhead = 1000 * (rows[1][1] - rows[0][1]) / n
    print(f"\nsandbox overhead per program, 1 worker: {overhead:.0f} ms")


if __name__ == "__main__":
    main()
