"""Reading a trajectory store: listing, validation, filtered scans, lookups by prompt id.

Every read of a shard first proves it: its bytes are hashed as they are read and compared with the
sha256, byte size and row count recorded when it was written (checksum.py), and only then parsed.
A damaged shard is never skipped silently: a strict store (the default) raises an error naming it;
with `strict=False` it is skipped, recorded in `problems` and passed to `on_damage`. Foreign files
and writes that never finished are listed and ignored. A shard of a NEWER schema is refused, never
misread; an older one reads the columns added since at their default (schema.ADDED_IN).

In a store whose store.json records checksums, a shard without its checksum is damaged. A store
written before graft recorded checksums stays readable: its shards without a checksum are read,
but listed as `unverified` (by `info`, `validate` and the CLI), never passed off as proven.
"""

from __future__ import annotations

import json
import re
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from graft.store.checksum import (
    ALGORITHM,
    CHECKSUMS_DIR,
    meta_mismatch,
    meta_sidecar_rel,
    mismatch,
    parse_record,
    read_hashed,
    shard_rel_of,
    sidecar_rel,
)
from graft.store.errors import (
    EMPTY_STORE,
    DamagedShardError,
    StoreError,
    StoreSchemaError,
    not_a_store,
    store_error,
)
from graft.store.fs import open_filesystem
from graft.store.schema import (
    COLUMNS,
    FORMAT_NAME,
    INDEX_COLUMNS,
    SCHEMA,
    SCHEMA_VERSION,
    absent,
    with_defaults,
)

_SHARD = re.compile(r"shards/run=([^/]+)/model=([^/]+)/step_(\d{8})\.parquet$")


@dataclass(frozen=True)
class Shard:
    path: str
    run_id: str
    model: str
    step: int


@dataclass
class Report:
    """What `validate` found: readable shards and rows, and every problem file by name."""

    shards: int = 0
    rows: int = 0
    problems: list[tuple[str, str]] = field(default_factory=list)
    incomplete: list[str] = field(default_factory=list)
    unverified: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


