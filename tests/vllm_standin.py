"""A small CPU stand-in for what of vLLM 0.30 only a GPU shows: sleep mode and device memory.

Everything else about the engine (log-probs, weight sync, the prefix cache, seeds, endings, runs)
is tested against real vLLM (tests/test_vllm_real*.py, `make test-vllm`, vLLM's CPU build), where
vLLM has no sleep mode and the device is the machine. What remains here, each with its reason:

- **Sleep mode** (`enable_sleep_mode`, `sleep(level=1)` / `wake_up(tags)`): GPU-only in vLLM.
  Sampling or loading weights while asleep is an error. As in vLLM, the memory of every
  sleep-mode engine of a process sits in one allocator (vLLM's `CuMemAllocator` singleton): one
  engine's sleep puts all of them to sleep, and an engine that still believes it is awake (vLLM's
  executor keeps its own sleeping tags) fails on its next use. Tests: the order of sleep, wake-up,
  weight sync and cache reset; one sleep-mode engine per process.
- **Device memory**: the KV cache capped by a share of a GPU's memory; start-ups serialized
  across processes (vLLM profiles free GPU memory while it starts); TRITON_F32_DEFAULT as the
  engine's start-up found it (Triton computes float32 attention on CUDA only).

The stand-in pretends to be the CUDA build (`platforms.current_platform.is_cpu()` is False). It
runs a Hugging Face model one request at a time; `collective_rpc` serves the three calls of graft's
worker extension (graft.rollout.vllm_worker) by copying the weights into that model, which casts
them to the engine's dtype as vLLM's loaders do. Every call is appended to `LLM.calls`, so tests
can check their order. `LLM.triton_f32_default` is TRITON_F32_DEFAULT as the engine's start-up
found it. For tests of start-ups in several processes, with $VLLM_STANDIN_TRACE naming a file,
each LLM appends "pid start end" to it: monotonic times from the start of its construction to the
end of its first sleep; $VLLM_STANDIN_STARTUP_S makes its construction take that many seconds
longer.
"""

from __future__ import annotations

import os
import time
import weakref
from dataclasses import dataclass
from types import SimpleNamespace

import torch
from safetensors.torch import load_file
from transformers import AutoConfig, AutoModelForCausalLM

__version__ = "0.30.0"

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}

platforms = SimpleNamespace(current_platform=SimpleNamespace(is_cpu=lambda: False))
distributed = SimpleNamespace(  # what the engine calls when a process's last engine closes
    parallel_state=SimpleNamespace(cleanup_dist_env_and_memory=lambda: None)
)


class _CuMemAllocator:
    """vLLM's sleep-mode allocator: one per process, holding every sleep-mode engine's memory;
    sleep and wake-up act on all of it."""

    def __init__(self) -> None:
        self.engines: weakref.WeakSet[LLM] = weakref.WeakSet()

    def sleep(self) -> None:
        for engine in self.engines:
            engine._unmapped = {"weights", "kv_cache"}

    def wake_up(self, tags: list[str]) -> None:
        for engine in self.engines:
            engine._unmapped -= set(tags)


ALLOCATOR = _CuMemAllocator()


@dataclass
class SamplingParams:
    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_tokens: int = 16
    stop_token_ids: list[int] | None = None
    logprobs: int | None = None
    seed: int | None = None
    detokenize: bool = True


