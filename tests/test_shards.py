"""FSDP2 sharding of one policy's update (graft.training.shards): two ranks on CPU with gloo give
the weights one rank gives after three steps on the same training batches, to 2e-6 relative (per
tensor, in norm). That is the noise of float addition order: cutting one rank's minibatches into
other micro-batches moves the same weights by 5e-7 here, two ranks by 7e-7."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from conftest import random_llama
from graft.config import AlgoConfig, OptimConfig, RolloutConfig
from graft.models.modeling import score_sequences
from graft.training.shards import (
    UNSHARDED,
    Lockstep,
    ShardRank,
    full_state_on_rank0,
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
    if shard.sharded:  # as in a run: a forward without gradients (sampling) before the update
        stepped = Lockstep(model, shard, pad_id=0)
        with torch.no_grad():
            if shard.rank == 0:
                stepped(input_ids=torch.ones(2, 5, dtype=torch.long), use_cache=False)
            stepped.drain()
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
        state = full_state_on_rank0(model)
        if rank == 0:
            norms = json.dumps([s["grad_norm"] for s in stats])
            save_file(state, out, metadata={"grad_norm": norms})
        dist.barrier()  # leave together: a rank tearing down gloo alone can abort at exit
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


def _overflow_rank(rank: int, world: int, init: str, out: str) -> None:
    """float16 compute over float32 shards: one update with an overflow in rank 1's own shard of
    one gradient alone (where no reduction carries it to rank 0), then one without."""
    from graft.models.precision import Precision

    torch.set_num_threads(1)
    shard = init_shard_group(rank, world, init_method=init, timeout_s=120)
    try:
        model = _model()
        groups = _batches(model)[0]
        shard_model(model, compute_dtype=torch.float16)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        precision = Precision("float16", "float32", sharded=True)
        unscale, armed = precision.unscale, [True]

        def overflow_on_rank1(optimizer):
            if rank == 1 and armed[0]:
                next(model.parameters()).grad.to_local().view(-1)[0] = float("inf")
            unscale(optimizer)

        precision.unscale = overflow_on_rank1
        algo = AlgoConfig(micro_batch_size=4, minibatches=1)
        s = UpdateSettings.from_config(algo, RolloutConfig(max_new_tokens=16), OptimConfig())
        before, scale = full_state_on_rank0(model), precision.scaler.get_scale()
        first = train_on_batch(model, opt, groups, s, pad_id=0, precision=precision, shard=shard)
        after_first, halved = full_state_on_rank0(model), precision.scaler.get_scale()
        armed[0] = False
        second = train_on_batch(model, opt, groups, s, pad_id=0, precision=precision, shard=shard)
        moved = full_state_on_rank0(model)
        result = {
            "skipped": [first["optim/skipped_steps"], second["optim/skipped_steps"]],
            "scales": [scale, halved],
            "unchanged": all(torch.equal(before[k], after_first[k]) for k in before),
            "moved": any(not torch.equal(before[k], moved[k]) for k in before),
        }
        gathered = [None] * world
        dist.all_gather_object(gathered, result)
        if rank == 0:
            Path(out).write_text(json.dumps(gathered))
        dist.barrier()
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_float16_ranks_skip_an_overflowed_step_together(tmp_path):
    """An overflow that only rank 1's shard holds makes every rank skip that step and halve its
    loss scale (FSDP's ShardedGradScaler agrees across ranks; a per-rank scaler would let rank 0
    step alone); the next step is taken by all."""
    out = tmp_path / "ranks.json"
    init = f"file://{tmp_path / 'rendezvous'}"
    mp.spawn(_overflow_rank, args=(2, init, str(out)), nprocs=2, join=True)
    ranks = json.loads(out.read_text())
    assert [r["skipped"] for r in ranks] == [[1.0, 0.0], [1.0, 0.0]]
    assert [r["scales"] for r in ranks] == [[65536.0, 32768.0]] * 2
    assert ranks[0]["unchanged"] and ranks[0]["moved"]


def test_what_a_sharded_policy_does_not_support_yet_is_refused_in_one_line():
    from graft.config import Config, ConfigError, load_config

    base = ["models.0.shards=2"]
    for extra, what in (
        (["run.backend=inprocess"], "run.backend=inprocess"),
        (["models.0.lora.r=4"], "LoRA adapters"),
        (["models.0.dtype=bfloat16", "models.0.param_dtype=bfloat16"], "param_dtype bfloat16"),
    ):
        with pytest.raises(ConfigError, match=rf"models\.0\.shards: .*does not support {what}"):
            load_config(Config, "configs/grpo_tiny.yaml", [*base, *extra])
    with pytest.raises(ConfigError, match=r"models\.0\.shards"):
        load_config(Config, "configs/grpo_tiny.yaml", ["models.0.shards=0"])
    assert load_config(Config, "configs/grpo_tiny.yaml", base).models[0].shards == 2
    vllm = load_config(Config, "configs/grpo_tiny.yaml", [*base, "rollout.engine=vllm"])
    assert vllm.rollout.engine == "vllm"  # fed from the shards (tests/test_vllm.py)


def test_each_rank_builds_from_its_own_share_and_device():
    """rank_spec: threads split K ways; on GPUs rank r of a worker process takes the device
    index + r, while a Ray actor (which sees only its own GPU) keeps the one it is given."""
    import dataclasses

    from graft.config import Config, load_config
    from graft.training.policy import PolicySpec
    from graft.training.sharded_policy import rank_spec

    cfg = load_config(Config, "configs/grpo_tiny.yaml", ["models.0.shards=2"])
    spec = PolicySpec(model=cfg.models[0], rollout=cfg.rollout, algo=cfg.algo, seed=0, threads=4)

    def on(device: str) -> PolicySpec:
        return dataclasses.replace(spec, model=dataclasses.replace(spec.model, device=device))

    assert rank_spec(on("cpu"), 1).threads == 2
    assert rank_spec(on("cpu"), 1).model.device == "cpu"
    assert rank_spec(on("cuda"), 0).model.device == "cuda:0"
    assert rank_spec(on("cuda"), 1).model.device == "cuda:1"
    assert rank_spec(on("cuda:2"), 1).model.device == "cuda:3"
    assert rank_spec(on("cuda"), 1, own_device=True).model.device == "cuda"
    assert rank_spec(dataclasses.replace(spec, threads=0), 1).threads == 0


def test_rank_0_reads_the_whole_model_into_host_memory_only_once():
    """reading_spec: rank 0's one full read of the model (to fill the shards) goes to host
    memory, never to its device, and makes no KL reference copy nor checkpointed layers; every
    other setting is the policy's."""

    from graft.config import Config, load_config
    from graft.training.policy import PolicySpec
    from graft.training.sharded_policy import rank_spec, reading_spec

    sets = ["models.0.shards=2", "models.0.device=cuda:1", "algo.kl_coef=0.1"]
    cfg = load_config(
        Config, "configs/grpo_tiny.yaml", [*sets, "models.0.activation_checkpointing=true"]
    )
    spec = rank_spec(
        PolicySpec(model=cfg.models[0], rollout=cfg.rollout, algo=cfg.algo, seed=3, threads=4), 0
    )
    read = reading_spec(spec)
    assert (read.model.device, read.algo.kl_coef, read.model.activation_checkpointing) == (
        "cpu",
        0.0,
        False,
    )
    assert (read.rollout, read.seed, read.threads) == (spec.rollout, spec.seed, spec.threads)
    assert (read.model.path, read.model.shards, read.model.optim, read.model.dtype) == (
        spec.model.path,
        spec.model.shards,
        spec.model.optim,
        spec.model.dtype,
    )
    assert spec.model.device == "cuda:1" and spec.algo.kl_coef == 0.1  # the policy's own


