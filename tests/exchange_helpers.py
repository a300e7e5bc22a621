"""Builders of hand-made groups for the pure exchange tests."""

from graft.groups import make_groups
from graft.types import Completion, Problem, Rollout, Verdict


def completion(text="7", logprobs=(-0.5, -0.1), stop=True):
    ids = tuple(range(10, 10 + len(logprobs)))
    return Completion(text, ids, tuple(logprobs), "stop" if stop else "length")


def groups_for(policy, outcomes, *, logprobs=(-0.5, -0.1), skills=None):
    """One group per prompt; `outcomes` is a list of strings like "1100" (1 = correct)."""
    rollouts, verdicts = [], []
    for p, pattern in enumerate(outcomes):
        skill = skills[p] if skills else ""
        problem = Problem(prompt=f"{p}+{p}=", gold=str(2 * p), skill=skill)
        comps = tuple(completion(f"ans{j}", logprobs) for j in range(len(pattern)))
        rollouts.append(Rollout(problem, policy, (1, 2, 3), comps))
        verdicts.append(tuple(Verdict("correct" if c == "1" else "wrong") for c in pattern))
    return make_groups(rollouts, verdicts)
