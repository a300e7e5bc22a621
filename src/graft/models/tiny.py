"""Tiny (~1M parameter) causal LMs pre-trained on the arithmetic task, for CPU work and tests.

A `TinySpec` fixes everything about such a model: architecture and size, tokenizer, the task it is
pre-trained on and how well it learns it. `build_tiny` turns a spec (or a preset name from
`TINY_PRESETS`) into a directory that `AutoModelForCausalLM` / `AutoTokenizer` load like any
Hugging Face checkpoint, built once per spec and library versions and cached.

Pre-training is plain supervised learning on `template(prompt) + response + EOS`, the loss on the
response and EOS only. After a clean start, `noise` replaces that fraction of responses by a
plausible wrong answer, drawn afresh each time, so the model's sampling distribution keeps roughly
that much mass on wrong answers (partial pass rates are what RL learns from) while greedy decoding
mostly follows the skill it has learnt; `pretrain_steps` controls how well it has learnt it.

Nothing here downloads anything: tokenizers are built from the task text with `tokenizers`, and
models are initialised from configs.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import random
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import tokenizers
import torch
import transformers
from tqdm.auto import tqdm
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedModel,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
)

from graft.config import ArithmeticConfig
from graft.models.common import model_fingerprint, quiet_transformers
from graft.models.tiny_shipped import copy_shipped, shipped_entry
from graft.models.tiny_specs import MUL_SKILLS, TINY_PRESETS, TinySpec
from graft.models.tiny_tokenizers import MAX_POSITIONS, bpe_tokenizer, char_tokenizer
from graft.tasks.arithmetic import ArithmeticTask, wrong_answer
from graft.types import Problem

if TYPE_CHECKING:
    from graft.tasks.list_functions import ListFunctionsTask

    TinyTask = ArithmeticTask | ListFunctionsTask

__all__ = [
    "MUL_SKILLS",
    "TINY_PRESETS",
    "TinySpec",
    "bpe_tokenizer",
    "build_tiny",
    "char_tokenizer",
    "default_cache_dir",
    "make_model",
    "make_tokenizer",
    "pretrain",
    "spec_hash",
    "wrong_answer",
]

BUILD_FORMAT = 1
"""Bump when a change here alters what gets built, so old cache entries are not reused."""
SPEC_FILE = "tiny_spec.json"


# ----------------------------------------------------------------------------------- tokenizers


def tiny_task(spec: TinySpec) -> TinyTask:
    """The task a spec pre-trains on: arithmetic, or list functions (a code task)."""
    if isinstance(spec.task, ArithmeticConfig):
        return ArithmeticTask(spec.task)
    from graft.tasks.list_functions import ListFunctionsTask

    return ListFunctionsTask(spec.task, runs_code=False)


def _apply_template(template: str, prompt: str) -> str:
    # str.replace rather than str.format: a template may contain other braces (JSON, LaTeX).
    return template.replace("{prompt}", prompt)


def make_tokenizer(spec: TinySpec, task: TinyTask | None = None) -> PreTrainedTokenizerFast:
    """The spec's tokenizer; BPE is trained on the task's templated prompts + solutions."""
    if spec.tokenizer == "char":
        return char_tokenizer()
    task = task or tiny_task(spec)
    texts = [
        _apply_template(spec.prompt_template, p.prompt) + task.solution(p)
        for p in task.train_problems()
    ]
    style = "qwen2" if spec.arch == "qwen2" else "gpt2"
    return bpe_tokenizer(texts, spec.bpe_vocab_size, style=style)


# ----------------------------------------------------------------------------------- models


def make_model(spec: TinySpec, tokenizer: PreTrainedTokenizerFast) -> PreTrainedModel:
    """A freshly initialised model (the caller seeds torch) sized by the spec."""
    vocab = len(tokenizer)
    ids = {"eos_token_id": tokenizer.eos_token_id, "pad_token_id": tokenizer.pad_token_id}
    ids |= {"bos_token_id": None}  # no BOS: prompts start with their first character
    if spec.arch == "gpt2":
        config = GPT2Config(
            vocab_size=vocab,
            n_positions=MAX_POSITIONS,
            n_embd=spec.hidden,
            n_layer=spec.layers,
            n_head=spec.heads,
            n_inner=spec.intermediate,
            **dict.fromkeys(("resid_pdrop", "embd_pdrop", "attn_pdrop"), 0.0),
            tie_word_embeddings=True,
            **ids,
        )
        return GPT2LMHeadModel(config)
    common = dict(
        vocab_size=vocab,
        hidden_size=spec.hidden,
        num_hidden_layers=spec.layers,
        num_attention_heads=spec.heads,
        num_key_value_heads=spec.kv_heads,
        intermediate_size=spec.intermediate,
        max_position_embeddings=MAX_POSITIONS,
        attention_dropout=0.0,
        tie_word_embeddings=True,
        **ids,
    )
    if spec.arch == "qwen2":
        return Qwen2ForCausalLM(Qwen2Config(**common))
    return LlamaForCausalLM(LlamaConfig(**common))


def count_params(model: torch.nn.Module) -> int:
    """Distinct parameters (tied embeddings counted once)."""
    return sum(p.numel() for p in model.parameters())


# ----------------------------------------------------------------------------------- pre-training


class _Examples:
    """Draws (prompt text, response text) pairs: skill by weight, problem uniformly, then noise."""

    def __init__(self, spec: TinySpec, task: TinyTask, rng: random.Random) -> None:
        self.spec, self.task, self.rng = spec, task, rng
        by_skill: dict[str, list[Problem]] = {s.spec: [] for s in task.skills}
        for p in task.train_problems():
            by_skill[p.skill].append(p)
        self.pools = [by_skill[s.spec] for s in task.skills]
        weights = spec.skill_weights or (1.0,) * len(self.pools)
        self.weights = [w if pool else 0.0 for w, pool in zip(weights, self.pools, strict=True)]
        if not any(self.weights):
            raise ValueError("TinySpec: no training problems for any weighted skill")

    def draw(self, noisy: bool = True) -> tuple[str, str]:
        pool = self.rng.choices(self.pools, weights=self.weights)[0]
        problem = self.rng.choice(pool)
        response = self.task.solution(problem)
        if self.rng.random() < self.spec.noise and noisy:
            response = self.task.wrong_solution(problem, self.rng)
        return _apply_template(self.spec.prompt_template, problem.prompt), response


def _batch(
    pairs: list[tuple[str, str]], tokenizer: PreTrainedTokenizerFast
) -> dict[str, torch.Tensor]:
    """Right-padded input ids, attention mask and labels (-100 except on response + EOS)."""
    rows: list[tuple[list[int], list[int]]] = []
    for prompt, response in pairs:
        # Prompt and response are encoded apart, as at generation time (prompt ids + sampled ids).
        p = tokenizer.encode(prompt, add_special_tokens=False)
        r = [*tokenizer.encode(response, add_special_tokens=False), tokenizer.eos_token_id]
        rows.append((p, r))
    width = max(len(p) + len(r) for p, r in rows)
    ids = torch.full((len(rows), width), tokenizer.pad_token_id, dtype=torch.long)
    labels = torch.full((len(rows), width), -100, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (p, r) in enumerate(rows):
        n = len(p) + len(r)
        ids[i, :n] = torch.tensor(p + r)
        labels[i, len(p) : n] = torch.tensor(r)
        mask[i, :n] = 1
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def _lr_factor(step: int, total: int) -> float:
    warmup = max(1, min(50, total // 10))
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return 0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * progress))


def pretrain(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerFast,
    spec: TinySpec,
    *,
    progress: bool = False,
) -> dict:
    """Supervised pre-training on the spec's task; deterministic given spec.seed on one machine.

    Returns {"final_loss", "steps", "seconds", "examples"}; final_loss averages the last 20 steps.
    The model is left in eval mode.
    """
    task = tiny_task(spec)
    rng = random.Random(spec.seed)
    torch.manual_seed(spec.seed)
    examples = _Examples(spec, task, rng)
    opt = torch.optim.AdamW(model.parameters(), lr=spec.lr, betas=(0.9, 0.98), weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: _lr_factor(s, spec.pretrain_steps))
    losses: list[float] = []
    start = time.perf_counter()
    model.train()
    bar = tqdm(total=spec.pretrain_steps, desc="pretrain", disable=not progress, leave=False)
    clean_steps = round(spec.clean_fraction * spec.pretrain_steps)
    for step in range(spec.pretrain_steps):
        noisy = step >= clean_steps
        batch = _batch([examples.draw(noisy) for _ in range(spec.batch_size)], tokenizer)
        loss = model(**batch).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
        bar.update(1)
        bar.set_postfix(loss=f"{losses[-1]:.3f}", refresh=False)
    bar.close()
    model.eval()
    tail = losses[-20:]
    return {
        "final_loss": sum(tail) / len(tail) if tail else float("nan"),
        "steps": spec.pretrain_steps,
        "seconds": round(time.perf_counter() - start, 3),
        "examples": spec.pretrain_steps * spec.batch_size,
    }


# ----------------------------------------------------------------------------------- cache


def library_versions() -> dict[str, str]:
    return {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "tokenizers": tokenizers.__version__,
        "build_format": str(BUILD_FORMAT),
    }


def spec_hash(spec: TinySpec) -> str:
    """Cache key: the spec and the library versions that shape what gets built."""
    blob = json.dumps({"spec": spec.to_dict(), "versions": library_versions()}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def default_cache_dir() -> Path:
    """`$GRAFT_CACHE`, else `~/.cache/graft`."""
    env = os.environ.get("GRAFT_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "graft"


def resolve_spec(name_or_spec: str | TinySpec) -> tuple[str, TinySpec]:
    """(directory name stem, spec) for a preset name (`tiny:` prefix allowed) or a spec."""
    if isinstance(name_or_spec, TinySpec):
        spec = name_or_spec
        return f"custom-{spec.arch}-{spec.tokenizer}", spec
    name = name_or_spec.removeprefix("tiny:")
    if name not in TINY_PRESETS:
        raise ValueError(f"unknown tiny preset {name!r}; known: {', '.join(sorted(TINY_PRESETS))}")
    return name, TINY_PRESETS[name]


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """Exclusive lock so concurrent builders of one entry wait instead of building it twice."""
    try:
        import fcntl
    except ImportError:  # not POSIX: the atomic rename alone keeps the cache consistent
        yield
        return
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _is_complete(path: Path) -> bool:
    # tiny_spec.json is written last, before the atomic rename, so it marks a finished build.
    return (path / SPEC_FILE).is_file()


def _build_into(out: Path, name: str, spec: TinySpec, key: str, progress: bool) -> None:
    task = tiny_task(spec)
    tokenizer = make_tokenizer(spec, task)
    torch.manual_seed(spec.seed)
    model = make_model(spec, tokenizer)
    stats = pretrain(model, tokenizer, spec, progress=progress)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    record = {
        "name": name,
        "cache_key": key,
        "fingerprint": model_fingerprint(model),
        "params": count_params(model),
        "versions": library_versions(),
        "pretrain": stats,
        "spec": spec.to_dict(),
    }
    (out / SPEC_FILE).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")


def build_tiny(
    name_or_spec: str | TinySpec,
    cache_dir: Path | None = None,
    progress: bool = False,
    use_shipped: bool = True,
) -> Path:
    """Directory of the built model + tokenizer for a preset or spec, building it on first use.

    Lives at `<cache_dir>/tiny/<name>-<hash>` (cache_dir defaults to `default_cache_dir()`). Built
    in a temporary sibling directory and renamed into place, under a lock file, so concurrent
    callers never see a half-written entry and the entry is built once. Where the package ships
    that very entry (graft.models.tiny_shipped: same spec, same library versions), its verified
    files are copied instead of pre-training (`use_shipped=False`: pre-train anyway).
    """
    name, spec = resolve_spec(name_or_spec)
    key = spec_hash(spec)
    root = (Path(cache_dir) if cache_dir is not None else default_cache_dir()).expanduser()
    final = root / "tiny" / f"{name}-{key}"
    if _is_complete(final):
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    quiet_transformers()
    with _file_lock(final.parent / f".{final.name}.lock"):
        if _is_complete(final):
            return final
        if final.exists():  # left by an interrupted non-atomic copy; not a finished build
            shutil.rmtree(final)
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
        try:
            shipped = shipped_entry(final.name) if use_shipped else None
            if shipped is None or not copy_shipped(shipped, tmp):
                _build_into(tmp, name, spec, key, progress)
            try:
                os.rename(tmp, final)
            except OSError:
                if not _is_complete(final):  # not a lost race with another builder
                    raise
                shutil.rmtree(tmp, ignore_errors=True)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return final
