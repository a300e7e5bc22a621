"""Shard checksums: the sha256, byte size and row count of every shard, in a small sidecar.

    checksums/run=<run_id>/model=<model>/step_NNNNNNNN.parquet.json     one per shard
    checksums/runs/<run_id>.json.json                                   one per run's metadata

The writer hashes a shard's bytes in memory, writes the shard to a hidden temporary name, writes
its sidecar (atomically, temporary name then rename) and only then renames the shard into place:
the shard's rename commits both, so a visible shard always has its checksum, and a sidecar
without its shard is an interrupted write. Sidecars sit in their own tree so that a graft from
before checksums still reads a new store (it just does not verify).

A reader hashes a shard as it reads it, into the one buffer that is then parsed, so the rows it
uses are exactly the bytes it proved (no second read, no window for the file to change between).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

ALGORITHM = "sha256"
CHECKSUMS_DIR = "checksums"
SHARDS_DIR = "shards"
CHUNK_BYTES = 1 << 20


def sidecar_rel(shard_rel: str) -> str:
    """`shards/run=R/model=M/step_N.parquet` -> `checksums/run=R/model=M/step_N.parquet.json`."""
    return f"{CHECKSUMS_DIR}{shard_rel[len(SHARDS_DIR) :]}.json"


def shard_rel_of(sidecar: str) -> str:
    """The inverse of `sidecar_rel`."""
    return f"{SHARDS_DIR}{sidecar[len(CHECKSUMS_DIR) : -len('.json')]}"


def record_for(data: pa.Buffer | bytes, *, shard_rel: str, rows: int) -> dict[str, Any]:
    """The sidecar's content for a shard of these bytes and rows."""
    return {
        "shard": shard_rel,
        "algorithm": ALGORITHM,
        ALGORITHM: hashlib.sha256(memoryview(data)).hexdigest(),
        "bytes": len(memoryview(data)),
        "rows": rows,
    }


def parse_record(body: bytes, *, shard_rel: str) -> dict[str, Any]:
    """A sidecar's record, checked; ValueError says what is wrong with it."""
    record = json.loads(body.decode())
    if not isinstance(record, dict):
        raise ValueError("not a JSON object")
    if record.get("algorithm") != ALGORITHM:
        raise ValueError(f"unknown checksum algorithm {record.get('algorithm')!r}")
    digest, size, rows = record.get(ALGORITHM), record.get("bytes"), record.get("rows")
    if not (isinstance(digest, str) and len(digest) == 64):
        raise ValueError(f"no {ALGORITHM} digest")
    if not (isinstance(size, int) and isinstance(rows, int)):
        raise ValueError("no byte size or row count")
    if record.get("shard") != shard_rel:
        raise ValueError(f"it describes {record.get('shard')!r}, not this shard")
    return record


def read_hashed(fs: pafs.FileSystem, path: str) -> tuple[pa.Buffer, str]:
    """(the file's bytes, their sha256), hashed chunk by chunk as they are read."""
    digest = hashlib.sha256()
    with fs.open_input_file(path) as f:
        size = f.size()
        buf = bytearray(size)
        view = memoryview(buf)
        pos = 0
        while pos < size:
            got = f.readinto(view[pos : pos + CHUNK_BYTES])
            if not got:  # shorter than it said: hash and return what is there
                break
            digest.update(view[pos : pos + got])
            pos += got
    return pa.py_buffer(view[:pos]), digest.hexdigest()


def mismatch(record: dict[str, Any], data: pa.Buffer, digest: str) -> str:
    """'' when the bytes are the ones recorded, else what differs."""
    if data.size != record["bytes"]:
        kind = "truncated" if data.size < record["bytes"] else "longer than written"
        return f"{kind}: {data.size} bytes, its checksum records {record['bytes']}"
    if digest != record[ALGORITHM]:
        return (
            f"{ALGORITHM} {digest[:16]}... differs from the recorded {record[ALGORITHM][:16]}...: "
            f"its bytes changed after it was written"
        )
    return ""


def meta_sidecar_rel(rel: str) -> str:
    """`runs/<run_id>.json` -> `checksums/runs/<run_id>.json.json`."""
    return f"{CHECKSUMS_DIR}/{rel}.json"


def meta_record(data: bytes, *, rel: str, previous: str | None) -> dict[str, Any]:
    """The sidecar of a run's metadata file of these bytes. A run rewrites its metadata (its cost
    so far, at each checkpoint): the sidecar is written first and keeps the digest of the version
    it replaces (`previous`), so a crash between the two writes leaves an intact earlier version
    that still proves."""
    record = {
        "file": rel,
        "algorithm": ALGORITHM,
        ALGORITHM: hashlib.sha256(data).hexdigest(),
        "bytes": len(data),
    }
    if previous:
        record["previous"] = previous
    return record


def meta_mismatch(body: bytes, data: bytes, *, rel: str) -> str:
    """'' when a run's metadata bytes are the recorded ones (or the version they replaced), else
    what is wrong."""
    try:
        record = json.loads(body.decode())
    except ValueError as err:
        return f"its checksum {meta_sidecar_rel(rel)} is unreadable ({err})"
    if not isinstance(record, dict) or record.get("file") != rel:
        return f"its checksum {meta_sidecar_rel(rel)} describes another file"
    digest = hashlib.sha256(data).hexdigest()
    if digest in (record.get(ALGORITHM), record.get("previous")):
        return ""
    return (
        f"{ALGORITHM} {digest[:16]}... is not the recorded one: its bytes changed after it was "
        "written"
    )
