"""The vLLM engine (`rollout.engine=vllm`).

On the CPU, through `vllm_standin` (a small stand-in for the part of vLLM 0.30's interface the
engine uses, with vLLM's length check, prefix cache, log-prob modes, KV-cache check, weight
loading and process-wide sleep mode): length derivation, setting validation, what the engine
loads, finish reasons, the version check, the order update -> weight sync -> prefix-cache reset
(the engine's resources are in test_vllm_resources.py). On a GPU (marked `gpu`, skipped without
CUDA and vLLM): the same properties against vLLM itself; `scripts/gpu_check.py` runs them.
"""

import importlib.metadata
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import vllm_standin
from conftest import small_tiny_spec
from graft.config.lib import ConfigError
from graft.errors import DataError, user_errors
from graft.models.tiny import build_tiny
from graft.rollout import vllm_engine
from vllm_helpers import PROBLEMS, ROOT, _params, _policy, _train_step, _worst_gap

# ----------------------------------------------------------------------------- pure rules


def test_engine_length_is_the_rollout_limit_capped_at_the_model():
    assert vllm_engine.engine_length(512, 64, 256) == 256  # the tiny models' 256 positions
    assert vllm_engine.engine_length(100, 28, 256) == 128
    assert vllm_engine.engine_length(2048, 4096, None) == 6144
    with pytest.raises(ConfigError, match=r"^rollout\.max_new_tokens: 256 leaves no room"):
        vllm_engine.engine_length(16, 256, 256)


def test_position_limit_reads_the_keys_vllm_reads(tiny_paths):
    from transformers import AutoConfig

    for arch in ("llama", "qwen2", "gpt2"):  # max_position_embeddings, and n_positions (gpt2)
        assert vllm_engine.position_limit(AutoConfig.from_pretrained(tiny_paths[arch])) == 256
    assert vllm_engine.position_limit(object()) is None


@pytest.mark.parametrize(
    ("temperature", "top_p", "top_k", "mode"),
    [
        (1.0, 1.0, 0, "raw_logprobs"),
        (1.0, 0.9, 5, "raw_logprobs"),  # raw = before temperature (1) and truncation
        (0.7, 1.0, 0, "processed_logprobs"),  # processed = after temperature, nothing cut
    ],
)
def test_logprobs_mode_gives_the_tempered_untruncated_logprob(temperature, top_p, top_k, mode):
    assert vllm_engine.logprobs_mode(temperature, top_p, top_k) == mode


def test_temperature_with_truncation_is_refused_in_one_line():
    for top_p, top_k in [(1.0, 5), (0.9, 0)]:
        with pytest.raises(ConfigError) as err:
            vllm_engine.logprobs_mode(0.7, top_p, top_k)
        text = str(err.value)
        assert text.startswith("rollout.top_k: ") and "\n" not in text and "temperature=1" in text


def test_every_finish_reason_is_mapped_honestly():
    reason = vllm_engine.finish_reason
    assert reason("stop", (5, 1), stop_ids=(1,), max_new_tokens=8) == "stop"
    assert reason("length", (5,) * 8, stop_ids=(1,), max_new_tokens=8) == "length"
    bad = [
        ("abort", (5, 6)),
        ("error", ()),
        ("repetition", (5, 5, 5)),
        ("stop", (5, 6)),  # stopped, but not on one of the policy's stop tokens
        ("length", (5, 6)),  # cut before the response limit
        (None, (5,)),
    ]
    for name, ids in bad:
        with pytest.raises(RuntimeError, match="not a complete sample"):
            reason(name, ids, stop_ids=(1,), max_new_tokens=8)


def test_version_check_refuses_other_vllm_releases_in_one_line():
    vllm_engine.check_vllm_version("0.30.0")
    vllm_engine.check_vllm_version("0.30.2")
    for installed in ("0.33.0", "0.3.0", "0.300.1", None):
        with pytest.raises(ConfigError) as err:
            vllm_engine.check_vllm_version(installed)
        text = str(err.value)
        assert text.startswith("rollout.engine: ") and "\n" not in text
        assert "graft-rl[vllm]" in text and (installed is None or installed in text)
    assert ConfigError in user_errors()  # the CLI prints it as one line, exit code 2


