"""GRAFT steps 3 and 6 (paper section 3): what a receiver imports for its selected prompts, and the
groups that take the place of its failed ones (pure).

The receiver's failed group is replaced by the source's WHOLE group; each peer response keeps the
advantage computed on the source's full group, never re-normalised, and its weight w. Responses
with w = 0 are dropped: they leave both the loss sum and the token-mean denominator, and their
siblings keep their pre-drop advantages. If all are dropped, the prompt contributes nothing (the
receiver's own failed group is not put back).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from graft.exchange.records import Direction, Selection
from graft.groups import self_train_group
from graft.types import Group, Imported, Objective, PeerResponse, TrainGroup, TrainSequence

Members = Callable[[Group], Sequence[int]]
"""Which members of a source group are sent (the paper: all of them)."""


def all_members(group: Group) -> Sequence[int]:
    return range(group.size)


def peer_requests(
    selection: Selection, source: Sequence[Group], members: Members = all_members
) -> list[PeerResponse]:
    """The source responses the receiver must import for one direction's selected prompts."""
    out = []
    for i in selection.selected:
        group = source[i]
        for j in members(group):
            c = group.rollout.completions_G[j]
            out.append(
                PeerResponse(
                    i, j, group.problem.prompt, c.text, c.finish_reason == "stop", selection.source
                )
            )
    return out


def admitted_rows(d: Direction, weights: Sequence[float]) -> dict[int, list[int]]:
    """Per selected prompt, the positions of its admitted peer responses (possibly none)."""
    rows: dict[int, list[int]] = {i: [] for i in d.selection.selected}
    for r, req in enumerate(d.requests):
        if not d.imported[r].drop and weights[r] > 0:
            rows[req.prompt_index].append(r)
    return rows


def peer_sequence(
    imported: Imported, advantage: float, weight: float, objective: Objective = "pg"
) -> TrainSequence:
    """An admitted peer response, in the receiver's tokens and behavior log-probs."""
    return TrainSequence(
        imported.prompt_ids,
        imported.response_ids,
        imported.logprobs,
        advantage=advantage,
        weight=weight,
        is_peer=True,
        objective=objective,
    )


def replacement_groups(
    d: Direction, weights: Sequence[float], *, objective: Objective = "pg"
) -> dict[int, TrainGroup]:
    """Per selected prompt with an admitted response: the source's group in the receiver's tokens,
    with the source's advantages and the weights w."""
    out: dict[int, TrainGroup] = {}
    for i, rows in admitted_rows(d, weights).items():
        if rows:
            adv = d.source[i].advantages_G
            peer = [
                peer_sequence(d.imported[r], adv[d.requests[r].member], weights[r], objective)
                for r in rows
            ]
            out[i] = TrainGroup(d.receiver[i].problem.id, tuple(peer), is_peer=True)
    return out


def receiver_batch(
    receiver: Sequence[Group], replacements: Mapping[int, TrainGroup | None], selected: set[int]
) -> list[TrainGroup]:
    """The receiver's training groups: its own, except on selected prompts, where the replacement
    (or nothing, when every peer response was dropped) takes the place of its failed group."""
    out = []
    for i, own in enumerate(receiver):
        if i in selected:
            group = replacements.get(i)
            if group is not None:
                out.append(group)
        else:
            out.append(self_train_group(own))
    return out
