"""Cross-field checks of a run configuration, and the sizes derived from a valid one.

Kept apart from `config.py` so that the config file reads as a list of fields with their docs. A
`Config` runs `validate` on itself once, when it is made (`Config.__post_init__`), so every config
that reaches the trainer, whether read from YAML or built in code, has been checked exactly once.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from graft.config.lib import ConfigError, expand_user

if TYPE_CHECKING:
    from graft.config import Config, LoRAConfig, ModelConfig, OptimConfig


MAX_INT = 2**31 - 1
"""The largest count or step graft hands on: torch's int32 indices, the store's int32 columns."""
MAX_TOKENS = 2**20
"""The longest prompt or response (token buffers are allocated at this length)."""
MAX_SEQUENCES = 2**20
"""The most sequences one rollout batch or one evaluation samples per problem."""
MAX_GROUP = 2**15 - 1
"""The largest group: the store keeps a response's place in its group as int16."""
MAX_PROBLEMS = 10**6
"""The most synthetic problems per split (they are all generated up front)."""
MAX_PROCESSES = 1024
"""The most verifier worker processes."""
MAX_THREADS = 2**16
"""The most threads, CPUs or GPUs one policy may ask for."""
MAX_EPOCHS = 1024
"""The most passes over one rollout batch."""
MAX_KL_COEF = 1e6
"""The largest KL coefficient: past it the policy-gradient term (of order 1 per token) is lost
in the float32 sum beside the KL term (24 bits of mantissa, about 1 part in 1.7e7), so the run
learns nothing from its rewards; near 1e38 the loss overflows outright."""
MAX_LORA_RANK = 2**16
"""The largest LoRA rank (adapters are allocated at it)."""


@dataclass(frozen=True)
class Plan:
    """Sizes derived from a config, computed once."""

    prompts_per_step: int
    group_size: int
    eval_max_new_tokens: int


def _check(ok: bool, key: str, message: str) -> None:
    if not ok:
        raise ConfigError(f"{key}: {message}")


def _count(value: int, key: str, low: int, high: int = MAX_INT, note: str = "") -> None:
    """An integer in [low, high]; `note` says what the bound is for."""
    bound = f">= {low}" if high == MAX_INT else f"in [{low}, {high}]"
    if high == MAX_INT and value > high:
        bound = f"at most {high}"
    _check(low <= value <= high, key, f"must be {bound}{note} (got {value})")


def _number(
    value: float,
    key: str,
    low: float,
    high: float | None = None,
    *,
    open_low: bool = False,
    open_high: bool = False,
    note: str = "",
) -> None:
    """A finite float in the interval from `low` to `high` (None: unbounded), ends open or not."""
    ok = math.isfinite(value) and (value > low if open_low else value >= low)
    if high is not None:
        ok = ok and (value < high if open_high else value <= high)
        where = f"in {'(' if open_low else '['}{low:g}, {high:g}{')' if open_high else ']'}"
    else:
        where = f"a finite number {'>' if open_low else '>='} {low:g}"
    _check(ok, key, f"must be {where}{note} (got {value!r})")


def _check_path(path: str, key: str) -> None:
    """A local path's `~user` must resolve (else it names a folder literally called `~user`)."""
    if path.startswith("~"):
        expand_user(path, key)