def _build_rank(rank: int, world: int, init: str, out: str) -> None:
    """Rank `rank`: build the model sharded from its config, fill it from rank 0's weights."""
    from graft.training.shards import build_sharded, load_full_weights, share_from_rank0

    torch.set_num_threads(1)
    shard = init_shard_group(rank, world, init_method=init, timeout_s=120)
    try:
        full = _model() if rank == 0 else None
        config = share_from_rank0(full.config if full is not None else None)
        model = build_sharded(config, shard, device="cpu", compute_dtype=None)
        tied = model.lm_head.weight is model.model.embed_tokens.weight
        local = sum(p.to_local().numel() for p in model.parameters())
        load_full_weights(model, full.state_dict() if full is not None else {})
        state = full_state_on_rank0(model)
        buffers = {n: b.clone() for n, b in model.named_buffers()}
        if rank == 0:
            want_buffers = dict(full.named_buffers())
            same = all(torch.equal(state[k], v) for k, v in full.state_dict().items())
            same_buffers = all(torch.equal(buffers[k], want_buffers[k]) for k in want_buffers)
            total = sum(p.numel() for p in full.parameters())
            out_info = {"tied": tied, "same": same, "buffers": same_buffers,
                        "local": local, "total": total}  # fmt: skip
            with open(out, "w") as f:
                json.dump(out_info, f)
        dist.barrier()
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_rank_builds_only_its_shards_from_the_config(tmp_path):
    """build_sharded on 2 ranks: each holds half the parameters (never the whole model: they
    are made on the meta device), the tied head stays tied, the rotary buffers are the real
    ones, and rank 0's weights arrive whole."""
    out = tmp_path / "info.json"
    init = f"file://{tmp_path / 'rendezvous'}"
    mp.spawn(_build_rank, args=(2, init, str(out)), nprocs=2, join=True)
    info = json.loads(out.read_text())
    assert info["tied"] and info["same"] and info["buffers"]
    assert info["local"] * 2 == pytest.approx(info["total"], rel=0.01)
