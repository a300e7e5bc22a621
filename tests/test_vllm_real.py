"""The vLLM engine against real vLLM 0.30 (`make test-vllm`: vLLM's CPU build in .venv-vllm; on a
GPU machine `scripts/gpu_check.py` runs the same tests on the CUDA build). No stand-in here.

Each test names the fault it exists to catch; each was seen to fail with that fault planted.
The models are small tiny presets whose head size (32) the CPU backend's attention takes.
"""

from __future__ import annotations

import copy
import gc
import json
from pathlib import Path

import pytest
import torch

from graft.config.lib import ConfigError
from graft.errors import DataError
from graft.rollout import SamplingParams, vllm_engine
from graft.types import Problem
from vllm_helpers import PROBLEMS, _params, _policy, _train_step, _worst_gap, engine_tiny_paths

pytestmark = pytest.mark.vllm
vllm = pytest.importorskip("vllm")

EAGER = {"vllm_enforce_eager": True}
"""Most tests build eager engines: the same kernels, seconds instead of a compile per start-up
(one test runs vLLM's default, compiled mode)."""
LONG = Problem("7" * 60 + "+" + "8" * 60 + "=", "0")
"""A prompt whose tokens fill a whole KV block on either backend (16 tokens on a GPU, 128 on the
CPU), so that vLLM's prefix cache holds it."""


@pytest.fixture(scope="module")
def paths():
    return engine_tiny_paths()


@pytest.fixture
def policies():
    """Build policies on the engine (`make(path, **rollout)`); every one is closed afterwards."""
    made = []

    def make(path, **rollout):
        policy = _policy(path, **{**EAGER, **rollout})
        made.append(policy)
        return policy

    yield make
    for policy in made:
        policy.close()
    gc.collect()


def engine_logprobs(policy, prompt: list[int], response: list[int]) -> list[float]:
    """The engine's log-probs of a given response after a given prompt (its prompt log-probs)."""
    request = {"prompt_token_ids": [*prompt, *response]}
    params = vllm.SamplingParams(max_tokens=1, prompt_logprobs=0, detokenize=False, seed=0)
    (out,) = policy.engine.llm.generate([request], [params], use_tqdm=False)
    steps = out.prompt_logprobs[len(prompt) :]
    return [float(step[token].logprob) for step, token in zip(steps, response, strict=True)]


def probe_gap(policy, prompt: list[int], response: list[int]) -> float:
    """Largest |engine - trainer| log-prob over a fixed probe sequence."""
    (trainer,) = policy.score([prompt], [response])
    engine = engine_logprobs(policy, prompt, response)
    return max(abs(a - b) for a, b in zip(engine, trainer, strict=True))


# ----------------------------------------------------------------------------- start-up


def test_the_engine_starts_on_the_cpu_backend_with_the_kv_cache_the_rollouts_need(
    policies, paths, capfd
):
    """What vLLM was given, read back from the running engine: the policy's config alone, the KV
    cache graft sized (16 x 8 sequences of 256 tokens, a quarter more, in whole blocks, at 512
    bytes a token: 20 MiB), no sleep mode on the CPU (said in one line), eager as asked, graft's
    weight loader in its worker. (capfd: vLLM's start-up needs a real standard output.)"""
    if not torch.cuda.is_available():
        assert vllm.platforms.current_platform.is_cpu()
    policy = policies(paths["llama"])
    config = policy.engine.llm.llm_engine.vllm_config
    assert config.cache_config.kv_cache_memory_bytes == policy.engine.kv_cache_bytes == 20 << 20
    assert config.model_config.max_model_len == 256 and config.model_config.enforce_eager
    assert config.parallel_config.worker_extension_cls == vllm_engine.WORKER_EXTENSION
    # vLLM gets a private folder holding only the policy's config, and random weights that the
    # first sync replaces (no tokenizer, no weights file of its own).
    assert config.load_config.load_format == "dummy" and config.model_config.skip_tokenizer_init
    assert [p.name for p in Path(config.model_config.model).iterdir()] == ["config.json"]
    if policy.engine.on_cpu:
        assert not config.model_config.enable_sleep_mode and not policy.engine.sleep_mode
        lines = [line for line in capfd.readouterr().err.splitlines() if "sleep mode" in line]
        assert len(lines) == 1 and lines[0].startswith("models.0: vLLM runs on its CPU backend")


