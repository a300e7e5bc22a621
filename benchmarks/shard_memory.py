"""Memory and time of one policy's update at K = 1 and K = 2 or 4 ranks (FSDP2, gloo, CPU).

A SmolLM2-135M- or 360M-sized Llama built from its config (random weights, nothing downloaded),
float32 master weights, AdamW; at K = 2 or 4 each rank builds its shards from the config and rank 0
fills them from its full model, which it then lets go (as a sharded policy does). For each K,
every rank reports the bytes it holds of the parameters, the gradients and the AdamW state (its
local shards, after an update), its peak resident memory, and the time of an update of the same
batch (the second of two, after a warm-up). K = 1 is the unsharded update `models.N.shards: 1`
runs.

    .venv/bin/python benchmarks/shard_memory.py --size 360m
"""

from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from common import process_peak_rss_mib

from graft.config import AlgoConfig, OptimConfig, RolloutConfig
from graft.models.modeling import checkpoint_layers, head_gradients_in_place
from graft.training.shards import (
    UNSHARDED,
    ShardRank,
    build_sharded,
    init_shard_group,
    load_full_weights,
)
from graft.training.update import UpdateSettings, minibatch_backward, train_on_batch
from graft.types import TrainGroup, TrainSequence

SIZES = {  # SmolLM2's shapes: (hidden, intermediate, layers, heads, kv heads)
    "135m": (576, 1536, 30, 9, 3),
    "360m": (960, 2560, 32, 15, 5),
}


def smollm2_config(size: str):
    from transformers import LlamaConfig

    hidden, intermediate, layers, heads, kv = SIZES[size]
    return LlamaConfig(
        vocab_size=49152,
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=None,
    )


def smollm2_sized(size: str):
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    return LlamaForCausalLM(smollm2_config(size)).eval()


def _rss_mib() -> float:
    """This process's peak resident memory (VmHWM), in MiB. Not getrusage's ru_maxrss: Linux
    carries that across fork and exec, so a rank spawned after the K = 1 run would report the
    K = 1 run's peak."""
    return process_peak_rss_mib(os.getpid())


def batch(prompts: int = 4, group: int = 4, length: int = 32) -> list[TrainGroup]:
    rng = random.Random(0)
    groups = []
    for p in range(prompts):
        prompt = tuple(rng.randrange(2, 49152) for _ in range(16))
        seqs = tuple(
            TrainSequence(
                prompt,
                tuple(rng.randrange(2, 49152) for _ in range(length)),
                tuple(-10.0 for _ in range(length)),
                rng.choice((-1.0, 1.0)),
            )
            for _ in range(group)
        )
        groups.append(TrainGroup(f"p{p}", seqs))
    return groups


def _local_bytes(tensors) -> int:
    total = 0
    for t in tensors:
        if t is None:
            continue
        local = t.to_local() if hasattr(t, "to_local") else t
        total += local.numel() * local.element_size()
    return total


def build(shard: ShardRank, size: str, recompute: bool = False) -> torch.nn.Module:
    """As a policy builds: unsharded, the model; sharded, each rank its shards from the config,
    filled from rank 0's full model, which rank 0 then lets go. `recompute`: activation
    checkpointing (`models.N.activation_checkpointing`)."""
    if not shard.sharded:
        model = head_gradients_in_place(smollm2_sized(size))  # as build_parts does
        return checkpoint_layers(model) if recompute else model
    full = smollm2_sized(size) if shard.rank == 0 else None
    config = smollm2_config(size)
    model = build_sharded(config, shard, device="cpu", compute_dtype=None, recompute=recompute)
    load_full_weights(model, full.state_dict() if full is not None else {})
    return model


