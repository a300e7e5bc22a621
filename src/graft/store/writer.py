"""Append-only writing of trajectory shards, in the background.

Layout under the store root (local path, or any pyarrow / fsspec filesystem URI):

    store.json                                  format name, schema version, checksum algorithm
    runs/<run_id>.json                          run metadata: config, package versions, git commit
    shards/run=<run_id>/model=<model>/step_NNNNNNNN.parquet     one shard per policy and step
    checksums/run=<run_id>/model=<model>/step_NNNNNNNN.parquet.json   its sha256, bytes and rows

A shard is written to a hidden temporary name, its checksum sidecar is written next, and the shard
is renamed into place last, so a writer killed in the middle of a write leaves only a `.tmp` file
(and perhaps a sidecar without its shard) that readers never read, and every visible shard has its
checksum. Rows within a shard are sorted by prompt id.

A store created before checksums (its store.json names no checksum algorithm) stays such a store
when a newer graft appends to it: its new shards get checksums, its old ones are read as
"unverified" (see reader.py).
"""

from __future__ import annotations

import hashlib
import json
import queue
import threading
import time
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from graft.store.checksum import (
    ALGORITHM,
    meta_record,
    meta_sidecar_rel,
    record_for,
    sidecar_rel,
)
from graft.store.fs import nearest_existing, open_filesystem
from graft.store.schema import FORMAT_NAME, SCHEMA_VERSION, to_table

SHARD_PREFIX = "step_"
ROW_GROUP_ROWS = 4096


