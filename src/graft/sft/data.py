"""What `graft sft` learns from: a store's responses that this run's verifier calls correct.

The rows of one model's run in a trajectory store (`sft.store`, `sft.peer_model`, `sft.peer_run`)
are taken in order (step, prompt, member), identical (prompt, response) pairs once, and
re-verified with the receiving run's verifier against the stored gold answers (a response the
peer's verifier called correct may not be correct here, and the other way round). The correct
ones, at most `sft.max_per_prompt` per prompt, are split by prompt: a prompt is held out when a
hash of its id and the run seed falls below `sft.val_fraction`, so the split does not depend on
the store's order or size.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from graft.config import SftConfig
from graft.errors import DataError
from graft.store import StoreError, TrajectoryStore
from graft.types import Problem, Verdict
from graft.verify.pool import VerifierPool

COLUMNS = (
    "step",
    "member",
    "prompt_id",
    "prompt",
    "gold",
    "skill",
    "response",
    "finish_reason",
    "verifier",
)


@dataclass(frozen=True)
class Example:
    """One verified-correct response, as its generator wrote it."""

    problem: Problem
    text: str
    stopped: bool
    """The generator stopped on EOS (the receiver then appends its own EOS)."""


@dataclass(frozen=True)
class Examples:
    train: tuple[Example, ...]
    val: tuple[Example, ...]
    counts: Mapping[str, int]
    """rows, distinct, correct, kept, reward_changed, train/val prompts and responses."""

    @property
    def val_problems(self) -> tuple[Problem, ...]:
        """The held-out prompts, each once (their gold answers for the held-out accuracy)."""
        return tuple({e.problem.id: e.problem for e in self.val}.values())


def held_out(prompt_id: str, *, seed: int, fraction: float) -> bool:
    """Whether a prompt is a validation prompt: a hash of (seed, prompt id) below `fraction`."""
    digest = hashlib.sha256(f"{seed}/{prompt_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < fraction


def distinct_rows(rows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Rows in (step, prompt, member) order, each (prompt, response) pair once."""
    ordered = sorted(rows, key=lambda r: (r["step"], r["prompt_id"], r["member"]))
    seen: set[tuple[str, str]] = set()
    out = []
    for r in ordered:
        key = (r["prompt_id"], r["response"])
        if key not in seen:
            seen.add(key)
            out.append(r)
    return out


def select(
    rows: Sequence[Mapping[str, Any]],
    verdicts: Sequence[Verdict],
    cfg: SftConfig,
    *,
    seed: int,
    stored_rewards: Sequence[float] = (),
) -> Examples:
    """The correct responses among distinct `rows` (with their `verdicts`), capped per prompt
    and split into training and held-out prompts (pure)."""
    per_prompt: dict[str, int] = {}
    train, val = [], []
    correct = 0
    for row, verdict in zip(rows, verdicts, strict=True):
        if not verdict.correct:
            continue
        correct += 1
        pid = row["prompt_id"]
        if cfg.max_per_prompt and per_prompt.get(pid, 0) >= cfg.max_per_prompt:
            continue
        per_prompt[pid] = per_prompt.get(pid, 0) + 1
        problem = Problem(row["prompt"], row["gold"], skill=row["skill"] or "", id=pid)
        example = Example(problem, row["response"], row["finish_reason"] == "stop")
        (val if held_out(pid, seed=seed, fraction=cfg.val_fraction) else train).append(example)
    changed = sum(float(v.correct) != r for v, r in zip(verdicts, stored_rewards, strict=False))
    counts = {
        "distinct": len(rows),
        "correct": correct,
        "reward_changed": changed,
        "train_responses": len(train),
        "train_prompts": len({e.problem.id for e in train}),
        "val_responses": len(val),
        "val_prompts": len({e.problem.id for e in val}),
    }
    return Examples(tuple(train), tuple(val), counts)


def read_examples(cfg: SftConfig, *, pool: VerifierPool, verifier: str, seed: int) -> Examples:
    """The store's responses that `verifier` calls correct, split (see the module docstring);
    one line naming the store when there is nothing to learn from."""
    try:
        store = TrajectoryStore(cfg.store, key="sft.store")
        model = store.pick_model(cfg.peer_model, key="sft.peer_model")
        run = store.resolve_run(model, cfg.peer_run or None)
        table = store.scan(models=[model], run_ids=[run], columns=[*COLUMNS, "reward"])
    except StoreError as err:  # a shard's own error names the shard, not the store
        text = str(err)
        raise StoreError(
            text if text.startswith("sft.") else f"sft.store {cfg.store}: {text}"
        ) from None
    rows = distinct_rows(table.to_pylist())
    items = [(verifier, r["response"], r["gold"], r["prompt"]) for r in rows]
    verdicts = pool.verify(items) if items else []
    examples = select(
        rows, verdicts, cfg, seed=seed, stored_rewards=[float(r["reward"]) for r in rows]
    )
    counts = {"rows": table.num_rows, **examples.counts}
    if not examples.counts["correct"]:
        theirs = sorted({r["verifier"] for r in rows})
        other = [v for v in theirs if v != verifier]
        why = (
            f"; its rows were verified with {other}, this run's verifier is {verifier!r}: "
            "another task's store?"
            if other
            else ""
        )
        raise DataError(
            f"sft.store {cfg.store}: none of the {len(rows)} distinct responses of model "
            f"{model!r} (run {run}) is correct under verifier {verifier!r}: nothing to learn "
            f"from{why}"
        )
    if not examples.train:
        raise DataError(
            f"sft.store {cfg.store}: all {counts['correct']} correct responses fall on held-out "
            f"prompts (sft.val_fraction={cfg.val_fraction}); lower it"
        )
    return Examples(examples.train, examples.val, counts)
