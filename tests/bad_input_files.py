"""The bad files of tests/test_bad_inputs.py's table, and the snapshot that shows a failing
command changed nothing."""

from __future__ import annotations

import hashlib
from pathlib import Path


def peer_store(path: Path, *, answers: str, verifier: str) -> None:
    """A peer's store of 4 prompts x 2 responses: all right, all wrong, or another task's (LaTeX
    answers, verified with the math verifier)."""
    from graft.store import Provenance, StoreWriter, group_rows
    from graft.training.groups import make_groups
    from graft.types import Completion, Problem, Rollout, Verdict

    rollouts, verdicts = [], []
    for i in range(4):
        if answers in ("wrong", "right"):
            problem = Problem(f"{i}+1=", str(i + 1))
            text = str(i + 1) if answers == "right" else str(i + 50)
        else:
            problem, text = (
                Problem(f"Simplify x^{i} x", f"x^{{{i + 1}}}"),
                f"$\\boxed{{x^{i + 1}}}$",
            )
        comps = tuple(Completion(text, (5, 6), (-0.5, -0.5), "stop") for _ in range(2))
        rollouts.append(Rollout(problem, "peer", (1, 2), comps))
        verdicts.append((Verdict("wrong" if answers == "wrong" else "correct"),) * 2)
    prov = Provenance("r", "peer", "", "", verifier, "", 1.0, 1.0, 0, 8)
    writer = StoreWriter(str(path), run_id="r", run_meta={}, background=False)
    writer.write("peer", 0, group_rows(make_groups(rollouts, verdicts), step=0, prov=prov))
    writer.close()


def damaged_parquet(path: Path) -> None:
    """A snappy-compressed Parquet file whose footer reads but whose data pages do not."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [{"problem": f"what is {i}+{i}? " * 5, "answer": str(2 * i)} for i in range(2000)]
    pq.write_table(pa.Table.from_pylist(rows), path, compression="snappy")
    data = bytearray(path.read_bytes())
    for i in range(100, 600):
        data[i] ^= 0x5A
    path.write_bytes(bytes(data))


def snapshot(*roots: Path) -> dict[str, tuple]:
    """Every file under the roots: size, modification time, and the content hash of small ones."""
    out = {}
    for root in roots:
        for path in sorted(root.rglob("*")):
            if path.is_file():
                stat = path.stat()
                digest = (
                    hashlib.sha256(path.read_bytes()).hexdigest() if stat.st_size < 2**18 else ""
                )
                out[str(path)] = (stat.st_size, stat.st_mtime_ns, digest)
            else:
                out[str(path)] = ("dir",)
    return out
