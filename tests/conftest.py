import os

import pytest
import torch

# Tests never touch the network; tiny models are built locally into a cache reused across runs.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault(
    "GRAFT_CACHE", os.path.join(os.path.dirname(os.path.dirname(__file__)), ".cache", "graft")
)
# Two threads on the 2-core machine; one per worker when `make test` runs two workers (-n 2).
torch.set_num_threads(1 if os.environ.get("PYTEST_XDIST_WORKER") else 2)


def random_llama(*, vocab: int = 32, layers: int = 2):
    """A small random Llama (seeded: the same weights every call), pad 0, eos 1, tied head."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        tie_word_embeddings=True,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=None,
    )
    return LlamaForCausalLM(cfg).eval()


@pytest.fixture
def random_lm():
    """A small random Llama (vocab 32), for tests of the update math that need real gradients."""
    return random_llama()


def small_tiny_spec(arch: str = "llama", tokenizer: str = "char", **kw):
    """A tiny model that builds in a few seconds (briefly pre-trained on 2-digit addition)."""
    from graft.config import ArithmeticConfig
    from graft.models.tiny import TinySpec

    task = ArithmeticConfig(skills=("add:2,2",), num_train=400, num_test=50)
    base = dict(
        arch=arch,
        tokenizer=tokenizer,
        task=task,
        pretrain_steps=40,
        batch_size=16,
        hidden=64,
        intermediate=128,
        layers=2,
        seed=3,
    )
    base.update(kw)
    return TinySpec(**base)


@pytest.fixture(scope="session")
def tiny_paths():
    """Built (or cached) small models of the three architectures: {"llama": dir, ...}."""
    from graft.models.tiny import build_tiny

    return {
        "llama": str(build_tiny(small_tiny_spec("llama", "char"))),
        "qwen2": str(build_tiny(small_tiny_spec("qwen2", "bpe", bpe_vocab_size=300))),
        "gpt2": str(build_tiny(small_tiny_spec("gpt2", "char"))),
    }


@pytest.fixture
def standin(monkeypatch, tmp_path):
    """The vLLM engine runs on `vllm_standin` (CPU), with a private start-up lock."""
    import vllm_standin
    from graft.rollout import vllm_engine

    monkeypatch.setattr(vllm_engine, "load_vllm", lambda: vllm_standin)
    monkeypatch.setenv(vllm_engine.STARTUP_LOCK_ENV, str(tmp_path / "startup.lock"))
    monkeypatch.setenv("TRITON_F32_DEFAULT", "")  # restored after the test; unset during it
    monkeypatch.delenv("TRITON_F32_DEFAULT")


TINY_RUN = [
    "run.progress=false",
    "run.threads=1",
    "eval.every=0",
    "rollout.prompts_per_step=8",
    "rollout.group_size=4",
    "rollout.max_new_tokens=8",
    "algo.minibatches=2",
    "algo.micro_batch_size=64",
    "verify.workers=1",
]
"""A training run of the tiny models small enough for a test: 8 prompts x 4 responses a step."""

ONE_AT_A_TIME = {"test_backends.py", "test_verify_ray.py"}
"""Files whose tests start a Ray cluster: under `pytest -n 2` (make test) they, and every other
test that names Ray, form one xdist group and run one after the other on one worker, so that two
clusters never start together and contend for the same ports and cores."""


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.name in ONE_AT_A_TIME or "ray" in item.name.lower():
            item.add_marker(pytest.mark.xdist_group("one_at_a_time"))
