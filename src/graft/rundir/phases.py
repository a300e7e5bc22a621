"""Where a step's wall time went: consecutive phases, each timed from where the one before ended,
so that the `time/<phase>_s` of a step add up to its `time/step_s`."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


class PhaseClock:
    """`lap(phase)` ends `phase` now (or at `at`, a `time.perf_counter()` reading taken earlier);
    a phase lapped twice adds up."""

    def __init__(self) -> None:
        self.start = self._last = time.perf_counter()
        self.seconds: dict[str, float] = {}

    def lap(self, phase: str, *, at: float | None = None) -> None:
        end = time.perf_counter() if at is None else at
        self.seconds[phase] = self.seconds.get(phase, 0.0) + (end - self._last)
        self._last = end

    def timed(self, phase: str, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)`, ending `phase` when it returns."""
        out = fn(*args)
        self.lap(phase)
        return out

    def metrics(self) -> dict[str, float]:
        """`time/<phase>_s` of every phase, and `time/step_s`: their sum."""
        out = {f"time/{phase}_s": s for phase, s in self.seconds.items()}
        out["time/step_s"] = self._last - self.start
        return out
