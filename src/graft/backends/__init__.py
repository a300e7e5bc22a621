"""Backends run the heavy work of each policy (generate, import peer responses, train, save, load).

The trainer loop talks only to this interface and passes only plain records (`graft.types`,
`graft.transfer`); it never imports a model, a process pool or Ray.
- `inprocess`: every policy in the driver process, one after the other (one policy; debugging);
- `processes`: one worker process per policy on this machine, each with its share of the cores,
  working in parallel (the default for two or more policies);
- `ray`: one Ray actor per policy, on any machines of a Ray cluster (GPUs per policy).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from graft.evaluate import Generator
from graft.policy import PolicySpec
from graft.rollout import SamplingParams
from graft.types import Imported, PeerResponse, Problem, TrainGroup

Then = Callable[[str, Any], Any]
"""`then(name, answer)`: run in the driver on one policy's answer as soon as it is there."""


class Backend(Generator, Protocol):
    """A `Generator` (sampling, shared with evaluation) that also imports, trains and saves."""

    def generate(
        self,
        problems: Sequence[Problem],
        *,
        n: int,
        params: SamplingParams,
        seeds: Mapping[str, int],
        then: Then | None = None,
    ) -> dict[str, Any]:
        """Each policy's rollouts; with `then`, `then(name, rollouts)` run in the driver on each
        policy's rollouts as soon as they are there, while the other policies still sample."""
        ...

    def import_responses(
        self, requests: Mapping[str, Sequence[PeerResponse]], *, too_long: str
    ) -> dict[str, list[Imported]]: ...

    def train(
        self, batches: Mapping[str, Sequence[TrainGroup]], *, seeds: Mapping[str, int]
    ) -> dict[str, dict[str, float]]: ...

    def describe(self) -> dict[str, dict[str, str]]: ...

    def save(self, directory: Path, names: Sequence[str] | None = None) -> None: ...

    def load(self, directory: Path) -> None: ...

    def close(self) -> None: ...


BACKENDS = ("inprocess", "processes", "ray")


def resolve_backend(kind: str, num_policies: int) -> str:
    """`auto`: parallel worker processes for several policies, in-process for one."""
    if kind == "auto":
        return "processes" if num_policies > 1 else "inprocess"
    return kind


def make_backend(
    specs: Sequence[PolicySpec], kind: str = "auto", *, ray_strategy: str = "none"
) -> Backend:
    kind = resolve_backend(kind, len(specs))
    if kind == "inprocess":
        from graft.backends.inprocess import InProcessBackend

        return InProcessBackend(specs)
    if kind == "processes":
        from graft.backends.processes import ProcessBackend

        return ProcessBackend(specs)
    if kind == "ray":
        from graft.backends.ray_backend import RayBackend

        return RayBackend(specs, strategy=ray_strategy)
    raise ValueError(f"unknown run.backend {kind!r}; known: auto, {', '.join(BACKENDS)}")
