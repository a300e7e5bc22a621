"""The bad files of tests/test_bad_inputs.py's table, and the snapshot that shows a failing
command changed nothing."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from graft.store import StoreWriter


def peer_store(path: Path, *, answers: str, verifier: str) -> None:
    """A peer's store of 4 prompts x 2 responses: all right, all wrong, or another task's (LaTeX
    answers, verified with the math verifier)."""
    from graft.groups import make_groups
    from graft.store import Provenance, StoreWriter, group_rows
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


def make_bad_files(files: Path, run: Path) -> None:
    """The folder of bad inputs the table names, some of them damaged copies of `run`."""
    files.mkdir()
    (files / "bad.yaml").write_text("rollout:\n  gruop_size: 4\n")
    (files / "broken.yaml").write_text("run: [1, 2\n")
    (files / "list.yaml").write_text("- 1\n- 2\n")
    (files / "latin1.jsonl").write_bytes(
        b'{"problem": "1+1", "answer": "2"}\n{"problem": "caf\xe9", "answer": "3"}\n'
    )
    (files / "badjson.jsonl").write_text('{"problem": "1+1", "answer": "2"}\n{"problem": \n')
    (files / "array.jsonl").write_text("[1, 2]\n")
    (files / "nocolumn.jsonl").write_text('{"question": "1+1", "answer": "2"}\n')
    (files / "garbage.parquet").write_bytes(b"not parquet")
    (files / "notamodel").mkdir()
    (files / "notamodel" / "readme.txt").write_text("hello")
    (files / "afile").write_text("a file, not a directory")
    (files / "binary.yaml").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe")
    (files / "dir.jsonl").mkdir()
    (files / "dir.jsonl" / "part-0.jsonl").write_text('{"problem": "1+1", "answer": "2"}\n')
    damaged_parquet(files / "damaged.parquet")
    peer_store(files / "wrong_store", answers="wrong", verifier="final_number")
    peer_store(files / "math_store", answers="latex", verifier="math")
    peer_store(files / "good_store", answers="right", verifier="final_number")
    empty = StoreWriter(str(files / "empty_store"), run_id="r", run_meta={}, background=False)
    empty.close()  # store.json and the run's metadata, no shard
    good = {"prompt": "Write add.", "tests": {"form": "call", "function": "add",
            "calls": [[1, 2]], "expected": [3]}}  # fmt: skip
    code_rows = {
        "code_malformed.jsonl": {**good, "tests": {"form": "call", "function": "add",
                                                   "calls": [[1], [2]], "expected": [3]}},
        "code_nofunction.jsonl": {**good, "tests": {"form": "call", "calls": [[1]],
                                                    "expected": [3]}},
        "code_unsupported.jsonl": {**good, "tests": {"form": "property", "function": "add"}},
    }  # fmt: skip
    for name, bad in code_rows.items():
        (files / name).write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    (files / "conflict.jsonl").write_text(
        '{"problem": "1+1", "answer": "2"}\n{"problem": "2+2", "answer": "4"}\n'
        '{"problem": "1+1", "answer": "3"}\n'
    )
    for name, damage in (("run.json", "{garbage"), ("metrics.jsonl", "not json\n")):
        copy = files / f"garbage_{name.split('.')[0]}_run"  # resumable, but one file is garbage
        shutil.copytree(run, copy)
        rest = (copy / name).read_text().splitlines(keepends=True)[1:]
        (copy / name).write_text(damage + "".join(rest))
    other = files / "other_store"
    other.mkdir()
    (other / "store.json").write_text(json.dumps({"format": "something-else"}))
    damaged = files / "damaged_store"
    shutil.copytree(run / "trajectories", damaged)
    for shard in damaged.rglob("*.parquet"):
        shard.write_bytes(shard.read_bytes()[:200])  # every shard truncated
    resumable = files / "resumable"  # a run whose every checkpoint is damaged
    shutil.copytree(run, resumable)
    for weights in resumable.rglob("model.safetensors"):
        weights.write_bytes(weights.read_bytes()[:1000])
    yaml_broken = files / "yaml_broken_run"
    yaml_broken.mkdir()
    (yaml_broken / "config.yaml").write_text("run: [\n")
    other_suites = files / "other_suites_run"  # a run evaluated on other suites
    shutil.copytree(run / "checkpoints", other_suites / "checkpoints")
    text = (run / "config.yaml").read_text()
    (other_suites / "config.yaml").write_text(text.replace("- test", "- val"))
