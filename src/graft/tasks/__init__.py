"""Tasks: where problems come from, and which verifier judges the answers.

A task has train and test problems and names its verifier (`graft.verify.registry.VERIFIERS`); the
same verifier scores training rollouts and evaluation samples.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Protocol, TypeVar

from graft.config import ConfigError, TaskConfig, VerifyConfig
from graft.types import Problem

T = TypeVar("T")


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


def _code(cfg: TaskConfig) -> Task:
    from graft.tasks.code_data import CodeTask

    return CodeTask(cfg.code)


def _list_functions(cfg: TaskConfig) -> Task:
    from graft.tasks.list_functions import ListFunctionsTask

    return ListFunctionsTask(cfg.list_functions)


TASKS: dict[str, Callable[[TaskConfig], Task]] = {
    "arithmetic": _arithmetic,
    "math": _math,
    "code": _code,
    "list_functions": _list_functions,
}


def build_task(cfg: TaskConfig) -> Task:
    return TASKS[cfg.name](cfg)


def run_verifier(verify: VerifyConfig, task: Task) -> str:
    """The verifier a run scores with: `verify.verifier`, else the task's own, with the answer
    extraction of `verify.extract`; checked to exist (a ConfigError naming the key)."""
    from graft.config import ConfigError
    from graft.verify.registry import resolve_verifier, verifier_for_extract

    try:
        verifier = verifier_for_extract(verify.verifier or task.verifier, verify.extract)
    except ValueError as err:
        raise ConfigError(f"verify.extract: {err}") from None
    try:
        resolve_verifier(verifier)
    except (ValueError, ImportError) as err:
        raise ConfigError(f"verify.verifier: {err}") from None
    return verifier


def eval_verifier(verify: VerifyConfig, verifier: str) -> str | None:
    """The verifier evaluation scores every suite with: the run's (`verifier`) where the config
    names one or an answer extraction of its own; None otherwise (each suite its own)."""
    custom = verify.verifier or verify.extract != "boxed"
    return verifier if custom else None


def prompt_batch(
    problems: tuple[T, ...], *, step: int, batch_size: int, seed: int
) -> tuple[T, ...]:
    """The problems of rollout step `step`: epochs over a seeded permutation, stateless (any
    items: `graft sft` draws its examples the same way).

    Being a pure function of (seed, step) makes resume exact without storing a data cursor, and
    gives every policy of a run the same prompts.
    """
    if not problems:
        raise ValueError("the task has no training problems")
    n = len(problems)
    out: list[T] = []
    start = step * batch_size
    for pos in range(start, start + batch_size):
        epoch, index = divmod(pos, n)
        order = _epoch_order(n, seed, epoch)
        out.append(problems[order[index]])
    return tuple(out)


def extra_prompts(
    problems: tuple[Problem, ...],
    *,
    step: int,
    round: int,
    count: int,
    batch_size: int,
    seed: int,
) -> tuple[Problem, ...]:
    """The prompts of extra sampling round `round` (1, 2, ...) of step `step` (dynamic sampling,
    `models.N.zero_contrast.mode=resample`): stateless, like `prompt_batch`.

    Each step has its own seeded permutation of the training problems with the step's batch left
    out; round r takes the `count` problems from position (r - 1) x `batch_size` on. So a step
    never samples a problem twice, every policy of the run gets the same extra prompts in the
    same round (a policy whose budget cuts a round takes the first ones), the main prompt stream
    stays the one `prompt_batch` gives (runs with and without resampling see the same batches),
    and a resumed run draws the same prompts. Past the end of the permutation a round gets fewer
    problems, or none.
    """
    seen = {p.id for p in prompt_batch(problems, step=step, batch_size=batch_size, seed=seed)}
    order = list(range(len(problems)))
    random.Random(f"{seed}/{step}/extra-prompts").shuffle(order)
    rest = []
    for i in order:  # a problem the data holds twice is still sampled once
        if problems[i].id not in seen:
            seen.add(problems[i].id)
            rest.append(problems[i])
    start = (round - 1) * batch_size
    return tuple(rest[start : start + min(count, batch_size)])


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


SPLITS = ("train", "val", "test")


def split_problems(task: Task, split: str) -> tuple[Problem, ...]:
    """The problems of one of the task's splits (`train`, `val`, `test`); ConfigError for an
    unknown split or an empty held-out one."""
    if split not in SPLITS:
        raise ConfigError(f"split must be one of {list(SPLITS)}, got {split!r}")
    problems = {"train": task.train_problems, "val": task.val_problems,
                "test": task.test_problems}[split]()  # fmt: skip
    if split != "train" and not problems:
        raise ConfigError(f"--split {split}: the task has no {split} problems")
    return problems
