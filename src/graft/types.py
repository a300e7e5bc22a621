"""Frozen records that pass between the stages of a step.

rollout -> verify -> group -> (exchange) -> advantages -> update -> store -> log

Everything here is plain, picklable data (tuples of ints/floats/strings), so the same records cross
process boundaries (worker processes, Ray actors) unchanged. Tensors live only inside a stage.

Shape suffixes: `_P` prompts, `_G` members of a group, `_T` tokens, `_B` a flat batch, `_M` models.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Literal

VerdictCategory = Literal["correct", "wrong", "no_answer", "timeout", "error"]
VERDICT_CATEGORIES: tuple[VerdictCategory, ...] = (
    "correct",
    "wrong",
    "no_answer",
    "timeout",
    "error",
)
FinishReason = Literal["stop", "length"]
Objective = str
"""A policy loss's name (`graft.training.loss.POLICY_LOSSES`: pg, luffy, sft, unclipped)."""
DETAIL_CHARS = 300
"""A verdict's detail is one line of at most this many characters (`clip_detail`)."""


def problem_id(prompt: str, gold: str) -> str:
    """Stable id of a problem, derived from its content (never from its position in a dataset)."""
    digest = hashlib.sha256(f"{prompt}\x00{gold}".encode()).hexdigest()
    return digest[:16]


@dataclass(frozen=True)
class Problem:
    """One verifiable prompt, before any model's template is applied."""

    prompt: str
    """Task-level prompt text; each policy wraps it in its own template."""
    gold: str
    """Reference answer, checked by the task's verifier."""
    skill: str = ""
    """Tag for per-skill metrics (e.g. "add", "mul:2-5"); empty when the task has one skill."""
    id: str = ""
    """Stable content id; filled from prompt and gold when left empty."""

    def __post_init__(self) -> None:
        if not self.id:
            object.__setattr__(self, "id", problem_id(self.prompt, self.gold))


def clip_detail(text: str, limit: int = DETAIL_CHARS) -> str:
    """One line of at most `limit` characters (parser messages span lines with a caret)."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass(frozen=True)
class Verdict:
    """The verifier's judgement of one response."""

    category: VerdictCategory
    detail: str = ""
    """What it saw: extracted answer, parse failure, exception text, ... (for people)."""
    reason: str = ""
    """Why it is not correct, as a name from its verifier's closed set
    (the verifier's `reasons`: `graft.verify.math.grader.MATH_REASONS`,
    `graft.verify.code.verifier.CODE_REASONS`); "" when correct. A plug-in verifier may leave it
    empty: its wrong verdicts count under the first reason of `wrong`, its others under `other`
    (`graft.verify.registry.counted_reason`)."""

    @classmethod
    def judged(cls, right: bool, detail: str = "", reason: str = "one_answer") -> Verdict:
        """`correct`, or else `wrong` for `reason`."""
        return cls("correct", detail) if right else cls("wrong", detail, reason)

    @classmethod
    def raised(cls, exc: BaseException) -> Verdict:
        """The `error` of a verifier that raised `exc`."""
        return cls("error", clip_detail(f"{type(exc).__name__}: {exc}"), "other")

    @property
    def correct(self) -> bool:
        return self.category == "correct"

    @property
    def reward(self) -> float:
        """Binary verifiable reward: 1 for correct, 0 otherwise (timeouts and errors included)."""
        return 1.0 if self.category == "correct" else 0.0


@dataclass(frozen=True)
class Completion:
    """One sampled response, exactly as its generator produced it."""

    text: str
    """Decoded response, special tokens skipped."""
    token_ids: tuple[int, ...]
    """Generated tokens; ends with the EOS token when finish_reason == "stop"."""
    logprobs: tuple[float, ...]
    """Behavior log-prob of each token in token_ids, under the sampling distribution (logits/T)."""
    finish_reason: FinishReason

    def __post_init__(self) -> None:
        if len(self.token_ids) != len(self.logprobs):
            raise ValueError(
                f"Completion has {len(self.token_ids)} tokens but {len(self.logprobs)} log-probs"
            )

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)


@dataclass(frozen=True)
class Rollout:
    """A policy's n responses to one problem, as generated (before verification)."""

    problem: Problem
    policy: str
    prompt_ids: tuple[int, ...]
    """The generating policy's tokenization of its templated prompt."""
    completions_G: tuple[Completion, ...]


@dataclass(frozen=True)
class Group:
    """A verified rollout group with its GRPO advantages (computed over all n members)."""

    rollout: Rollout
    verdicts_G: tuple[Verdict, ...]
    advantages_G: tuple[float, ...]

    @property
    def problem(self) -> Problem:
        return self.rollout.problem

    @property
    def policy(self) -> str:
        return self.rollout.policy

    @property
    def size(self) -> int:
        return len(self.verdicts_G)

    @property
    def rewards_G(self) -> tuple[float, ...]:
        return tuple(v.reward for v in self.verdicts_G)

    @property
    def num_correct(self) -> int:
        """k_M(q): correct responses, decided on the raw verdict (never a shaped reward)."""
        return sum(v.correct for v in self.verdicts_G)

    @property
    def all_fail(self) -> bool:
        return self.num_correct == 0

    @property
    def all_pass(self) -> bool:
        return self.num_correct == self.size

    @property
    def mixed(self) -> bool:
        return 0 < self.num_correct < self.size


@dataclass(frozen=True)
class TrainSequence:
    """One response in the trainee's own tokenization, ready for the policy-gradient update."""

    prompt_ids: tuple[int, ...]
    response_ids: tuple[int, ...]
    old_logprobs: tuple[float, ...]
    """Trainee's behavior (pre-update) log-prob of each response token."""
    advantage: float
    weight: float = 1.0
    """Sequence weight multiplying this response's token sum (1 for self responses)."""
    is_peer: bool = False
    objective: Objective = "pg"
    """The policy loss of its row, by name (`graft.training.loss.POLICY_LOSSES`): `pg`, the
    clipped policy gradient (GRPO/GRAFT); `luffy`, pi / (pi + gamma) shaping without a ratio (a
    baseline); `sft`, the negative log-likelihood (the SGT baseline's supervised term);
    `unclipped`, -rho a (the token clip's control)."""

    def __post_init__(self) -> None:
        if len(self.response_ids) != len(self.old_logprobs):
            raise ValueError(
                f"TrainSequence has {len(self.response_ids)} response tokens but "
                f"{len(self.old_logprobs)} old log-probs"
            )
        if not self.response_ids:
            raise ValueError("TrainSequence has an empty response")

    @property
    def num_tokens(self) -> int:
        return len(self.response_ids)


@dataclass(frozen=True)
class TrainGroup:
    """The sequences of one prompt; a group is never split across minibatches."""

    problem_id: str
    sequences: tuple[TrainSequence, ...]
    is_peer: bool = False
    """True when the group came from a peer (grafted); peer groups go into the last minibatches."""


@dataclass(frozen=True)
class PeerResponse:
    """One source response offered to a receiver."""

    prompt_index: int
    member: int
    """Index of the response in the source's group."""
    task_prompt: str
    text: str
    stopped: bool
    """The source stopped on EOS (the receiver then appends its own EOS)."""
    source: str = ""
    """The source policy's name (a receiver imports from all its sources in one call)."""
    prompt_ids: tuple[int, ...] | None = None
    """The exact context to score the text after, in the scoring policy's tokens (an import
    scoring a log with its source model: the prompt as the source tokenized it); None: the task
    prompt in the policy's own template."""


@dataclass(frozen=True)
class Imported:
    """A peer response in the receiver's tokenization, with the receiver's behavior log-probs."""

    prompt_ids: tuple[int, ...]
    response_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    drop: str = ""
    """Why it cannot be used at all: "" (usable), "too_long" or "empty"."""
    truncated: bool = False
    roundtrip_ok: bool = True
    """decode(encode(text)) gave the text back."""
