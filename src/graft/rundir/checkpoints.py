"""Checkpoints: written into a temporary folder, sealed with a MANIFEST.json written last, proven
against it on resume; the best-by-validation checkpoint per policy; the RNG state they carry."""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from graft.errors import DataError

CHECKPOINT_PREFIX = "step_"


MANIFEST = "MANIFEST.json"


MANIFEST_FORMAT = "graft-checkpoint-manifest"


CHUNK_BYTES = 1 << 20


def checkpoint_dirs(run_dir: Path) -> list[Path]:
    root = run_dir / "checkpoints"
    if not root.is_dir():
        return []
    done = [
        p
        for p in root.iterdir()
        if p.is_dir()
        and p.name.startswith(CHECKPOINT_PREFIX)
        and (p / "trainer_state.json").exists()
    ]
    return sorted(done, key=lambda p: int(p.name[len(CHECKPOINT_PREFIX) :]))


def latest_checkpoint(run_dir: Path) -> Path | None:
    dirs = checkpoint_dirs(run_dir)
    return dirs[-1] if dirs else None


def _digest(path: Path, *, sync: bool = False) -> dict[str, Any]:
    """{"sha256", "bytes"} of a file, hashed in chunks (a multi-GB file never sits in memory);
    with `sync`, the file is also flushed to the disk."""
    digest, size = hashlib.sha256(), 0
    buf = bytearray(CHUNK_BYTES)
    with path.open("rb") as f:
        while got := f.readinto(buf):
            digest.update(memoryview(buf)[:got])
            size += got
        if sync:
            os.fsync(f.fileno())
    return {"sha256": digest.hexdigest(), "bytes": size}


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _files(folder: Path) -> list[Path]:
    """Every file under `folder` but its manifest, in a fixed order."""
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.name != MANIFEST)


def write_manifest(folder: Path) -> Path:
    """Fsync every file under `folder`, then write MANIFEST.json (sha256 and size of each) last,
    atomically. Call it when nothing more will be written into the folder."""
    paths = _files(folder)
    files = {p.relative_to(folder).as_posix(): _digest(p, sync=True) for p in paths}
    for sub in sorted({p.parent for p in paths} | {folder}, reverse=True):
        _fsync_dir(sub)  # the files' names are durable before the manifest vouches for them
    body = {"format": MANIFEST_FORMAT, "version": 1, "algorithm": "sha256", "files": files}
    tmp = folder / f".{MANIFEST}.tmp"
    with tmp.open("w") as f:
        f.write(json.dumps(body, indent=1, sort_keys=True))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, folder / MANIFEST)
    _fsync_dir(folder)
    return folder / MANIFEST


def _read_manifest(folder: Path) -> tuple[dict[str, dict[str, Any]] | None, str]:
    """(files listed in the folder's manifest, '') or (None, why it cannot be used)."""
    path = folder / MANIFEST
    if not path.is_file():
        return None, "missing (a checkpoint without a manifest cannot be proven intact)"
    try:
        body = json.loads(path.read_bytes())
        files = body["files"]
        if (body["format"], body["version"], body["algorithm"]) != (MANIFEST_FORMAT, 1, "sha256"):
            return None, f"not a version 1 {MANIFEST_FORMAT} with sha256 digests"
        if not all(
            isinstance(e["sha256"], str) and isinstance(e["bytes"], int) for e in files.values()
        ):
            return None, "unreadable (an entry without sha256 or bytes)"
    except (ValueError, UnicodeDecodeError, KeyError, TypeError, AttributeError) as err:
        return None, f"unreadable ({type(err).__name__}: {err})"
    return files, ""


def manifest_problems(folder: Path, *, under: str = "", digests: bool = True) -> list[str]:
    """Every file of `folder` (only those under the subfolder `under`, when given) that is
    missing, changed, or not listed in its MANIFEST.json, as 'PATH: why' (empty: intact).
    Without `digests`, what a look at the files shows (presence and size) and nothing read."""
    files, why = _read_manifest(folder)
    if files is None:
        return [f"{folder / MANIFEST}: {why}"]
    prefix = f"{under.strip('/')}/" if under else ""
    out = []
    for rel, want in sorted(files.items()):
        if not rel.startswith(prefix):
            continue
        path = folder / rel
        if not path.is_file():
            out.append(f"{path}: missing")
            continue
        size = path.stat().st_size
        if size != want["bytes"]:
            kind = "truncated" if size < want["bytes"] else "longer than written"
            out.append(f"{path}: {kind} ({size} bytes, {MANIFEST} records {want['bytes']})")
        elif digests and (got := _digest(path)["sha256"]) != want["sha256"]:
            out.append(
                f"{path}: changed since it was written (sha256 {got[:16]}..., {MANIFEST} "
                f"records {want['sha256'][:16]}...)"
            )
    for path in _files(folder / under if under else folder):
        if path.relative_to(folder).as_posix() not in files:
            out.append(f"{path}: not in {MANIFEST} (added after the checkpoint was written)")
    return out


