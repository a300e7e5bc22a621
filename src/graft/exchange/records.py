"""The frozen records between the exchange's stages (plain data)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from graft.types import Group, TrainGroup


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


@dataclass(frozen=True)
class ExchangeOutcome:
    batches: dict[str, list[TrainGroup]]
    metrics: dict[str, float]
    """Per direction, under `x/<source>-><receiver>/...`, and the source's own (`stored/...`)."""
    directions: dict[tuple[str, str], DirectionResult]
    replaced: dict[str, frozenset[int]]
    """Per receiver, the prompts whose own group was replaced (selected for a transfer)."""