def test_a_head_size_the_cpu_attention_does_not_take_is_refused_in_one_line(tiny_paths):
    """The 16-wide heads of `tiny_paths`: vLLM itself would fail at the first sampling."""
    if torch.cuda.is_available():
        pytest.skip("the CPU backend's rule")
    with pytest.raises(ConfigError) as err:
        _policy(tiny_paths["llama"], **EAGER)
    text = str(err.value)
    assert text.startswith("models.0: vLLM's CPU backend computes attention for head sizes 32,")
    assert "this model's is 16" in text and "\n" not in text


def test_lora_with_vllm_is_refused_in_one_line(tmp_path, capsys):
    from graft.cli import main
    from vllm_helpers import ROOT

    out = tmp_path / "run"
    sets = ["--set", "rollout.engine=vllm", "--set", "models.0.lora.r=8"]
    code = main(["train", str(ROOT / "configs/grpo_tiny.yaml"), "--out", str(out), *sets])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and not out.exists()
    assert err.startswith("graft: error: models.0.lora") and "rollout.engine=hf" in err


# ----------------------------------------------------------------------------- log-probs


@pytest.mark.parametrize(
    ("settings", "mode"),
    [
        pytest.param({"top_k": 5}, "raw_logprobs", id="t1_top_k"),
        pytest.param({"temperature": 0.7}, "processed_logprobs", id="t0.7"),
        pytest.param({"vllm_enforce_eager": False}, "raw_logprobs", id="t1_compiled"),
    ],
)
def test_every_sampled_logprob_equals_the_trainers_recomputation(policies, paths, settings, mode):
    """float32, at most 1e-5: at temperature 1 (raw log-probs: with top-k they are still the
    untruncated distribution's) and at 0.7 without truncation (processed log-probs), and in vLLM's
    default compiled mode. Planted: the other log-probs mode (swapped in `logprobs_mode`) fails
    the first two; the tied head left with its start-up weights fails all three."""
    policy = policies(paths["llama"], **settings)
    assert policy.engine.llm.llm_engine.vllm_config.model_config.logprobs_mode == mode
    gap, rollouts = _worst_gap(policy, seed=3)
    assert gap <= 1e-5, gap
    assert len({c.token_ids for r in rollouts for c in r.completions_G}) > 1


def test_after_each_of_three_updates_the_engine_holds_the_trainers_weights(policies, paths):
    """A fixed probe sequence's log-probs from the engine equal the trainer's to 1e-5 after each
    of 3 updates (at lr 1e-3, which moves them by far more). The sync goes through vLLM's
    layerwise reload: plain `load_weights` fails on the CPU backend (see the next test). Planted:
    the second update not synced fails it."""
    policy = policies(paths["llama"])
    prompt, response = list(policy.prompt_ids(PROBLEMS[0].prompt)), [5, 6, 7, 8, 1]
    before = policy.score([prompt], [response])[0]
    for update in range(3):
        _, rollouts = _worst_gap(policy, seed=10 + update)
        _train_step(policy, rollouts)
        assert probe_gap(policy, prompt, response) <= 1e-5, update
    after = policy.score([prompt], [response])[0]
    assert max(abs(a - b) for a, b in zip(before, after)) > 1e-3  # the weights moved


