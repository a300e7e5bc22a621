"""The errors of reading a trajectory store, and the one wording of what keeps a path from being
read as one (missing, a file, a directory without store.json, empty), whichever command opened it.
"""

from __future__ import annotations

import pyarrow.fs as pafs

from graft.errors import DataError
from graft.store.fs import nearest_existing


class StoreError(DataError):
    """A store that cannot be used as asked; the message names the path."""


class DamagedShardError(StoreError):
    """A shard that cannot be read whole (truncated, corrupt, inconsistent)."""


class StoreSchemaError(StoreError):
    """A shard written by a newer graft than this one."""


EMPTY_STORE = "an empty store (no rollouts written yet)"


def store_error(uri: str, why: str, *, key: str = "") -> StoreError:
    """A store that cannot be read as asked, in the same words wherever a store is opened:
    `KEY URI: why` (`key`: the option that named the store; none for a command's argument)."""
    return StoreError(f"{key} {uri}: {why}" if key else f"{uri}: {why}")


def not_a_store(fs: pafs.FileSystem, root: str) -> str:
    """What is at `root`, which holds no store.json: why it cannot be read as a store."""
    where, kind = nearest_existing(fs, root)
    at_root = where == (root.rstrip("/") or "/")
    if kind == pafs.FileType.File:
        what = "a file, not a directory" if at_root else f"{where} is a file, not a directory"
    elif at_root:
        what = "a directory without store.json"
    else:
        what = "no such directory"
    return f"not a graft trajectory store ({what})"