def measure(shard: ShardRank, threads: int, size: str = "135m", recompute: bool = False) -> dict:
    torch.set_num_threads(threads)
    model = build(shard, size, recompute)
    built_rss = _rss_mib()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-5)
    # With recomputation a policy's update runs each sequence whole (PolicySpec.update_settings).
    algo = AlgoConfig(micro_batch_size=4, minibatches=1, share_prompts=not recompute)
    settings = UpdateSettings.from_config(algo, RolloutConfig(max_new_tokens=32), OptimConfig())
    groups = batch()
    times = []
    for step in range(2):
        start = time.perf_counter()
        train_on_batch(model, opt, groups, settings, pad_id=0, seed=step, shard=shard)
        times.append(time.perf_counter() - start)
    # The update frees its gradients at the end; one more backward shows what they hold.
    sequences = [q for g in groups for q in g.sequences]
    minibatch_backward(model, sequences, settings, pad_id=0, shard=shard)
    grads = _local_bytes(p.grad for p in params)
    state = [t for s in opt.state.values() for t in s.values() if torch.is_tensor(t) and t.dim()]
    return {
        "rank": shard.rank,
        "world": shard.world,
        "param_bytes": _local_bytes(params),
        "grad_bytes_peak": grads,
        "adam_bytes": _local_bytes(state),
        "peak_rss_bytes": _rss_mib() * 2**20,
        "built_rss_mib": built_rss,
        "update_s": times[-1],
    }


def _rank(rank: int, world: int, init: str, out: str, measure, threads: int, args: tuple) -> None:
    shard = init_shard_group(rank, world, init_method=init, timeout_s=1800)
    try:
        result = measure(shard, threads, *args)
        Path(out, f"rank{rank}.json").write_text(json.dumps(result))
        dist.barrier()  # leave together: a rank tearing down gloo alone can abort at exit
    finally:
        dist.destroy_process_group()


def on_ranks(measure, world: int, threads: int, *args) -> list[dict]:
    """`measure(shard, threads, *args)` on `world` spawned ranks of one gloo group: each rank's
    result (a JSON object), in rank order."""
    with tempfile.TemporaryDirectory() as tmp:
        init = f"file://{Path(tmp) / 'rendezvous'}"
        spawn_args = (world, init, tmp, measure, threads, args)
        mp.spawn(_rank, args=spawn_args, nprocs=world, join=True)
        return [json.loads(Path(tmp, f"rank{r}.json").read_text()) for r in range(world)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2, help="threads of the K=1 update")
    parser.add_argument("--size", choices=sorted(SIZES), default="135m")
    parser.add_argument("--ranks", type=int, nargs="+", default=[2], help="K values (powers of 2)")
    parser.add_argument(
        "--recompute", action="store_true", help="activation checkpointing, at every K"
    )
    args = parser.parse_args()
    one = measure(UNSHARDED, args.threads, args.size, args.recompute)
    sharded: dict[int, list[dict]] = {}
    for world in args.ranks:
        threads = max(1, args.threads // world)
        sharded[world] = on_ranks(measure, world, threads, args.size, args.recompute)
    header = (
        "| K | rank | params MB | grads MB | AdamW MB | of K=1's | RSS after build MB "
        "| peak RSS MB | peak of K=1's | update s |"
    )
    print(header)
    print("|---|---|---|---|---|---|---|---|---|---|")
    base = one["param_bytes"] + one["grad_bytes_peak"] + one["adam_bytes"]
    for r in [one, *(r for ranks in sharded.values() for r in ranks)]:
        held = r["param_bytes"] + r["grad_bytes_peak"] + r["adam_bytes"]
        print(
            f"| {r['world']} | {r['rank']} | {r['param_bytes'] / 2**20:.0f} | "
            f"{r['grad_bytes_peak'] / 2**20:.0f} | {r['adam_bytes'] / 2**20:.0f} | "
            f"{held / base:.3f} | {r['built_rss_mib']:.0f} | {r['peak_rss_bytes'] / 2**20:.0f} | "
            f"{r['peak_rss_bytes'] / one['peak_rss_bytes']:.2f} | {r['update_s']:.1f} |"
        )
    ratios = {k: max(r["update_s"] for r in v) / one["update_s"] for k, v in sharded.items()}
    for world, ratio in ratios.items():
        print(f"update time K={world} / K=1: {ratio:.2f}")
    print("BENCH " + json.dumps({"one": one, "sharded": sharded, "time_ratios": ratios}))


if __name__ == "__main__":
    main()
