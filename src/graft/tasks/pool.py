"""The process pool that runs verifiers under a hard per-response time limit.

Workers are long-lived processes (forkserver context: the trainer holds torch threads, so no fork).
A response past its deadline gets its worker killed (SIGKILL), is scored `timeout`, and a fresh
worker takes the place of the old one; the rest of the batch carries on. Verifier hangs are the most
common cause of frozen RLVR runs, and SIGALRM-based limits do not work in threads.
"""

from __future__ import annotations

import contextlib
import inspect
import math
import multiprocessing
import os
import signal
import sys
import time
import weakref
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any

from graft.procutil import die_with_parent
from graft.tasks.verify import (
    VERIFIERS,
    Verifier,
    _check_name,
    _clip,
    _error,
    _math,
    resolve_verifier,
    verify_math,
)
from graft.types import VERDICT_CATEGORIES, Verdict

# ---------------------------------------------------------------------------- worker process


def _die_with_parent() -> None:
    """Make sure a worker cannot outlive the training process, even one killed with SIGKILL.

    The worker's parent is the forkserver, which exits when the pipe from the training process
    reaches EOF; Linux then SIGKILLs the worker (PR_SET_PDEATHSIG). Each forkserver child inherits
    a write end of that pipe: it is closed here, or a hung worker would keep the forkserver, and so
    itself, alive.
    """
    from multiprocessing import forkserver

    server = getattr(forkserver, "_forkserver", None)
    alive_fd = getattr(server, "_forkserver_alive_fd", None)
    if alive_fd is not None:
        with contextlib.suppress(OSError):
            os.close(alive_fd)
        server._forkserver_alive_fd = None
    die_with_parent()


def _takes_problem(fn: Verifier) -> bool:
    """Does a verifier take the problem text as its third argument (two-argument plug-ins
    from before the problem was passed do not)?"""
    try:
        inspect.signature(fn).bind("", "", "")
    except TypeError:
        return False
    except ValueError:  # no signature (a builtin): call it the current way
        return True
    return True


def _load(name: str) -> Verifier | Exception:
    """Resolve a verifier and import what it needs (math: sympy and math-verify, ~1 s)."""
    try:
        fn = resolve_verifier(name)
        if fn is verify_math:
            _math()
        if not _takes_problem(fn):
            two_args = fn
            return lambda response, gold, problem: two_args(response, gold)
        return fn
    except Exception as exc:
        return exc


def _run_one(
    fn: Verifier | Exception, name: str, response: str, gold: str, problem: str
) -> Verdict:
    if isinstance(fn, Exception):
        return Verdict("error", _clip(f"cannot load verifier {name!r}: {fn}"))
    try:
        verdict = fn(response, gold, problem)
    except Exception as exc:
        return _error(exc)
    if not (
        isinstance(verdict, Verdict)
        and verdict.category in VERDICT_CATEGORIES
        and isinstance(verdict.detail, str)
    ):
        return Verdict("error", _clip(f"verifier {name!r} returned {verdict!r}, not a Verdict"))
    return verdict


def _worker_loop(conn: Connection, parent_sys_path: list[str]) -> None:
    """Verify the chunks of items sent by the pool; exit on None or when the parent goes away."""
    # Ctrl-C is the parent's business: it closes the pool; workers must not print tracebacks.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent()
    # Plug-in verifiers import from the parent's path, not the forkserver's (set when it started).
    sys.path[:] = parent_sys_path
    conn.send(_READY)
    loaded: dict[str, Verifier | Exception] = {}
    while True:
        try:
            chunk = conn.recv()
        except (EOFError, OSError):
            return
        if chunk is None:
            return
        out = []
        for name, response, gold, problem in chunk:
            if name not in loaded:
                # Imports (~1 s for math) do not count against the time limit of the item.
                conn.send(_LOADING)
                loaded[name] = _load(name)
                conn.send(_READY)
            verdict = _run_one(loaded[name], name, response, gold, problem)
            out.append((verdict.category, _clip(verdict.detail)))
        conn.send(out)


# ---------------------------------------------------------------------------- pool

