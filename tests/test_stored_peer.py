"""Stored-peer GRAFT through the real CLI: a GRPO run's store feeds another model's training."""

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from graft.cli import main
from graft.rundir import read_metrics
from graft.store import StoreWriter, TrajectoryStore

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "graft_tiny.yaml"
COMMON = [
    "run.progress=false",
    "run.threads=1",
    "eval.every=0",
    "rollout.prompts_per_step=8",
    "rollout.group_size=4",
    "algo.minibatches=2",
    "verify.workers=1",
]


def _run(out, *sets, config=None):
    args = ["train", *([str(config)] if config else []), "--out", str(out)]
    for s in [*COMMON, *sets]:
        args += ["--set", s]
    return main(args)


def _solo(name, preset):
    return [
        f"models.0.name={name}",
        f"models.0.path=tiny:{preset}",
        "models.0.optim.lr=2e-5",
        "rollout.max_new_tokens=8",
        "algo.micro_batch_size=64",
    ]


@pytest.fixture(scope="module")
def llama_grpo_store(tmp_path_factory):
    """A finished, independent GRPO run of the llama policy; its rollouts land in its store."""
    out = tmp_path_factory.mktemp("llama_grpo")
    assert _run(out, *_solo("llama", "llama-char-add"), "run.steps=4") == 0
    return out / "trajectories"


def test_grpo_run_writes_all_rollouts(llama_grpo_store):
    store = TrajectoryStore(str(llama_grpo_store))
    info = store.info()
    assert info["models"]["llama"]["rows"] == 4 * 8 * 4  # every step, prompt and response
    assert info["models"]["llama"]["steps"] == [0, 3] and info["models"]["llama"]["has_logprobs"]
    assert store.validate().ok
    (run,) = store.runs().values()
    assert run["config"]["models"][0]["name"] == "llama" and "torch" in run["versions"]


def test_train_from_a_stored_peer(tmp_path, llama_grpo_store):
    out = tmp_path / "qwen_from_llama"
    assert (
        _run(
            out,
            *_solo("qwen", "qwen2-bpe-add"),
            "run.steps=4",
            "exchange.source=stored",
            f"exchange.stored.path={llama_grpo_store}",
            "exchange.stored.records=same_step",
            "exchange.delta=0.0",
        )
        == 0
    )
    records = read_metrics(out)
    key = "x/stored:llama->qwen"
    assert all(r["stored/reverified"] == 8 * 4 for r in records)
    assert all(r["stored/prompts_missing"] == 0 for r in records)
    assert sum(r["stored/reward_changed"] for r in records) == 0  # same verifier
    assert sum(r[f"{key}/selected"] for r in records) > 0
    assert sum(r[f"{key}/admitted"] for r in records) > 0
    assert any(r["loss/peer_token_frac"] > 0 for r in records)


def test_a_disagreeing_receiver_verifier_changes_rewards(tmp_path, llama_grpo_store):
    out = tmp_path / "inverted"
    assert (
        _run(
            out,
            *_solo("qwen", "qwen2-bpe-add"),
            "run.steps=2",
            "exchange.source=stored",
            f"exchange.stored.path={llama_grpo_store}",
            "verify.verifier=disagreeing_verifier:inverted",
        )
        == 0
    )
    records = read_metrics(out)
    assert all(r["stored/reward_changed"] == r["stored/reverified"] > 0 for r in records)


def test_missing_peer_prompts_mean_no_transfer(tmp_path, llama_grpo_store):
    out = tmp_path / "other_prompts"
    assert (
        _run(
            out,
            *_solo("qwen", "qwen2-bpe-add"),
            "run.steps=1",
            "exchange.source=stored",
            f"exchange.stored.path={llama_grpo_store}",
            "task.arithmetic.seed=99",
        )
        == 0
    )
    (record,) = read_metrics(out)
    assert record["stored/prompts_missing"] == 8 and record["stored/prompts_found"] == 0
    assert record["x/stored:llama->qwen/selected"] == 0


