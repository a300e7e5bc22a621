"""Small helpers for the worker processes graft starts (verifiers, policies)."""

from __future__ import annotations

import contextlib
import ctypes
import signal
import sys


def die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent exits (PR_SET_PDEATHSIG), so a worker
    never outlives a training process that was itself killed. A no-op elsewhere."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG
