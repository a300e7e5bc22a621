"""The demo's complementary pairs: two tiny models, each pre-trained almost only on one skill.

- `mul`: 3-digit x 1-digit multiplication with a place-value scratchpad; llama (Llama + character
  tokenizer) is strong on multipliers 2-5, qwen (Qwen2 + BPE) on 6-9. Two regimes: latent (97/3,
  each weak skill starts around 5-10%) and cold (99.5/0.5, near 1-2%).
- `code`: the list-functions task (one-line Python functions run in the sandbox); llama is
  strong on the `list` reducer, qwen on `sum`, each pre-trained 99.5/0.5 (configs/graft_code.yaml).

A pair names its models' skills, which of them each model is weak on (the peer's skill: the one
GRAFT is meant to move), its regimes (model presets) and the task overrides its runs use.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from graft.models.tiny import MUL_SKILLS

MODELS = ("llama", "qwen")


@dataclass(frozen=True)
class Pair:
    name: str
    describe: str
    """One sentence for results.md: what the two models are and what each is strong on."""
    skills: tuple[str, str]
    """(llama's strong skill, qwen's strong skill): each is the other model's weak one."""
    regimes: Mapping[str, Mapping[str, str]]
    """Regime -> model -> tiny preset."""
    regime_text: Mapping[str, str]
    task_sets: tuple[str, ...]
    """`--set` overrides that select the pair's task."""
    max_new_tokens: int
    eval_samples: int
    """avg@k of the held-out evaluation."""

    @property
    def weak(self) -> dict[str, str]:
        """Each model's weak skill: the one it was barely pre-trained on (its peer's strong)."""
        return {MODELS[0]: self.skills[1], MODELS[1]: self.skills[0]}

    @property
    def strong(self) -> dict[str, str]:
        return {MODELS[0]: self.skills[0], MODELS[1]: self.skills[1]}

    def short(self, skill: str) -> str:
        """A skill as a column header reads it: `6-9` for `mul:3,1:6-9`, `sum` for `sum`."""
        return skill.split(":")[-1]


def _quoted(skills: tuple[str, ...]) -> str:
    return "[" + ", ".join(f'"{k}"' for k in skills) + "]"


PAIRS = {
    "mul": Pair(
        name="mul",
        describe="Two tiny models that differ in architecture and tokenizer (llama: Llama + "
        "character tokenizer, strong on multipliers 2-5; qwen: Qwen2 + BPE, strong on 6-9), on "
        "3-digit x 1-digit multiplication with a place-value scratchpad.",
        skills=(MUL_SKILLS[0], MUL_SKILLS[1]),
        regimes={
            "latent": {"llama": "llama-char-mul", "qwen": "qwen2-bpe-mul"},
            "cold": {"llama": "llama-char-mul-cold", "qwen": "qwen2-bpe-mul-cold"},
        },
        regime_text={
            "latent": "pre-trained 97/3 (llama) and 2/98 (qwen) on multipliers 2-5 / 6-9: each "
            "weak skill starts low but GRPO gets some signal on it",
            "cold": "pre-trained 99.5/0.5 and 0.5/99.5: each weak skill starts near 1-2%, so "
            "GRPO gets almost no signal on it",
        },
        task_sets=(
            "task.name=arithmetic",
            f"task.arithmetic.skills={_quoted(MUL_SKILLS)}",
            "task.arithmetic.scratchpad=true",
        ),
        max_new_tokens=48,
        eval_samples=2,
    ),
    "code": Pair(
        name="code",
        describe="Two tiny models that differ in architecture and tokenizer (llama: Llama + "
        "character tokenizer, strong on the `list` reducer; qwen: Qwen2 + BPE, strong on `sum`), "
        "writing one-line Python functions over a list of digits, each program run in the "
        "sandbox against four tests.",
        skills=("list", "sum"),
        regimes={"code": {"llama": "llama-char-code-list", "qwen": "qwen2-bpe-code-sum"}},
        regime_text={
            "code": "pre-trained 99.5/0.5 (llama) and 0.5/99.5 (qwen) on the `list` / `sum` "
            "reducers: each model fails whole groups on most prompts of the other's reducer"
        },
        task_sets=("task.name=list_functions",),
        max_new_tokens=80,  # the longest reference response is 68 characters + EOS
        eval_samples=4,
    ),
}
