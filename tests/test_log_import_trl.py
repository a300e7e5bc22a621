"""`graft store import` of TRL's own logs, written by TRL's GRPOTrainer itself (trl==1.16.0,
installed by `make test`; the lowest-versions environment has no TRL and skips these).

Two TRL runs of the tiny llama: one on plain string prompts with one reward function, and one as
TRL users train: a conversational dataset (a system and a user message) through a chat template
that renders role headers and the system turn, two reward functions (a 0/1 check and a shaping
term) and a `log_extra` column, 3 generations a prompt (the receiver samples 4), and completions
cut at `max_completion_length`. Each import is trained against end to end."""

from __future__ import annotations

import json
import shutil
import statistics
from pathlib import Path

import pytest

from graft.rundir import read_metrics
from graft.store import TrajectoryStore
from test_log_import import CONFIG, QWEN, _import, _train

TRL_TASK = "task.arithmetic.num_train=8"
CHAT_TASK = ("task.arithmetic.skills=['add:1,1']", "task.arithmetic.num_train=8",
             "task.arithmetic.num_test=20", "task.arithmetic.num_val=10")  # fmt: skip
"""The conversational run's prompts: one-digit sums, which a tiny model learns in seconds."""
SYSTEM = "Answer with the sum only."
CHAT_TEMPLATE = (
    "{% for m in messages %}{% if not loop.first %}{{ '\\n' }}{% endif %}"
    "[{{ m['role'] }}] {{ m['content'] }}{% endfor %}"
)
"""Role headers and the system turn, as real chat templates render them (printable ASCII: the
tiny character tokenizer's alphabet); the answer follows the user's text directly."""
RENDERED = f"[system] {SYSTEM}\n[user] {{prompt}}"
"""What the template makes of a system and a user message: the tiny model of the conversational
run is pre-trained on its prompts in this form, as a chat model is on its template."""
GENERATIONS, LIMIT = 3, 4


def _problems(*task: str):
    from graft.config import Config, load_config
    from graft.tasks import build_task

    return build_task(load_config(Config, CONFIG, list(task)).task).train_problems()


