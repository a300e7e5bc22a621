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
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=40,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        tie_word_embeddings=True,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=None,
    )
    return LlamaForCausalLM(cfg).eval()


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
