"""Question: how long does a graft GRPO step take next to TRL's GRPOTrainer on the same workload?

Workload (both sides, same initial weights and tokenizer, one process, torch with 2 threads, fp32,
CPU): a ~1M-parameter Qwen2-style model (hidden 128, 4 layers, 4 heads / 2 KV heads, MLP 512, tied
embeddings; graft.models.tiny, qwen2 BPE: one token per digit) pre-trained for 600 steps on 2-digit
addition (200 steps left sampled rewards near 0); 16 prompts "Q: a+b= A:" x 8 samples = 128
completions per optimizer step, at most 8 new tokens, temperature 1, top-p 1; DAPO token-mean loss,
clip 0.2 / 0.28, no KL, one pass, one optimizer step per rollout batch; AdamW lr 1e-4 constant (wd
0.01), grad clip 1.0; reward 1 when the completion's final number equals a+b (graft's
`final_number`). Step k of both sides sees the same 16 prompts. TRL's effective settings are read
back from the built trainer and asserted (`TRL_EFFECTIVE`): gradient checkpointing (on by default
in TRL 1.16), vLLM, Liger, torch.compile, bf16/fp16 and the KL reference model are off. graft:
`Trainer.step` (generation, verification in its worker pool, update), store, eval and logging
off. TRL: `GRPOTrainer.train()`; a callback times each optimizer step (from the end of the previous
one, so its data loading is included) and, after every block of TRL steps, runs a block of graft
steps, so the two alternate and share the machine's noise. TRL phases come from wrapping its
methods: backward_s is training_step minus generation/scoring and compute_loss; clip_optim_s runs
from the end of training_step to the step's end.

`--workload smollm2`: the same comparison with a real small model, SmolLM2-135M-Instruct (Llama
architecture, 49k BPE vocabulary; the Q4_1 GGUF that examples/real_pair/fetch_gguf.py places,
dequantized to float32 and saved once as a Hugging Face folder that both sides load), 8 prompts x 4
samples x at most 64 new tokens, 2-digit + 1-digit additions in the model's chat format
("Compute 47+5= Give the final answer as a number at the end."), lr 1e-6; everything else as
above.

    .venv/bin/pip install -e '.[bench]'
    GRAFT_CACHE=.cache/graft HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/trl_vs_graft.py \
        [--workload tiny|smollm2] [--steps 10] [--rounds 3] [--warmup 3] [--json-out FILE] \
        [--set algo.KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import tempfile
import time
import warnings
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from common import emit, peak_rss_mib, summary

from graft.config import ArithmeticConfig, Config, load_config
from graft.models.tiny import TinySpec, build_tiny
from graft.tasks import prompt_batch
from graft.trainer import Trainer
from graft.verify.math.answer import final_number

THREADS = 2
TINY_SPEC = TinySpec(
    arch="qwen2",
    tokenizer="bpe",
    hidden=128,
    layers=4,
    heads=4,
    kv_heads=2,
    intermediate=512,
    task=ArithmeticConfig(skills=("add:2,2",)),
    noise=0.2,  # wrong labels late in pre-training keep sampled rewards partial (~0.7 at start)
    pretrain_steps=600,
    lr=1e-3,
    seed=7,
    prompt_template="Q: {prompt} A:",
)
SMOL_GGUF = "real_pair/SmolLM2-135M-Instruct.Q4_1.gguf"
SMOL_TEMPLATE = (
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
    "<|im_end|>\n<|im_start|>user\nCompute {prompt} Give the final answer as a number at the end."
    "<|im_end|>\n<|im_start|>assistant\n"
)


@dataclass(frozen=True)
class Workload:
    name: str
    prompts: int
    group: int
    max_new: int
    lr: float
    template: str
    skill: str


WORKLOADS = {
    "tiny": Workload("tiny", 16, 8, 8, 1e-4, TINY_SPEC.prompt_template, "add:2,2"),
    "smollm2": Workload("smollm2", 8, 4, 64, 1e-6, SMOL_TEMPLATE, "add:2,1"),
}


def smollm2_dir() -> Path:
    """SmolLM2-135M-Instruct as a float32 Hugging Face folder (converted from the GGUF once)."""
    from graft.config import ModelConfig
    from graft.models.load import load_model_and_tokenizer

    cache = Path(os.environ.get("GRAFT_CACHE", Path.home() / ".cache" / "graft"))
    out = cache / "bench" / "smollm2-135m-instruct-q4_1-f32"
    if (out / "config.json").exists():
        return out
    gguf = cache / SMOL_GGUF
    if not gguf.exists():
        raise SystemExit(f"{gguf} is missing: run examples/real_pair/fetch_gguf.py first")
    model, tokenizer = load_model_and_tokenizer(ModelConfig(name="smollm2", path=str(gguf)))
    tmp = out.with_name(out.name + ".tmp")
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    tmp.rename(out)
    return out


def rss_mib() -> float:
    """Current resident memory of this process in MiB (Linux)."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmRSS:"))


