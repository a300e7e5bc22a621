"""Hand-computed values and plain-loop references for the pure math (advantages, losses)."""

import math

import pytest
import torch

from graft.config import AlgoConfig
from graft.groups import drgrpo_advantages, grpo_advantages
from graft.training.loss import (
    LossSettings,
    Rows,
    aggregate,
    clipped_surrogate,
    kl_k3,
    loss_coefficients,
    policy_objective,
    token_coefficients,
)


def test_grpo_advantages_hand_computed():
    adv = grpo_advantages(torch.tensor([[1.0, 0.0, 0.0, 0.0]]), eps=1e-6)
    # mean 0.25; unbiased std = sqrt((0.75^2 + 3 * 0.25^2) / 3) = 0.5
    expected = torch.tensor([[0.75, -0.25, -0.25, -0.25]], dtype=torch.float64) / (0.5 + 1e-6)
    torch.testing.assert_close(adv, expected, rtol=0, atol=1e-12)


def test_grpo_zero_variance_groups_get_zero_advantage():
    adv = grpo_advantages(torch.tensor([[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]]))
    assert torch.equal(adv, torch.zeros(2, 3, dtype=torch.float64))


def test_grpo_uses_unbiased_std():
    rewards = torch.tensor([[1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]])
    mean = 0.25
    std = math.sqrt((2 * 0.75**2 + 6 * 0.25**2) / 7)  # n - 1 = 7
    adv = grpo_advantages(rewards, eps=0.0)
    assert adv[0, 0].item() == pytest.approx(0.75 / std)
    assert adv[0, 7].item() == pytest.approx(-0.25 / std)
    assert adv.sum().item() == pytest.approx(0.0, abs=1e-12) and mean == 0.25


def test_drgrpo_is_mean_centred_only():
    adv = drgrpo_advantages(torch.tensor([[1.0, 0.0, 0.0, 0.0]]))
    torch.testing.assert_close(adv, torch.tensor([[0.75, -0.25, -0.25, -0.25]]).double())


def test_grpo_rejects_singleton_groups():
    with pytest.raises(ValueError, match="G >= 2"):
        grpo_advantages(torch.tensor([[1.0]]))


def _surrogate(ratio, adv, **kw):
    logp = torch.log(torch.tensor([[ratio]]))
    return clipped_surrogate(logp, torch.zeros(1, 1), torch.tensor([adv]), **kw)


@pytest.mark.parametrize(
    ("ratio", "adv", "loss", "clipped"),
    [
        (1.5, 1.0, -1.28, True),  # positive advantage, ratio above 1 + 0.28: clipped
        (1.5, -1.0, 1.5, False),  # negative advantage, ratio above: unclipped (pessimistic)
        (0.5, -1.0, 0.8, True),  # negative advantage, ratio below 1 - 0.2: clipped
        (0.5, 1.0, -0.5, False),  # positive advantage, ratio below: unclipped
        (1.1, 2.0, -2.2, False),  # inside the trust region
    ],
)
def test_clipped_surrogate_hand_computed(ratio, adv, loss, clipped):
    loss_BT, clipped_BT = _surrogate(ratio, adv, clip_low=0.2, clip_high=0.28)
    assert loss_BT.item() == pytest.approx(loss, rel=1e-6)
    assert bool(clipped_BT.item()) is clipped


def test_dual_clip_caps_negative_advantage_loss():
    loss_BT, clipped_BT = _surrogate(5.0, -1.0, clip_low=0.2, clip_high=0.28, dual_clip=3.0)
    assert loss_BT.item() == pytest.approx(3.0)
    assert bool(clipped_BT.item())
    off, _ = _surrogate(5.0, -1.0, clip_low=0.2, clip_high=0.28)
    assert off.item() == pytest.approx(5.0, rel=1e-6)


