"""Groups without reward contrast: keep them, drop them, or sample further prompts (pure).

A group whose rewards are all equal (all-pass, or all-fail and not replaced by a peer's group) has
advantage 0 for every member, so it adds nothing to the policy gradient. What happens to it is one
setting per policy (`models.N.zero_contrast.mode`), applied to each policy's training batch after
the exchange:

- `keep` (GRPO as the paper runs it): it stays, and its tokens count in the token-mean
  denominator, which shrinks the step the other groups take;
- `drop`: it leaves the loss and the denominator;
- `resample` (DAPO's dynamic sampling, Yu et al., 2025): dropped, and the policy samples further
  prompts alone, each round as many as the batch still misses, keeping the groups with contrast
  until the batch holds `want` of them. (DAPO and verl sample a whole batch a round and throw
  away the groups with contrast beyond a full batch; sampling only what is missing takes more
  rounds but never samples a group it cannot use, so at equal compute it is the stronger
  baseline.) The budget bounds the rounds and, optionally, the extra responses (a round is cut to
  the prompts that fit). When it runs out, the policy trains on what it has and the fill fraction
  says how full the batch was. verl raises an error instead; a long run stopped for one hard
  batch loses more than one step trained on fewer groups, and the fill fraction shows when it
  happens.

The extra prompts' source (which prompts, which seeds) is the trainer's (`extra_prompts` in
`graft.tasks`); everything here is arithmetic on the groups.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from graft.training.loss import POLICY_LOSSES
from graft.types import TrainGroup

MODES = ("keep", "drop", "resample")


def has_contrast(group: TrainGroup) -> bool:
    """Whether a training group carries a learning signal: some response has a nonzero advantage
    (its own rewards are not all equal; a peer's group brings the advantages of the peer's mixed
    group), or a supervised row (the SGT baseline's)."""
    return any(q.advantage != 0 or POLICY_LOSSES[q.objective].supervised for q in group.sequences)


@dataclass(frozen=True)
class Budget:
    """One policy's setting and resampling budget for one step."""

    mode: str = "keep"
    want: int = 1
    """Groups with contrast a full batch holds (rollout.prompts_per_step)."""
    group_size: int = 2
    max_rounds: int = 1
    max_responses: int | None = None


@dataclass(frozen=True)
class Refill:
    """Where one policy's batch stands: the groups it keeps and what the rounds cost so far."""

    budget: Budget
    kept: tuple[TrainGroup, ...] = ()
    dropped: int = 0
    """Groups without contrast left out (the step's own and the extra rounds'), the prompts the
    exchange selected but whose peer responses were all refused among them."""
    refused: int = 0
    """Of `dropped`: prompts the exchange selected (the receiver failed them all) whose peer
    responses the weight all refused, so no group of that prompt reached the batch."""
    rounds: int = 0
    responses: int = 0
    """Extra responses sampled."""
    exhausted: bool = False
    """A round got fewer prompts than it asked for: the step has no further prompts."""

    def next_round(self) -> int:
        """Prompts to sample in the next round; 0 when the batch is full or the budget spent."""
        b = self.budget
        full = len(self.kept) >= b.want
        if b.mode != "resample" or full or self.exhausted or self.rounds >= b.max_rounds:
            return 0
        prompts = b.want - len(self.kept)
        if b.max_responses is not None:
            prompts = min(prompts, (b.max_responses - self.responses) // b.group_size)
        return max(prompts, 0)

    def add(self, groups: Sequence[TrainGroup], *, asked: int) -> Refill:
        """The groups of one extra round (one per prompt, in prompt order) that asked for `asked`
        prompts (at most as many as the batch missed, so every group with contrast fits)."""
        if len(groups) > asked:
            raise ValueError(f"a round asked for {asked} prompts and got {len(groups)} groups")
        with_contrast = tuple(g for g in groups if has_contrast(g))
        return replace(
            self,
            kept=self.kept + with_contrast,
            dropped=self.dropped + len(groups) - len(with_contrast),
            rounds=self.rounds + 1,
            responses=self.responses + len(groups) * self.budget.group_size,
            exhausted=len(groups) < asked,
        )

    def metrics(self) -> dict[str, float]:
        """The step's counts: `contrast/fill_frac` always; the rest where the mode acts."""
        out = {"contrast/fill_frac": len(self.kept) / self.budget.want}
        if self.budget.mode == "keep":
            return out
        out["contrast/dropped_groups"] = float(self.dropped)
        out["contrast/refused_groups"] = float(self.refused)
        if self.budget.mode == "resample":
            out["contrast/extra_rounds"] = float(self.rounds)
            out["contrast/extra_responses"] = float(self.responses)
        return out


def start(
    batch: Sequence[TrainGroup], budget: Budget, *, refused: int = 0
) -> tuple[Refill, tuple[TrainGroup, ...]]:
    """A policy's batch after the exchange, settled by its mode before any extra round: the
    refill state, and the batch to train on if no round follows (`keep`: unchanged). `refused`:
    the step's prompts that left the batch in the exchange (selected, every peer response refused);
    they count as dropped, so that kept + dropped covers every prompt sampled."""
    if budget.mode not in MODES:
        raise ValueError(f"unknown zero_contrast mode {budget.mode!r}; use {', '.join(MODES)}")
    kept = tuple(g for g in batch if has_contrast(g))
    dropped = len(batch) - len(kept) + refused
    state = Refill(budget, kept=kept, dropped=dropped, refused=refused)
    if budget.mode == "keep":
        return replace(state, dropped=0, refused=0), tuple(batch)
    return state, kept


Sampler = Callable[[int, Mapping[str, int]], Mapping[str, Sequence[TrainGroup]]]
"""`sample(round, prompts_by_policy)`: round `round` (1, 2, ...) for the policies named, each on
its number of prompts; their training groups in prompt order."""


def settle(
    batches: Mapping[str, Sequence[TrainGroup]],
    budgets: Mapping[str, Budget],
    sample: Sampler,
) -> tuple[dict[str, list[TrainGroup]], dict[str, dict[str, float]]]:
    """Every policy's batch with its groups without contrast kept, dropped or replaced by extra
    rounds; all policies that still want groups sample each round together. A batch shorter than
    its budget's `want` lost prompts in the exchange (selected, nothing admitted): they count as
    dropped. Returns the batches and each policy's counts (`Refill.metrics`): in `drop` and
    `resample`, kept + dropped = the prompts sampled (the step's and the extra rounds')."""
    states: dict[str, Refill] = {}
    out: dict[str, list[TrainGroup]] = {}
    for name, batch in batches.items():
        budget = budgets.get(name, Budget(want=max(len(batch), 1)))
        refused = max(budget.want - len(batch), 0)  # left in the exchange (module docstring)
        states[name], settled = start(batch, budget, refused=refused)
        out[name] = list(settled)
    rnd = 0
    while wanted := {n: k for n, s in states.items() if (k := s.next_round()) > 0}:
        rnd += 1
        got = sample(rnd, wanted)
        for name, prompts in wanted.items():
            states[name] = states[name].add(got[name], asked=prompts)
            out[name] = list(states[name].kept)
    return out, {name: s.metrics() for name, s in states.items()}