def graft_config(model_dir: Path, wl: Workload, extra: list[str]) -> Config:
    """graft's side of the workload; the store (TRL writes nothing), eval and logging are off."""
    sets = f"""run.seed=0 run.threads={THREADS} run.backend=inprocess
        run.progress=false models.0.name=qwen2 models.0.path={model_dir} models.0.device=cpu
        models.0.dtype=float32 models.0.optim.lr={wl.lr} models.0.optim.warmup_steps=0
        models.0.optim.weight_decay=0.01 models.0.optim.grad_clip=1.0
        rollout.prompts_per_step={wl.prompts} rollout.group_size={wl.group}
        rollout.max_new_tokens={wl.max_new} rollout.temperature=1.0 rollout.top_p=1.0
        rollout.top_k=0 rollout.max_prompt_tokens=512 algo.advantage=grpo algo.loss_agg=token-mean
        algo.clip_low=0.2 algo.clip_high=0.28 algo.kl_coef=0.0 algo.minibatches=1 algo.epochs=1
        algo.micro_batch_size={wl.prompts * wl.group}
        store.enabled=false eval.every=0""".split()
    sets += [f'task.arithmetic.skills=["{wl.skill}"]']
    cfg = load_config(Config, None, sets + extra)
    model = dataclasses.replace(cfg.models[0], prompt_template=wl.template)
    return dataclasses.replace(cfg, models=(model,))


def trl_dataset(trainer: Trainer, wl: Workload, num_steps: int) -> Any:
    """The prompts of graft steps 0..num_steps-1, in order (TRL reads them unshuffled)."""
    from datasets import Dataset

    rows = [
        {"prompt": wl.template.replace("{prompt}", p.prompt), "answer": p.gold}
        for step in range(num_steps)
        for p in prompt_batch(
            trainer.train_problems, step=step, batch_size=wl.prompts, seed=trainer.cfg.run.seed
        )
    ]
    return Dataset.from_list(rows)


def make_trl(
    model_dir: Path, wl: Workload, dataset: Any, out_dir: str, callback: Any
) -> tuple[Any, dict]:
    """A GRPOTrainer for the workload, with its phases timed into the returned dict."""
    from transformers import AutoModelForCausalLM, AutoTokenizer, PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    log: dict[str, Any] = defaultdict(list)

    def reward(completions: list[str], answer: list[str], **_: Any) -> list[float]:
        found = [final_number(c) for c in completions]
        rewards = [float(f is not None and int(f) == int(a)) for f, a in zip(found, answer)]
        log["rewards"].append(rewards)  # runs of wl.group share a prompt (RepeatSampler)
        return rewards

    def timed(name: str, fn: Any) -> Any:
        def wrapper(*a: Any, **kw: Any) -> Any:
            start = time.perf_counter()
            out = fn(*a, **kw)
            log[name].append(time.perf_counter() - start)
            log[f"{name}_end"].append(time.perf_counter())
            return out

        return wrapper

    args = GRPOConfig(
        output_dir=out_dir,
        per_device_train_batch_size=wl.prompts * wl.group,  # completions per device batch
        gradient_accumulation_steps=1,  # -> one generation batch, one optimizer step per batch
        num_generations=wl.group,
        max_completion_length=wl.max_new,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        loss_type="dapo",
        epsilon=0.2,
        epsilon_high=0.28,
        beta=0.0,
        num_iterations=1,
        learning_rate=wl.lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.01,
        max_grad_norm=1.0,
        max_steps=len(dataset) // wl.prompts,
        bf16=False,
        fp16=False,
        use_cpu=True,
        shuffle_dataset=False,
        logging_strategy="no",
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        dataloader_num_workers=0,
        seed=0,
        gradient_checkpointing=False,  # TRL 1.16 defaults to True; graft keeps activations
    )
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    trl = GRPOTrainer(
        model=model,
        reward_funcs=reward,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[callback],
    )
    trl.remove_callback(PrinterCallback)  # it prints the run's metrics at the end
    check_trl_settings(trl, wl)
    timed_methods = (
        "_generate", "_calculate_rewards", "_generate_and_score_completions", "compute_loss",
        "training_step",
    )  # fmt: skip
    for name in timed_methods:
        setattr(trl, name, timed(name, getattr(trl, name)))
    return trl, log


