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

SCHEMA_VERSION = 4
FORMAT_NAME = "graft-trajectory-store"


@dataclass(frozen=True)
class Column:
    """One column of the record: its Arrow type, what it means, and the schema version that
    added it (a shard of an older version reads it at its default)."""

    name: str
    type: pa.DataType
    doc: str
    added_in: int = 1
    default: Any = 0
    """What a shard written before `added_in` reads for it."""


RECORD = (
    Column("schema_version", pa.int16(), "The record's schema version (this table's columns)."),
    Column("run_id", pa.string(), "The run (or `graft sample` log) that wrote the row."),
    Column("model", pa.string(), "The policy's name in that run (`models.N.name`)."),
    Column("model_revision", pa.string(), "A hash of the policy's weights when the run began."),
    Column("tokenizer", pa.string(), "The tokenizer the token ids are in (its name or path)."),
    Column("step", pa.int32(), "The training step whose rollout holds the response."),
    Column("prompt_id", pa.string(), "A hash of the prompt's content: the key of lookups."),
    Column("prompt", pa.string(), "The problem's text, as the task states it."),
    Column("gold", pa.string(), "The gold answer the verifier judged against (tests for code)."),
    Column("skill", pa.string(), "The problem's skill or subset (empty when the task has none)."),
    Column("member", pa.int16(), "The response's place in its group (0 to group_size - 1)."),
    Column("response", pa.string(), "The response's text, as decoded."),
    Column(
        "token_ids",
        pa.list_(pa.int32()),
        "The generator's token ids of the response (ending with EOS when it stopped).",
    ),
    Column(
        "logprobs",
        pa.list_(pa.float32()),
        "The generation log-probability of each token id under the behavior policy (empty when "
        "unknown: the paper's weight then cannot be computed).",
    ),
    Column("finish_reason", pa.string(), "`stop` (EOS) or `length` (the token limit)."),
    Column("reward", pa.float64(), "The verifier's reward: 1 for correct, else 0."),
    Column("verdict", pa.string(), "The verdict's category: correct, wrong, no_answer, error, ..."),
    Column("verdict_detail", pa.string(), "What the verifier said about it, clipped."),
    Column("verifier", pa.string(), "The verifier's name (`math`, `code`, a plug-in's path)."),
    Column(
        "verifier_version",
        pa.string(),
        "The verifier's version: its revision and the versions of the packages it depends on.",
    ),
    Column("group_size", pa.int16(), "Responses in the group (n)."),
    Column("group_successes", pa.int16(), "Correct responses in the group."),
    Column("group_mean", pa.float64(), "The group's mean reward."),
    Column("group_std", pa.float64(), "The group's reward standard deviation (n - 1)."),
    Column("advantage", pa.float64(), "The response's group-relative advantage in its own run."),
    Column("replaced", pa.bool_(), "Whether a peer's group replaced this group in the update."),
    Column("temperature", pa.float32(), "The sampling temperature."),
    Column("top_p", pa.float32(), "The sampling nucleus."),
    Column("top_k", pa.int32(), "The sampling top-k (0: off)."),
    Column("max_new_tokens", pa.int32(), "The response's token limit."),
    Column(
        "round",
        pa.int16(),
        "0: the step's own rollouts; k: the k-th extra round of dynamic sampling "
        "(`algo.zero_contrast` resampling), on prompts the step's batch did not hold.",
        added_in=2,
    ),
    Column(
        "log_reward",
        pa.float64(),
        "The reward the source log gave the response, beside graft's own verdict (`graft store "
        "import`: the sum of its reward columns); empty for rows graft sampled itself.",
        added_in=3,
        default=None,
    ),
    Column(
        "log_columns",
        pa.string(),
        "The source log's own values of the response, as a JSON object (`graft store import`): "
        "each reward column, and every other column the log had beside the prompt, the response, "
        "the step and the advantage (a TRL `log_extra` column, a verl extra), never summed; "
        "empty for rows graft sampled itself.",
        added_in=4,
        default=None,
    ),
)
"""Every column of a store's rows, in order: the schema, and the documentation's store
reference (scripts/gen_docs.py) generated from it."""

ADDED_IN = {c.name: c.added_in for c in RECORD if c.added_in > 1}
"""Columns added after version 1, with the version that added them: a shard of an older version
reads them as their default (`round`: 0, the step's own rollouts, the only ones it stored;
`log_reward` and `log_columns`: empty, graft's own rows)."""

SCHEMA = pa.schema(
    [(c.name, c.type) for c in RECORD],
    metadata={
        b"graft.format": FORMAT_NAME.encode(),
        b"graft.schema_version": str(SCHEMA_VERSION).encode(),
    },
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
    log_rewards: Sequence[Sequence[float | None]] = (),
    log_columns: Sequence[Sequence[str | None]] = (),
) -> dict[str, list[Any]]:
    """Columns (name -> values) for every response of a policy's groups at one step; `rounds`:
    each group's sampling round (default 0, the step's own); `log_rewards` and `log_columns`:
    each response's reward and own values (JSON) in the log it was imported from (default
    none)."""
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
                "log_reward": log_rewards[gi][j] if log_rewards else None,
                "log_columns": log_columns[gi][j] if log_columns else None,
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
            default = next(c.default for c in RECORD if c.name == name)
            table = table.append_column(field, pa.array([default] * table.num_rows, field.type))
    return table.select(list(wanted))


def to_table(columns: Mapping[str, list[Any]] | pa.Table) -> pa.Table:
    """Rows of the record's schema (its metadata included): from columns by name, or a table
    of the same columns and types (read from a shard), whose values are kept as they are."""
    if isinstance(columns, pa.Table):
        if columns.schema.remove_metadata() != SCHEMA.remove_metadata():
            raise ValueError(f"rows of another schema: {columns.schema.names}")
        return pa.Table.from_arrays(columns.columns, schema=SCHEMA)
    return pa.Table.from_pydict(dict(columns), schema=SCHEMA)


def record_table() -> str:
    """The record's columns as a Markdown table: the documentation's store reference and an
    exported dataset's card show the same one."""
    lines = ["| column | type | since version | meaning |", "|---|---|---|---|"]
    for c in RECORD:
        doc = c.doc.replace("|", "\\|")
        lines.append(f"| `{c.name}` | `{c.type}` | {c.added_in} | {doc} |")
    return "\n".join(lines)
