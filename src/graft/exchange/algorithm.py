"""The paper's Algorithm 1: one step of GRAFT for every receiver, online or from a stored peer,
from the verified groups to each receiver's training batch, in the order of docs/method.md.

    offer     the source's groups and selections (graft.exchange.sources): gate + balance
              (online), gate (stored)
    requests  the selected source groups' responses, as strings
    import    each receiver re-tokenizes them and scores them with its behavior policy
    weigh     s and w per response (graft.exchange.weight)
    replace   the failed groups give way to the peer groups (graft.exchange.replace)
    batch     each receiver's training groups

The ablations and baselines enter only through `graft.exchange.ablations`, by config value.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from graft.config import ExchangeConfig
from graft.exchange import ablations
from graft.exchange.diagnostics import direction_metrics, skill_metrics, what_if_admission
from graft.exchange.records import (
    Direction,
    DirectionResult,
    ExchangeOutcome,
    Selection,
    StepInfo,
)
from graft.exchange.replace import all_members, peer_requests, receiver_batch
from graft.exchange.sources import Pair, Source
from graft.exchange.weight import admission_weights, compatibility_scores
from graft.groups import ADVANTAGE, Advantage, self_train_group
from graft.seeds import derive_seed
from graft.types import Group, Imported, PeerResponse, TrainGroup

if TYPE_CHECKING:
    from graft.backends import Backend


def transfer_requests(
    selection: Selection,
    source: Sequence[Group],
    *,
    replacement: str = "whole",
    peer_update: str = "graft",
    seed: int = 0,
) -> list[PeerResponse]:
    """The responses one direction sends: the whole selected groups, unless an ablation says."""
    members = ablations.members_for(replacement, peer_update, seed=seed)
    return peer_requests(selection, source, members or all_members)


def import_responses(
    requests: Mapping[Pair, Sequence[PeerResponse]], backend: Backend, *, too_long: str
) -> dict[Pair, list[Imported]]:
    """Every receiver imports what all its sources send in one call (the receivers in parallel)."""
    wanted: dict[str, list[PeerResponse]] = {}
    for (_, receiver), reqs in requests.items():
        wanted.setdefault(receiver, []).extend(reqs)
    wanted = {name: reqs for name, reqs in wanted.items() if reqs}
    answers = backend.import_responses(wanted, too_long=too_long) if wanted else {}
    out: dict[Pair, list[Imported]] = {pair: [] for pair in requests}
    for receiver, reqs in wanted.items():
        for req, imp in zip(reqs, answers[receiver], strict=True):
            out[req.source, receiver].append(imp)
    return out


def graft_direction(
    selection: Selection,
    receiver: Sequence[Group],
    source: Sequence[Group],
    requests: Sequence[PeerResponse],
    imported: Sequence[Imported],
    cfg: ExchangeConfig,
    *,
    adv: Advantage = ADVANTAGE,
    seed: int = 0,
) -> DirectionResult:
    """Weigh and replace for one (source -> receiver) direction, with its diagnostics."""
    d = Direction(selection, receiver, source, requests, imported)
    s_values = compatibility_scores(
        d, mode=cfg.ablation.weight, eos_in_score=cfg.ablation.eos_in_score
    )
    weights = admission_weights(s_values, imported, delta=cfg.delta, mode=cfg.ablation.weight)
    weights = ablations.weights_for(weights, imported, cfg, seed=seed)
    replace = ablations.replacement_for(cfg, adv=adv)
    groups = replace(d, weights)
    metrics = direction_metrics(d, s_values, weights)
    metrics["prompts_grafted"] = float(len(groups))
    metrics.update(skill_metrics(d, weights))
    metrics.update(what_if_admission(d, cfg))
    admitted = sum(w > 0 for w in weights)
    correct = [source[r.prompt_index].verdicts_G[r.member].correct for r in requests]
    scores = tuple(zip((float(v) for v in s_values), correct))
    return DirectionResult(groups, metrics, sent=len(requests), admitted=admitted, scores=scores)


def own_batches(groups: Mapping[str, Sequence[Group]]) -> dict[str, list[TrainGroup]]:
    """No exchange: each policy trains on its own groups (GRPO)."""
    return {name: [self_train_group(g) for g in gs] for name, gs in groups.items()}


def no_exchange(groups: Mapping[str, Sequence[Group]]) -> ExchangeOutcome:
    return ExchangeOutcome(own_batches(groups), {}, {}, {name: frozenset() for name in groups})


def exchange(
    groups: Mapping[str, Sequence[Group]],
    source: Source | None,
    backend: Backend,
    cfg: ExchangeConfig,
    *,
    seed: int,
    step: int = 0,
    adv: Advantage = ADVANTAGE,
) -> ExchangeOutcome:
    """GRAFT from `source` into the policies of `groups`; plain GRPO batches without a source."""
    if source is None:
        return no_exchange(groups)
    offer = source.offer(groups, cfg, StepInfo(step, seed, adv))
    chosen = {(s.source, s.receiver): s for s in offer.selections}
    requests = {
        (a, b): transfer_requests(
            s,
            offer.groups[a],
            replacement=cfg.ablation.replacement,
            peer_update=cfg.ablation.peer_update,
            seed=derive_seed(seed, a, b, "requests"),
        )
        for (a, b), s in chosen.items()
    }
    imported = import_responses(requests, backend, too_long=cfg.too_long)
    directions = {
        (a, b): graft_direction(
            s,
            offer.groups[b],
            offer.groups[a],
            requests[a, b],
            imported[a, b],
            cfg,
            adv=adv,
            seed=derive_seed(seed, a, b, "admission"),
        )
        for (a, b), s in chosen.items()
    }
    metrics = {
        f"x/{a}->{b}/{k}": v for (a, b), d in directions.items() for k, v in d.metrics.items()
    }
    metrics.update(offer.metrics)
    batches, replaced = receiver_batches(offer.groups, offer.selections, directions)
    return ExchangeOutcome(batches, metrics, directions, replaced)


def receiver_batches(
    groups: Mapping[str, Sequence[Group]],
    chosen: Sequence[Selection],
    directions: Mapping[Pair, DirectionResult],
) -> tuple[dict[str, list[TrainGroup]], dict[str, frozenset[int]]]:
    """Each receiver's training batch, and the prompts whose own group was replaced."""
    batches, replaced = {}, {}
    for receiver in dict.fromkeys(s.receiver for s in chosen):
        mine = [s for s in chosen if s.receiver == receiver]
        replacements = {
            i: g for s in mine for i, g in directions[s.source, receiver].groups.items()
        }
        selected = {i for s in mine for i in s.selected}
        batches[receiver] = receiver_batch(groups[receiver], replacements, selected)
        replaced[receiver] = frozenset(selected)
    return batches, replaced
