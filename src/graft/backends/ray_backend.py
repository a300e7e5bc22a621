"""One Ray actor per policy, each holding its model, tokenizer, optimizer and sampler.

`graft train` connects to an existing cluster when RAY_ADDRESS is set (ray.init reads it) and
otherwise starts a local one. Each actor reserves `models.N.num_gpus` / `num_cpus`; with
`run.ray_strategy` pack or spread, the actors are placed through a placement group. The driver keeps
the cheap data flow (verification, grouping, gate, weights, store, logging); only graft's plain
records cross to and from the actors. Ray is imported here only, and only when this backend is used.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from typing import Any

from graft.backends.base import Answers, Backend, Call, Calls, T, Then, answer
from graft.config.lib import ConfigError
from graft.errors import PolicyWorkerError
from graft.training.policy import Policy, PolicySpec


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ImportError("run.backend=ray needs Ray: pip install 'graft-rl[ray]'") from None
    return ray


class PolicyActor:
    """The body of a policy's Ray actor (wrapped with ray.remote at runtime)."""

    def __init__(self, spec: PolicySpec) -> None:
        self.policy = Policy(spec)

    def call(self, call: Call) -> Any:
        return answer(self.policy, call)


def _check_local_cpus(specs: Sequence[PolicySpec], cpus: Sequence[float]) -> None:
    """A local Ray cluster has this machine's cores; actors that reserve more would wait forever
    (Ray only logs that), so say why and stop before starting it."""
    cores = os.cpu_count() or 1
    if sum(cpus) > cores:
        asked = ", ".join(f"{s.model.name}: {c:g}" for s, c in zip(specs, cpus))
        raise ConfigError(
            f"run.threads / models.N.num_cpus: the Ray actors reserve {sum(cpus):g} CPUs ({asked}) "
            f"but this machine has {cores}; lower run.threads (0 shares the cores) or "
            f"models.N.num_cpus"
        )


class RayBackend(Backend):
    def __init__(self, specs: Sequence[PolicySpec], *, strategy: str = "none") -> None:
        options = [self._resources(s) for s in specs]
        if not os.environ.get("RAY_ADDRESS"):
            _check_local_cpus(specs, [o["num_cpus"] for o in options])
        ray = self.ray = _import_ray()
        if not ray.is_initialized():
            # RAY_ADDRESS, when set, makes this connect to that cluster instead of starting one.
            ray.init(ignore_reinit_error=True, include_dashboard=False, log_to_driver=False)
        self.names = tuple(s.model.name for s in specs)
        self._pg = None
        if strategy != "none":
            from ray.util.placement_group import placement_group
            from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

            bundles = [
                {"CPU": o["num_cpus"], **({"GPU": o["num_gpus"]} if o["num_gpus"] else {})}
                for o in options
            ]
            self._pg = placement_group(bundles, strategy=strategy.upper())
            ray.get(self._pg.ready())
            for i, o in enumerate(options):
                o["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
                    placement_group=self._pg, placement_group_bundle_index=i
                )
        remote = ray.remote(max_restarts=0)(PolicyActor)
        self.actors = {
            s.model.name: remote.options(name=None, **o).remote(s) for s, o in zip(specs, options)
        }
        try:  # wait until every actor has built its policy, so that a failure shows here
            self.describe()
        except BaseException:
            self.close()
            raise

    @staticmethod
    def _resources(spec: PolicySpec) -> dict[str, Any]:
        return {
            "num_cpus": spec.model.num_cpus or max(spec.threads, 1),
            "num_gpus": spec.model.num_gpus,
        }

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
                    answers.error(exc.as_instanceof_cause())
                    continue
                answers.ok(name, value)
        return answers.result(list(calls))

    def close(self) -> None:
        for actor in self.actors.values():
            with contextlib.suppress(Exception):  # already dead
                self.ray.kill(actor)
        self.actors.clear()
        if self._pg is not None:
            from ray.util.placement_group import remove_placement_group

            remove_placement_group(self._pg)
            self._pg = None
