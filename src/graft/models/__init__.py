"""Models: loading policies from a `ModelConfig`, and tiny CPU models built locally."""

from graft.models.common import model_fingerprint, quiet_transformers
from graft.models.load import ModelLoadError, load_model_and_tokenizer
from graft.models.tiny import (
    TINY_PRESETS,
    TinySpec,
    bpe_tokenizer,
    build_tiny,
    char_tokenizer,
    default_cache_dir,
    make_model,
    make_tokenizer,
    pretrain,
    spec_hash,
    wrong_answer,
)

__all__ = [
    "TINY_PRESETS",
    "ModelLoadError",
    "TinySpec",
    "bpe_tokenizer",
    "build_tiny",
    "char_tokenizer",
    "default_cache_dir",
    "load_model_and_tokenizer",
    "make_model",
    "make_tokenizer",
    "model_fingerprint",
    "pretrain",
    "quiet_transformers",
    "spec_hash",
    "wrong_answer",
]