_READY, _LOADING = "ready", "loading"
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


@dataclass(eq=False)
class _Worker:
    proc: Any  # a Process of the pool's multiprocessing context
    conn: Connection
    started: float
    ready: bool = False
    """The worker has started (imports done); deadlines count from then."""
    chunk: tuple[int, ...] = ()
    """Indices of the items in flight; empty when idle."""
    sent: float = 0.0
    deadline: float = math.inf


def _stop_workers(workers: list[_Worker]) -> None:
    """Ask idle workers to exit, SIGKILL the rest; also runs at exit and on garbage collection."""
    for w in workers:
        with contextlib.suppress(OSError, ValueError):
            w.conn.send(None)
    deadline = time.monotonic() + 1.0
    for w in workers:
        w.proc.join(max(0.0, deadline - time.monotonic()))
        if w.proc.is_alive():
            w.proc.kill()
            w.proc.join(5.0)
        w.conn.close()
    workers.clear()


class VerifierPool:
    """Long-lived verifier worker processes with a hard per-item time limit.

    No item ever runs longer than `timeout_s`: a worker still busy then is killed (SIGKILL) and
    replaced. Fast items travel in small chunks (one pipe round trip per chunk; a chunk must
    finish within `timeout_s` as a whole); when a chunk overruns or its worker dies, its items are
    rerun one per message, and only an item that overruns ALONE is scored `timeout` (one whose
    worker dies alone: `error`). Workers start once (forkserver: they never inherit the parent's
    torch threads) and are reused across `verify` calls; `close()`, the end of a `with` block,
    garbage collection or interpreter exit stops them. A worker that cannot start raises
    RuntimeError, and any exception escaping `verify` closes the pool (items may be in flight).
    One caller at a time: the pool is not thread-safe.
    """

    def __init__(self, workers: int = 2, timeout_s: float = 5.0) -> None:
        if workers < 1:
            raise ValueError(f"verify.workers must be >= 1 (got {workers})")
        if not timeout_s > 0:
            raise ValueError(f"verify.timeout_s must be > 0 (got {timeout_s})")
        self.num_workers = workers
        self.timeout_s = float(timeout_s)
        forkserver = "forkserver" in multiprocessing.get_all_start_methods()
        self._ctx = multiprocessing.get_context("forkserver" if forkserver else "spawn")
        self._cost: dict[str, float] = {}  # running mean seconds per item, per verifier name
        self._workers: list[_Worker] = []
        self._finalizer = weakref.finalize(self, _stop_workers, self._workers)
        try:
            self._workers.extend(self._start() for _ in range(workers))
            for w in self._workers:  # fail here, not in the first training step
                if not w.conn.poll(max(0.0, w.started + _START_LIMIT_S - time.monotonic())):
                    raise RuntimeError(f"a verifier worker did not start in {_START_LIMIT_S:g} s")
                self._receive(w, [], (), deque())
        except BaseException:
            self.close()
            raise

    def _start(self) -> _Worker:
        parent_end, child_end = self._ctx.Pipe(duplex=True)
        args = (child_end, list(sys.path))
        proc = self._ctx.Process(target=_worker_loop, args=args, name="graft-verifier", daemon=True)
        proc.start()
        child_end.close()  # so the parent sees EOF when the worker dies
        return _Worker(proc, parent_end, started=time.monotonic())

    def _replace(self, w: _Worker) -> _Worker:
        w.proc.kill()
        w.proc.join(5.0)
        w.conn.close()
        w.chunk = ()
        new = self._start()
        self._workers[self._workers.index(w)] = new
        return new

    @property
    def pids(self) -> tuple[int, ...]:
        """Process ids of the current workers (they change when a worker is replaced)."""
        return tuple(w.proc.pid for w in self._workers)

    def verify(self, items: Sequence[tuple[str, ...]]) -> list[Verdict]:
        """Verdicts of (verifier_name, response, gold, problem) items, in input order; an item
        without its fourth string has no problem text ("")."""
        if not self._finalizer.alive:
            raise RuntimeError("VerifierPool.verify() called after close()")
        for i, item in enumerate(items):
            if len(item) not in (3, 4) or not all(isinstance(x, str) for x in item):
                raise TypeError(
                    f"item {i} is not (verifier_name, response, gold[, problem]) strings: {item!r}"
                )
        items = [(*item, "") if len(item) == 3 else tuple(item) for item in items]
        for name in {item[0] for item in items}:
            if name not in VERIFIERS:
                _check_name(name)
        results: list[Verdict | None] = [None] * len(items)
        todo, alone = deque(range(len(items))), deque[int]()
        try:
            while todo or alone or any(w.chunk for w in self._workers):
                for w in list(self._workers):
                    if not w.chunk and (todo or alone):
                        self._send(w, self._next_chunk(items, todo, alone), items)
                self._collect(results, items, alone)
        except BaseException:
            self.close()
            raise
        return results  # type: ignore[return-value]

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
            w.conn.send(message)
        except (OSError, ValueError):
            if not w.ready:
                raise self._start_failure(w) from None
            w = self._replace(w)  # it died while idle: its replacement takes the chunk
            w.conn.send(message)
        w.chunk, w.sent = chunk, time.monotonic()
        w.deadline = w.sent + self.timeout_s if w.ready else math.inf

    def _start_failure(self, w: _Worker) -> RuntimeError:
        w.proc.join(1.0)
        return RuntimeError(
            f"a verifier worker exited while starting (exit code {w.proc.exitcode}); see its "
            f"traceback above; {_MAIN_GUARD_HINT}"
        )

    def _receive(self, w: _Worker, results: list, items: Sequence, alone: deque[int]) -> None:
        """Read one message from a worker that signalled; handle its death (EOF, or only the
        process sentinel fired)."""
        message = None
        try:
            if w.conn.poll():
                message = w.conn.recv()
        except (EOFError, OSError):
            pass
        now = time.monotonic()
        if message is None and not w.ready:
            raise self._start_failure(w)
        if message is None:  # died in the middle of its chunk
            w.proc.join(1.0)
            if len(w.chunk) == 1:
                name = items[w.chunk[0]][0]
                results[w.chunk[0]] = Verdict(
                    "error", f"verifier worker died (exit code {w.proc.exitcode}) on {name!r}"
                )
            else:
                alone.extend(w.chunk)
            self._replace(w)
        elif message == _LOADING:
            w.deadline = now + _START_LIMIT_S
        elif message == _READY:
            w.ready, w.sent = True, now
            w.deadline = now + self.timeout_s
        else:
            for i, (category, detail) in zip(w.chunk, message, strict=True):
                results[i] = Verdict(category, detail)
            name, per_item = items[w.chunk[0]][0], (now - w.sent) / len(w.chunk)
            self._cost[name] = 0.7 * self._cost.get(name, per_item) + 0.3 * per_item
            w.chunk = ()

    def _collect(self, results: list, items: Sequence, alone: deque[int]) -> None:
        """Wait for the next message or deadline; record verdicts, replace dead or late workers."""
        busy = [w for w in self._workers if w.chunk]
        if not busy:
            return
        deadlines = [w.deadline if w.ready else w.started + _START_LIMIT_S for w in busy]
        wait_s = max(0.0, min(deadlines) - time.monotonic())
        ready = set(wait([w.conn for w in busy] + [w.proc.sentinel for w in busy], wait_s))
        for w in busy:
            if w.conn in ready or w.proc.sentinel in ready:
                self._receive(w, results, items, alone)
        now = time.monotonic()
        for w in busy:
            if not w.chunk or w not in self._workers:
                continue
            if not w.ready and now >= w.started + _START_LIMIT_S:
                raise RuntimeError(f"a verifier worker did not start in {_START_LIMIT_S:g} s")
            if now < w.deadline:
                continue
            name = items[w.chunk[0]][0]
            self._cost[name] = max(self._cost.get(name, 0.0), self.timeout_s)
            if len(w.chunk) == 1:
                results[w.chunk[0]] = Verdict(
                    "timeout", f"no verdict in {self.timeout_s:g} s ({name!r}); worker killed"
                )
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