TRL_EFFECTIVE = {
    # TRL's own defaults that would make its step do other work than graft's, read back from the
    # trainer as built (not from what was passed): all must hold for a like-for-like comparison.
    "gradient_checkpointing": False,
    "use_vllm": False,
    "use_liger_kernel": False,
    "torch_compile": False,
    "bf16": False,
    "fp16": False,
    "beta": 0.0,
    "num_iterations": 1,
    "steps_per_generation": 1,
    "gradient_accumulation_steps": 1,
    "loss_type": "dapo",
    "scale_rewards": "group",
    "importance_sampling_level": "token",
    "top_entropy_quantile": 1.0,
    "cast_lm_head_to_fp32": False,
    "use_transformers_paged": False,
    "mask_truncated_completions": False,
}


def check_trl_settings(trl: Any, wl: Workload) -> dict[str, Any]:
    """Assert TRL's effective settings are the ones this benchmark claims; returns them."""
    got = {key: getattr(trl.args, key) for key in TRL_EFFECTIVE}
    got["generation_batch_size"] = trl.args.generation_batch_size
    got["model.is_gradient_checkpointing"] = bool(trl.model.is_gradient_checkpointing)
    got["ref_model"] = trl.ref_model is not None
    want = {
        **TRL_EFFECTIVE,
        "generation_batch_size": wl.prompts * wl.group,
        "model.is_gradient_checkpointing": False,
        "ref_model": False,
    }
    wrong = {k: (got[k], want[k]) for k in want if got[k] != want[k]}
    assert not wrong, f"TRL settings differ from the claimed workload (got, want): {wrong}"
    return got


