"""A trajectory store as a dataset others can load and train from (`graft store export --format
hf`): the store's rows, checked shard by shard and written again as a store of the current schema,
with a dataset card (README.md) that `datasets.load_dataset(DIR)` reads and that holds the schema,
the provenance, the verifier versions and the models. The folder is still a graft store, so it
goes back in as `exchange.stored.path` with the same token ids, log-probs, rewards and
advantages."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import yaml

from graft.store.reader import DamagedShardError, StoreError, TrajectoryStore
from graft.store.schema import FORMAT_NAME, SCHEMA_VERSION, record_table
from graft.store.writer import StoreWriter

DATA_FILES = "shards/**/*.parquet"
"""What the card points `datasets` at: every shard, one split."""


@dataclass(frozen=True)
class Exported:
    """What an export wrote."""

    path: Path
    rows: int
    shards: int
    runs: tuple[str, ...]
    models: tuple[str, ...]


def export_dataset(
    source: TrajectoryStore, out: Path, *, models: Sequence[str] | None = None
) -> Exported:
    """Write `source`'s rows (of `models`, default all) to the new folder `out`, with its card.
    Every shard is proven against its checksum first; nothing is left at `out` on failure."""
    from tqdm.auto import tqdm

    runs = source.runs()
    shards = [s for s in source.shards() if models is None or s.model in set(models)]
    if not shards:
        raise StoreError(f"{source.named}: no rows to export")
    tmp = out.with_name(f".{out.name}.export-tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    writers: dict[str, StoreWriter] = {}
    tables: list[pa.Table] = []
    try:
        for shard in tqdm(shards, desc="export", unit="shard", disable=None):
            try:
                table = source.read_shard(shard)
            except StoreError as err:
                raise DamagedShardError(f"{source.named}: {err}") from None
            writer = writers.get(shard.run_id)
            if writer is None:
                meta = runs.get(shard.run_id, {})
                writer = StoreWriter(str(tmp), run_id=shard.run_id, run_meta=meta, background=False)
                writers[shard.run_id] = writer
            writer.write(shard.model, shard.step, table)
            tables.append(table.drop_columns(["token_ids", "logprobs", "prompt", "response"]))
        for writer in writers.values():
            writer.close()
        rows = pa.concat_tables(tables)
        (tmp / "README.md").write_text(dataset_card(rows, runs), encoding="utf-8")
        os.replace(tmp, out)  # the commit: the folder appears whole
    except BaseException:
        with contextlib.suppress(OSError):
            shutil.rmtree(tmp)
        raise
    return Exported(
        out,
        rows.num_rows,
        len(shards),
        tuple(sorted(writers)),
        tuple(sorted(set(rows["model"].to_pylist()))),
    )


def _distinct(rows: pa.Table, *names: str) -> list[tuple[Any, ...]]:
    """The distinct combinations of columns `names`, sorted."""
    keys = rows.group_by(list(names)).aggregate([]).to_pylist()
    return sorted(tuple(k[n] for n in names) for k in keys)


def _models_table(rows: pa.Table) -> list[str]:
    lines = [
        "| model | revision | tokenizer | rows | steps | reward rate |",
        "|---|---|---|---|---|---|",
    ]
    for model, revision, tokenizer in _distinct(rows, "model", "model_revision", "tokenizer"):
        mine = rows.filter(
            pc.and_(pc.equal(rows["model"], model), pc.equal(rows["model_revision"], revision))
        )
        steps = pc.min_max(mine["step"]).as_py()
        rate = pc.mean(mine["reward"]).as_py() or 0.0
        lines.append(
            f"| `{model}` | `{revision}` | `{tokenizer}` | {mine.num_rows} | "
            f"{steps['min']}-{steps['max']} | {rate:.3f} |"
        )
    return lines


def _provenance(runs: Mapping[str, Mapping[str, Any]], rows: pa.Table) -> list[str]:
    lines = []
    for (run_id,) in _distinct(rows, "run_id"):
        meta = runs.get(run_id, {})
        task = (meta.get("config") or {}).get("task") or {}
        said = [f"created {meta['created']}"] if meta.get("created") else []
        said += [f"task `{task['name']}`"] if task.get("name") else []
        said += (
            [f"graft {meta['versions']['graft-rl']}"]
            if "graft-rl" in meta.get("versions", {})
            else []
        )
        said += [f"commit `{meta['git_commit']}`"] if meta.get("git_commit") else []
        lines.append(f"- `{run_id}`: {', '.join(said) or 'no run metadata'}")
    return lines


def dataset_card(rows: pa.Table, runs: Mapping[str, Mapping[str, Any]]) -> str:
    """README.md of an exported store: `datasets`' front matter, then what the rows are, where
    they come from, how they were verified and every column."""
    front = {
        "configs": [{"config_name": "default", "data_files": [
            {"split": "train", "path": DATA_FILES}
        ]}],
        "tags": ["graft", "rlvr", "grpo", "trajectories"],
    }  # fmt: skip
    verifiers = [
        f"- `{v}`, version `{ver}`" for v, ver in _distinct(rows, "verifier", "verifier_version")
    ]
    lines = [
        "---",
        yaml.safe_dump(front, sort_keys=False).rstrip(),
        "---",
        "",
        "# Trajectories",
        "",
        f"{rows.num_rows} responses, grouped by prompt, as graft's trajectory store "
        f"(`{FORMAT_NAME}`, schema version {SCHEMA_VERSION}): the generator's token ids and "
        "per-token log-probs, the verifier's verdict and reward, and the group's statistics and "
        "advantage, with each response's sampling settings.",
        "",
        "```python",
        "import datasets",
        'rows = datasets.load_dataset("PATH")["train"]',
        "```",
        "",
        "The folder is also a graft trajectory store: `graft train` takes it as a stored peer "
        "(`exchange.source: stored`, `exchange.stored.path: PATH`), and `graft store validate "
        "PATH` proves every shard against its checksum (`checksums/`).",
        "",
        "## Models",
        "",
        *_models_table(rows),
        "",
        "## Verifiers",
        "",
        *verifiers,
        "",
        "## Provenance",
        "",
        "Each run's resolved config, package versions and commit are in `runs/<run_id>.json`.",
        "",
        *_provenance(runs, rows),
        "",
        "## Columns",
        "",
        record_table(),
        "",
    ]
    return "\n".join(lines)
