"""Memory and time of one policy's update at K = 1 and K = 2 ranks (FSDP2, gloo, CPU).

A SmolLM2-135M-sized Llama built from its config (random weights, nothing downloaded), float32
master weights, AdamW. For each K, every rank reports the bytes it holds of the parameters, the
gradients and the AdamW state (its local shards, after an update), its peak resident memory, and
the time of an update of the same batch (the second of two, after a warm-up). K = 1 is the
unsharded update `models.N.shards: 1` runs. Rank 0's full sampling copy, which a sharded policy
also keeps, is not part of the update and not counted here.

    .venv/bin/python benchmarks/shard_memory.py
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from graft.config import AlgoConfig, OptimConfig, RolloutConfig
from graft.training.shards import UNSHARDED, ShardRank, init_shard_group, shard_model
from graft.training.update import UpdateSettings, minibatch_backward, train_on_batch
from graft.types import TrainGroup, TrainSequence


def smollm2_135m_sized():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=49152,
        hidden_size=576,
        intermediate_size=1536,
        num_hidden_layers=30,
        num_attention_heads=9,
        num_key_value_heads=3,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=None,
    )
    return LlamaForCausalLM(cfg).eval()


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


def measure(shard: ShardRank, threads: int) -> dict:
    torch.set_num_threads(threads)
    model = smollm2_135m_sized()
    if shard.sharded:
        shard_model(model)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-5)
    algo = AlgoConfig(micro_batch_size=4, minibatches=1)
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
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "update_s": times[-1],
    }


def _rank(rank: int, world: int, init: str, out: str, threads: int) -> None:
    shard = init_shard_group(rank, world, init_method=init, timeout_s=1800)
    try:
        Path(out, f"rank{rank}.json").write_text(json.dumps(measure(shard, threads)))
    finally:
        dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2, help="threads of the K=1 update")
    args = parser.parse_args()
    one = measure(UNSHARDED, args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        init = f"file://{Path(tmp) / 'rendezvous'}"
        threads = max(1, args.threads // 2)
        mp.spawn(_rank, args=(2, init, tmp, threads), nprocs=2, join=True)
        two = [json.loads(Path(tmp, f"rank{r}.json").read_text()) for r in range(2)]
    header = "| K | rank | params MB | grads MB | AdamW MB | of K=1's | peak RSS MB | update s |"
    print(header)
    print("|---|---|---|---|---|---|---|---|")
    base = one["param_bytes"] + one["grad_bytes_peak"] + one["adam_bytes"]
    for r in [one, *two]:
        held = r["param_bytes"] + r["grad_bytes_peak"] + r["adam_bytes"]
        print(
            f"| {r['world']} | {r['rank']} | {r['param_bytes'] / 2**20:.0f} | "
            f"{r['grad_bytes_peak'] / 2**20:.0f} | {r['adam_bytes'] / 2**20:.0f} | "
            f"{held / base:.3f} | {r['peak_rss_bytes'] / 2**20:.0f} | {r['update_s']:.1f} |"
        )
    ratio = max(r["update_s"] for r in two) / one["update_s"]
    print(f"update time K=2 / K=1: {ratio:.2f}")
    print("BENCH " + json.dumps({"one": one, "two": two, "time_ratio": ratio}))


if __name__ == "__main__":
    main()
