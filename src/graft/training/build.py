"""Building a policy from its spec: model and tokenizer loaded to their device and dtype, LoRA
adapters, the frozen reference for a KL term, the AdamW optimizer over what trains, the precision
policy and, for `rollout.engine=vllm`, the sampling engine. `Policy` holds what this returns."""

from __future__ import annotations

import copy
import dataclasses
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from graft.config import AlgoConfig, ConfigError, ModelConfig, RolloutConfig
from graft.config.lib import expand_user
from graft.models.common import model_fingerprint, state_fingerprint
from graft.models.load import load_model_and_tokenizer
from graft.models.lora import (
    AdapterOff,
    LoRAError,
    adapter_settings,
    adapter_state,
    apply_lora,
    check_adapter_base,
    load_adapter,
    lora_enabled,
)
from graft.models.modeling import checkpoint_layers, head_gradients_in_place
from graft.models.precision import Precision, low_precision_warning
from graft.seeds import derive_seed
from graft.training.update import UpdateSettings


def resolve_device(device: str) -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


@dataclass(frozen=True)
class PolicySpec:
    """Everything a worker needs to build a policy (plain data, picklable)."""

    model: ModelConfig
    rollout: RolloutConfig
    algo: AlgoConfig
    seed: int
    threads: int = 0
    cache_dir: str = ""
    index: int = 0
    """Position in the config's model list (for error messages: models.<index>)."""
    update: UpdateSettings | None = None
    """The update's settings, built by the driver from the whole config (`policy_specs`); None:
    those of `algo`, `rollout` and the model's optimizer, without an exchange's settings."""

    def update_settings(self) -> UpdateSettings:
        """The settings this policy's update runs with. With activation checkpointing its forward
        runs each sequence whole: the shared-prompt forward extends a KV cache inside every
        layer, which a recomputed layer would extend a second time (sampling and scoring, without
        gradients, still share prompts)."""
        settings = self.update
        if settings is None:
            settings = UpdateSettings.from_config(self.algo, self.rollout, self.model.optim)
        if self.model.activation_checkpointing:
            algo = dataclasses.replace(settings.algo, share_prompts=False)
            settings = dataclasses.replace(settings, algo=algo)
        return settings


@dataclass
class PolicyParts:
    """What a policy is made of, built once by `build_parts`."""

    device: str
    model: PreTrainedModel
    """The model that trains (with LoRA: the base model with the adapter layers injected)."""
    tokenizer: PreTrainedTokenizerBase
    adapter: Any
    """The peft wrapper when only LoRA adapters train, else None."""
    fingerprint: str
    """Of the initial weights (with LoRA: `<base hash>+lora:<adapter hash>`); stored."""
    precision: Precision
    ref_model: torch.nn.Module | None
    """The frozen reference policy of the KL term (None without one)."""
    optimizer: torch.optim.Optimizer
    engine: Any
    """The vLLM engine (None: sampling with transformers)."""


def build_parts(spec: PolicySpec) -> PolicyParts:
    if spec.threads > 0:
        torch.set_num_threads(spec.threads)
    key = f"models.{spec.index}"
    device = resolve_device(spec.model.device)
    cache = Path(spec.cache_dir) if spec.cache_dir else None
    model, tokenizer = load_model_and_tokenizer(spec.model, cache_dir=cache, key=key, device=device)
    model.eval()  # no dropout in RL updates; gradients still flow
    m = spec.model
    precision = Precision(m.dtype, m.param_dtype, device=device)
    message = low_precision_warning(m.dtype, m.param_dtype, key=key)
    if message:
        warnings.warn(message, stacklevel=3)
    fingerprint = model_fingerprint(model)
    adapter = None
    if lora_enabled(m.lora) or m.adapter:
        adapter, model, fingerprint = _add_adapter(spec, model, fingerprint)
    ref_model: torch.nn.Module | None = None
    if spec.algo.kl_coef > 0:
        ref_model = (
            AdapterOff(adapter)
            if adapter is not None
            else copy.deepcopy(model).requires_grad_(False)
        )
    if m.activation_checkpointing:  # after the reference's copy, which must run its own layers
        checkpoint_layers(model)
    head_gradients_in_place(model)
    o = m.optim
    optimizer = torch.optim.AdamW(
        [p for p in model.parameters() if p.requires_grad],
        lr=o.lr,
        betas=o.betas,
        eps=o.eps,
        weight_decay=o.weight_decay,
    )
    engine = None
    if spec.rollout.engine == "vllm":
        from graft.rollout.vllm_engine import VLLMEngine

        # The engine takes this model's config and weights (whatever models.N names). A sharded
        # policy's rank 0 keeps this process's torch.distributed group for its shards: its
        # engine runs in processes of its own.
        engine = VLLMEngine(
            model,
            rollout=spec.rollout,
            dtype=m.dtype,
            seed=spec.seed,
            key=key,
            own_process=m.shards > 1,
        )
    return PolicyParts(
        device, model, tokenizer, adapter, fingerprint, precision, ref_model, optimizer, engine
    )


def _add_adapter(spec: PolicySpec, model: PreTrainedModel, fingerprint: str):
    """LoRA adapters on the model, seeded per run and policy, or those of `models.N.adapter`:
    (the peft wrapper, the model with the adapter layers injected, the revision
    `<base hash>+lora:<adapter hash>`)."""
    seed = derive_seed(spec.seed, spec.model.name, "lora")
    key, lora = f"models.{spec.index}", spec.model.lora
    try:
        if spec.model.adapter:
            path = Path(expand_user(spec.model.adapter, f"{key}.adapter"))
            lora = adapter_settings(path, key=f"{key}.adapter")
            check_adapter_base(
                path, model_path=spec.model.path, fingerprint=fingerprint, key=f"{key}.adapter"
            )
        adapter = apply_lora(model, lora, key=f"{key}.lora", seed=seed)
        if spec.model.adapter:
            load_adapter(adapter, path, error=LoRAError)
    except LoRAError as err:
        raise ConfigError(str(err)) from None
    fingerprint += f"+lora:{state_fingerprint(adapter_state(adapter))}"
    return adapter, adapter.get_base_model(), fingerprint


def set_warmup_lr(optimizer: torch.optim.Optimizer, optim: Any, num_updates: int) -> float:
    """The learning rate of update `num_updates` (1-based: linear warm-up over
    `optim.warmup_steps`, then `optim.lr`), set on every parameter group."""
    scale = min(1.0, num_updates / optim.warmup_steps) if optim.warmup_steps > 0 else 1.0
    for group in optimizer.param_groups:
        group["lr"] = optim.lr * scale
    return optim.lr * scale
