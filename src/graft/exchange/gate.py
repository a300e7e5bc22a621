"""GRAFT steps 1-2 (paper sections 1-2): which prompts a receiver takes from which peer (pure).

Gate, for source A and receiver B:
    C(A->B) = { q : k_B(q) = 0 and 1 <= k_A(q) < n }
decided on the raw verdicts (never a shaped reward). All-correct groups are never touched or sent.

Balancing: m = min(|C(A->B)|, |C(B->A)|); in each direction rank candidates by the SOURCE success
count k_A(q), descending, and keep the first m plus every candidate tied with the m-th. If either
direction is empty, m = 0 and nothing moves either way.

More than two policies (our generalisation; with two it is exactly the paper's rule):
  1. the gate and the balancing run for every unordered pair {A, B} on its own;
  2. a receiver that is offered the same prompt by several peers takes it from the peer with the
     most successes on it, ties going to the peer listed first in the config.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import combinations

from graft.exchange.records import Selection
from graft.types import Group

Pairs = dict[tuple[str, str], tuple[int, ...]]
"""Prompt indices per ordered (source, receiver) pair."""


def gate(receiver: Sequence[Group], source: Sequence[Group]) -> tuple[int, ...]:
    """C(source -> receiver): the receiver failed every rollout and the source's group is mixed."""
    if len(receiver) != len(source):
        raise ValueError(f"receiver has {len(receiver)} groups but source has {len(source)}")
    for r, s in zip(receiver, source):
        if r.problem.id != s.problem.id:
            raise ValueError(f"groups are not aligned: {r.problem.id} vs {s.problem.id}")
    return tuple(i for i, (r, s) in enumerate(zip(receiver, source)) if r.all_fail and s.mixed)


def top_m_with_ties(candidates: Sequence[int], counts: Sequence[int], m: int) -> tuple[int, ...]:
    """The first m candidates by descending count, plus every candidate tied with the m-th."""
    if m <= 0 or not candidates:
        return ()
    ranked = sorted(candidates, key=lambda i: -counts[i])  # stable: batch order among equals
    if m >= len(ranked):
        return tuple(sorted(ranked))
    cutoff = counts[ranked[m - 1]]
    return tuple(sorted(i for i in ranked if counts[i] >= cutoff))


def balance(
    c_ab: Sequence[int], c_ba: Sequence[int], k_a: Sequence[int], k_b: Sequence[int]
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Paper section 2: (selected A->B, selected B->A)."""
    m = min(len(c_ab), len(c_ba))
    return top_m_with_ties(c_ab, k_a, m), top_m_with_ties(c_ba, k_b, m)


def one_way(source: str, receiver: str, groups: Mapping[str, Sequence[Group]]) -> Selection:
    """A single direction (stored peer): the gate alone, without balancing."""
    candidates = gate(groups[receiver], groups[source])
    return Selection(source, receiver, candidates=candidates, selected=candidates)


def success_counts(groups: Mapping[str, Sequence[Group]]) -> dict[str, list[int]]:
    """k_M(q) for every policy M and prompt q."""
    return {name: [g.num_correct for g in gs] for name, gs in groups.items()}


def gate_pairs(groups: Mapping[str, Sequence[Group]], *, balancing: bool) -> tuple[Pairs, Pairs]:
    """(candidates, chosen) for every ordered pair: the gate, then balancing, pair by pair."""
    names, counts = list(groups), success_counts(groups)
    candidates: Pairs = {}
    chosen: Pairs = {}
    for a, b in combinations(names, 2):
        c_ab, c_ba = gate(groups[b], groups[a]), gate(groups[a], groups[b])
        candidates[a, b], candidates[b, a] = c_ab, c_ba
        if balancing:
            chosen[a, b], chosen[b, a] = balance(c_ab, c_ba, counts[a], counts[b])
        else:
            chosen[a, b], chosen[b, a] = c_ab, c_ba
    return candidates, chosen


def one_source_per_prompt(
    names: Sequence[str], chosen: Mapping[tuple[str, str], tuple[int, ...]], counts: Mapping
) -> Pairs:
    """A receiver offered one prompt by several peers takes the peer with the most successes."""
    out: dict[tuple[str, str], list[int]] = {pair: [] for pair in chosen}
    for b in names:
        offers: dict[int, list[str]] = {}
        for a in names:  # config order, so ties go to the peer listed first
            if a != b:
                for i in chosen[a, b]:
                    offers.setdefault(i, []).append(a)
        for i, sources in offers.items():
            best = max(sources, key=lambda a: (counts[a][i], -names.index(a)))
            out[best, b].append(i)
    return {pair: tuple(sorted(v)) for pair, v in out.items()}


def selections(names: Sequence[str], candidates: Pairs, chosen: Pairs) -> list[Selection]:
    """One Selection per ordered (source, receiver) pair, in config order of the names."""
    return [
        Selection(source=a, receiver=b, candidates=candidates[a, b], selected=chosen[a, b])
        for a in names
        for b in names
        if a != b
    ]
