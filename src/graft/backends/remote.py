"""The backend methods shared by every backend whose policies live elsewhere (worker processes,
Ray actors): each call becomes `(method, args, kwargs)` per policy, sent to all of them before any
answer is awaited, so that the policies work in parallel. Answers are taken in the order they
arrive, so the driver can start on one policy's answer (`then`) while the others still work."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from graft.backends import Then
from graft.rollout import SamplingParams
from graft.types import Imported, PeerResponse, Problem, TrainGroup

Calls = Mapping[str, tuple[str, tuple, dict]]


class Answers:
    """The answers of several policies, in whatever order they arrive.

    `then(name, answer)` runs in the driver on each answer as it arrives (while the other policies
    still work), and its result is kept instead. Once one policy failed, `then` is no longer run.
    Every policy must have answered before `result` raises the first error, so that no answer is
    left unread on its channel.
    """

    def __init__(self, then: Then | None = None) -> None:
        self.then = then
        self.values: dict[str, Any] = {}
        self.errors: list[BaseException] = []

    def ok(self, name: str, value: Any) -> None:
        if self.errors:
            return
        if self.then is not None:
            try:
                value = self.then(name, value)
            except BaseException as exc:  # raised once every policy has answered
                self.errors.append(exc)
                return
        self.values[name] = value

    def error(self, exc: BaseException) -> None:
        self.errors.append(exc)

    def result(self, names: Sequence[str]) -> dict[str, Any]:
        if self.errors:
            raise self.errors[0]
        return {name: self.values[name] for name in names}


class RemoteBackend:
    names: tuple[str, ...]

    def _call(self, calls: Calls, then: Then | None = None) -> dict[str, Any]:
        """Run `getattr(policy, method)(*args, **kwargs)` for each named policy, in parallel, and
        `then(name, answer)` in the driver on each answer as soon as it arrives."""
        raise NotImplementedError

    def generate(
        self,
        problems: Sequence[Problem],
        *,
        n: int,
        params: SamplingParams,
        seeds: Mapping[str, int],
        then: Then | None = None,
    ) -> dict[str, Any]:
        problems = list(problems)
        kwargs = {"n": n, "params": params}
        calls = {
            name: ("generate", (problems,), {**kwargs, "seed": seeds[name]}) for name in self.names
        }
        return self._call(calls, then)

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
