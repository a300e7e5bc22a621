"""Sampling throughput of a policy sharded over K = 2 and 4 ranks against K = 1 (FSDP2, gloo, CPU).

The SmolLM2-sized Llama of benchmarks/shard_memory.py (random weights, built from its config), each
rank built as a sharded policy builds it. K = 1 samples every row with two threads; at K > 1 each
rank samples an even share of the rows with 2 / K threads, its forwards kept in step with the
other ranks' (`Lockstep`, as `ShardWorker.sample` runs them). Every row draws from its own seeded
stream, so the tokens must equal K = 1's: the script checks it. Reported: generated tokens per
second over the slowest rank, and the ratio to K = 1 measured in the same run.

    .venv/bin/python benchmarks/shard_sampling.py --size 135m --ranks 2 4
"""

from __future__ import annotations

import argparse
import json
import random
import time

import torch
import torch.distributed as dist
from shard_memory import SIZES, build, on_ranks

from graft.rollout import SamplingParams, sample
from graft.seeds import row_seeds
from graft.training.shards import (
    UNSHARDED,
    Lockstep,
    ShardRank,
    even_slices,
    gather_on_rank0,
)


def rows_and_seeds(prompts: int, n: int) -> tuple[list[tuple[int, ...]], list[int]]:
    """`prompts` random 16-token prompts, each `n` times, and a seed per row."""
    rng = random.Random(0)
    distinct = [tuple(rng.randrange(2, 49152) for _ in range(16)) for _ in range(prompts)]
    rows = [p for p in distinct for _ in range(n)]
    return rows, row_seeds(0, [f"p{i}" for i in range(prompts)], n)


def measure(shard: ShardRank, threads: int, size: str, prompts: int, n: int, tokens: int) -> dict:
    torch.set_num_threads(threads)
    model = build(shard, size)
    rows, seeds = rows_and_seeds(prompts, n)
    mine = even_slices(len(rows), shard.world)[shard.rank]
    params = SamplingParams(max_new_tokens=tokens, temperature=1.0)
    stepped = Lockstep(model, shard, pad_id=0) if shard.sharded else model
    if shard.sharded:
        dist.barrier()
    start = time.perf_counter()
    got = sample(stepped, rows[mine], params, stop_ids=[1], pad_id=0, row_seeds=seeds[mine])
    if shard.sharded:
        stepped.drain()
    seconds = time.perf_counter() - start
    samples = gather_on_rank0([s.token_ids for s in got], shard)
    times = gather_on_rank0([seconds], shard)
    return {"world": shard.world, "seconds": max(times, default=0.0), "tokens": samples}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2, help="threads of K = 1")
    parser.add_argument("--size", choices=sorted(SIZES), default="135m")
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--group", type=int, default=4, help="samples per prompt")
    parser.add_argument("--tokens", type=int, default=32, help="new tokens per sample")
    args = parser.parse_args()
    work = (args.size, args.prompts, args.group, args.tokens)
    results = {1: measure(UNSHARDED, args.threads, *work)}
    for world in args.ranks:
        results[world] = on_ranks(measure, world, max(1, args.threads // world), *work)[0]
    one = results[1]
    generated = sum(len(t) for t in one["tokens"])
    print("| K | generated tokens | seconds | tokens/s | of K=1's | same tokens as K=1 |")
    print("|---|---|---|---|---|---|")
    for world, r in results.items():
        same = [list(t) for t in r["tokens"]] == [list(t) for t in one["tokens"]]
        rate = generated / r["seconds"]
        print(
            f"| {world} | {generated} | {r['seconds']:.1f} | {rate:.0f} | "
            f"{one['seconds'] / r['seconds']:.2f} | {'yes' if same else 'NO'} |"
        )
    summary = {w: {"seconds": r["seconds"]} for w, r in results.items()}
    print("BENCH " + json.dumps({"generated": generated, "runs": summary}))


if __name__ == "__main__":
    main()
