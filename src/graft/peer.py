"""One step of peer exchange: select -> import (receiver side) -> weigh -> assemble batches.

The selection and the weighing are the pure functions of `graft.exchange` and `graft.transfer`;
this module only moves their records through the backend, which re-tokenizes each peer string
with the receiver's tokenizer and scores it with the receiver's behavior policy.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from graft.backends import Backend
from graft.config import ExchangeConfig
from graft.exchange import Selection, select_transfers
from graft.groups import self_train_group
from graft.seeds import derive_seed
from graft.transfer import DirectionResult, graft_direction, receiver_batch, transfer_requests
from graft.types import Group, TrainGroup


@dataclass(frozen=True)
class ExchangeOutcome:
    batches: dict[str, list[TrainGroup]]
    metrics: dict[str, float]
    """Per direction, under `x/<source>-><receiver>/...`."""
    directions: dict[tuple[str, str], DirectionResult]
    replaced: dict[str, frozenset[int]]
    """Per receiver, the prompts whose own group was replaced (selected for a transfer)."""


def own_batches(groups: Mapping[str, Sequence[Group]]) -> dict[str, list[TrainGroup]]:
    """No exchange: each policy trains on its own groups (GRPO)."""
    return {name: [self_train_group(g) for g in gs] for name, gs in groups.items()}


def no_exchange(groups: Mapping[str, Sequence[Group]]) -> ExchangeOutcome:
    return ExchangeOutcome(own_batches(groups), {}, {}, {name: frozenset() for name in groups})


def exchange_groups(
    groups: Mapping[str, Sequence[Group]],
    selections: Sequence[Selection],
    backend: Backend,
    cfg: ExchangeConfig,
    *,
    seed: int,
    adv_mode: str = "grpo",
    adv_eps: float = 1e-6,
) -> ExchangeOutcome:
    """Apply the given selections: import, weigh and assemble every receiver's training batch.

    `groups` holds the receivers' groups and the sources' groups (a stored source's groups come
    from the trajectory store, aligned to the same prompts)."""
    requests = {
        (s.source, s.receiver): transfer_requests(
            s,
            groups[s.source],
            replacement=cfg.replacement,
            peer_update=cfg.peer_update,
            seed=derive_seed(seed, s.source, s.receiver, "requests"),
        )
        for s in selections
    }
    by_receiver: dict[str, list] = {}
    for (_, receiver), reqs in requests.items():
        by_receiver.setdefault(receiver, []).extend(reqs)
    wanted = {name: reqs for name, reqs in by_receiver.items() if reqs}
    imported_flat = backend.import_responses(wanted, too_long=cfg.too_long) if wanted else {}
    offsets = {name: 0 for name in by_receiver}
    directions: dict[tuple[str, str], DirectionResult] = {}
    metrics: dict[str, float] = {}
    for s in selections:
        reqs = requests[s.source, s.receiver]
        start = offsets[s.receiver]
        imps = imported_flat.get(s.receiver, [])[start : start + len(reqs)]
        offsets[s.receiver] = start + len(reqs)
        result = graft_direction(
            s,
            groups[s.receiver],
            groups[s.source],
            reqs,
            imps,
            cfg,
            adv_mode=adv_mode,
            adv_eps=adv_eps,
            seed=derive_seed(seed, s.source, s.receiver, "admission"),
        )
        directions[s.source, s.receiver] = result
        metrics.update({f"x/{s.source}->{s.receiver}/{k}": v for k, v in result.metrics.items()})
    batches, replaced = {}, {}
    for receiver in {s.receiver for s in selections}:
        mine = [s for s in selections if s.receiver == receiver]
        replacements: dict[int, TrainGroup] = {}
        for s in mine:
            replacements.update(directions[s.source, s.receiver].groups)
        selected = {i for s in mine for i in s.selected}
        batches[receiver] = receiver_batch(groups[receiver], replacements, selected)
        replaced[receiver] = frozenset(selected)
    return ExchangeOutcome(batches, metrics, directions, replaced)


def online_exchange(
    groups: Mapping[str, Sequence[Group]],
    backend: Backend,
    cfg: ExchangeConfig,
    *,
    seed: int,
    adv_mode: str = "grpo",
    adv_eps: float = 1e-6,
) -> ExchangeOutcome:
    """GRAFT between co-training policies: gate, balance, then exchange."""
    selections = select_transfers(
        groups,
        balancing=cfg.balancing,
        selection=cfg.selection,
        seed=derive_seed(seed, "selection"),
    )
    return exchange_groups(
        groups, selections, backend, cfg, seed=seed, adv_mode=adv_mode, adv_eps=adv_eps
    )


class AdmissionMonitor:
    """Warns when a direction keeps offering responses but admits none (see issue: s is driven by
    confidence; with delta = 0.8 a less confident receiver can admit nothing for a whole run)."""

    def __init__(self, warn_after: int) -> None:
        self.warn_after = warn_after
        self.streak: dict[str, int] = {}

    def update(self, metrics: Mapping[str, float]) -> list[str]:
        messages = []
        for key, sent in metrics.items():
            if not key.endswith("/responses_sent"):
                continue
            direction = key[: -len("/responses_sent")]
            admitted = metrics.get(f"{direction}/admitted", 0.0)
            if sent > 0 and admitted == 0:
                self.streak[direction] = self.streak.get(direction, 0) + 1
            elif admitted > 0:
                self.streak[direction] = 0
            if self.streak.get(direction, 0) == self.warn_after:
                name = direction[len("x/") :]
                message = (
                    f"exchange {name}: responses were offered but none admitted for "
                    f"{self.warn_after} steps; see {direction}/s_p50_* (compatibility scores vs "
                    f"exchange.delta) and consider exchange.weight=receiver_relative"
                )
                messages.append(message)
        return messages
