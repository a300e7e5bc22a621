"""Generation with vLLM (optional GPU extra; imported only when `rollout.engine=vllm`).

Same contract as `graft.rollout.generate.sample`: one `Sample` per prompt row with token ids, the
log-prob of every sampled token under the distribution the update's ratio compares against
(softmax(logits / T), before any top-k / top-p truncation), and the finish reason.

The engine is correct by construction in four ways:

- **What it runs.** vLLM gets only the architecture: the policy's own `config.json` (of the model
  graft loaded from `models.N`: a `tiny:` preset, a local folder, a `.gguf` file, a hub name at
  its `revision`) written to a private folder, with random (`load_format="dummy"`) weights that
  are replaced at once by the policy's weights. It never sees a tokenizer
  (`skip_tokenizer_init`): graft encodes prompts and decodes responses with `models.N.tokenizer`,
  so both samplers see the same token ids.
- **Length.** `max_model_len` = rollout.max_prompt_tokens + rollout.max_new_tokens, capped at the
  model's own position limit (vLLM refuses a larger value).
- **Log-probs.** vLLM reports either raw log-probs (softmax(logits), before temperature) or
  processed ones (after temperature AND top-k / top-p, renormalized). At temperature 1 the raw ones
  are the trainer's; without truncation the processed ones are. Temperature != 1 together with
  top-k / top-p is refused at start-up with one line: no mode of vLLM reports those log-probs.
- **Weights.** After every update the policy's weights are loaded into the engine and its prefix
  cache is reset (vLLM leaves that to the caller), so no cached KV block from older weights is
  reused. Between samplings the engine sleeps (level 1: weights to CPU memory, KV cache freed),
  which gives the GPU memory of its KV cache back to training.

Supported: vLLM 0.30.x (the release whose pins match graft's torch and transformers pins; see
docs/scaling.md). Another installed version is refused at start-up with one line.
"""

from __future__ import annotations

import copy
import functools
import importlib.metadata
import os
import tempfile
from collections.abc import Iterable, Sequence
from typing import Any

import torch

from graft.config import RolloutConfig
from graft.configlib import ConfigError
from graft.errors import DataError
from graft.rollout.generate import Sample, SamplingParams
from graft.types import FinishReason

VLLM_SERIES = "0.30"
"""The vLLM release series this engine is written and pinned against (`graft-rl[vllm]`)."""
INSTALL_ROUTE = "pip install 'graft-rl[vllm]' on Python 3.13 (see docs/scaling.md)"

# The config keys vLLM derives a model's length limit from (the smallest one present wins).
_POSITION_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "model_max_length",
    "max_target_positions",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
)


def check_vllm_version(installed: str | None) -> None:
    """Refuse a missing or unsupported vLLM with one line naming the installed version."""
    if installed is None:
        raise ConfigError(f"rollout.engine: vllm is not installed; {INSTALL_ROUTE}")
    if installed != VLLM_SERIES and not installed.startswith(VLLM_SERIES + "."):
        raise ConfigError(
            f"rollout.engine: installed vLLM {installed} is not supported; graft runs vLLM "
            f"{VLLM_SERIES}.x (built for torch 2.13, transformers 5.23): {INSTALL_ROUTE}"
        )


def load_vllm() -> Any:
    """The `vllm` module, after checking its version and that a CUDA GPU is visible."""
    try:
        installed: str | None = importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        installed = None
    check_vllm_version(installed)
    if not torch.cuda.is_available():
        raise ConfigError("rollout.engine: vllm needs a CUDA GPU and none is visible; use hf")
    # The engine runs in this process, so that weights reach its model without serialization.
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    import vllm

    return vllm


