"""LoRA policies (models.N.lora) through the real CLI on the tiny models: GRPO with adapters raises
held-out accuracy while the base weights stay bit-identical, resume is exact, a LoRA peer and a
fully trained peer co-train alike in every backend, the merged export is a plain transformers
model with the adapter model's log-probs, and bad LoRA settings end in one line."""

import json
import re
import warnings
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from graft.cli import main
from graft.models.tiny import build_tiny
from graft.rundir import is_timing, read_metrics

ROOT = Path(__file__).resolve().parents[1]
GRPO = ROOT / "configs" / "grpo_tiny.yaml"
GRAFT = ROOT / "configs" / "graft_tiny.yaml"
QUIET = ["run.progress=false", "verify.workers=1"]
SMALL = [
    *QUIET,
    "eval.every=0",
    "rollout.prompts_per_step=8",
    "rollout.group_size=4",
    "algo.minibatches=2",
]
LORA = ["models.0.lora.r=8", "models.0.optim.lr=3e-4"]


def _train(config: Path, out: Path, *sets: str) -> None:
    args = ["train", str(config), "--out", str(out)]
    for s in sets:
        args += ["--set", s]
    assert main(args) == 0


def _same_metrics(a: Path, b: Path) -> None:
    def clean(records):
        return [{k: v for k, v in r.items() if not is_timing(k)} for r in records]

    ra, rb = clean(read_metrics(a)), clean(read_metrics(b))
    assert len(ra) == len(rb) and ra
    for x, y in zip(ra, rb):
        assert x.keys() == y.keys()
        for key in x:
            assert x[key] == pytest.approx(y[key], abs=1e-6), key


def _same_tensors(a: Path, b: Path, *, exact: bool) -> None:
    wa, wb = load_file(str(a)), load_file(str(b))
    assert wa.keys() == wb.keys() and wa
    for k in wa:
        if exact:
            assert torch.equal(wa[k], wb[k]), k
        else:
            assert torch.allclose(wa[k], wb[k], atol=1e-6, rtol=0), k


@pytest.mark.slow
def test_lora_grpo_raises_accuracy_trains_only_the_adapter_and_exports_a_merged_model(tmp_path):
    run = tmp_path / "lora"
    _train(GRPO, run, *QUIET, "run.steps=40", "eval.every=40", *LORA)
    records = read_metrics(run)
    before, after = records[0]["eval/test/avg@4"], records[-1]["eval/test/avg@4"]
    assert after >= before + 0.03, (before, after)

    # The checkpoint holds the adapter alone, and AdamW state for the adapter alone.
    ckpt = run / "checkpoints" / "step_000040" / "llama"
    assert not (ckpt / "model.safetensors").exists()
    adapter = load_file(str(ckpt / "adapter_model.safetensors"))
    assert adapter and all("lora_" in k for k in adapter)
    assert any(k.endswith("lora_B.weight") and v.abs().sum() > 0 for k, v in adapter.items())
    optim = torch.load(ckpt / "optimizer.pt", weights_only=True)
    state_numel = sum(s["exp_avg"].numel() for s in optim["state"].values())
    assert state_numel == sum(v.numel() for v in adapter.values())

    # Base weights bit-identical to the tiny model the run started from.
    from graft.config import Config, load_config
    from graft.training.policy import Policy, PolicySpec

    cfg = load_config(Config, run / "config.yaml")
    policy = Policy(PolicySpec(model=cfg.models[0], rollout=cfg.rollout, algo=cfg.algo, seed=0))
    policy.load(ckpt)
    initial = load_file(str(build_tiny("llama-char-add") / "model.safetensors"))
    base = {
        k.replace(".base_layer", ""): v
        for k, v in policy.model.state_dict().items()
        if "lora_" not in k
    }
    assert all(torch.equal(base[k], initial[k]) for k in initial), "a base weight changed"

    # The store records base hash + adapter hash as the model revision.
    from graft.store import TrajectoryStore

    revisions = set(
        TrajectoryStore(str(run / "trajectories")).scan().column("model_revision").to_pylist()
    )
    assert len(revisions) == 1 and "+lora:" in revisions.pop()

    # graft eval reads the LoRA checkpoint (its base with the adapter merged in).
    ev = tmp_path / "eval"
    eval_args = ["--suite", "test", "--k", "1", "--runs", "1", "--limit", "8", "--workers", "1"]
    assert main(["eval", "--run", str(run), *eval_args, "--out", str(ev)]) == 0
    assert (ev / "eval.json").is_file()

    # Merged export: a plain transformers model with the adapter model's log-probs.
    out = tmp_path / "merged"
    assert main(["export-merged", str(run), "--out", str(out)]) == 0
    from transformers import AutoModelForCausalLM

    from graft.models.modeling import score_sequences

    merged = AutoModelForCausalLM.from_pretrained(out).eval()
    assert not any("lora" in k for k in merged.state_dict())
    prompts = [policy.prompt_ids("12+34=")] * 2 + [policy.prompt_ids("7+58=")]
    responses = [list(policy.prompt_ids("46")), list(policy.prompt_ids("4")), [5, 6, 7]]
    args = {"pad_id": policy.pad_id, "temperature": 1.0, "batch_size": 8}
    got = score_sequences(merged, prompts, responses, **args)
    want = score_sequences(policy.model, prompts, responses, **args)
    diffs = [abs(a - b) for ga, wa in zip(got, want) for a, b in zip(ga, wa)]
    # Merging the adapter into float32 weights rounds differently from running it beside them:
    # 1.1e-5 at most on an AMD EPYC, below 1e-5 elsewhere.
    assert diffs and max(diffs) < 2e-5, max(diffs)

    # A standard PEFT adapter: peft alone loads it, its tiny base included, to the same log-probs.
    from peft import AutoPeftModelForCausalLM

    body = json.loads((ckpt / "adapter_config.json").read_text())
    assert body["task_type"] == "CAUSAL_LM"
    assert Path(body["base_model_name_or_path"]) == build_tiny("llama-char-add").resolve()
    assert json.loads((ckpt / "graft_adapter.json").read_text())["base"] == "tiny:llama-char-add"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        alone = AutoPeftModelForCausalLM.from_pretrained(str(ckpt)).eval()
    got = score_sequences(alone, prompts, responses, **args)
    diffs = [abs(a - b) for ga, wa in zip(got, want) for a, b in zip(ga, wa)]
    assert max(diffs) < 1e-5, max(diffs)


