"""The process pool that runs verifiers under a hard per-response time limit.

Workers are long-lived processes (forkserver context: the trainer holds torch threads, so no fork).
A response past its deadline gets its worker killed (SIGKILL), is scored `timeout`, and a fresh
worker takes the place of the old one; the rest of the batch carries on. Verifier hangs are the most
common cause of frozen RLVR runs, and SIGALRM-based limits do not work in threads.

The deadline of an item is the larger of `timeout_s` and its built-in verifier's time budget for
the item's gold (`Verifier.time_budget`: the code verifiers run each test as its own sandboxed
program, so a problem with more tests gets more time); a plug-in's is `timeout_s`. Workers
report the CPU seconds each chunk cost (`cpu_s`: theirs, their children's and their sandboxed
programs'). The scheduling here is the same for every transport: local worker processes
(`LocalTransport`, the default) or Ray actors (`graft.verify.pool_ray`, which also holds
`open_pool`, a run's pool of either kind).
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing
import sys
import time
import weakref
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any, Protocol

from graft.types import Verdict
from graft.verify.pool_worker import LOADING, READY, worker_loop
from graft.verify.registry import built_in, check_name

_START_LIMIT_S = 60.0
"""Limit on starting a worker, and on importing a verifier's modules."""
_MAIN_GUARD_HINT = (
    "workers re-import the main module, so a script that creates a VerifierPool at import time "
    "needs an `if __name__ == '__main__':` guard"
)
# Items go out in chunks sized to take about this long (never over a tenth of the time limit):
# one pipe round trip per item costs ~50-100 us, more than a final_number check itself.
_CHUNK_TARGET_S = 0.01
_MAX_CHUNK = 64
_BUDGET_CACHE = 4096
"""Time budgets kept per pool (by verifier and gold), so a group's responses parse their tests
once."""


class WorkerGone(Exception):
    """A worker could not be sent its chunk (it has died)."""


class Transport(Protocol):
    """How the pool starts, feeds, hears from and kills its workers. A worker sends READY once
    started, LOADING / READY around importing a verifier, and for each chunk its `Done`."""

    def start(self) -> Any:
        """Start one worker; its handle."""

    def send(self, handle: Any, chunk: list[tuple[str, str, str, str]]) -> bool:
        """Give the worker a chunk; True when it imports a verifier first (the time limit counts
        from its READY). WorkerGone when it has died."""

    def wait(self, handles: Sequence[Any], timeout_s: float) -> list[Any]:
        """The handles with a message to receive (or dead), waiting up to `timeout_s`."""

    def receive(self, handle: Any) -> Any:
        """The worker's next message; None when it died."""

    def kill(self, handle: Any) -> None: ...

    def death(self, handle: Any) -> str:
        """How a dead worker ended, for a verdict's detail."""

    def start_failure(self, handle: Any) -> Exception:
        """The error for a worker that died while starting."""

    def start_timeout(self) -> Exception:
        """The error for a worker that did not start within the start limit."""

    def pid(self, handle: Any) -> int: ...

    def stop(self, workers: list[Any]) -> None:
        """Stop every worker (`_Worker`s) and clear the list; at close, exit or collection."""


@dataclass(eq=False)
class _Local:
    proc: Any  # a Process of the pool's multiprocessing context
    conn: Connection


class LocalTransport:
    """Worker processes on this machine (forkserver where available, else spawn)."""

    def __init__(self) -> None:
        forkserver = "forkserver" in multiprocessing.get_all_start_methods()
        self._ctx = multiprocessing.get_context("forkserver" if forkserver else "spawn")

    def start(self) -> _Local:
        parent_end, child_end = self._ctx.Pipe(duplex=True)
        args = (child_end, list(sys.path))
        proc = self._ctx.Process(target=worker_loop, args=args, name="graft-verifier", daemon=True)
        proc.start()
        child_end.close()  # so the parent sees EOF when the worker dies
        return _Local(proc, parent_end)

    def send(self, handle: _Local, chunk: list[tuple[str, str, str, str]]) -> bool:
        try:
            handle.conn.send(chunk)
        except (OSError, ValueError):
            raise WorkerGone from None
        return False  # the worker says when it imports

    def wait(self, handles: Sequence[_Local], timeout_s: float) -> list[_Local]:
        by = {h.conn: h for h in handles} | {h.proc.sentinel: h for h in handles}
        return list(dict.fromkeys(by[r] for r in wait(list(by), timeout_s)))

    def receive(self, handle: _Local) -> Any:
        try:
            if handle.conn.poll():
                return handle.conn.recv()
        except (EOFError, OSError):
            pass
        return None

    def kill(self, handle: _Local) -> None:
        handle.proc.kill()
        handle.proc.join(5.0)
        handle.conn.close()

    def death(self, handle: _Local) -> str:
        handle.proc.join(1.0)
        return f"exit code {handle.proc.exitcode}"

    def start_failure(self, handle: _Local) -> Exception:
        handle.proc.join(1.0)
        return RuntimeError(
            f"a verifier worker exited while starting (exit code {handle.proc.exitcode}); see its "
            f"traceback above; {_MAIN_GUARD_HINT}"
        )

    def start_timeout(self) -> Exception:
        return RuntimeError(f"a verifier worker did not start in {_START_LIMIT_S:g} s")

    def pid(self, handle: _Local) -> int:
        return handle.proc.pid

    def stop(self, workers: list[Any]) -> None:
        """Ask idle workers to exit, SIGKILL the rest."""
        for w in workers:
            with contextlib.suppress(OSError, ValueError):
                w.handle.conn.send(None)
        deadline = time.monotonic() + 1.0
        for w in workers:
            proc = w.handle.proc
            proc.join(max(0.0, deadline - time.monotonic()))
            if proc.is_alive():
                proc.kill()
                proc.join(5.0)
            w.handle.conn.close()
        workers.clear()


