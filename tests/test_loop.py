"""The one rule of when a run evaluates (graft.rundir.loop.evaluation_due), for train and sft."""

from __future__ import annotations

from graft.rundir.loop import evaluation_due


def due(every: int, steps: int, at_ends: bool = False) -> list[int]:
    return [
        s for s in range(steps + 1) if evaluation_due(s, every=every, steps=steps, at_ends=at_ends)
    ]


def test_a_run_evaluates_at_zero_every_n_steps_and_after_the_last():
    assert due(every=4, steps=10) == [0, 4, 8, 10]
    assert due(every=5, steps=10) == [0, 5, 10]
    assert due(every=0, steps=10) == []  # graft train: evaluation off
    assert due(every=0, steps=10, at_ends=True) == [0, 10]  # graft sft: it picks its best there
    assert due(every=4, steps=10, at_ends=True) == [0, 4, 8, 10]