@pytest.mark.slow
def test_lora_resume_is_exact(tmp_path):
    sets = [*SMALL, *LORA, "models.0.lora.dropout=0.1", "run.save_every=2"]
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    _train(GRPO, straight, *sets, "run.steps=4")
    _train(GRPO, resumed, *sets, "run.steps=2")
    assert main(["train", "--resume", str(resumed), "--set", "run.steps=4"]) == 0
    _same_metrics(straight, resumed)
    last = "checkpoints/step_000004/llama"
    for name in ("adapter_model.safetensors", "optimizer.pt"):
        a, b = straight / last / name, resumed / last / name
        if name.endswith(".pt"):
            sa, sb = (torch.load(p, weights_only=True)["state"] for p in (a, b))
            assert all(torch.equal(sa[i][k], sb[i][k]) for i in sa for k in sa[i])
        else:
            _same_tensors(a, b, exact=True)


def _graft_lora_full(out: Path, backend: str) -> None:
    _train(
        GRAFT,
        out,
        *SMALL,
        *LORA,
        "run.threads=1",
        "exchange.delta=0.5",
        "run.steps=3",
        f"run.backend={backend}",
    )


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["processes", "ray"])
def test_a_lora_peer_and_a_full_peer_match_between_inprocess_and_other_backends(tmp_path, backend):
    if backend == "ray":
        pytest.importorskip("ray")
    a, b = tmp_path / "inprocess", tmp_path / backend
    _graft_lora_full(a, "inprocess")
    try:
        _graft_lora_full(b, backend)
    finally:
        if backend == "ray":
            import ray

            ray.shutdown()
    _same_metrics(a, b)
    records = read_metrics(a)
    assert any(k.startswith("x/") for k in records[-1])  # the two policies exchanged groups
    step = "checkpoints/step_000003"
    _same_tensors(
        a / step / "llama/adapter_model.safetensors",
        b / step / "llama/adapter_model.safetensors",
        exact=False,
    )
    _same_tensors(
        a / step / "qwen/model.safetensors", b / step / "qwen/model.safetensors", exact=False
    )


