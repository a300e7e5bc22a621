"""One Ray actor per policy, each holding its model, tokenizer, optimizer and sampler.

`graft train` connects to an existing cluster when RAY_ADDRESS is set (ray.init reads it) and
otherwise starts a local one. Each actor reserves `models.N.num_gpus` / `num_cpus`. A policy with
`models.N.shards: K` is K actors, one per rank, joined in one process group: rank 0 is the policy's
actor and feeds the other ranks' actors (graft.training.sharded_policy). Placement groups decide
where the actors go: with `run.ray_strategy` none, a sharded policy's ranks are packed onto one
node (STRICT_PACK) and the other actors go where Ray puts them; with pack or spread, one group
holds every rank of every policy, packed onto as few nodes as possible or spread across them. A
group the cluster cannot hold ends the start in one line, never a wait. The driver keeps the cheap
data flow (verification, grouping, gate, weights, store, logging); only graft's plain records cross
to and from the actors. Ray is imported here only, and only when this backend is used.
"""

from __future__ import annotations

import contextlib
import os
import traceback
from collections.abc import Sequence
from typing import Any

from graft.backends.base import Answers, Backend, Call, Calls, T, Then, answer
from graft.config.lib import ConfigError
from graft.errors import PolicyWorkerError
from graft.extras import install_hint
from graft.training.policy import Policy, PolicySpec
from graft.training.sharded_policy import ShardedPolicy, free_port, join_rank, serve_rank


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ImportError(f"run.backend=ray needs Ray: {install_hint('ray')}") from None
    return ray


PLACEMENT_TIMEOUT_S = 120.0
"""How long a placement group may wait for the cluster's resources before the start gives up."""


class PolicyActor:
    """The body of a policy's Ray actor (wrapped with ray.remote at runtime): rank 0 of a sharded
    policy. `start` builds the policy, so that a sharded one can be told its ranks first."""

    def __init__(self, spec: PolicySpec) -> None:
        self.spec = spec
        self.policy: Policy | None = None

    def address(self) -> str:
        """A rendezvous address on this actor's node for the policy's shard group."""
        import ray

        return f"tcp://{ray.util.get_node_ip_address()}:{free_port()}"

    def start(self, ranks: Sequence[Any] = (), init_method: str = "") -> None:
        if ranks:
            links = [RayRank(handle) for handle in ranks]
            self.policy = ShardedPolicy(self.spec, links=links, init_method=init_method)
        else:
            self.policy = Policy(self.spec)

    def call(self, call: Call) -> Any:
        return answer(self.policy, call)


class ShardActor:
    """The body of the Ray actor of rank 1..K-1 of a sharded policy."""

    def join(self, rank: int, world: int, spec: PolicySpec, init_method: str) -> None:
        self.worker = join_rank(rank, world, spec, init_method, own_device=True)

    def pid(self) -> int:
        return os.getpid()

    def serve(self, call: tuple) -> None:
        try:
            more = serve_rank(self.worker, call)
        except BaseException:
            # Ending the process ends the other ranks' collectives at once; rank 0 names this one.
            traceback.print_exc()
            os._exit(1)
        if not more:
            import torch.distributed as dist

            dist.destroy_process_group()


