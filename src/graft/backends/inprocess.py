"""All policies in the driver process, one after the other."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from graft.backends.base import Backend, Calls, T, Then, answer
from graft.training.policy import Policy, PolicySpec


class InProcessBackend(Backend):
    def __init__(self, specs: Sequence[PolicySpec]) -> None:
        self.policies = {s.model.name: Policy(s) for s in specs}
        self.names = tuple(self.policies)

    def _call(self, calls: Calls, then: Then[Any, T]) -> dict[str, T]:
        """Each call in turn, `then` on its answer at once; an error is raised at once (no other
        policy is working, so none has an answer left to take)."""
        return {name: then(name, answer(self.policies[name], call)) for name, call in calls.items()}

    def close(self) -> None:
        for policy in self.policies.values():
            policy.close()
        self.policies.clear()
