"""Stored-peer GRAFT (paper section 8): one receiver, a peer's recorded trajectories, no co-training
at all.

Each step, the peer's group for every prompt of the receiver's batch is looked up by prompt id,
its responses are RE-VERIFIED with the receiver's verifier against the receiver's gold answer,
advantages are recomputed from those rewards, and the same gate, weights and update apply, in one
direction, without balancing. A prompt without a peer record simply gets no transfer (counted).
A damaged shard stops the run with an error naming it, unless
`exchange.stored.skip_damaged_shards` is set: then it is skipped, with a warning for each and the
count in `stored/damaged_shards`.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Mapping, Sequence
from typing import Any

from graft.config import ExchangeConfig
from graft.config.lib import ConfigError
from graft.exchange.gate import one_way
from graft.exchange.records import Offer, StepInfo
from graft.groups import ADVANTAGE, Advantage
from graft.peerlog.writer import verified_groups
from graft.seeds import derive_seed
from graft.store import DamagedShardError, StoreError, TrajectoryStore
from graft.types import Completion, Group, Problem, Rollout, Verdict
from graft.verify.pool import VerifierPool

NEEDS_SOURCE_LOGPROBS = ("paper", "per_byte")
SKIP_HINT = "set exchange.stored.skip_damaged_shards=true to train on without it"


class StoredPeer:
    """The exchange source of stored-peer GRAFT: a peer's recorded groups, re-verified with the
    receiver's verifier (`pool`, `verifier`) on the receiver's gold answers."""

    def __init__(
        self, cfg: ExchangeConfig, *, pool: VerifierPool | None = None, verifier: str = ""
    ) -> None:
        self.cfg = cfg
        self.pool, self.verifier = pool, verifier
        self.damaged: list[str] = []
        try:
            self.store = TrajectoryStore(
                cfg.stored.path,
                key="exchange.stored.path",
                strict=not cfg.stored.skip_damaged_shards,
                on_damage=self._skipped,
            )
            info = self.store.info()
        except DamagedShardError as err:
            raise DamagedShardError(f"{self._named(err)}; {SKIP_HINT}") from None
        except StoreError as err:
            raise StoreError(self._named(err)) from None
        self.model = self.store.pick_model(cfg.stored.model, key="exchange.stored.model")
        self.run_id = cfg.stored.run or None
        self.store.index(self.model, self.run_id)  # fails early on an ambiguous run
        self.name = f"stored:{self.model}"
        if (
            cfg.ablation.weight in NEEDS_SOURCE_LOGPROBS
            and not info["models"][self.model]["rows_with_logprobs"]
        ):
            raise ConfigError(
                f"exchange.ablation.weight={cfg.ablation.weight}: the compatibility weight needs "
                f"the source's generation log-probs, but records of {self.model!r} in "
                f"{cfg.stored.path} have none; choose a receiver-only weight explicitly "
                f"(exchange.ablation.weight=receiver_relative or none)"
            )

    def _named(self, err: StoreError) -> str:
        """The error naming exchange.stored.path (a shard's own error names only the shard)."""
        text = str(err)
        return (
            text
            if text.startswith("exchange.")
            else f"exchange.stored.path {self.cfg.stored.path}: {text}"
        )

    def _skipped(self, path: str, why: str) -> None:
        from tqdm.auto import tqdm

        self.damaged.append(path)
        tqdm.write(f"warning: exchange.stored.skip_damaged_shards: skipped {why}")

    def _step_filter(self, step: int) -> int | None:
        if self.cfg.stored.records == "same_step":
            return step
        if self.cfg.stored.records == "step":
            return self.cfg.stored.step
        return None

    def source_groups(
        self,
        problems: Sequence[Problem],
        *,
        step: int,
        pool: VerifierPool,
        verifier: str,
        adv: Advantage = ADVANTAGE,
    ) -> tuple[list[Group], dict[str, float]]:
        """The peer's groups aligned with `problems` (an empty group where none is stored), their
        advantages from the re-verified rewards under the run's `adv`."""
        try:
            records = self.store.lookup(
                [p.id for p in problems],
                model=self.model,
                run_id=self.run_id,
                step=self._step_filter(step),
            )
        except DamagedShardError as err:
            raise DamagedShardError(f"{self._named(err)}; {SKIP_HINT}") from None
        found = [p for p in problems if p.id in records]
        rollouts, with_logprobs = [], {}
        for p in found:
            rows = records[p.id]
            self._check_logprobs(rows)
            with_logprobs[p.id] = [_scored(r) for r in rows]
            rollouts.append(Rollout(p, self.name, (), tuple(_completion(r) for r in rows)))
        adjust = None
        if self.cfg.stored.rewards == "shuffled":
            adjust = lambda r, vs: tuple(shuffled(vs, step=step, prompt_id=r.problem.id))  # noqa: E731
        made, verdicts = (
            verified_groups(pool, verifier, rollouts, adv, adjust=adjust) if found else ((), [])
        )
        changed = sum(
            v.reward != row["reward"]
            for p, vs in zip(found, verdicts)
            for v, row in zip(vs, records[p.id])
        )
        verdicts_flat = [v for vs in verdicts for v in vs]
        regrouped = {g.problem.id: g for g in made}
        unscored = 0
        if self.cfg.ablation.weight in NEEDS_SOURCE_LOGPROBS:  # the weight needs each row's own
            for pid, group in regrouped.items():
                regrouped[pid], dropped = scored_only(group, with_logprobs[pid])
                unscored += dropped
        groups = [regrouped.get(p.id) or _empty_group(p, self.name) for p in problems]
        metrics = {
            "stored/prompts_found": float(len(found)),
            "stored/prompts_missing": float(len(problems) - len(found)),
            "stored/reverified": float(len(verdicts_flat)),
            "stored/reward_changed": float(changed),
            "stored/reward_mean": (
                sum(v.reward for v in verdicts_flat) / len(verdicts_flat) if verdicts_flat else 0.0
            ),
            "stored/damaged_shards": float(len(self.damaged)),
            "stored/unscored_rows": float(unscored),
        }
        return groups, metrics

    def _check_logprobs(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """The paper's weight needs the source's log-probs: refused when no row of a prompt's
        group has them (rows without are left out of the exchange: `scored_only`)."""
        if self.cfg.ablation.weight in NEEDS_SOURCE_LOGPROBS and not any(map(_scored, rows)):
            raise ConfigError(
                f"exchange.ablation.weight={self.cfg.ablation.weight}: no record of prompt "
                f"{rows[0]['prompt_id']} in {self.cfg.stored.path} has generation log-probs; "
                f"use a receiver-only weight"
            )

    def offer(
        self, groups: Mapping[str, Sequence[Group]], cfg: ExchangeConfig, at: StepInfo
    ) -> Offer:
        """One direction, stored peer -> the one receiver: the gate, no balancing."""
        del cfg  # the source's own config was given at construction
        if self.pool is None:
            raise ValueError("StoredPeer.offer needs the verifier pool given at construction")
        ((receiver, receiver_groups),) = groups.items()
        problems = [g.problem for g in receiver_groups]
        source, metrics = self.source_groups(
            problems,
            step=at.step,
            pool=self.pool,
            verifier=self.verifier,
            adv=at.adv,
        )
        aligned = {receiver: receiver_groups, self.name: source}
        return Offer(aligned, [one_way(self.name, receiver, aligned)], metrics)


def shuffled(verdicts: Sequence[Verdict], *, step: int, prompt_id: str) -> list[Verdict]:
    """exchange.stored.rewards=shuffled (a negative control): the group's verdicts permuted among
    its members, by a stream seeded from the step and the prompt. The group keeps its count of
    successes (the gate decides as before); each program gets another member's reward."""
    out = list(verdicts)
    random.Random(derive_seed(0, "peer-rewards", step, prompt_id)).shuffle(out)
    return out


def _scored(row: Mapping[str, Any]) -> bool:
    """The row has the source's log-probs of its tokens (an import could not score it: none)."""
    return bool(row["logprobs"]) and len(row["logprobs"]) == len(row["token_ids"])


def scored_only(group: Group, scored: Sequence[bool]) -> tuple[Group, int]:
    """`group` without its members that hold no log-probs (`scored[j]` False; the advantages
    were computed over the whole group, as sampled, and stay as they are), and how many were
    left out."""
    keep = [j for j, ok in enumerate(scored) if ok]
    if len(keep) == group.size:
        return group, 0
    rollout = dataclasses.replace(
        group.rollout, completions_G=tuple(group.rollout.completions_G[j] for j in keep)
    )
    kept = Group(
        rollout,
        tuple(group.verdicts_G[j] for j in keep),
        tuple(group.advantages_G[j] for j in keep),
    )
    return kept, group.size - len(keep)


def _completion(row: Mapping[str, Any]) -> Completion:
    token_ids = tuple(row["token_ids"])
    logprobs = tuple(row["logprobs"]) if row["logprobs"] else (0.0,) * len(token_ids)
    return Completion(row["response"], token_ids, logprobs, row["finish_reason"])


def _empty_group(problem: Problem, name: str) -> Group:
    return Group(Rollout(problem, name, (), ()), (), ())