def position_limit(config: Any) -> int | None:
    """The model's own length limit, as vLLM derives it from the config (None: no such key)."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    values = [getattr(text, k, None) for k in _POSITION_KEYS]
    found = [int(v) for v in values if isinstance(v, int) and not isinstance(v, bool) and v > 0]
    return min(found) if found else None


def engine_length(max_prompt_tokens: int, max_new_tokens: int, limit: int | None) -> int:
    """vLLM's max_model_len: the longest rollout sequence, capped at the model's limit."""
    if limit is not None and max_new_tokens >= limit:
        raise ConfigError(
            f"rollout.max_new_tokens: {max_new_tokens} leaves no room for a prompt in the "
            f"model's {limit} positions (rollout.engine=vllm)"
        )
    total = max_prompt_tokens + max_new_tokens
    return total if limit is None else min(total, limit)


def logprobs_mode(temperature: float, top_p: float, top_k: int) -> str:
    """The vLLM `logprobs_mode` whose values are softmax(logits / T) before truncation."""
    if temperature == 1.0:
        return "raw_logprobs"  # before temperature (a no-op) and before top-k / top-p
    if top_k <= 0 and top_p >= 1.0:
        return "processed_logprobs"  # after temperature; nothing truncated
    raise ConfigError(
        f"rollout.top_k: with rollout.engine=vllm, temperature {temperature} and top-k/top-p "
        f"(top_k={top_k}, top_p={top_p}) cannot both be set: vLLM reports no untruncated "
        "tempered log-probs; use rollout.temperature=1, top_k=0 and top_p=1, or engine hf"
    )


def finish_reason(
    reason: str | None, token_ids: Sequence[int], *, stop_ids: Sequence[int], max_new_tokens: int
) -> FinishReason:
    """graft's finish reason for a vLLM completion; any other ending is an error, not a sample."""
    if reason == "stop" and token_ids and token_ids[-1] in stop_ids:
        return "stop"
    if reason == "length" and len(token_ids) == max_new_tokens:
        return "length"
    last = token_ids[-1] if token_ids else None
    raise RuntimeError(
        f"vLLM ended a request with finish reason {reason!r} after {len(token_ids)} of "
        f"{max_new_tokens} tokens (last token {last}); that is not a complete sample"
    )


def write_engine_config(model: torch.nn.Module, folder: str) -> None:
    """The model's config.json, naming the class graft runs (a GGUF-built config names none)."""
    config = copy.deepcopy(model.config)
    config.architectures = [type(model).__name__]
    config.save_pretrained(folder)


def _load_into(weights: list[tuple[str, torch.Tensor]], model: Any) -> list[str]:
    """Load weights into vLLM's model (in its worker); return its parameters left unloaded."""
    loaded = model.load_weights(weights=weights)
    if loaded is None:  # an architecture whose loader does not report what it loaded
        return []
    # As vLLM's own loader: scales its quantization methods fill in after loading are exempt.
    exempt = set()
    for prefix, module in model.named_modules():
        method = getattr(module, "quant_method", None)
        if getattr(method, "uses_meta_device", False) or hasattr(
            method, "process_weights_after_loading"
        ):
            exempt.update(f"{prefix}.{n}" if prefix else n for n, _ in module.named_parameters())
    return sorted(n for n, _ in model.named_parameters() if n not in loaded and n not in exempt)


