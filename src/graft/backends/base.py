"""The backend interface and its one implementation, over batches of per-policy calls.

Every backend method (generate, import_responses, encode_responses, score, train, usage, describe,
save, load) becomes one call `(method, args, kwargs)` per named policy, handed to `_call` as a
batch. The transports (policies in this process, worker processes, Ray actors) differ only in how
`_call` carries out the batch and takes the answers. Only plain data crosses: graft's records
(`graft.types`), strings and numbers.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar, overload

from graft.rollout import SamplingParams
from graft.types import Imported, PeerResponse, Problem, Rollout, TrainGroup

A = TypeVar("A")
T = TypeVar("T")

Then = Callable[[str, A], T]
"""`then(name, answer)`: run in the driver on one policy's answer as soon as it is there; what it
returns is kept instead of the answer."""

Call = tuple[str, tuple[Any, ...], dict[str, Any]]
"""`(method, args, kwargs)`: `getattr(policy, method)(*args, **kwargs)` on one policy."""

Calls = Mapping[str, Call]
"""One call per named policy."""


def keep(name: str, answer: A) -> A:
    """The `then` that keeps each policy's answer as it is."""
    return answer


def answer(policy: object, call: Call) -> Any:
    """Carry out one call on a policy (in whichever process holds it)."""
    method, args, kwargs = call
    return getattr(policy, method)(*args, **kwargs)


class Generator(Protocol):
    """Anything that samples n responses per problem for named policies (a backend, a test fake)."""

    names: tuple[str, ...]

    def generate(
        self,
        problems: Sequence[Problem],
        *,
        n: int,
        params: SamplingParams,
        seeds: Mapping[str, int],
    ) -> dict[str, list[Rollout]]: ...


class Answers(Generic[T]):
    """The answers of several policies, in whatever order they arrive.

    `then(name, answer)` runs in the driver on each answer as it arrives (while the other policies
    still work), and its result is kept instead. Once one policy failed, `then` is no longer run.
    Every policy must have answered before `result` raises the first error, so that no answer is
    left unread on its channel.
    """

    def __init__(self, then: Then[Any, T]) -> None:
        self.then = then
        self.values: dict[str, T] = {}
        self.errors: list[BaseException] = []

    def ok(self, name: str, value: Any) -> None:
        if self.errors:
            return
        try:
            self.values[name] = self.then(name, value)
        except BaseException as exc:  # raised once every policy has answered
            self.errors.append(exc)

    def error(self, exc: BaseException) -> None:
        self.errors.append(exc)

    def result(self, names: Sequence[str]) -> dict[str, T]:
        if self.errors:
            raise self.errors[0]
        return {name: self.values[name] for name in names}


class Backend(ABC):
    """The heavy work of named policies: sample (a `Generator`, shared with evaluation), import
    peer responses, train, describe, save and load. A transport implements `_call` and `close`."""

    names: tuple[str, ...]

    @abstractmethod
    def _call(self, calls: Calls, then: Then[Any, T]) -> dict[str, T]:
        """Carry out each named policy's call, `then(name, answer)` in the driver on each answer
        as soon as it is there; the kept values in the order of `calls`."""

    @abstractmethod
    def close(self) -> None:
        """Let the policies go (and whatever holds them)."""

    @overload
    def generate(
        self,
        problems: Sequence[Problem],
        *,
        n: int,
        params: SamplingParams,
        seeds: Mapping[str, int],
        then: None = None,
        names: Sequence[str] | None = None,
    ) -> dict[str, list[Rollout]]: ...

    @overload
    def generate(
        self,
        problems: Sequence[Problem],
        *,
        n: int,
        params: SamplingParams,
        seeds: Mapping[str, int],
        then: Then[list[Rollout], T],
        names: Sequence[str] | None = None,
    ) -> dict[str, T]: ...

    def generate(
        self,
        problems: Sequence[Problem],
        *,
        n: int,
        params: SamplingParams,
        seeds: Mapping[str, int],
        then: Then[list[Rollout], Any] | None = None,
        names: Sequence[str] | None = None,
    ) -> dict[str, Any]:
        """Each policy's rollouts (of the policies in `names`, default all); with `then`,
        `then(name, rollouts)` run in the driver on each policy's rollouts as soon as they are
        there (while the other policies may still sample), and its result kept instead."""
        problems = list(problems)
        calls = {
            name: ("generate", (problems,), {"n": n, "params": params, "seed": seeds[name]})
            for name in (self.names if names is None else names)
        }
        return self._call(calls, keep if then is None else then)

    def import_responses(
        self, requests: Mapping[str, Sequence[PeerResponse]], *, too_long: str
    ) -> dict[str, list[Imported]]:
        """Each named policy's `Policy.import_responses` of its peer responses."""
        calls = {
            name: ("import_responses", (list(reqs),), {"too_long": too_long})
            for name, reqs in requests.items()
        }
        return self._call(calls, keep)

    def encode_responses(
        self, requests: Mapping[str, Sequence[PeerResponse]], *, too_long: str
    ) -> dict[str, list[Imported]]:
        """Each named policy's `Policy.encode_responses`: the texts in its tokens, unscored."""
        calls = {
            name: ("encode_responses", (list(reqs),), {"too_long": too_long})
            for name, reqs in requests.items()
        }
        return self._call(calls, keep)

    def score(
        self, sequences: Mapping[str, tuple[Sequence[Sequence[int]], Sequence[Sequence[int]]]]
    ) -> dict[str, list[tuple[float, ...]]]:
        """Each named policy's `Policy.score` of its (prompts, responses): behavior log-probs."""
        calls = {
            name: ("score", (list(prompts), list(responses)), {})
            for name, (prompts, responses) in sequences.items()
        }
        return self._call(calls, keep)

    def train(
        self, batches: Mapping[str, Sequence[TrainGroup]], *, seeds: Mapping[str, int]
    ) -> dict[str, dict[str, float]]:
        """One update of each named policy on its batch; its training stats."""
        calls = {name: ("train", (list(b),), {"seed": seeds[name]}) for name, b in batches.items()}
        return self._call(calls, keep)

    def usage(self) -> dict[str, dict[str, float]]:
        """Each policy's `Policy.usage`: what it has cost since it started (graft.training.cost)."""
        return self._call({name: ("usage", (), {}) for name in self.names}, keep)

    def describe(self) -> dict[str, dict[str, str]]:
        """Each policy's provenance (`Policy.describe`)."""
        return self._call({name: ("describe", (), {}) for name in self.names}, keep)

    def save(self, directory: Path, names: Sequence[str] | None = None) -> None:
        """Each policy (or each one in `names`) writes directory/<name>; across machines
        `directory` must be shared."""
        chosen = self.names if names is None else [n for n in self.names if n in names]
        self._call({name: ("save", (str(directory / name),), {}) for name in chosen}, keep)

    def load(self, directory: Path) -> None:
        """Each policy reads directory/<name>."""
        self._call({name: ("load", (str(directory / name),), {}) for name in self.names}, keep)
