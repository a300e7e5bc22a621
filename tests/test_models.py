"""Tiny-model factory (tokenizers, configs, pre-training, cache) and the model loader."""

from __future__ import annotations

import dataclasses
import json
import random
import shutil
import threading
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer, GPT2Config, LlamaConfig, Qwen2Config

from graft.config import ArithmeticConfig, ModelConfig
from graft.models import (
    TINY_PRESETS,
    ModelLoadError,
    TinySpec,
    bpe_tokenizer,
    build_tiny,
    char_tokenizer,
    load_model_and_tokenizer,
    make_model,
    make_tokenizer,
    model_fingerprint,
    pretrain,
    spec_hash,
    wrong_answer,
)
from graft.models import tiny as tiny_mod
from graft.tasks.arithmetic import ArithmeticTask

ADD = ArithmeticConfig(skills=("add:2,2",), num_train=400, num_test=50)
ROUND_TRIP = ["12+34=46", "347*6=2082", " lead and trail ", "a  b\n\nc", "{}[]~`!@#$%^&*()_-"]


def small_spec(arch: str = "llama", tokenizer: str = "char", **kw: object) -> TinySpec:
    """A spec that builds in about a second: few steps, small batch, a small problem set."""
    base = dict(arch=arch, tokenizer=tokenizer, task=ADD, pretrain_steps=4, batch_size=8, seed=7)
    base.update(kw)
    return TinySpec(**base)  # type: ignore[arg-type]


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """GRAFT_CACHE in a fresh folder, offline: every tiny build of the test is its own."""
    root = tmp_path / "cache"
    monkeypatch.setenv("GRAFT_CACHE", str(root))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return root


def _logits(model: torch.nn.Module, tok, text: str) -> torch.Tensor:
    ids = torch.tensor([tok.encode(text, add_special_tokens=False)])
    with torch.no_grad():
        return model(input_ids=ids).logits


# ----------------------------------------------------------------------------------- tokenizers


def test_char_tokenizer_round_trip() -> None:
    tok = char_tokenizer()
    printable = "".join(chr(c) for c in range(32, 127)) + "\n"
    for text in [*ROUND_TRIP, printable]:
        ids = tok.encode(text, add_special_tokens=False)
        assert len(ids) == len(text)  # one token per character
        assert tok.decode(ids) == text
        assert tok(text)["input_ids"] == ids  # no BOS/EOS even with special tokens on
    assert len(tok) == 3 + 95 + 1
    assert (tok.pad_token_id, tok.eos_token_id, tok.unk_token_id) == (0, 1, 2)
    assert tok.bos_token_id is None
    assert tok.encode("é", add_special_tokens=False) == [tok.unk_token_id]
    assert tok.decode([5, tok.eos_token_id], skip_special_tokens=True) == tok.decode([5])


@pytest.mark.parametrize("style", ["gpt2", "qwen2"])
def test_bpe_tokenizer_round_trip(style: str) -> None:
    task = ArithmeticTask(ADD)
    texts = [p.prompt + task.solution(p) for p in task.train_problems()]
    tok = bpe_tokenizer(texts, 300, style=style)  # type: ignore[arg-type]
    assert (tok.pad_token_id, tok.eos_token_id, tok.bos_token_id) == (0, 1, None)
    for text in [*ROUND_TRIP, "unicode é ü 日本", "tabs\tand\r\n"]:
        ids = tok.encode(text, add_special_tokens=False)
        assert tok.decode(ids) == text
        assert tok(text)["input_ids"] == ids
    n = len(tok.encode("1234+5678=", add_special_tokens=False))
    if style == "gpt2":
        # Merges learnt from the task text make numbers shorter than their digits.
        assert len(tok) == 300 and n < len("1234+5678=")
    else:
        # Qwen2's pre-tokenizer isolates every digit, so arithmetic text leaves nothing to merge.
        assert type(tok).__name__ == "Qwen2Tokenizer" and n == len("1234+5678=")


