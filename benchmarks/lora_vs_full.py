"""LoRA vs full fine-tuning of one model: step time, peak memory, optimizer-state size.

Two policies of the same model in two worker processes (graft's `processes` backend), one fully
trained, one with LoRA adapters (`models.N.lora.r`), on the same prompts. Their steps alternate in
one invocation (full, lora, lora, full, ...), so machine load falls on both alike; compare the
ratios. A step is graft's: sample n responses per prompt with the policy's KV-cache sampler, then
one update on them. Every response gets a non-zero advantage (alternating +1 / -1 within each
group) so that the update's forward and backward run on every token whatever the rewards are.

    GRAFT_CACHE=.cache/graft OMP_NUM_THREADS=1 .venv/bin/python benchmarks/lora_vs_full.py \
        --model .cache/graft/real_pair/SmolLM2-135M-Instruct.Q4_1.gguf --rounds 3

`--model` takes any graft model path (`tiny:<preset>`, a local folder, a .gguf file).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import emit, process_peak_rss_mib, summary

from graft.backends.processes import ProcessBackend
from graft.config import (
    AlgoConfig,
    ArithmeticConfig,
    LoRAConfig,
    ModelConfig,
    OptimConfig,
    RolloutConfig,
)
from graft.rollout import SamplingParams
from graft.tasks.arithmetic import ArithmeticTask
from graft.training.policy import PolicySpec
from graft.types import TrainGroup, TrainSequence

MIB = 2**20
SMOL_TEMPLATE = (
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
    "<|im_end|>\n<|im_start|>user\nCompute {prompt} Give the final answer as a number at the end."
    "<|im_end|>\n<|im_start|>assistant\n"
)


def _groups(rollouts) -> list[TrainGroup]:
    """Each rollout as a group whose responses have advantages +1, -1, +1, ... (all nonzero)."""
    out = []
    for r in rollouts:
        seqs = tuple(
            TrainSequence(r.prompt_ids, c.token_ids, c.logprobs, 1.0 if i % 2 == 0 else -1.0)
            for i, c in enumerate(r.completions_G)
            if c.token_ids
        )
        out.append(TrainGroup(problem_id=r.problem.id, sequences=seqs))
    return out


def process_rss_mib(pid: int) -> float:
    """Resident memory (VmRSS) of a live process now, in MiB (Linux)."""
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmRSS:"))


def _dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="graft model path")
    ap.add_argument("--template", default=SMOL_TEMPLATE, help="prompt template ({prompt})")
    ap.add_argument("--r", type=int, default=16, help="LoRA rank (default 16)")
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--max-new", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3, help="measured steps per variant")
    ap.add_argument("--micro", type=int, default=0, help="sequences per forward (0: the batch)")
    ap.add_argument("--lr", type=float, default=1e-6, help="full fine-tuning lr (LoRA: 100x)")
    args = ap.parse_args()

    rollout = RolloutConfig(
        prompts_per_step=args.prompts, group_size=args.group, max_new_tokens=args.max_new
    )
    algo = AlgoConfig(minibatches=1, micro_batch_size=args.micro or args.prompts * args.group)
    variants = {
        "full": (LoRAConfig(), args.lr),
        "lora": (LoRAConfig(r=args.r), args.lr * 100),
    }
    specs = [
        PolicySpec(
            model=ModelConfig(
                name=name,
                path=args.model,
                device="cpu",
                prompt_template=args.template,
                optim=OptimConfig(lr=lr),
                lora=lora,
            ),
            rollout=rollout,
            algo=algo,
            seed=0,
            threads=1,
            index=i,
        )
        for i, (name, (lora, lr)) in enumerate(variants.items())
    ]
    t0 = time.perf_counter()
    backend = ProcessBackend(specs)
    load_s = time.perf_counter() - t0
    pids = {name: int(info["pid"]) for name, info in backend.describe().items()}
    after_load = {name: process_peak_rss_mib(pid) for name, pid in pids.items()}
    task = ArithmeticTask(ArithmeticConfig(skills=("add:2,1",), num_train=200, seed=0))
    problems = task.train_problems()
    params = SamplingParams(args.max_new, 1.0, 1.0, 0)
    times: dict[str, dict[str, list[float]]] = {n: {"gen": [], "train": []} for n in variants}
    try:
        for step in range(args.rounds + 1):  # step 0 warms up and is not counted
            batch = problems[step * args.prompts : (step + 1) * args.prompts]
            order = list(variants) if step % 2 == 0 else list(reversed(variants))
            for name in order:
                seeds = {name: 1000 + step}
                a = time.perf_counter()
                rollouts = backend._call(
                    {
                        name: (
                            "generate",
                            (batch,),
                            {"n": args.group, "params": params, "seed": step},
                        )
                    }
                )[name]
                b = time.perf_counter()
                backend.train({name: _groups(rollouts)}, seeds=seeds)
                c = time.perf_counter()
                if step > 0:
                    times[name]["gen"].append(b - a)
                    times[name]["train"].append(c - b)
                print(f"step {step} {name}: generate {b - a:.1f} s, update {c - b:.1f} s")
        peaks = {name: process_peak_rss_mib(pid) for name, pid in pids.items()}
        held = {name: process_rss_mib(pid) for name, pid in pids.items()}
        with tempfile.TemporaryDirectory() as tmp:
            backend.save(Path(tmp))
            sizes = {
                name: {
                    "optimizer_bytes": (Path(tmp) / name / "optimizer.pt").stat().st_size,
                    "checkpoint_bytes": _dir_bytes(Path(tmp) / name),
                }
                for name in variants
            }
    finally:
        backend.close()
    result: dict = {"model": args.model, "r": args.r, "micro": algo.micro_batch_size}
    result |= {"load_s": load_s, "variants": {}}
    rows = []
    for name in variants:
        gen, train = summary(times[name]["gen"]), summary(times[name]["train"])
        step_s = [g + t for g, t in zip(times[name]["gen"], times[name]["train"])]
        result["variants"][name] = {
            "generate": gen,
            "update": train,
            "step": summary(step_s),
            "rss_after_load_mib": after_load[name],
            "peak_rss_mib": peaks[name],
            "rss_at_end_mib": held[name],
            **sizes[name],
        }
        rows.append(
            (
                name,
                f"step {summary(step_s)['median_s']:.2f} s (generate {gen['median_s']:.2f}, "
                f"update {train['median_s']:.2f}), peak RSS {peaks[name]:.0f} MiB (after load "
                f"{after_load[name]:.0f}, RSS at the end {held[name]:.0f}), optimizer.pt "
                f"{sizes[name]['optimizer_bytes'] / MIB:.1f}"
                f" MiB, checkpoint {sizes[name]['checkpoint_bytes'] / MIB:.1f} MiB",
            )
        )
    full, lora = result["variants"]["full"], result["variants"]["lora"]
    for key in ("step", "generate", "update"):
        ratio = lora[key]["median_s"] / full[key]["median_s"]
        rows.append((f"lora/full {key}", f"{ratio:.3f}"))
        result[f"ratio_{key}"] = ratio
    rows.append(("cpu count / load", f"{os.cpu_count()} / {os.getloadavg()[0]:.1f}"))
    emit("lora_vs_full", rows, result)


if __name__ == "__main__":
    main()