def _saved_shards(folder: Path) -> int:
    """How many ranks wrote a policy's AdamW state, as its policy_state.json says (unreadable:
    whether it holds the folder a sharded policy writes)."""
    try:
        return int(json.loads((folder / "policy_state.json").read_text()).get("shards", 1))
    except (OSError, ValueError, TypeError, AttributeError):
        return 2 if (folder / "optimizer").is_dir() else 1


def _policy_problems(folder: Path) -> list[str]:
    """The files a policy's checkpoint needs that are not there, as 'PATH: missing (why)': a LoRA
    policy stores its adapter, not the model; a sharded one its AdamW state in `optimizer/`, one
    file per rank, every one of which `optimizer/.metadata` names must be there."""
    out = []
    if (folder / "adapter_config.json").is_file():
        needed = ["adapter_model.safetensors", "adapter_config.json", "optimizer.pt"]
    elif (shards := _saved_shards(folder)) > 1:
        needed = ["model.safetensors", "optimizer/.metadata"]
        if not (folder / "optimizer").is_dir():
            needed = needed[:1]
            out.append(
                f"{folder / 'optimizer'}: missing (the AdamW state of the {shards} ranks that "
                f"wrote this checkpoint, one file per rank)"
            )
    else:
        needed = ["model.safetensors", "optimizer.pt"]
    out += [
        f"{folder / f}: missing"
        for f in [*needed, "policy_state.json"]
        if not (folder / f).is_file()
    ]
    if "optimizer/.metadata" in needed and (folder / "optimizer/.metadata").is_file():
        from graft.training.optim_state import missing_rank_files

        try:
            missing = missing_rank_files(folder / "optimizer")
        except ValueError as err:
            return [*out, str(err)]
        out += [
            f"{folder / 'optimizer' / f}: missing (optimizer/.metadata names it)" for f in missing
        ]
    return out


def checkpoint_problems(
    checkpoint: Path, policies: list[str], *, digests: bool = True
) -> list[str]:
    """Every missing, changed or unlisted file of a checkpoint, as 'PATH: why' (empty: intact):
    every file is proven against MANIFEST.json (without `digests`, by presence and size only),
    and the files resume needs must be there."""
    out = manifest_problems(checkpoint, digests=digests)
    named = {line.split(": ", 1)[0] for line in out}
    needed = (
        []
        if (checkpoint / "trainer_state.json").is_file()
        else [f"{checkpoint / 'trainer_state.json'}: missing"]
    )
    for name in policies:
        needed += _policy_problems(checkpoint / name)
    out += [line for line in needed if line.split(": ", 1)[0] not in named]
    return out


def verify_checkpoint(folder: Path) -> None:
    """Raise DataError (one line, naming the first bad file) unless a checkpoint folder is intact:
    a whole checkpoint (step_N), a policy inside one (step_N/<policy>, proven against the
    checkpoint's manifest), or a best-by-validation policy (best/<policy>). Call before loading."""
    if not (folder / MANIFEST).is_file() and (folder.parent / MANIFEST).is_file():
        problems = manifest_problems(folder.parent, under=folder.name)
    else:
        problems = manifest_problems(folder)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise DataError(f"checkpoint {folder} is damaged: {problems[0]}{more}")


def _none_intact(run_dir: Path, first: str) -> DataError:
    return DataError(f"--resume {run_dir}: no intact checkpoint; the newest is damaged: {first}")


def refuse_unresumable(run_dir: Path, policies: list[str]) -> None:
    """Raise DataError (one line, naming the newest checkpoint's first problem) when no
    checkpoint of the run could be resumed from, by what a look at its files shows (a manifest,
    every file it lists at its size, nothing unlisted, what resume needs): a check cheap enough to
    make before any model loads or any rank starts. Their contents are proven against the
    manifest when resume loads one (`intact_checkpoint`). A run without checkpoints passes."""
    first = ""
    for checkpoint in reversed(checkpoint_dirs(run_dir)):
        problems = checkpoint_problems(checkpoint, policies, digests=False)
        if not problems:
            return
        first = first or problems[0]
    if first:
        raise _none_intact(run_dir, first)


def intact_checkpoint(
    run_dir: Path, policies: list[str], warn: Callable[[str], None]
) -> tuple[Path, list[Path]]:
    """(the newest checkpoint whose files are all present and readable, the damaged newer ones).
    Each damaged one is reported through `warn` by file name. Raises DataError when none is
    intact."""
    dirs = checkpoint_dirs(run_dir)
    if not dirs:
        raise DataError(f"--resume {run_dir}: no complete checkpoint in {run_dir / 'checkpoints'}")
    damaged: list[Path] = []
    first = ""
    for checkpoint in reversed(dirs):
        problems = checkpoint_problems(checkpoint, policies)
        if not problems:
            if damaged:
                warn(f"resuming from the intact checkpoint {checkpoint.name} instead")
            return checkpoint, damaged
        damaged.append(checkpoint)
        first = first or problems[0]
        warn(f"checkpoint {checkpoint.name} is damaged: {'; '.join(problems)}")
    raise _none_intact(run_dir, first)


def set_aside(checkpoint: Path) -> Path:
    """Rename a damaged checkpoint out of resume's way (`damaged-step_N`), keeping its files."""
    n, target = 0, checkpoint.with_name(f"damaged-{checkpoint.name}")
    while target.exists():
        n += 1
        target = checkpoint.with_name(f"damaged-{checkpoint.name}.{n}")
    os.replace(checkpoint, target)
    return target


def rng_state() -> dict[str, Any]:
    """Global RNG states (JSON-safe). Sampling uses per-step seeded generators; these are saved
    so that anything else drawing from the global generators also resumes exactly."""
    np_state = np.random.get_state()
    return {
        "python": [random.getstate()[0], list(random.getstate()[1]), random.getstate()[2]],
        "numpy": [np_state[0], np_state[1].tolist(), *np_state[2:]],
        "torch": torch.get_rng_state().tolist(),
    }


def set_rng_state(state: Mapping[str, Any]) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(torch.tensor(state["torch"], dtype=torch.uint8))


def begin_checkpoint(run_dir: Path, step: int) -> Path:
    """A fresh temporary folder for the checkpoint taken after `step` steps."""
    tmp = run_dir / "checkpoints" / f".tmp_{CHECKPOINT_PREFIX}{step:06d}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    return tmp


def commit_checkpoint(run_dir: Path, tmp: Path, step: int, *, keep: int, extra: dict) -> Path:
    """Add trainer_state.json and, last, the manifest of every file; then rename into place."""
    state = {"next_step": step, "rng": rng_state(), "time": time.time(), **extra}
    (tmp / "trainer_state.json").write_text(json.dumps(state))
    write_manifest(tmp)
    final = run_dir / "checkpoints" / f"{CHECKPOINT_PREFIX}{step:06d}"
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    _fsync_dir(final.parent)
    for old in checkpoint_dirs(run_dir)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def read_trainer_state(checkpoint: Path) -> dict[str, Any]:
    return json.loads((checkpoint / "trainer_state.json").read_text())


def save_best(run_dir: Path, backend: Any, names: list[str], best: Mapping[str, Any]) -> None:
    """Replace checkpoints/best/<name> for the improved policies, then record best.json."""
    root = run_dir / "checkpoints" / "best"
    tmp = run_dir / "checkpoints" / ".tmp_best"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    backend.save(tmp, names=names)
    for name in names:
        write_manifest(tmp / name)
    root.mkdir(parents=True, exist_ok=True)
    for name in names:
        if (root / name).exists():
            shutil.rmtree(root / name)
        os.replace(tmp / name, root / name)
    shutil.rmtree(tmp, ignore_errors=True)
    (root / "best.json.tmp").write_text(json.dumps(dict(best), indent=2, sort_keys=True))
    os.replace(root / "best.json.tmp", root / "best.json")


def read_best(run_dir: Path) -> dict[str, Any]:
    path = run_dir / "checkpoints" / "best" / "best.json"
    return json.loads(path.read_text()) if path.is_file() else {}
