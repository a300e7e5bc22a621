"""`graft sample` through the real CLI: a log sampled from a run's checkpoint trains a stored-peer
run (the gate's candidates per step equal a count made by hand from the two stores); a sampling
killed and started again writes the rows of one that never stopped; each bad input is one line,
and nothing is written."""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import TINY_RUN
from graft.cli import main
from graft.rundir import read_metrics
from graft.store import TrajectoryStore

TASK = ["task.arithmetic.num_train=48", "task.arithmetic.num_val=16"]
COMMON = [*TINY_RUN, *TASK]


def _solo(name: str, preset: str) -> list[str]:
    return [f"models.0.name={name}", f"models.0.path=tiny:{preset}", "models.0.optim.lr=2e-5"]


def _sets(values: list[str]) -> list[str]:
    return [a for v in values for a in ("--set", v)]


def _train(out: Path, *sets: str) -> int:
    return main(["train", "--out", str(out), *_sets([*COMMON, *sets])])


@pytest.fixture(scope="module")
def llama_run(tmp_path_factory):
    """A finished GRPO run of llama, with its final checkpoint."""
    out = tmp_path_factory.mktemp("llama_grpo")
    assert _train(out, *_solo("llama", "llama-char-add"), "run.steps=2", "run.save_every=2") == 0
    return out


def _sample(out: Path, *args: str) -> int:
    return main(["sample", *args, "--out", str(out), "--workers", "1", "--chunk", "16"])


def test_a_log_sampled_from_a_checkpoint_trains_a_stored_peer_run(tmp_path, llama_run):
    log = tmp_path / "log"
    assert _sample(log, "--run", str(llama_run), "--n", "4") == 0
    store = TrajectoryStore(str(log))
    assert store.validate().ok
    info = store.info()["models"]["llama"]
    assert (info["rows"], info["prompts"], info["has_logprobs"]) == (48 * 4, 48, True)
    (meta,) = store.runs().values()
    checkpoint = llama_run / "checkpoints" / "step_000002" / "llama"
    assert meta["sample"]["model"] == str(checkpoint) and meta["sample"]["n"] == 4
    assert meta["config"]["task"]["arithmetic"]["num_train"] == 48

    out = tmp_path / "qwen"
    stored = ["exchange.source=stored", f"exchange.stored.path={log}", "exchange.delta=0.0"]
    assert _train(out, *_solo("qwen", "qwen2-bpe-add"), "run.steps=3", *stored) == 0
    peer = {
        row["prompt_id"]: row["group_successes"]
        for row in TrajectoryStore(str(log)).scan(models=["llama"]).to_pylist()
    }
    own = TrajectoryStore(str(out / "trajectories")).scan(models=["qwen"]).to_pylist()
    records = read_metrics(out)
    key = "x/stored:llama->qwen"
    for record in records:  # logged at the steps done (1, 2, 3); the store's steps count from 0
        rows = {r["prompt_id"]: r for r in own if r["step"] == record["step"] - 1}
        expected = sum(
            r["group_successes"] == 0 and 0 < peer[pid] < 4 for pid, r in rows.items()
        )  # the receiver failed every rollout, the peer's stored group is mixed
        assert record["stored/prompts_found"] == 8 and record[f"{key}/candidates"] == expected
        assert record[f"{key}/selected"] == expected
        assert record[f"{key}/admitted"] == record[f"{key}/responses_sent"] == 4 * expected
    assert sum(r[f"{key}/admitted"] for r in records) > 0


def _rows(store: Path) -> dict[tuple[str, int], tuple]:
    out = {}
    for r in TrajectoryStore(str(store)).scan(models=["llama"]).to_pylist():
        key = (r["prompt_id"], r["member"])
        assert key not in out, f"doubled: {key}"
        out[key] = (r["response"], tuple(r["token_ids"]), tuple(r["logprobs"]), r["reward"])
    return out


