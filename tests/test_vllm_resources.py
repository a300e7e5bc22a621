"""The vLLM engine's resources: the KV-cache size the rollouts need (by hand), and through
`vllm_standin` what only a GPU shows: the cap by a share of the GPU's memory, float32 precision
(IEEE float32 Triton dots), one sleep-mode engine per process, and engine start-ups serialized
across processes (vLLM profiles free GPU memory while it starts). What the real engine is given
is read back from it in tests/test_vllm_real.py."""

import contextlib
import multiprocessing
import os
import tempfile
from pathlib import Path

import pytest

import vllm_standin
from graft.config import RolloutConfig
from graft.config.lib import ConfigError
from graft.rollout import SamplingParams, vllm_engine
from vllm_helpers import PROBLEMS, _params, _policy


def test_float32_engines_get_ieee_float32_triton_dots(standin, monkeypatch, tiny_paths):
    env: dict[str, str] = {}
    vllm_engine.prefer_ieee_float32("bfloat16", env)
    assert env == {}
    vllm_engine.prefer_ieee_float32("float32", env)
    assert env == {"TRITON_F32_DEFAULT": "ieee"}
    # Through the engine: set before vLLM is built, for float32 only, never over the user's.
    assert _policy(tiny_paths["llama"], dtype="bfloat16").engine.llm.triton_f32_default is None
    assert _policy(tiny_paths["llama"]).engine.llm.triton_f32_default == "ieee"
    monkeypatch.setenv("TRITON_F32_DEFAULT", "tf32")
    assert _policy(tiny_paths["llama"]).engine.llm.triton_f32_default == "tf32"


def test_kv_token_bytes_read_the_config_as_vllm_does():
    from transformers import GPT2Config, LlamaConfig

    gqa = LlamaConfig(
        hidden_size=64, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=2
    )
    assert vllm_engine.kv_token_bytes(gqa, "float32") == 2 * 2 * 2 * 16 * 4  # 512
    gqa.head_dim = 32  # an explicit head_dim wins over hidden_size // heads
    assert vllm_engine.kv_token_bytes(gqa, "bfloat16") == 2 * 2 * 2 * 32 * 2  # 512
    mha = GPT2Config(n_layer=3, n_head=4, n_embd=64)  # no KV-head key: every head is one
    assert vllm_engine.kv_token_bytes(mha, "float16") == 2 * 3 * 4 * 16 * 2  # 768


def test_kv_cache_bytes_by_hand():
    mib = 1 << 20
    size = vllm_engine.kv_cache_bytes
    # The tiny Llama (512 B a token in float32), 16 x 8 sequences of 256 tokens:
    # 32768 tokens x 1.25 = 40960 (whole blocks) x 512 B = 20 MiB.
    assert size(sequences=128, max_model_len=256, token_bytes=512) == 20 * mib
    # One sequence of 1001 tokens at 100 kB a token: 1251.25 -> 1252 -> 1264 tokens (79 blocks)
    # -> 126,400,000 B -> 121 MiB.
    assert size(sequences=1, max_model_len=1001, token_bytes=100_000) == 121 * mib
    # 3 x 10 tokens at 1 kB: 48,000 B, raised to the floor.
    assert size(sequences=3, max_model_len=10, token_bytes=1000) == vllm_engine.KV_FLOOR_BYTES
    # A Qwen3-1.7B-like model in bfloat16 (28 layers x 8 KV heads x 128 x 2 x 2 B = 114,688 B a
    # token), 128 sequences of 1536 tokens: 245,760 tokens -> 26,880 MiB; on an 80 GiB device
    # with 4 GiB of weights, a 0.4 share leaves 32,768 - 4,096 = 28,672 MiB (not binding) and a
    # 0.3 share 24,576 - 4,096 = 20,480 MiB (binding).
    qwen = dict(sequences=128, max_model_len=1536, token_bytes=114_688)
    assert size(**qwen) == 26_880 * mib
    on_gpu = dict(device_memory=80 << 30, weight_bytes=4 << 30)
    assert size(**qwen, **on_gpu, share=0.4) == 26_880 * mib
    assert size(**qwen, **on_gpu, share=0.3) == 20_480 * mib
    # A share that cannot hold one sequence (257 blocks x 16 x 114,688 B = 449.8 MiB) is refused.
    with pytest.raises(ConfigError) as err:
        size(**{**qwen, "max_model_len": 4096}, device_memory=1 << 30, share=0.1)
    text = str(err.value)
    assert text.startswith("rollout.vllm_gpu_memory: 0.1 of the GPU's 1024 MiB")
    assert "\n" not in text and "leaves 102 MiB" in text
    assert "449.8 MiB one sequence of 4096 tokens" in text
    # vLLM's CPU backend keeps 128-token blocks: 3 x 150 tokens at 100 kB, a quarter more, is 563
    # tokens -> 576 in 16-token blocks (55 MiB), 640 in 128-token ones (62 MiB). Its memory is
    # the machine's: one sequence of 200 tokens (3 blocks, 36.6 MiB) does not fit 0.5 of 16 MiB.
    cpu = dict(sequences=3, max_model_len=150, token_bytes=100_000)
    assert size(**cpu) == 55 * mib and size(**cpu, block_tokens=128) == 62 * mib
    with pytest.raises(ConfigError, match=r"^rollout\.vllm_gpu_memory: 0\.5 of the machine's 16"):
        size(
            **{**cpu, "max_model_len": 200},
            block_tokens=128,
            device_memory=16 * mib,
            share=0.5,
            device="machine",
        )