class RayRank:
    """Rank 0's link to another rank's actor (a `RankLink`)."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle
        self._pid = 0

    @property
    def pid(self) -> int:
        if not self._pid:
            self._pid = _import_ray().get(self.handle.pid.remote())
        return self._pid

    def send(self, call: tuple) -> None:
        self.handle.serve.remote(call)

    def gone(self) -> str | None:
        ray = _import_ray()
        try:
            ray.get(self.handle.pid.remote(), timeout=10)
        except ray.exceptions.RayActorError:
            return "its Ray actor died"
        except ray.exceptions.GetTimeoutError:  # alive, still in a collective
            pass
        return None

    def close(self) -> None:
        pass  # the backend kills the actors


def _check_local_cpus(specs: Sequence[PolicySpec], cpus: Sequence[float]) -> None:
    """A local Ray cluster has this machine's cores; actors that reserve more would wait forever
    (Ray only logs that), so say why and stop before starting it. `cpus`: per policy, all its
    ranks together."""
    cores = os.cpu_count() or 1
    if sum(cpus) > cores:
        asked = ", ".join(f"{s.model.name}: {c:g}" for s, c in zip(specs, cpus))
        raise ConfigError(
            f"run.threads / models.N.num_cpus: the Ray actors reserve {sum(cpus):g} CPUs ({asked}) "
            f"but this machine has {cores}; lower run.threads (0 shares the cores) or "
            f"models.N.num_cpus"
        )


def check_local_cluster(specs: Sequence[PolicySpec]) -> None:
    """Without RAY_ADDRESS graft starts a local Ray cluster: refuse, before it starts, policies
    whose actors would reserve more CPUs than this machine has."""
    if not os.environ.get("RAY_ADDRESS"):
        per_rank = [RayBackend._resources(s)["num_cpus"] for s in specs]
        _check_local_cpus(specs, [c * s.model.shards for c, s in zip(per_rank, specs)])


class RayBackend(Backend):
    def __init__(self, specs: Sequence[PolicySpec], *, strategy: str = "none") -> None:
        resources = {s.model.name: self._resources(s) for s in specs}
        check_local_cluster(specs)
        ray = self.ray = _import_ray()
        if not ray.is_initialized():
            # RAY_ADDRESS, when set, makes this connect to that cluster instead of starting one.
            ray.init(ignore_reinit_error=True, include_dashboard=False, log_to_driver=False)
        self.names = tuple(s.model.name for s in specs)
        self.actors: dict[str, Any] = {}
        self._ranks: list[Any] = []
        self._groups: list[Any] = []
        try:
            self._start(specs, self._place(specs, resources, strategy))
            self.describe()  # every policy answers, so that a failure shows here
        except BaseException:
            self.close()
            raise

    @staticmethod
    def _resources(spec: PolicySpec) -> dict[str, Any]:
        """What each rank of the policy reserves."""
        m = spec.model
        return {
            "num_cpus": m.num_cpus or max(spec.threads // m.shards, 1),
            "num_gpus": m.num_gpus,
        }

    def _place(
        self, specs: Sequence[PolicySpec], resources: dict[str, dict[str, Any]], strategy: str
    ) -> dict[str, list[dict[str, Any]]]:
        """The actor options of every rank of every policy, placement groups included."""
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        ranks = {
            s.model.name: [dict(resources[s.model.name]) for _ in range(s.model.shards)]
            for s in specs
        }
        if strategy == "none":
            together = [[name] for name, r in ranks.items() if len(r) > 1]
            kind = "STRICT_PACK"
        else:
            together, kind = [list(ranks)], strategy.upper()
        for names in together:
            options = [o for name in names for o in ranks[name]]
            group = self._group(options, kind, names)
            for i, o in enumerate(options):
                o["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
                    placement_group=group, placement_group_bundle_index=i
                )
        return ranks

    def _group(self, options: list[dict[str, Any]], kind: str, names: list[str]) -> Any:
        from ray.util.placement_group import placement_group

        bundles = [
            {"CPU": o["num_cpus"], **({"GPU": o["num_gpus"]} if o["num_gpus"] else {})}
            for o in options
        ]
        group = placement_group(bundles, strategy=kind)
        self._groups.append(group)
        try:
            self.ray.get(group.ready(), timeout=PLACEMENT_TIMEOUT_S)
        except self.ray.exceptions.GetTimeoutError:
            raise ConfigError(
                f"run.ray_strategy: the Ray cluster could not place {', '.join(names)} "
                f"({len(bundles)} actors, {kind}, each {bundles[0]}) within "
                f"{PLACEMENT_TIMEOUT_S:g} s; it lacks the CPUs or GPUs (models.N.num_cpus, "
                f"num_gpus, shards) or the nodes for this strategy"
            ) from None
        return group

    def _start(self, specs: Sequence[PolicySpec], ranks: dict[str, list[dict[str, Any]]]) -> None:
        """Create every actor, then build every policy at once (a sharded policy's ranks join
        its process group at rank 0's address)."""
        leader = self.ray.remote(max_restarts=0)(PolicyActor)
        other = self.ray.remote(max_restarts=0)(ShardActor)
        starting = []
        for spec in specs:
            options = ranks[spec.model.name]
            actor = self.actors[spec.model.name] = leader.options(**options[0]).remote(spec)
            followers = [other.options(**o).remote() for o in options[1:]]
            self._ranks += followers
            init = self.ray.get(actor.address.remote()) if followers else ""
            world = len(options)
            starting += [f.join.remote(r, world, spec, init) for r, f in enumerate(followers, 1)]
            starting.append(actor.start.remote(followers, init))
        pending = starting
        while pending:  # the first failure, not the first in order (a rank waits for the others)
            ready, pending = self.ray.wait(pending, num_returns=1)
            try:
                self.ray.get(ready[0])
            except self.ray.exceptions.RayTaskError as exc:
                raise exc.as_instanceof_cause() from None

    def _call(self, calls: Calls, then: Then[Any, T]) -> dict[str, T]:
        """Start every call before waiting on any, so the actors work in parallel; take the
        answers in arrival order (see `Answers`)."""
        names = {self.actors[name].call.remote(call): name for name, call in calls.items()}
        answers, pending = Answers(then), list(names)
        while pending:
            ready, pending = self.ray.wait(pending, num_returns=1)
            for ref in ready:
                name = names[ref]
                try:
                    value = self.ray.get(ref)
                except self.ray.exceptions.RayActorError as exc:
                    answers.error(
                        PolicyWorkerError(
                            f"policy {name!r}: its Ray actor died ({type(exc).__name__}); resume "
                            f"from the last checkpoint with `graft train --resume RUN_DIR`"
                        )
                    )
                    continue
                except self.ray.exceptions.RayTaskError as exc:
                    # graft's own one-line errors (a dead rank) pass as they are
                    cause = exc.cause if isinstance(exc.cause, PolicyWorkerError) else None
                    answers.error(cause or exc.as_instanceof_cause())
                    continue
                answers.ok(name, value)
        return answers.result(list(calls))

    def close(self) -> None:
        for actor in [*self.actors.values(), *self._ranks]:
            with contextlib.suppress(Exception):  # already dead
                self.ray.kill(actor)
        self.actors.clear()
        self._ranks.clear()
        from ray.util.placement_group import remove_placement_group

        for group in self._groups:
            with contextlib.suppress(Exception):
                remove_placement_group(group)
        self._groups.clear()
