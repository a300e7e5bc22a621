"""Sharded resume before the first step, and what a sharded policy's ranks are started with and
say: an AdamW state that does not exist yet stays so across K (graft.training.optim_state); the
worker processes of a sharded CPU policy get glibc's mmap threshold; ranks left idle by
`algo.micro_batch_size` x K are warned about once. (The damaged-checkpoint cases, which need a
sharded run's checkpoint, are in tests/test_shard_runs.py.)"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from safetensors.torch import load_file, save_file

from conftest import random_llama
from graft.config import AlgoConfig, OptimConfig, RolloutConfig
from graft.models.modeling import score_sequences
from graft.training.shards import (
    UNSHARDED,
    ShardRank,
    full_state_on_rank0,
    init_shard_group,
    shard_model,
)
from graft.training.update import UpdateSettings, train_on_batch
from graft.types import TrainGroup, TrainSequence

LR = 1e-4


def _groups(model) -> list[TrainGroup]:
    """One rollout batch: 4 prompts x 4 responses with their behavior log-probs, advantages of
    both signs (two minibatches: two AdamW steps)."""
    rng = random.Random(1)
    groups = []
    for p in range(4):
        prompt = tuple(rng.randrange(2, 40) for _ in range(rng.randint(3, 6)))
        responses = [tuple(rng.randrange(2, 40) for _ in range(rng.randint(2, 8))) for _ in "abcd"]
        old = score_sequences(model, [prompt] * 4, responses, pad_id=0)
        seqs = tuple(
            TrainSequence(prompt, r, lp, a) for r, lp, a in zip(responses, old, (1, -1, 0.5, -0.5))
        )
        groups.append(TrainGroup(f"p{p}", seqs))
    return groups


def _train(model, optimizer, shard: ShardRank = UNSHARDED) -> None:
    algo = AlgoConfig(micro_batch_size=2, minibatches=2)
    s = UpdateSettings.from_config(algo, RolloutConfig(max_new_tokens=16), OptimConfig(lr=LR))
    groups = _groups(random_llama(vocab=40, layers=3))  # the same behavior log-probs everywhere
    train_on_batch(model, optimizer, groups, s, pad_id=0, shard=shard)


def _adamw(model) -> torch.optim.AdamW:
    return torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=LR)


def _two_ranks(rank: int, world: int, init: str, root: str) -> None:
    """K = 2: (1) resume the K = 1 checkpoint saved before any step, then one update; (2) a fresh
    policy saves before its first step (the K = 2 checkpoint), then one update."""
    from graft.training.optim_state import load_into_sharded, save_sharded

    torch.set_num_threads(1)
    shard = init_shard_group(rank, world, init_method=init, timeout_s=120)
    out = Path(root)
    try:
        for name in ("one_to_two", "two"):
            model = shard_model(random_llama(vocab=40, layers=3))
            optimizer = _adamw(model)
            if name == "one_to_two":
                load_into_sharded(out / "one", model, optimizer, rank=rank)
            else:
                save_sharded(out / "two", model, optimizer)
            _train(model, optimizer, shard)
            state = full_state_on_rank0(model)
            if rank == 0:
                save_file(state, str(out / f"{name}.safetensors"))
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _relative(a: dict, b: dict) -> float:
    return max(((a[k] - b[k]).norm() / b[k].norm()).item() for k in b)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_checkpoint_saved_before_the_first_step_resumes_at_another_k_as_at_its_own(tmp_path):
    """A checkpoint saved before AdamW's first step (a cold start whose groups all lacked
    contrast) holds no optimizer state. Resumed at another K (1 -> 2 and 2 -> 1), the next update
    lands within 1e-6 of the run resumed at the K that saved it: the first real update is AdamW's
    first, not the second of a zero-gradient step that filled the empty state (0.74x its size)."""
    from graft.training.optim_state import OPTIMIZER_FILE, load_sharded_into_unsharded

    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    fresh = _adamw(random_llama(vocab=40, layers=3))
    torch.save(fresh.state_dict(), one / OPTIMIZER_FILE)  # K = 1, saved before any step
    (one / "policy_state.json").write_text(json.dumps({"num_updates": 0}))
    (two / "policy_state.json").write_text(json.dumps({"num_updates": 0, "shards": 2}))
    model = random_llama(vocab=40, layers=3)
    optimizer = _adamw(model)
    optimizer.load_state_dict(torch.load(one / OPTIMIZER_FILE, weights_only=True))
    _train(model, optimizer)  # resumed at K = 1, as Policy.load does: the reference
    want = {k: v.detach().clone() for k, v in model.state_dict().items()}

    init = f"file://{tmp_path / 'rendezvous'}"
    mp.spawn(_two_ranks, args=(2, init, str(tmp_path)), nprocs=2, join=True)
    two_to_one = random_llama(vocab=40, layers=3)
    optimizer = _adamw(two_to_one)
    load_sharded_into_unsharded(two, two_to_one, optimizer)
    loaded = len(optimizer.state)
    _train(two_to_one, optimizer)

    at_two = load_file(str(tmp_path / "two.safetensors"))  # saved and went on at K = 2
    moved = _relative(random_llama(vocab=40, layers=3).state_dict(), want)
    assert moved > 1e-3  # the update moved the weights, or equality proves nothing
    assert _relative(load_file(str(tmp_path / "one_to_two.safetensors")), want) <= 1e-6
    assert _relative(two_to_one.state_dict(), at_two) <= 1e-6
    assert _relative(at_two, want) <= 1e-6  # saving at K = 2 left the live optimizer as it was
    assert loaded == 0  # there was no state to load


# The two tests below share one started backend: under `pytest -n 2` they run on one worker.
@pytest.fixture(scope="module")
def sharded_backend(tmp_path_factory):
    """grpo_tiny's policy over 2 CPU ranks in the worker-process backend, with a micro-batch (64)
    larger than a minibatch's sequences: rank 1 trains nothing. Started without
    MALLOC_MMAP_THRESHOLD_ in the environment, its processes' stderr going to `backend.stderr`."""
    import os

    from graft.backends import make_backend, policy_specs
    from graft.config import Config, load_config

    sets = ["models.0.shards=2", "run.backend=processes", "algo.micro_batch_size=64"]
    cfg = load_config(Config, "configs/grpo_tiny.yaml", sets)
    stderr = tmp_path_factory.mktemp("backend") / "stderr.txt"
    before = os.environ.pop("MALLOC_MMAP_THRESHOLD_", None)
    kept = os.dup(2)
    try:
        with stderr.open("w") as f:
            os.dup2(f.fileno(), 2)  # what the worker and its rank inherit
            backend = make_backend(policy_specs(cfg), "processes")
    finally:
        os.dup2(kept, 2)
        os.close(kept)
        if before is not None:
            os.environ["MALLOC_MMAP_THRESHOLD_"] = before
    backend.stderr = stderr
    yield backend
    backend.close()


