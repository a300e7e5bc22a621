"""Evaluation suites: benchmarks as data adapters, local files, and a task's own held-out splits.

    math500 aime2024 aime2025 amc23 minerva   public Hugging Face datasets (need `datasets` and a
                                             network; the paper's five benchmarks)
    paper                                    all five
    test, val                                the run's task: its held-out test / validation split
    fixture                                  a small MATH-style set shipped with graft (offline)
    PATH.jsonl, PATH.parquet                 any local file with problem/answer columns

Every suite is judged by its task's verifier (math suites: the strict `math` verifier), the same
one that scores training rewards. Each benchmark is pinned to a dataset revision (`BENCHMARKS`),
recorded with its split in eval.json (`Suite.source`); a local file is recorded with its SHA-256.
Local files are read with the run's `task.math` settings (columns, prompt suffix).
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from graft.config import MathDataConfig, TaskConfig
from graft.config.lib import ConfigError
from graft.errors import DataError
from graft.tasks import build_task
from graft.tasks.math_data import FIXTURE_PATH, load_problems
from graft.types import Problem
from graft.verify.golds import check_golds, require_golds
from graft.verify.pool import VerifierPool


@dataclass(frozen=True)
class Suite:
    name: str
    problems: tuple[Problem, ...]
    verifier: str
    source: dict[str, Any] = field(default_factory=dict, compare=False)
    """Where the problems came from: dataset (or file), split, revision (or file SHA-256); after
    `check_suite_golds` / `drop_long_prompts`, how many golds are unusable and prompts skipped."""


@dataclass(frozen=True)
class HubBenchmark:
    dataset: str
    split: str
    problem_column: str
    answer_column: str
    revision: str
    """The dataset repository's commit that graft reads (a repository can change under a name):
    the full 40-character hash, as the hub client requires of a commit revision."""
    subset: str = ""

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[0-9a-f]{40}", self.revision):
            raise ValueError(
                f"{self.dataset}: revision {self.revision!r} is not a full commit hash "
                "(40 hexadecimal characters)"
            )


BENCHMARKS: dict[str, HubBenchmark] = {
    "math500": HubBenchmark(
        "HuggingFaceH4/MATH-500",
        "test",
        "problem",
        "answer",
        "6e4ed1a2a79af7d8630a6b768ec859cb5af4d3be",
    ),
    "aime2024": HubBenchmark(
        "HuggingFaceH4/aime_2024",
        "train",
        "problem",
        "answer",
        "2fe88a2f1091d5048c0f36abc874fb997b3dd99a",
    ),
    "aime2025": HubBenchmark(
        "math-ai/aime25", "test", "problem", "answer", "563bb8404243c5f09de6ec262f2db674fe5bce9b"
    ),
    "amc23": HubBenchmark(
        "math-ai/amc23", "test", "question", "answer", "80815d37005feb82cd7f8fbc6901d5d3eff43057"
    ),
    "minerva": HubBenchmark(
        "math-ai/minervamath",
        "test",
        "question",
        "answer",
        "ee46ddc498933b1977577953250ca5c66be64f96",
    ),
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
    """Suites by name (see the module docstring); `limit` keeps the first problems of each.

    Files are read with `math` (default: the task's `task.math`), whose row limit is not used."""
    math = math or (task.math if task is not None else MathDataConfig())
    math = dataclasses.replace(math, limit=0)
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
            math,
            problem_column=b.problem_column,
            answer_column=b.answer_column,
            subset=b.subset,
            revision=b.revision,
        )
        problems = load_problems(b.dataset, b.split, cfg, key=f"suite {name}")
        source = {"dataset": b.dataset, "split": b.split, "revision": b.revision}
        return Suite(name, _limit(problems, limit), "math", source)
    if name == "fixture" or name.endswith((".jsonl", ".parquet")):
        path = FIXTURE_PATH if name == "fixture" else Path(name)
        # The shipped fixture has the default columns; the run's prompt suffix still applies.
        cfg = MathDataConfig(suffix=math.suffix) if name == "fixture" else math
        problems = load_problems(str(path), "train", cfg, key=f"suite {name}")
        label = "fixture" if name == "fixture" else Path(name).stem
        source = {"dataset": str(path), "split": "", "revision": f"sha256:{_sha256(path)}"}
        return Suite(label, _limit(problems, limit), "math", source)
    known = ", ".join([*BENCHMARKS, *GROUPS, "test", "val", "fixture", "PATH.jsonl"])
    raise ConfigError(f"unknown suite {name!r}; known: {known}")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _with_source(suite: Suite, problems: tuple[Problem, ...], **info: Any) -> Suite:
    return dataclasses.replace(suite, problems=problems, source={**suite.source, **info})


def check_suite_golds(
    suites: Sequence[Suite],
    pool: VerifierPool,
    *,
    max_fraction: float,
    verifier: str | None = None,
) -> list[Suite]:
    """Check every suite's golds (graft.verify.golds) with its verifier (or `verifier`): refuse a
    suite above `max_fraction`, report the others' unusable golds, which are kept and scored as
    `error`; the count goes to `Suite.source["unparseable_golds"]`."""
    out = []
    for suite in suites:
        where = f"suite {suite.name}"
        check = check_golds(pool, verifier or suite.verifier, suite.problems, where=where)
        require_golds(check, max_fraction=max_fraction)
        if check is not None and check.bad:
            tqdm.write(f"warning: {check.summary()}; they are scored as errors")
        bad = len(check.bad) if check is not None else 0
        out.append(_with_source(suite, suite.problems, unparseable_golds=bad))
    return out


def drop_long_prompts(
    suites: Sequence[Suite], prompt_length: Callable[[str], int], max_tokens: int
) -> list[Suite]:
    """Each suite without the problems whose prompt is over `max_tokens` tokens (as the model
    sees it), so that one long prompt never ends an evaluation; the count goes to
    `Suite.source["long_prompts_skipped"]` and is reported."""
    out = []
    for suite in suites:
        kept = tuple(p for p in suite.problems if prompt_length(p.prompt) <= max_tokens)
        skipped = len(suite.problems) - len(kept)
        if not kept:
            raise DataError(
                f"suite {suite.name}: every prompt is longer than {max_tokens} tokens "
                "(raise --max-prompt-tokens)"
            )
        if skipped:
            tqdm.write(
                f"warning: suite {suite.name}: {skipped} of {len(suite.problems)} prompts are "
                f"longer than {max_tokens} tokens and are skipped (--max-prompt-tokens)"
            )
        out.append(_with_source(suite, kept, long_prompts_skipped=skipped))
    return out