def _tiny_llama(
    folder: Path, *, chat_template: str = "", path: str = "tiny:llama-char-add"
) -> Path:
    """A tiny llama as a transformers folder (with `chat_template` set on its tokenizer)."""
    from graft.config import ModelConfig
    from graft.models.load import load_model_and_tokenizer

    model, tokenizer = load_model_and_tokenizer(ModelConfig(name="llama", path=path))
    if chat_template:
        tokenizer.chat_template = chat_template
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def _grpo(root: Path, model_dir: Path, dataset, rewards, **args) -> Path:
    """TRL's GRPOTrainer, log_completions on, two steps on the CPU; its completions folder."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    config = GRPOConfig(
        output_dir=str(root / "trl_out"), max_steps=2, logging_steps=1, log_completions=True,
        use_cpu=True, report_to="none", save_strategy="no", disable_tqdm=True, seed=0,
        learning_rate=2e-5, shuffle_dataset=False, dataloader_num_workers=0, bf16=False,
        fp16=False, **args,
    )  # fmt: skip
    trainer = GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32),
        reward_funcs=rewards, args=config, train_dataset=dataset,
        processing_class=AutoTokenizer.from_pretrained(model_dir),
    )  # fmt: skip
    trainer.train()
    trainer.save_state()  # trainer_state.json: the reward functions and completion lengths
    return root / "trl_out" / "completions"


@pytest.fixture(scope="module")
def trl_log(tmp_path_factory):
    """TRL on plain prompts, one reward function ("reward"), 4 completions a prompt, no trainer
    state kept: the reward column must be named."""
    pytest.importorskip("trl")
    from datasets import Dataset

    from graft.verify.math.grader import final_number

    root = tmp_path_factory.mktemp("trl")
    model_dir = _tiny_llama(root / "llama_hf")
    rows = [{"prompt": p.prompt, "answer": p.gold} for p in _problems(TRL_TASK)]

    def reward(completions: list[str], answer: list[str], **_: object) -> list[float]:
        found = [final_number(c) for c in completions]
        return [float(f is not None and int(f) == int(a)) for f, a in zip(found, answer)]

    completions = _grpo(root, model_dir, Dataset.from_list(rows), reward,
                        per_device_train_batch_size=16, num_generations=4,
                        max_completion_length=8)  # fmt: skip
    (root / "trl_out" / "trainer_state.json").unlink()  # as a run that kept none
    assert sorted(p.name for p in completions.iterdir()) == [
        "completions_00001.parquet", "completions_00002.parquet"
    ]  # fmt: skip
    return completions, model_dir


def test_a_trl_run_s_completions_train_a_graft_receiver(trl_log, tmp_path, capsys):
    """TRL's completions parquet (step, prompt, completion, a column per reward function,
    advantage), imported with the model that wrote it, then trained against by the tiny qwen:
    per step, the groups the gate found and the responses the weight admitted equal a count by
    hand, the imported groups' advantages equal a hand computation (and TRL's own, where the
    verdicts agree), and their tokens reach the update. Without a trainer state the reward
    column is named on the command line (refused in one line when it is not)."""
    import pyarrow.parquet as pq

    completions, model_dir = trl_log
    imported = tmp_path / "imported"
    base = ["--model", str(model_dir), "--name", "llama", "--set", TRL_TASK]
    assert _import(completions, imported, *base) == 2
    err = capsys.readouterr().err.strip()
    assert "which of its columns (reward) are TRL's rewards is not known" in err
    assert "\n" not in err and not imported.exists()
    assert _import(completions, imported, *base, "--reward-columns", "reward") == 0
    store = TrajectoryStore(str(imported))
    (meta,) = store.runs().values()
    assert meta["import"]["format"] == "trl" and len(meta["import"]["files"]) == 2
    assert all(f["reward_columns"] == ["reward"] for f in meta["import"]["files"])
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


@pytest.fixture(scope="module")
def trl_chat_log(tmp_path_factory):
    """TRL as its users train: conversations (system and user) through a chat template, a 0/1
    reward and a shaping one, a `log_extra` column, 3 generations a prompt, completions cut at 8
    tokens; its trainer state saved. The completions folder, the model and the dataset's rows."""
    pytest.importorskip("trl")
    from datasets import Dataset

    from conftest import small_tiny_spec
    from graft.config import ArithmeticConfig
    from graft.models.tiny import build_tiny
    from graft.verify.math.grader import final_number

    root = tmp_path_factory.mktemp("trl_chat")
    sums = ArithmeticConfig(skills=("add:1,1",), num_train=80, num_test=20)
    spec = small_tiny_spec("llama", "char", prompt_template=RENDERED, task=sums, pretrain_steps=600)
    chat_model = build_tiny(spec)
    model_dir = _tiny_llama(root / "llama_hf", chat_template=CHAT_TEMPLATE, path=str(chat_model))
    rows = [
        {"prompt": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": p.prompt}],
         "answer": p.gold}
        for p in _problems(*CHAT_TASK)
    ]  # fmt: skip

    def correct(completions, answer, log_extra=None, **_):
        texts = [c[-1]["content"] for c in completions]
        if log_extra is not None:
            log_extra("chars", [len(t) for t in texts])
        found = [final_number(t) for t in texts]
        return [float(f is not None and int(f) == int(a)) for f, a in zip(found, answer)]

    def short(completions, **_):
        return [-0.01 * len(c[-1]["content"]) for c in completions]

    completions = _grpo(root, model_dir, Dataset.from_list(rows), [correct, short],
                        per_device_train_batch_size=12, num_generations=GENERATIONS,
                        max_completion_length=LIMIT)  # fmt: skip
    return completions, model_dir, rows


@pytest.fixture(scope="module")
def chat_import(trl_chat_log, tmp_path_factory):
    """The conversational run imported with its model (reward columns and the completion limit
    from its trainer state, the chat template from its tokenizer); the store and what the import
    printed."""
    import contextlib
    import io

    completions, model_dir, _ = trl_chat_log
    out = tmp_path_factory.mktemp("chat_import") / "imported"
    said = io.StringIO()
    with contextlib.redirect_stdout(said):
        code = _import(completions, out, "--model", str(model_dir), "--name", "llama",
                       *_sets(CHAT_TASK))  # fmt: skip
    assert code == 0
    return out, said.getvalue()


