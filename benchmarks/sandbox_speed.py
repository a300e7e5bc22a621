"""Programs verified per second through the code sandbox, the warm path (a zygote per verifier
worker, one fork per program) beside the cold one (a fresh `unshare`, interpreter and read-only
root per program: the process model before the warm sandbox, kept behind GRAFT_SANDBOX_COLD=1),
and a bare `python -c` subprocess per program (no isolation at all), in one run on this
machine's cores. With `--step`, also a code training step's time split (configs/grpo_code.yaml,
median over `--steps` steps), cold then warm. Each measurement runs in a process of its own: the
verifier pool's forkserver keeps the environment it started with.

    .venv/bin/python benchmarks/sandbox_speed.py --n 200 [--rounds 10] [--step --steps 8]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

from graft.sandbox.run import COLD_ENV
from graft.verify.code.verifier import CodeTests
from graft.verify.pool import VerifierPool

PROGRAM = "def add(a, b):\n    return a + b\n"
TESTS = CodeTests("call", "add", ((2, 3), (10, -4)), (5, 6)).to_gold()
BARE = PROGRAM + "assert add(2, 3) == 5 and add(10, -4) == 6\n"


def bare(n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        subprocess.run([sys.executable, "-I", "-S", "-c", BARE], check=True)
    return time.perf_counter() - start


def pooled(n: int, workers: int, *, cold: bool) -> float:
    """Seconds to verify n programs through the verifier pool (workers inherit the setting)."""
    items = [("code", f"```python\n{PROGRAM}```", TESTS, "")] * n
    with VerifierPool(workers=workers, timeout_s=30) as pool:
        pool.verify(items[: 2 * workers])  # start-up (and the first sandboxes) outside the timing
        start = time.perf_counter()
        verdicts = pool.verify(items)
        seconds = time.perf_counter() - start
    assert all(v.correct for v in verdicts), {v.category for v in verdicts}
    return seconds


def interleaved(rounds: int, block: int) -> list[float]:
    """Warm over bare seconds per program, in `rounds` alternating blocks of `block` programs
    each: a bare `python -c`, then the same count judged through one kept verifier worker (so
    that the machine's drift over a run falls on both alike)."""
    items = [("code", f"```python\n{PROGRAM}```", TESTS, "")] * block
    ratios = []
    with VerifierPool(workers=1, timeout_s=30) as pool:
        pool.verify(items[:2])
        for _ in range(rounds):
            bare_s = bare(block)
            start = time.perf_counter()
            verdicts = pool.verify(items)
            warm_s = time.perf_counter() - start
            assert all(v.correct for v in verdicts), {v.category for v in verdicts}
            ratios.append(warm_s / bare_s)
    return ratios


def step_split(steps: int, *, cold: bool) -> dict[str, float]:
    """Median seconds of a code GRPO step and of its verify phase (after one warm-up step)."""
    from graft.config import Config, load_config
    from graft.trainer import Trainer

    out = f"runs/bench_sandbox_step_{'cold' if cold else 'warm'}"
    cfg = load_config(
        Config,
        "configs/grpo_code.yaml",
        ["eval.every=0", "run.progress=false", f"run.out_dir={out}"],
    )
    trainer = Trainer(cfg)
    steps_s, verify_s = [], []
    try:
        for step in range(steps + 1):
            start = time.perf_counter()
            m = trainer.step(step)
            if step:
                steps_s.append(time.perf_counter() - start)
                verify_s.append(m["time/verify_s"])
    finally:
        trainer.close()
    return {"step": statistics.median(steps_s), "verify": statistics.median(verify_s)}


def _in_own_process(what: str, cold: bool, workers: int, n: int, steps: int) -> str:
    env = {**os.environ, COLD_ENV: "1" if cold else "0"}
    cmd = [sys.executable, __file__, "--one", what, "--workers", str(workers), "--n", str(n),
           "--steps", str(steps)]  # fmt: skip
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    return done.stdout.strip().splitlines()[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--step", action="store_true", help="also a code step's time split")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument(
        "--rounds",
        type=int,
        default=0,
        help="also a judged program's cost over a bare `python -c`, in this many alternating "
        "blocks of --n / 4 programs each (median and range)",
    )
    parser.add_argument("--one", choices=("pool", "step"), help=argparse.SUPPRESS)
    parser.add_argument("--workers", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args()
    n, cold = args.n, os.environ.get(COLD_ENV) == "1"
    if args.one == "pool":
        print(pooled(n, args.workers, cold=cold))
        return
    if args.one == "step":
        split = step_split(args.steps, cold=cold)
        print(f"{split['step']} {split['verify']}")
        return
    rows = [("bare `python -c`, one after another", bare(n))]
    for workers in (1, 2):
        for kind in ("cold", "warm"):
            seconds = float(_in_own_process("pool", kind == "cold", workers, n, args.steps))
            rows.append(
                (f"{kind} sandbox, {workers} verifier worker{'s' * (workers > 1)}", seconds)
            )
    print(f"{n} programs (two function-call tests each)\n")
    print("| how | seconds | programs / s | ms / program |")
    print("|---|---|---|---|")
    for name, s in rows:
        print(f"| {name} | {s:.2f} | {n / s:.1f} | {1000 * s / n:.1f} |")
    seconds = dict(rows)
    for w in ("1 verifier worker", "2 verifier workers"):
        ratio = seconds[f"cold sandbox, {w}"] / seconds[f"warm sandbox, {w}"]
        print(f"\nwarm / cold programs per second, {w}: {ratio:.1f}x")
    overhead = 1000 * (seconds["warm sandbox, 1 verifier worker"] - seconds[rows[0][0]]) / n
    print(f"warm sandbox overhead per program over a bare subprocess, 1 worker: {overhead:.1f} ms")
    if args.rounds:
        ratios = interleaved(args.rounds, max(1, n // 4))
        print(
            f"\na judged program (warm, 1 verifier worker) over a bare `python -c`, "
            f"{args.rounds} alternating blocks of {max(1, n // 4)}: median "
            f"{statistics.median(ratios):.2f}x (range {min(ratios):.2f}x-{max(ratios):.2f}x)"
        )
    if args.step:
        print("\n| code GRPO step (grpo_code.yaml) | step s (median) | verify s | verify share |")
        print("|---|---|---|---|")
        for kind in ("cold", "warm"):
            step, verify = map(
                float, _in_own_process("step", kind == "cold", 2, n, args.steps).split()
            )
            print(f"| {kind} sandbox | {step:.2f} | {verify:.2f} | {verify / step:.0%} |")


if __name__ == "__main__":
    main()