def test_records_without_logprobs_need_a_receiver_only_weight(tmp_path, llama_grpo_store, capsys):
    source = TrajectoryStore(str(llama_grpo_store))
    stripped = tmp_path / "no_logprobs"
    writer = StoreWriter(str(stripped), run_id="imported", run_meta={}, background=False)
    for shard in source.shards():
        table = source.read_shard(shard)
        cols = table.to_pydict()
        cols["logprobs"] = [[] for _ in cols["logprobs"]]
        writer.write("llama", shard.step, cols)
    writer.close()
    out = tmp_path / "refused"
    code = _run(
        out,
        *_solo("qwen", "qwen2-bpe-add"),
        "run.steps=1",
        "exchange.source=stored",
        f"exchange.stored.path={stripped}",
    )
    err = capsys.readouterr().err
    assert code == 2 and "exchange.ablation.weight=paper" in err and "receiver_relative" in err
    assert (
        _run(
            out,
            *_solo("qwen", "qwen2-bpe-add"),
            "run.steps=1",
            "exchange.source=stored",
            f"exchange.stored.path={stripped}",
            "exchange.ablation.weight=receiver_relative",
        )
        == 0
    )


@pytest.mark.slow
def test_stored_mode_reproduces_the_online_direction(tmp_path):
    """With an online run's own store, stored mode selects the same prompts, gives the same
    weights, and (one direction, no balancing) trains the receiver to the same weights."""
    online = tmp_path / "online"
    assert _run(online, "run.steps=3", "exchange.balancing=false", config=CONFIG) == 0
    stored = tmp_path / "stored"
    assert (
        _run(
            stored,
            *_solo("qwen", "qwen2-bpe-add"),
            "run.steps=3",
            "exchange.source=stored",
            f"exchange.stored.path={online / 'trajectories'}",
            "exchange.stored.model=llama",
            "exchange.stored.records=same_step",
            "exchange.balancing=false",
        )
        == 0
    )
    a, b = read_metrics(online), read_metrics(stored)
    compared = [
        "candidates",
        "selected",
        "responses_sent",
        "admitted",
        "dropped_weight",
        "w_mean",
        "s_p50_correct",
        "s_p50_wrong",
    ]
    for ra, rb in zip(a, b):
        for key in compared:
            va, vb = ra.get(f"x/llama->qwen/{key}"), rb.get(f"x/stored:llama->qwen/{key}")
            assert va == pytest.approx(vb, abs=1e-6), (ra["step"], key, va, vb)
        assert ra["m/qwen/reward/mean"] == rb["reward/mean"]
    assert sum(r["x/llama->qwen/admitted"] for r in a) > 0
    wa = load_file(str(online / "checkpoints/step_000003/qwen/model.safetensors"))
    wb = load_file(str(stored / "checkpoints/step_000003/qwen/model.safetensors"))
    assert all(torch.allclose(wa[k], wb[k], atol=1e-6, rtol=0) for k in wa)


def test_resume_rolls_the_store_back_to_the_checkpoint(tmp_path):
    out = tmp_path / "resumed"
    assert _run(out, *_solo("llama", "llama-char-add"), "run.steps=2", "run.save_every=1") == 0
    # pretend the run died after writing step 2's shard but before its checkpoint
    store = TrajectoryStore(str(out / "trajectories"))
    extra = store.read_shard(store.shards()[-1]).to_pydict()
    run_id = store.shards()[0].run_id
    writer = StoreWriter(str(out / "trajectories"), run_id=run_id, run_meta={}, background=False)
    writer.write("llama", 7, extra)
    writer.close()
    assert main(["train", "--resume", str(out), "--set", "run.steps=3"]) == 0
    steps = sorted(s.step for s in TrajectoryStore(str(out / "trajectories")).shards())
    assert steps == [0, 1, 2]


def _hand_advantages(rewards: list[float], eps: float = 1e-6) -> list[float]:
    """GRPO by hand: (r - mean) / (sample std + eps); 0 for every member of a group without
    contrast."""
    n = len(rewards)
    mean = sum(rewards) / n
    std = (sum((r - mean) ** 2 for r in rewards) / (n - 1)) ** 0.5
    return [(r - mean) / (std + eps) for r in rewards]