def test_plain_load_weights_fails_on_the_cpu_backend_and_the_layerwise_reload_does_not(
    policies, paths
):
    """Why the sync takes vLLM's layerwise reload: after start-up the CPU backend has repacked
    every linear layer's weight for its kernels and left an empty parameter without a loader."""
    policy = policies(paths["llama"])
    if not policy.engine.on_cpu:
        pytest.skip("the CPU backend's repacking")
    weights = [(n, p.detach()) for n, p in policy.model.named_parameters()]
    with pytest.raises(AttributeError, match="weight_loader"):
        policy.engine.llm.apply_model(lambda model: model.load_weights(weights=weights))
    policy.engine.sync_weights(policy.model.named_parameters())
    gap, _ = _worst_gap(policy, seed=4)
    assert gap <= 1e-5


def test_a_sync_that_leaves_engine_parameters_unloaded_is_an_error(policies, paths):
    policy = policies(paths["llama"])
    partial = list(policy.model.named_parameters())[1:]  # the embeddings (and the tied head) left
    with pytest.raises(RuntimeError, match=r"^models\.0: the vLLM model has parameters"):
        policy.engine.sync_weights(partial)


def test_the_prefix_cache_never_serves_kv_from_older_weights(policies, paths):
    """A prompt of a whole KV block sampled before an update and again after: the new weights'
    log-probs. Planted: no prefix-cache reset after the sync (vLLM then serves the prompt's KV
    from the old weights) fails it."""
    policy = policies(paths["llama"])
    params = _params(policy)
    assert len(policy.prompt_ids(LONG.prompt)) >= 128
    rollouts = policy.generate([LONG], n=4, params=params, seed=1)
    _train_step(policy, rollouts)
    rollouts = policy.generate([LONG], n=4, params=params, seed=2)
    completions = rollouts[0].completions_G
    scored = policy.score([rollouts[0].prompt_ids] * 4, [c.token_ids for c in completions])
    gap = max(abs(a - b) for c, s in zip(completions, scored) for a, b in zip(c.logprobs, s))
    assert gap <= 1e-5, gap


# ----------------------------------------------------------------------------- seeds


def test_a_rows_sample_depends_on_its_seed_not_on_the_batch_around_it(policies, paths):
    """The same seed gives the same samples; a problem's samples are the same alone and between
    other problems (each row is seeded from the run seed, the step, its problem and its index, as
    with the hf engine). Planted: seeds by position in the batch (seed + i) fails it."""
    policy = policies(paths["llama"])
    params = _params(policy)

    def tokens(problems, seed):
        rollouts = policy.generate(problems, n=4, params=params, seed=seed)
        return {r.problem.id: [c.token_ids for c in r.completions_G] for r in rollouts}

    alone = tokens([PROBLEMS[1]], seed=7)
    assert tokens([PROBLEMS[1]], seed=7) == alone
    among = tokens([PROBLEMS[0], PROBLEMS[1], PROBLEMS[2]], seed=7)
    assert among[PROBLEMS[1].id] == alone[PROBLEMS[1].id]
    assert tokens([PROBLEMS[1]], seed=8) != alone
    assert len(set(alone[PROBLEMS[1].id])) > 1  # four rows, four streams


# ----------------------------------------------------------------------------- endings


def test_stop_ids_max_new_tokens_and_finish_reasons_follow_the_stores_rules(policies, paths):
    """Every sample: `stop` ends on its first stop id, `length` holds exactly max_new_tokens
    tokens and none of them a stop id; a stop id drawn as the last allowed token is `stop` (as the
    hf sampler has it). Both endings occur here. Planted: the stop token dropped from a `stop`
    sample's token ids (as vLLM's text output does) fails it."""
    policy = policies(paths["llama"])
    engine, stops = policy.engine, policy.stop_ids
    seen = set()
    for limit in (1, 2, 3, 6):
        params = SamplingParams(limit, 1.0, 1.0, 0)
        rows = [list(policy.prompt_ids(p.prompt)) for p in PROBLEMS for _ in range(8)]
        for s in engine.sample(rows, params, stop_ids=stops, row_seeds=list(range(len(rows)))):
            seen.add(s.finish_reason)
            assert len(s.token_ids) == len(s.logprobs) <= limit
            early = [t for t in s.token_ids[:-1] if t in stops]
            assert not early
            if s.finish_reason == "stop":
                assert s.token_ids[-1] in stops
            else:
                assert s.finish_reason == "length" and len(s.token_ids) == limit
                assert s.token_ids[-1] not in stops
    assert seen == {"stop", "length"}
    # Every token a stop id, one token allowed: each sample is one stop token, ended `stop`.
    every = tuple(range(policy.model.config.vocab_size))
    (one,) = engine.sample(rows[:1], SamplingParams(1), stop_ids=every, row_seeds=[0])
    assert one.finish_reason == "stop" and len(one.token_ids) == 1


