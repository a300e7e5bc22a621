"""Backends run the heavy work of each policy (generate, import peer responses, train, save, load).

The trainer loop talks only to the `Backend` interface and passes only plain records
(`graft.types`); it never imports a model, a process pool or Ray. One class (`base.Backend`) holds
the backend methods; the transports differ only in how they carry out a batch of per-policy calls:
- `inprocess`: every policy in the driver process, one after the other (one policy; debugging);
- `processes`: one worker process per policy on this machine, each with its share of the cores,
  working in parallel (the default for two or more policies);
- `ray`: one Ray actor per policy, on any machines of a Ray cluster (GPUs per policy).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from graft.backends.base import Backend, Generator, Then

if TYPE_CHECKING:
    from graft.policy import PolicySpec

__all__ = ["BACKENDS", "Backend", "Generator", "Then", "make_backend", "resolve_backend"]

BACKENDS = ("inprocess", "processes", "ray")


def resolve_backend(kind: str, num_policies: int) -> str:
    """`auto`: parallel worker processes for several policies, in-process for one."""
    if kind == "auto":
        return "processes" if num_policies > 1 else "inprocess"
    return kind


def make_backend(
    specs: Sequence[PolicySpec], kind: str = "auto", *, ray_strategy: str = "none"
) -> Backend:
    """The backend of `kind` (see `resolve_backend`) holding one policy per spec."""
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