def test_a_sampling_killed_and_started_again_writes_the_rows_of_one_that_never_stopped(
    tmp_path, llama_run
):
    """The pre-trained model of the run's config (its start), sampled whole, and sampled with
    a kill part way through."""
    args = ["--config", str(llama_run / "config.yaml"), "--n", "4", "--chunk", "4"]
    graft = Path(sys.executable).with_name("graft")
    whole = tmp_path / "whole"
    command = [str(graft), "sample", *args, "--workers", "1", "--out"]
    subprocess.run([*command, str(whole)], check=True, capture_output=True)
    killed = tmp_path / "killed"
    proc = subprocess.Popen([*command, str(killed)], stderr=subprocess.DEVNULL)
    shards = killed / "shards"
    deadline = time.monotonic() + 120
    while not list(shards.glob("*/*/step_*.parquet")) and time.monotonic() < deadline:
        time.sleep(0.002)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    written = len(list(shards.glob("*/*/step_*.parquet")))
    assert 1 <= written < 12, written  # killed part way: 48 prompts are 12 chunks
    subprocess.run([*command, str(killed)], check=True, capture_output=True)
    assert _rows(killed) == _rows(whole) and len(_rows(whole)) == 48 * 4
    assert TrajectoryStore(str(killed)).validate().ok
    again = subprocess.run([*command, str(killed)], capture_output=True, text=True)
    assert "sampled 0 of 48 prompts" in again.stdout and "48 found done" in again.stdout


def _one_line(capsys, argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def test_each_bad_input_is_one_line_and_writes_nothing(tmp_path, llama_run, capsys):
    out = tmp_path / "out"
    base = ["sample", "--config", str(llama_run / "config.yaml"), "--policy", "llama"]
    base += ["--out", str(out)]
    quick = _sets(TASK)
    line = _one_line(capsys, [*base, "--model", "./no/such/model", *quick])
    assert line == "graft: error: --model ./no/such/model: no such file or directory"
    no_val = ["--split", "val", "--set", "task.arithmetic.num_val=0"]
    line = _one_line(capsys, [*base, *quick, *no_val])
    assert line == "graft: error: --split val: task arithmetic has no problems there"
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    line = _one_line(capsys, [*base[:-1], str(a_file / "log"), *quick])
    assert line == f"graft: error: --out {a_file / 'log'}: {a_file} is a file, not a directory"
    other = [*base[:-1], str(llama_run / "trajectories"), *quick[:-2], "--set",
             "task.arithmetic.num_train=40"]  # fmt: skip
    line = _one_line(capsys, other)
    assert "holds run" in line and "of another task" in line and "name another folder" in line
    assert _one_line(capsys, ["sample", "--out", str(out)]) == (
        "graft: error: graft sample: give one of --config and --run"
    )
    line = _one_line(capsys, [*base[:3], "--policy", "nobody", "--out", str(out)])
    assert line.startswith("graft: error: graft sample --policy nobody: not a model here")
    line = _one_line(capsys, ["sample", "--run", str(tmp_path / "no_run"), "--out", str(out)])
    assert line == f"graft: error: --run {tmp_path / 'no_run'}: no run there (no config.yaml)"
    assert not out.exists() and not (a_file.parent / "log").exists()
    assert json.loads((llama_run / "trajectories" / "store.json").read_text())["format"]
    assert len(TrajectoryStore(str(llama_run / "trajectories")).runs()) == 1  # nothing added


def test_steps_of_samples_exactly_the_prompts_a_run_draws(tmp_path, llama_run):
    """--steps-of: the prompts of the run's own steps (its seed and batch size), no other."""
    log = tmp_path / "log"
    args = ["--config", str(llama_run / "config.yaml"), "--n", "2", "--steps-of", str(llama_run)]
    assert _sample(log, *args) == 0
    drawn = {r["prompt_id"] for r in TrajectoryStore(str(llama_run / "trajectories")).scan(
        models=["llama"], columns=["prompt_id"]).to_pylist()}  # fmt: skip
    sampled = TrajectoryStore(str(log)).scan(models=["llama"]).to_pylist()
    assert {r["prompt_id"] for r in sampled} == drawn and len(drawn) == 2 * 8
    assert len(sampled) == 2 * len(drawn)