def test_aggregation_modes_hand_computed():
    loss = torch.tensor([[1.0, 2.0, 3.0], [4.0, 9.0, 9.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]], dtype=torch.bool)
    assert aggregate(loss, mask, mode="token-mean").item() == pytest.approx(10 / 4)
    assert aggregate(loss, mask, mode="seq-mean-token-mean").item() == pytest.approx((2 + 4) / 2)
    assert aggregate(loss, mask, mode="constant", constant=5).item() == pytest.approx(10 / 10)
    with pytest.raises(ValueError, match="unknown loss aggregation"):
        token_coefficients(mask, mode="sum")


def test_kl_k3_hand_computed():
    logp = torch.tensor([[math.log(0.5)]])
    ref = torch.tensor([[math.log(0.25)]])
    d = math.log(0.25) - math.log(0.5)
    assert kl_k3(logp, ref).item() == pytest.approx(math.exp(d) - d - 1)
    assert kl_k3(ref, ref).item() == 0.0


def _reference_loss(logp, old, adv, mask, *, clip_low, clip_high, mode, constant):
    """Plain Python loops over sequences and tokens."""
    per_seq, total_tokens, total = [], 0, 0.0
    for b in range(len(logp)):
        seq_sum, n = 0.0, 0
        for t in range(len(logp[b])):
            if not mask[b][t]:
                continue
            ratio = math.exp(logp[b][t] - old[b][t])
            clipped = min(max(ratio, 1 - clip_low), 1 + clip_high)
            seq_sum += -min(ratio * adv[b], clipped * adv[b])
            n += 1
        per_seq.append((seq_sum, n))
        total_tokens += n
        total += seq_sum
    if mode == "token-mean":
        return total / total_tokens
    if mode == "seq-mean-token-mean":
        return sum(s / n for s, n in per_seq) / len(per_seq)
    return total / (len(per_seq) * constant)


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "constant"])
def test_vectorized_loss_equals_plain_loop(mode):
    gen = torch.Generator().manual_seed(0)
    for _ in range(5):
        B, T = 6, 9
        logp = -torch.rand(B, T, generator=gen, dtype=torch.float64) * 3
        old = logp + torch.randn(B, T, generator=gen, dtype=torch.float64) * 0.3
        adv = torch.randn(B, generator=gen, dtype=torch.float64)
        lengths = torch.randint(1, T + 1, (B,), generator=gen)
        mask = torch.arange(T).unsqueeze(0) < lengths.unsqueeze(1)
        loss_BT, _ = clipped_surrogate(logp, old, adv, clip_low=0.2, clip_high=0.28)
        got = aggregate(loss_BT, mask, mode=mode, constant=12).item()
        want = _reference_loss(
            logp.tolist(),
            old.tolist(),
            adv.tolist(),
            mask.tolist(),
            clip_low=0.2,
            clip_high=0.28,
            mode=mode,
            constant=12,
        )
        assert got == pytest.approx(want, rel=1e-12, abs=1e-12)


PAPER = LossSettings(clip_low=0.2, clip_high=0.28, luffy_gamma=0.1, dual_clip=0.0, ratio="token")
assert LossSettings.of(AlgoConfig()) == PAPER  # the paper's settings are the defaults


def test_graft_objective_is_eq_10_with_sequence_weights():
    """Token-mean over the minibatch of w_j x the clipped surrogate's token sum (paper eq. 10)."""
    gen = torch.Generator().manual_seed(2)
    B, T = 5, 7
    logp = -torch.rand(B, T, generator=gen, dtype=torch.float64) * 3
    old = logp + torch.randn(B, T, generator=gen, dtype=torch.float64) * 0.3
    adv = torch.randn(B, generator=gen, dtype=torch.float64)
    w = torch.rand(B, generator=gen, dtype=torch.float64)
    lengths = torch.randint(1, T + 1, (B,), generator=gen)
    mask = torch.arange(T).unsqueeze(0) < lengths.unsqueeze(1)
    coef = loss_coefficients(lengths, torch.zeros(B, dtype=torch.bool), mode="token-mean")
    terms = policy_objective(Rows(logp, old, adv, mask), ["pg"] * B, w, coef, PAPER)
    per_row = [
        _reference_loss(
            logp[b : b + 1].tolist(),
            old[b : b + 1].tolist(),
            adv[b : b + 1].tolist(),
            mask[b : b + 1].tolist(),
            clip_low=0.2,
            clip_high=0.28,
            mode="constant",
            constant=1,
        )
        for b in range(B)
    ]
    want = sum(w[b].item() * per_row[b] for b in range(B)) / int(lengths.sum())
    assert terms.loss.item() == pytest.approx(want, rel=1e-12, abs=1e-12)
    assert not terms.kl_BT.any()
    torch.testing.assert_close(terms.ratio_BT, torch.exp(logp - old))