def _sets(task: tuple[str, ...]) -> list[str]:
    return [a for t in task for a in ("--set", t)]


def _trl_context(model_dir: Path, messages: list[dict]) -> list[int]:
    """TRL's own tokens of a conversational prompt (GRPOTrainer._tokenize_prompts)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    rendered = tok.apply_chat_template([messages], add_generation_prompt=True, tokenize=True,
                                       return_dict=True)  # fmt: skip
    return list(rendered["input_ids"][0])


def _logprobs(model, context: list[int], tokens: list[int]) -> list[float]:
    import torch

    with torch.no_grad():
        logits = model(torch.tensor([context + tokens])).logits[0].float()
    logp = torch.log_softmax(logits, -1)
    return [float(logp[len(context) - 1 + i, t]) for i, t in enumerate(tokens)]


def test_imported_logprobs_are_the_sources_on_the_context_it_sampled_from(
    trl_chat_log, chat_import
):
    """Every imported row's log-probs equal a float32 recomputation on TRL's own rendered prompt
    (role headers, the system turn) to 1e-5, and differ from the same tokens scored after the
    task prompt in graft's template. The template's digest is in the import's provenance.
    Planted: scoring under graft's template fails it."""
    import hashlib

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _, model_dir, dataset = trl_chat_log
    out, _ = chat_import
    store = TrajectoryStore(str(out))
    (meta,) = store.runs().values()
    assert (
        meta["import"]["chat_template_sha256"] == hashlib.sha256(CHAT_TEMPLATE.encode()).hexdigest()
    )
    assert meta["import"]["chat_template_from"] == "the model"
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(model_dir)
    by_prompt = {row["prompt"][-1]["content"]: row["prompt"] for row in dataset}
    worst = apart = 0.0
    for r in store.scan().to_pylist():
        context = _trl_context(model_dir, by_prompt[r["prompt"]])
        want = _logprobs(model, context, r["token_ids"])
        worst = max(worst, *(abs(a - b) for a, b in zip(r["logprobs"], want)))
        graft_template = tok.encode(r["prompt"])  # the config's "{prompt}", special tokens added
        other = _logprobs(model, graft_template, r["token_ids"])
        apart = max(apart, *(abs(a - b) for a, b in zip(r["logprobs"], other)))
    assert worst <= 1e-5, worst
    assert apart > 1e-2, apart


def test_reward_columns_are_chosen_and_each_is_compared_on_its_own(trl_chat_log, chat_import):
    """The reward functions' names come from the run's trainer state; the log's reward is their
    sum, the `log_extra` column is kept beside and never summed, and the summary compares the 0/1
    column with graft's verdicts and calls the other a shaping term."""
    import pyarrow.parquet as pq

    completions, _, _ = trl_chat_log
    out, said = chat_import
    (meta,) = TrajectoryStore(str(out)).runs().values()
    assert all(f["reward_columns"] == ["correct", "short"] for f in meta["import"]["files"])
    logged = {
        (r["step"], r["prompt"][-1]["content"], r["completion"][-1]["content"]): r
        for f in sorted(completions.iterdir())
        for r in pq.read_table(f).to_pylist()
    }
    rows = TrajectoryStore(str(out)).scan().to_pylist()
    agree = 0
    for r in rows:
        source = logged[r["step"], r["prompt"], r["response"]]
        assert r["log_reward"] == pytest.approx(source["correct"] + source["short"])
        own = json.loads(r["log_columns"])
        assert own == {"correct": source["correct"], "short": source["short"],
                       "chars": source["chars"]}  # fmt: skip
        agree += r["reward"] == source["correct"]
    assert f"correct {agree}/{len(rows)} agree" in said
    assert "short: a shaping term, not compared" in said
    assert "kept beside (log_columns): chars" in said