@dataclass(eq=False)
class _Worker:
    handle: Any
    started: float
    ready: bool = False
    """The worker has started (imports done); deadlines count from then."""
    chunk: tuple[int, ...] = ()
    """Indices of the items in flight; empty when idle."""
    sent: float = 0.0
    limit: float = 0.0
    """The chunk's time limit: its largest item's."""
    deadline: float = math.inf


class VerifierPool:
    """Long-lived verifier workers with a hard per-item time limit.

    No item ever runs longer than its limit (`timeout_s`; a code problem's time budget when that
    is larger): a worker still busy then is killed (SIGKILL) and replaced. Fast items travel in
    small chunks (one round trip per chunk; a chunk must finish within its largest item's limit
    as a whole); when a chunk overruns or its worker dies, its items are rerun one per message,
    and only an item that overruns ALONE is scored `timeout` (one whose worker dies alone:
    `error`). Workers start once (forkserver: they never inherit the parent's torch threads) and
    are reused across `verify` calls; `close()`, the end of a `with` block, garbage collection or
    interpreter exit stops them. A worker that cannot start raises RuntimeError, and any exception
    escaping `verify` (or `verify_iter`, abandoned included) closes the pool (items may be in
    flight). `cpu_s` counts the CPU seconds the workers reported. One caller at a time: the pool
    is not thread-safe.
    """

    def __init__(
        self, workers: int = 2, timeout_s: float = 5.0, *, transport: Transport | None = None
    ) -> None:
        if workers < 1:
            raise ValueError(f"verify.workers must be >= 1 (got {workers})")
        if not timeout_s > 0:
            raise ValueError(f"verify.timeout_s must be > 0 (got {timeout_s})")
        self.num_workers = workers
        self.timeout_s = float(timeout_s)
        self.cpu_s = 0.0
        """CPU seconds the workers spent verifying (what each chunk's worker reported; an item
        whose worker was killed at its deadline is not counted)."""
        self._transport = transport or LocalTransport()
        self._cost: dict[str, float] = {}  # running mean seconds per item, per verifier name
        self._budgets: dict[tuple[str, str], float] = {}
        self._workers: list[_Worker] = []
        self._finalizer = weakref.finalize(self, self._transport.stop, self._workers)
        try:
            self._workers.extend(self._start() for _ in range(workers))
            for w in self._workers:  # fail here, not in the first training step
                left = max(0.0, w.started + _START_LIMIT_S - time.monotonic())
                if not self._transport.wait([w.handle], left):
                    raise self._transport.start_timeout()
                self._receive(w, [], (), deque())
        except BaseException:
            self.close()
            raise

    def _start(self) -> _Worker:
        return _Worker(self._transport.start(), started=time.monotonic())

    def _replace(self, w: _Worker) -> _Worker:
        self._transport.kill(w.handle)
        w.chunk = ()
        new = self._start()
        self._workers[self._workers.index(w)] = new
        return new

    @property
    def pids(self) -> tuple[int, ...]:
        """Process ids of the current workers (they change when a worker is replaced)."""
        return tuple(self._transport.pid(w.handle) for w in self._workers)

    def verify(self, items: Sequence[tuple[str, ...]]) -> list[Verdict]:
        """Verdicts of (verifier_name, response, gold, problem) items, in input order; an item
        without its fourth string has no problem text ("")."""
        results: list[Verdict | None] = [None] * len(items)
        for i, verdict in self.verify_iter(items):
            results[i] = verdict
        return results  # type: ignore[return-value]

    def verify_iter(self, items: Sequence[tuple[str, ...]]) -> Iterator[tuple[int, Verdict]]:
        """(index, verdict) of each item as its verdict arrives (completion order). The items are
        checked here, before any is sent; leaving the iteration early closes the pool."""
        if not self._finalizer.alive:
            raise RuntimeError("VerifierPool.verify() called after close()")
        for i, item in enumerate(items):
            if len(item) not in (3, 4) or not all(isinstance(x, str) for x in item):
                raise TypeError(
                    f"item {i} is not (verifier_name, response, gold[, problem]) strings: {item!r}"
                )
        full = [(*item, "") if len(item) == 3 else tuple(item) for item in items]
        for name in {item[0] for item in full}:
            check_name(name)
        return self._verdicts(full)

    def _verdicts(self, items: Sequence[tuple[str, ...]]) -> Iterator[tuple[int, Verdict]]:
        done: list[tuple[int, Verdict]] = []
        todo, alone = deque(range(len(items))), deque[int]()
        try:
            while todo or alone or any(w.chunk for w in self._workers):
                for w in list(self._workers):
                    if not w.chunk and (todo or alone):
                        self._send(w, self._next_chunk(items, todo, alone), items)
                self._collect(done, items, alone)
                while done:
                    yield done.pop(0)
        except BaseException:  # GeneratorExit included: items may be in flight
            self.close()
            raise

    def _limit(self, item: tuple[str, ...]) -> float:
        """An item's time limit: `timeout_s`, or its verifier's time budget when larger."""
        verifier, key = built_in(item[0]), (item[0], item[2])
        if verifier is None:
            return self.timeout_s
        if key not in self._budgets:
            if len(self._budgets) >= _BUDGET_CACHE:
                self._budgets.clear()
            self._budgets[key] = verifier.time_budget(item[2])
        return max(self.timeout_s, self._budgets[key])

    def _next_chunk(self, items: Sequence, todo: deque[int], alone: deque[int]) -> tuple[int, ...]:
        if alone:
            return (alone.popleft(),)
        name = items[todo[0]][0]
        cost = self._cost.get(name, math.inf)
        size = int(min(_CHUNK_TARGET_S, self.timeout_s / 10) / max(cost, 1e-7))
        size = max(1, min(size, _MAX_CHUNK, -(-len(todo) // self.num_workers)))
        chunk = [todo.popleft()]
        while todo and len(chunk) < size and items[todo[0]][0] == name:
            chunk.append(todo.popleft())
        return tuple(chunk)

    def _send(self, w: _Worker, chunk: tuple[int, ...], items: Sequence) -> None:
        message = [tuple(items[i]) for i in chunk]
        try:
            loading = self._transport.send(w.handle, message)
        except WorkerGone:
            if not w.ready:
                raise self._transport.start_failure(w.handle) from None
            w = self._replace(w)  # it died while idle: its replacement takes the chunk
            loading = self._transport.send(w.handle, message)
        w.chunk, w.sent = chunk, time.monotonic()
        w.limit = max(self._limit(items[i]) for i in chunk)
        if not w.ready:
            w.deadline = math.inf
        else:
            w.deadline = w.sent + (_START_LIMIT_S if loading else w.limit)

    def _receive(self, w: _Worker, done: list, items: Sequence, alone: deque[int]) -> None:
        """Take one message from a worker that signalled; handle its death (no message)."""
        message = self._transport.receive(w.handle)
        now = time.monotonic()
        if message is None and not w.ready:
            raise self._transport.start_failure(w.handle)
        if message is None:  # died in the middle of its chunk
            how = self._transport.death(w.handle)
            if len(w.chunk) == 1:
                name = items[w.chunk[0]][0]
                done.append(
                    (
                        w.chunk[0],
                        Verdict("error", f"verifier worker died ({how}) on {name!r}", "other"),
                    )
                )
            else:
                alone.extend(w.chunk)
            self._replace(w)
        elif message == LOADING:  # a Ray actor may say so before it says READY
            w.ready, w.deadline = True, now + _START_LIMIT_S
        elif message == READY:
            w.ready, w.sent = True, now
            w.deadline = now + w.limit
        else:
            verdicts, cpu_s = message
            self.cpu_s += cpu_s
            for i, (category, detail, reason) in zip(w.chunk, verdicts, strict=True):
                done.append((i, Verdict(category, detail, reason)))
            name, per_item = items[w.chunk[0]][0], (now - w.sent) / len(w.chunk)
            self._cost[name] = 0.7 * self._cost.get(name, per_item) + 0.3 * per_item
            w.chunk = ()

    def _collect(self, done: list, items: Sequence, alone: deque[int]) -> None:
        """Wait for the next message or deadline; record verdicts, replace dead or late workers."""
        busy = [w for w in self._workers if w.chunk]
        if not busy:
            return
        deadlines = [w.deadline if w.ready else w.started + _START_LIMIT_S for w in busy]
        wait_s = max(0.0, min(deadlines) - time.monotonic())
        ready = {id(h) for h in self._transport.wait([w.handle for w in busy], wait_s)}
        for w in busy:
            if id(w.handle) in ready:
                self._receive(w, done, items, alone)
        now = time.monotonic()
        for w in busy:
            if not w.chunk or w not in self._workers:
                continue
            if not w.ready and now >= w.started + _START_LIMIT_S:
                raise self._transport.start_timeout()
            if now < w.deadline:
                continue
            name = items[w.chunk[0]][0]
            self._cost[name] = max(self._cost.get(name, 0.0), w.limit)
            if len(w.chunk) == 1:
                why = f"no verdict in {w.limit:g} s ({name!r}); worker killed"
                done.append((w.chunk[0], Verdict("timeout", why, "timeout")))
            else:
                alone.extend(w.chunk)
            self._replace(w)

    def close(self) -> None:
        """Stop the workers; safe to call twice."""
        self._finalizer()

    def __enter__(self) -> VerifierPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