def _check_lora(lora: LoRAConfig, key: str, *, engine: str) -> None:
    _check(lora.r >= 0, f"{key}.r", f"must be >= 0 (0: off), got {lora.r}")
    _count(lora.r, f"{key}.r", 0, MAX_LORA_RANK, note=" (0: off)")
    if lora.r == 0:
        default = type(lora)()
        for name in ("alpha", "dropout", "target_modules"):
            _check(
                getattr(lora, name) == getattr(default, name),
                f"{key}.{name}",
                f"set to {getattr(lora, name)!r} while {key}.r is 0, so LoRA is off and the "
                f"whole model trains; set {key}.r > 0 to train adapters, or remove {name}",
            )
        return
    _check(
        lora.alpha >= 0 and math.isfinite(lora.alpha),
        f"{key}.alpha",
        f"must be > 0 (0: 2 r) and finite, got {lora.alpha}",
    )
    _check(0 <= lora.dropout < 1, f"{key}.dropout", f"must be in [0, 1), got {lora.dropout}")
    if isinstance(lora.target_modules, str):
        try:
            re.compile(lora.target_modules)
        except re.error as err:
            _check(False, f"{key}.target_modules", f"not a regular expression ({err})")
    else:
        for name in lora.target_modules:
            _check(
                bool(name) and all(part.isidentifier() for part in name.split(".")),
                f"{key}.target_modules",
                f"{name!r} is not a module name (e.g. q_proj)",
            )
    _check(
        engine != "vllm",
        f"{key}.r",
        "LoRA adapters cannot be pushed into the vLLM engine; use rollout.engine=hf",
    )


def validate(cfg: Config) -> None:
    """Every value against what its consumers accept, and the cross-field checks; raises
    ConfigError naming the offending key. Runs before anything is loaded or written."""
    _check_run(cfg)
    _check_rollout(cfg)
    _check_algo(cfg)
    _check_models(cfg)
    _check_task(cfg)
    _check_exchange(cfg)
    _check_eval(cfg)
    _check_sft(cfg)
    v = cfg.verify
    _count(v.workers, "verify.workers", 1, MAX_PROCESSES)
    _number(v.timeout_s, "verify.timeout_s", 0, open_low=True)
    _number(v.max_unparseable_golds, "verify.max_unparseable_golds", 0, 1, note=" (a share)")
    _check_path(cfg.store.path, "store.path")


def _check_run(cfg: Config) -> None:
    run = cfg.run
    _check(bool(run.out_dir), "run.out_dir", "must not be empty; name the run directory")
    _check_path(run.out_dir, "run.out_dir")
    _count(run.steps, "run.steps", 1, note=" (the store keeps steps as int32)")
    _count(run.save_every, "run.save_every", 0)
    _count(run.keep_checkpoints, "run.keep_checkpoints", 1)
    _count(run.log_every, "run.log_every", 0, note=" (0: never)")
    _count(run.no_signal_after, "run.no_signal_after", 0, note=" (0: never)")
    _count(run.threads, "run.threads", 0, MAX_THREADS, note=" (0: all cores)")
    twice = sorted({t for t in run.report_to if run.report_to.count(t) > 1})
    _check(not twice, "run.report_to", f"names {', '.join(twice)} more than once")
    _check(bool(run.project.strip()) or not run.report_to, "run.project", "must not be empty")
    _check(
        not (cfg.rollout.engine == "vllm" and run.backend == "inprocess" and len(cfg.models) > 1),
        "run.backend",
        "inprocess cannot hold several vLLM engines (vLLM allows one sleep-mode engine per "
        "process); use processes or ray with rollout.engine=vllm",
    )


def _check_rollout(cfg: Config) -> None:
    r = cfg.rollout
    _count(r.group_size, "rollout.group_size", 2, MAX_GROUP)
    _count(r.prompts_per_step, "rollout.prompts_per_step", 1, MAX_SEQUENCES)
    _check(
        r.prompts_per_step * r.group_size <= MAX_SEQUENCES,
        "rollout.prompts_per_step",
        f"{r.prompts_per_step} prompts x rollout.group_size={r.group_size} is "
        f"{r.prompts_per_step * r.group_size} sequences per step; at most {MAX_SEQUENCES}",
    )
    _count(r.max_new_tokens, "rollout.max_new_tokens", 1, MAX_TOKENS)
    _count(r.max_prompt_tokens, "rollout.max_prompt_tokens", 1, MAX_TOKENS)
    _number(r.temperature, "rollout.temperature", 0, open_low=True, note=" for training rollouts")
    _number(r.top_p, "rollout.top_p", 0, 1, open_low=True)
    _count(r.top_k, "rollout.top_k", 0, note=" (0: off)")
    _count(r.batch_size, "rollout.batch_size", 0, note=" (0: the whole batch)")
    _number(r.vllm_gpu_memory, "rollout.vllm_gpu_memory", 0, 1, open_low=True, note=" (a share)")


