"""Compatibility weights, drops and replacement groups, checked against hand computation (pure)."""

import math

import pytest
import torch

from exchange_helpers import groups_for
from graft.config import AblationConfig, ExchangeConfig
from graft.exchange import (
    Selection,
    admission_weight,
    graft_direction,
    mean_logprob,
    receiver_batch,
    transfer_requests,
)
from graft.training.update import UpdateSettings, sequence_coefficients
from graft.types import Imported

SQRT3 = math.sqrt(3)


def _setup():
    # Source A: mixed on prompt 0 ("1100"); receiver B failed prompt 0 and is mixed on prompt 1.
    a = groups_for("a", ["1100", "1000"])
    b = groups_for("b", ["0000", "1100"], logprobs=(-0.2, -0.2))
    sel = Selection("a", "b", candidates=(0,), selected=(0,))
    return a, b, sel


def _imported(*per_member):
    """per member: (logprob, logprob) for a usable response, or a drop reason string."""
    out = []
    for m in per_member:
        if isinstance(m, str):
            out.append(Imported((1, 2), (), (), drop=m))
        else:
            out.append(Imported((1, 2), tuple(range(20, 20 + len(m))), tuple(m)))
    return out


def test_weights_drops_and_frozen_source_advantages():
    a, b, sel = _setup()
    reqs = transfer_requests(sel, a)
    assert [r.member for r in reqs] == [0, 1, 2, 3] and all(r.stopped for r in reqs)
    # l_S = mean(-0.5, -0.1) = -0.3 for every source response
    imps = _imported((-0.3, -0.3), (-0.4, -0.4), (-0.6, -0.6), "too_long")
    result = graft_direction(sel, b, a, reqs, imps, ExchangeConfig())
    group = result.groups[0]
    assert group.is_peer
    # member 0: s = 1 -> w = 1; member 1: s = e^-0.1 = 0.905 -> w = 0.905;
    # member 2: s = e^-0.3 = 0.741 <= 0.8 -> dropped; member 3: too long -> dropped
    assert [q.weight for q in group.sequences] == pytest.approx([1.0, math.exp(-0.1)])
    # A's advantages over its FULL group "1100": (1 - 0.5) / sqrt(1/3) = +sqrt(3)/2 * ..., kept
    expected_adv = 0.5 / (math.sqrt(1 / 3) + 1e-6)
    assert [q.advantage for q in group.sequences] == pytest.approx([expected_adv, expected_adv])
    assert result.metrics["admitted"] == 2 and result.metrics["dropped_weight"] == 1
    assert result.metrics["dropped_too_long"] == 1
    assert result.metrics["w_mean"] == pytest.approx((1 + math.exp(-0.1)) / 2)


def test_dropped_responses_leave_the_token_mean_denominator():
    a, b, sel = _setup()
    reqs = transfer_requests(sel, a)
    imps = _imported((-0.3, -0.3), (-0.4, -0.4), (-0.6, -0.6), "too_long")
    result = graft_direction(sel, b, a, reqs, imps, ExchangeConfig())
    batch = receiver_batch(b, result.groups, {0})
    seqs = [q for g in batch for q in g.sequences]
    # prompt 0: 2 admitted peer responses of 2 tokens; prompt 1: B's own 4 responses of 2 tokens
    assert len(seqs) == 6
    coef = sequence_coefficients(seqs, UpdateSettings())
    assert coef.tolist() == pytest.approx([1 / 12] * 6)


def test_all_dropped_prompt_contributes_nothing():
    a, b, sel = _setup()
    reqs = transfer_requests(sel, a)
    imps = _imported((-3, -3), (-3, -3), (-3, -3), (-3, -3))
    result = graft_direction(sel, b, a, reqs, imps, ExchangeConfig())
    assert result.groups == {}
    batch = receiver_batch(b, result.groups, {0})
    assert len(batch) == 1 and batch[0].problem_id == b[1].problem.id  # own failed group not back


def test_floor_and_cap():
    assert admission_weight(1.7, delta=0.8, mode="paper") == 1.0  # never above a self response
    assert admission_weight(0.81, delta=0.8, mode="paper") == pytest.approx(0.81)
    assert admission_weight(0.8, delta=0.8, mode="paper") == 0.0
    assert admission_weight(0.3, delta=0.0, mode="paper") == pytest.approx(0.3)  # no floor
    assert admission_weight(0.01, delta=0.8, mode="none") == 1.0