def check_store_target(uri: str) -> None:
    """Raise StoreError unless `uri` is free or holds a graft trajectory store this graft can
    append to. Called before a run writes anything."""
    from graft.store.reader import StoreError

    fs, root = open_filesystem(uri)
    marker = f"{root}/store.json"
    kind = fs.get_file_info(marker).type
    if kind == pa.fs.FileType.NotFound:
        where, what = nearest_existing(fs, root)
        if what == pa.fs.FileType.File:
            if where == root:
                raise StoreError(f"store.path {uri}: is a file, not a store directory")
            raise StoreError(f"store.path {uri}: {where} is a file, not a directory")
        return
    try:
        with fs.open_input_stream(marker) as f:
            meta = json.loads(f.read().decode())
    except (OSError, ValueError) as err:
        raise StoreError(f"store.path {uri}: unreadable store.json ({err})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT_NAME:
        raise StoreError(
            f"store.path {uri}: store.json describes another format "
            f"({meta.get('format') if isinstance(meta, dict) else meta!r}), not {FORMAT_NAME!r}"
        )


def shard_dir(root: str, run_id: str, model: str) -> str:
    return f"{root}/shards/run={run_id}/model={model}"


def shard_name(step: int) -> str:
    return f"{SHARD_PREFIX}{step:08d}.parquet"


class StoreWriter:
    """Writes shards on a background thread; `flush()` waits and re-raises any write error."""

    def __init__(
        self, uri: str, *, run_id: str, run_meta: Mapping[str, Any], background: bool = True
    ) -> None:
        self.fs, self.root = open_filesystem(uri)
        self.uri = uri
        self.run_id = run_id
        self.run_meta = dict(run_meta)
        self._ensure_store()
        self._write_run_meta()
        self._queue: queue.Queue = queue.Queue()
        self._error: BaseException | None = None
        self.seconds_writing = 0.0  # wall clock on the writer thread
        self.cpu_seconds_writing = 0.0  # its CPU time: what the store costs, however busy the box
        self._thread = None
        if background:
            self._thread = threading.Thread(target=self._drain, name="graft-store", daemon=True)
            self._thread.start()

    # ----------------------------------------------------------------- store files
    def _ensure_store(self) -> None:
        marker = f"{self.root}/store.json"
        info = self.fs.get_file_info(marker)
        if info.type == pa.fs.FileType.NotFound:
            self.fs.create_dir(self.root, recursive=True)
            body = {"format": FORMAT_NAME, "schema_version": SCHEMA_VERSION, "checksums": ALGORITHM}
            self._write_json(marker, body)
            return
        check_store_target(self.uri)

    def _write_json(self, path: str, body: Mapping[str, Any]) -> None:
        self._write_bytes(path, json.dumps(body, indent=2, sort_keys=True, default=str).encode())

    def _write_bytes(self, path: str, data: bytes) -> None:
        """A file written whole under a hidden temporary name, then renamed into place."""
        parent = path.rsplit("/", 1)[0]
        self.fs.create_dir(parent, recursive=True)
        tmp = f"{parent}/.{path.rsplit('/', 1)[1]}.tmp"
        with self.fs.open_output_stream(tmp) as f:
            f.write(data)
        self.fs.move(tmp, path)

    def update_run_meta(self, **fields: Any) -> None:
        """Rewrite this run's metadata file with `fields` set (atomically, as at the start)."""
        self.run_meta.update(fields)
        self._write_run_meta()

    def _write_run_meta(self) -> None:
        """runs/<run_id>.json and its checksum: the sidecar first (it keeps the digest of the
        version it replaces), then the file, each by an atomic rename."""
        rel = f"runs/{self.run_id}.json"
        path = f"{self.root}/{rel}"
        data = json.dumps(self.run_meta, indent=2, sort_keys=True, default=str).encode()
        previous = None
        if self.fs.get_file_info(path).type == pa.fs.FileType.File:
            with self.fs.open_input_stream(path) as f:
                previous = hashlib.sha256(f.read()).hexdigest()
        record = meta_record(data, rel=rel, previous=previous)
        self._write_json(f"{self.root}/{meta_sidecar_rel(rel)}", record)
        self._write_bytes(path, data)

    # ----------------------------------------------------------------- shards
    def write(self, model: str, step: int, columns: Mapping[str, list] | pa.Table) -> None:
        """Queue one policy's rows of one step (written in the background): columns by name, or
        a table of the record's schema (an export's rows, written as they were read)."""
        self._raise_pending()
        if self._thread is None:
            self._write_shard(model, step, columns)
        else:
            self._queue.put((model, step, columns))

    def _write_shard(self, model: str, step: int, columns: Mapping[str, list] | pa.Table) -> None:
        start, cpu = time.perf_counter(), time.thread_time()
        table = to_table(columns)
        if table.num_rows:
            table = table.take(
                pc.sort_indices(table, [("prompt_id", "ascending"), ("member", "ascending")])
            )
        directory = shard_dir(self.root, self.run_id, model)
        self.fs.create_dir(directory, recursive=True)
        final = f"{directory}/{shard_name(step)}"
        tmp = f"{directory}/.{shard_name(step)}.tmp"
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink, row_group_size=ROW_GROUP_ROWS)
        data = sink.getvalue()
        with self.fs.open_output_stream(tmp) as f:
            f.write(data)
        rel = final[len(self.root) + 1 :]
        record = record_for(data, shard_rel=rel, rows=table.num_rows)
        self._write_json(f"{self.root}/{sidecar_rel(rel)}", record)  # before the shard is visible
        self.fs.move(tmp, final)  # the commit: the shard appears with its checksum in place
        self.seconds_writing += time.perf_counter() - start
        self.cpu_seconds_writing += time.thread_time() - cpu

    def _drain(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                if self._error is None:
                    self._write_shard(*item)
            except BaseException as exc:  # re-raised on the training thread by flush()
                self._error = exc
            finally:
                self._queue.task_done()

    def _raise_pending(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            message = f"writing the trajectory store {self.uri} failed: {error}"
            raise RuntimeError(message) from error

    def flush(self) -> None:
        """Wait until every queued shard is on disk."""
        if self._thread is not None:
            self._queue.join()
        self._raise_pending()

    def rollback(self, after_step: int) -> int:
        """Delete this run's shards of steps after `after_step` (a resume will write them again),
        then their checksums. Returns how many shards were removed."""
        self.flush()
        removed = 0
        for tree in ("shards", "checksums"):  # shards first: a shard never outlives its checksum
            base = f"{self.root}/{tree}/run={self.run_id}"
            selector = pa.fs.FileSelector(base, recursive=True, allow_not_found=True)
            for info in self.fs.get_file_info(selector):
                name = info.base_name
                if info.type != pa.fs.FileType.File:
                    continue
                if name.startswith("."):
                    self.fs.delete_file(info.path)  # leftovers of an interrupted write
                    continue
                step = name[len(SHARD_PREFIX) :].split(".", 1)[0]
                if name.startswith(SHARD_PREFIX) and step.isdigit() and int(step) > after_step:
                    self.fs.delete_file(info.path)
                    removed += 1 if tree == "shards" else 0
        return removed

    def close(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()
        self._raise_pending()
