"""The small run every row of tests/test_bad_inputs.py starts from, the placeholders its rows
name (filled in from the `world` fixture), and its rows of config values the consumers do not
accept."""

from __future__ import annotations

SMALL = [
    "run.progress=false",
    "task.arithmetic.num_train=16",
    "task.arithmetic.num_test=8",
    "rollout.prompts_per_step=4",
    "rollout.group_size=2",
    "rollout.max_new_tokens=4",
    "algo.minibatches=1",
    "algo.micro_batch_size=8",
    "eval.every=0",
    "verify.workers=1",
]


def sets(*assignments: str) -> list[str]:
    return [x for a in assignments for x in ("--set", a)]


R, F, S, M = "{run}", "{files}", "{store}", "{model}"
NEW = "{files}/new_run"  # a fresh run directory: must not be created by a failing command
TRAIN_NEW = ["train", "--out", NEW]
MATH = "task.name=math"


def value_case(name: str, *assignments: str, culprit: str = "") -> tuple[str, list[str], str]:
    """A config value the consumers do not accept: refused before any model loads, naming the
    key (by default the key of the last assignment)."""
    key = culprit or assignments[-1].split("=", 1)[0]
    return (name, [*TRAIN_NEW, *sets(*SMALL, f"models.0.path={M}", *assignments)], key)


# One validation pass over every config value, before anything is created (graft.config.checks).
VALUES = [
    value_case("optim-eps-zero", "models.0.optim.eps=0"),
    value_case(
        "code-stdout-bytes",
        "task.name=code",
        "task.code.train={files}/code_good.jsonl",
        "task.code.stdout_bytes=10",
    ),
    value_case("optim-eps-inf", "models.0.optim.eps=inf"),
    value_case("optim-beta-one", "models.0.optim.betas=[1.0, 0.999]"),
    value_case("optim-beta-negative", "models.0.optim.betas=[-0.5, 0.999]"),
    value_case("weight-decay-negative", "models.0.optim.weight_decay=-0.01"),
    value_case("weight-decay-inf", "models.0.optim.weight_decay=inf"),
    value_case(
        "weight-decay-flips-weights", "models.0.optim.lr=0.5", "models.0.optim.weight_decay=5"
    ),
    value_case("lr-inf", "models.0.optim.lr=inf"),
    value_case("lr-nan", "models.0.optim.lr=nan"),
    value_case("lr-overflows-weights", "models.0.optim.lr=1e30"),
    value_case("grad-clip-inf", "models.0.optim.grad_clip=inf"),
    value_case("warmup-negative", "models.0.optim.warmup_steps=-1"),
    value_case("rollout-temperature-inf", "rollout.temperature=inf"),
    value_case("eval-temperature-inf", "eval.temperature=inf"),
    value_case("threads-negative", "run.threads=-1"),
    value_case("num-cpus-negative", "models.0.num_cpus=-1"),
    value_case("num-gpus-negative", "models.0.num_gpus=-1"),
    value_case("num-gpus-inf", "models.0.num_gpus=inf"),
    value_case("device-unknown", "models.0.device=tpu"),
    value_case("eval-top-p-zero", "eval.top_p=0"),
    value_case("eval-top-p-above-one", "eval.top_p=1.5"),
    value_case("max-prompt-tokens-negative", "rollout.max_prompt_tokens=-1"),
    value_case("max-new-tokens-huge", f"rollout.max_new_tokens={2**40}"),
    value_case("num-test-negative", "task.arithmetic.num_test=-1"),
    value_case("num-val-negative", "task.arithmetic.num_val=-1"),
    value_case("num-train-huge", f"task.arithmetic.num_train={10**12}"),
    value_case("prompts-per-step-huge", f"rollout.prompts_per_step={10**14}"),
    value_case("top-k-past-int64", f"rollout.top_k={2**70}"),
    value_case("group-size-past-int16", "rollout.group_size=100000"),
    value_case("steps-past-int32", f"run.steps={2**40}"),
    value_case("epochs-huge", f"algo.epochs={10**9}"),
    value_case("verify-workers-huge", "verify.workers=100000"),
    value_case("verify-timeout-inf", "verify.timeout_s=inf"),
    value_case("kl-coef-inf", "algo.kl_coef=inf"),
    value_case("adv-eps-zero-is-nan", "algo.adv_eps=0"),
    value_case("clip-high-inf", "algo.clip_high=inf"),
    value_case("dual-clip-inf", "algo.dual_clip=inf"),
    value_case("sgt-coef-inf", "exchange.ablation.sgt_coef=inf"),
    value_case("luffy-gamma-inf", "exchange.ablation.luffy_gamma=inf"),
    value_case("lora-alpha-inf", "models.0.lora.r=4", "models.0.lora.alpha=inf"),
    value_case("lora-rank-huge", f"models.0.lora.r={2**40}"),
    value_case("vllm-memory-zero", "rollout.vllm_gpu_memory=0"),
    value_case("vllm-memory-above-one", "rollout.vllm_gpu_memory=1.5"),
    value_case("eval-problems-negative", "eval.num_problems=-1"),
    value_case("eval-max-new-tokens-negative", "eval.max_new_tokens=-1"),
    value_case("eval-samples-huge", f"eval.samples={2**40}"),
    value_case("eval-without-suites", "eval.every=1", "eval.suites=[]"),
    value_case("zero-contrast-unknown-mode", "models.0.zero_contrast.mode=dynamic"),
    value_case("resample-zero-rounds", "models.0.zero_contrast.max_rounds=0"),
    value_case("resample-negative-rounds", "models.0.zero_contrast.max_rounds=-2"),
    value_case("resample-zero-responses", "models.0.zero_contrast.max_responses=0"),
    value_case("resample-negative-responses", "models.0.zero_contrast.max_responses=-8"),
    value_case("resample-responses-below-a-group", "models.0.zero_contrast.max_responses=1"),
    value_case(
        "math-limit-negative", MATH, f"task.math.train={F}/nocolumn.jsonl", "task.math.limit=-1"
    ),
    value_case(
        "math-empty-column",
        MATH,
        f"task.math.train={F}/nocolumn.jsonl",
        "task.math.answer_column=''",
    ),
]