@pytest.mark.xdist_group("sharded_backend")
def test_graft_starts_cpu_ranks_with_glibcs_mmap_threshold_unless_one_is_set(
    sharded_backend, monkeypatch
):
    """Every rank's process of a sharded CPU policy (rank 0, the policy's worker, and rank 1, its
    child) has MALLOC_MMAP_THRESHOLD_=65536 in its environment (a K = 2 rank sampling on the CPU
    held about 630 MB with it, 1050 MB without); the driver's own environment is left as it was;
    a value the user set is kept; ranks on a GPU get nothing."""
    import os

    from graft.procutil import started_with
    from graft.training.shards import rank_environment

    pids = sharded_backend.describe()["llama"]["rank_pids"].split(",")
    assert len(pids) == 2
    for pid in pids:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        assert b"MALLOC_MMAP_THRESHOLD_=65536" in env, pid
    assert "MALLOC_MMAP_THRESHOLD_" not in os.environ
    assert rank_environment("cuda:1") == {}
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "131072")
    assert rank_environment("cpu") == {}
    with started_with({"MALLOC_MMAP_THRESHOLD_": "65536", "GRAFT_TEST_ONLY": "1"}):
        assert os.environ["MALLOC_MMAP_THRESHOLD_"] == "65536"
    assert os.environ["MALLOC_MMAP_THRESHOLD_"] == "131072"
    assert "GRAFT_TEST_ONLY" not in os.environ


@pytest.mark.xdist_group("sharded_backend")
def test_ranks_left_idle_by_the_micro_batch_size_are_warned_about_once(sharded_backend):
    """Two updates whose one micro-batch leaves rank 1 idle: shard/idle_rank_frac says so at
    each, and one line (not one per update) names the policy and a micro-batch size that keeps
    both ranks busy."""
    prompts = [(5, 6, 7, 8), (9, 10, 11, 12)]
    responses = [(13, 14, 15), (16, 17, 18, 19)]
    old = sharded_backend.score({"llama": (prompts, responses)})["llama"]
    groups = [
        TrainGroup(f"g{i}", (TrainSequence(p, r, lp, 1.0), TrainSequence(p, r[:2], lp[:2], -1.0)))
        for i, (p, r, lp) in enumerate(zip(prompts, responses, old))
    ]
    for seed in (0, 1):
        stats = sharded_backend.train({"llama": groups}, seeds={"llama": seed})["llama"]
        assert stats["shard/idle_rank_frac"] == 0.5
    said = [line for line in sharded_backend.stderr.read_text().splitlines() if "idle" in line]
    assert len(said) == 1, said
    assert "policy 'llama'" in said[0] and "algo.micro_batch_size=64" in said[0]
    assert "algo.micro_batch_size <= 1 gives every rank one" in said[0]
