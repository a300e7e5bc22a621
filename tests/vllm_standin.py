"""A small CPU stand-in for the part of vLLM 0.30's offline interface that graft's engine uses.

It is not vLLM: it runs a Hugging Face model one request at a time. It keeps the behaviour the
engine depends on, as vLLM 0.30 implements it, so that tests of the engine can fail for the same
reasons the real one would:

- `LLM(...)` takes only keyword arguments vLLM's EngineArgs has; it refuses a `max_model_len`
  above the config's own position limit; `load_format="dummy"` gives random weights.
- A prefix cache: a prompt's KV cache is computed once and reused by later requests with the same
  prompt, whatever the weights are by then, until `reset_prefix_cache()` or a sleep (vLLM caches
  full 16-token blocks of a prefix; here whole prompts).
- `logprobs_mode`: "raw_logprobs" is log_softmax(logits) before temperature; "processed_logprobs"
  is taken after temperature and top-k / top-p (renormalized over the kept tokens).
- `sleep(level=1)` / `wake_up(tags)`: sampling or loading weights while asleep is an error. As in
  vLLM, the memory of every sleep-mode engine of a process sits in one allocator (vLLM's
  `CuMemAllocator` singleton): one engine's sleep puts all of them to sleep, and an engine that
  still believes it is awake (vLLM's executor keeps its own sleeping tags) fails on its next use.
- `kv_cache_memory_bytes`: as vLLM, start-up fails unless it holds one request of max_model_len
  tokens (plus the block vLLM keeps back), at 2 x layers x KV heads x head_dim x dtype bytes a
  token.
- `apply_model(fn)` runs `fn` on the model, whose `load_weights` returns the names it loaded and,
  as vLLM's default weight loader, checks shapes and `copy_`s each tensor into the parameter,
  which casts it to the engine's dtype.
- A request ends with "stop" on a stop token (kept in the output) or "length".

Every call is appended to `LLM.calls`, so tests can check their order. `LLM.triton_f32_default`
is TRITON_F32_DEFAULT as the engine's start-up found it (when vLLM compiles its Triton kernels).
For tests of start-ups in several processes, with $VLLM_STANDIN_TRACE naming a file, each LLM
appends "pid start end" to it: monotonic times from the start of its construction to the end of
its first sleep; $VLLM_STANDIN_STARTUP_S makes its construction take that many seconds longer.
"""

from __future__ import annotations

import copy
import os
import time
import weakref
from dataclasses import dataclass
from types import SimpleNamespace

import torch
from transformers import AutoConfig, AutoModelForCausalLM

__version__ = "0.30.0"

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
_BLOCK = 16  # vLLM's KV-cache block on CUDA, in tokens


class _CuMemAllocator:
    """vLLM's sleep-mode allocator: one per process, holding every sleep-mode engine's memory;
    sleep and wake-up act on all of it."""

    def __init__(self) -> None:
        self.engines: weakref.WeakSet[LLM] = weakref.WeakSet()

    def sleep(self) -> None:
        for engine in self.engines:
            engine._unmapped = {"weights", "kv_cache"}
            engine._prefix_cache.clear()  # the KV cache is discarded, every engine's

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

    def __post_init__(self) -> None:
        if self.n != 1 or self.top_k < -1 or not 0 < self.top_p <= 1 or self.max_tokens < 1:
            raise ValueError(f"invalid sampling parameters {self}")