def _check_algo(cfg: Config) -> None:
    a, r = cfg.algo, cfg.rollout
    _count(a.minibatches, "algo.minibatches", 1)
    _check(
        r.prompts_per_step % a.minibatches == 0,
        "algo.minibatches",
        f"rollout.prompts_per_step={r.prompts_per_step} is not divisible by "
        f"algo.minibatches={a.minibatches}",
    )
    _number(a.clip_low, "algo.clip_low", 0, 1, open_high=True)
    _number(a.clip_high, "algo.clip_high", 0)
    _check(
        a.dual_clip == 0 or (math.isfinite(a.dual_clip) and a.dual_clip > 1),
        "algo.dual_clip",
        f"must be 0 (off) or a finite number > 1 (got {a.dual_clip!r})",
    )
    _count(a.micro_batch_size, "algo.micro_batch_size", 1)
    _count(a.epochs, "algo.epochs", 1, MAX_EPOCHS)
    _number(
        a.kl_coef, "algo.kl_coef", 0, MAX_KL_COEF, note=" (past it float32 loses the reward's term)"
    )
    _number(a.adv_eps, "algo.adv_eps", 0)
    _check(
        a.advantage != "grpo" or a.adv_eps > 0,
        "algo.adv_eps",
        "must be > 0 with algo.advantage=grpo (a group whose rewards are all equal has std 0, "
        "and 0 / 0 is NaN)",
    )
    _count(a.loss_constant, "algo.loss_constant", 0, note=" (0: rollout.max_new_tokens)")


def _check_models(cfg: Config) -> None:
    _check(len(cfg.models) >= 1, "models", "list at least one model")
    names = [m.name for m in cfg.models]
    for i, m in enumerate(cfg.models):
        key = f"models.{i}"
        _check(bool(m.name), f"{key}.name", "must not be empty")
        _check(names.count(m.name) == 1, f"{key}.name", f"duplicate model name {m.name!r}")
        _check(
            m.name.replace("-", "").replace("_", "").isalnum(),
            f"{key}.name",
            f"use letters, digits, '-' and '_' only (got {m.name!r})",
        )
        _check(bool(m.path), f"{key}.path", "must not be empty")
        _check_path(m.path, f"{key}.path")
        _check_path(m.tokenizer, f"{key}.tokenizer")
        _check(
            "{prompt}" in m.prompt_template,
            f"{key}.prompt_template",
            "must contain the placeholder {prompt}",
        )
        _check(
            m.param_dtype in ("float32", m.dtype),
            f"{key}.param_dtype",
            f"must be float32 (master weights) or the compute dtype {m.dtype!r}, got "
            f"{m.param_dtype!r}",
        )
        _check(
            re.fullmatch(r"auto|meta|(cpu|cuda|mps|xpu|npu|hpu)(:\d+)?", m.device) is not None,
            f"{key}.device",
            f"must be auto, or cpu, cuda, mps, xpu, npu, hpu with optional :N (got {m.device!r})",
        )
        _number(m.num_gpus, f"{key}.num_gpus", 0, MAX_THREADS)
        _number(m.num_cpus, f"{key}.num_cpus", 0, MAX_THREADS, note=" (0: a share of run.threads)")
        _check_optim(m.optim, f"{key}.optim")
        _check_lora(m.lora, f"{key}.lora", engine=cfg.rollout.engine)
        if m.adapter:
            _check_path(m.adapter, f"{key}.adapter")
            _check(
                m.lora.r == 0,
                f"{key}.lora.r",
                f"set together with {key}.adapter, whose adapter_config.json gives the LoRA "
                "settings; remove the lora block",
            )
            _check(
                cfg.rollout.engine != "vllm",
                f"{key}.adapter",
                "LoRA adapters cannot be pushed into the vLLM engine; use rollout.engine=hf",
            )
        _check_shards(cfg, m, f"{key}.shards")
        _check_zero_contrast(cfg, m, f"{key}.zero_contrast")


