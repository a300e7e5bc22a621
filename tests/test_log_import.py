"""`graft store import` of a plain log (prompt, response, reward, step per row): grouped, every
response re-verified, the log's own reward kept beside, scored by the source model when given, and
trained against as a stored peer through `graft train`."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from conftest import TINY_RUN
from graft.cli import main
from graft.rundir import read_metrics
from graft.store import TrajectoryStore

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "graft_tiny.yaml"
LLAMA = "models=[{name: llama, path: 'tiny:llama-char-add', optim: {lr: 2.0e-5}}]"
QWEN = "models=[{name: qwen, path: 'tiny:qwen2-bpe-add', optim: {lr: 2.0e-5}}]"
ONE = {"prompt": "12+30=", "response": "4"}
ORDER = [("step", "ascending"), ("prompt_id", "ascending"), ("member", "ascending")]


def _train(out: Path, *sets: str) -> None:
    args = ["train", str(CONFIG), "--out", str(out)]
    for s in [*TINY_RUN, *sets]:
        args += ["--set", s]
    assert main(args) == 0


def _import(log: Path | str, out: Path, *more: str) -> int:
    return main(["store", "import", str(log), "--config", str(CONFIG), "--out", str(out),
                 "--workers", "1", *more])  # fmt: skip


@pytest.fixture(scope="module")
def plain_log(tmp_path_factory):
    """A llama GRPO run, and its rollouts as another tool would log them: text and reward only
    (the log's reward flipped on one row, which re-verification must undo)."""
    root = tmp_path_factory.mktemp("log")
    _train(root / "llama", LLAMA, "run.steps=3")
    rows = TrajectoryStore(str(root / "llama" / "trajectories")).scan().to_pylist()
    log = root / "completions.jsonl"
    with log.open("w") as f:
        for i, r in enumerate(rows):
            reward = 1.0 - r["reward"] if i == 5 else r["reward"]
            f.write(json.dumps({"id": f"r{i}", "prompt": r["prompt"], "response": r["response"],
                                "reward": reward, "step": r["step"],
                                "finish_reason": r["finish_reason"]}) + "\n")  # fmt: skip
    return root / "llama" / "trajectories", log


def test_an_import_with_its_source_model_gives_back_the_run_it_came_from(plain_log, tmp_path):
    source, log = plain_log
    assert _import(log, tmp_path / "imported", "--model", "tiny:llama-char-add", "--name",
                   "llama") == 0  # fmt: skip
    before = TrajectoryStore(str(source)).scan().sort_by(ORDER)
    after = TrajectoryStore(str(tmp_path / "imported")).scan().sort_by(ORDER)
    for column in ("prompt_id", "gold", "response", "token_ids", "reward", "advantage"):
        assert after[column].equals(before[column]), column  # the verifier's, not the log's
    logged = [1.0 - r if i == 5 else r for i, r in enumerate(before["reward"].to_pylist())]
    by_key = {(r["step"], r["prompt_id"], r["member"]): r for r in before.to_pylist()}
    assert sorted(after["log_reward"].to_pylist()) == sorted(logged)
    for row in after.to_pylist():
        if row["step"] == 0:  # sampled before any update: the same weights scored it
            want = by_key[row["step"], row["prompt_id"], row["member"]]["logprobs"]
            assert row["logprobs"] == pytest.approx(want, abs=1e-4)
    (meta,) = TrajectoryStore(str(tmp_path / "imported")).runs().values()
    assert meta["import"]["rows"] == 3 * 8 * 4 and meta["import"]["files"][0]["path"] == str(log)
    assert meta["import"]["scored_by"] == "tiny:llama-char-add"


def test_a_receiver_trains_against_the_import_and_the_gate_sees_its_groups(plain_log, tmp_path):
    _, log = plain_log
    imported = tmp_path / "imported"
    assert _import(log, imported, "--model", "tiny:llama-char-add", "--name", "llama") == 0
    rows = TrajectoryStore(str(imported)).scan().to_pylist()
    for step in {r["step"] for r in rows}:  # each imported group's advantages, by hand
        for pid in {r["prompt_id"] for r in rows if r["step"] == step}:
            group = sorted((r for r in rows if (r["step"], r["prompt_id"]) == (step, pid)),
                           key=lambda r: r["member"])  # fmt: skip
            rewards = [r["reward"] for r in group]
            mean, std = statistics.mean(rewards), statistics.stdev(rewards)
            for r in group:
                assert r["advantage"] == pytest.approx((r["reward"] - mean) / (std + 1e-6))
    out = tmp_path / "qwen"
    stored = ["exchange.source=stored", f"exchange.stored.path={imported}",
              "exchange.stored.records=same_step", "exchange.delta=0.0"]  # fmt: skip
    _train(out, QWEN, "run.steps=3", *stored)
    peer = {(r["step"], r["prompt_id"]): r["group_successes"] for r in rows}
    own = TrajectoryStore(str(out / "trajectories")).scan(models=["qwen"]).to_pylist()
    key = "x/stored:llama->qwen"
    records = read_metrics(out)
    for record in records:  # logged at steps 1-3; the stores count from 0
        step = record["step"] - 1
        mine = {r["prompt_id"]: r for r in own if r["step"] == step and r["round"] == 0}
        found = sum(r["group_successes"] == 0 and 0 < peer[step, pid] < 4
                    for pid, r in mine.items())  # fmt: skip
        assert record[f"{key}/candidates"] == record[f"{key}/selected"] == found
        assert record[f"{key}/admitted"] == 4 * found  # delta 0: every response
        replaced = {r["prompt_id"] for r in mine.values() if r["replaced"]}
        assert len(replaced) == found  # the gate's choice, as the store records it
        reached = record["loss/peer_token_frac"] > 0  # imported tokens in the update's loss
        assert reached == (found > 0), (step, found, record["loss/peer_token_frac"])
    assert sum(r[f"{key}/admitted"] for r in records) > 0


def test_without_its_model_the_import_asks_for_a_receiver_only_weight(plain_log, tmp_path):
    _, log = plain_log
    imported = tmp_path / "imported"
    assert _import(log, imported) == 0
    rows = TrajectoryStore(str(imported)).scan().to_pylist()
    assert all(r["token_ids"] == [] and r["logprobs"] == [] for r in rows)
    out = tmp_path / "qwen"
    stored = ["exchange.source=stored", f"exchange.stored.path={imported}"]
    args = ["train", str(CONFIG), "--out", str(out)]
    for s in [*TINY_RUN, QWEN, "run.steps=1", *stored]:
        args += ["--set", s]
    assert main(args) == 2  # the paper's weight needs the source's log-probs
    _train(tmp_path / "rr", QWEN, "run.steps=1", *stored,
           "exchange.ablation.weight=receiver_relative")  # fmt: skip


def _write(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


@pytest.mark.parametrize(
    ("rows", "said"),
    [
        ([{"prompt": "", "response": "1"}], "row 1: no prompt"),
        ([{"prompt": "12+30=", "response": "42"}, {"response": "3"}], "row 2: no prompt"),
        ([{"prompt": "12+30=", "response": "4", "reward": "yes"}], "reward 'yes' is not a number"),
        ([{"prompt": "not in the task", "response": "4"}], "does not hold, and no gold"),
        (["{not json", {"prompt": "12+30=", "response": "4"}], "row 1: not JSON"),
    ],
)
def test_a_bad_row_is_named_and_nothing_is_written(tmp_path, capsys, rows, said):
    log = _write(tmp_path / "log.jsonl", rows)
    assert _import(log, tmp_path / "store") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and said in err[0] and str(log) in err[0], err
    assert not (tmp_path / "store").exists()


def test_bad_rows_left_out_are_counted(tmp_path, plain_log, capsys):
    _, log = plain_log
    lines = log.read_text().splitlines()
    bad = _write(tmp_path / "log.jsonl", [*lines[:8], {"prompt": "", "response": "x"}])
    assert _import(bad, tmp_path / "store", "--skip-bad-rows") == 0
    assert "1 bad rows left out" in capsys.readouterr().out
    (meta,) = TrajectoryStore(str(tmp_path / "store")).runs().values()
    assert meta["import"]["bad_rows"] == 1 and meta["import"]["rows"] == 8


@pytest.mark.parametrize(
    ("make", "said"),
    [
        (lambda d: _write(d / "other.jsonl", [{"input": "q", "output": "a"}] * 2),
         "not a log of prompts and responses"),
        (lambda d: _write(d / "twice.jsonl", [{"id": "a", **ONE}] * 2),
         "response id 'a' again (first at"),
        (lambda d: _write(d / "log.csv", ["prompt,response"]), "not a .jsonl or .parquet log"),
        (lambda d: d / "missing.jsonl", "no such file or folder"),
    ],
)  # fmt: skip
def test_a_file_that_is_no_log_is_refused_in_one_line(tmp_path, capsys, make, said):
    assert _import(make(tmp_path), tmp_path / "store") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and said in err[0], err
    assert not (tmp_path / "store").exists()


def test_a_parquet_log_without_a_response_column_is_refused(tmp_path, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"prompt": ["12+30="], "completion": ["42"]}), tmp_path / "c.parquet")
    assert _import(tmp_path / "c.parquet", tmp_path / "store") == 2
    assert "no column 'response'" in capsys.readouterr().err
    (tmp_path / "afile").write_text("")
    log = _write(tmp_path / "log.jsonl", [{"prompt": "12+30=", "response": "4"}])
    assert _import(log, tmp_path / "afile" / "store") == 2  # a store path under a file
    assert "is a file, not a directory" in capsys.readouterr().err