def test_unclipped_rows_take_the_plain_surrogate_and_the_others_stay_clipped():
    """peer_update=unclipped (the token clip's control): on its rows the loss is -rho a by hand,
    even where the clip would bind; the other rows keep the clipped surrogate."""
    logp = torch.log(torch.tensor([[0.5, 0.5], [0.5, 0.5]], dtype=torch.float64))
    old = torch.log(torch.tensor([[0.25, 0.5], [0.25, 0.5]], dtype=torch.float64))  # rho 2, 1
    adv = torch.tensor([1.0, 1.0], dtype=torch.float64)
    ones = torch.ones(2, dtype=torch.float64)
    mask = torch.ones(2, 2, dtype=torch.bool)
    coef = torch.tensor([1.0, 1.0], dtype=torch.float64)  # plain sums, per row
    terms = policy_objective(Rows(logp, old, adv, mask), ["unclipped", "pg"], ones, coef, PAPER)
    # row 0 unclipped: -(2 + 1); row 1 clipped: -(1.28 + 1)
    assert terms.loss.item() == pytest.approx(-(2.0 + 1.0) - (1.28 + 1.0), abs=1e-12)
    assert terms.clipped_BT.tolist() == [[False, False], [True, False]]


def test_coefficients_split_equals_whole():
    """Aggregation coefficients computed once make any micro-batch split sum to the whole."""
    gen = torch.Generator().manual_seed(1)
    loss = torch.randn(8, 5, generator=gen, dtype=torch.float64)
    mask = torch.arange(5).unsqueeze(0) < torch.randint(1, 6, (8, 1), generator=gen)
    for mode in ("token-mean", "seq-mean-token-mean", "constant"):
        coef = token_coefficients(mask, mode=mode, constant=7)
        whole = aggregate(loss, mask, mode=mode, constant=7)
        parts = sum((loss[i : i + 2] * coef[i : i + 2]).sum() for i in range(0, 8, 2))
        assert parts.item() == pytest.approx(whole.item(), rel=1e-12)


def test_a_policy_loss_is_one_registered_function_and_its_rows_take_it():
    """The registry is the one place a per-row loss is added: a throwaway loss registered here
    is used on its rows, the others keep theirs; an unknown name is refused by name."""
    from graft.training import loss

    logp = torch.log(torch.tensor([[0.5, 0.5], [0.5, 0.5]], dtype=torch.float64))
    rows = Rows(logp, logp.clone(), torch.tensor([1.0, 1.0], dtype=torch.float64),
                torch.ones(2, 2, dtype=torch.bool))  # fmt: skip
    ones = torch.ones(2, dtype=torch.float64)

    @loss.policy_loss("double_pg")
    def double_pg(r, s):
        plain, clipped = loss.pg_loss(r, s)
        return 2 * plain, clipped

    try:
        terms = policy_objective(rows, ["double_pg", "pg"], ones, ones, PAPER)
        assert terms.loss.item() == pytest.approx(2 * -(1 + 1) - (1 + 1), abs=1e-12)
        with pytest.raises(ValueError, match="registered already"):
            loss.policy_loss("double_pg")(double_pg)
    finally:
        del loss.POLICY_LOSSES["double_pg"]
    with pytest.raises(ValueError, match="unknown policy loss 'double_pg'"):
        policy_objective(rows, ["double_pg", "pg"], ones, ones, PAPER)
