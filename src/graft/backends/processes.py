"""One worker process per policy on this machine, working in parallel.

Each worker builds its `Policy` from a `PolicySpec` and serves method calls over a pipe. A call to
several policies is sent to all of them before any answer is awaited, so they compute at the same
time, each with its own share of the cores (`PolicySpec.threads`). Only graft's own records cross
the pipe, between processes of the same run.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import pickle
import signal
import traceback
from collections.abc import Sequence
from multiprocessing.connection import Connection, wait
from typing import Any

from graft.backends.base import Answers, Backend, Calls, T, Then, answer, keep
from graft.errors import PolicyWorkerError
from graft.procutil import die_with_parent, started_with
from graft.training.build import resolve_device
from graft.training.policy import Policy, PolicySpec
from graft.training.shards import rank_environment


def _portable(exc: BaseException) -> BaseException:
    """The exception itself when it survives pickling, else a RuntimeError with its traceback."""
    text = "".join(traceback.format_exception(exc))
    try:
        pickle.loads(pickle.dumps(exc))
        exc.add_note(f"in the policy worker:\n{text}")
        return exc
    except Exception:
        return RuntimeError(text)


def _serve(conn: Connection, spec: PolicySpec) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the driver's to handle
    die_with_parent()
    try:
        if spec.model.shards > 1:
            from graft.training.sharded_policy import ShardedPolicy

            policy: Policy = ShardedPolicy(spec)
        else:
            policy = Policy(spec)
    except BaseException as exc:
        conn.send(("error", _portable(exc)))
        return
    conn.send(("ok", None))
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message is None:
            policy.close()
            return
        try:
            conn.send(("ok", answer(policy, message)))
        except BaseException as exc:
            conn.send(("error", _portable(exc)))


def _rank_environment(spec: PolicySpec) -> dict[str, str]:
    """What the worker of a sharded policy (its rank 0) adds to its environment
    (graft.training.shards.rank_environment); nothing for an unsharded one."""
    if spec.model.shards == 1:
        return {}
    return rank_environment(resolve_device(spec.model.device))


class ProcessBackend(Backend):
    def __init__(self, specs: Sequence[PolicySpec], *, start_method: str = "spawn") -> None:
        ctx = multiprocessing.get_context(start_method)
        self.names = tuple(s.model.name for s in specs)
        self._conns: dict[str, Connection] = {}
        self._procs: dict[str, multiprocessing.process.BaseProcess] = {}
        for spec in specs:
            parent, child = ctx.Pipe()
            proc = ctx.Process(
                target=_serve,
                args=(child, spec),
                name=f"graft-policy-{spec.model.name}",
                # A sharded policy starts its other ranks itself, which a daemon may not do;
                # die_with_parent still ends it with the driver.
                daemon=spec.model.shards == 1,
            )
            with started_with(_rank_environment(spec)):
                proc.start()
            child.close()
            self._conns[spec.model.name], self._procs[spec.model.name] = parent, proc
        try:
            self._gather(self.names, keep)
        except BaseException:
            self.close()
            raise

    def _gather(self, names: Sequence[str], then: Then[Any, T]) -> dict[str, T]:
        """Receive one answer from each named worker, in arrival order (see `Answers`)."""
        answers = Answers(then)
        pending = {self._conns[name]: name for name in names}
        while pending:
            for conn in wait(list(pending)):
                name = pending.pop(conn)
                try:
                    status, value = conn.recv()
                except (EOFError, OSError):
                    proc = self._procs[name]
                    proc.join(timeout=5)
                    answers.error(
                        PolicyWorkerError(
                            f"policy {name!r}: its worker process died (exit code {proc.exitcode})"
                        )
                    )
                    continue
                if status == "ok":
                    answers.ok(name, value)
                else:
                    answers.error(value)
        return answers.result(names)

    def _call(self, calls: Calls, then: Then[Any, T]) -> dict[str, T]:
        """Send every call before receiving any answer, so that the workers compute in parallel;
        take the answers in arrival order (see `Answers`)."""
        for name, call in calls.items():
            try:
                self._conns[name].send(call)
            except (BrokenPipeError, OSError) as exc:
                raise PolicyWorkerError(f"policy {name!r}: its worker process is gone") from exc
        return self._gather(list(calls), then)

    def close(self) -> None:
        for conn in self._conns.values():
            with contextlib.suppress(BrokenPipeError, OSError):
                conn.send(None)
        for proc in self._procs.values():
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=5)
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()
        self._procs.clear()