def test_pinned_extra_matches_the_supported_series():
    """The `vllm` extra admits every release of the supported series and nothing else."""
    import tomllib

    from packaging.requirements import Requirement
    from packaging.version import Version

    with (ROOT / "pyproject.toml").open("rb") as f:
        extra = tomllib.load(f)["project"]["optional-dependencies"]["vllm"]
    (req,) = (Requirement(r) for r in extra)
    assert req.name == "vllm"
    series = vllm_engine.VLLM_SERIES
    major, minor = (int(part) for part in series.split("."))
    for inside in (f"{series}.0", f"{series}.1", f"{series}.9.post1"):
        assert Version(inside) in req.specifier, f"{req} excludes {inside}"
    for outside in (f"{major}.{minor - 1}.9", f"{major}.{minor + 1}.0", f"{major}.{minor}0.0"):
        assert Version(outside) not in req.specifier, f"{req} admits {outside}"


def test_start_up_refuses_a_mismatched_installed_vllm(monkeypatch):
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "0.33.0")
    with pytest.raises(ConfigError, match=r"installed vLLM 0\.33\.0 is not supported"):
        vllm_engine.load_vllm()


def test_cli_ends_with_one_line_when_vllm_cannot_run(tmp_path, capsys):
    """Here vLLM is missing (or no GPU is visible): exit code 2, one line, no run directory."""
    if torch.cuda.is_available():
        pytest.skip("a GPU machine may run the engine")
    from graft.cli import main

    out = tmp_path / "run"
    args = ["train", str(ROOT / "configs/grpo_tiny.yaml"), "--out", str(out)]
    code = main([*args, "--set", "rollout.engine=vllm", "--set", "run.progress=false"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and not out.exists()
    assert err.startswith("graft: error: rollout.engine: ") and "graft-rl[vllm]" in err
    # checked in the driver before anything builds: an empty model cache, a fresh process, fast
    env = {**os.environ, "GRAFT_CACHE": str(tmp_path / "empty-cache")}
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "graft.cli", *args, "--set", "rollout.engine=vllm"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    seconds = time.perf_counter() - start
    assert proc.returncode == 2 and proc.stderr.startswith("graft: error: rollout.engine: ")
    assert seconds < 5 and not (tmp_path / "empty-cache").exists(), seconds


# ----------------------------------------------------------------------------- through the stand-in


def test_engine_builds_on_a_tiny_model_from_its_config_and_weights(standin, tiny_paths):
    policy = _policy(tiny_paths["llama"])  # defaults: 512 + 8 tokens, over the model's 256
    llm = policy.engine.llm
    assert policy.engine.max_model_len == 256
    # vLLM gets a private folder holding only the config, and the policy's weights.
    assert llm.load_format == "dummy" and llm.model_arg != tiny_paths["llama"]
    assert sorted(p.name for p in Path(llm.model_arg).iterdir()) == ["config.json"]
    ours = dict(policy.model.named_parameters())
    for name, p in llm.hf.named_parameters():
        assert torch.equal(p, ours[name]), name
    assert llm.calls == ["init", "apply_model", "reset_prefix_cache", "sleep:1"]


def test_a_sync_that_leaves_engine_parameters_unloaded_is_an_error(standin, tiny_paths):
    policy = _policy(tiny_paths["llama"])
    partial = list(policy.model.named_parameters())[1:]
    with pytest.raises(RuntimeError, match=r"^models\.0: the vLLM model has parameters"):
        policy.engine.sync_weights(partial)


def test_the_old_fixed_length_is_refused_by_the_engine_interface(tiny_paths):
    with pytest.raises(ValueError, match=r"max_model_len \(8192\) is greater"):
        vllm_standin.LLM(model=tiny_paths["llama"], max_model_len=8192)


@pytest.mark.parametrize("sleep", [True, False])
@pytest.mark.parametrize(
    "settings",
    [{}, {"top_k": 5}, {"top_k": 5, "top_p": 0.8}, {"temperature": 0.7}],
    ids=["plain", "top_k", "top_k_top_p", "tempered"],
)
def test_engine_logprobs_equal_the_policys_scoring_after_an_update(
    standin, monkeypatch, tiny_paths, settings, sleep
):
    """Step 0 and, after an update and a sync, step 1 on the same long-prefix prompts (so the
    prefix cache would serve stale KV if the sync did not reset it); with top-k / top-p the
    trainer's first, on-policy ratio stays 1."""
    real_engine = vllm_engine.VLLMEngine
    monkeypatch.setattr(
        vllm_engine, "VLLMEngine", lambda *a, **kw: real_engine(*a, **{**kw, "sleep": sleep})
    )
    policy = _policy(tiny_paths["llama"], **settings)
    gap, rollouts = _worst_gap(policy, seed=3)
    assert gap < 1e-4
    before = policy.score([rollouts[0].prompt_ids], [rollouts[0].completions_G[0].token_ids])
    stats = _train_step(policy, rollouts)
    assert abs(stats["loss/ratio_mean"] - 1.0) < 1e-4
    after = policy.score([rollouts[0].prompt_ids], [rollouts[0].completions_G[0].token_ids])
    assert max(abs(a - b) for a, b in zip(before[0], after[0])) > 1e-3  # the weights moved
    gap, rollouts = _worst_gap(policy, seed=3)
    assert gap < 1e-4
    assert len({c.token_ids for r in rollouts for c in r.completions_G}) > 1  # seeds per row


def test_update_then_sync_then_cache_reset_then_sample(standin, tiny_paths):
    policy = _policy(tiny_paths["llama"])
    llm = policy.engine.llm
    _, rollouts = _worst_gap(policy, seed=0)
    del llm.calls[:]
    _train_step(policy, rollouts)
    assert llm.calls == ["wake_up:weights", "apply_model", "reset_prefix_cache"]
    policy.generate(PROBLEMS[:1], n=2, params=_params(policy), seed=1)
    assert llm.calls[3:] == ["wake_up:kv_cache", "generate", "sleep:1"]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_sharded_policy_feeds_its_engine_from_the_shards(standin, tiny_paths):
    """`shards: 2` with vLLM: rank 0's engine samples. After an update the engine is loaded from
    the shards a layer at a time (a part per decoder layer, then the rest) and holds the weights
    the unsharded policy's engine holds after the same update; its log-probs equal the sharded
    policy's own scoring before and after."""
    one = _policy(tiny_paths["llama"])
    _, want_rollouts = _worst_gap(one, seed=3)
    _train_step(one, want_rollouts)
    want = {n: p.detach().clone() for n, p in one.engine.llm.hf.named_parameters()}
    one.close()

    policy = _policy(tiny_paths["llama"], shards=2)
    try:
        llm = policy.engine.llm
        gap, rollouts = _worst_gap(policy, seed=3)
        assert gap < 1e-4
        assert [[c.token_ids for c in r.completions_G] for r in rollouts] == [
            [c.token_ids for c in r.completions_G] for r in want_rollouts
        ]
        del llm.calls[:]
        stats = _train_step(policy, rollouts)
        assert abs(stats["loss/ratio_mean"] - 1.0) < 1e-4
        layers = llm.hf.config.num_hidden_layers
        assert llm.calls == [
            "wake_up:weights",
            *["apply_model"] * (layers + 1),
            "reset_prefix_cache",
        ]
        got = dict(llm.hf.named_parameters())
        worst = max(((got[n] - w).norm() / w.norm()).item() for n, w in want.items())
        assert worst < 1e-5, worst
        gap, _ = _worst_gap(policy, seed=3)
        assert gap < 1e-4
    finally:
        policy.close()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_sharded_policy_gathers_for_its_engine_in_the_compute_dtype(standin, tiny_paths):
    """bfloat16 compute: every part the engine is fed is bfloat16 and no larger than a layer (or
    the embeddings and head), never the float32 model."""
    policy = _policy(tiny_paths["llama"], dtype="bfloat16", shards=2)
    parts: list[list] = []
    feed = policy.engine.sync_weights_in_parts

    def recording(given):
        def kept():
            for part in given:
                parts.append([(n, t.dtype, t.numel()) for n, t in part])
                yield part

        feed(kept())

    try:
        policy.engine.sync_weights_in_parts = recording
        _, rollouts = _worst_gap(policy, seed=3)
        _train_step(policy, rollouts)
    finally:
        policy.close()
    assert len(parts) >= 3  # the tiny llama's layers, then the rest
    assert {dtype for part in parts for _, dtype, _ in part} == {torch.bfloat16}
    total = sum(n for part in parts for _, _, n in part)
    assert max(sum(n for _, _, n in part) for part in parts) < total / 2


def test_missing_prefix_reset_would_give_stale_logprobs(standin, tiny_paths):
    """The stand-in's prefix cache is real: without the reset, step 1 reuses step-0 KV."""
    policy = _policy(tiny_paths["llama"])
    policy.engine.sleep_mode = False
    policy.engine._wake(["weights", "kv_cache"])
    llm = policy.engine.llm
    _, rollouts = _worst_gap(policy, seed=3)
    llm.reset_prefix_cache = lambda: True  # what the old engine amounted to
    _train_step(policy, rollouts)
    gap, _ = _worst_gap(policy, seed=3)
    assert gap > 1e-3


def test_requests_longer_than_the_engine_are_refused_in_one_line(standin, tiny_paths):
    policy = _policy(tiny_paths["llama"], max_new_tokens=200)  # 56 positions left for prompts
    with pytest.raises(DataError, match=r"^models\.0: a prompt of \d+ tokens and 200 new tokens"):
        policy.generate(PROBLEMS[:1], n=2, params=_params(policy), seed=0)


def test_tempered_truncated_rollouts_are_refused_at_start_up(standin, tiny_paths):
    with pytest.raises(ConfigError, match=r"^rollout\.top_k: "):
        _policy(tiny_paths["llama"], temperature=0.7, top_k=5)


def test_gguf_and_tiny_presets_reach_the_engine(standin, tmp_path):
    pytest.importorskip("gguf")
    from test_gguf import write_llama_gguf

    bpe = build_tiny(small_tiny_spec("llama", "bpe", pretrain_steps=10))
    native = _policy(str(bpe), engine="hf")
    gguf_path = tmp_path / "tiny.gguf"
    write_llama_gguf(native.model, native.tokenizer, gguf_path)
    for path in (str(gguf_path), "tiny:llama-char-add"):
        policy = _policy(path)
        gap, _ = _worst_gap(policy, seed=5)
        assert gap < 1e-4, path
        config = json.loads((Path(policy.engine.llm.model_arg) / "config.json").read_text())
        assert config["architectures"] == ["LlamaForCausalLM"]
        policy.engine.close()  # one sleep-mode engine per process


# ----------------------------------------------------------------------------- resources


@pytest.fixture
def gpu():
    """Skip without CUDA and vLLM; afterwards release the test's engine, so the next can start."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    pytest.importorskip("vllm")
    yield
    import gc

    from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

    gc.collect()
    cleanup_dist_env_and_memory()


@pytest.mark.gpu
def test_gpu_engine_builds_on_a_tiny_model(gpu):
    """Fails on the old engine: it passed max_model_len=8192 for every model, and vLLM refuses a
    value above the config's own limit ("User-specified max_model_len (8192) is greater than the
    derived max_model_len (max_position_embeddings=256 ...)"), so no tiny model got an engine."""
    policy = _policy("tiny:llama-char-add")
    assert policy.engine.max_model_len == 256
    gap, _ = _worst_gap(policy, seed=3)
    assert gap < 1e-3


@pytest.mark.gpu
def test_gpu_logprobs_match_the_policy_after_an_update_on_a_long_prefix(gpu):
    """Fails on the old engine: step 0 fills vLLM's prefix cache with the 70-token fixed prefix
    (four full 16-token blocks); the old sync loaded new weights but never called
    reset_prefix_cache(), so step 1 reused KV computed with the step-0 weights and its log-probs
    differ from the updated policy's own scoring by far more than 1e-3. (Its sync also reached
    into `llm.llm_engine.model_executor.driver_worker`, which vLLM's V1 engine no longer has.)"""
    policy = _policy("tiny:llama-char-add")
    _, rollouts = _worst_gap(policy, seed=3)
    _train_step(policy, rollouts)
    gap, _ = _worst_gap(policy, seed=3)
    assert gap < 1e-3


@pytest.mark.gpu
def test_gpu_logprobs_match_the_policy_with_top_k_and_top_p(gpu):
    """Fails on the old engine: it asked for processed log-probs, which vLLM takes after top-k /
    top-p and renormalizes over the kept tokens, so every recorded log-prob is higher than the
    untruncated one the trainer computes by -log(kept mass) (about 0.06 a token with top_k=5 on
    this model: the first minibatch's ratio averaged 0.94 instead of 1)."""
    policy = _policy("tiny:llama-char-add", top_k=5, top_p=0.8)
    gap, rollouts = _worst_gap(policy, seed=3)
    assert gap < 1e-3
    stats = _train_step(policy, rollouts)
    assert abs(stats["loss/ratio_mean"] - 1.0) < 1e-3
    gap, _ = _worst_gap(policy, seed=4)
    assert gap < 1e-3


@pytest.mark.gpu
def test_gpu_grpo_run_with_vllm_tracks_the_native_sampler(gpu, tmp_path):
    """Three GRPO steps through the CLI with vLLM and with graft's own sampler, same seeds.
    Fails on the old engine at construction (max_model_len 8192 over the model's 256); past that,
    its stale prefix cache and processed log-probs would show as ratio means away from 1. The
    samplers draw different random numbers, so rewards and weights agree only within tolerance."""
    from graft.rundir import read_metrics

    runs = {}
    for engine in ("vllm", "hf"):
        out = tmp_path / engine
        cmd = [sys.executable, "-m", "graft.cli", "train", str(ROOT / "configs/grpo_tiny.yaml")]
        cmd += ["--out", str(out), "--set", "run.steps=3", "--set", f"rollout.engine={engine}"]
        cmd += ["--set", "eval.every=0", "--set", "run.save_every=3", "--set", "run.progress=false"]
        subprocess.run(cmd, check=True, timeout=600)
        runs[engine] = (read_metrics(out), out / "checkpoints" / "step_000003" / "llama")
    from safetensors.torch import load_file

    rewards = {e: [r["reward/mean"] for r in m if "reward/mean" in r] for e, (m, _) in runs.items()}
    assert len(rewards["vllm"]) == len(rewards["hf"]) == 3
    assert abs(sum(rewards["vllm"]) - sum(rewards["hf"])) / 3 < 0.15, rewards
    ratios = [r["loss/ratio_mean"] for r in runs["vllm"][0] if "loss/ratio_mean" in r]
    assert ratios and all(abs(x - 1) < 0.05 for x in ratios), ratios
    start = load_file(str(build_tiny("llama-char-add") / "model.safetensors"))
    ends = {e: load_file(str(d / "model.safetensors")) for e, (_, d) in runs.items()}
    moved = {e: sum(float((w[k] - start[k]).norm()) for k in start) for e, w in ends.items()}
    apart = sum(float((ends["vllm"][k] - ends["hf"][k]).norm()) for k in start)
    assert 0.5 < moved["vllm"] / moved["hf"] < 2.0, moved
    assert apart < moved["vllm"] + moved["hf"], (apart, moved)


def test_every_gpu_test_is_marked_and_reasoned():
    """Each gpu test carries the gpu mark and says why it fails on the old engine."""
    module = sys.modules[__name__]
    on_gpu = [f for n, f in vars(module).items() if n.startswith("test_gpu_") and callable(f)]
    assert len(on_gpu) == 4
    for f in on_gpu:
        assert any(m.name == "gpu" for m in getattr(f, "pytestmark", [])), f.__name__
        assert "Fails on the old engine" in (f.__doc__ or ""), f.__name__