class _Model:
    """What `apply_model` hands its function: vLLM's model with its `load_weights`."""

    def __init__(self, hf_model: torch.nn.Module) -> None:
        self.hf = hf_model

    def named_parameters(self):
        return self.hf.named_parameters()

    def named_modules(self):
        return self.hf.named_modules()

    @torch.no_grad()
    def load_weights(self, weights):
        params = dict(self.hf.named_parameters())
        loaded = set()
        for name, tensor in weights:
            param = params[name]
            if param.size() != tensor.size():
                raise AssertionError(
                    f"Attempted to load weight ({tensor.size()}) into parameter ({param.size()})"
                )
            param.data.copy_(tensor)  # casts to the parameter's dtype
            loaded.add(name)
        return loaded


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
        logprobs_mode: str = "raw_logprobs",
        kv_cache_memory_bytes: int | None = None,
    ) -> None:
        self._started = time.monotonic()
        self.triton_f32_default = os.environ.get("TRITON_F32_DEFAULT")
        time.sleep(float(os.environ.get("VLLM_STANDIN_STARTUP_S", "0")))
        self.calls: list[str] = ["init"]
        self.model_arg, self.load_format = model, load_format
        config = AutoConfig.from_pretrained(model)
        derived = min(
            getattr(config, k) for k in ("max_position_embeddings", "n_positions") if k in config
        )
        if max_model_len is not None and max_model_len > derived:
            raise ValueError(
                f"User-specified max_model_len ({max_model_len}) is greater than the derived "
                f"max_model_len ({derived})"
            )
        torch_dtype = _DTYPES.get(dtype, torch.float32)
        self._max_model_len = max_model_len or derived
        self.kv_cache_memory_bytes = kv_cache_memory_bytes
        if kv_cache_memory_bytes is not None:
            self._check_kv_cache(config, torch_dtype.itemsize, kv_cache_memory_bytes)
        if load_format == "dummy":
            self.hf = AutoModelForCausalLM.from_config(config, dtype=torch_dtype)
        else:
            self.hf = AutoModelForCausalLM.from_pretrained(model, dtype=torch_dtype)
        self.hf.eval()
        self._prefix_caching = enable_prefix_caching is not False
        self._sleep_mode, self._logprobs_mode = enable_sleep_mode, logprobs_mode
        self._sleeping_tags: set[str] = set()  # what this engine's executor believes is asleep
        self._unmapped: set[str] = set()  # what of its memory the allocator has unmapped
        self._prefix_cache: dict[tuple[int, ...], tuple] = {}
        if self._sleep_mode:
            ALLOCATOR.engines.add(self)

    def _check_kv_cache(self, config, dtype_bytes: int, available: int) -> None:
        text = config.get_text_config()
        heads = text.num_attention_heads
        kv_heads = getattr(text, "num_key_value_heads", None) or heads
        head_dim = getattr(text, "head_dim", None) or text.hidden_size // heads
        token = 2 * text.num_hidden_layers * kv_heads * head_dim * dtype_bytes
        needed = (-(-self._max_model_len // _BLOCK) + 1) * _BLOCK * token  # + the null block
        if needed > available:
            raise ValueError(
                f"To serve at least one request with the model's max seq len "
                f"({self._max_model_len}), ({needed / 2**30:.2f} GiB KV cache is needed, which is "
                f"larger than the available KV cache memory ({available / 2**30:.2f} GiB)."
            )

    def _asleep(self) -> set[str]:
        """The tags whose memory this engine cannot use now (vLLM's `LLM` has no such public
        property: graft's engine must keep its own record)."""
        return self._sleeping_tags | self._unmapped

    # ----------------------------------------------------------------- engine control
    def apply_model(self, func):
        if "weights" in self._asleep():
            raise RuntimeError("weights are asleep")
        self.calls.append("apply_model")
        return [func(_Model(self.hf))]

    def reset_prefix_cache(self) -> bool:
        self.calls.append("reset_prefix_cache")
        self._prefix_cache.clear()
        return True

    def sleep(self, level: int = 1) -> None:
        if not self._sleep_mode:
            raise ValueError("Sleep mode is not enabled")
        self.calls.append(f"sleep:{level}")
        if self._sleeping_tags:
            return  # vLLM: "Executor is already sleeping."
        ALLOCATOR.sleep()  # also clears the prefix cache, as vLLM 0.30 does when it frees the KV
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

    def _prefill(self, prompt: tuple[int, ...]) -> tuple:
        cached = self._prefix_cache.get(prompt) if self._prefix_caching else None
        if cached is None:
            out = self.hf(torch.tensor([prompt]), use_cache=True)
            cached = (out.past_key_values, out.logits[0, -1].float())
            if self._prefix_caching:
                self._prefix_cache[prompt] = copy.deepcopy(cached)
        return copy.deepcopy(cached)

    def _pick(self, logits: torch.Tensor, sp: SamplingParams, gen: torch.Generator):
        raw = torch.log_softmax(logits, -1)
        if sp.temperature == 0:
            token = int(logits.argmax())
            return token, float(raw[token])
        scaled = logits / sp.temperature
        if sp.top_k > 0:
            kth = torch.topk(scaled, sp.top_k).values[-1]
            scaled = scaled.masked_fill(scaled < kth, float("-inf"))
        if sp.top_p < 1:
            probs, order = torch.sort(torch.softmax(scaled, -1), descending=True)
            drop = (probs.cumsum(-1) - probs) >= sp.top_p
            scaled = scaled.masked_fill(drop.scatter(-1, order, drop), float("-inf"))
        processed = torch.log_softmax(scaled, -1)
        token = int(torch.multinomial(processed.exp(), 1, generator=gen))
        chosen = raw if self._logprobs_mode == "raw_logprobs" else processed
        return token, float(chosen[token])

    def _one(self, prompt_ids, sp: SamplingParams):
        prompt = tuple(prompt_ids)
        if len(prompt) >= self._max_model_len:
            raise ValueError(f"prompt (length {len(prompt)}) is longer than the maximum length")
        gen = torch.Generator().manual_seed(sp.seed or 0)
        past, logits = self._prefill(prompt)
        ids, logprobs, reason = [], [], "length"
        while True:
            token, logprob = self._pick(logits, sp, gen)
            ids.append(token)
            logprobs.append({token: SimpleNamespace(logprob=logprob)})
            if token in (sp.stop_token_ids or ()):
                reason = "stop"
                break
            if len(ids) >= sp.max_tokens or len(prompt) + len(ids) >= self._max_model_len:
                break
            out = self.hf(torch.tensor([[token]]), past_key_values=past, use_cache=True)
            past, logits = out.past_key_values, out.logits[0, -1].float()
        completion = SimpleNamespace(token_ids=ids, logprobs=logprobs, finish_reason=reason)
        return SimpleNamespace(prompt_token_ids=list(prompt), outputs=[completion])