class VLLMEngine:
    def __init__(
        self,
        model: torch.nn.Module,
        *,
        rollout: RolloutConfig,
        dtype: str,
        seed: int,
        key: str = "model",
        sleep: bool = True,
    ) -> None:
        mode = logprobs_mode(rollout.temperature, rollout.top_p, rollout.top_k)
        self.limit = position_limit(model.config)
        self.max_model_len = engine_length(
            rollout.max_prompt_tokens, rollout.max_new_tokens, self.limit
        )
        self.key = key
        self.vllm = load_vllm()
        self._config_dir = tempfile.TemporaryDirectory(prefix="graft-vllm-")
        write_engine_config(model, self._config_dir.name)
        self.llm = self.vllm.LLM(
            model=self._config_dir.name,
            load_format="dummy",  # replaced by the policy's weights below
            skip_tokenizer_init=True,
            generation_config="vllm",  # no sampling defaults from the model's files
            dtype=dtype,
            gpu_memory_utilization=rollout.vllm_gpu_memory,
            max_model_len=self.max_model_len,
            seed=seed,
            trust_remote_code=False,
            enable_prefix_caching=True,
            enable_sleep_mode=sleep,
            logprobs_mode=mode,
        )
        self.sleep_mode = sleep
        self._asleep: set[str] = set()
        self.sync_weights(model.named_parameters())
        self._sleep()

    # ----------------------------------------------------------------- sleep mode
    def _sleep(self) -> None:
        if self.sleep_mode and not self._asleep:
            self.llm.sleep(level=1)
            self._asleep = {"weights", "kv_cache"}

    def _wake(self, tags: Sequence[str]) -> None:
        waking = [t for t in tags if t in self._asleep]
        if waking:
            if torch.cuda.is_available():
                torch.cuda.empty_cache()  # hand the trainer's cached blocks back to the device
            self.llm.wake_up(tags=waking)
            self._asleep -= set(waking)

    # ----------------------------------------------------------------- work
    def sample(
        self,
        prompts: Sequence[Sequence[int]],
        params: SamplingParams,
        *,
        stop_ids: Sequence[int],
        seed: int,
    ) -> list[Sample]:
        """One sample per prompt row. The log-probs are the trainer's for the rollout settings the
        engine was built with; other settings (evaluation) get the same mode's values, which
        evaluation does not read."""
        for p in prompts:
            if len(p) + params.max_new_tokens > self.max_model_len:
                raise DataError(
                    f"{self.key}: a prompt of {len(p)} tokens and {params.max_new_tokens} new "
                    f"tokens exceed the vLLM engine's {self.max_model_len} positions "
                    f"(rollout.max_prompt_tokens + rollout.max_new_tokens, at most the model's "
                    f"{self.limit})"
                )
        # One request per row, each with its own seed (rows repeat a prompt n times).
        sampling = [
            self.vllm.SamplingParams(
                n=1,
                temperature=params.temperature,
                top_p=params.top_p,
                top_k=params.top_k if params.top_k > 0 else 0,
                max_tokens=params.max_new_tokens,
                stop_token_ids=list(stop_ids),
                logprobs=0,  # the sampled token's own log-prob
                seed=(seed + i) % (2**63),
                detokenize=False,
            )
            for i in range(len(prompts))
        ]
        requests = [{"prompt_token_ids": list(p)} for p in prompts]
        self._wake(["weights", "kv_cache"])
        try:
            outputs = self.llm.generate(requests, sampling, use_tqdm=False)
        finally:
            self._sleep()
        return [self._to_sample(out, stop_ids, params.max_new_tokens) for out in outputs]

    @staticmethod
    def _to_sample(out: Any, stop_ids: Sequence[int], max_new_tokens: int) -> Sample:
        completion = out.outputs[0]
        ids = tuple(int(t) for t in completion.token_ids)
        logprobs = tuple(
            float(step[token].logprob) for step, token in zip(completion.logprobs, ids)
        )
        reason = finish_reason(
            completion.finish_reason, ids, stop_ids=stop_ids, max_new_tokens=max_new_tokens
        )
        return Sample(ids, logprobs, reason)

    def sync_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Load the trainer's current weights into the engine, then drop its prefix cache."""
        weights = [(name, t.detach()) for name, t in named_tensors]
        self._wake(["weights"])
        for missing in self.llm.apply_model(functools.partial(_load_into, weights)):
            if missing:
                raise RuntimeError(
                    f"{self.key}: the vLLM model has parameters the policy's weights do not "
                    f"cover: {missing[:5]}"
                )
        # KV blocks cached from earlier prompts were computed with the old weights.
        if not self.llm.reset_prefix_cache():
            raise RuntimeError(f"{self.key}: vLLM did not reset its prefix cache after a sync")