@pytest.mark.parametrize(
    ("arch", "kind", "config"),
    [
        ("llama", "char", LlamaConfig(vocab_size=99)),
        ("llama", "bpe", LlamaConfig(vocab_size=300)),
        ("gpt2", "bpe", GPT2Config(vocab_size=300, bos_token_id=None, eos_token_id=None)),
        ("qwen2", "bpe", Qwen2Config(vocab_size=258)),
    ],
)
def test_tokenizer_reloads_as_same_class(arch: str, kind: str, config, tmp_path: Path) -> None:
    tok = make_tokenizer(small_spec(arch, kind))
    # A config.json beside it tempts AutoTokenizer to pick the architecture's own class.
    config.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "tokenizer_config.json").read_text())
    assert saved["tokenizer_class"] == type(tok).__name__
    again = AutoTokenizer.from_pretrained(tmp_path)
    assert type(again) is type(tok)
    assert (again.eos_token_id, again.pad_token_id, len(again)) == (
        tok.eos_token_id,
        tok.pad_token_id,
        len(tok),
    )
    for text in [*ROUND_TRIP, "1234+5678=6912"]:
        ids = tok.encode(text, add_special_tokens=False)
        assert again.encode(text, add_special_tokens=False) == ids
        assert again(text)["input_ids"] == tok(text)["input_ids"] == ids


def test_qwen2_checkpoints_force_qwen2_tokenizer(tmp_path: Path) -> None:
    """Why qwen2 gets its own BPE style: naming the class is not enough for a qwen2 checkpoint."""
    task = ArithmeticTask(ADD)
    tok = bpe_tokenizer([p.prompt + task.solution(p) for p in task.train_problems()], 300)
    Qwen2Config(vocab_size=300).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    again = AutoTokenizer.from_pretrained(tmp_path)
    assert type(again).__name__ == "Qwen2Tokenizer"  # if this fails, transformers changed
    assert again.encode("1234+5678=") != tok.encode("1234+5678=")


# ----------------------------------------------------------------------------------- specs, data


def test_presets_are_about_one_million_parameters() -> None:
    assert {"llama-char-add", "qwen2-bpe-add", "gpt2-char-add"} <= set(TINY_PRESETS)
    archs = {"llama-char-add": "llama", "qwen2-bpe-add": "qwen2", "gpt2-char-add": "gpt2"}
    for name, arch in archs.items():
        spec = TINY_PRESETS[name]
        assert spec.arch == arch and spec.noise > 0
        tok = make_tokenizer(dataclasses.replace(spec, task=ADD))
        model = make_model(spec, tok)
        n = sum(p.numel() for p in model.parameters())
        assert 0.8e6 <= n <= 1.3e6, (name, n)
        assert model.config.eos_token_id == tok.eos_token_id
        assert model.config.pad_token_id == tok.pad_token_id
        assert model.config.bos_token_id is None


def test_spec_validation() -> None:
    with pytest.raises(ValueError, match="arch"):
        TinySpec(arch="mamba")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="skill_weights"):
        TinySpec(skill_weights=(1.0, 2.0))
    with pytest.raises(ValueError, match="noise"):
        TinySpec(noise=1.0)
    with pytest.raises(ValueError, match="qwen2 needs tokenizer bpe"):
        TinySpec(arch="qwen2", tokenizer="char")
    assert spec_hash(small_spec()) == spec_hash(small_spec())
    assert spec_hash(small_spec()) != spec_hash(small_spec(seed=8))


def test_wrong_answer_is_plausible_and_wrong() -> None:
    rng = random.Random(0)
    for gold in ["0", "7", "10", "99", "100", "198", "2082"]:
        for _ in range(200):
            wrong = wrong_answer(gold, rng)
            assert wrong != gold and wrong.isdigit()
            assert len(wrong) == 1 or wrong[0] != "0"
            assert abs(len(wrong) - len(gold)) <= 1


