"""The frozen records between the exchange's stages (plain data)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from graft.groups import ADVANTAGE, Advantage
from graft.types import Group, Imported, PeerResponse, TrainGroup


@dataclass(frozen=True)
class Selection:
    """The prompts (indices into the step's batch) one receiver takes from one source."""

    source: str
    receiver: str
    candidates: tuple[int, ...]
    """Prompts passing the gate, before balancing."""
    selected: tuple[int, ...]
    """Prompts whose receiver group is replaced by the source's group."""


@dataclass(frozen=True)
class Direction:
    """One (source -> receiver) direction of a step: what was selected, both policies' groups on
    the step's prompts, the peer responses sent and their imports into the receiver."""

    selection: Selection
    receiver: Sequence[Group]
    source: Sequence[Group]
    requests: Sequence[PeerResponse]
    imported: Sequence[Imported]
    """In the order of `requests`."""

    def __post_init__(self) -> None:
        if len(self.requests) != len(self.imported):
            raise ValueError(
                f"{self.selection.source}->{self.selection.receiver}: {len(self.requests)} "
                f"requests but {len(self.imported)} imported responses"
            )


@dataclass(frozen=True)
class StepInfo:
    """What a source may need to know of the step besides the groups."""

    step: int
    seed: int
    """The step's exchange seed; every random choice of the exchange is derived from it."""
    adv: Advantage = ADVANTAGE
    """For the advantages the exchange computes (a stored peer's, the pooled ablation's)."""


@dataclass(frozen=True)
class Offer:
    """What a source offers in one step: every policy's groups aligned on the step's prompts (the
    receivers' and the sources'), the selections, and the source's own metrics."""

    groups: Mapping[str, Sequence[Group]]
    selections: list[Selection]
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class DirectionResult:
    """The receiver's groups for the prompts of one direction, and what happened to them."""

    groups: dict[int, TrainGroup]
    """Replacement groups by prompt index (missing: every response was dropped)."""
    metrics: dict[str, float]
    sent: int = 0
    """Peer responses offered to the receiver."""
    admitted: int = 0
    """Peer responses admitted (w > 0)."""
    scores: tuple[tuple[float, bool], ...] = ()
    """(s, correct) of every peer response offered, in order (s is NaN for one dropped before
    scoring): the compatibility scores `graft probe` histograms."""


@dataclass(frozen=True)
class ExchangeOutcome:
    batches: dict[str, list[TrainGroup]]
    metrics: dict[str, float]
    """Per direction, under `x/<source>-><receiver>/...`, and the source's own (`stored/...`)."""
    directions: dict[tuple[str, str], DirectionResult]
    replaced: dict[str, frozenset[int]]
    """Per receiver, the prompts whose own group was replaced (selected for a transfer)."""
