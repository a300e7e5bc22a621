"""The tiny models' specs: `TinySpec` (everything about one model) and the named presets.

`graft tiny list` prints the presets; `tiny:<preset>` as `models.N.path` builds one (cached).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Literal

from graft.config import ArithmeticConfig, ListFunctionsConfig


@dataclass(frozen=True)
class TinySpec:
    arch: Literal["llama", "qwen2", "gpt2"] = "llama"
    tokenizer: Literal["char", "bpe"] = "char"
    """`char`: one token per ASCII character; `bpe`: byte-level BPE trained on the task text
    (GPT-2 pre-tokenization, or Qwen2's for arch qwen2: see `bpe_tokenizer`)."""
    bpe_vocab_size: int = 300
    """Target vocabulary of the byte-level BPE tokenizer (256 bytes + specials + merges)."""
    hidden: int = 128
    layers: int = 4
    heads: int = 4
    kv_heads: int = 2
    """Key/value heads (grouped-query attention); GPT-2 has none and ignores it."""
    intermediate: int = 512
    task: ArithmeticConfig | ListFunctionsConfig = field(default_factory=ArithmeticConfig)
    """Pre-training task (arithmetic, or list functions: a code task): its train split is the
    pre-training data; its test split stays unseen."""
    skill_weights: tuple[float, ...] = ()
    """Relative frequency of each of `task.skills` in the pre-training data; empty: uniform."""
    noise: float = 0.0
    """Fraction of pre-training examples whose response is replaced by a plausible wrong answer."""
    clean_fraction: float = 0.75
    """Share of the pre-training steps, at the start, without noise: learning the skill from clean
    labels first is several times faster than through noisy ones."""
    pretrain_steps: int = 600
    batch_size: int = 64
    lr: float = 5e-4
    """Peak AdamW learning rate (linear warm-up, then cosine decay to a tenth)."""
    seed: int = 0
    prompt_template: str = "{prompt}"
    """The model is pre-trained on the prompt as this template shows it; `{prompt}` is replaced."""

    def __post_init__(self) -> None:
        checks = [
            (self.arch in ("llama", "qwen2", "gpt2"), f"unknown arch {self.arch!r}"),
            (self.tokenizer in ("char", "bpe"), f"unknown tokenizer {self.tokenizer!r}"),
            (
                self.arch != "qwen2" or self.tokenizer == "bpe",
                "arch qwen2 needs tokenizer bpe (transformers loads any qwen2 checkpoint's "
                "tokenizer as Qwen2Tokenizer; see bpe_tokenizer)",
            ),
            (self.bpe_vocab_size > 259, "bpe_vocab_size must exceed 256 bytes + specials"),
            (self.hidden % self.heads == 0, "hidden must be divisible by heads"),
            (self.arch == "gpt2" or self.heads % self.kv_heads == 0, "heads % kv_heads != 0"),
            (0.0 <= self.noise < 1.0, f"noise must be in [0, 1) (got {self.noise})"),
            (0.0 <= self.clean_fraction <= 1.0, "clean_fraction must be in [0, 1]"),
            (self.pretrain_steps >= 0 and self.batch_size >= 1, "bad pretrain_steps/batch_size"),
            (
                not self.skill_weights or len(self.skill_weights) == len(self.task.skills),
                "skill_weights needs one weight per task skill",
            ),
            (all(w >= 0 for w in self.skill_weights), "skill_weights must be >= 0"),
            ("{prompt}" in self.prompt_template, "prompt_template must contain {prompt}"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(f"TinySpec: {message}")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _add_task(**kw: object) -> ArithmeticConfig:
    return ArithmeticConfig(skills=("add:2,2",), **kw)  # type: ignore[arg-type]


MUL_SKILLS = ("mul:3,1:2-5", "mul:3,1:6-9")
"""3-digit times a digit, split by multiplier: the skills of the `*-mul` presets."""


def _mul_task() -> ArithmeticConfig:
    return ArithmeticConfig(skills=MUL_SKILLS, scratchpad=True)


TINY_PRESETS: dict[str, TinySpec] = {
    # Partially accurate by construction: greedy decoding gets some of the held-out problems right,
    # sampling at temperature 1 fewer, since late noisy labels keep mass on wrong answers.
    "llama-char-add": TinySpec(
        arch="llama", tokenizer="char", task=_add_task(), noise=0.4, pretrain_steps=600, seed=1
    ),
    "qwen2-bpe-add": TinySpec(
        arch="qwen2", tokenizer="bpe", task=_add_task(), noise=0.3, pretrain_steps=450, seed=2
    ),
    "gpt2-char-add": TinySpec(
        arch="gpt2",
        tokenizer="char",
        intermediate=640,  # GPT-2 blocks have no gate projection: a wider MLP keeps ~1M params
        task=_add_task(),
        noise=0.3,
        pretrain_steps=600,
        lr=1e-3,
        seed=3,
    ),
    # A complementary pair for GRAFT (`graft demo`, configs/graft_mul.yaml): place-value scratchpad
    # on 3-digit x 1-digit multiplication, pre-trained 97/3 and 2/98 on multipliers 2-5 / 6-9, so
    # each is good on its own skill and fails whole groups of 8 on most prompts of the other's
    # (measured: 79% and 73% all-fail; the peer is mixed on 53% and 77% of those). Same size, steps
    # and learning rate, so both are about equally confident on the shared format and the paper's
    # weight (delta 0.8) admits peer responses both ways. The qwen2 BPE splits every digit and
    # operators stand alone here, so both tokenize this text one token per character. No noise:
    # sampling at temperature 1 already leaves the strong skill well short of always right.
    "llama-char-mul": TinySpec(
        arch="llama",
        tokenizer="char",
        task=_mul_task(),
        skill_weights=(0.97, 0.03),
        pretrain_steps=600,
        batch_size=32,
        lr=1e-3,
        seed=11,
    ),
    "qwen2-bpe-mul": TinySpec(
        arch="qwen2",
        tokenizer="bpe",
        task=_mul_task(),
        skill_weights=(0.02, 0.98),
        pretrain_steps=600,
        batch_size=32,
        lr=1e-3,
        seed=12,
    ),
}
# The same pair in a colder regime (`graft demo`, "cold skill"): pre-trained 99.5/0.5 and 0.5/99.5,
# so each model's weak skill starts near 1-2% and GRPO gets almost no signal there.
TINY_PRESETS["llama-char-mul-cold"] = dataclasses.replace(
    TINY_PRESETS["llama-char-mul"], skill_weights=(0.995, 0.005)
)
TINY_PRESETS["qwen2-bpe-mul-cold"] = dataclasses.replace(
    TINY_PRESETS["qwen2-bpe-mul"], skill_weights=(0.005, 0.995)
)
# Barely trained stand-ins of the pair, for `graft demo --quick` (checks the pipeline, not GRAFT).
for _name in ("llama-char-mul", "qwen2-bpe-mul", "llama-char-mul-cold", "qwen2-bpe-mul-cold"):
    TINY_PRESETS[f"{_name}-quick"] = dataclasses.replace(TINY_PRESETS[_name], pretrain_steps=60)
# Code (`task.name: list_functions`, configs/grpo_code.yaml and configs/graft_code.yaml): one-line
# Python functions over a list of digits, written from a short description. Noisy labels (a
# constant off by one, the other parity or reducer: `ListFunctionsTask.wrong_solution`) keep
# sampling at temperature 1 near 60% right on held-out problems while greedy decoding is nearly
# always right, as in the addition presets. The pair is cold on each other's reducer: pre-trained
# 99.5/0.5 on `list` / `sum`.
_CODE = dict(noise=0.3, pretrain_steps=400, batch_size=32, lr=1e-3)
TINY_PRESETS["llama-char-code"] = TinySpec(
    arch="llama", tokenizer="char", task=ListFunctionsConfig(), seed=21, **_CODE
)
TINY_PRESETS["llama-char-code-list"] = TinySpec(
    arch="llama", tokenizer="char", task=ListFunctionsConfig(), skill_weights=(0.995, 0.005),
    seed=21, **_CODE,
)  # fmt: skip
TINY_PRESETS["qwen2-bpe-code-sum"] = TinySpec(
    arch="qwen2", tokenizer="bpe", task=ListFunctionsConfig(), skill_weights=(0.005, 0.995),
    seed=22, **_CODE,
)  # fmt: skip
# Barely trained stand-ins of the code pair (the demo's tests: they check the pipeline, not GRAFT).
for _name in ("llama-char-code-list", "qwen2-bpe-code-sum"):
    TINY_PRESETS[f"{_name}-quick"] = dataclasses.replace(TINY_PRESETS[_name], pretrain_steps=30)
# The three-model study (docs/evidence.md, "Three models"): the list-functions task with a third
# reducer, `max`, and a third family, GPT-2 + byte-level BPE (GPT-2's pre-tokenization). llama and
# qwen are pre-trained 99.8/0.1/0.1 on their own reducer and the other two: at 99/0.5/0.5 (the
# first design) they wrote each other's reducer right 15% of the time (`graft probe
# --split val`), not stuck. gpt2 is pre-trained 99/0.5/0.5 and less far (`TRIO_GPT2_STEPS`, the
# pilot's choice), so that its own skill still rises under GRPO and a log of it ages.
TRIO_TASK = ListFunctionsConfig(
    skills=("list", "sum", "max"), num_train=2400, num_test=300, num_val=300
)
TRIO_GPT2_STEPS = 300
TINY_PRESETS["llama-char-trio-list"] = TinySpec(
    arch="llama", tokenizer="char", task=TRIO_TASK, skill_weights=(0.998, 0.001, 0.001),
    seed=31, **_CODE,
)  # fmt: skip
TINY_PRESETS["qwen2-bpe-trio-sum"] = TinySpec(
    arch="qwen2", tokenizer="bpe", task=TRIO_TASK, skill_weights=(0.001, 0.998, 0.001),
    seed=32, **_CODE,
)  # fmt: skip
TINY_PRESETS["gpt2-bpe-trio-max"] = TinySpec(
    arch="gpt2", tokenizer="bpe", task=TRIO_TASK, skill_weights=(0.005, 0.005, 0.99),
    seed=33, **{**_CODE, "pretrain_steps": TRIO_GPT2_STEPS},
)  # fmt: skip
# Barely trained stand-ins of the three (the study's miniature test: the pipeline, not GRAFT).
for _name in ("llama-char-trio-list", "qwen2-bpe-trio-sum", "gpt2-bpe-trio-max"):
    TINY_PRESETS[f"{_name}-quick"] = dataclasses.replace(TINY_PRESETS[_name], pretrain_steps=30)