def main() -> None:
    from transformers import TrainerCallback

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="tiny")
    parser.add_argument("--steps", type=int, default=10, help="measured steps per side per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=3, help="discarded first steps per side")
    parser.add_argument("--json-out", default="")
    parser.add_argument("--set", action="append", default=[], help="extra graft config override")
    args = parser.parse_args()
    warnings.filterwarnings("ignore", category=FutureWarning)  # transformers 5 renames
    torch.set_num_threads(THREADS)
    load_at_start = os.getloadavg()
    wl = WORKLOADS[args.workload]
    model_dir = build_tiny(TINY_SPEC) if wl.name == "tiny" else smollm2_dir()
    total = args.warmup + args.rounds * args.steps
    rss0 = rss_mib()
    graft = Trainer(graft_config(model_dir, wl, args.set))
    rss_graft = rss_mib() - rss0
    graft_opt = graft.backend.policies["qwen2"].optimizer  # in-process backend
    times: dict[str, list[float]] = {"graft": [], "trl": []}
    graft_metrics: list[dict[str, float]] = []
    state = {"graft_step": 0, "trl_step": 0, "resume": 0.0, "threads": set()}
    ends: list[float] = []  # TRL step ends

    def graft_block(n: int, keep: bool) -> None:
        for _ in range(n):
            start = time.perf_counter()
            metrics = graft.step(state["graft_step"])
            elapsed = time.perf_counter() - start
            state["graft_step"] += 1
            state["threads"].add(torch.get_num_threads())
            if keep:
                times["graft"].append(elapsed)
                graft_metrics.append(metrics)

    class Alternate(TrainerCallback):
        def on_train_begin(self, *_: Any, **__: Any) -> None:
            state["resume"] = time.perf_counter()

        def on_step_end(self, *_: Any, **__: Any) -> None:
            elapsed = time.perf_counter() - state["resume"]  # previous step end -> this step end
            state["trl_step"] += 1
            state["threads"].add(torch.get_num_threads())
            done = state["trl_step"] - args.warmup
            ends.append(time.perf_counter())
            if done > 0:
                times["trl"].append(elapsed)
            if done == 0:
                graft_block(args.warmup, keep=False)
            if done > 0 and done % args.steps == 0:
                graft_block(args.steps, keep=True)
            state["resume"] = time.perf_counter()

    with tempfile.TemporaryDirectory() as tmp:
        rss1 = rss_mib()
        trl, log = make_trl(model_dir, wl, trl_dataset(graft, wl, total), tmp, Alternate())
        rss_trl = rss_mib() - rss1
        try:
            trl.train()
        finally:
            graft.close()
        trl_opt = getattr(trl.optimizer, "optimizer", trl.optimizer)
    optimizer = " / ".join(
        f"{type(o).__name__} fused={o.defaults.get('fused')}" for o in (graft_opt, trl_opt)
    )

    # Sanity: one generation of a rollout batch per TRL optimizer step, and as many graft steps.
    sizes = [len(r) for r in log["rewards"]]
    assert len(sizes) == total == state["trl_step"] and set(sizes) == {wl.prompts * wl.group}, sizes
    assert len(times["graft"]) == len(times["trl"]) == args.rounds * args.steps

    g, t = summary(times["graft"]), summary(times["trl"])
    ratio = g["median_s"] / t["median_s"]
    med = lambda xs: statistics.median(xs[args.warmup :])  # noqa: E731
    gmed = lambda key: statistics.median(m.get(key, 0.0) for m in graft_metrics)  # noqa: E731
    opt_s = [e - s for e, s in zip(ends, log["training_step_end"])]
    gen_score = log["_generate_and_score_completions"]
    minus = lambda a, b, c: [x - y - z for x, y, z in zip(a, b, c)]  # noqa: E731
    trl_phases = {
        "generate_s": med(log["_generate"]),
        "reward_s": med(log["_calculate_rewards"]),
        "score_other_s": med(minus(gen_score, log["_generate"], log["_calculate_rewards"])),
        "loss_forward_s": med(log["compute_loss"]),
        "backward_s": med(minus(log["training_step"], gen_score, log["compute_loss"])),
        "clip_optim_s": med(opt_s),
    }
    keys = ("time/generate_s", "time/verify_s", "time/train_s", "time/fwd_bwd_s", "time/optim_s")
    graft_phases = {k.split("/")[1]: gmed(k) for k in keys}
    n_groups = len(graft_metrics)
    zero_groups = sum(m["groups/all_fail_frac"] + m["groups/all_pass_frac"] for m in graft_metrics)
    trl_rewards = log["rewards"][args.warmup :]
    result = {
        "ratio_graft_over_trl": ratio,
        "graft": g,
        "trl": t,
        "graft_phases_median_s": graft_phases,
        "trl_phases_median_s": trl_phases,
        "graft_reward_mean": statistics.mean(m["reward/mean"] for m in graft_metrics),
        "trl_reward_mean": statistics.mean(x for r in trl_rewards for x in r),
        "graft_zero_adv_group_frac": zero_groups / n_groups,
        "graft_skipped_token_frac": statistics.mean(m["train/skipped_frac"] for m in graft_metrics),
        "graft_duplicate_token_frac": statistics.mean(
            m.get("train/duplicate_frac", 0.0) for m in graft_metrics
        ),
        "trl_zero_adv_group_frac": statistics.mean(
            len(set(r[i : i + wl.group])) == 1
            for r in trl_rewards
            for i in range(0, len(r), wl.group)
        ),
        "peak_rss_mib": peak_rss_mib(),
        "rss_delta_graft_init_mib": rss_graft,
        "rss_delta_trl_init_mib": rss_trl,
        "optimizers_graft_trl": optimizer,
        "torch_threads_seen": sorted(state["threads"]),
        "load_avg_start": load_at_start,
        "load_avg_end": os.getloadavg(),
        "step_times_s": times,
        "args": vars(args),
        "model_dir": str(model_dir),
    }
    ms = lambda s: f"{s * 1000:.1f} ms"  # noqa: E731
    r = result
    rows = [
        ("steps measured per side", f"{args.rounds} rounds x {args.steps} (warm-up {args.warmup})"),
        ("graft median step", f"{ms(g['median_s'])} (p10 {ms(g['p10_s'])}, p90 {ms(g['p90_s'])})"),
        ("TRL median step", f"{ms(t['median_s'])} (p10 {ms(t['p10_s'])}, p90 {ms(t['p90_s'])})"),
        ("ratio graft / TRL", f"{ratio:.3f}"),
        ("graft phases (median)", ", ".join(f"{k} {ms(v)}" for k, v in graft_phases.items())),
        ("TRL phases (median)", ", ".join(f"{k} {ms(v)}" for k, v in trl_phases.items())),
        ("reward mean graft / TRL", f"{r['graft_reward_mean']:.3f} / {r['trl_reward_mean']:.3f}"),
        (
            "zero-advantage groups (= responses) graft / TRL",
            f"{r['graft_zero_adv_group_frac']:.3f} / {r['trl_zero_adv_group_frac']:.3f}",
        ),
        ("graft skipped token frac", f"{r['graft_skipped_token_frac']:.3f}"),
        ("graft duplicate token frac (run once)", f"{r['graft_duplicate_token_frac']:.3f}"),
        ("peak RSS (process, both sides)", f"{r['peak_rss_mib']:.0f} MiB"),
        ("RSS added by graft / TRL setup", f"{rss_graft:.0f} / {rss_trl:.0f} MiB (TRL: + imports)"),
        ("optimizer graft / TRL", optimizer),
        ("load average (1/5/15 min) at start", " ".join(f"{x:.2f}" for x in load_at_start)),
        ("load average at end", " ".join(f"{x:.2f}" for x in r["load_avg_end"])),
    ]
    emit(f"trl_vs_graft[{wl.name}]", rows, result)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