def _check_zero_contrast(cfg: Config, m: ModelConfig, key: str) -> None:
    """A resampling budget that can buy something: at least one round, and room for one group."""
    z = m.zero_contrast
    _count(z.max_rounds, f"{key}.max_rounds", 1, MAX_EPOCHS, note=" (extra rounds per step)")
    if z.max_responses is not None:
        n = cfg.rollout.group_size
        _count(
            z.max_responses,
            f"{key}.max_responses",
            n,
            note=f" (one group of rollout.group_size={n}; null: no bound beyond max_rounds)",
        )


def _check_shards(cfg: Config, m: ModelConfig, key: str) -> None:
    _count(m.shards, key, 1, MAX_PROCESSES)
    if m.shards == 1:
        return
    unsupported = [
        (cfg.run.backend != "inprocess", f"run.backend={cfg.run.backend}",
         "rank 0 is the policy's own worker process and ranks 1..K-1 its children or Ray actors; "
         "in-process, the driver would be rank 0 of every sharded policy at once"),
        (m.lora.r == 0 and not m.adapter, "LoRA adapters",
         "FSDP over a peft-wrapped model (sharding trainable adapters beside frozen base weights) "
         "is not built or tested"),
        (m.param_dtype == "float32", f"param_dtype {m.param_dtype}",
         "the shards are the float32 master weights, which FSDP casts to models.N.dtype for "
         "every forward; leave param_dtype at float32"),
    ]  # fmt: skip
    for ok, what, why in unsupported:
        _check(
            ok,
            key,
            f"a sharded policy ({m.shards} ranks) does not support {what}: {why} "
            '(docs/scaling.md, "Not yet")',
        )


def _check_optim(o: OptimConfig, key: str) -> None:
    _number(o.lr, f"{key}.lr", 0, 1, open_low=True, note=" (AdamW moves each weight ~lr a step)")
    for j, beta in enumerate(o.betas):
        _number(beta, f"{key}.betas", 0, 1, open_high=True, note=f" (beta {j + 1})")
    _number(o.eps, f"{key}.eps", 0, open_low=True)
    _number(o.weight_decay, f"{key}.weight_decay", 0)
    _check(
        o.lr * o.weight_decay <= 1,
        f"{key}.weight_decay",
        f"lr x weight_decay must be at most 1 (each step multiplies the weights by "
        f"1 - lr x weight_decay; got {o.lr:g} x {o.weight_decay:g})",
    )
    _number(o.grad_clip, f"{key}.grad_clip", 0, note=" (0: off)")
    _count(o.warmup_steps, f"{key}.warmup_steps", 0)


def _check_data_files(section, key: str, missing: str) -> None:
    """A data task's train/test/val paths and row limit."""
    _check(bool(section.train), f"{key}.train", missing)
    for name in ("train", "test", "val"):
        _check_path(getattr(section, name), f"{key}.{name}")
    _count(section.limit, f"{key}.limit", 0, note=" (0: all rows)")


def names_a_dataset(source: str) -> bool:
    """A Hugging Face dataset name (`org/name`: no file suffix, no such path here) rather than
    a local data file."""
    path = Path(source).expanduser()
    return bool(source) and not path.suffix and not path.exists()


