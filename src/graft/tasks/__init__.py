"""Tasks: where problems come from, and which verifier judges the answers.

A task has train and test problems and names its verifier (`graft.tasks.verify.VERIFIERS`); the
same verifier scores training rollouts and evaluation samples.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Protocol

from graft.config import TaskConfig
from graft.types import Problem


class Task(Protocol):
    name: str
    verifier: str

    def train_problems(self) -> tuple[Problem, ...]: ...

    def test_problems(self) -> tuple[Problem, ...]: ...

    def val_problems(self) -> tuple[Problem, ...]: ...


def _arithmetic(cfg: TaskConfig) -> Task:
    from graft.tasks.arithmetic import ArithmeticTask

    return ArithmeticTask(cfg.arithmetic)


def _math(cfg: TaskConfig) -> Task:
    from graft.tasks.math_data import MathTask

    return MathTask(cfg.math)


TASKS: dict[str, Callable[[TaskConfig], Task]] = {"arithmetic": _arithmetic, "math": _math}


def build_task(cfg: TaskConfig) -> Task:
    return TASKS[cfg.name](cfg)


def prompt_batch(
    problems: tuple[Problem, ...], *, step: int, batch_size: int, seed: int
) -> tuple[Problem, ...]:
    """The problems of rollout step `step`: epochs over a seeded permutation, stateless.

    Being a pure function of (seed, step) makes resume exact without storing a data cursor, and
    gives every policy of a run the same prompts.
    """
    if not problems:
        raise ValueError("the task has no training problems")
    n = len(problems)
    out: list[Problem] = []
    start = step * batch_size
    for pos in range(start, start + batch_size):
        epoch, index = divmod(pos, n)
        order = _epoch_order(n, seed, epoch)
        out.append(problems[order[index]])
    return tuple(out)


_ORDER_CACHE: dict[tuple[int, int, int], list[int]] = {}


def _epoch_order(n: int, seed: int, epoch: int) -> list[int]:
    key = (n, seed, epoch)
    if key not in _ORDER_CACHE:
        if len(_ORDER_CACHE) > 8:
            _ORDER_CACHE.clear()
        order = list(range(n))
        random.Random(seed * 1_000_003 + epoch).shuffle(order)
        _ORDER_CACHE[key] = order
    return _ORDER_CACHE[key]