@pytest.mark.parametrize(
    ("setting", "key", "cause"),
    [
        ("models.0.lora.target_modules=[q_proj, nope]", "models.0.lora.target_modules", "'nope'"),
        ("models.0.lora.r=-2", "models.0.lora.r", "must be >= 0"),
        ("models.0.lora.alpha=-1", "models.0.lora.alpha", "must be > 0"),
        ("models.0.lora.dropout=1.5", "models.0.lora.dropout", "[0, 1)"),
        ("rollout.engine=vllm", "models.0.lora.r", "vLLM"),
    ],
)
def test_bad_lora_settings_end_in_one_line(tmp_path, capsys, setting, key, cause):
    args = ["train", str(GRPO), "--out", str(tmp_path / "bad"), "--set", "models.0.lora.r=4"]
    assert main([*args, "--set", setting]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"graft: error: {key}:"), err
    assert cause in err, err
    assert not (tmp_path / "bad" / "checkpoints").exists()


def test_lora_on_a_gguf_loaded_model_trains_saves_and_merges(tmp_path, monkeypatch):
    """A .gguf file is dequantized to plain weights on load, so it takes adapters like any model;
    its checkpoint names the .gguf file as the base, and loads back merged."""
    pytest.importorskip("gguf")
    from graft.config import AlgoConfig, LoRAConfig, ModelConfig, OptimConfig, RolloutConfig
    from graft.models import load_model_and_tokenizer
    from graft.models.modeling import score_sequences
    from graft.training.policy import Policy, PolicySpec
    from graft.types import TrainGroup, TrainSequence
    from test_gguf import write_llama_gguf
    from test_models import small_spec

    monkeypatch.setenv("GRAFT_CACHE", str(tmp_path / "cache"))
    model, tok = load_model_and_tokenizer(
        ModelConfig(path=str(build_tiny(small_spec("llama", "bpe", pretrain_steps=10))))
    )
    gguf_path = tmp_path / "tiny-f32.gguf"
    write_llama_gguf(model, tok, gguf_path)
    lora = LoRAConfig(r=4, target_modules=("q_proj", "v_proj"))
    spec = PolicySpec(
        model=ModelConfig(path=str(gguf_path), lora=lora, optim=OptimConfig(lr=1e-2)),
        rollout=RolloutConfig(max_new_tokens=6),
        algo=AlgoConfig(minibatches=1),
        seed=0,
    )
    policy = Policy(spec)
    trainable = {n for n, p in policy.model.named_parameters() if p.requires_grad}
    assert trainable and all(("q_proj.lora_" in n or "v_proj.lora_" in n) for n in trainable)
    prompt, response = list(policy.prompt_ids("12+34=")), [5, 6, 7]
    (old,) = policy.score([prompt], [response])
    policy.train([TrainGroup("p", (TrainSequence(tuple(prompt), tuple(response), old, 1.0),))])
    policy.save(tmp_path / "ckpt")
    merged, _ = load_model_and_tokenizer(ModelConfig(path=str(tmp_path / "ckpt")))
    assert all(p.requires_grad for p in merged.parameters())  # trainable as a new base
    args = {"pad_id": policy.pad_id, "temperature": 1.0}
    (got,) = score_sequences(merged, [prompt], [response], **args)
    (want,) = score_sequences(policy.model, [prompt], [response], **args)
    assert max(abs(a - b) for a, b in zip(got, want)) < 1e-5
    assert max(abs(a - b) for a, b in zip(want, old)) > 1e-4  # the adapter did move