def test_rollout_sequences_are_the_batch_sampled_at_once():
    assert vllm_engine.rollout_sequences(RolloutConfig(prompts_per_step=16, group_size=8)) == 128
    assert vllm_engine.rollout_sequences(RolloutConfig(group_size=4, batch_size=32)) == 32


def test_engine_asks_vllm_for_the_kv_cache_the_rollouts_need(standin, monkeypatch, tiny_paths):
    mib = 1 << 20
    # 16 x 8 sequences of 256 tokens at 512 B a token (see test_kv_cache_bytes_by_hand).
    policy = _policy(tiny_paths["llama"])
    assert policy.engine.kv_cache_bytes == policy.engine.llm.kv_cache_memory_bytes == 20 * mib
    policy.engine.close()
    # 4 sequences at once: 1280 tokens x 512 B = 0.625 MiB, raised to the floor.
    engine = _policy(tiny_paths["llama"], batch_size=4).engine
    assert engine.llm.kv_cache_memory_bytes == vllm_engine.KV_FLOOR_BYTES
    engine.close()
    # On a (pretend) 1 GiB GPU, a 0.015 share less the engine's 80,384 float32 weights
    # (321,536 B) caps it: 16,106,127 - 321,536 B -> 15 MiB.
    assert sum(p.numel() for p in policy.model.parameters()) == 80_384
    monkeypatch.setattr(vllm_engine, "device_memory", lambda on_cpu=False: 1 << 30)
    engine = _policy(tiny_paths["llama"], vllm_gpu_memory=0.015).engine
    assert engine.llm.kv_cache_memory_bytes == 15 * mib
    engine.close()
    with pytest.raises(ConfigError, match=r"^rollout\.vllm_gpu_memory: 0\.0001 of the GPU's"):
        _policy(tiny_paths["llama"], vllm_gpu_memory=0.0001)


def test_standin_sleep_is_process_wide_as_vllms(tiny_paths):
    """Why one sleep-mode engine per process: vLLM's CuMemAllocator is a singleton, so A's sleep
    unmaps B's memory too, while B's executor still believes it is awake."""
    a = vllm_standin.LLM(model=tiny_paths["llama"], enable_sleep_mode=True)
    b = vllm_standin.LLM(model=tiny_paths["llama"], enable_sleep_mode=True)
    plain = vllm_standin.LLM(model=tiny_paths["llama"])  # outside the sleep-mode pool
    a.sleep(level=1)
    request = [{"prompt_token_ids": [3, 4, 5]}]
    sampling = [vllm_standin.SamplingParams(max_tokens=2, seed=0)]
    b.wake_up()  # a no-op: b is not asleep, as far as it knows
    with pytest.raises(RuntimeError, match="asleep"):
        b.generate(request, sampling)
    assert plain.generate(request, sampling)


