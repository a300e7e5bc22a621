"""Evaluation suites: benchmarks as data adapters, local files, and a task's own held-out splits.

    math500 aime2024 aime2025 amc23 minerva   public Hugging Face datasets (need `datasets` and a
                                             network; the paper's five benchmarks)
    paper                                    all five
    test, val                                the run's task: its held-out test / validation split
    fixture                                  a small MATH-style set shipped with graft (offline)
    PATH.jsonl, PATH.parquet                 any local file with problem/answer columns

Every suite is judged by its task's verifier (math suites: the strict `math` verifier), the same
one that scores training rewards.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from graft.config import MathDataConfig, TaskConfig
from graft.configlib import ConfigError
from graft.tasks import build_task
from graft.tasks.math_data import FIXTURE_PATH, load_problems
from graft.types import Problem


@dataclass(frozen=True)
class Suite:
    name: str
    problems: tuple[Problem, ...]
    verifier: str


@dataclass(frozen=True)
class HubBenchmark:
    dataset: str
    split: str
    problem_column: str
    answer_column: str
    subset: str = ""


BENCHMARKS: dict[str, HubBenchmark] = {
    "math500": HubBenchmark("HuggingFaceH4/MATH-500", "test", "problem", "answer"),
    "aime2024": HubBenchmark("HuggingFaceH4/aime_2024", "train", "problem", "answer"),
    "aime2025": HubBenchmark("math-ai/aime25", "test", "problem", "answer"),
    "amc23": HubBenchmark("math-ai/amc23", "test", "question", "answer"),
    "minerva": HubBenchmark("math-ai/minervamath", "test", "question", "answer"),
}
GROUPS: dict[str, tuple[str, ...]] = {"paper": tuple(BENCHMARKS)}


def _limit(problems: tuple[Problem, ...], limit: int) -> tuple[Problem, ...]:
    return problems[:limit] if limit > 0 else problems


def load_suites(
    names: tuple[str, ...] | list[str],
    *,
    task: TaskConfig | None = None,
    limit: int = 0,
    math: MathDataConfig | None = None,
) -> list[Suite]:
    """Suites by name (see the module docstring); `limit` keeps the first problems of each."""
    math = math or MathDataConfig()
    out: list[Suite] = []
    for name in names:
        for member in GROUPS.get(name, (name,)):
            out.append(_load_one(member, task=task, limit=limit, math=math))
    return out


def _load_one(name: str, *, task: TaskConfig | None, limit: int, math: MathDataConfig) -> Suite:
    if name in ("test", "val"):
        if task is None:
            raise ConfigError(f"suite {name!r}: needs a task (a run config)")
        built = build_task(task)
        problems = built.test_problems() if name == "test" else built.val_problems()
        if not problems:
            raise ConfigError(f"suite {name!r}: the task has no {name} problems")
        return Suite(name, _limit(problems, limit), built.verifier)
    if name in BENCHMARKS:
        b = BENCHMARKS[name]
        cfg = dataclasses.replace(
            math, problem_column=b.problem_column, answer_column=b.answer_column, subset=b.subset
        )
        return Suite(
            name, _limit(load_problems(b.dataset, b.split, cfg, key=f"suite {name}"), limit), "math"
        )
    if name == "fixture" or name.endswith((".jsonl", ".parquet")):
        path = FIXTURE_PATH if name == "fixture" else Path(name)
        problems = load_problems(str(path), "train", math, key=f"suite {name}")
        label = "fixture" if name == "fixture" else Path(name).stem
        return Suite(label, _limit(problems, limit), "math")
    known = ", ".join([*BENCHMARKS, *GROUPS, "test", "val", "fixture", "PATH.jsonl"])
    raise ConfigError(f"unknown suite {name!r}; known: {known}")