def test_the_kl_reference_of_a_lora_policy_is_its_base_model(tmp_path):
    """With algo.kl_coef > 0 the reference is the base (adapters switched off), not a copy."""
    from graft.config import AlgoConfig, LoRAConfig, ModelConfig, OptimConfig, RolloutConfig
    from graft.models import load_model_and_tokenizer
    from graft.models.modeling import score_sequences
    from graft.training.policy import Policy, PolicySpec
    from graft.types import TrainGroup, TrainSequence

    model_cfg = ModelConfig(path="tiny:llama-char-add", optim=OptimConfig(lr=1e-2))
    lora_cfg = ModelConfig(path="tiny:llama-char-add", lora=LoRAConfig(r=4), optim=model_cfg.optim)
    spec = PolicySpec(
        model=lora_cfg, rollout=RolloutConfig(), algo=AlgoConfig(minibatches=1, kl_coef=0.1), seed=0
    )
    policy = Policy(spec)
    base, _ = load_model_and_tokenizer(model_cfg)
    prompt, response = list(policy.prompt_ids("12+34=")), list(policy.prompt_ids("46"))
    (old,) = policy.score([prompt], [response])
    seq = TrainSequence(tuple(prompt), tuple(response), old, 1.0)
    stats = policy.train([TrainGroup("p", (seq,))])
    assert "kl" in " ".join(stats)
    args = {"pad_id": policy.pad_id, "temperature": 1.0}
    (ref,) = score_sequences(policy.ref_model, [prompt], [response], **args)
    (want,) = score_sequences(base, [prompt], [response], **args)
    (now,) = score_sequences(policy.model, [prompt], [response], **args)
    assert max(abs(a - b) for a, b in zip(ref, want)) < 1e-6
    assert max(abs(a - b) for a, b in zip(now, want)) > 1e-4  # the adapter trained
    assert not any(p.requires_grad for p in policy.ref_model.parameters())


def _adapted(model) -> set[str]:
    """Names (as in the plain model) of the modules that hold a LoRA adapter."""
    prefix = "base_model.model."
    return {
        name.removeprefix(prefix)
        for name, module in model.named_modules()
        if hasattr(module, "lora_A") and "default" in getattr(module, "lora_A", {})
    }


@pytest.mark.parametrize(
    "targets",
    [
        "all-linear",
        r".*layers\.1\..*(q|v)_proj",
        ("q_proj", "down_proj"),
        ("model.layers.0.self_attn.q_proj",),
        ("layers.1.mlp.up_proj", "v_proj"),
    ],
)
def test_target_modules_select_what_peft_selects(targets):
    """`all-linear`, a regular expression, leaf names and dotted names: graft adapts exactly the
    modules peft adapts for the same target_modules (a dotted name is that one module, not every
    layer's module of the same last name)."""
    peft = pytest.importorskip("peft")
    from conftest import random_llama
    from graft.config import LoRAConfig
    from graft.models.lora import apply_lora

    ours = apply_lora(random_llama(), LoRAConfig(r=2, target_modules=targets), key="m", seed=0)
    as_peft = list(targets) if isinstance(targets, tuple) else targets
    with warnings.catch_warnings():  # peft asks transformers a renamed question
        warnings.simplefilter("ignore", FutureWarning)
        theirs = peft.get_peft_model(
            random_llama(), peft.LoraConfig(r=2, target_modules=as_peft, task_type="CAUSAL_LM")
        )
    assert _adapted(ours) == _adapted(theirs) and _adapted(ours)
    if targets == ("model.layers.0.self_attn.q_proj",):
        assert _adapted(ours) == {"model.layers.0.self_attn.q_proj"}


@pytest.mark.parametrize(
    ("setting", "key"),
    [
        ("models.0.lora.target_modules=[q_proj]", "models.0.lora.target_modules"),
        ("models.0.lora.alpha=16", "models.0.lora.alpha"),
        ("models.0.lora.dropout=1.5", "models.0.lora.dropout"),
    ],
)
def test_lora_keys_set_while_r_is_zero_end_in_one_line(setting, key):
    """A `lora:` block without `r` used to train the whole model and ignore the rest silently."""
    from graft.config import Config, ConfigError, load_config

    with pytest.raises(ConfigError, match=rf"^{key}: set to .* while models\.0\.lora\.r is 0"):
        load_config(Config, str(GRPO), [setting])
    cfg = load_config(
        Config, str(GRPO), ["models.0.lora.r=4", "models.0.lora.target_modules=all-linear"]
    )
    assert cfg.models[0].lora.target_modules == "all-linear"
    with pytest.raises(ConfigError, match=r"models\.0\.lora\.target_modules: not a regular"):
        load_config(Config, str(GRPO), ["models.0.lora.r=4", "models.0.lora.target_modules=(q"])


