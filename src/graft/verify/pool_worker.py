"""The worker side of the verifier pool (`graft.verify.pool`): load verifiers, verify a chunk of
items, and count the CPU seconds the chunk cost. A local worker process runs `worker_loop`; a Ray
actor (`graft.verify.pool_ray`) calls `run_chunk` directly."""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import sys
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection

from graft.procutil import die_with_parent
from graft.types import VERDICT_CATEGORIES, Verdict, clip_detail
from graft.verify.registry import Verifier, resolve_verifier

READY, LOADING = "ready", "loading"
"""A worker's messages besides a chunk's verdicts: started (or done importing), importing."""

Chunk = Sequence[tuple[str, str, str, str]]
"""(verifier_name, response, gold, problem) items."""
Done = tuple[list[tuple[str, str, str]], float]
"""A chunk's (category, detail, reason) verdicts and the CPU seconds verifying it cost."""


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


def load(name: str) -> Verifier | Exception:
    """Resolve a verifier and import what it needs (`Verifier.prepare`: math loads sympy and
    math-verify, ~1 s)."""
    try:
        verifier = resolve_verifier(name)
        verifier.prepare()
        return verifier
    except Exception as exc:
        return exc


def run_one(fn: Verifier | Exception, name: str, response: str, gold: str, problem: str) -> Verdict:
    if isinstance(fn, Exception):
        return Verdict("error", clip_detail(f"cannot load verifier {name!r}: {fn}"), "other")
    try:
        verdict = fn(response, gold, problem)
    except Exception as exc:
        return Verdict.raised(exc)
    if not (
        isinstance(verdict, Verdict)
        and verdict.category in VERDICT_CATEGORIES
        and isinstance(verdict.detail, str)
        and isinstance(verdict.reason, str)
    ):
        return Verdict(
            "error", clip_detail(f"verifier {name!r} returned {verdict!r}, not a Verdict"), "other"
        )
    return verdict


def cpu_seconds() -> float:
    """CPU seconds of this process, of its children that have been reaped (a sandboxed program
    run as a plain child, a sandbox's init once it ends), and of the sandboxed programs that are
    not its children, as the sandbox counts them (`graft.sandbox.run.PROGRAM_CPU_S`, read only
    where that module was imported and has the counter)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    programs = getattr(sys.modules.get("graft.sandbox.run"), "PROGRAM_CPU_S", 0.0)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime + float(programs)


def run_chunk(
    loaded: dict[str, Verifier | Exception],
    chunk: Chunk,
    say: Callable[[str], None] | None = None,
) -> Done:
    """Verify a chunk, loading verifiers not in `loaded` (telling `say` LOADING, then READY, so
    that imports do not count against the items' time limit); its CPU seconds (`cpu_seconds`)."""
    start = cpu_seconds()
    out = []
    for name, response, gold, problem in chunk:
        if name not in loaded:
            if say is not None:
                say(LOADING)
            loaded[name] = load(name)
            if say is not None:
                say(READY)
        verdict = run_one(loaded[name], name, response, gold, problem)
        out.append((verdict.category, clip_detail(verdict.detail), verdict.reason))
    return out, max(0.0, cpu_seconds() - start)


def worker_loop(conn: Connection, parent_sys_path: list[str]) -> None:
    """Verify the chunks of items sent by the pool; exit on None or when the parent goes away."""
    # Ctrl-C is the parent's business: it closes the pool; workers must not print tracebacks.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent()
    # Plug-in verifiers import from the parent's path, not the forkserver's (set when it started).
    sys.path[:] = parent_sys_path
    conn.send(READY)
    loaded: dict[str, Verifier | Exception] = {}
    while True:
        try:
            chunk = conn.recv()
        except (EOFError, OSError):
            return
        if chunk is None:
            return
        conn.send(run_chunk(loaded, chunk, conn.send))
