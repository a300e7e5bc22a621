"""Trajectory store: every rollout with its provenance, in sharded and checksummed Parquet."""

from graft.store.reader import (
    DamagedShardError,
    Report,
    Shard,
    StoreError,
    StoreSchemaError,
    TrajectoryStore,
)
from graft.store.schema import SCHEMA, SCHEMA_VERSION, Provenance, group_rows, to_table
from graft.store.writer import StoreWriter, check_store_target

__all__ = [
    "SCHEMA",
    "SCHEMA_VERSION",
    "DamagedShardError",
    "Provenance",
    "Report",
    "Shard",
    "StoreError",
    "StoreSchemaError",
    "StoreWriter",
    "TrajectoryStore",
    "check_store_target",
    "group_rows",
    "to_table",
]
