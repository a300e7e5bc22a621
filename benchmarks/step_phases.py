"""Question: where does a graft training step spend its time, and how close is it to the machine?

Runs GRPO steps of one config (store on, as by default) and reports the median time of each phase
(generate, verify, exchange incl. receiver log-probs of peer responses, forward+backward,
optimizer, store hand-off), the achieved GFLOP/s of generation and of training, and a measured
fp32 matmul peak of this machine for scale. FLOPs are counted the usual way: 2 x parameters per
token processed in generation (prompt once, then each new token with the KV cache) and
6 x parameters per token trained (forward + backward), over the responses actually computed (a
response with an advantage of exactly 0 is skipped: its gradient is zero; a copy of an identical
response runs once, `algo.dedup_responses`). "Executed" counts the
tokens the model really ran: with `algo.share_prompts` (the default) each distinct prompt once per
step; "nominal" counts every sequence's own copy of its prompt, the work of a trainer that repeats
the prompt in each of its n rows.

    .venv/bin/python benchmarks/step_phases.py [--config configs/grpo_tiny.yaml] [--steps 30]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from common import emit, peak_rss_mib

from graft.config import Config, load_config
from graft.trainer import Trainer

PHASES = ("generate", "verify", "exchange", "fwd_bwd", "optim", "store")


def matmul_peak_gflops(size: int = 1024, repeats: int = 20) -> float:
    """Best-of fp32 GEMM throughput at the current torch thread count."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    a @ b
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best / 1e9


def _count_tokens(trainer: Trainer) -> dict[str, int]:
    """Wrap the backend's generate to count the tokens each step processes."""
    counts = {"prompt": 0, "distinct_prompt": 0, "response": 0, "sequences": 0}
    generate = trainer.backend.generate

    def counting(*args, **kwargs):
        out = generate(*args, **kwargs)  # per policy: rollouts, or what `then` made of them
        for items in out.values():
            for item in items:
                r = getattr(item, "rollout", item)  # a Group holds its Rollout
                counts["distinct_prompt"] += len(r.prompt_ids)
                for c in r.completions_G:
                    counts["prompt"] += len(r.prompt_ids)
                    counts["response"] += c.num_tokens
                    counts["sequences"] += 1
        return out

    trainer.backend.generate = counting
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/grpo_tiny.yaml")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--out", default="runs/bench_step_phases")
    args = parser.parse_args()
    cfg = load_config(
        Config, args.config, ["eval.every=0", "run.progress=false", f"run.out_dir={args.out}"]
    )
    trainer = Trainer(cfg)
    if len(trainer.names) != 1:
        raise SystemExit("step_phases measures one policy; give a single-model config")
    params = sum(p.numel() for p in trainer.backend.policies[trainer.names[0]].model.parameters())
    counts = _count_tokens(trainer)
    phases: dict[str, list[float]] = {p: [] for p in (*PHASES, "step")}
    shared = cfg.algo.share_prompts
    flops: dict[str, list[float]] = {
        k: [] for k in ("gen", "train", "gen_nominal", "train_nominal")
    }
    skipped, duplicate = [], []
    try:
        for step in range(args.warmup + args.steps):
            before = dict(counts)
            start = time.perf_counter()
            m = trainer.step(step)
            total = time.perf_counter() - start
            if step < args.warmup:
                continue
            for p in PHASES:
                phases[p].append(m.get(f"time/{p}_s", 0.0))
            phases["step"].append(total)
            nominal = counts["prompt"] - before["prompt"]
            executed = (
                counts["distinct_prompt" if shared else "prompt"]
                - before["distinct_prompt" if shared else "prompt"]
            )
            resp = counts["response"] - before["response"]
            computed = 1.0 - m["train/skipped_frac"] - m.get("train/duplicate_frac", 0.0)
            skipped.append(m["train/skipped_frac"])
            duplicate.append(m.get("train/duplicate_frac", 0.0))
            for suffix, prompt in (("", executed), ("_nominal", nominal)):
                flops["gen" + suffix].append(2 * params * (prompt + resp) / m["time/generate_s"])
                flops["train" + suffix].append(
                    6 * params * (prompt + resp) * computed / m["time/fwd_bwd_s"]
                )
    finally:
        trainer.close()
    peak = matmul_peak_gflops()
    gf = lambda key: statistics.median(flops[key]) / 1e9  # noqa: E731
    med = {p: statistics.median(v) for p, v in phases.items()}
    rows = [("config", args.config), ("parameters", f"{params / 1e6:.2f} M")]
    for p in (*PHASES, "step"):
        share = med[p] / med["step"]
        rows.append((f"{p}", f"{med[p] * 1000:7.1f} ms  ({100 * share:4.1f}%)"))
    rows += [
        *(
            (f"{label}, executed (nominal)", f"{gf(key):.1f} ({gf(key + '_nominal'):.1f}) GFLOP/s")
            for label, key in (("generation", "gen"), ("training fwd+bwd", "train"))
        ),
        (f"matmul peak ({torch.get_num_threads()} threads)", f"{peak:.1f} GFLOP/s"),
        ("zero-advantage token fraction (skipped)", f"{statistics.median(skipped):.2f}"),
        ("duplicate response token fraction (run once)", f"{statistics.median(duplicate):.2f}"),
        ("peak RSS", f"{peak_rss_mib():.0f} MiB"),
    ]
    emit(
        "step_phases",
        rows,
        {
            "median_s": med,
            **{f"{key}_gflops": gf(key) for key in flops},
            "share_prompts": shared,
            "matmul_peak_gflops": peak,
            "skipped_frac": statistics.median(skipped),
            "duplicate_frac": statistics.median(duplicate),
            "params": params,
            "peak_rss_mib": peak_rss_mib(),
        },
    )


if __name__ == "__main__":
    main()
