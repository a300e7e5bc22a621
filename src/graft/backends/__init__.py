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

import os
from collections.abc import Sequence

from graft.backends.base import Backend, Generator, Then
from graft.config import Config
from graft.training.policy import PolicySpec
from graft.training.update import UpdateSettings

__all__ = [
    "BACKENDS",
    "Backend",
    "Generator",
    "Then",
    "check_ray_start",
    "make_backend",
    "policy_specs",
    "resolve_backend",
]

BACKENDS = ("inprocess", "processes", "ray")


def resolve_backend(kind: str, num_policies: int, *, sharded: bool = False) -> str:
    """`auto`: parallel worker processes for several policies or a sharded one, in-process for
    one policy on one rank."""
    if kind == "auto":
        return "processes" if num_policies > 1 or sharded else "inprocess"
    return kind


def make_backend(
    specs: Sequence[PolicySpec], kind: str = "auto", *, ray_strategy: str = "none"
) -> Backend:
    """The backend of `kind` (see `resolve_backend`) holding one policy per spec."""
    kind = resolve_backend(kind, len(specs), sharded=any(s.model.shards > 1 for s in specs))
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


def check_ray_start(cfg: Config) -> None:
    """`run.backend: ray` without RAY_ADDRESS: the local cluster graft starts (for the verifier
    pool first, then the policies) can hold the policies' actors; ConfigError before it starts."""
    if cfg.run.backend == "ray":
        from graft.backends.ray_backend import check_local_cluster

        check_local_cluster(policy_specs(cfg))


def policy_specs(cfg: Config) -> list[PolicySpec]:
    """One spec per model of a training config, with its share of the cores."""
    cores = os.cpu_count() or 1
    # Policies that run one after the other each get every core; parallel ones share them.
    sharded = any(m.shards > 1 for m in cfg.models)
    serial = resolve_backend(cfg.run.backend, len(cfg.models), sharded=sharded) == "inprocess"
    threads = cfg.run.threads or (cores if serial else max(1, cores // len(cfg.models)))
    return [
        PolicySpec(
            model=m,
            rollout=cfg.rollout,
            algo=cfg.algo,
            seed=cfg.run.seed,
            threads=threads,
            index=i,
            update=UpdateSettings.from_config(cfg.algo, cfg.rollout, m.optim, cfg.exchange),
        )
        for i, m in enumerate(cfg.models)
    ]
