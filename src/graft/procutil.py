"""Small helpers for the worker processes graft starts (verifiers, policies)."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
from collections.abc import Iterator


def die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent exits (PR_SET_PDEATHSIG), so a worker
    never outlives a training process that was itself killed. A no-op elsewhere."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG


@contextlib.contextmanager
def started_with(env: dict[str, str]) -> Iterator[None]:
    """`env` in os.environ while a process starts inside (a spawned child copies the environment
    at its start, and glibc or vLLM read these settings then); as it was again afterwards."""
    before = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