class TrajectoryStore:
    def __init__(
        self,
        uri: str,
        *,
        key: str = "",
        cache_shards: int = 8,
        strict: bool = True,
        on_damage: Callable[[str, str], None] | None = None,
    ) -> None:
        """`key`: the option that named the store (`sft.store`), which its errors name."""
        self.uri = uri
        self.key = key
        self.named = f"{key} {uri}" if key else uri
        self.strict = strict
        self.on_damage = on_damage
        try:
            self.fs, self.root = open_filesystem(uri)
        except (ValueError, ImportError) as err:  # a filesystem nobody knows
            raise store_error(uri, f"cannot open it: {err}", key=key) from None
        self.checksums = self._checksum_algorithm()
        self.problems: list[tuple[str, str]] = []
        self.unverified: list[str] = []  # shards read without a checksum (an older store)
        self._cache: OrderedDict[str, pa.Table] = OrderedDict()
        self._cache_size = cache_shards
        self._index: dict[tuple[str, str | None], dict[str, list[tuple[int, Shard]]]] = {}

    def _checksum_algorithm(self) -> str | None:
        """The store's checksum algorithm from store.json (None: written before checksums)."""
        marker = f"{self.root}/store.json"
        if self.fs.get_file_info(marker).type != pa.fs.FileType.File:
            raise store_error(self.uri, not_a_store(self.fs, self.root), key=self.key)
        try:
            with self.fs.open_input_stream(marker) as f:
                meta = json.loads(f.read().decode())
        except (OSError, ValueError) as err:
            raise store_error(self.uri, f"unreadable store.json ({err})", key=self.key) from None
        algorithm = meta.get("checksums") if isinstance(meta, dict) else None
        if algorithm not in (None, ALGORITHM):
            raise store_error(
                self.uri,
                f"store.json names checksums {algorithm!r}, which this graft cannot verify (it "
                f"knows {ALGORITHM!r}); upgrade graft to read this store",
                key=self.key,
            )
        return algorithm

    # ----------------------------------------------------------------- listing
    def listing(self) -> tuple[list[Shard], list[tuple[str, str]], list[str]]:
        """(shards, foreign files with a reason, unfinished temporary files)."""
        base = f"{self.root}/shards"
        selector = pa.fs.FileSelector(base, recursive=True, allow_not_found=True)
        shards, foreign, partial = [], [], []
        for info in self.fs.get_file_info(selector):
            if info.type != pa.fs.FileType.File:
                continue
            rel = info.path[len(self.root) + 1 :]
            if info.base_name.startswith(".") and info.base_name.endswith(".tmp"):
                partial.append(rel)
                continue
            match = _SHARD.search(rel)
            if match is None:
                foreign.append((rel, "not a graft shard (unexpected name); ignored"))
                continue
            shards.append(Shard(info.path, match[1], match[2], int(match[3])))
        shards.sort(key=lambda s: (s.run_id, s.model, s.step))
        return shards, foreign, partial

    def shards(self, *, model: str | None = None, run_id: str | None = None) -> list[Shard]:
        found = self.listing()[0]
        return [
            s
            for s in found
            if (model is None or s.model == model) and (run_id is None or s.run_id == run_id)
        ]

    def runs(self) -> dict[str, dict[str, Any]]:
        """Each run's metadata (config, versions, commit, cost), proven against its checksum
        where it has one; a damaged file is raised (strict) or left out and reported."""
        out = {}
        for rel in self._run_meta_files():
            data, problem = self._proven_meta(rel)
            if problem:
                if self.strict:
                    raise DamagedShardError(f"{self.named}: {rel}: {problem}")
                self._damaged(rel, problem)
                continue
            out[rel[len("runs/") : -len(".json")]] = json.loads(data.decode())
        return out

    def _run_meta_files(self) -> list[str]:
        selector = pa.fs.FileSelector(f"{self.root}/runs", allow_not_found=True)
        return sorted(
            info.path[len(self.root) + 1 :]
            for info in self.fs.get_file_info(selector)
            if info.base_name.endswith(".json") and not info.base_name.startswith(".")
        )

    def _proven_meta(self, rel: str) -> tuple[bytes, str]:
        """A run metadata file's bytes and what is wrong with them ('' when nothing is; a file
        without a checksum, from a store written before run metadata had one, is unverified)."""
        with self.fs.open_input_stream(f"{self.root}/{rel}") as f:
            data = f.read()
        sidecar = f"{self.root}/{meta_sidecar_rel(rel)}"
        if self.fs.get_file_info(sidecar).type != pa.fs.FileType.File:
            if rel not in self.unverified:
                self.unverified.append(rel)
        else:
            with self.fs.open_input_stream(sidecar) as f:
                problem = meta_mismatch(f.read(), data, rel=rel)
            if problem:
                return data, problem
        try:
            body = json.loads(data.decode())
        except ValueError as err:
            return data, f"not readable JSON ({err})"
        return data, "" if isinstance(body, dict) else "not a JSON object"

    # ----------------------------------------------------------------- shards
    def _checksum(self, rel: str) -> dict[str, Any] | None:
        """The shard's recorded checksum; None when it has none in a store from before checksums.
        Raises StoreError when it is missing (in a checksummed store) or unreadable."""
        path = f"{self.root}/{sidecar_rel(rel)}"
        try:
            with self.fs.open_input_stream(path) as f:
                body = f.read()
        except OSError as err:
            if self.fs.get_file_info(path).type != pa.fs.FileType.NotFound:
                raise StoreError(f"{rel}: unreadable checksum {sidecar_rel(rel)} ({err})") from None
            if self.checksums is None:
                return None
            raise StoreError(
                f"{rel}: damaged shard (its checksum {sidecar_rel(rel)} is missing, so its rows "
                f"cannot be proven intact)"
            ) from None
        try:
            return parse_record(body, shard_rel=rel)
        except (ValueError, UnicodeDecodeError) as err:
            raise StoreError(f"{rel}: damaged checksum {sidecar_rel(rel)} ({err})") from None

    def _proven_bytes(self, rel: str, path: str) -> tuple[pa.Buffer, dict[str, Any] | None]:
        """The shard's bytes, proven against its checksum (record None: an unverified shard)."""
        record = self._checksum(rel)
        try:
            data, digest = read_hashed(self.fs, path)
        except Exception as exc:
            raise StoreError(f"{rel}: unreadable shard ({type(exc).__name__}: {exc})") from None
        if record is None:
            if rel not in self.unverified:
                self.unverified.append(rel)
        elif why := mismatch(record, data, digest):
            raise StoreError(f"{rel}: damaged shard ({why})")
        return data, record

    def read_shard(self, shard: Shard, columns: Sequence[str] | None = None) -> pa.Table:
        """One shard, checked: its checksum first, then graft format, known schema version,
        expected columns and the recorded row count."""
        rel = shard.path[len(self.root) + 1 :]
        data, record = self._proven_bytes(rel, shard.path)
        try:
            pf = pq.ParquetFile(pa.BufferReader(data))
            meta = pf.schema_arrow.metadata or {}
            if meta.get(b"graft.format", b"").decode() != FORMAT_NAME:
                raise StoreError(f"{rel}: not written by graft (no graft format marker)")
            version = int(meta.get(b"graft.schema_version", b"0"))
            wanted, present = list(columns or COLUMNS), pf.schema_arrow.names
            missing = absent(wanted, present, version)
            table = None
            if version <= SCHEMA_VERSION and not missing:
                table = with_defaults(pf.read(columns=[c for c in wanted if c in present]), wanted)
        except StoreError:
            raise
        except Exception as exc:
            raise StoreError(f"{rel}: unreadable shard ({type(exc).__name__}: {exc})") from None
        if version > SCHEMA_VERSION:
            raise StoreSchemaError(
                f"{rel}: written with trajectory schema version {version}, but this graft reads "
                f"versions up to {SCHEMA_VERSION}; upgrade graft to read this store"
            )
        if missing:
            raise StoreError(f"{rel}: missing columns {missing}")
        if record is not None and table.num_rows != record["rows"]:
            raise StoreError(
                f"{rel}: damaged shard ({table.num_rows} rows, its checksum records "
                f"{record['rows']})"
            )
        if "token_ids" in table.column_names and "logprobs" in table.column_names:
            num_logprobs = pc.list_value_length(table["logprobs"])
            lengths_ok = pc.all(  # records imported without log-probs have none at all
                pc.or_(
                    pc.equal(num_logprobs, 0),
                    pc.equal(pc.list_value_length(table["token_ids"]), num_logprobs),
                )
            )
            if table.num_rows and not lengths_ok.as_py():
                raise StoreError(f"{rel}: damaged shard (token_ids and logprobs differ in length)")
        return table

    def _read_ok(self, shard: Shard, columns: Sequence[str] | None) -> pa.Table | None:
        """read_shard; a damaged shard raises when strict, else it is recorded, reported to
        `on_damage` and skipped (None). A newer schema always raises."""
        try:
            return self.read_shard(shard, columns)
        except StoreSchemaError:
            raise
        except StoreError as err:
            if self.strict:
                raise DamagedShardError(f"{self.named}: {err}") from None
            self._damaged(shard.path[len(self.root) + 1 :], str(err))
            return None

    def _damaged(self, rel: str, why: str) -> None:
        """A damaged file skipped (not strict): recorded once and reported to `on_damage`."""
        if all(rel != seen for seen, _ in self.problems):
            self.problems.append((rel, why))
            if self.on_damage is not None:
                self.on_damage(rel, why)

    # ----------------------------------------------------------------- scans
    def scan(
        self,
        *,
        models: Iterable[str] | None = None,
        run_ids: Iterable[str] | None = None,
        steps: tuple[int, int] | None = None,
        min_reward: float | None = None,
        max_reward: float | None = None,
        columns: Sequence[str] | None = None,
    ) -> pa.Table:
        """Rows matching the filters (steps inclusive); damaged shards as `strict` says."""
        models = set(models) if models is not None else None
        run_ids = set(run_ids) if run_ids is not None else None
        tables = []
        for shard in self.listing()[0]:
            if models is not None and shard.model not in models:
                continue
            if run_ids is not None and shard.run_id not in run_ids:
                continue
            if steps is not None and not steps[0] <= shard.step <= steps[1]:
                continue
            want = None if columns is None else sorted(set(columns) | {"reward"})
            table = self._read_ok(shard, want)
            if table is None:
                continue
            if min_reward is not None:
                table = table.filter(pc.greater_equal(table["reward"], min_reward))
            if max_reward is not None:
                table = table.filter(pc.less_equal(table["reward"], max_reward))
            if columns is not None:
                table = table.select(list(columns))
            tables.append(table)
        if not tables:
            schema = SCHEMA if columns is None else pa.schema([SCHEMA.field(c) for c in columns])
            return schema.empty_table()
        return pa.concat_tables(tables)

    # ----------------------------------------------------------------- lookups
    def pick_model(self, wanted: str, *, key: str) -> str:
        """The model `wanted` (config key `key`), or the only model when `wanted` is empty; one
        line naming the models here otherwise (an empty store: the store, named or not)."""
        models = sorted({s.model for s in self.shards()})
        if not models:
            raise store_error(self.uri, EMPTY_STORE, key=self.key)
        if wanted:
            if wanted not in models:
                raise StoreError(
                    f"{key}: no model {wanted!r} in {self.uri}; models there: {models}"
                )
            return wanted
        if len(models) != 1:
            raise StoreError(f"{key}: {self.uri} holds models {models}; pick one")
        return models[0]

    def resolve_run(self, model: str, run_id: str | None) -> str:
        runs = sorted({s.run_id for s in self.shards(model=model)})
        if run_id is not None:
            if run_id not in runs:
                raise StoreError(f"{self.named}: no rollouts of model {model!r} in run {run_id!r}")
            return run_id
        if not runs:
            raise StoreError(
                f"{self.named}: no rollouts of model {model!r}; models here: "
                f"{sorted({s.model for s in self.shards()})}"
            )
        if len(runs) > 1:
            raise StoreError(f"{self.named}: model {model!r} appears in runs {runs}; choose one")
        return runs[0]

    def index(self, model: str, run_id: str | None = None) -> dict[str, list[tuple[int, Shard]]]:
        """prompt id -> [(step, shard)] for one model's run, from the light columns only."""
        run = self.resolve_run(model, run_id)
        key = (model, run)
        if key not in self._index:
            entries: dict[str, list[tuple[int, Shard]]] = {}
            for shard in self.shards(model=model, run_id=run):
                table = self._read_ok(shard, list(INDEX_COLUMNS))
                if table is None:
                    continue
                for pid in set(table["prompt_id"].to_pylist()):
                    entries.setdefault(pid, []).append((shard.step, shard))
            self._index[key] = entries
        return self._index[key]

    def _cached(self, shard: Shard) -> pa.Table | None:
        if shard.path in self._cache:
            self._cache.move_to_end(shard.path)
            return self._cache[shard.path]
        table = self._read_ok(shard, None)
        if table is not None:
            self._cache[shard.path] = table
            if len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return table

    def lookup(
        self,
        prompt_ids: Iterable[str],
        *,
        model: str,
        run_id: str | None = None,
        step: int | None = None,
    ) -> dict[str, list[dict[str, Any]]]:
        """Each prompt's group: the most recent record (or the one at `step`), members in order.

        Prompts with no record are absent from the result."""
        index = self.index(model, run_id)
        wanted: dict[Shard, list[str]] = {}
        for pid in dict.fromkeys(prompt_ids):
            entries = index.get(pid, [])
            if step is not None:
                entries = [e for e in entries if e[0] == step]
            if entries:
                wanted.setdefault(max(entries, key=lambda e: e[0])[1], []).append(pid)
        out: dict[str, list[dict[str, Any]]] = {}
        for shard, pids in wanted.items():
            table = self._cached(shard)
            if table is None:
                continue
            rows = table.filter(pc.is_in(table["prompt_id"], value_set=pa.array(pids))).to_pylist()
            for row in rows:
                out.setdefault(row["prompt_id"], []).append(row)
        for rows in out.values():
            rows.sort(key=lambda r: r["member"])
        return out

    # ----------------------------------------------------------------- summaries
    def validate(self) -> Report:
        """Every shard proven against its checksum and read whole (every row group, every
        column); every other file under shards/ and checksums/ accounted for."""
        shards, foreign, partial = self.listing()
        report = Report(problems=list(foreign), incomplete=partial)
        for shard in shards:
            rel = shard.path[len(self.root) + 1 :]
            try:
                table = self.read_shard(shard)
            except StoreError as err:
                report.problems.append((rel, str(err)))
                continue
            report.shards += 1
            report.rows += table.num_rows
        self._sidecars(shards, report)
        for rel in self._run_meta_files():
            _, problem = self._proven_meta(rel)
            if problem:
                report.problems.append((rel, problem))
        report.unverified = [r for r in self.unverified if r not in dict(report.problems)]
        return report

    def _sidecars(self, shards: Sequence[Shard], report: Report) -> None:
        """Sidecars without their shard are interrupted writes; other files there are foreign."""
        names = {s.path[len(self.root) + 1 :] for s in shards}
        selector = pa.fs.FileSelector(
            f"{self.root}/{CHECKSUMS_DIR}", recursive=True, allow_not_found=True
        )
        for info in self.fs.get_file_info(selector):
            if info.type != pa.fs.FileType.File:
                continue
            rel = info.path[len(self.root) + 1 :]
            if info.base_name.startswith(".") and info.base_name.endswith(".tmp"):
                report.incomplete.append(rel)
            elif rel.startswith(f"{CHECKSUMS_DIR}/runs/") and rel.endswith(".json.json"):
                continue  # a run metadata file's checksum, checked with its file
            elif not (rel.endswith(".parquet.json") and _SHARD.search(shard_rel_of(rel))):
                report.problems.append((rel, "not a graft checksum (unexpected name); ignored"))
            elif shard_rel_of(rel) not in names:
                report.incomplete.append(rel)

    def info(self) -> dict[str, Any]:
        """Per-model summaries. Every column is read, so that any damaged shard shows up (raised
        when strict, else listed under `problems`)."""
        columns = ["model", "run_id", "step", "prompt_id", "reward", "schema_version", "logprobs"]
        table = self.scan().select(columns)
        models: dict[str, dict[str, Any]] = {}
        for model in sorted(set(table["model"].to_pylist())):
            sub = table.filter(pc.equal(table["model"], model))
            rewards = sub["reward"]
            models[model] = {
                "rows": sub.num_rows,
                "runs": sorted(set(sub["run_id"].to_pylist())),
                "steps": [pc.min(sub["step"]).as_py(), pc.max(sub["step"]).as_py()],
                "prompts": len(set(sub["prompt_id"].to_pylist())),
                "reward_rate": pc.mean(rewards).as_py() if sub.num_rows else 0.0,
                "has_logprobs": bool(
                    pc.all(pc.greater(pc.list_value_length(sub["logprobs"]), 0)).as_py()
                ),
                "rows_with_logprobs": int(
                    pc.sum(pc.greater(pc.list_value_length(sub["logprobs"]), 0)).as_py() or 0
                ),
            }
        return {
            "uri": self.uri,
            "rows": table.num_rows,
            "models": models,
            "prompts": len(set(table["prompt_id"].to_pylist())),
            "schema_versions": sorted(set(table["schema_version"].to_pylist())),
            "checksums": self.checksums,
            "problems": list(self.problems),
            "unverified": list(self.unverified),
        }
