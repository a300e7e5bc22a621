"""Time of the math verifier (`math`, the training verdict) on 10,000 responses, in one process
(no pool).

The responses are built from the fixture's 22 golds in the shapes training sees: a right boxed
answer after some reasoning, a wrong one, no box, two boxes, a box followed by more text, an
answer with a unit. `--compare OLD_SRC` also times the verifier of another checkout's `src`
(e.g. a `git worktree` of the commit before a change) in a subprocess, alternating old and new
three times each, and prints the ratio of the medians.

    .venv/bin/python benchmarks/verify_speed.py --compare /tmp/before/src
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REASONING = "We expand the expression and collect terms, checking each step carefully. " * 6
SHAPES = (
    "{r} Therefore the answer is $\\boxed{{{g}}}$.",
    "{r} So we get \\boxed{{{g}1}}.",
    "{r} The answer is {g}.",
    "{r} \\boxed{{{g}}}, \\boxed{{{g}}}",
    "\\boxed{{{g}}} This follows from the formula above.",
    "{r} \\boxed{{{g} \\text{{ cm}}}}",
)


def pairs(n: int) -> list[tuple[str, str]]:
    golds = [
        json.loads(line)["answer"]
        for line in (ROOT / "src/graft/data/math_fixture.jsonl").read_text().splitlines()
    ]
    out = []
    i = 0
    while len(out) < n:
        gold = golds[i % len(golds)]
        shape = SHAPES[(i // len(golds)) % len(SHAPES)]
        out.append((shape.format(r=REASONING, g=gold), gold))
        i += 1
    return out


def time_once(n: int) -> float:
    from graft.verify.registry import resolve_verifier

    verify_math = resolve_verifier("math")  # the verifier training uses, in either checkout
    work = pairs(n)
    verify_math(*work[0])  # imports outside the timing
    # The pairs repeat (22 golds x 6 shapes): parsed values cached across responses would time
    # the cache, so it is emptied before each response (training repeats less: a gold per group).
    values = sys.modules.get("graft.verify.math.values")
    clear = getattr(getattr(values, "parse_answer", None), "cache_clear", lambda: None)
    start = time.perf_counter()
    for response, gold in work:
        clear()
        verify_math(response, gold)
    return time.perf_counter() - start


def _time_in(src: str, n: int) -> float:
    env = {**os.environ, "PYTHONPATH": src}
    code = f"import sys; sys.path.insert(0, {src!r}); import runpy; "
    code += f"m = runpy.run_path({str(Path(__file__))!r}); print(m['time_once']({n}))"
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    return float(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--compare", metavar="OLD_SRC", default="")
    args = parser.parse_args()
    if not args.compare:
        print(f"{args.n} responses: {time_once(args.n):.1f} s")
        return
    new_src = str(ROOT / "src")
    old, new = [], []
    for _ in range(3):
        old.append(_time_in(args.compare, args.n))
        new.append(_time_in(new_src, args.n))
    ratio = statistics.median(new) / statistics.median(old)
    print(f"{args.n} responses, 3 alternating runs each (median):")
    print(f"  before: {statistics.median(old):.1f} s  ({', '.join(f'{t:.1f}' for t in old)})")
    print(f"  after:  {statistics.median(new):.1f} s  ({', '.join(f'{t:.1f}' for t in new)})")
    print(f"  after / before: {ratio:.3f}")


if __name__ == "__main__":
    main()