def test_a_second_sleep_mode_engine_in_a_process_is_refused_in_one_line(standin, tiny_paths):
    first = _policy(tiny_paths["llama"])
    rollout = first.spec.rollout

    def engine(key, sleep=True):
        return vllm_engine.VLLMEngine(
            first.model, rollout=rollout, dtype="float32", seed=0, key=key, sleep=sleep
        )

    with pytest.raises(ConfigError) as err:
        engine("models.1")
    text = str(err.value)
    assert text.startswith("models.1: ") and "models.0's" in text and "\n" not in text
    assert "run.backend: processes or ray (one policy per process)" in text
    assert engine("models.1", sleep=False).llm is not None  # beside it without sleep mode: fine
    # The first engine still works.
    first.generate(PROBLEMS[:1], n=2, params=_params(first), seed=0)


def test_closing_or_dropping_an_engine_frees_the_sleep_mode_place(standin, tiny_paths):
    first = _policy(tiny_paths["llama"]).engine
    first.close()
    first.close()  # idempotent
    with pytest.raises(RuntimeError, match=r"^models\.0: the vLLM engine is closed"):
        first.sample([[3, 4]], SamplingParams(2), stop_ids=[1], row_seeds=[0])
    second = _policy(tiny_paths["llama"])
    del second  # garbage, never closed: the next engine may start
    third = _policy(tiny_paths["llama"])
    third.generate(PROBLEMS[:1], n=2, params=_params(third), seed=0)


def _start_engine(path: str, barrier, lock: bool) -> None:
    """In a spawned process: start a (stand-in) engine when the other process does."""
    from transformers import AutoModelForCausalLM

    vllm_engine.load_vllm = lambda: vllm_standin
    if not lock:
        vllm_engine.startup_lock = contextlib.nullcontext
    model = AutoModelForCausalLM.from_pretrained(path)
    rollout = RolloutConfig(engine="vllm", max_new_tokens=8)
    barrier.wait(timeout=120)
    vllm_engine.VLLMEngine(model, rollout=rollout, dtype="float32", seed=0)


@pytest.mark.parametrize(
    "lock",
    [pytest.param(True, id="locked"), pytest.param(False, marks=pytest.mark.slow, id="unlocked")],
)
@pytest.mark.slow
def test_engine_start_ups_in_two_processes_do_not_overlap(monkeypatch, tmp_path, tiny_paths, lock):
    """Two worker processes build engines at the same moment; each start-up (LLM construction,
    1 s here, to the first sleep) runs alone. Without the lock (the control) they overlap."""
    trace = tmp_path / "trace"
    monkeypatch.setenv(vllm_engine.STARTUP_LOCK_ENV, str(tmp_path / "startup.lock"))
    monkeypatch.setenv("VLLM_STANDIN_TRACE", str(trace))
    monkeypatch.setenv("VLLM_STANDIN_STARTUP_S", "1")
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(2)
    workers = [
        ctx.Process(target=_start_engine, args=(tiny_paths["llama"], barrier, lock))
        for _ in range(2)
    ]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=300)
        if w.is_alive():
            w.kill()
    assert [w.exitcode for w in workers] == [0, 0]
    spans = sorted(tuple(map(float, line.split()[1:])) for line in trace.read_text().splitlines())
    assert len(spans) == 2 and all(end - start >= 1 for start, end in spans)
    apart = spans[0][1] <= spans[1][0]
    assert apart == lock, spans


def test_startup_lock_is_per_user_in_the_temp_dir(monkeypatch):
    monkeypatch.delenv(vllm_engine.STARTUP_LOCK_ENV, raising=False)
    expected = Path(tempfile.gettempdir()) / f"graft-vllm-startup-{os.getuid()}.lock"
    assert Path(vllm_engine.startup_lock_path()) == expected
    monkeypatch.setenv(vllm_engine.STARTUP_LOCK_ENV, "/somewhere/else.lock")
    assert vllm_engine.startup_lock_path() == "/somewhere/else.lock"


# ----------------------------------------------------------------------------- on a GPU