def test_a_completion_cut_at_the_limit_is_length_without_eos(trl_chat_log, chat_import):
    """TRL logs no finish reason: a completion of max_completion_length tokens (the limit read
    off the trainer state's clipped completions) is `length`, its tokens without EOS; the others
    stopped on EOS."""
    from transformers import AutoTokenizer

    _, model_dir, _ = trl_chat_log
    out, said = chat_import
    eos = AutoTokenizer.from_pretrained(model_dir).eos_token_id
    rows = TrajectoryStore(str(out)).scan().to_pylist()
    cut = [r for r in rows if r["finish_reason"] == "length"]
    assert cut and len(cut) < len(rows) and f"{len(cut)} cut at the length limit" in said
    for r in rows:
        if r["finish_reason"] == "length":
            assert len(r["token_ids"]) == LIMIT and r["token_ids"][-1] != eos
        else:
            assert r["token_ids"][-1] == eos and len(r["token_ids"]) <= LIMIT
    assert {r["max_new_tokens"] for r in rows} == {LIMIT}


def test_a_receiver_trains_against_the_conversational_import(trl_chat_log, chat_import, tmp_path):
    """A barely trained tiny qwen, sampling 4 a prompt, against the import's groups of 3: per
    step the gate's candidates equal a count by hand (the receiver failed all 4, the source's 3
    were mixed), every response sent is admitted (delta 0), and the imported tokens reach the
    update."""
    from conftest import small_tiny_spec
    from graft.models.tiny import build_tiny

    out, _ = chat_import
    rows = TrajectoryStore(str(out)).scan().to_pylist()
    peer = {r["prompt_id"]: r["group_successes"] for r in rows}
    assert {r["group_size"] for r in rows} == {GENERATIONS}
    weak = build_tiny(small_tiny_spec("qwen2", "bpe", bpe_vocab_size=300, pretrain_steps=5))
    qwen = f"models=[{{name: qwen, path: '{weak}', optim: {{lr: 2.0e-5}}}}]"
    run = tmp_path / "qwen"
    stored = ["exchange.source=stored", f"exchange.stored.path={out}", "exchange.delta=0.0"]
    _train(run, qwen, "run.steps=2", *CHAT_TASK, *stored)
    own = TrajectoryStore(str(run / "trajectories")).scan(models=["qwen"]).to_pylist()
    key = "x/stored:llama->qwen"
    grafted = 0
    for record in read_metrics(run):
        mine = {r["prompt_id"]: r["group_successes"] for r in own
                if r["step"] == record["step"] - 1 and r["round"] == 0}  # fmt: skip
        found = sum(k == 0 and 0 < peer[p] < GENERATIONS for p, k in mine.items())
        assert record[f"{key}/candidates"] == record[f"{key}/selected"] == found
        assert record[f"{key}/admitted"] == GENERATIONS * found
        assert (record["loss/peer_token_frac"] > 0) == (found > 0)
        assert record["stored/unscored_rows"] == 0
        grafted += found
    assert grafted > 0


def test_each_bad_input_is_refused_in_one_line_and_nothing_is_written(
    trl_chat_log, tmp_path, capsys
):
    """A file without a reward column the others have; a named reward column the log lacks;
    conversations with a model that carries no chat template; a --chat-template that is not
    there."""
    import pyarrow.parquet as pq

    completions, model_dir, _ = trl_chat_log
    base = ["--model", str(model_dir), "--name", "llama", *_sets(CHAT_TASK)]
    folder = tmp_path / "trl_out"
    shutil.copytree(completions.parent, folder)
    second = folder / "completions" / "completions_00002.parquet"
    pq.write_table(pq.read_table(second).drop_columns(["short"]), second)
    bare = _tiny_llama(tmp_path / "bare")  # a model without a chat template
    cases = [
        ((folder / "completions", *base), f"{second}: no reward column 'short'"),
        ((completions, *base, "--reward-columns", "correct,tests"), "no reward column 'tests'"),
        ((completions, "--model", str(bare), *_sets(CHAT_TASK)),
         "the prompt is a conversation and the source model has no chat template"),
        ((completions, *base, "--chat-template", str(tmp_path / "none.jinja")),
         "--chat-template"),
    ]  # fmt: skip
    for i, (args, expected) in enumerate(cases):
        out = tmp_path / f"out{i}"
        assert _import(args[0], out, *args[1:]) == 2, expected
        err = capsys.readouterr().err.strip()
        assert expected in err and "\n" not in err and err.startswith("graft: error: "), err
        assert not out.exists()
