"""Where a step's peer groups come from: the co-training policies themselves (`OnlinePeers`:
the gate, balancing and one source per prompt) or a stored peer's recorded groups
(`graft.exchange.stored.StoredPeer`), and which of them a config asks for (`make_source`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from graft.config import ExchangeConfig
from graft.exchange import ablations
from graft.exchange.gate import gate_pairs, one_source_per_prompt, selections, success_counts
from graft.exchange.records import Offer, Selection, StepInfo
from graft.exchange.stored import StoredPeer
from graft.seeds import derive_seed
from graft.types import Group
from graft.verify.pool import VerifierPool

Pair = tuple[str, str]


class Source(Protocol):
    """Where the peer groups of a step come from."""

    def offer(
        self, groups: Mapping[str, Sequence[Group]], cfg: ExchangeConfig, at: StepInfo
    ) -> Offer: ...


def select_transfers(
    groups: Mapping[str, Sequence[Group]],
    *,
    balancing: bool = True,
    selection: str = "gate",
    seed: int = 0,
) -> list[Selection]:
    """Gate, balance and one source per prompt, for every ordered pair of co-training policies."""
    names = list(groups)
    candidates, chosen = gate_pairs(groups, balancing=balancing)
    chosen = one_source_per_prompt(names, chosen, success_counts(groups))
    if selection == "random":
        num_prompts = len(groups[names[0]])
        chosen = ablations.random_prompts(names, chosen, num_prompts=num_prompts, seed=seed)
    elif selection != "gate":
        raise ValueError(f"unknown exchange.ablation.selection {selection!r}; use gate or random")
    return selections(names, candidates, chosen)


class OnlinePeers:
    """The source of online GRAFT: the co-training policies themselves."""

    def offer(
        self, groups: Mapping[str, Sequence[Group]], cfg: ExchangeConfig, at: StepInfo
    ) -> Offer:
        chosen = select_transfers(
            groups,
            balancing=cfg.balancing,
            selection=cfg.ablation.selection,
            seed=derive_seed(at.seed, "selection"),
        )
        return Offer(groups, chosen)


def make_source(
    cfg: ExchangeConfig,
    *,
    num_policies: int,
    pool: VerifierPool | None = None,
    verifier: str = "",
) -> Source | None:
    """The configured exchange source: co-training peers, a stored peer, or none (GRPO)."""
    if not cfg.enabled:
        return None
    if cfg.source == "stored":
        return StoredPeer(cfg, pool=pool, verifier=verifier)
    return OnlinePeers() if num_policies > 1 else None
