"""The trajectory store's record schema: one row per response, with its full provenance.

Schema versions only grow. A reader refuses a shard whose version is newer than it knows (it would
otherwise misread it) and reads every older version it supports.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from graft.types import Group

SCHEMA_VERSION = 2
FORMAT_NAME = "graft-trajectory-store"
ADDED_IN = {"round": 2}
"""Columns added after version 1, with the version that added them: a shard of an older version
reads them as their default (`round`: 0, the step's own rollouts, the only ones it stored)."""

SCHEMA = pa.schema(
    [
        ("schema_version", pa.int16()),
        ("run_id", pa.string()),
        ("model", pa.string()),
        ("model_revision", pa.string()),
        ("tokenizer", pa.string()),
        ("step", pa.int32()),
        ("prompt_id", pa.string()),
        ("prompt", pa.string()),
        ("gold", pa.string()),
        ("skill", pa.string()),
        ("member", pa.int16()),
        ("response", pa.string()),
        ("token_ids", pa.list_(pa.int32())),
        ("logprobs", pa.list_(pa.float32())),
        ("finish_reason", pa.string()),
        ("reward", pa.float64()),
        ("verdict", pa.string()),
        ("verdict_detail", pa.string()),
        ("verifier", pa.string()),
        ("verifier_version", pa.string()),
        ("group_size", pa.int16()),
        ("group_successes", pa.int16()),
        ("group_mean", pa.float64()),
        ("group_std", pa.float64()),
        ("advantage", pa.float64()),
        ("replaced", pa.bool_()),
        ("temperature", pa.float32()),
        ("top_p", pa.float32()),
        ("top_k", pa.int32()),
        ("max_new_tokens", pa.int32()),
        # 0: the step's own rollouts; k: the k-th extra round of dynamic sampling
        # (models.N.zero_contrast.mode=resample), on prompts the step's batch did not hold.
        ("round", pa.int16()),
    ],
    metadata={b"graft.format": FORMAT_NAME.encode(), b"graft.schema_version": b"2"},
)
COLUMNS = tuple(SCHEMA.names)
INDEX_COLUMNS = ("model", "run_id", "step", "prompt_id")


@dataclass(frozen=True)
class Provenance:
    """What every row of one policy's rollouts shares."""

    run_id: str
    model: str
    model_revision: str
    tokenizer: str
    verifier: str
    verifier_version: str
    temperature: float
    top_p: float
    top_k: int
    max_new_tokens: int


def group_rows(
    groups: Sequence[Group],
    *,
    step: int,
    prov: Provenance,
    replaced: Sequence[bool] = (),
    rounds: Sequence[int] = (),
) -> dict[str, list[Any]]:
    """Columns (name -> values) for every response of a policy's groups at one step; `rounds`:
    each group's sampling round (default 0, the step's own)."""
    cols: dict[str, list[Any]] = {name: [] for name in COLUMNS}
    for gi, group in enumerate(groups):
        rewards = group.rewards_G
        n = len(rewards)
        mean = sum(rewards) / n
        std = (sum((r - mean) ** 2 for r in rewards) / (n - 1)) ** 0.5 if n > 1 else 0.0
        was_replaced = bool(replaced[gi]) if replaced else False
        for j, (c, v, a) in enumerate(
            zip(group.rollout.completions_G, group.verdicts_G, group.advantages_G)
        ):
            row = {
                "schema_version": SCHEMA_VERSION,
                "run_id": prov.run_id,
                "model": prov.model,
                "model_revision": prov.model_revision,
                "tokenizer": prov.tokenizer,
                "step": step,
                "prompt_id": group.problem.id,
                "prompt": group.problem.prompt,
                "gold": group.problem.gold,
                "skill": group.problem.skill,
                "member": j,
                "response": c.text,
                "token_ids": list(c.token_ids),
                "logprobs": list(c.logprobs),
                "finish_reason": c.finish_reason,
                "reward": v.reward,
                "verdict": v.category,
                "verdict_detail": v.detail,
                "verifier": prov.verifier,
                "verifier_version": prov.verifier_version,
                "group_size": n,
                "group_successes": group.num_correct,
                "group_mean": mean,
                "group_std": std,
                "advantage": a,
                "replaced": was_replaced,
                "temperature": prov.temperature,
                "top_p": prov.top_p,
                "top_k": prov.top_k,
                "max_new_tokens": prov.max_new_tokens,
                "round": rounds[gi] if rounds else 0,
            }
            for name, value in row.items():
                cols[name].append(value)
    return cols


def absent(wanted: Sequence[str], present: Sequence[str], version: int) -> list[str]:
    """The columns of `wanted` that a shard of `version` holding `present` lacks, those added
    after its version aside (they read at their default: `with_defaults`)."""
    return [c for c in wanted if c not in present and ADDED_IN.get(c, 0) <= version]


def with_defaults(table: pa.Table, wanted: Sequence[str]) -> pa.Table:
    """`table` (a shard of an older version) with the columns of `wanted` it lacks added at their
    default (`ADDED_IN`), in the order of `wanted`."""
    for name in wanted:
        if name not in table.column_names:
            field = SCHEMA.field(name)
            table = table.append_column(field, pa.array([0] * table.num_rows, field.type))
    return table.select(list(wanted))


def to_table(columns: Mapping[str, list[Any]]) -> pa.Table:
    return pa.Table.from_pydict(dict(columns), schema=SCHEMA)