def test_noise_and_skill_weights_shape_the_data() -> None:
    spec = small_spec(
        task=ArithmeticConfig(skills=("add:2,2", "mul:2,1"), num_train=400, num_test=20),
        skill_weights=(1.0, 0.0),
        noise=0.4,
    )
    task = ArithmeticTask(spec.task)
    gold = {p.prompt: task.solution(p) for p in task.train_problems()}
    examples = tiny_mod._Examples(spec, task, random.Random(1))
    draws = [examples.draw() for _ in range(2000)]
    assert all("+" in prompt for prompt, _ in draws)  # weight 0: no multiplication
    wrong = sum(gold[prompt] != response for prompt, response in draws) / len(draws)
    assert 0.35 < wrong < 0.45


def test_scratchpad_noise_corrupts_only_the_result() -> None:
    spec = small_spec(task=dataclasses.replace(ADD, scratchpad=True), noise=0.99)
    task = ArithmeticTask(spec.task)
    gold = {p.prompt: (task.solution(p), p.gold) for p in task.train_problems()}
    examples = tiny_mod._Examples(spec, task, random.Random(2))
    for prompt, response in (examples.draw() for _ in range(50)):
        solution, answer = gold[prompt]
        stem = solution[: len(solution) - len(answer)]
        if "=" in stem:
            assert response.startswith(stem)


@pytest.mark.slow
def test_pretrain_lowers_loss_and_is_deterministic() -> None:
    spec = small_spec(pretrain_steps=30, batch_size=16)
    fingerprints, losses = [], []
    for _ in range(2):
        tok = make_tokenizer(spec)
        torch.manual_seed(spec.seed)
        model = make_model(spec, tok)
        before = model_fingerprint(model)
        stats = pretrain(model, tok, spec)
        assert set(stats) >= {"final_loss", "steps", "seconds"} and stats["steps"] == 30
        assert not model.training
        assert model_fingerprint(model) != before
        fingerprints.append(model_fingerprint(model))
        losses.append(stats["final_loss"])
    assert fingerprints[0] == fingerprints[1]
    assert losses[0] == losses[1] < 3.0  # below chance (log 99 = 4.6) after 30 steps


# ----------------------------------------------------------------------------------- build, cache


@pytest.mark.parametrize(
    ("arch", "tokenizer"), [("llama", "char"), ("qwen2", "bpe"), ("gpt2", "char")]
)
def test_build_and_reload_identical(arch: str, tokenizer: str, cache: Path) -> None:
    spec = small_spec(arch, tokenizer)
    path = build_tiny(spec, cache_dir=cache)
    assert path.parent == cache / "tiny" and path.name.endswith(spec_hash(spec))
    record = json.loads((path / "tiny_spec.json").read_text())
    assert record["cache_key"] == spec_hash(spec)
    assert record["spec"]["arch"] == arch and record["spec"]["task"]["skills"] == ["add:2,2"]

    model, tok = load_model_and_tokenizer(ModelConfig(path=str(path)))
    assert (
        type(model).__name__
        == {
            "llama": "LlamaForCausalLM",
            "qwen2": "Qwen2ForCausalLM",
            "gpt2": "GPT2LMHeadModel",
        }[arch]
    )
    assert not model.training
    assert model_fingerprint(model) == record["fingerprint"]  # identical weights

    # Rebuilding in memory from the spec gives the same model, so the same logits.
    fresh_tok = make_tokenizer(spec)
    torch.manual_seed(spec.seed)
    fresh = make_model(spec, fresh_tok)
    pretrain(fresh, fresh_tok, spec)
    assert model_fingerprint(fresh) == record["fingerprint"]
    assert torch.equal(_logits(model, tok, "12+34="), _logits(fresh, fresh_tok, "12+34="))
    assert tok.eos_token_id == fresh_tok.eos_token_id and tok.pad_token_id == fresh_tok.pad_token_id


