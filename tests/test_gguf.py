"""GGUF checkpoints: a tiny Llama written as llama.cpp writes it (F32, and Q8_0 projections)
loads through `models.N.path: file.gguf` with the logits of the model it came from."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import transformers
from packaging.version import Version

from graft.config import ModelConfig
from graft.models import build_tiny, load_model_and_tokenizer
from test_models import ROUND_TRIP, _logits, cache, small_spec  # noqa: F401  (cache: a fixture)

# ----------------------------------------------------------------------------------- GGUF


def _permute_for_gguf(w: torch.Tensor, heads: int) -> torch.Tensor:
    """llama.cpp stores q/k rows interleaved per rotary pair; transformers undoes this on load."""
    pairs = w.reshape(heads, 2, w.shape[0] // heads // 2, w.shape[1])
    return pairs.transpose(1, 2).reshape(w.shape)


def write_llama_gguf(model, tok, path: Path, *, q8: bool = False) -> None:
    """Write a Llama model with a byte-level BPE tokenizer as a GGUF file: F32 tensors, or with
    `q8` its projection matrices quantized to Q8_0 (as llama.cpp's q8_0 files have them).

    Skips (every test that loads such a file calls it first) under transformers 5.17, the lowest
    version graft supports (`make test-min`), whose GGUF loader cannot read it back: its Llama
    tokenizer converter takes the bos token for the eos, and fails on a file without a bos token
    (this one). Fixed in 5.18, which the `gguf` extra asks for."""
    gguf = pytest.importorskip("gguf")
    if Version(transformers.__version__) < Version("5.18"):
        pytest.skip("transformers < 5.18 cannot load a Llama .gguf tokenizer (bos/eos bug)")
    c = model.config
    w = gguf.GGUFWriter(str(path), "llama")

    def add(name: str, t: torch.Tensor) -> None:
        array = t.numpy()
        if q8 and array.ndim == 2 and name != "token_embd.weight":
            kind = gguf.GGMLQuantizationType.Q8_0
            w.add_tensor(name, gguf.quants.quantize(array, kind), raw_dtype=kind)
        else:
            w.add_tensor(name, array)

    w.add_name("graft-tiny")
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_block_count(c.num_hidden_layers)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_attention_heads)
    w.add_head_count_kv(c.num_key_value_heads)
    w.add_rope_dimension_count(c.hidden_size // c.num_attention_heads)
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    w.add_rope_freq_base(c.rope_parameters["rope_theta"])
    w.add_vocab_size(c.vocab_size)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0 if q8 else gguf.LlamaFileType.ALL_F32)
    spec = json.loads(tok.backend_tokenizer.to_str())
    vocab = spec["model"]["vocab"]
    tokens = sorted(vocab, key=vocab.get)
    specials = {t["content"] for t in spec["added_tokens"] if t["special"]}
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types(
        [gguf.TokenType.CONTROL if t in specials else gguf.TokenType.NORMAL for t in tokens]
    )
    w.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in spec["model"]["merges"]])
    w.add_eos_token_id(tok.eos_token_id)
    w.add_pad_token_id(tok.pad_token_id)
    w.add_add_bos_token(False)
    sd = {k: v.detach().float() for k, v in model.state_dict().items()}
    add("token_embd.weight", sd["model.embed_tokens.weight"])
    names = {
        "attn_norm": "input_layernorm",
        "attn_v": "self_attn.v_proj",
        "attn_output": "self_attn.o_proj",
        "ffn_norm": "post_attention_layernorm",
        "ffn_gate": "mlp.gate_proj",
        "ffn_up": "mlp.up_proj",
        "ffn_down": "mlp.down_proj",
    }
    for i in range(c.num_hidden_layers):
        p = f"model.layers.{i}."
        q = _permute_for_gguf(sd[p + "self_attn.q_proj.weight"], c.num_attention_heads)
        k = _permute_for_gguf(sd[p + "self_attn.k_proj.weight"], c.num_key_value_heads)
        add(f"blk.{i}.attn_q.weight", q)
        add(f"blk.{i}.attn_k.weight", k)
        for gguf_name, hf_name in names.items():
            add(f"blk.{i}.{gguf_name}.weight", sd[f"{p}{hf_name}.weight"])
    add("output_norm.weight", sd["model.norm.weight"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_gguf_file_loads_with_same_logits(cache: Path, tmp_path: Path) -> None:  # noqa: F811
    pytest.importorskip("gguf")
    path = build_tiny(small_spec("llama", "bpe", pretrain_steps=10), cache_dir=cache)
    model, tok = load_model_and_tokenizer(ModelConfig(path=str(path)))
    gguf_path = tmp_path / "gguf" / "tiny-f32.gguf"
    gguf_path.parent.mkdir()
    write_llama_gguf(model, tok, gguf_path)

    loaded, gtok = load_model_and_tokenizer(ModelConfig(path=str(gguf_path)), key="models.0")
    assert type(loaded).__name__ == "LlamaForCausalLM" and not loaded.training
    assert (gtok.eos_token_id, gtok.pad_token_id, gtok.bos_token_id) == (1, 0, None)
    for text in [*ROUND_TRIP, "unicode é"]:
        ids = tok.encode(text, add_special_tokens=False)
        assert gtok.encode(text, add_special_tokens=False) == ids
        assert gtok(text)["input_ids"] == ids  # no BOS added
        assert gtok.decode(ids) == text
    for text in ["12+34=", "99+99=198"]:
        assert torch.allclose(_logits(loaded, gtok, text), _logits(model, tok, text), atol=1e-5)
    stored = ModelConfig(path=str(gguf_path), dtype="bfloat16", param_dtype="bfloat16")
    half, _ = load_model_and_tokenizer(stored)  # dequantized to the stored dtype
    assert next(half.parameters()).dtype == torch.bfloat16

    # A quantized file is dequantized on load: close to, not equal to, the original.
    q8_path = gguf_path.with_name("tiny-q8_0.gguf")
    write_llama_gguf(model, tok, q8_path, q8=True)
    q8, _ = load_model_and_tokenizer(ModelConfig(path=str(q8_path)))
    assert next(q8.parameters()).dtype == torch.float32
    diff = (_logits(q8, gtok, "12+34=") - _logits(model, tok, "12+34=")).abs().max()
    assert 0 < diff < 0.05
