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


def test_a_log_without_rewards_says_so_and_one_with_them_compares_each(plain_log, tmp_path, capsys):
    """A log with no reward column is not 'in full agreement': its summary says there was
    nothing to compare. With its 0/1 rewards (one flipped), the agreement is counted."""
    source, log = plain_log
    rows = TrajectoryStore(str(source)).scan().to_pylist()
    bare = _write(tmp_path / "bare.jsonl", [{"prompt": r["prompt"], "response": r["response"],
                                            "step": r["step"]} for r in rows])  # fmt: skip
    assert _import(bare, tmp_path / "bare") == 0
    said = capsys.readouterr().out
    assert "the log's rewards against graft's verdicts: no reward in the log" in said
    assert _import(log, tmp_path / "rewarded") == 0
    said = capsys.readouterr().out
    assert f"reward {len(rows) - 1}/{len(rows)} agree" in said  # the flipped one disagrees


@pytest.mark.parametrize(
    ("rows", "said"),
    [
        ([{"prompt": "", "response": "1"}], "row 1: no prompt"),
        ([{"prompt": "12+30=", "response": "42"}, {"response": "3"}], "row 2: no prompt"),
        (
            [{"prompt": "12+30=", "response": "4", "reward": "yes"}],
            "reward column 'reward' holds 'yes', not a number",
        ),
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
         "not a log of a known format (columns input, output"),
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

    pq.write_table(pa.table({"prompt": ["12+30="], "answer": ["42"]}), tmp_path / "c.parquet")
    assert _import(tmp_path / "c.parquet", tmp_path / "store") == 2
    assert "c.parquet: no column 'response' (a plain log has" in capsys.readouterr().err
    pq.write_table(pa.table({"prompt": ["12+30="], "completion": ["42"]}), tmp_path / "t.parquet")
    assert _import(tmp_path / "t.parquet", tmp_path / "store") == 2  # TRL's, without advantage
    assert "t.parquet: not a log of a known format" in capsys.readouterr().err
    (tmp_path / "afile").write_text("")
    log = _write(tmp_path / "log.jsonl", [{"prompt": "12+30=", "response": "4"}])
    assert _import(log, tmp_path / "afile" / "store") == 2  # a store path under a file
    assert "is a file, not a directory" in capsys.readouterr().err


LONG = "1" * 20
"""A response of 20 tokens and EOS: past the config's 8, too long for its source to score."""


def _with_long(rows: list[dict], *, only: str = "") -> list[dict]:
    """The rows as a plain log, with one more response in each group that is too long to score
    (every response of a group too long where its prompt is not `only`, when `only` is given)."""
    out, groups = [], {}
    for r in rows:
        text = r["response"] if not only or r["prompt"] == only else LONG
        out.append({"prompt": r["prompt"], "response": text, "step": r["step"]})
        groups.setdefault((r["step"], r["prompt"]), r)
    if not only:
        out += [{"prompt": p, "response": LONG, "step": step} for step, p in groups]
    return out


def test_rows_that_cannot_be_scored_are_left_out_of_the_exchange_and_counted(
    plain_log, tmp_path, capsys
):
    """One response of every group too long for the source model to score: the import keeps it
    (no token ids, no log-probs) and says so; a receiver trained against it with the paper's
    weight leaves it out of every group it is offered (`stored/unscored_rows`) and takes the
    other four. Only a group none of whose rows was scored refuses the paper's weight, in one
    line naming its prompt."""
    source, _ = plain_log
    rows = TrajectoryStore(str(source)).scan().to_pylist()
    imported = tmp_path / "imported"
    scored = ["--model", "tiny:llama-char-add", "--name", "llama"]
    assert _import(_write(tmp_path / "log.jsonl", _with_long(rows)), imported, *scored) == 0
    groups = len({(r["step"], r["prompt"]) for r in rows})
    assert f"{groups} too long to score (left out of exchanges)" in capsys.readouterr().out
    stored = TrajectoryStore(str(imported)).scan().to_pylist()
    assert sum(not r["logprobs"] for r in stored) == groups
    out = tmp_path / "qwen"
    peer = ["exchange.source=stored", f"exchange.stored.path={imported}", "exchange.delta=0.0"]
    _train(out, QWEN, "run.steps=3", *peer)
    key = "x/stored:llama->qwen"
    records = read_metrics(out)
    for record in records:  # each group found had one unscored response, never sent
        assert record["stored/unscored_rows"] == record["stored/prompts_found"] > 0
        assert record[f"{key}/responses_sent"] == 4 * record[f"{key}/selected"]
    assert sum(r[f"{key}/selected"] for r in records) > 0
    none_scored = tmp_path / "none_scored"
    kept = rows[0]["prompt"]  # every other prompt's group: too long, all of it
    log = _write(tmp_path / "none.jsonl", _with_long(rows, only=kept))
    assert _import(log, none_scored, *scored) == 0
    capsys.readouterr()
    peer = ["exchange.source=stored", f"exchange.stored.path={none_scored}"]
    args = ["train", str(CONFIG), "--out", str(tmp_path / "refused")]
    for assignment in [*TINY_RUN, QWEN, "run.steps=1", *peer]:
        args += ["--set", assignment]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("graft: error: exchange.ablation.weight=paper: no record of prompt ")
    assert "has generation log-probs" in err and "\n" not in err


VERL_COMMIT = "b178a3cd56f58b2d502255daba591e92833930a7"
"""verl is not installed here (it brings its own serving stack), so its rollout log is written
from the fields its source writes: verl/trainer/ppo/ray_trainer.py at this commit,
`_log_rollout_data` (the prompt and response decoded with skip_special_tokens, the summed token
scores, the ground truth) and `_dump_generations` (one `{step}.jsonl` per step of input, output,
gts, score and step, global steps counted from 1, and reward extras such as request_id)."""
TEMPLATE = "system\nYou are a helpful assistant.\nuser\n{prompt}\nassistant\n"
"""What a chat template leaves of a prompt once its special tokens are skipped (Qwen2's)."""


def test_a_verl_rollout_log_is_read_with_its_templated_prompts(plain_log, tmp_path):
    source, _ = plain_log
    rows = TrajectoryStore(str(source)).scan().to_pylist()
    dump = tmp_path / "rollout_data"
    dump.mkdir()
    for step in sorted({r["step"] for r in rows}):
        mine = [r for r in rows if r["step"] == step]
        _write(dump / f"{step + 1}.jsonl", [
            {"input": TEMPLATE.format(prompt=r["prompt"]), "output": r["response"],
             "gts": r["gold"], "score": r["reward"], "step": step + 1,
             "request_id": f"{step}-{r['prompt_id']}-{r['member']}"}
            for r in mine
        ])  # fmt: skip
    imported = tmp_path / "imported"
    assert _import(dump, imported) == 0
    (meta,) = TrajectoryStore(str(imported)).runs().values()
    assert meta["import"]["format"] == "verl" and len(meta["import"]["files"]) == 3
    got = TrajectoryStore(str(imported)).scan().to_pylist()
    want = {(r["step"] + 1, r["prompt_id"], r["member"]): r for r in rows}
    assert len(got) == len(want)
    for r in got:  # the task's own problem found inside the template
        w = want[r["step"], r["prompt_id"], r["member"]]
        assert (r["prompt"], r["gold"], r["response"]) == (w["prompt"], w["gold"], w["response"])
        assert (r["reward"], r["log_reward"], r["advantage"]) == (w["reward"], w["reward"],
                                                                  w["advantage"])  # fmt: skip
    stored = ["exchange.source=stored", f"exchange.stored.path={imported}",
              "exchange.ablation.weight=receiver_relative"]  # fmt: skip
    _train(tmp_path / "qwen", QWEN, "run.steps=2", *stored)
    records = read_metrics(tmp_path / "qwen")
    assert all(r["stored/prompts_missing"] == 0 for r in records)
    # Scored with its model, each response after the input as verl logged it (the template's
    # text, its special tokens skipped by verl): not the task prompt in graft's template.
    scored = tmp_path / "scored"
    assert _import(dump, scored, "--model", "tiny:llama-char-add", "--name", "llama") == 0
    import torch

    from graft.config import ModelConfig
    from graft.models.load import load_model_and_tokenizer

    model, tok = load_model_and_tokenizer(ModelConfig(name="l", path="tiny:llama-char-add"))
    row = TrajectoryStore(str(scored)).scan().to_pylist()[0]
    context = tok.encode(TEMPLATE.format(prompt=row["prompt"]), add_special_tokens=False)
    with torch.no_grad():
        logits = model(torch.tensor([context + row["token_ids"]])).logits[0].float()
    logp = torch.log_softmax(logits, -1)
    want = [float(logp[len(context) - 1 + i, t]) for i, t in enumerate(row["token_ids"])]
    assert row["logprobs"] == pytest.approx(want, abs=1e-5)
