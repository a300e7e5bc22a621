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
  which gives the GPU memory of its KV cache back to training. The weights arrive in the trainer's
  storage dtype (float32 master weights) and are copied into vLLM's parameters of the engine's
  dtype (`models.N.dtype`, the compute dtype): the copy rounds them to nearest, as autocast does.

It also keeps vLLM 0.30 within what it can do on one machine:

- **float32 precision.** vLLM runs float32 attention with its Triton kernels (FlashAttention and
  FlashInfer take 16-bit types only), and Triton computes float32 dot products in TF32 on CUDA
  unless told otherwise. A float32 engine therefore sets `TRITON_F32_DEFAULT=ieee` in the
  environment before vLLM is imported and built, unless it is set already (the setting is
  process-wide; it changes nothing for 16-bit kernels).
- **KV-cache size.** vLLM's default fills a share of the GPU with KV cache. The engine passes
  `kv_cache_memory_bytes` instead: what the sequences sampled at once need (rollout.batch_size, or
  prompts_per_step x group_size) at max_model_len tokens each, plus a quarter, rounded up to
  16-token blocks and to a MiB, at least `KV_FLOOR_BYTES`; capped at `rollout.vllm_gpu_memory` of
  the device's memory less the engine's copy of the weights (refused in one line when that cap
  cannot hold one sequence). vLLM still requires that share of the device free at start-up.
- **One sleep-mode engine per process.** vLLM's sleep mode keeps all of a process's engine
  memory in one allocator (a singleton), so one engine's sleep would put another's weights to
  sleep. A second sleep-mode engine in a process is refused in one line (use run.backend
  processes or ray); `close()` (or garbage collection) frees the place.
- **One start-up at a time.** vLLM measures free device memory while it starts and while it first
  sleeps, so engines of other processes starting at the same moment break its checks. Engine
  start-up (building the LLM, the first weight sync and sleep) holds an exclusive lock on a file in
  the system temp dir (`graft-vllm-startup-<uid>.lock`; `GRAFT_VLLM_STARTUP_LOCK` names another),
  which serializes start-ups of one user's engines on one machine.

Supported: vLLM 0.30.x (the release whose pins match graft's torch and transformers pins; see
docs/scaling.md). Another installed version is refused at start-up with one line.
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import functools
import gc
import os
import tempfile
import threading
import weakref
from collections.abc import Collection, Iterable, Iterator, MutableMapping, Sequence
from typing import Any

import torch

from graft.config import RolloutConfig
from graft.config.lib import ConfigError
from graft.errors import DataError
from graft.preflight import (  # noqa: F401  (re-exported: the tests and docs name them here)
    INSTALL_ROUTE,
    VLLM_SERIES,
    check_vllm_installed,
    check_vllm_version,
)
from graft.rollout.generate import Sample, SamplingParams
from graft.types import FinishReason

MIB = 1 << 20
KV_BLOCK_TOKENS = 16
"""vLLM's KV-cache block on CUDA, in tokens: the KV-cache size is rounded up to whole blocks."""
KV_MARGIN = (5, 4)
"""The KV cache holds a quarter more than the sequences need (vLLM keeps one block back)."""
KV_FLOOR_BYTES = 16 * MIB
"""The smallest KV cache the engine asks for."""
STARTUP_LOCK_ENV = "GRAFT_VLLM_STARTUP_LOCK"
"""Names the start-up lock file instead of `graft-vllm-startup-<uid>.lock` in the temp dir."""
_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
# The config keys vLLM reads a model's KV-head count from (the first present wins).
_KV_HEAD_KEYS = ("n_head_kv", "num_kv_heads", "num_key_value_heads", "multi_query_group_num")

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


def check_vllm_here() -> None:
    """vLLM installed at the supported series and a CUDA GPU visible in this process, checked
    without importing vLLM (every engine checks it where it starts)."""
    check_vllm_installed()
    if not torch.cuda.is_available():
        raise ConfigError("rollout.engine: vllm needs a CUDA GPU and none is visible; use hf")


def load_vllm() -> Any:
    """The `vllm` module, after checking its version and that a CUDA GPU is visible."""
    check_vllm_here()
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


def prefer_ieee_float32(dtype: str, environ: MutableMapping[str, str] = os.environ) -> None:
    """For a float32 engine, full-precision float32 dot products in Triton's kernels (vLLM's
    float32 attention) instead of TF32, unless the environment chose already."""
    if dtype == "float32":
        environ.setdefault("TRITON_F32_DEFAULT", "ieee")


