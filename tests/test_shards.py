"""FSDP2 sharding of one policy's update (graft.training.shards): two ranks on CPU with gloo give
the weights one rank gives after three steps on the same training batches, to 2e-6 relative (per
tensor, in norm). That is the noise of float addition order: cutting one rank's minibatches into
other micro-batches moves the same weights by 5e-7 here, two ranks by 7e-7."""

from __future__ import annotations

import json
import random

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from conftest import random_llama
from graft.config import AlgoConfig, OptimConfig, RolloutConfig
from graft.training.modeling import score_sequences
from graft.training.shards import (
    UNSHARDED,
    ShardRank,
    full_state_dict,
    init_shard_group,
    my_chunks,
    shard_model,
    sum_across_ranks,
)
from graft.training.update import UpdateSettings, train_on_batch
from graft.types import TrainGroup, TrainSequence

STEPS = 3
REL_TOL = 2e-6


def _model():
    return random_llama(vocab=40, layers=3)


def _batches(model) -> list[list[TrainGroup]]:
    """Three steps' batches: 6 prompts x 4 responses of varied lengths, with their behavior
    log-probs under the initial model, and advantages of both signs (some exactly 0)."""
    rng = random.Random(0)
    out = []
    for step in range(STEPS):
        groups = []
        for p in range(6):
            prompt = tuple(rng.randrange(2, 40) for _ in range(rng.randint(3, 6)))
            lengths = [rng.randint(2, 9) for _ in range(4)]
            responses = [tuple(rng.randrange(2, 40) for _ in range(n)) for n in lengths]
            old = score_sequences(model, [prompt] * 4, responses, pad_id=0)
            advantages = [rng.choice((-1.0, -0.5, 0.0, 0.5, 1.0)) for _ in range(4)]
            seqs = tuple(
                TrainSequence(prompt, r, lp, a) for r, lp, a in zip(responses, old, advantages)
            )
            groups.append(TrainGroup(f"s{step}p{p}", seqs))
        out.append(groups)
    return out


def _settings() -> UpdateSettings:
    algo = AlgoConfig(micro_batch_size=5, minibatches=2)
    return UpdateSettings.from_config(algo, RolloutConfig(max_new_tokens=16), OptimConfig(lr=1e-3))


def _train(model, shard: ShardRank) -> list[dict[str, float]]:
    batches = _batches(model)  # before sharding: the same on every rank
    if shard.sharded:
        shard_model(model)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    return [
        train_on_batch(model, opt, groups, _settings(), pad_id=0, seed=i, shard=shard)
        for i, groups in enumerate(batches)
    ]


def _rank(rank: int, world: int, init: str, out: str) -> None:
    torch.set_num_threads(1)
    shard = init_shard_group(rank, world, init_method=init, timeout_s=120)
    try:
        model = _model()
        stats = _train(model, shard)
        state = full_state_dict(model)
        if rank == 0:
            norms = json.dumps([s["grad_norm"] for s in stats])
            save_file(state, out, metadata={"grad_norm": norms})
    finally:
        dist.destroy_process_group()


def test_my_chunks_pads_the_ranks_with_fewer_micro_batches():
    chunks = [[0, 1], [2, 3], [4, 5]]
    assert my_chunks(chunks, UNSHARDED) == chunks
    assert my_chunks(chunks, ShardRank(0, 2)) == [[0, 1], [4, 5]]
    assert my_chunks(chunks, ShardRank(1, 2)) == [[2, 3], None]
    assert sum_across_ranks({"loss": 1.5}, UNSHARDED) == {"loss": 1.5}


@pytest.mark.timeout(300)
def test_two_ranks_give_the_weights_of_one(tmp_path):
    torch.manual_seed(0)
    reference = _model()
    ref_stats = _train(reference, UNSHARDED)
    want = {k: v.detach().clone() for k, v in reference.state_dict().items()}

    out = tmp_path / "sharded.safetensors"
    init = f"file://{tmp_path / 'rendezvous'}"
    mp.spawn(_rank, args=(2, init, str(out)), nprocs=2, join=True)
    got = load_file(str(out))

    assert got.keys() == want.keys()
    moved = 0.0
    start = _model().state_dict()
    worst = {}
    for key in want:
        worst[key] = ((got[key] - want[key]).norm() / want[key].norm()).item()
        moved = max(moved, (want[key] - start[key]).abs().max().item())
    assert max(worst.values()) <= REL_TOL, worst
    with safe_open(str(out), "pt") as f:
        norms = json.loads(f.metadata()["grad_norm"])
    want_norms = [s["grad_norm"] for s in ref_stats]
    assert norms == pytest.approx(want_norms, rel=1e-5)  # clipping saw the same global norm
    assert moved > 1e-3  # the three steps moved the weights, or equality proves nothing


# ------------------------------------------------------- a sharded policy in a training run

RUN = [
    "run.steps=3",
    "run.save_every=1",
    "run.backend=processes",
    "run.progress=false",
    "eval.every=0",
    "rollout.prompts_per_step=8",
    "rollout.group_size=4",
]


def _weights(run_dir, step=3):
    return load_file(str(run_dir / f"checkpoints/step_{step:06d}/llama/model.safetensors"))


def _relative(a, b) -> float:
    return max(((a[k] - b[k]).norm() / b[k].norm()).item() for k in b)


