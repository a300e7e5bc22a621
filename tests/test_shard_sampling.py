"""Sampling, old log-probs and peer scoring of a sharded policy run on every rank, each on its share
of the rows, and give what the unsharded policy gives: the same tokens, and log-probs to float
rounding, for K = 2 and 4. Each row draws from its own stream, so the samples do not depend on how
a batch is split (into chunks here, or over ranks)."""

from __future__ import annotations

import pytest
import torch

from graft.backends import policy_specs
from graft.config import Config, load_config
from graft.rollout import SamplingParams
from graft.training.policy import Policy
from graft.training.sharded_policy import ShardedPolicy
from graft.types import PeerResponse, Problem

LOGP_ATOL = 1024 * torch.finfo(torch.float32).eps
"""float32 log-probs of one row computed in batches of another shape (other kernels, another
summation order): each reduction of length n (the hidden size, 128; the vocabulary's
log-sum-exp) may round differently by about n eps of its terms' scale, and the model's 4 layers
carry that through, so a few hundred eps of a log-prob's unit scale: 1024 eps (1.2e-4). Seen:
2e-7 on one machine, 1.5e-5 on an AVX-512 Xeon. The tokens drawn are the same."""

PROBLEMS = [Problem(f"{a}+{b}=", str(a + b)) for a, b in [(12, 7), (40, 41), (3, 88), (56, 9)]]
PROBLEMS.append(PROBLEMS[0])  # the same problem twice in a batch: its two groups still differ
PARAMS = SamplingParams(max_new_tokens=8, temperature=1.0)


def _policy(shards: int, *sets: str) -> Policy:
    overrides = [f"models.0.shards={shards}", "run.backend=processes", *sets]
    spec = policy_specs(load_config(Config, "configs/grpo_tiny.yaml", overrides))[0]
    return ShardedPolicy(spec) if shards > 1 else Policy(spec)


def _what_it_does(policy: Policy) -> tuple[list, list, list]:
    """Its rollouts of PROBLEMS (4 samples each), its scores of them, and its import of text."""
    rollouts = policy.generate(PROBLEMS, n=4, params=PARAMS, seed=11)
    rows = [(r.prompt_ids, c.token_ids) for r in rollouts for c in r.completions_G]
    scores = policy.score([p for p, _ in rows], [t for _, t in rows])
    texts = ["19", "81", "91 and more", "65"]
    peers = [PeerResponse(i, 0, p.prompt, t, True) for i, (p, t) in enumerate(zip(PROBLEMS, texts))]
    imported = policy.import_responses(peers)
    return rollouts, scores, imported


def _worst(a, b) -> float:
    return max((abs(x - y) for u, v in zip(a, b, strict=True) for x, y in zip(u, v, strict=True)))


@pytest.fixture(scope="module")
def unsharded():
    policy = _policy(1)
    try:
        yield _what_it_does(policy)
    finally:
        policy.close()


def test_a_rows_samples_depend_on_its_seed_not_on_the_batch_around_it(unsharded):
    rollouts, _, _ = unsharded
    groups = [tuple(c.token_ids for c in r.completions_G) for r in rollouts]
    assert groups[0] != groups[-1]  # the second copy of a problem drew its own samples
    assert len({t for g in groups for t in g}) > len(groups)  # a group's samples differ
    chunked = _policy(1, "rollout.batch_size=3")  # chunks that cut through groups
    try:
        again, _, _ = _what_it_does(chunked)
    finally:
        chunked.close()
    assert [tuple(c.token_ids for c in r.completions_G) for r in again] == groups
    logp = [c.logprobs for r in rollouts for c in r.completions_G]
    assert _worst([c.logprobs for r in again for c in r.completions_G], logp) <= LOGP_ATOL


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("shards", [2, 4])
def test_every_rank_samples_and_scores_as_the_unsharded_policy(unsharded, shards):
    want_rollouts, want_scores, want_imported = unsharded
    policy = _policy(shards)
    try:
        assert policy.model is None  # no rank keeps a full copy
        rollouts, scores, imported = _what_it_does(policy)
    finally:
        policy.close()
    tokens = [[c.token_ids for c in r.completions_G] for r in rollouts]
    assert tokens == [[c.token_ids for c in r.completions_G] for r in want_rollouts]
    logp = [c.logprobs for r in rollouts for c in r.completions_G]
    want_logp = [c.logprobs for r in want_rollouts for c in r.completions_G]
    assert _worst(logp, want_logp) <= LOGP_ATOL
    assert _worst(scores, want_scores) <= LOGP_ATOL
    assert _worst(scores, logp) <= LOGP_ATOL  # scoring the samples gives their behavior log-probs
    assert [i.response_ids for i in imported] == [i.response_ids for i in want_imported]
    assert _worst([i.logprobs for i in imported], [i.logprobs for i in want_imported]) <= LOGP_ATOL
