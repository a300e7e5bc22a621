"""Loading a policy's model and tokenizer from a `ModelConfig`.

`cfg.path` may be `tiny:<preset>` (built locally by `graft.models.tiny`), a local checkpoint
directory (a LoRA policy's checkpoint too: its base model with the adapter merged in), a local
`.gguf` file (dequantized to `cfg.param_dtype`), or a Hugging Face hub name (needs the network or
the local HF cache). Remote code is never trusted. Every failure is a `ModelLoadError`
whose one-line message names the config key, the path and the cause.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

import torch
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from graft.config import ModelConfig
from graft.errors import ModelLoadError
from graft.extras import install_hint
from graft.models.common import quiet_transformers
from graft.models.precision import DTYPES

__all__ = ["ModelLoadError", "load_model_and_tokenizer"]

_HUB_NAME = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model")


@dataclass(frozen=True)
class _Source:
    kind: Literal["local", "gguf", "hub"]
    location: str
    """Directory (local, gguf) or hub name."""
    gguf_file: str | None = None
    shown: str = ""
    """The path as the config spells it, for messages."""


def _offline() -> bool:
    # Read the environment at call time (the hub library reads it once, at import).
    flags = (os.environ.get(v, "") for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))
    return any(f.strip().lower() in ("1", "true", "yes", "on") for f in flags)


def looks_local(path: str) -> bool:
    if path.startswith(("/", "./", "../", "~", ".\\")) or path in (".", ".."):
        return True
    return path.endswith(".gguf") or path.count("/") > 1 or "\\" in path


def _resolve(path: str, key: str, cache_dir: Path | None) -> _Source:
    """Decide what kind of source `path` is, checking local paths before any loader sees them."""
    where = (
        f"{key}: cannot load {'tokenizer' if key.endswith('tokenizer') else 'model'} from {path!r}"
    )
    if path.startswith("tiny:"):
        from graft.models.tiny import build_tiny  # only for tiny: paths

        try:
            built = build_tiny(path, cache_dir=cache_dir)
        except ValueError as e:
            raise ModelLoadError(f"{where}: {e}") from None
        return _Source("local", str(built), shown=path)
    local = Path(path).expanduser()
    if local.exists() or looks_local(path):
        if not local.exists():
            raise ModelLoadError(f"{where}: no such file or directory")
        if local.is_file():
            if local.suffix.lower() != ".gguf":
                raise ModelLoadError(
                    f"{where}: a file that is not .gguf (give a checkpoint directory or .gguf)"
                )
            return _Source("gguf", str(local.parent), gguf_file=local.name, shown=path)
        return _Source("local", str(local), shown=path)
    if not _HUB_NAME.match(path):
        raise ModelLoadError(f"{where}: not a local path, a tiny: preset or a Hugging Face name")
    return _Source("hub", path, shown=path)


def _explain(err: BaseException, source: _Source, revision: str) -> str:
    """One-line cause of a failed from_pretrained call, as specific as the error allows."""
    chain: list[BaseException] = []
    e: BaseException | None = err
    while e is not None and len(chain) < 8:
        chain.append(e)
        e = e.__cause__ or e.__context__
    names = {type(x).__name__ for x in chain}
    if source.kind == "hub":
        if "RevisionNotFoundError" in names:
            return f"revision {revision!r} not found on the Hugging Face hub"
        if "GatedRepoError" in names:
            return "gated repository on the Hugging Face hub (accept its terms and log in)"
        if "RepositoryNotFoundError" in names:
            return "no such model on the Hugging Face hub (or it is private)"
        if _offline():
            return "no local path of that name, and not in the Hugging Face cache (HF_HUB_OFFLINE)"
        if names & {"LocalEntryNotFoundError", "ConnectionError", "ConnectTimeout", "ConnectError"}:
            return "no local path of that name, and the Hugging Face hub cannot be reached"
    text = " ".join(str(err).split()) or type(err).__name__
    return text if len(text) <= 240 else text[:237] + "..."


@contextlib.contextmanager
def _no_gguf_progress() -> Iterator[None]:
    # transformers' GGUF reader draws a plain tqdm bar that its progress-bar switch does not reach.
    import transformers.modeling_gguf_pytorch_utils as gguf_utils

    original = getattr(gguf_utils, "tqdm", None)
    if original is None:
        yield
        return
    gguf_utils.tqdm = lambda it, *a, **kw: it
    try:
        yield
    finally:
        gguf_utils.tqdm = original


def transformers_version() -> str:
    import transformers

    return transformers.__version__


def _require_gguf_transformers(where: str) -> None:
    """transformers 5.17's GGUF tokenizer converter gives a Llama file its bos token as eos (and
    fails on a file without bos); 5.18 reads it right."""
    from packaging.version import Version

    installed = transformers_version()
    if Version(installed).release < (5, 18):
        raise ModelLoadError(
            f"{where}: loading a .gguf file needs transformers >= 5.18 (installed {installed} "
            f"mis-reads its eos token); {install_hint('gguf')}"
        )


def _load_gguf_model(source: _Source, dtype: torch.dtype) -> PreTrainedModel:
    """A GGUF checkpoint dequantized to `dtype`, as a plain (trainable, saveable) model.

    Not through from_pretrained(gguf_file=...): that path insists on `accelerate`, and the model
    it returns carries a GGUF quantizer (and `config.quantization_config`), so save_pretrained
    refuses it ("quantized with gguf and is not serializable") although its weights are plain
    float tensors. Read the config and the dequantized tensors with transformers' GGUF helpers
    and load them into a model built from that config.
    """
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    kwargs = {"gguf_file": source.gguf_file, "trust_remote_code": False}

    config = AutoConfig.from_pretrained(source.location, **kwargs)
    model = AutoModelForCausalLM.from_config(config, dtype=dtype, trust_remote_code=False)
    path = os.path.join(source.location, source.gguf_file or "")
    with _no_gguf_progress():
        tensors = load_gguf_checkpoint(path, return_tensors=True, model_to_load=model)["tensors"]
    missing, unexpected = model.load_state_dict(
        {k: v.to(dtype) for k, v in tensors.items()}, strict=False
    )
    tied = {k for k in missing if getattr(config, "tie_word_embeddings", False) and "lm_head" in k}
    if set(missing) - tied or unexpected:
        raise ValueError(
            f"GGUF tensors do not match the {type(model).__name__} built from its metadata "
            f"(missing {sorted(set(missing) - tied)[:3]}, unexpected {sorted(unexpected)[:3]})"
        )
    model.tie_weights()
    return model


def _load_merged_adapter(
    source: _Source, cfg: ModelConfig, key: str, cache_dir: Path | None
) -> PreTrainedModel:
    """A LoRA checkpoint directory: the base model it names, with the adapter merged in."""
    from graft.models.lora import LoRAError, adapter_base, merge_adapter

    where = f"{key}.path: cannot load model from {source.shown!r}"
    try:
        base_path, revision = adapter_base(Path(source.location))
    except LoRAError as e:
        raise ModelLoadError(f"{where}: {e}") from None
    base_cfg = replace(cfg, path=base_path, revision=revision)
    try:
        base = _load_model(_resolve(base_path, f"{key}.path", cache_dir), base_cfg, key, cache_dir)
    except ModelLoadError as e:
        raise ModelLoadError(f"{where}: its adapter's base model does not load: {e}") from None
    try:
        return merge_adapter(base, Path(source.location))
    except Exception as e:
        raise ModelLoadError(f"{where}: {_explain(e, source, '')}") from e


def _load_model(
    source: _Source, cfg: ModelConfig, key: str, cache_dir: Path | None = None
) -> PreTrainedModel:
    from graft.models.lora import is_adapter_dir

    dtype = DTYPES[cfg.param_dtype]  # the stored weights; forward passes autocast to cfg.dtype
    where = f"{key}.path: cannot load model from {source.shown!r}"
    if source.kind == "local" and is_adapter_dir(Path(source.location)):
        return _load_merged_adapter(source, cfg, key, cache_dir)
    if source.kind == "local" and not (Path(source.location) / "config.json").is_file():
        raise ModelLoadError(f"{where}: no config.json in the directory (not a model checkpoint)")
    if source.kind == "gguf":
        _require_gguf_transformers(where)
    try:
        if source.kind == "gguf":
            return _load_gguf_model(source, dtype)
        hub = source.kind == "hub"
        return AutoModelForCausalLM.from_pretrained(
            source.location,
            dtype=dtype,
            trust_remote_code=False,
            revision=(cfg.revision or None) if hub else None,
            local_files_only=not hub or _offline(),
        )
    except Exception as e:
        raise ModelLoadError(f"{where}: {_explain(e, source, cfg.revision)}") from e


def _load_tokenizer(source: _Source, cfg: ModelConfig, key: str) -> PreTrainedTokenizerBase:
    field = f"{key}.tokenizer" if cfg.tokenizer else f"{key}.path"
    where = f"{field}: cannot load tokenizer from {source.shown!r}"
    if source.kind == "local" and not any(
        (Path(source.location) / f).is_file() for f in _TOKENIZER_FILES
    ):
        raise ModelLoadError(f"{where}: no tokenizer files in the directory")
    hub = source.kind == "hub"
    try:
        return AutoTokenizer.from_pretrained(
            source.location,
            gguf_file=source.gguf_file,
            trust_remote_code=False,
            revision=(cfg.revision or None) if hub and not cfg.tokenizer else None,
            local_files_only=not hub or _offline(),
        )
    except Exception as e:
        raise ModelLoadError(f"{where}: {_explain(e, source, cfg.revision)}") from e


def _settle_special_tokens(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, key: str
) -> None:
    """Ensure eos (from the model's generation config if the tokenizer lacks one) and pad."""
    if tokenizer.eos_token_id is None:
        gen_eos = getattr(model.generation_config, "eos_token_id", None)
        gen_eos = gen_eos[0] if isinstance(gen_eos, list) and gen_eos else gen_eos
        if isinstance(gen_eos, int):
            tokenizer.eos_token = tokenizer.convert_ids_to_tokens(gen_eos)
    if tokenizer.eos_token_id is None:
        raise ModelLoadError(f"{key}.path: tokenizer of {key!r} has no eos token")
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    for conf in (model.config, model.generation_config):
        if getattr(conf, "pad_token_id", None) is None:
            conf.pad_token_id = tokenizer.pad_token_id
    # Compare the base vocabulary and the ids we use, not len(tokenizer): transformers' GGUF
    # tokenizer builder appends GPT-2's `<|endoftext|>` when a byte-level vocabulary lacks it,
    # one id past the embedding, which is harmless unless a prompt spells it out.
    rows = model.get_input_embeddings().num_embeddings
    used = {tokenizer.eos_token_id, tokenizer.pad_token_id}
    if tokenizer.vocab_size > rows or max(used) >= rows:
        raise ModelLoadError(
            f"{key}.tokenizer: tokenizer has {tokenizer.vocab_size} tokens (eos/pad ids "
            f"{sorted(used)}) but the model's embedding has only {rows} rows (wrong tokenizer?)"
        )


def load_model_and_tokenizer(
    cfg: ModelConfig,
    *,
    cache_dir: Path | None = None,
    device: str = "cpu",
    key: str = "model",
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Model (eval mode, weights in cfg.param_dtype, on `device`) and tokenizer (with eos and pad)
    for one policy.

    `cache_dir` is where `tiny:` presets are built (default `$GRAFT_CACHE` or ~/.cache/graft);
    `key` is the config key used in error messages, e.g. "models.0".
    """
    quiet_transformers()
    for field in ("dtype", "param_dtype"):
        if getattr(cfg, field) not in DTYPES:
            raise ModelLoadError(
                f"{key}.{field}: unknown dtype {getattr(cfg, field)!r}; use one of {list(DTYPES)}"
            )
    source = _resolve(cfg.path, f"{key}.path", cache_dir)
    tok_source = _resolve(cfg.tokenizer, f"{key}.tokenizer", cache_dir) if cfg.tokenizer else source
    model = _load_model(source, cfg, key, cache_dir)
    tokenizer = _load_tokenizer(tok_source, cfg, key)
    _settle_special_tokens(model, tokenizer, key)
    try:
        model.to(device)
    except Exception as e:
        raise ModelLoadError(
            f"{key}.path: cannot move model {cfg.path!r} to {device!r}: {e}"
        ) from e
    model.eval()  # no dropout: rollouts and the RL update both run the deterministic network
    return model, tokenizer


def plain_base_path(cfg: ModelConfig, *, cache_dir: Path | None = None) -> str:
    """A name or path of `cfg`'s model that transformers' `from_pretrained` resolves by itself
    (what a PEFT adapter names as its base): a hub name as it is, a local directory as an
    absolute path, a `tiny:` preset as its built directory, and a `.gguf` file as a plain copy
    of its dequantized weights, saved once under the cache (`<cache>/gguf/<sha256 prefix>`)."""
    source = _resolve(cfg.path, "base", cache_dir)
    if source.kind == "hub":
        return source.location
    if source.kind == "local":
        return str(Path(source.location).resolve())
    from graft.models.tiny import default_cache_dir

    gguf = Path(source.location) / (source.gguf_file or "")
    digest = hashlib.sha256(gguf.read_bytes()).hexdigest()[:16]
    out = (cache_dir or default_cache_dir()) / "gguf" / f"{gguf.stem}-{digest}"
    if not (out / "config.json").is_file():
        plain = replace(cfg, lora=type(cfg.lora)(), dtype="float32", param_dtype="float32")
        model, tokenizer = load_model_and_tokenizer(plain, cache_dir=cache_dir)
        tmp = out.with_name(out.name + ".tmp")
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        tmp.replace(out)
    return str(out.resolve())
