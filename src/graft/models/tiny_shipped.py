"""Tiny presets that ship pre-trained with the package, so `make demo` does not pre-train them.

Building a tiny preset pre-trains it on the CPU: minutes (the code pair's two take about 220 s and
110 s on 2 cores). The presets in `SHIPPED_PRESETS` ship ready-built instead, as the exact files
`build_tiny` wrote on the machine that recorded them, in `graft/models/shipped/<name>-<key>/`.
`key` is the cache key (`spec_hash`: the spec, the versions of torch, transformers and tokenizers,
and the build format), so an entry is used only where all of those are exactly what built it;
anywhere else the preset is built from its spec as before. `checksums.json` holds each file's
SHA-256; an entry whose bytes do not match is not used (a warning, then the build from the spec).

`scripts/ship_tiny.py` (re)records the entries after a change of spec or of pinned versions.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import shutil
from pathlib import Path

SHIPPED_DIR = Path(__file__).parent / "shipped"
CHECKSUMS = "checksums.json"
SHIPPED_PRESETS = ("llama-char-code-list", "qwen2-bpe-code-sum")
"""The code pair `make demo` trains (graft.evidence.pairs)."""
LAST_FILE = "tiny_spec.json"
"""Written last, as in a build: its presence marks a complete cache entry."""
MACHINE = "machine.json"
"""Beside an entry's files, not among its checksums and never copied: the recording machine's
floats (scripts/ship_tiny.py), which a fresh build must share to give the very bytes."""

log = logging.getLogger(__name__)


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def shipped_entry(stem: str, root: Path | None = None) -> Path | None:
    """The shipped entry named `<name>-<key>`, or None where none ships for that key."""
    path = (root or SHIPPED_DIR) / stem
    return path if (path / CHECKSUMS).is_file() else None


def verified_files(entry: Path) -> list[Path] | None:
    """The entry's files if every one matches its recorded SHA-256, else None, with a warning
    naming the first file that does not (the caller then builds from the spec)."""
    try:
        sums = json.loads((entry / CHECKSUMS).read_text())
    except (OSError, ValueError) as err:
        log.warning("shipped tiny model %s: unreadable %s (%s)", entry, CHECKSUMS, err)
        return None
    files = []
    for name, digest in sorted(sums.items()):
        path = entry / name
        if not path.is_file() or file_sha256(path) != digest:
            log.warning("shipped tiny model %s: %s does not match its checksum", entry, name)
            return None
        files.append(path)
    return files


def copy_shipped(entry: Path, out: Path) -> bool:
    """Copy a verified shipped entry's files into `out` (the spec file last); False, copying
    nothing, where the entry does not verify."""
    files = verified_files(entry)
    if files is None or not any(f.name == LAST_FILE for f in files):
        return False
    for path in sorted(files, key=lambda f: f.name == LAST_FILE):
        shutil.copyfile(path, out / path.name)
    return True


def record(built: Path, root: Path | None = None) -> Path:
    """Ship a built cache entry: copy its files to `<root>/<entry name>` with their checksums,
    replacing any earlier entry of the same preset (another key)."""
    root = root or SHIPPED_DIR
    name = json.loads((built / LAST_FILE).read_text())["name"]
    for old in root.glob(f"{name}-*"):
        if old.is_dir() and re.fullmatch(r"[0-9a-f]{12}", old.name.removeprefix(f"{name}-")):
            shutil.rmtree(old)
    dest = root / built.name
    dest.mkdir(parents=True)
    sums = {}
    for path in sorted(p for p in built.iterdir() if p.is_file()):
        shutil.copyfile(path, dest / path.name)
        sums[path.name] = file_sha256(path)
    (dest / CHECKSUMS).write_text(json.dumps(sums, indent=2, sort_keys=True) + "\n")
    return dest