@pytest.mark.timeout(600)
def test_a_sharded_policy_trains_resumes_and_checkpoints_as_one_rank(tmp_path):
    """`models.0.shards: 2` through `graft train` (worker-process backend, gloo): the same
    rewards and, after 3 GRPO steps, the weights of `shards: 1` to 1e-6; a checkpoint with the
    consolidated model and one AdamW file per rank; a resume from step 2 ends bit for bit where
    the uninterrupted sharded run ends."""
    from graft.cli import main
    from graft.rundir import read_metrics, verify_checkpoint

    config = "configs/grpo_tiny.yaml"
    for name, shards, steps in (("one", 1, 3), ("two", 2, 3), ("resumed", 2, 2)):
        args = [
            "train",
            config,
            "--out",
            str(tmp_path / name),
            "--set",
            f"models.0.shards={shards}",
        ]
        args += [a for o in [*RUN, f"run.steps={steps}"] for a in ("--set", o)]
        assert main(args) == 0
    assert main(["train", "--resume", str(tmp_path / "resumed"), "--set", "run.steps=3"]) == 0

    one, two = _weights(tmp_path / "one"), _weights(tmp_path / "two")
    assert _relative(two, one) <= 1e-6
    rewards = [[r.get("reward/mean") for r in read_metrics(tmp_path / d)] for d in ("one", "two")]
    assert rewards[0] == rewards[1]
    resumed = _weights(tmp_path / "resumed")
    assert all(torch.equal(resumed[k], two[k]) for k in two)
    checkpoint = tmp_path / "two" / "checkpoints" / "step_000003"
    verify_checkpoint(checkpoint)
    files = sorted(p.name for p in (checkpoint / "llama" / "optimizer").iterdir())
    assert files == [".metadata", "__0_0.distcp", "__1_0.distcp"]
    state = json.loads((checkpoint / "llama" / "policy_state.json").read_text())
    assert state == {"num_updates": 6, "shards": 2}


def test_what_a_sharded_policy_does_not_support_yet_is_refused_in_one_line():
    from graft.config import Config, ConfigError, load_config

    base = ["models.0.shards=2"]
    for extra, what in (
        (["run.backend=inprocess"], "run.backend=inprocess"),
        (["algo.kl_coef=0.1"], "a KL term"),
        (["models.0.lora.r=4"], "LoRA adapters"),
        (["models.0.dtype=float16"], "dtype float16/float32"),
    ):
        with pytest.raises(ConfigError, match=rf"models\.0\.shards: .*does not support {what}"):
            load_config(Config, "configs/grpo_tiny.yaml", [*base, *extra])
    with pytest.raises(ConfigError, match=r"models\.0\.shards"):
        load_config(Config, "configs/grpo_tiny.yaml", ["models.0.shards=0"])
    assert load_config(Config, "configs/grpo_tiny.yaml", base).models[0].shards == 2


def _train_args(out, *overrides: str, config: str = "configs/grpo_tiny.yaml") -> list[str]:
    return ["train", config, "--out", str(out)] + [
        a for o in [*RUN, *overrides] for a in ("--set", o)
    ]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_killed_rank_or_driver_ends_the_run_and_resume_matches_an_uninterrupted_run(tmp_path):
    """Rank 1 of a sharded policy killed mid-run: the run ends in one line naming the policy and
    the rank, well within the collective timeout, with its last checkpoint intact. The driver
    killed with SIGKILL: its ranks go with it. Either way `--resume` ends with the weights of the
    uninterrupted sharded run, bit for bit."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from graft.cli import main
    from graft.rundir import latest_checkpoint, verify_checkpoint

    sharded = ("models.0.shards=2", "run.save_every=2")
    assert main(_train_args(tmp_path / "whole", "run.steps=4", *sharded)) == 0
    want = _weights(tmp_path / "whole", 4)
    for victim in ("rank", "driver"):
        out = tmp_path / victim
        cmd = [sys.executable, "-m", "graft.cli", *_train_args(out, "run.steps=40", *sharded)]
        proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 300
        while time.time() < deadline and not (
            (out / "checkpoints" / "step_000002").is_dir() and (out / "workers.json").is_file()
        ):
            time.sleep(0.2)
        pids = json.loads((out / "workers.json").read_text())["llama"]["rank_pids"].split(",")
        start = time.time()
        os.kill(int(pids[1]) if victim == "rank" else proc.pid, signal.SIGKILL)
        _, err = proc.communicate(timeout=300)
        if victim == "rank":
            assert proc.returncode == 2, err
            assert time.time() - start < 120
            last = err.strip().splitlines()[-1]
            assert "policy 'llama': rank 1 of 2 died" in last, last
        verify_checkpoint(latest_checkpoint(out))
        assert main(["train", "--resume", str(out), "--set", "run.steps=4"]) == 0
        got = _weights(out, 4)
        assert all(torch.equal(got[k], want[k]) for k in want), victim


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_graft_pair_with_one_sharded_policy_trains_as_the_unsharded_pair(tmp_path):
    from graft.cli import main

    graft = "configs/graft_tiny.yaml"
    assert main(_train_args(tmp_path / "one", config=graft)) == 0
    assert main(_train_args(tmp_path / "two", "models.0.shards=2", config=graft)) == 0
    for name in ("llama", "qwen"):
        a = load_file(str(tmp_path / f"one/checkpoints/step_000003/{name}/model.safetensors"))
        b = load_file(str(tmp_path / f"two/checkpoints/step_000003/{name}/model.safetensors"))
        assert _relative(b, a) <= 1e-6, name