@pytest.mark.slow
def test_a_run_from_an_adapter_matches_a_single_longer_runs_first_steps(tmp_path, capsys):
    """models.N.adapter: the run trains on from the adapter's weights, with its settings."""
    sets = [*SMALL, "run.save_every=1", "run.keep_checkpoints=5"]
    lora = [*LORA, "models.0.lora.dropout=0.1"]
    straight, start = tmp_path / "straight", tmp_path / "start"
    _train(GRPO, straight, *sets, *lora, "run.steps=3")
    # The adapter the straight run started from, as graft's own policy builds and saves it.
    from graft.backends import policy_specs
    from graft.config import Config, load_config
    from graft.training.policy import Policy

    cfg = load_config(Config, str(GRPO), [*sets, *lora])
    initial = start / "llama"
    Policy(policy_specs(cfg)[0]).save(initial)

    cont = tmp_path / "continued"
    _train(
        GRPO, cont, *sets, "models.0.optim.lr=3e-4", f"models.0.adapter={initial}", "run.steps=2"
    )
    _same_metrics_upto(straight, cont, 2)
    for step in (1, 2):
        name = f"checkpoints/step_{step:06d}/llama/adapter_model.safetensors"
        _same_tensors(straight / name, cont / name, exact=True)
    saved = json.loads((cont / "checkpoints/step_000002/llama/adapter_config.json").read_text())
    assert (saved["r"], saved["lora_dropout"]) == (8, 0.1)  # the adapter's own settings

    # A trained adapter (B != 0) loads exactly: the policy built on it saves it back unchanged.
    trained = straight / "checkpoints" / "step_000003" / "llama"
    cfg = load_config(Config, str(GRPO), [*sets, f"models.0.adapter={trained}"])
    Policy(policy_specs(cfg)[0]).save(tmp_path / "again")
    _same_tensors(
        trained / "adapter_model.safetensors",
        tmp_path / "again" / "adapter_model.safetensors",
        exact=True,
    )

    bad = [
        (["models.0.lora.r=4"], r"models\.0\.lora\.r: set together with models\.0\.adapter"),
        ([f"models.0.adapter={tmp_path}"], r"models\.0\.adapter .*: not a PEFT adapter folder"),
        (["models.0.path=tiny:qwen2-bpe-add"], r"trained on the base tiny:llama-char-add, whose"),
    ]
    for extra, message in bad:
        argv = ["train", str(GRPO), "--out", str(tmp_path / "bad")]
        for s in [*sets, f"models.0.adapter={trained}", *extra]:
            argv += ["--set", s]
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and re.search(message, err[0]), err


def _same_metrics_upto(a: Path, b: Path, steps: int) -> None:
    ra = [r for r in read_metrics(a) if r["step"] <= steps]
    rb = read_metrics(b)
    assert [r["step"] for r in rb] == list(range(1, steps + 1)) == [r["step"] for r in ra]
    for x, y in zip(ra, rb):
        for key in x:
            if not is_timing(key):
                assert x[key] == y[key], key


def test_an_adapter_saved_by_peft_itself_trains_on_with_its_own_settings(tmp_path):
    import peft
    from transformers import AutoModelForCausalLM

    from graft.config import Config, load_config
    from graft.models.load import plain_base_path

    base = plain_base_path(load_config(Config, str(GRPO), []).models[0], cache_dir=None)
    model = AutoModelForCausalLM.from_pretrained(base)
    torch.manual_seed(0)
    config = peft.LoraConfig(r=4, target_modules=["q_proj", "v_proj"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        peft.get_peft_model(model, config).save_pretrained(tmp_path / "theirs")
    run = tmp_path / "run"
    with pytest.warns(UserWarning, match="its adapter_config.json names the base"):
        _train(GRPO, run, *SMALL, LORA[1], f"models.0.adapter={tmp_path / 'theirs'}", "run.steps=1")
    ckpt = run / "checkpoints" / "step_000001" / "llama"
    saved = json.loads((ckpt / "adapter_config.json").read_text())
    assert saved["r"] == 4 and saved["lora_alpha"] == 8
    assert all(name.endswith(("q_proj", "v_proj")) for name in saved["target_modules"])
    before = load_file(str(tmp_path / "theirs" / "adapter_model.safetensors"))
    after = load_file(str(ckpt / "adapter_model.safetensors"))
    assert before.keys() == after.keys() and any(
        not torch.equal(before[k], after[k]) for k in before
    )