def test_a_request_longer_than_the_engine_is_refused_in_one_line(policies, paths):
    policy = policies(paths["llama"], max_new_tokens=200)  # 56 positions left for prompts
    with pytest.raises(DataError, match=r"^models\.0: a prompt of \d+ tokens and 200 new tokens"):
        policy.generate([LONG], n=2, params=_params(policy), seed=0)


def test_a_qwen2_with_a_bpe_tokenizer_samples_the_trainers_logprobs(policies, paths):
    """The second architecture and tokenizer of the demo's pairs."""
    policy = policies(paths["qwen2"])
    gap, rollouts = _worst_gap(policy, seed=3)
    assert gap <= 1e-5, gap
    _train_step(policy, rollouts)
    gap, _ = _worst_gap(policy, seed=4)
    assert gap <= 1e-5, gap


def test_a_bf16_engine_samples_with_the_rounded_float32_master_weights(paths):
    """vLLM's loaders copy the float32 masters into its bfloat16 tensors, rounding to nearest: the
    samples equal those of an engine loaded with bfloat16-exact weights, and differ from a float32
    engine's. Planted: the masters truncated toward zero before the sync fails it."""
    from transformers import AutoModelForCausalLM

    from graft.config import RolloutConfig

    master = AutoModelForCausalLM.from_pretrained(paths["llama"], dtype=torch.float32)
    rounded = copy.deepcopy(master)
    with torch.no_grad():
        for p in rounded.parameters():
            p.copy_(p.to(torch.bfloat16).float())
    assert all(not torch.equal(p, q) for p, q in zip(master.parameters(), rounded.parameters()))
    rollout = RolloutConfig(engine="vllm", max_new_tokens=8, vllm_enforce_eager=True)
    rows = [list(range(3, 40))] * 8
    params = SamplingParams(8, 1.0, 1.0, 0)

    def samples(model, dtype):
        engine = vllm_engine.VLLMEngine(model, rollout=rollout, dtype=dtype, seed=0)
        try:
            return engine.sample(rows, params, stop_ids=[1], row_seeds=list(range(8)))
        finally:
            engine.close()
            gc.collect()

    got = samples(master, "bfloat16")
    assert got == samples(rounded, "bfloat16")
    assert got != samples(master, "float32")


def test_a_gguf_file_reaches_the_engine_as_the_policys_model(policies, tmp_path):
    """vLLM is given the config graft built the policy from (a GGUF file names no architecture:
    the engine's config names the class graft runs) and the policy's weights."""
    pytest.importorskip("gguf")
    from conftest import small_tiny_spec
    from graft.models.tiny import build_tiny
    from test_gguf import write_llama_gguf

    spec = small_tiny_spec("llama", "bpe", pretrain_steps=10, heads=2, kv_heads=1)
    native = _policy(str(build_tiny(spec)), engine="hf")
    gguf_path = tmp_path / "tiny.gguf"
    write_llama_gguf(native.model, native.tokenizer, gguf_path)
    policy = policies(str(gguf_path))
    folder = Path(policy.engine.llm.llm_engine.model_config.model)
    config = json.loads((folder / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    gap, _ = _worst_gap(policy, seed=5)
    assert gap <= 1e-5, gap
