"""graft's GPU check: one command, no network, at most 8 minutes, one line per check.

For a machine with torch (CUDA), transformers, pyarrow and pytest and nothing else: graft runs
from source (`src/` on the path); math-verify and its two dependencies (math task only) come
from a folder of wheels (`--wheels`) into the output folder, never from a registry.

    python scripts/gpu_check.py                      # on the GPU (cuda)
    python scripts/gpu_check.py --device cpu --quick # the same checks on the CPU (the test suite)
    python scripts/gpu_check.py --wheels wheels/     # math-verify from a folder of wheels

A folder of wheels is made on a machine with a network:
    pip download --only-binary=:all: --python-version 3.12 -d wheels/ \\
        math-verify==0.9.0 latex2sympy2_extended antlr4-python3-runtime==4.13.2

Checks, each printing `gpu_check: NAME: PASS|FAIL|SKIP [device] numbers (seconds)`:
  environment        versions, the device, math-verify importable (or installed from --wheels)
  tiny_models        the tiny presets built (or reused from the cache) once
  same_rollouts_fp32 one batch of rollouts scored and trained on the CPU and on the device,
                     float32 on both: old log-probs (1e-5 on average) and the loss to 1e-4
  same_rollouts_bf16 the same with bfloat16 compute on the device (float32 master weights):
                     log-probs within 0.25 (2e-2 on average), the loss within 0.25
  bf16_weights_move  3 updates at lr 1e-6 with bfloat16 compute: every weight moves (pure
                     bfloat16 weights, reported beside it, lose most updates)
  grpo_run           `graft train configs/grpo_tiny.yaml`, 3 steps on the device, bf16 compute,
                     dynamic sampling on (zero_contrast.mode=resample); device seconds counted
  graft_run          `graft train configs/graft_tiny.yaml`, 3 steps, both policies on the device
  update_speed       update (forward, backward, AdamW) of a ~110M-parameter Llama built from a
                     config, bf16 compute: tokens/s and model-FLOPs utilization (MFU)
  sharded_update     grpo_tiny, 3 steps, `shards: 2` (NCCL, a GPU per rank; gloo on the CPU) vs
                     one device: weights within 1e-5, both ranks trained; "skipped: one device"
  sandbox            the code sandbox's tier, four programs judged as they should be, programs/s
  vllm               the real-engine tests (tests/test_vllm_real.py, and with the full check
                     tests/test_vllm_real_runs.py), when `import vllm` works

It writes OUT/gpu_check.json and OUT/gpu_check.md (commit the latter as docs/gpu_check.md) and
exits with the number of failed checks.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

# Dense bf16 peak of the GPUs the project runs on (vendor figures, without sparsity), for MFU.
PEAK_BF16_FLOPS = {"H200": 989.4e12, "H100": 989.4e12, "A100": 312e12, "L40S": 362e12}
TINY = ("llama-char-add", "qwen2-bpe-add")
WHEEL_PACKAGES = ("math-verify", "latex2sympy2_extended", "antlr4-python3-runtime")


@dataclass
class Result:
    name: str
    status: str  # PASS, FAIL or SKIP
    device: str
    numbers: dict[str, float | str] = field(default_factory=dict)
    note: str = ""
    seconds: float = 0.0

    def line(self) -> str:
        nums = " ".join(f"{k}={_fmt(v)}" for k, v in self.numbers.items())
        parts = [f"gpu_check: {self.name}: {self.status} [{self.device}]", nums, self.note]
        return " ".join(p for p in parts if p) + f" ({self.seconds:.1f}s)"


def _fmt(v: float | str) -> str:
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1e4 else f"{v:.4g}"
    return str(v)


class CheckFailed(AssertionError):
    pass


def expect(ok: bool, message: str) -> None:
    if not ok:
        raise CheckFailed(message)


# ---------------------------------------------------------------------------- the checks
def check_environment(ctx: Context) -> dict:
    import transformers

    if ctx.device == "cuda":
        expect(torch.cuda.is_available(), "no CUDA device visible")
    gpu = torch.cuda.get_device_name(0) if ctx.device == "cuda" else "none"
    nums: dict = {"python": platform.python_version(), "torch": torch.__version__,
                  "transformers": transformers.__version__, "gpu": gpu}  # fmt: skip
    try:
        importlib.import_module("math_verify")
        nums["math_verify"] = "present"
    except ImportError:
        nums["math_verify"] = _install_wheels(ctx)
    return nums


def _install_wheels(ctx: Context) -> str:
    """math-verify from --wheels into OUT/site (no index); 'absent' without a folder."""
    if ctx.wheels is None:
        return "absent (the math task needs it; pass --wheels)"
    site = ctx.out / "site"
    cmd = [sys.executable, "-m", "pip", "install", "--no-index", "--find-links", str(ctx.wheels)]
    cmd += ["--target", str(site), "--quiet", *WHEEL_PACKAGES]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    expect(done.returncode == 0, f"installing from {ctx.wheels}: {done.stderr.strip()[-300:]}")
    sys.path.insert(0, str(site))
    os.environ["PYTHONPATH"] = os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])
    importlib.import_module("math_verify")
    return f"installed from {ctx.wheels}"


def check_tiny_models(ctx: Context) -> dict:
    from graft.models.tiny import build_tiny

    start = time.monotonic()
    ctx.paths = {name: str(build_tiny(name)) for name in TINY}
    return {"models": len(ctx.paths), "build_or_load_s": time.monotonic() - start}


def _policy(ctx: Context, device: str, dtype: str, param_dtype: str = "float32", lr=1e-6):
    import warnings

    from graft.config import AlgoConfig, ModelConfig, OptimConfig, RolloutConfig
    from graft.training.policy import Policy, PolicySpec

    model = ModelConfig(
        name="llama",
        path=ctx.paths["llama-char-add"],
        dtype=dtype,
        param_dtype=param_dtype,
        device=device,
        optim=OptimConfig(lr=lr),
    )
    spec = PolicySpec(
        model=model,
        rollout=RolloutConfig(prompts_per_step=16, group_size=8, max_new_tokens=8),
        algo=AlgoConfig(minibatches=1, micro_batch_size=128),
        seed=0,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return Policy(spec)


def _rollout_groups(ctx: Context) -> list:
    """One batch of rollouts (sampled on the CPU, float32) with fixed advantages."""
    if ctx.groups is not None:
        return ctx.groups
    from graft.config import ArithmeticConfig
    from graft.rollout import SamplingParams
    from graft.tasks.arithmetic import ArithmeticTask
    from graft.types import TrainGroup, TrainSequence

    task = ArithmeticTask(ArithmeticConfig(skills=("add:2,2",), num_train=64, num_test=8))
    size = 4 if ctx.quick else 16
    problems = list(task.train_problems())[:size]
    sampler = _policy(ctx, "cpu", "float32")
    rollouts = sampler.generate(problems, n=size // 2, params=SamplingParams(8), seed=1)
    g = torch.Generator().manual_seed(0)
    ctx.groups = [
        TrainGroup(
            r.problem.id,
            tuple(
                TrainSequence(
                    r.prompt_ids, c.token_ids, c.logprobs, float(torch.randn(1, generator=g))
                )
                for c in r.completions_G
            ),
        )
        for r in rollouts
    ]
    return ctx.groups


def _flat(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().float().cpu().flatten() for p in model.parameters()])


def _same_rollouts(ctx: Context, dtype: str, tol: float, mean_tol: float) -> dict:
    """Old log-probs and the first update's loss on the CPU (fp32) and on the device: the largest
    gap within `tol`, the mean gap within `mean_tol`."""
    groups = _rollout_groups(ctx)
    seqs = [q for g in groups for q in g.sequences]
    prompts, responses = [q.prompt_ids for q in seqs], [q.response_ids for q in seqs]
    cpu, dev = _policy(ctx, "cpu", "float32"), _policy(ctx, ctx.device, dtype)
    ref_lp, dev_lp = cpu.score(prompts, responses), dev.score(prompts, responses)
    gaps = [abs(a - b) for r, d in zip(ref_lp, dev_lp) for a, b in zip(r, d)]
    gap, mean_gap = max(gaps), sum(gaps) / len(gaps)
    ref_stats, dev_stats = cpu.train(groups, seed=0), dev.train(groups, seed=0)
    loss_gap = abs(ref_stats["loss/policy"] - dev_stats["loss/policy"])
    nums = {"logprob_max_gap": gap, "logprob_mean_gap": mean_gap, "loss_gap": loss_gap}
    nums["tol"], nums["mean_tol"] = tol, mean_tol
    nums["loss_cpu"], nums["loss_device"] = ref_stats["loss/policy"], dev_stats["loss/policy"]
    expect(gap <= tol, f"old log-probs differ by {gap:.3g} > {tol}")
    expect(mean_gap <= mean_tol, f"old log-probs differ by {mean_gap:.3g} on average > {mean_tol}")
    expect(loss_gap <= tol, f"losses differ by {loss_gap:.3g} > {tol}")
    return nums


def check_same_rollouts_fp32(ctx: Context) -> dict:
    return _same_rollouts(ctx, "float32", 1e-4, 1e-5)


def check_same_rollouts_bf16(ctx: Context) -> dict:
    # bfloat16 keeps 8 bits of mantissa: logits of size ~10 round by ~0.05.
    return _same_rollouts(ctx, "bfloat16", 0.25, 2e-2)


def check_bf16_weights_move(ctx: Context) -> dict:
    groups = _rollout_groups(ctx)
    changed = {}
    for label, param_dtype in (("master_fp32", "float32"), ("pure_bf16", "bfloat16")):
        policy = _policy(ctx, ctx.device, "bfloat16", param_dtype, lr=1e-6)
        before = _flat(policy.model)
        for step in range(3):
            policy.train(groups, seed=step)
        changed[label] = float((_flat(policy.model) != before).float().mean())
    expect(changed["master_fp32"] > 0.99, f"only {changed['master_fp32']:.1%} of weights moved")
    return {"moved_master_fp32": changed["master_fp32"], "moved_pure_bf16": changed["pure_bf16"]}


def _train_run(ctx: Context, name: str, config: str, models: int, *extra: str) -> dict:
    from graft.cli import main
    from graft.rundir import read_metrics

    out = ctx.out / name
    sets = ["run.steps=3", "run.save_every=0", "eval.every=0", "run.progress=false"]
    sets += ["run.backend=inprocess", *extra]
    for i, key in enumerate(TINY[:models]):
        sets += [f"models.{i}.path={ctx.paths[key]}", f"models.{i}.device={ctx.device}"]
        sets += [f"models.{i}.dtype=bfloat16"]
    if ctx.quick:
        sets += ["rollout.prompts_per_step=4", "rollout.group_size=4", "algo.minibatches=1"]
    argv = ["train", str(ROOT / config), "--out", str(out), "--overwrite"]
    expect(main(argv + [x for s in sets for x in ("--set", s)]) == 0, "graft train failed")
    records = [r for r in read_metrics(out) if "step" in r and "time/step_s" in r]
    expect([r["step"] for r in records] == [1, 2, 3], f"steps {[r['step'] for r in records]}")
    ratio_keys = [k for k in records[0] if k.endswith("loss/ratio_mean")]
    ratios = [r[k] for r in records for k in ratio_keys]
    expect(bool(ratios) and all(abs(x - 1) < 0.05 for x in ratios), f"ratio means {ratios}")
    nums = {"step_s_median": sorted(r["time/step_s"] for r in records)[1]}
    nums["ratio_mean_max_dev"] = max(abs(x - 1) for x in ratios)
    last = records[-1]  # the run's cost, counted where the work ran
    nums["gflops_per_step"] = last["cost/cum/flops"] / 3e9
    seconds = {k: v for k, v in last.items() if k.startswith("cost/cum/") and k.endswith("_gpu_s")}
    if ctx.device.startswith("cuda"):
        phases = {"cost/cum/generate_gpu_s", "cost/cum/train_gpu_s"}
        expect(phases <= set(seconds), f"device seconds missing: {sorted(seconds)}")
        expect(all(seconds[k] > 0 for k in phases), f"device seconds {seconds}")
        nums["gpu_s_per_step"] = sum(seconds.values()) / 3
    else:
        expect(not seconds, f"device seconds counted on {ctx.device}: {sorted(seconds)}")
    if models > 1:  # peer groups selected and peer responses admitted, both ways, 3 steps
        for what in ("selected", "admitted"):
            nums[what] = float(sum(v for r in records for k, v in r.items() if k.endswith(what)))
    return nums


def check_grpo_run(ctx: Context) -> dict:
    # dynamic sampling on: the extra rounds sample on the device too
    return _train_run(
        ctx, "grpo_run", "configs/grpo_tiny.yaml", 1, "models.0.zero_contrast.mode=resample"
    )


def check_graft_run(ctx: Context) -> dict:
    return _train_run(ctx, "graft_run", "configs/graft_tiny.yaml", 2)


def check_update_speed(ctx: Context) -> dict:
    from transformers import LlamaConfig, LlamaForCausalLM

    from graft.models.precision import Precision
    from graft.training.update import UpdateSettings, train_on_batch
    from graft.types import TrainGroup, TrainSequence

    hidden, layers, rows, length = (768, 12, 16, 512) if not ctx.quick else (128, 2, 4, 64)
    vocab = 4096 if ctx.quick else 32000
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=hidden * 8 // 3 // 64 * 64,
        num_hidden_layers=layers,
        num_attention_heads=hidden // 64,
        num_key_value_heads=hidden // 64,
        max_position_embeddings=2 * length,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).to(ctx.device)
    n_params = sum(p.numel() for p in model.parameters())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)
    precision = Precision("bfloat16", "float32", device=ctx.device)
    g = torch.Generator().manual_seed(0)
    prompt, response = length // 4, length - length // 4

    def batch() -> list[TrainGroup]:
        ids = torch.randint(3, vocab, (rows, length), generator=g).tolist()
        seqs = [
            TrainSequence(tuple(r[:prompt]), tuple(r[prompt:]), (0.0,) * response, 1.0) for r in ids
        ]
        return [TrainGroup(f"q{i}", (s,)) for i, s in enumerate(seqs)]

    s = UpdateSettings(minibatches=1, micro_batch_size=rows, share_prompts=False)
    times = []
    for i in range(2 if ctx.quick else 6):
        data = batch()
        if ctx.device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        train_on_batch(model, optimizer, data, s, pad_id=0, precision=precision, seed=i)
        if ctx.device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    step_s = sorted(times[1:])[len(times[1:]) // 2]  # the first step warms up
    tokens_s = rows * length / step_s
    nums: dict = {"params_M": n_params / 1e6, "tokens_per_step": rows * length}
    nums["step_s"], nums["tokens_per_s"] = step_s, tokens_s
    peak = next((v for k, v in PEAK_BF16_FLOPS.items() if k in _device_name(ctx)), None)
    # 6 N FLOPs per token (forward 2N, backward 4N), attention left out: a lower bound.
    nums["mfu"] = 6 * n_params * tokens_s / peak if peak else "n/a (no peak known)"
    return nums


def check_sharded_update(ctx: Context) -> dict:
    """grpo_tiny, 3 steps, over 2 ranks against one device: the weights agree, both ranks train."""
    from safetensors.torch import load_file

    from graft.cli import main
    from graft.rundir import read_metrics

    devices = torch.cuda.device_count() if ctx.device.startswith("cuda") else 2
    if devices < 2:
        raise Skipped("one device" if devices == 1 else f"{devices} devices")
    sets = ["run.steps=3", "run.save_every=3", "eval.every=0", "run.progress=false",
            "run.backend=processes", "algo.micro_batch_size=4", "models.0.dtype=float32",
            f"models.0.path={ctx.paths[TINY[0]]}", f"models.0.device={ctx.device}"]  # fmt: skip
    if ctx.quick:
        sets += ["rollout.prompts_per_step=4", "rollout.group_size=4", "algo.minibatches=1"]
    weights, seconds = {}, {}
    for shards in (1, 2):
        out = ctx.out / f"sharded_update_k{shards}"
        argv = ["train", str(ROOT / "configs/grpo_tiny.yaml"), "--out", str(out), "--overwrite"]
        start, run = time.monotonic(), [*sets, f"models.0.shards={shards}"]
        expect(main(argv + [x for s in run for x in ("--set", s)]) == 0, "graft train failed")
        seconds[shards] = time.monotonic() - start
        weights[shards] = load_file(str(out / "checkpoints/step_000003/llama/model.safetensors"))
        if shards == 2:
            idle = [r["shard/idle_rank_frac"] for r in read_metrics(out) if "step" in r]
            expect(max(idle) < 1 and min(idle) == 0, f"a rank had nothing to train on: {idle}")
    gap = max(((weights[2][k] - w).norm() / w.norm()).item() for k, w in weights[1].items())
    expect(gap <= 1e-5, f"K=2 weights differ from K=1's by {gap:.2e} (relative)")
    return {"weights_rel_gap": gap, "run_s_k1": seconds[1], "run_s_k2": seconds[2]}


def _device_name(ctx: Context) -> str:
    return torch.cuda.get_device_name(0) if ctx.device == "cuda" else "cpu"


def check_vllm(ctx: Context) -> dict:
    try:
        importlib.import_module("vllm")
    except ImportError:
        raise Skipped("vLLM not installed") from None
    cmd = [sys.executable, "-m", "pytest", "-m", "vllm", "-q", "-p", "no:cacheprovider"]
    files = ["test_vllm_real.py"] if ctx.quick else ["test_vllm_real.py", "test_vllm_real_runs.py"]
    done = subprocess.run(
        [*cmd, *(str(ROOT / "tests" / f) for f in files)],
        capture_output=True,
        text=True,
        timeout=max(30, ctx.left() - 10),
        cwd=ROOT,
    )
    (ctx.out / "vllm_tests.log").write_text(done.stdout + done.stderr)
    last = (done.stdout.strip().splitlines() or ["no output"])[-1]
    expect(done.returncode == 0 and "skipped" not in last, last)
    return {"pytest": last}


def check_sandbox(ctx: Context) -> dict:
    from graft.sandbox.doctor import self_check

    return self_check(skip=Skipped, fail=CheckFailed)


class Skipped(Exception):
    pass


CHECKS: list[tuple[str, Callable[[Context], dict]]] = [
    ("environment", check_environment), ("tiny_models", check_tiny_models),
    ("same_rollouts_fp32", check_same_rollouts_fp32),
    ("same_rollouts_bf16", check_same_rollouts_bf16),
    ("bf16_weights_move", check_bf16_weights_move), ("grpo_run", check_grpo_run),
    ("graft_run", check_graft_run), ("update_speed", check_update_speed),
    ("sharded_update", check_sharded_update), ("sandbox", check_sandbox), ("vllm", check_vllm),
]  # fmt: skip


@dataclass
class Context:
    device: str
    out: Path
    wheels: Path | None
    quick: bool
    deadline: float
    paths: dict[str, str] = field(default_factory=dict)
    groups: list | None = None

    def left(self) -> float:
        return self.deadline - time.monotonic()


def run_checks(ctx: Context, only: set[str] | None = None) -> list[Result]:
    results = []
    for name, fn in CHECKS:
        if only and name not in only:
            continue
        start = time.monotonic()
        result = Result(name, "PASS", ctx.device)
        if ctx.left() <= 0:
            result.status, result.note = "SKIP", "skipped: the time budget is spent"
        else:
            try:
                result.numbers = fn(ctx)
            except Skipped as why:
                result.status, result.note = "SKIP", f"skipped: {why}"
            except Exception as err:  # a check fails with its one-line reason; the rest go on
                result.status, result.note = "FAIL", f"{type(err).__name__}: {err}"[:300]
                (ctx.out / f"{name}.traceback.txt").write_text(traceback.format_exc())
        result.seconds = time.monotonic() - start
        print(result.line(), flush=True)
        results.append(result)
    return results


def write_summary(results: list[Result], ctx: Context, out: Path) -> None:
    rows = [r.__dict__ for r in results]
    (out / "gpu_check.json").write_text(json.dumps(rows, indent=2) + "\n")
    failed = sum(r.status == "FAIL" for r in results)
    lines = [
        "# GPU check",
        "",
        f"`python scripts/gpu_check.py --device {ctx.device}{' --quick' if ctx.quick else ''}` on "
        f"{_device_name(ctx)}, {time.strftime('%Y-%m-%d')}: {failed} failed.",
        "",
        "| check | status | device | numbers | note | s |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        nums = ", ".join(f"{k} {_fmt(v)}" for k, v in r.numbers.items())
        lines.append(
            f"| {r.name} | {r.status} | {r.device} | {nums} | {r.note} | {r.seconds:.1f} |"
        )
    (out / "gpu_check.md").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--out", default=os.environ.get("OUT") or "runs/gpu_check")
    parser.add_argument("--wheels", help="a folder of wheels for math-verify (no index is used)")
    parser.add_argument("--quick", action="store_true", help="small sizes (the CPU test)")
    parser.add_argument("--budget-s", type=float, default=480, help="skip checks past this")
    parser.add_argument("--only", action="append", help="run only this check (repeatable)")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("GRAFT_CACHE", str(ROOT / ".cache" / "graft"))
    ctx = Context(
        device=args.device,
        out=out,
        wheels=Path(args.wheels) if args.wheels else None,
        quick=args.quick,
        deadline=time.monotonic() + args.budget_s,
    )
    results = run_checks(ctx, set(args.only) if args.only else None)
    write_summary(results, ctx, out)
    failed = sum(r.status == "FAIL" for r in results)
    print(f"gpu_check: {failed} failed; summary in {out / 'gpu_check.md'}")
    return failed


if __name__ == "__main__":
    sys.exit(main())
