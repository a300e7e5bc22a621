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


TRL_TASK = "task.arithmetic.num_train=8"


@pytest.fixture(scope="module")
def trl_log(tmp_path_factory):
    """TRL's own GRPOTrainer, log_completions on, trained two steps on the tiny llama over the
    task's 8 training prompts (4 a step, 4 completions each): its completions/*.parquet, as TRL
    wrote them."""
    pytest.importorskip("trl")
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from graft.config import Config, ModelConfig, load_config
    from graft.models.load import load_model_and_tokenizer
    from graft.tasks import build_task
    from graft.verify.math.grader import final_number

    root = tmp_path_factory.mktemp("trl")
    model_dir = root / "llama_hf"
    model, tokenizer = load_model_and_tokenizer(
        ModelConfig(name="llama", path="tiny:llama-char-add")
    )
    model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    problems = build_task(load_config(Config, CONFIG, [TRL_TASK]).task).train_problems()
    dataset = Dataset.from_list([{"prompt": p.prompt, "answer": p.gold} for p in problems])

    def reward(completions: list[str], answer: list[str], **_: object) -> list[float]:
        found = [final_number(c) for c in completions]
        return [float(f is not None and int(f) == int(a)) for f, a in zip(found, answer)]

    args = GRPOConfig(
        output_dir=str(root / "trl_out"), per_device_train_batch_size=16, num_generations=4,
        max_completion_length=8, max_steps=2, logging_steps=1, log_completions=True,
        use_cpu=True, report_to="none", save_strategy="no", disable_tqdm=True, seed=0,
        learning_rate=2e-5, shuffle_dataset=False,
        dataloader_num_workers=0, bf16=False, fp16=False,
    )  # fmt: skip
    trainer = GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32),
        reward_funcs=reward, args=args, train_dataset=dataset,
        processing_class=AutoTokenizer.from_pretrained(model_dir),
    )  # fmt: skip
    trainer.train()
    completions = root / "trl_out" / "completions"
    assert sorted(p.name for p in completions.iterdir()) == [
        "completions_00001.parquet", "completions_00002.parquet"
    ]  # fmt: skip
    return completions, model_dir


def test_a_trl_run_s_completions_train_a_graft_receiver(trl_log, tmp_path):
    """TRL's completions parquet (step, prompt, completion, a column per reward function,
    advantage), imported with the model that wrote it, then trained against by the tiny qwen:
    per step, the groups the gate found and the responses the weight admitted equal a count by
    hand, the imported groups' advantages equal a hand computation (and TRL's own, where the
    verdicts agree), and their tokens reach the update."""
    import pyarrow.parquet as pq

    completions, model_dir = trl_log
    imported = tmp_path / "imported"
    assert _import(completions, imported, "--model", str(model_dir), "--name", "llama",
                   "--set", TRL_TASK) == 0  # fmt: skip
    store = TrajectoryStore(str(imported))
    (meta,) = store.runs().values()
    assert meta["import"]["format"] == "trl" and len(meta["import"]["files"]) == 2
    rows = store.scan().to_pylist()
    logged = [r for f in sorted(completions.iterdir()) for r in pq.read_table(f).to_pylist()]
    assert len(rows) == len(logged) == 2 * 16 and {r["step"] for r in rows} == {1, 2}
    assert all(r["token_ids"] and len(r["token_ids"]) == len(r["logprobs"]) for r in rows)
    trl_adv = {(r["step"], r["prompt"], r["completion"]): r["advantage"] for r in logged}
    agreed = 0
    for r in rows:
        group = [g for g in rows if (g["step"], g["prompt_id"]) == (r["step"], r["prompt_id"])]
        rewards = [g["reward"] for g in group]
        mean, std = statistics.mean(rewards), statistics.stdev(rewards)
        assert r["advantage"] == pytest.approx((r["reward"] - mean) / (std + 1e-6))
        if all(g["reward"] == g["log_reward"] for g in group):  # TRL's eps is 1e-4
            want = trl_adv[r["step"], r["prompt"], r["response"]]
            assert r["advantage"] == pytest.approx(want, abs=1e-3)
            agreed += 1
    assert agreed > 0
    out = tmp_path / "qwen"
    stored = ["exchange.source=stored", f"exchange.stored.path={imported}", "exchange.delta=0.0"]
    _train(out, QWEN, "run.steps=3", TRL_TASK, *stored)
    peer = {r["prompt_id"]: r["group_successes"] for r in rows}  # `latest`: each prompt once
    own = TrajectoryStore(str(out / "trajectories")).scan(models=["qwen"]).to_pylist()
    key = "x/stored:llama->qwen"
    records = read_metrics(out)
    for record in records:
        mine = [r for r in own if r["step"] == record["step"] - 1 and r["round"] == 0]
        groups = {r["prompt_id"]: r["group_successes"] for r in mine}
        found = sum(k == 0 and 0 < peer[pid] < 4 for pid, k in groups.items())
        assert record["stored/prompts_found"] == 8
        assert record[f"{key}/candidates"] == record[f"{key}/selected"] == found
        assert record[f"{key}/admitted"] == 4 * found
        assert (record["loss/peer_token_frac"] > 0) == (found > 0)
    assert sum(r[f"{key}/admitted"] for r in records) > 0


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
