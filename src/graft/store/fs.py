"""Filesystems for the store: local paths, pyarrow URIs (file://, s3://, gs://, hdfs://), and any
other fsspec protocol (memory://, ...) through pyarrow's fsspec handler."""

from __future__ import annotations

from pathlib import Path

import pyarrow.fs as pafs


def open_filesystem(uri: str) -> tuple[pafs.FileSystem, str]:
    """(filesystem, root path inside it) for a store location."""
    if "://" not in uri:
        return pafs.LocalFileSystem(), str(Path(uri).expanduser().absolute())
    try:
        fs, path = pafs.FileSystem.from_uri(uri)
        return fs, path.rstrip("/")
    except ValueError:  # pyarrow.ArrowInvalid: not a filesystem pyarrow knows
        pass
    try:
        import fsspec
    except ImportError:  # pragma: no cover - fsspec ships with huggingface_hub
        raise ValueError(f"cannot open {uri}: unknown filesystem, fsspec not installed") from None
    protocol, _, rest = uri.partition("://")
    try:
        handler = pafs.FSSpecHandler(fsspec.filesystem(protocol))
    except (ValueError, ImportError) as err:  # an unknown protocol, or its package is missing
        why = " ".join(str(err).split())
        raise ValueError(f"no filesystem for {protocol}:// ({why})") from None
    return pafs.PyFileSystem(handler), ("/" + rest.lstrip("/")).rstrip("/")


def nearest_existing(fs: pafs.FileSystem, path: str) -> tuple[str, pafs.FileType]:
    """The nearest of `path` and its ancestors that exists, with its type (NotFound: none does,
    up to the top of the filesystem or bucket)."""
    probe = path.rstrip("/") or "/"
    while True:
        kind = fs.get_file_info(probe).type
        if kind != pafs.FileType.NotFound or "/" not in probe or probe == "/":
            return probe, kind
        probe = probe.rsplit("/", 1)[0] or "/"