def _text_config(config: Any) -> Any:
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def kv_token_bytes(config: Any, dtype: str) -> int:
    """Bytes of KV cache per token, as vLLM lays it out: a key and a value of every KV head in
    every layer (head_dim, else hidden_size // num_attention_heads), in the engine's dtype."""
    text = _text_config(config)
    heads = int(text.num_attention_heads)
    kv_heads = next((getattr(text, k) for k in _KV_HEAD_KEYS if getattr(text, k, None)), heads)
    head_dim = getattr(text, "head_dim", None) or int(text.hidden_size) // heads
    return 2 * int(text.num_hidden_layers) * int(kv_heads) * int(head_dim) * _DTYPE_BYTES[dtype]


def rollout_sequences(rollout: RolloutConfig) -> int:
    """Sequences the rollouts sample at once: rollout.batch_size, else the whole rollout batch."""
    return rollout.batch_size or rollout.prompts_per_step * rollout.group_size


def kv_cache_bytes(
    *,
    sequences: int,
    max_model_len: int,
    token_bytes: int,
    device_memory: int | None = None,
    share: float = 1.0,
    weight_bytes: int = 0,
) -> int:
    """vLLM's `kv_cache_memory_bytes` for `sequences` sequences of `max_model_len` tokens: with a
    quarter more, rounded up to whole blocks and to a MiB, at least KV_FLOOR_BYTES; at most `share`
    of `device_memory` (None: not known) less `weight_bytes`."""
    tokens = -(-sequences * max_model_len * KV_MARGIN[0] // KV_MARGIN[1])
    tokens = -(-tokens // KV_BLOCK_TOKENS) * KV_BLOCK_TOKENS
    wanted = max(-(-tokens * token_bytes // MIB) * MIB, KV_FLOOR_BYTES)
    if device_memory is None:
        return wanted
    cap = (int(device_memory * share) - weight_bytes) // MIB * MIB
    one = -(-(max_model_len + KV_BLOCK_TOKENS) // KV_BLOCK_TOKENS) * KV_BLOCK_TOKENS * token_bytes
    if cap < one:
        raise ConfigError(
            f"rollout.vllm_gpu_memory: {share} of the GPU's {device_memory / MIB:.0f} MiB, less "
            f"the engine's {weight_bytes / MIB:.0f} MiB of weights, leaves {max(cap, 0) / MIB:.0f} "
            f"MiB of KV cache, short of the {one / MIB:.1f} MiB one sequence of {max_model_len} "
            "tokens needs; raise it, or lower rollout.max_prompt_tokens / max_new_tokens"
        )
    return min(wanted, cap)


def device_memory() -> int | None:
    """Total memory of the GPU vLLM runs on in this process (its first visible one); None: none."""
    if not torch.cuda.is_available():
        return None
    return int(torch.cuda.get_device_properties(0).total_memory)


def startup_lock_path() -> str:
    return os.environ.get(STARTUP_LOCK_ENV) or os.path.join(
        tempfile.gettempdir(), f"graft-vllm-startup-{os.getuid()}.lock"
    )


@contextlib.contextmanager
def startup_lock(path: str | None = None) -> Iterator[None]:
    """Hold the machine-wide vLLM start-up lock (an exclusive flock; the kernel drops it if the
    process dies)."""
    fd = os.open(path or startup_lock_path(), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the only descriptor releases the lock


# The process's one sleep-mode engine: its policy's key and a weak reference to it.
_sleep_owner: tuple[str, weakref.ref[VLLMEngine]] | None = None
_sleep_owner_lock = threading.Lock()


def _sleep_owner_key() -> str | None:
    if _sleep_owner is None:
        return None
    key, ref = _sleep_owner
    engine = ref()
    return key if engine is not None and not engine.closed else None


def claim_sleep_mode(engine: VLLMEngine, key: str) -> None:
    """Make `engine` this process's sleep-mode engine, or refuse in one line if another is."""
    global _sleep_owner
    with _sleep_owner_lock:
        if _sleep_owner_key() is not None:
            gc.collect()  # an engine nothing references any more gives its place up
        holder = _sleep_owner_key()
        if holder is not None:
            raise ConfigError(
                f"{key}: rollout.engine=vllm cannot start a second sleep-mode vLLM engine in this "
                f"process beside {holder}'s (vLLM keeps one sleep-mode engine per process); use "
                "run.backend: processes or ray (one policy per process)"
            )
        _sleep_owner = (key, weakref.ref(engine))


def release_sleep_mode(engine: VLLMEngine) -> None:
    global _sleep_owner
    with _sleep_owner_lock:
        if _sleep_owner is not None and _sleep_owner[1]() in (engine, None):
            _sleep_owner = None


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


def _load_into(
    weights: list[tuple[str, torch.Tensor]], model: Any, earlier: Collection[str], final: bool
) -> list[str] | None:
    """Load weights into vLLM's model (in its worker). Not `final`: the names it loaded (None: its
    loader does not report them). `final`: its parameters left unloaded by these weights and the
    `earlier` parts' names."""
    loaded = model.load_weights(weights=weights)
    if loaded is None:  # an architecture whose loader does not report what it loaded
        return None if not final else []
    if not final:
        return sorted(loaded)
    # As vLLM's own loader: scales its quantization methods fill in after loading are exempt.
    exempt = set(earlier)
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
        self.sleep_mode = sleep
        self.closed = False
        self._asleep: set[str] = set()
        self._config_dir: tempfile.TemporaryDirectory[str] | None = None
        self.llm: Any = None
        if sleep:
            claim_sleep_mode(self, key)
        try:
            self._start(model, rollout, dtype=dtype, seed=seed, mode=mode)
        except BaseException:
            self.close()
            raise

    def _start(
        self, model: torch.nn.Module, rollout: RolloutConfig, *, dtype: str, seed: int, mode: str
    ) -> None:
        prefer_ieee_float32(dtype)  # before vLLM (and Triton) are imported and built
        self.vllm = load_vllm()
        unique = {id(p): p.numel() for p in model.parameters()}  # tied weights once
        self.kv_cache_bytes = kv_cache_bytes(
            sequences=rollout_sequences(rollout),
            max_model_len=self.max_model_len,
            token_bytes=kv_token_bytes(model.config, dtype),
            device_memory=device_memory(),
            share=rollout.vllm_gpu_memory,
            weight_bytes=sum(unique.values()) * _DTYPE_BYTES[dtype],
        )
        self._config_dir = tempfile.TemporaryDirectory(prefix="graft-vllm-")
        write_engine_config(model, self._config_dir.name)
        with startup_lock():  # vLLM's start-up and first sleep measure free device memory
            self.llm = self.vllm.LLM(
                model=self._config_dir.name,
                load_format="dummy",  # replaced by the policy's weights below
                skip_tokenizer_init=True,
                generation_config="vllm",  # no sampling defaults from the model's files
                dtype=dtype,
                gpu_memory_utilization=rollout.vllm_gpu_memory,
                kv_cache_memory_bytes=self.kv_cache_bytes,
                max_model_len=self.max_model_len,
                seed=seed,
                trust_remote_code=False,
                enable_prefix_caching=True,
                enable_sleep_mode=self.sleep_mode,
                logprobs_mode=mode,
            )
            self.sync_weights(model.named_parameters())
            self._sleep()

    def close(self) -> None:
        """Drop the vLLM engine (its memory goes when it is collected) and free this process's
        sleep-mode place. Idempotent."""
        self.closed = True
        self.llm = None
        release_sleep_mode(self)
        if self._config_dir is not None:
            self._config_dir.cleanup()
            self._config_dir = None

    def _check_open(self) -> None:
        if self.closed:
            raise RuntimeError(f"{self.key}: the vLLM engine is closed")

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
        self._check_open()
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
        self.sync_weights_in_parts([list(named_tensors)])

    def sync_weights_in_parts(self, parts: Iterable[list[tuple[str, torch.Tensor]]]) -> None:
        """`sync_weights` from the weights in parts, each loaded as it comes (a sharded policy
        gathers a layer at a time: no more than two layers are held at once)."""
        self._check_open()
        self._wake(["weights"])
        # The trainer's tensors as they come (float32 masters, or a sharded policy's compute
        # dtype): vLLM's loaders copy_ into its parameters, rounding to the engine's dtype.
        earlier: set[str] = set()  # what the parts before the last loaded
        silent = False  # a loader that does not report what it loaded: nothing to check
        pending: list[tuple[str, torch.Tensor]] | None = None
        for part in parts:
            if pending is not None:
                load = functools.partial(_load_into, pending, earlier=earlier, final=False)
                got = self.llm.apply_model(load)
                silent = silent or any(names is None for names in got)
                earlier.update(n for names in got for n in names or ())
            pending = [(name, t.detach()) for name, t in part]
        load = functools.partial(_load_into, pending or [], earlier=earlier, final=True)
        for missing in self.llm.apply_model(load):
            if missing and not silent:
                raise RuntimeError(
                    f"{self.key}: the vLLM model has parameters the policy's weights do not "
                    f"cover: {missing[:5]}"
                )
        # KV blocks cached from earlier prompts were computed with the old weights.
        if not self.llm.reset_prefix_cache():
            raise RuntimeError(f"{self.key}: vLLM did not reset its prefix cache after a sync")