def test_cache_is_reused_and_default_dir_honours_env(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = []
    real = tiny_mod._build_into
    monkeypatch.setattr(tiny_mod, "_build_into", lambda *a: (calls.append(1), real(*a)))
    spec = small_spec(seed=11)
    first = build_tiny(spec)  # default cache dir: $GRAFT_CACHE
    assert first.parent == cache / "tiny"
    mtime = (first / "tiny_spec.json").stat().st_mtime_ns
    assert build_tiny(spec) == first
    assert build_tiny(spec, cache_dir=cache) == first
    assert len(calls) == 1
    assert (first / "tiny_spec.json").stat().st_mtime_ns == mtime
    assert not [p for p in first.parent.iterdir() if p.is_dir() and p.name.startswith(".")]


def test_concurrent_builders_build_once(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    real = tiny_mod._build_into
    monkeypatch.setattr(tiny_mod, "_build_into", lambda *a: (calls.append(1), real(*a)))
    spec = small_spec(seed=12)
    results: list[Path] = []
    threads = [
        threading.Thread(target=lambda: results.append(build_tiny(spec, cache_dir=cache)))
        for _ in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 3 and len(set(results)) == 1 and len(calls) == 1


def test_lost_rename_race_reuses_the_winner(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = small_spec(seed=13)
    final = cache / "tiny" / f"custom-llama-char-{spec_hash(spec)}"
    real = tiny_mod._build_into

    def build_and_lose(out: Path, *rest: object) -> None:
        real(out, *rest)
        shutil.copytree(out, final)  # another process (no lock: e.g. another host) won

    monkeypatch.setattr(tiny_mod, "_build_into", build_and_lose)
    assert build_tiny(spec, cache_dir=cache) == final
    assert sorted(p.name for p in final.parent.iterdir() if p.is_dir()) == [final.name]


def test_tiny_path_loads_through_the_cache(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(TINY_PRESETS, "test-small", small_spec("qwen2", "bpe"))
    model, tok = load_model_and_tokenizer(ModelConfig(path="tiny:test-small"), cache_dir=cache)
    assert type(model).__name__ == "Qwen2ForCausalLM"
    assert (cache / "tiny").is_dir()
    built = next((cache / "tiny").glob("test-small-*"))
    # A separate tokenizer source and another stored dtype (`dtype` alone is the compute dtype:
    # the weights stay float32 masters).
    cfg = ModelConfig(path=str(built), tokenizer=str(built), dtype="bfloat16")
    assert next(load_model_and_tokenizer(cfg)[0].parameters()).dtype == torch.float32
    cfg = ModelConfig(
        path=str(built), tokenizer=str(built), dtype="bfloat16", param_dtype="bfloat16"
    )
    model16, tok16 = load_model_and_tokenizer(cfg)
    assert next(model16.parameters()).dtype == torch.bfloat16
    assert tok16.encode("12+34=") == tok.encode("12+34=")


# ----------------------------------------------------------------------------------- errors


def test_missing_local_path(cache: Path) -> None:
    with pytest.raises(ModelLoadError) as err:
        load_model_and_tokenizer(ModelConfig(path="/no/such/dir"), key="models.0")
    msg = str(err.value)
    assert msg == "models.0.path: cannot load model from '/no/such/dir': no such file or directory"
    with pytest.raises(ModelLoadError, match=r"models\.1\.path: .*'\./missing\.gguf'"):
        load_model_and_tokenizer(ModelConfig(path="./missing.gguf"), key="models.1")


def test_bad_preset_name(cache: Path) -> None:
    with pytest.raises(ModelLoadError, match=r"model\.path: .*'tiny:nope'.*unknown tiny preset"):
        load_model_and_tokenizer(ModelConfig(path="tiny:nope"))
    with pytest.raises(ValueError, match=r"known: .*llama-char-add"):
        build_tiny("nope")


def test_directory_without_model(cache: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ModelLoadError, match=rf"model\.path: .*'{empty}'.*no config\.json") as err:
        load_model_and_tokenizer(ModelConfig(path=str(empty)))
    assert "\n" not in str(err.value)
    text_file = tmp_path / "weights.txt"
    text_file.write_text("x")
    with pytest.raises(ModelLoadError, match=r"not \.gguf"):
        load_model_and_tokenizer(ModelConfig(path=str(text_file)))


@pytest.mark.slow
def test_bad_tokenizer_source(cache: Path, tmp_path: Path) -> None:
    path = build_tiny(small_spec(seed=14), cache_dir=cache)
    with pytest.raises(ModelLoadError, match=r"model\.tokenizer: .*'/no/tok'"):
        load_model_and_tokenizer(ModelConfig(path=str(path), tokenizer="/no/tok"))
    weights_only = tmp_path / "weights_only"
    shutil.copytree(path, weights_only)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (weights_only / name).unlink()
    with pytest.raises(ModelLoadError, match=r"model\.path: cannot load tokenizer .*no tokenizer"):
        load_model_and_tokenizer(ModelConfig(path=str(weights_only)))
    # A tokenizer with more tokens than the model has embedding rows is refused.
    bpe = build_tiny(small_spec(tokenizer="bpe", seed=14), cache_dir=cache)
    with pytest.raises(ModelLoadError, match=r"model\.tokenizer: .*embedding has only 99 rows"):
        load_model_and_tokenizer(ModelConfig(path=str(path), tokenizer=str(bpe)))


def test_hub_name_offline_is_distinguished(cache: Path) -> None:
    with pytest.raises(ModelLoadError) as err:
        load_model_and_tokenizer(ModelConfig(path="no-such-org/no-such-model"), key="models.0")
    msg = str(err.value)
    assert msg.startswith("models.0.path: cannot load model from 'no-such-org/no-such-model': ")
    assert "HF_HUB_OFFLINE" in msg and "no such file" not in msg and "\n" not in msg


def test_pad_falls_back_to_eos(cache: Path, tmp_path: Path) -> None:
    path = build_tiny(small_spec(seed=15), cache_dir=cache)
    copy = tmp_path / "nopad"
    shutil.copytree(path, copy)
    tok_cfg = json.loads((copy / "tokenizer_config.json").read_text())
    del tok_cfg["pad_token"]
    (copy / "tokenizer_config.json").write_text(json.dumps(tok_cfg))
    assert AutoTokenizer.from_pretrained(copy).pad_token is None
    _, tok = load_model_and_tokenizer(ModelConfig(path=str(copy)))
    assert tok.pad_token == tok.eos_token == "<eos>"


def test_fingerprint_tracks_weights() -> None:
    spec = small_spec()
    model = make_model(spec, make_tokenizer(spec))
    a = model_fingerprint(model)
    assert a == model_fingerprint(model) and len(a) == 16
    with torch.no_grad():
        next(model.parameters())[0, 0] += 1e-3
    assert model_fingerprint(model) != a


# ----------------------------------------------------------------------------------- accuracy


@torch.no_grad()
def greedy_accuracy(model, tok, problems, template: str = "{prompt}", max_new: int = 8) -> float:
    """Batched greedy decoding (left-padded, no KV cache) scored by exact match with the gold."""
    prompts = [template.replace("{prompt}", p.prompt) for p in problems]
    seqs = [tok.encode(text, add_special_tokens=False) for text in prompts]
    outs: list[list[int]] = [[] for _ in problems]
    live = list(range(len(problems)))
    for _ in range(max_new):
        width = max(len(seqs[i]) for i in live)
        ids = torch.full((len(live), width), tok.pad_token_id)
        mask = torch.zeros_like(ids)
        for row, i in enumerate(live):
            ids[row, width - len(seqs[i]) :] = torch.tensor(seqs[i])
            mask[row, width - len(seqs[i]) :] = 1
        pos = (mask.cumsum(1) - 1).clamp(min=0)
        logits = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits[:, -1]
        still = []
        for row, i in enumerate(live):
            token = int(logits[row].argmax())
            if token != tok.eos_token_id:
                outs[i].append(token)
                seqs[i].append(token)
                still.append(i)
        live = still
        if not live:
            break
    hits = sum(tok.decode(o) == p.gold for o, p in zip(outs, problems, strict=True))
    return hits / len(problems)


@pytest.mark.slow
def test_noisy_preset_is_partially_accurate(tmp_path: Path) -> None:
    spec = TINY_PRESETS["llama-char-add"]
    cfg = ModelConfig(path="tiny:llama-char-add")
    model, tok = load_model_and_tokenizer(cfg, cache_dir=tmp_path)
    problems = ArithmeticTask(spec.task).test_problems()[:50]
    accuracy = greedy_accuracy(model, tok, problems, spec.prompt_template)
    assert 0.1 <= accuracy <= 0.95, accuracy