class LLM:
    def __init__(
        self,
        *,
        model: str,
        dtype: str = "auto",
        gpu_memory_utilization: float = 0.9,
        max_model_len: int | None = None,
        seed: int = 0,
        trust_remote_code: bool = False,
        load_format: str = "auto",
        skip_tokenizer_init: bool = False,
        generation_config: str = "auto",
        enable_prefix_caching: bool | None = None,
        enable_sleep_mode: bool = False,
        enforce_eager: bool = False,
        logprobs_mode: str = "raw_logprobs",
        kv_cache_memory_bytes: int | None = None,
        worker_extension_cls: str = "",
    ) -> None:
        self._started = time.monotonic()
        self.triton_f32_default = os.environ.get("TRITON_F32_DEFAULT")
        time.sleep(float(os.environ.get("VLLM_STANDIN_STARTUP_S", "0")))
        self.calls: list[str] = ["init"]
        self.kv_cache_memory_bytes = kv_cache_memory_bytes
        config = AutoConfig.from_pretrained(model)
        self.hf = AutoModelForCausalLM.from_config(config, dtype=_DTYPES.get(dtype, torch.float32))
        self.hf.eval()
        self._sleep_mode = enable_sleep_mode
        self._sleeping_tags: set[str] = set()  # what this engine's executor believes is asleep
        self._unmapped: set[str] = set()  # what of its memory the allocator has unmapped
        self._loaded: set[str] = set()
        if self._sleep_mode:
            ALLOCATOR.engines.add(self)

    def _asleep(self) -> set[str]:
        """The tags whose memory this engine cannot use now (vLLM's `LLM` has no such public
        property: graft's engine must keep its own record)."""
        return self._sleeping_tags | self._unmapped

    # ----------------------------------------------------------------- engine control
    @torch.no_grad()
    def collective_rpc(self, method, timeout=None, args=(), kwargs=None):
        """graft's worker extension, as copies into the Hugging Face model."""
        if "weights" in self._asleep():
            raise RuntimeError("weights are asleep")
        self.calls.append(f"collective_rpc:{method}")
        params = dict(self.hf.named_parameters())
        if method == "graft_begin_reload":
            self._loaded = set()
            return [None]
        if method == "graft_load":
            (part,) = args
            items = load_file(part).items() if isinstance(part, str) else part
            for name, tensor in items:
                params[name].data.copy_(tensor)  # casts to the parameter's dtype
                self._loaded.add(name)
            return [None]
        if method == "graft_end_reload":
            return [sorted(set(params) - self._loaded)]
        raise NotImplementedError(f"Method {method!r} is not implemented.")

    def reset_prefix_cache(self) -> bool:
        self.calls.append("reset_prefix_cache")
        return True

    def sleep(self, level: int = 1) -> None:
        if not self._sleep_mode:
            raise ValueError("Sleep mode is not enabled")
        self.calls.append(f"sleep:{level}")
        if self._sleeping_tags:
            return  # vLLM: "Executor is already sleeping."
        ALLOCATOR.sleep()
        self._sleeping_tags = {"weights", "kv_cache"}
        trace = os.environ.get("VLLM_STANDIN_TRACE")
        if trace and self.calls.count(f"sleep:{level}") == 1:
            with open(trace, "a") as f:
                f.write(f"{os.getpid()} {self._started} {time.monotonic()}\n")

    def wake_up(self, tags: list[str] | None = None) -> None:
        tags = tags or ["weights", "kv_cache"]
        self.calls.append("wake_up:" + ",".join(sorted(tags)))
        if not self._sleeping_tags or not set(tags) <= self._sleeping_tags:
            return  # vLLM: "Executor is not sleeping." / "Tag ... is not in sleeping tags"
        ALLOCATOR.wake_up(tags)
        self._sleeping_tags -= set(tags)

    # ----------------------------------------------------------------- generation
    @torch.no_grad()
    def generate(self, prompts, sampling_params, *, use_tqdm: bool = True):
        if self._asleep():
            raise RuntimeError(f"generate while asleep: {sorted(self._asleep())}")
        self.calls.append("generate")
        return [self._one(p["prompt_token_ids"], sp) for p, sp in zip(prompts, sampling_params)]

    def _one(self, prompt_ids, sp: SamplingParams):
        """Plain sampling at the request's temperature (no top-k / top-p), one token at a time."""
        gen = torch.Generator().manual_seed(sp.seed or 0)
        ids, logprobs, reason = [], [], "length"
        while len(ids) < sp.max_tokens:
            logits = self.hf(torch.tensor([[*prompt_ids, *ids]])).logits[0, -1].float()
            logp = torch.log_softmax(logits / max(sp.temperature, 1e-6), -1)
            token = int(torch.multinomial(logp.exp(), 1, generator=gen))
            ids.append(token)
            logprobs.append({token: SimpleNamespace(logprob=float(logp[token]))})
            if token in (sp.stop_token_ids or ()):
                reason = "stop"
                break
        completion = SimpleNamespace(token_ids=ids, logprobs=logprobs, finish_reason=reason)
        return SimpleNamespace(prompt_token_ids=list(prompt_ids), outputs=[completion])
