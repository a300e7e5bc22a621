"""Tokenizers of the tiny models, built locally: one token per character, or a byte-level BPE
trained on the task's own text. Nothing is downloaded."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Literal

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

PAD, EOS, UNK = "<pad>", "<eos>", "<unk>"
MAX_POSITIONS = 256
CHAR_ALPHABET = (*(chr(c) for c in range(32, 127)), "\n")
"""Printable ASCII and newline: one token each in the char tokenizer."""
_TOKENIZER_KW = {"model_max_length": MAX_POSITIONS, "padding_side": "right"}


def _wrap(tok: Tokenizer, *, unk: bool) -> PreTrainedTokenizerFast:
    # The saved tokenizer_config.json names the class (TokenizersBackend in transformers 5), so
    # AutoTokenizer reloads exactly this tokenizer beside a llama or gpt2 config instead of the
    # architecture's default class. qwen2 configs override the name (see bpe_tokenizer).
    unk_token = UNK if unk else None
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token=EOS, pad_token=PAD, unk_token=unk_token, **_TOKENIZER_KW
    )


def char_tokenizer() -> PreTrainedTokenizerFast:
    """One token per printable ASCII character or newline; anything else becomes `<unk>`."""
    specials = [PAD, EOS, UNK]
    vocab = {t: i for i, t in enumerate([*specials, *CHAR_ALPHABET])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token=UNK))
    # Every character is its own pre-token; Fuse joins decoded tokens without separators.
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tok.decoder = decoders.Fuse()
    tok.add_special_tokens(specials)
    return _wrap(tok, unk=True)


def _train_bpe(tok: Tokenizer, texts: Sequence[str], vocab_size: int) -> Tokenizer:
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[PAD, EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def bpe_tokenizer(
    texts: Sequence[str], vocab_size: int, *, style: Literal["gpt2", "qwen2"] = "gpt2"
) -> PreTrainedTokenizerFast:
    """Byte-level BPE trained on `texts` (any text encodes); `<pad>` and `<eos>` are ids 0 and 1.

    `gpt2` style splits text GPT-2's way (digit runs stay together, so merges join digits) and
    is saved as a generic tokenizer; a GGUF file can describe it as a `gpt2` tokenizer.
    `qwen2` style is a real `Qwen2Tokenizer` (NFC, Qwen2's pre-tokenizer, which splits every
    digit): transformers 5 loads the tokenizer of any qwen2 checkpoint as `Qwen2Tokenizer`
    whatever class its files name, rebuilding the pipeline from vocab and merges, so a qwen2
    model only round-trips through AutoTokenizer with a tokenizer of exactly that shape.
    Qwen2's digit splitting leaves few merges to learn from arithmetic text.
    """
    tok = Tokenizer(models.BPE())
    tok.decoder = decoders.ByteLevel()
    if style == "gpt2":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        return _wrap(_train_bpe(tok, texts, vocab_size), unk=False)
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX, Qwen2Tokenizer

    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    trained = json.loads(_train_bpe(tok, texts, vocab_size).to_str())["model"]
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in trained["merges"]]
    specials = {"unk_token": None, "bos_token": None, "eos_token": EOS, "pad_token": PAD}
    return Qwen2Tokenizer(vocab=trained["vocab"], merges=merges, **specials, **_TOKENIZER_KW)
