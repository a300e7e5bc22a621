"""A sandbox for untrusted programs (the code task's candidates): namespaces, a read-only root,
cgroup limits and an external wall clock (`run.py`); function-call tests judged outside it
(`calls.py`), assert tests in a checker's sandbox of their own (`asserts.py`), and the one judge
of every form's test cases (`judge.py`)."""

from graft.sandbox.calls import CallReturn, call_in_sandbox, same_value
from graft.sandbox.run import (
    STATUSES,
    IsolationError,
    Limits,
    Outcome,
    isolation_problem,
    run_sandboxed,
)

__all__ = [
    "STATUSES",
    "CallReturn",
    "IsolationError",
    "Limits",
    "Outcome",
    "call_in_sandbox",
    "isolation_problem",
    "run_sandboxed",
    "same_value",
]
