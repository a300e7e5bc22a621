"""The verifier pool on Ray (`run.backend: ray`): each worker is a Ray actor reserving one CPU,
placed wherever the cluster has one, so verification (code rewards above all) scales past the
driver's machine.

The scheduling is `VerifierPool`'s: the same chunks, the same per-item limits measured in the
driver, the same reruns. A worker past its deadline is killed (`ray.kill`) and a fresh actor
takes its place; a dead actor's items are rerun alone, as a dead local worker's are. Verifiers
are imported by a separate actor call before the chunk that needs them, so imports do not count
against an item's limit. Plug-in verifiers import from the driver's `sys.path` entries (put
first; on another node only the paths that exist there help).

Where graft starts Ray itself (no `RAY_ADDRESS`), the local cluster is given this machine's
cores plus one CPU per verifier actor: the policies' actors reserve the cores, and the verifier
actors share the machine with them, as the local pool's processes do.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from graft.config.lib import ConfigError
from graft.extras import install_hint
from graft.verify.pool import _START_LIMIT_S, VerifierPool
from graft.verify.pool_worker import LOADING, READY, Chunk, Done, load, run_chunk
from graft.verify.registry import Verifier

CPUS_PER_WORKER = 1
"""CPUs each verifier actor reserves."""


def connect(extra_cpus: int = 0) -> Any:
    """Ray, initialized: the cluster at RAY_ADDRESS when set, else a local one with this
    machine's cores plus `extra_cpus` (the verifier actors'); as it is when already running."""
    try:
        import ray
    except ImportError:
        raise ImportError(f"run.backend=ray needs Ray: {install_hint('ray')}") from None
    if not ray.is_initialized():
        options: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
        if not os.environ.get("RAY_ADDRESS"):
            options["num_cpus"] = (os.cpu_count() or 1) + extra_cpus
        ray.init(ignore_reinit_error=True, **options)
    return ray


class VerifierActor:
    """The body of a verifier actor (wrapped with ray.remote at runtime)."""

    def __init__(self, driver_path: list[str]) -> None:
        sys.path[:0] = [p for p in driver_path if p not in sys.path]
        self.loaded: dict[str, Verifier | Exception] = {}

    def ready(self) -> int:
        return os.getpid()

    def load(self, names: list[str]) -> str:
        for name in names:
            if name not in self.loaded:
                self.loaded[name] = load(name)
        return READY

    def run(self, chunk: Chunk) -> Done:
        return run_chunk(self.loaded, chunk)


@dataclass(eq=False)
class _Actor:
    actor: Any
    calls: deque[tuple[str, Any]] = field(default_factory=deque)
    """(kind, object ref) of the calls not yet received, in order: start, load, run."""
    loaded: set[str] = field(default_factory=set)
    pid: int = 0
    why: str = "its Ray actor died"


class RayTransport:
    """Verifier workers as Ray actors (see the module docstring)."""

    def __init__(self, workers: int) -> None:
        self.ray = connect(extra_cpus=workers * CPUS_PER_WORKER)
        self.workers = workers
        self._cls = self.ray.remote(num_cpus=CPUS_PER_WORKER, max_restarts=0)(VerifierActor)
        self._path = list(sys.path)

    def start(self) -> _Actor:
        handle = _Actor(self._cls.remote(self._path))
        handle.calls.append(("start", handle.actor.ready.remote()))
        return handle

    def send(self, handle: _Actor, chunk: list[tuple[str, str, str, str]]) -> bool:
        names = sorted({item[0] for item in chunk} - handle.loaded)
        if names:
            handle.calls.append(("load", handle.actor.load.remote(names)))
            handle.loaded.update(names)
        handle.calls.append(("run", handle.actor.run.remote(chunk)))
        return bool(names)

    def wait(self, handles: list[_Actor], timeout_s: float) -> list[_Actor]:
        heads = {h.calls[0][1]: h for h in handles if h.calls}
        if not heads:
            return []
        ready, _ = self.ray.wait(list(heads), num_returns=1, timeout=timeout_s)
        return [heads[ref] for ref in ready]

    def receive(self, handle: _Actor) -> Any:
        kind, ref = handle.calls.popleft()
        try:
            value = self.ray.get(ref)
        except self.ray.exceptions.RayError as exc:
            handle.why = f"its Ray actor died: {type(exc).__name__}"
            return None
        if kind == "start":
            handle.pid = int(value)
            loading = bool(handle.calls) and handle.calls[0][0] == "load"
            return LOADING if loading else READY
        return value

    def kill(self, handle: _Actor) -> None:
        with contextlib.suppress(Exception):  # already dead, or Ray already shut down
            self.ray.kill(handle.actor, no_restart=True)

    def death(self, handle: _Actor) -> str:
        return handle.why

    def start_failure(self, handle: _Actor) -> Exception:
        return RuntimeError(f"a Ray verifier actor failed to start ({handle.why})")

    def start_timeout(self) -> Exception:
        return ConfigError(
            f"verify.workers: {self.workers} Ray verifier actors ({CPUS_PER_WORKER} CPU each) did "
            f"not start within {_START_LIMIT_S:g} s; the Ray cluster lacks free CPUs for them: "
            "add CPUs to it, or lower verify.workers or the policies' models.N.num_cpus"
        )

    def pid(self, handle: _Actor) -> int:
        return handle.pid

    def stop(self, workers: list[Any]) -> None:
        for w in workers:
            self.kill(w.handle)
        workers.clear()


class RayVerifierPool(VerifierPool):
    """`VerifierPool` whose workers are Ray actors (`RayTransport`)."""

    def __init__(self, workers: int = 2, timeout_s: float = 5.0) -> None:
        if workers < 1:  # before Ray starts
            raise ValueError(f"verify.workers must be >= 1 (got {workers})")
        super().__init__(workers, timeout_s, transport=RayTransport(workers))


def open_pool(workers: int, timeout_s: float, *, ray: bool = False) -> VerifierPool:
    """The verifier pool of a run: local worker processes, or Ray actors wherever the Ray
    cluster has CPUs (`ray`: `run.backend: ray`)."""
    if ray:
        return RayVerifierPool(workers=workers, timeout_s=timeout_s)
    return VerifierPool(workers=workers, timeout_s=timeout_s)
