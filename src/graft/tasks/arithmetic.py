"""Synthetic arithmetic tasks: addition, multiplication and chained sums, deterministic by seed.

A skill is written `op:d1,d2[,...][:lo-hi]`: `add:2,2` adds two 2-digit numbers, `mul:3,1:2-5`
multiplies a 3-digit number by a digit in 2..5, `chain:1,1,1` sums three digits. A 1-digit
operand ranges over 0..9, a d-digit one over 10^(d-1)..10^d - 1; the optional range restricts the
LAST operand.

The prompt is the expression with a trailing `=` ("347*6="); the reference response is the result,
or with `scratchpad` the place-value working ending in the result
("300*6+40*6+7*6=1800+240+42=2040+42=2082"). Answers are checked by the `final_number` verifier.
The held-out test split is drawn first, then the training split, then a validation split; the three
never share a prompt (`tests/test_tasks.py` checks it).
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass

from graft.config import ArithmeticConfig, ConfigError
from graft.tasks.splits import SplitTask
from graft.types import Problem

OPS = {"add": "+", "mul": "*", "chain": "+"}
_ENUMERATE_LIMIT = 200_000


@dataclass(frozen=True)
class Skill:
    op: str
    digits: tuple[int, ...]
    last_range: tuple[int, int] | None
    spec: str

    def operand_range(self, i: int) -> tuple[int, int]:
        d = self.digits[i]
        lo, hi = (0, 9) if d == 1 else (10 ** (d - 1), 10**d - 1)
        if i == len(self.digits) - 1 and self.last_range is not None:
            lo, hi = max(lo, self.last_range[0]), min(hi, self.last_range[1])
        return lo, hi

    @property
    def space_size(self) -> int:
        size = 1
        for i in range(len(self.digits)):
            lo, hi = self.operand_range(i)
            size *= hi - lo + 1
        return size


def parse_skill(spec: str) -> Skill:
    """Parse `op:d1,d2[:lo-hi]`; raises ConfigError naming the spec."""
    parts = spec.split(":")
    if len(parts) not in (2, 3) or parts[0] not in OPS:
        raise ConfigError(
            f"task.arithmetic.skills: bad skill {spec!r}; expected op:d1,d2[:lo-hi] with op in "
            f"{sorted(OPS)}, e.g. 'add:2,2' or 'mul:3,1:2-5'"
        )
    try:
        digits = tuple(int(d) for d in parts[1].split(","))
        last_range = None
        if len(parts) == 3:
            lo, hi = (int(x) for x in parts[2].split("-"))
            last_range = (lo, hi)
    except ValueError:
        raise ConfigError(f"task.arithmetic.skills: bad numbers in skill {spec!r}") from None
    if len(digits) < 2 or any(d < 1 or d > 9 for d in digits):
        raise ConfigError(f"task.arithmetic.skills: {spec!r} needs >= 2 operands of 1-9 digits")
    if parts[0] != "chain" and len(digits) != 2:
        raise ConfigError(f"task.arithmetic.skills: {spec!r}: {parts[0]} takes exactly 2 operands")
    skill = Skill(parts[0], digits, last_range, spec)
    for i in range(len(digits)):
        lo, hi = skill.operand_range(i)
        if lo > hi:
            raise ConfigError(f"task.arithmetic.skills: {spec!r}: empty range for operand {i + 1}")
    return skill


def _place_values(a: int) -> list[int]:
    """347 -> [300, 40, 7]; zeros are skipped (307 -> [300, 7]); 0 -> [0]."""
    digits = str(a)
    parts = [int(c) * 10 ** (len(digits) - 1 - i) for i, c in enumerate(digits) if c != "0"]
    return parts or [0]


def _running_sums(terms: list[int]) -> list[str]:
    """[1800, 240, 42] -> ["1800+240+42", "2040+42", "2082"]."""
    steps = ["+".join(map(str, terms))]
    while len(terms) > 1:
        terms = [terms[0] + terms[1], *terms[2:]]
        steps.append("+".join(map(str, terms)))
    return steps


def solution(skill: Skill, operands: tuple[int, ...], *, scratchpad: bool) -> str:
    """Reference response for a problem (the text after the prompt's `=`)."""
    if skill.op == "mul":
        a, b = operands
        result = a * b
        if not scratchpad:
            return str(result)
        parts = _place_values(a)
        if len(parts) == 1:
            return str(result)
        products = "+".join(f"{p}*{b}" for p in parts)
        return "=".join([products, *_running_sums([p * b for p in parts])])
    result = sum(operands)
    if not scratchpad:
        return str(result)
    if skill.op == "chain":
        return "=".join(_running_sums(list(operands))[1:])
    a, b = operands
    terms = sorted((t for t in (*_place_values(a), *_place_values(b)) if t), reverse=True) or [0]
    high = sum(t for t in terms if t >= 10)
    low = sum(t for t in terms if t < 10)
    steps = ["+".join(map(str, terms))]
    if high and low and len(terms) > 2:
        steps.append(f"{high}+{low}")
    if len(terms) > 1:
        steps.append(str(result))
    return "=".join(steps)


def _sample_operands(skill: Skill, rng: random.Random, count: int) -> list[tuple[int, ...]]:
    ranges = [skill.operand_range(i) for i in range(len(skill.digits))]
    if skill.space_size <= _ENUMERATE_LIMIT:
        space = list(itertools.product(*(range(lo, hi + 1) for lo, hi in ranges)))
        rng.shuffle(space)
        return space[:count]
    seen: set[tuple[int, ...]] = set()
    out = []
    while len(out) < min(count, skill.space_size):
        ops = tuple(rng.randint(lo, hi) for lo, hi in ranges)
        if ops not in seen:
            seen.add(ops)
            out.append(ops)
    return out


class ArithmeticTask(SplitTask):
    """Synthetic arithmetic with exact integer answers; see the module docstring."""

    name = "arithmetic"
    verifier = "final_number"

    def __init__(self, cfg: ArithmeticConfig) -> None:
        self.cfg = cfg
        self.skills = tuple(parse_skill(s) for s in cfg.skills)
        self._solutions: dict[str, str] = {}
        self._train, self._test = self._build()

    def _build(self) -> tuple[tuple[Problem, ...], tuple[Problem, ...]]:
        rng = random.Random(self.cfg.seed)
        n_skills = len(self.skills)
        test: list[Problem] = []
        train: list[Problem] = []
        val: list[Problem] = []
        share = lambda total, i: total // n_skills + (i < total % n_skills)  # noqa: E731
        for i, skill in enumerate(self.skills):
            want_test, want_train = share(self.cfg.num_test, i), share(self.cfg.num_train, i)
            want_val = share(self.cfg.num_val, i)
            operands = _sample_operands(skill, rng, want_test + want_train + want_val)
            problems = [self._problem(skill, ops) for ops in operands]
            test.extend(problems[:want_test])
            train.extend(problems[want_test : want_test + want_train])
            val.extend(problems[want_test + want_train :])
        held_out = {p.id for p in test}
        train = [p for p in train if p.id not in held_out]
        held_out |= {p.id for p in train}
        val = [p for p in val if p.id not in held_out]
        rng.shuffle(train)
        rng.shuffle(test)
        rng.shuffle(val)
        self._val = tuple(val)
        return tuple(train), tuple(test)

    def _problem(self, skill: Skill, operands: tuple[int, ...]) -> Problem:
        prompt = OPS[skill.op].join(map(str, operands)) + "="
        result = operands[0] * operands[1] if skill.op == "mul" else sum(operands)
        problem = Problem(prompt=prompt, gold=str(result), skill=skill.spec)
        self._solutions[problem.id] = solution(skill, operands, scratchpad=self.cfg.scratchpad)
        return problem

    def solution(self, problem: Problem) -> str:
        """Reference response text for one of this task's problems (for supervised pre-training)."""
        return self._solutions[problem.id]

    def wrong_solution(self, problem: Problem, rng: random.Random) -> str:
        """The reference response with a plausible wrong result (pre-training noise): any
        scratchpad working is kept, only the final result is corrupted."""
        response = self._solutions[problem.id]
        return response[: len(response) - len(problem.gold)] + wrong_answer(problem.gold, rng)


def wrong_answer(gold: str, rng: random.Random) -> str:
    """A plausible wrong result: off by 1..9, or one digit changed (never a leading zero)."""
    value = int(gold)
    if rng.random() < 0.5:
        candidates = [value + d for d in range(-9, 10) if d != 0 and value + d >= 0]
        return str(rng.choice(candidates))
    digits = list(gold)
    pos = rng.randrange(len(digits))
    low = 1 if pos == 0 and len(digits) > 1 else 0
    digits[pos] = rng.choice([c for c in "0123456789"[low:] if c != digits[pos]])
    return "".join(digits)
