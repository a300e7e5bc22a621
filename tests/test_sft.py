"""`graft sft`: the loss over a batch whatever the micro-batch split, the store's responses
re-verified, deduplicated and split by hand, and a run end to end (it learns, resumes exactly,
and its best checkpoint is a model `graft train` takes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from graft.cli import main
from graft.config import AlgoConfig, ArithmeticConfig, Config, SftConfig
from graft.config.lib import load_config
from graft.groups import make_groups
from graft.rundir import read_metrics
from graft.sft.data import distinct_rows, held_out, select
from graft.sft.loop import best_line
from graft.store import Provenance, StoreWriter, group_rows
from graft.tasks.arithmetic import ArithmeticTask
from graft.training.update import UpdateSettings, minibatch_backward
from graft.types import Completion, Rollout, TrainSequence, Verdict


def _sft_rows(num: int, *, seed: int = 0) -> list[TrainSequence]:
    gen = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(num):
        prompt = torch.randint(
            2, 32, (int(torch.randint(2, 6, (1,), generator=gen)),), generator=gen
        )
        length = int(torch.randint(1, 9, (1,), generator=gen))
        response = torch.randint(2, 32, (length,), generator=gen)
        rows.append(
            TrainSequence(
                tuple(prompt.tolist()),
                tuple(response.tolist()),
                (0.0,) * length,
                0.0,
                objective="sft",
            )
        )
    return rows


def test_sft_gradients_do_not_depend_on_the_micro_batch_split(random_lm):
    """The token-mean NLL of 16 responses of 1-8 tokens, backward in 1 and in 4 micro-batches
    (the update `graft sft` runs: one minibatch, coefficients over the whole batch)."""
    seqs = _sft_rows(16)
    grads, losses = {}, {}
    for micro in (16, 4):
        random_lm.zero_grad(set_to_none=True)
        stats = minibatch_backward(
            random_lm, seqs, UpdateSettings(algo=AlgoConfig(micro_batch_size=micro)), pad_id=0
        )
        grads[micro] = [p.grad.clone() for p in random_lm.parameters() if p.grad is not None]
        losses[micro] = stats["loss"]
    assert losses[16] == pytest.approx(losses[4], abs=1e-6)
    for a, b in zip(grads[16], grads[4], strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
    # the loss is the NLL per token of the whole batch: no row is averaged on its own
    assert any(g.abs().sum() > 0 for g in grads[16])


def _row(step, pid, member, response, *, reward=1.0):
    return {
        "step": step,
        "member": member,
        "prompt_id": pid,
        "prompt": f"q{pid}",
        "gold": "7",
        "skill": "s",
        "response": response,
        "finish_reason": "stop",
        "verifier": "final_number",
        "reward": reward,
    }


def test_rows_deduplicated_re_verified_capped_and_split_by_hand():
    rows = [
        _row(1, "b", 0, "7"),
        _row(0, "a", 1, "7"),
        _row(0, "a", 0, "7"),  # the same (prompt, response) as the row above: once
        _row(0, "a", 2, "6", reward=1.0),  # the store called it correct; this verifier does not
        _row(0, "c", 0, "x7"),
        _row(2, "c", 1, "7."),
    ]
    distinct = distinct_rows(rows)
    assert [(r["step"], r["prompt_id"], r["member"]) for r in distinct] == [
        (0, "a", 0),
        (0, "a", 2),
        (0, "c", 0),
        (1, "b", 0),
        (2, "c", 1),
    ]
    verdicts = [
        Verdict("correct"),
        Verdict("wrong"),
        Verdict("correct"),
        Verdict("correct"),
        Verdict("correct"),
    ]
    cfg = SftConfig(val_fraction=0.5, max_per_prompt=1)
    picked = select(distinct, verdicts, cfg, seed=4, stored_rewards=[r["reward"] for r in distinct])
    val_ids = {p for p in "abc" if held_out(p, seed=4, fraction=0.5)}
    kept = [("a", "7"), ("c", "x7"), ("b", "7")]  # c's second correct response is over the cap
    assert sorted((e.problem.id, e.text) for e in picked.train + picked.val) == sorted(kept)
    assert {e.problem.id for e in picked.val} == val_ids
    assert picked.counts["correct"] == 4 and picked.counts["reward_changed"] == 1
    assert picked.counts["distinct"] == 5
    # the split is a function of (seed, prompt id) alone: about the fraction asked for
    share = sum(held_out(f"p{i}", seed=1, fraction=0.2) for i in range(5000)) / 5000
    assert share == pytest.approx(0.2, abs=0.02)


def _problems(num: int):
    config = ArithmeticConfig(skills=("add:2,2",), num_train=400, num_test=50)
    return ArithmeticTask(config).train_problems()[:num]


def _store(path: Path, *, prompts: int = 48) -> None:
    """A peer's run of two steps: per addition prompt, the right answer twice (one copy a
    duplicate) and a wrong one the store wrongly called correct."""
    problems = _problems(prompts)
    prov = Provenance("peer-run", "peer", "", "", "final_number", "", 1.0, 1.0, 0, 8)
    writer = StoreWriter(str(path), run_id="peer-run", run_meta={}, background=False)
    for step in range(2):
        chunk = problems[step::2]
        rollouts, verdicts = [], []
        for p in chunk:
            texts = [p.gold, p.gold, str(int(p.gold) + 1)]
            comps = tuple(Completion(t, (5,), (-0.5,), "stop") for t in texts)
            rollouts.append(Rollout(p, "peer", (1,), comps))
            verdicts.append((Verdict("correct"),) * 3)
        writer.write(
            "peer", step, group_rows(make_groups(rollouts, verdicts), step=step, prov=prov)
        )
    writer.close()


SMALL = [
    "run.progress=false",
    "task.arithmetic.num_train=400",
    "task.arithmetic.num_test=50",
    "rollout.max_new_tokens=8",
    "algo.micro_batch_size=8",
    "models.0.optim.lr=1e-3",
    "sft.batch_size=16",
    "sft.val_fraction=0.25",
    "eval.num_problems=16",
    "eval.samples=2",
    "eval.temperature=1.0",
    "verify.workers=1",
]


def _sets(*assignments: str) -> list[str]:
    return [x for a in assignments for x in ("--set", a)]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("sft") / "store"
    _store(path)
    return path


def test_graft_sft_learns_resumes_exactly_and_hands_graft_train_a_model(
    store, tiny_paths, tmp_path
):
    model = f"models.0.path={tiny_paths['llama']}"
    sets = _sets(*SMALL, model, "run.steps=6", "run.save_every=2", "eval.every=3")
    straight = tmp_path / "straight"
    assert main(["sft", "--store", str(store), "--out", str(straight), *sets]) == 0
    data = json.loads((straight / "sft_data.json").read_text())
    # 48 prompts x 3 responses; 96 distinct; the wrong answers re-verified wrong (48 changed)
    val = sum(held_out(p.id, seed=0, fraction=0.25) for p in _problems(48))
    assert data["rows"] == 144 and data["distinct"] == 96 and data["correct"] == 48
    assert data["reward_changed"] == 48
    assert (data["train_prompts"], data["val_prompts"]) == (48 - val, val)
    records = read_metrics(straight)
    losses = [r["sft/loss"] for r in records if "sft/loss" in r]
    assert len(losses) == 6 and losses[-1] < losses[0]
    assert [r["step"] for r in records if "sft/val_loss" in r] == [0, 3, 6]
    assert records[0]["sft/val_loss"] > records[-1]["sft/val_loss"]
    assert sum(r["cost/train_tokens"] for r in records[1:]) == records[-1]["cost/cum/train_tokens"]
    best = json.loads((straight / "summary.json").read_text())["best/policy/step"]
    assert best in (0, 3, 6) and (straight / "checkpoints/best/policy/model.safetensors").is_file()

    split = tmp_path / "split"
    first = _sets(*SMALL, model, "run.steps=4", "run.save_every=2", "eval.every=3")
    assert main(["sft", "--store", str(store), "--out", str(split), *first]) == 0
    assert main(["sft", "--resume", str(split), "--set", "run.steps=6"]) == 0
    a = load_file(str(straight / "checkpoints/step_000006/policy/model.safetensors"))
    b = load_file(str(split / "checkpoints/step_000006/policy/model.safetensors"))
    assert all(torch.equal(a[k], b[k]) for k in a)

    then = tmp_path / "grpo"
    grpo = _sets(
        "run.progress=false",
        "run.steps=1",
        "eval.every=0",
        "rollout.prompts_per_step=4",
        "rollout.group_size=2",
        "algo.minibatches=1",
        "verify.workers=1",
        f"models.0.path={straight / 'checkpoints/best/policy'}",
    )
    assert main(["train", "configs/grpo_tiny.yaml", "--out", str(then), *grpo]) == 0


def test_a_tie_hands_on_the_latest_checkpoint_and_says_no_step_beat_the_start(
    store, tiny_paths, tmp_path, capsys
):
    """Weights that barely move (lr 1e-12) under greedy evaluation: every held-out accuracy ties
    the start's. checkpoints/best is the latest of the tied steps, not the untrained step 0, and
    the command and summary.json say plainly that no step beat the start."""
    sets = _sets(
        *SMALL,
        f"models.0.path={tiny_paths['llama']}",
        "models.0.optim.lr=1e-12",
        "eval.temperature=0",
        "eval.samples=1",
        "run.steps=2",
        "eval.every=1",
    )
    run = tmp_path / "tie"
    capsys.readouterr()
    assert main(["sft", "--store", str(store), "--out", str(run), *sets]) == 0
    out = capsys.readouterr().out
    accuracy = [r["eval/sft_val/avg@1"] for r in read_metrics(run) if "eval/sft_val/avg@1" in r]
    assert len(accuracy) == 3 and len(set(accuracy)) == 1  # steps 0, 1, 2 tie
    summary = json.loads((run / "summary.json").read_text())
    assert summary["best/policy/step"] == 2
    assert summary["best/policy/start_value"] == accuracy[0]
    assert summary["best/policy/beat_start"] is False
    best = json.loads((run / "checkpoints/best/best.json").read_text())
    assert best["policy"]["step"] == 2
    line = f"{run / 'checkpoints/best/policy'} holds step 2, the latest checkpoint that tied"
    assert "no step beat the starting model" in out and line in out
    assert "best checkpoint" not in out


def test_what_the_best_checkpoint_holds_is_said_plainly():
    path = Path("run/checkpoints/best/policy")
    info = {"step": 0, "value": 0.5, "suite": "sft_val", "start_value": 0.5, "beat_start": False}
    assert best_line(info, path) == (
        "no step beat the starting model: held-out accuracy 0.500 at step 0 and lower at every "
        f"later evaluation; {path} holds the starting weights (step 0), not a fine-tuned model"
    )
    info = {**info, "step": 4, "value": 0.75, "beat_start": True}
    assert best_line(info, path) == (
        f"best checkpoint (held-out accuracy 0.750 at step 4, up from 0.500 at step 0): {path}"
    )
    last = {"step": 6, "value": None, "suite": "none: no held-out prompt, the last step"}
    assert "no held-out prompt" in best_line(last, path)


def test_an_empty_set_value_names_no_peer():
    """`--set sft.peer_model=` is the empty string (the store's only model), not null; an empty
    optional value is still null."""
    cfg = load_config(Config, None, ["sft.peer_model=", "models.0.zero_contrast.max_responses="])
    assert cfg.sft.peer_model == "" and cfg.models[0].zero_contrast.max_responses is None