def _check_task(cfg: Config) -> None:
    t = cfg.task
    if t.name == "math":
        m = t.math
        _check_data_files(m, "task.math", "set a data file or dataset name")
        _check(bool(m.problem_column), "task.math.problem_column", "must not be empty")
        _check(bool(m.answer_column), "task.math.answer_column", "must not be empty")
    elif t.name == "code":
        c = t.code
        _check_data_files(c, "task.code", "set a .jsonl or .parquet file of code problems")
        _count(c.stdout_bytes, "task.code.stdout_bytes", 1 << 10, 1 << 30, note=" (bytes)")
        _check_path(c.left_out_dir, "task.code.left_out_dir")
        named = [n for n in (c.train, c.test, c.val) if names_a_dataset(n)]
        _check(
            not named or re.fullmatch(r"[0-9a-f]{40}", c.revision) is not None,
            "task.code.revision",
            f"{named[0] if named else ''!r} is read as a Hugging Face dataset, which must be "
            "pinned to its full commit id (40 hex characters) so the problems cannot change "
            "under a run; or pass a local .jsonl/.parquet file",
        )
    elif t.name == "list_functions":
        f = t.list_functions
        _check(len(f.skills) >= 1, "task.list_functions.skills", "list at least one skill")
        _count(f.num_train, "task.list_functions.num_train", 1, MAX_PROBLEMS)
        _count(f.num_test, "task.list_functions.num_test", 0, MAX_PROBLEMS)
        _count(f.num_val, "task.list_functions.num_val", 0, MAX_PROBLEMS)
    else:
        a = t.arithmetic
        _check(len(a.skills) >= 1, "task.arithmetic.skills", "list at least one skill")
        _count(a.num_train, "task.arithmetic.num_train", 1, MAX_PROBLEMS)
        _count(a.num_test, "task.arithmetic.num_test", 0, MAX_PROBLEMS)
        _count(a.num_val, "task.arithmetic.num_val", 0, MAX_PROBLEMS)


def _check_exchange(cfg: Config) -> None:
    x, a, st = cfg.exchange, cfg.exchange.ablation, cfg.exchange.stored
    _check(0 <= x.delta < 1e9, "exchange.delta", "must be >= 0")
    _number(a.sgt_coef, "exchange.ablation.sgt_coef", 0)
    _number(a.luffy_gamma, "exchange.ablation.luffy_gamma", 0, open_low=True)
    _count(x.warn_after, "exchange.warn_after", 1)
    _count(st.step, "exchange.stored.step", 0)
    _check_path(st.path, "exchange.stored.path")
    if x.source == "stored" and x.enabled:
        _check(
            bool(st.path), "exchange.stored.path", "stored mode needs the peer's trajectory store"
        )
        _check(len(cfg.models) == 1, "models", "stored mode trains exactly one model")
    _check(
        st.rewards == "verified" or x.source == "stored",
        "exchange.stored.rewards",
        "shuffled needs a stored peer (exchange.source=stored)",
    )


def _check_eval(cfg: Config) -> None:
    e = cfg.eval
    _count(e.every, "eval.every", 0, note=" (0: never)")
    _count(e.num_problems, "eval.num_problems", 0, note=" (0: all)")
    _count(e.samples, "eval.samples", 1, MAX_SEQUENCES)
    check_eval_sampling(e.temperature, e.top_p, keys=("eval.temperature", "eval.top_p"))
    _count(e.max_new_tokens, "eval.max_new_tokens", 0, MAX_TOKENS, note=" (0: the rollout's)")
    if e.every > 0:
        _check(len(e.suites) >= 1, "eval.suites", "list at least one suite (or set eval.every=0)")
    for i, suite in enumerate(e.suites):
        _check(bool(suite), f"eval.suites.{i}", "must not be empty")
        _check_path(suite, f"eval.suites.{i}")


def check_eval_sampling(temperature: float, top_p: float, *, keys: tuple[str, str]) -> None:
    """An evaluation's temperature (0: greedy) and nucleus; `keys` name them in the message."""
    _number(temperature, keys[0], 0, note=" (0: greedy)")
    _number(top_p, keys[1], 0, 1, open_low=True)


def _check_sft(cfg: Config) -> None:
    f = cfg.sft
    _number(f.val_fraction, "sft.val_fraction", 0, 0.9, note=" (a share of the store's prompts)")
    _count(f.batch_size, "sft.batch_size", 1, MAX_SEQUENCES)
    _count(f.max_per_prompt, "sft.max_per_prompt", 0, note=" (0: all)")
    _check_path(f.store, "sft.store")


def make_plan(cfg: Config) -> Plan:
    """The sizes of a (valid: made, hence validated) config."""
    r = cfg.rollout
    return Plan(
        prompts_per_step=r.prompts_per_step,
        group_size=r.group_size,
        eval_max_new_tokens=cfg.eval.max_new_tokens or r.max_new_tokens,
    )
