"""Trajectory store: every rollout with its provenance, in sharded Parquet, for reuse."""

from graft.store.reader import Report, Shard, StoreError, StoreSchemaError, TrajectoryStore
from graft.store.schema import SCHEMA, SCHEMA_VERSION, Provenance, group_rows, to_table
from graft.store.writer import StoreWriter

__all__ = [
    "SCHEMA",
    "SCHEMA_VERSION",
    "Provenance",
    "Report",
    "Shard",
    "StoreError",
    "StoreSchemaError",
    "StoreWriter",
    "TrajectoryStore",
    "group_rows",
    "to_table",
]