def test_eos_handling_is_the_same_on_both_sides():
    assert mean_logprob([-1.0, -3.0], stopped=True, eos_in_score=True) == -2.0
    assert mean_logprob([-1.0, -3.0], stopped=True, eos_in_score=False) == -1.0
    assert mean_logprob([-1.0, -3.0], stopped=False, eos_in_score=False) == -2.0
    a, b, sel = _setup()
    reqs = transfer_requests(sel, a)
    imps = _imported((-0.5, -5.0), (-0.5, -5.0), (-0.5, -5.0), (-0.5, -5.0))
    cfg = ExchangeConfig(ablation=AblationConfig(eos_in_score=False), delta=0.0)
    result = graft_direction(sel, b, a, reqs, imps, cfg)
    # without EOS: l_R = -0.5, l_S = -0.5 -> s = 1
    assert [q.weight for q in result.groups[0].sequences] == pytest.approx([1.0] * 4)


def test_per_byte_and_receiver_relative_scores():
    a, b, sel = _setup()
    reqs = transfer_requests(sel, a)  # texts "ans0".."ans3": 4 bytes each
    imps = _imported((-0.2, -0.2, -0.2), (-0.2, -0.2, -0.2), (-1, -1, -1), (-1, -1, -1))
    per_byte = graft_direction(
        sel, b, a, reqs, imps, ExchangeConfig(ablation=AblationConfig(weight="per_byte"), delta=0)
    )
    # sum_R = -0.6, sum_S = -0.6 -> s = 1; sum_R = -3 -> s = exp(-2.4 / 4)
    assert [q.weight for q in per_byte.groups[0].sequences] == pytest.approx(
        [1, 1, math.exp(-2.4 / 4), math.exp(-2.4 / 4)]
    )
    rel = graft_direction(
        sel,
        b,
        a,
        reqs,
        imps,
        ExchangeConfig(ablation=AblationConfig(weight="receiver_relative"), delta=0),
    )
    # receiver's own responses on prompt 0 have mean log-prob -0.2 -> s = exp(l_R + 0.2)
    assert [q.weight for q in rel.groups[0].sequences] == pytest.approx(
        [1, 1, math.exp(-0.8), math.exp(-0.8)]
    )


def test_pooled_success_only_sgt_and_luffy():
    a, b, sel = _setup()
    same = (-0.3, -0.3)
    reqs = transfer_requests(sel, a)
    imps = _imported(same, same, same, same)
    pooled = graft_direction(
        sel, b, a, reqs, imps, ExchangeConfig(ablation=AblationConfig(replacement="pooled"))
    ).groups[0]
    rewards = torch.tensor([0, 0, 0, 0, 1, 1, 0, 0], dtype=torch.float64)
    adv = ((rewards - rewards.mean()) / (rewards.std() + 1e-6)).tolist()
    assert [q.advantage for q in pooled.sequences] == pytest.approx(adv)
    assert [q.is_peer for q in pooled.sequences] == [False] * 4 + [True] * 4

    only = transfer_requests(sel, a, replacement="success_only")
    assert [r.member for r in only] == [0, 1]

    sgt_reqs = transfer_requests(sel, a, peer_update="sgt", seed=1)
    assert len(sgt_reqs) == 1 and sgt_reqs[0].member in (0, 1)
    sgt = graft_direction(
        sel,
        b,
        a,
        sgt_reqs,
        _imported(same),
        ExchangeConfig(ablation=AblationConfig(peer_update="sgt")),
    )
    seqs = sgt.groups[0].sequences
    assert [q.objective for q in seqs] == ["pg"] * 4 + ["sft"]
    assert seqs[-1].weight == pytest.approx(0.1) and all(q.advantage == 0 for q in seqs[:4])

    luffy = graft_direction(
        sel,
        b,
        a,
        reqs,
        _imported(same, same, (-5, -5), same),
        ExchangeConfig(ablation=AblationConfig(peer_update="luffy")),
    ).groups[0]
    assert [q.objective for q in luffy.sequences] == ["luffy"] * 4
    assert [q.weight for q in luffy.sequences] == [1.0] * 4  # no compatibility weight, no floor


def test_random_admission_is_count_matched():
    a, b, sel = _setup()
    reqs = transfer_requests(sel, a)
    imps = _imported((-0.3, -0.3), (-0.4, -0.4), (-0.6, -0.6), (-0.6, -0.6))
    by_weight = graft_direction(sel, b, a, reqs, imps, ExchangeConfig())
    rand = graft_direction(
        sel, b, a, reqs, imps, ExchangeConfig(ablation=AblationConfig(admission="random")), seed=3
    )
    assert rand.metrics["admitted"] == by_weight.metrics["admitted"] == 2
    assert [q.weight for q in rand.groups[0].sequences] == [1.0, 1.0]