def test_the_update_gets_the_peers_own_advantages_from_its_record_of_the_same_step(
    tmp_path, llama_grpo_store
):
    """Each step, the peer responses the receiver trains on carry the advantages of the peer's
    stored group of that same step (its re-verified rewards, GRPO by hand), never ones made from
    the receiver's rewards, nor a record of another step."""
    from graft.config import Config, load_config
    from graft.trainer import Trainer

    sets = [*COMMON, *_solo("qwen", "qwen2-bpe-add"), "run.steps=4", "exchange.source=stored",
            f"exchange.stored.path={llama_grpo_store}", "exchange.stored.records=same_step",
            "exchange.delta=0.0", f"run.out_dir={tmp_path / 'qwen'}"]  # fmt: skip
    trainer = Trainer(load_config(Config, None, sets))
    batches = []
    train = trainer.backend.train

    def recording(b, **kwargs):
        batches.append({name: list(groups) for name, groups in b.items()})
        return train(b, **kwargs)

    trainer.backend.train = recording
    try:
        trainer.run(tmp_path / "qwen")
    finally:
        trainer.close()
    rows = TrajectoryStore(str(llama_grpo_store)).scan(models=["llama"]).to_pylist()
    peer_groups = 0
    for step, batch in enumerate(batches):
        stored = {}
        for r in sorted((r for r in rows if r["step"] == step), key=lambda r: r["member"]):
            stored.setdefault(r["prompt_id"], []).append(r["reward"])
        for group in (g for g in batch["qwen"] if g.is_peer):
            want = sorted(_hand_advantages(stored[group.problem_id]))
            got = sorted(q.advantage for q in group.sequences)
            assert len(got) == len(want) and got == pytest.approx(want, abs=1e-9), (step, group)
            assert any(a != 0 for a in got)  # a mixed group: the peer's contrast, not zeros
            peer_groups += 1
    assert len(batches) == 4 and peer_groups > 0


def _peer_batches(tmp_path, sets: list[str]) -> list[dict]:
    """Each step's training batch of a run (the receiver's groups, own and peer)."""
    from graft.config import Config, load_config
    from graft.trainer import Trainer

    trainer = Trainer(load_config(Config, None, [*sets, f"run.out_dir={tmp_path}"]))
    batches = []
    train = trainer.backend.train

    def recording(b, **kwargs):
        batches.append({name: list(groups) for name, groups in b.items()})
        return train(b, **kwargs)

    trainer.backend.train = recording
    try:
        trainer.run(tmp_path)
    finally:
        trainer.close()
    return batches


def test_shuffled_peer_rewards_keep_the_gate_and_give_each_program_another_members_reward(
    tmp_path, llama_grpo_store
):
    """The negative control: the same prompts grafted, the same programs, each group's
    advantages the same values, but on other members (the peer's evidence made random). From the
    first update on the two receivers differ, so their later gates may differ too: the first
    step grafts the same prompts, and every prompt both runs graft gets the same programs."""
    sets = [*COMMON, *_solo("qwen", "qwen2-bpe-add"), "run.steps=4", "exchange.source=stored",
            f"exchange.stored.path={llama_grpo_store}", "exchange.stored.records=same_step",
            "exchange.delta=0.0"]  # fmt: skip
    verified = _peer_batches(tmp_path / "verified", sets)
    shuffled = _peer_batches(tmp_path / "shuffled", [*sets, "exchange.stored.rewards=shuffled"])
    moved = 0
    for step, (a, b) in enumerate(zip(verified, shuffled, strict=True)):
        pa, pb = ({g.problem_id: g for g in x["qwen"] if g.is_peer} for x in (a, b))
        if step == 0:  # the same weights: the same gate
            assert list(pa) == list(pb)
        for ga, gb in ((pa[p], pb[p]) for p in pa.keys() & pb.keys()):
            assert [q.response_ids for q in ga.sequences] == [q.response_ids for q in gb.sequences]
            adv_a, adv_b = ([q.advantage for q in g.sequences] for g in (ga, gb))
            assert sorted(adv_a) == pytest.approx(sorted(adv_b))
            moved += adv_a != adv_b
    assert moved > 0


def test_unclipped_peer_updates_leave_only_the_peer_tokens_unclipped(tmp_path, llama_grpo_store):
    """peer_update=unclipped (the token clip's control): the peer responses train with the
    objective `unclipped`, none of their tokens is clipped, the receiver's own still are."""
    sets = [*COMMON, *_solo("qwen", "qwen2-bpe-add"), "run.steps=4", "exchange.source=stored",
            f"exchange.stored.path={llama_grpo_store}", "exchange.stored.records=same_step",
            "exchange.delta=0.0", "exchange.ablation.peer_update=unclipped"]  # fmt: skip
    batches = _peer_batches(tmp_path / "run", sets)
    objectives = {(g.is_peer, q.objective) for b in batches for g in b["qwen"] for q in g.sequences}
    assert (True, "unclipped") in objectives and (True, "pg") not in objectives
    assert (False, "pg") in objectives
    records = read_metrics(tmp_path / "run")
    assert any(r["loss/peer_token_frac"] > 0 for r in records)
    assert all(r.get("loss/peer_clip_frac", 0.0) == 0.0 for r in records)
