"""Cross-field checks of a run configuration, and the sizes derived from a valid one.

Kept apart from `config.py` so that the config file reads as a list of fields with their docs. A
`Config` runs `validate` on itself once, when it is made (`Config.__post_init__`), so every config
that reaches the trainer, whether read from YAML or built in code, has been checked exactly once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from graft.configlib import ConfigError

if TYPE_CHECKING:
    from graft.config import Config, LoRAConfig


@dataclass(frozen=True)
class Plan:
    """Sizes derived from a config, computed once."""

    prompts_per_step: int
    group_size: int
    eval_max_new_tokens: int


def _check(ok: bool, key: str, message: str) -> None:
    if not ok:
        raise ConfigError(f"{key}: {message}")


def _check_lora(lora: LoRAConfig, key: str, *, engine: str) -> None:
    _check(lora.r >= 0, f"{key}.r", f"must be >= 0 (0: off), got {lora.r}")
    if lora.r == 0:
        return
    _check(lora.alpha >= 0, f"{key}.alpha", f"must be > 0 (0: 2 r), got {lora.alpha}")
    _check(0 <= lora.dropout < 1, f"{key}.dropout", f"must be in [0, 1), got {lora.dropout}")
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
    """Cross-field checks; raises ConfigError naming the offending key."""
    r, a = cfg.rollout, cfg.algo
    _check(r.group_size >= 2, "rollout.group_size", f"must be >= 2 (got {r.group_size})")
    _check(r.prompts_per_step >= 1, "rollout.prompts_per_step", "must be >= 1")
    _check(a.minibatches >= 1, "algo.minibatches", "must be >= 1")
    _check(
        r.prompts_per_step % a.minibatches == 0,
        "algo.minibatches",
        f"rollout.prompts_per_step={r.prompts_per_step} is not divisible by "
        f"algo.minibatches={a.minibatches}",
    )
    _check(r.max_new_tokens >= 1, "rollout.max_new_tokens", "must be >= 1")
    _check(r.temperature > 0, "rollout.temperature", "must be > 0 for training rollouts")
    _check(0 < r.top_p <= 1, "rollout.top_p", f"must be in (0, 1] (got {r.top_p})")
    _check(r.top_k >= 0, "rollout.top_k", "must be >= 0")
    _check(r.batch_size >= 0, "rollout.batch_size", "must be >= 0")
    _check(0 <= a.clip_low < 1, "algo.clip_low", f"must be in [0, 1) (got {a.clip_low})")
    _check(a.clip_high >= 0, "algo.clip_high", "must be >= 0")
    _check(a.dual_clip == 0 or a.dual_clip > 1, "algo.dual_clip", "must be 0 (off) or > 1")
    _check(a.micro_batch_size >= 1, "algo.micro_batch_size", "must be >= 1")
    _check(a.epochs >= 1, "algo.epochs", "must be >= 1")
    _check(a.kl_coef >= 0, "algo.kl_coef", "must be >= 0")
    _check(a.adv_eps >= 0, "algo.adv_eps", "must be >= 0")
    _check(a.loss_constant >= 0, "algo.loss_constant", "must be >= 0")
    _check(cfg.run.steps >= 1, "run.steps", "must be >= 1")
    _check(cfg.run.save_every >= 0, "run.save_every", "must be >= 0")
    _check(cfg.run.keep_checkpoints >= 1, "run.keep_checkpoints", "must be >= 1")
    _check(cfg.verify.workers >= 1, "verify.workers", "must be >= 1")
    _check(cfg.verify.timeout_s > 0, "verify.timeout_s", "must be > 0")
    _check(
        0 <= cfg.verify.max_unparseable_golds <= 1,
        "verify.max_unparseable_golds",
        "must be a share between 0 and 1",
    )
    _check(len(cfg.models) >= 1, "models", "list at least one model")
    names = [m.name for m in cfg.models]
    for i, m in enumerate(cfg.models):
        _check(bool(m.name), f"models.{i}.name", "must not be empty")
        _check(names.count(m.name) == 1, f"models.{i}.name", f"duplicate model name {m.name!r}")
        _check(
            m.name.replace("-", "").replace("_", "").isalnum(),
            f"models.{i}.name",
            f"use letters, digits, '-' and '_' only (got {m.name!r})",
        )
        _check(bool(m.path), f"models.{i}.path", "must not be empty")
        _check(
            "{prompt}" in m.prompt_template,
            f"models.{i}.prompt_template",
            "must contain the placeholder {prompt}",
        )
        _check(m.optim.lr > 0, f"models.{i}.optim.lr", "must be > 0")
        _check(m.optim.grad_clip >= 0, f"models.{i}.optim.grad_clip", "must be >= 0")
        _check_lora(m.lora, f"models.{i}.lora", engine=cfg.rollout.engine)
    t = cfg.task
    if t.name == "math":
        _check(bool(t.math.train), "task.math.train", "set a data file or dataset name")
    else:
        _check(len(t.arithmetic.skills) >= 1, "task.arithmetic.skills", "list at least one skill")
        _check(t.arithmetic.num_train >= 1, "task.arithmetic.num_train", "must be >= 1")
    x = cfg.exchange
    _check(0 <= x.delta < 1e9, "exchange.delta", "must be >= 0")
    _check(x.sgt_coef >= 0, "exchange.sgt_coef", "must be >= 0")
    _check(x.luffy_gamma > 0, "exchange.luffy_gamma", "must be > 0")
    _check(x.warn_after >= 1, "exchange.warn_after", "must be >= 1")
    if x.source == "stored" and x.enabled:
        _check(bool(x.store), "exchange.store", "stored mode needs the peer's trajectory store")
        _check(len(cfg.models) == 1, "models", "stored mode trains exactly one model")
        _check(x.peer_step >= 0, "exchange.peer_step", "must be >= 0")
    e = cfg.eval
    _check(e.every >= 0, "eval.every", "must be >= 0")
    _check(e.samples >= 1, "eval.samples", "must be >= 1")
    _check(e.temperature >= 0, "eval.temperature", "must be >= 0")


def make_plan(cfg: Config) -> Plan:
    """The sizes of a (valid: made, hence validated) config."""
    r = cfg.rollout
    return Plan(
        prompts_per_step=r.prompts_per_step,
        group_size=r.group_size,
        eval_max_new_tokens=cfg.eval.max_new_tokens or r.max_new_tokens,
    )
