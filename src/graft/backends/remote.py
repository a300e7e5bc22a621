"""The backend methods shared by every backend whose policies live elsewhere (worker processes,
Ray actors): each call becomes `(method, args, kwargs)` per policy, sent to all of them before any
answer is awaited, so that the policies work in parallel."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from graft.rollout import SamplingParams
from graft.transfer import Imported, PeerResponse
from graft.types import Problem, Rollout, TrainGroup

Calls = Mapping[str, tuple[str, tuple, dict]]


class RemoteBackend:
    names: tuple[str, ...]

    def _call(self, calls: Calls) -> dict[str, Any]:
        """Run `getattr(policy, method)(*args, **kwargs)` for each named policy, in parallel."""
        raise NotImplementedError

    def generate(
        self,
        problems: Sequence[Problem],
        *,
        n: int,
        params: SamplingParams,
        seeds: Mapping[str, int],
    ) -> dict[str, list[Rollout]]:
        problems = list(problems)
        kwargs = {"n": n, "params": params}
        return self._call(
            {
                name: ("generate", (problems,), {**kwargs, "seed": seeds[name]})
                for name in self.names
            }
        )

    def import_responses(
        self, requests: Mapping[str, Sequence[PeerResponse]], *, too_long: str
    ) -> dict[str, list[Imported]]:
        return self._call(
            {
                name: ("import_responses", (list(reqs),), {"too_long": too_long})
                for name, reqs in requests.items()
            }
        )

    def train(
        self, batches: Mapping[str, Sequence[TrainGroup]], *, seeds: Mapping[str, int]
    ) -> dict[str, dict[str, float]]:
        return self._call(
            {name: ("train", (list(b),), {"seed": seeds[name]}) for name, b in batches.items()}
        )

    def describe(self) -> dict[str, dict[str, str]]:
        return self._call({name: ("describe", (), {}) for name in self.names})

    def save(self, directory: Path, names: Sequence[str] | None = None) -> None:
        """Each policy writes directory/<name>; across machines `directory` must be shared."""
        chosen = self.names if names is None else [n for n in self.names if n in names]
        self._call({name: ("save", (str(directory / name),), {}) for name in chosen})

    def load(self, directory: Path) -> None:
        self._call({name: ("load", (str(directory / name),), {}) for name in self.names})
