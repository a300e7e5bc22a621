"""`graft code audit`: rows verified in parallel through the verifier pool, each verdict written
as it arrives (OUT.partial), the same verdicts at any --workers, and a killed audit leaves every
finished row behind and no OUT that looks complete."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from graft.cli import main
from graft.sandbox import isolation_problem

needs_sandbox = pytest.mark.skipif(bool(isolation_problem()), reason=isolation_problem() or "ok")
ADD = {"form": "call", "function": "add", "calls": [[1, 2], [2, 2]], "expected": [3, 4]}


def block(source: str) -> str:
    return f"```python\n{source}\n```"


ROWS = [
    {
        "task_id": "T/0",
        "prompt": "add",
        "tests": ADD,
        "response": block("def add(a, b): return a + b"),
    },
    {"id": 7, "prompt": "add", "tests": ADD, "response": block("def add(a, b): return a - b")},
    {  # hangs: the sandbox's CPU limit ends it
        "problem_id": "p-3",
        "prompt": "sum",
        "tests": {"form": "stdio", "stdin": ["1 2\n"], "stdout": ["3"]},
        "response": block("while True:\n    pass"),
    },
    {"prompt": "add", "tests": ADD, "response": "def add(a, b): return a + b"},  # no block
    {
        "task_id": 2,
        "text": "Add two numbers.",
        "test_list": ["assert add(2, 3) == 5"],
        "response": block("def add(a, b):\n    return a + b"),
    },
]
WANT = [
    (1, "T/0", "correct", ""),
    (2, 7, "wrong", "wrong"),
    (3, "p-3", "timeout", "timeout"),
    (4, None, "no_answer", "no_code_block"),
    (5, 2, "correct", ""),
]


def write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def audit(*args: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "graft.cli", "code", "audit", *args]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@needs_sandbox
def test_two_workers_give_the_verdicts_of_one_written_in_row_order(tmp_path):
    rows = write(tmp_path / "rows.jsonl", ROWS)
    one, two = tmp_path / "one.jsonl", tmp_path / "two.jsonl"
    alone = audit(rows, "--out", str(one), "--workers", "1")  # at the same time: ~5 s, not 10
    assert main(["code", "audit", rows, "--out", str(two), "--workers", "2"]) == 0
    _, err = alone.communicate(timeout=120)
    assert alone.returncode == 0, err
    records = [json.loads(line) for line in two.read_text().splitlines()]
    assert [json.loads(line) for line in one.read_text().splitlines()] == records
    assert [(r["row"], r["id"], r["verdict"], r["reason"]) for r in records] == WANT
    assert all(r["detail"] for r in records)
    assert not (tmp_path / "one.jsonl.partial").exists()
    assert not (tmp_path / "two.jsonl.partial").exists()


@needs_sandbox
def test_a_killed_audit_leaves_its_finished_rows_and_no_complete_looking_out(tmp_path):
    hang = {**ROWS[2], "response": block("import time\ntime.sleep(60)")}  # 4 s wall clock
    rows = write(tmp_path / "rows.jsonl", [hang, ROWS[0], ROWS[1], ROWS[4]])
    out = tmp_path / "verdicts.jsonl"
    partial = tmp_path / "verdicts.jsonl.partial"
    proc = audit(rows, "--out", str(out), "--workers", "2")
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if partial.exists() and partial.read_text().count("\n") >= 3:
                break
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)  # while the hanging row still runs
        proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert not out.exists()
    done = [json.loads(line) for line in partial.read_text().splitlines()]
    assert sorted((r["row"], r["id"], r["verdict"]) for r in done) == [
        (2, "T/0", "correct"),
        (3, 7, "wrong"),
        (4, 2, "correct"),
    ]


@pytest.mark.parametrize(
    ("flags", "culprit"),
    [
        (["--workers", "0"], "--workers: must be at least 1, got 0"),
        (["--timeout-s", "0"], "--timeout-s: must be > 0"),
    ],
)
def test_bad_flags_end_in_one_line_naming_the_flag(tmp_path, capsys, flags, culprit):
    rows = write(tmp_path / "rows.jsonl", ROWS[:1])
    out = tmp_path / "verdicts.jsonl"
    assert main(["code", "audit", rows, "--out", str(out), *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("graft: error: ") and culprit in err and "\n" not in err
    assert not out.exists() and not (tmp_path / "verdicts.jsonl.partial").exists()


@pytest.mark.parametrize(
    ("make", "said"),
    [
        (lambda d: d, "is a directory, not a file of responses"),
        (lambda d: Path("/dev/null"), "is a character device, not a file of responses"),
        (lambda d: d / "missing.jsonl", "FILE: not found:"),
    ],
)
def test_a_file_that_is_not_a_regular_file_is_named_for_what_it_is(tmp_path, capsys, make, said):
    source = make(tmp_path)
    assert main(["code", "audit", str(source), "--out", str(tmp_path / "v.jsonl")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("graft: error: ") and said in err and "\n" not in err, err
    assert not (tmp_path / "v.jsonl").exists()


def test_file_is_never_written_over_by_out_or_its_partial(tmp_path, capsys):
    rows = write(tmp_path / "rows.jsonl.partial", ROWS[:1])
    before = (tmp_path / "rows.jsonl.partial").read_text()
    assert main(["code", "audit", rows, "--out", str(tmp_path / "rows.jsonl")]) == 2
    err = capsys.readouterr().err.strip()
    assert "--out" in err and "OUT.partial would be FILE itself" in err and "\n" not in err
    assert (tmp_path / "rows.jsonl.partial").read_text() == before


@needs_sandbox
def test_two_audits_in_different_pid_namespaces_at_once_both_finish_with_every_verdict(tmp_path):
    """Each sandbox sweeps stale groups when it is made (GRAFT_SANDBOX_COLD=1: one per program,
    so a sweep every program); the maker's lock, not a PID from another namespace, decides."""
    import shutil

    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("needs root to make PID namespaces")
    source = write(tmp_path / "rows.jsonl", [r for r in ROWS if "problem_id" not in r] * 4)
    graft = os.path.join(os.path.dirname(sys.executable), "graft")
    env = {**os.environ, "GRAFT_SANDBOX_COLD": "1"}
    runs = [
        subprocess.Popen(
            [
                "unshare",
                "--pid",
                "--fork",
                "--mount-proc",
                graft,
                "code",
                "audit",
                source,
                "--out",
                str(tmp_path / f"out{k}.jsonl"),
                "--workers",
                "1",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        for k in range(2)
    ]
    outputs = [run.communicate(timeout=300) for run in runs]
    assert [run.returncode for run in runs] == [0, 0], [e.decode()[-800:] for _, e in outputs]
    want = [w[2] for w in WANT if w[1] != "p-3"] * 4
    for k in range(2):
        lines = (tmp_path / f"out{k}.jsonl").read_text().splitlines()
        assert [json.loads(x)["verdict"] for x in lines] == want
