"""All policies in the driver process, one after the other."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from graft.backends import Then
from graft.policy import Policy, PolicySpec
from graft.rollout import SamplingParams
from graft.types import Imported, PeerResponse, Problem, Rollout, TrainGroup


class InProcessBackend:
    def __init__(self, specs: Sequence[PolicySpec]) -> None:
        self.policies = {s.model.name: Policy(s) for s in specs}
        self.names = tuple(self.policies)

    def generate(
        self,
        problems: Sequence[Problem],
        *,
        n: int,
        params: SamplingParams,
        seeds: Mapping[str, int],
        then: Then | None = None,
    ) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, p in self.policies.items():
            rollouts: list[Rollout] = p.generate(problems, n=n, params=params, seed=seeds[name])
            out[name] = rollouts if then is None else then(name, rollouts)
        return out

    def import_responses(
        self, requests: Mapping[str, Sequence[PeerResponse]], *, too_long: str
    ) -> dict[str, list[Imported]]:
        return {
            name: self.policies[name].import_responses(reqs, too_long=too_long)
            for name, reqs in requests.items()
        }

    def train(
        self, batches: Mapping[str, Sequence[TrainGroup]], *, seeds: Mapping[str, int]
    ) -> dict[str, dict[str, float]]:
        return {name: self.policies[name].train(b, seed=seeds[name]) for name, b in batches.items()}

    def describe(self) -> dict[str, dict[str, str]]:
        return {name: p.describe() for name, p in self.policies.items()}

    def save(self, directory: Path, names: Sequence[str] | None = None) -> None:
        for name, p in self.policies.items():
            if names is None or name in names:
                p.save(directory / name)

    def load(self, directory: Path) -> None:
        for name, p in self.policies.items():
            p.load(directory / name)

    def close(self) -> None:
        self.policies.clear()
