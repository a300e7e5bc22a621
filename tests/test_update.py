"""The update: micro-batch accumulation invariance, minibatch order, an update that learns."""

from dataclasses import replace
from functools import partial

import pytest
import torch

from graft.config import AlgoConfig
from graft.models.modeling import score_sequences
from graft.training.update import (
    UpdateSettings,
    minibatch_backward,
    order_groups,
    split_minibatches,
    train_on_batch,
)
from graft.types import TrainGroup, TrainSequence


def _sequences(model, num, *, seed=0, weight=1.0, peer=False):
    gen = torch.Generator().manual_seed(seed)
    prompts, responses = [], []
    for _ in range(num):
        prompts.append(
            tuple(
                torch.randint(
                    2, 32, (int(torch.randint(2, 6, (1,), generator=gen)),), generator=gen
                ).tolist()
            )
        )
        responses.append(
            tuple(
                torch.randint(
                    2, 32, (int(torch.randint(1, 8, (1,), generator=gen)),), generator=gen
                ).tolist()
            )
        )
    old = score_sequences(model, prompts, responses, pad_id=0)
    # Perturb the behavior log-probs so that ratios differ from 1 and clipping acts.
    old = [tuple(x + 0.3 * ((i + j) % 3 - 1) for j, x in enumerate(o)) for i, o in enumerate(old)]
    adv = torch.randn(num, generator=gen).tolist()
    return [
        TrainSequence(p, r, o, advantage=a, weight=weight, is_peer=peer)
        for p, r, o, a in zip(prompts, responses, old, adv)
    ]


def _grads(model):
    return [p.grad.detach().clone() for p in model.parameters() if p.grad is not None]


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "constant"])
def test_micro_batches_with_accumulation_equal_one_minibatch(random_lm, mode):
    seqs = _sequences(random_lm, 8)
    grads = {}
    for micro in (8, 2):
        random_lm.zero_grad(set_to_none=True)
        s = UpdateSettings(algo=AlgoConfig(micro_batch_size=micro, loss_agg=mode), loss_constant=10)
        stats = minibatch_backward(random_lm, seqs, s, pad_id=0)
        grads[micro] = _grads(random_lm)
        assert stats["tokens"] == sum(q.num_tokens for q in seqs)
    assert len(grads[8]) == len(grads[2]) > 0
    for g8, g2 in zip(grads[8], grads[2]):
        torch.testing.assert_close(g8, g2, rtol=1e-5, atol=1e-7)
    assert any(g.abs().sum() > 0 for g in grads[8])


def test_weights_scale_a_sequence_gradient(random_lm):
    """A weight multiplies the response's token sum; the denominator stays unweighted."""
    seqs = _sequences(random_lm, 4)
    half = [
        TrainSequence(q.prompt_ids, q.response_ids, q.old_logprobs, q.advantage, 0.5) for q in seqs
    ]
    s = UpdateSettings(algo=AlgoConfig(micro_batch_size=4))
    random_lm.zero_grad(set_to_none=True)
    full_stats = minibatch_backward(random_lm, seqs, s, pad_id=0)
    g_full = _grads(random_lm)
    random_lm.zero_grad(set_to_none=True)
    half_stats = minibatch_backward(random_lm, half, s, pad_id=0)
    g_half = _grads(random_lm)
    assert half_stats["loss"] == pytest.approx(0.5 * full_stats["loss"], rel=1e-5)
    for a, b in zip(g_full, g_half):
        torch.testing.assert_close(0.5 * a, b, rtol=1e-4, atol=1e-7)


def _group(pid, peer):
    seq = TrainSequence((2, 3), (4,), (-1.0,), advantage=1.0, is_peer=peer)
    return TrainGroup(problem_id=pid, sequences=(seq,), is_peer=peer)


def test_peer_groups_go_into_the_last_minibatches():
    groups = [
        _group("p0", True),
        _group("s0", False),
        _group("p1", True),
        _group("s1", False),
        _group("s2", False),
        _group("s3", False),
    ]
    ordered = order_groups(groups, peer_position="last")
    assert [g.problem_id for g in ordered] == ["s0", "s1", "s2", "s3", "p0", "p1"]
    chunks = split_minibatches(ordered, 3)
    assert [[g.problem_id for g in c] for c in chunks] == [["s0", "s1"], ["s2", "s3"], ["p0", "p1"]]
    first = order_groups(groups, peer_position="first")
    assert [g.problem_id for g in first[:2]] == ["p0", "p1"]
    uniform = order_groups(groups, peer_position="uniform", seed=3)
    assert sorted(g.problem_id for g in uniform) == sorted(g.problem_id for g in groups)


def test_split_minibatches_keeps_groups_whole_and_near_equal():
    groups = [_group(f"s{i}", False) for i in range(7)]
    chunks = split_minibatches(groups, 4)
    assert [len(c) for c in chunks] == [2, 2, 2, 1]
    assert [g.problem_id for c in chunks for g in c] == [f"s{i}" for i in range(7)]


def test_train_on_batch_raises_logprob_of_positive_advantage_responses(random_lm):
    """A few updates on one batch move probability toward positive-advantage responses."""
    prompt = (5, 6, 7)
    good, bad = (9, 10, 11), (12, 13, 14)
    before = score_sequences(random_lm, [prompt, prompt], [good, bad], pad_id=0)
    seqs = (
        TrainSequence(prompt, good, before[0], advantage=1.0),
        TrainSequence(prompt, bad, before[1], advantage=-1.0),
    )
    opt = torch.optim.AdamW(random_lm.parameters(), lr=1e-2)
    s = UpdateSettings(algo=AlgoConfig(minibatches=1, micro_batch_size=2, epochs=3))
    stats = train_on_batch(random_lm, opt, [TrainGroup("q", seqs)], s, pad_id=0)
    after = score_sequences(random_lm, [prompt, prompt], [good, bad], pad_id=0)
    assert sum(after[0]) > sum(before[0])
    assert sum(after[1]) < sum(before[1])
    assert stats["optim/steps"] == 3
    assert 0 <= stats["loss/clip_frac"] <= 1 and stats["grad_norm"] > 0


def _one_token_batch(objective, *, adv=1.0, weight=1.0):
    return [TrainSequence((5, 6), (7,), (-1.0,), advantage=adv, weight=weight, objective=objective)]


def test_luffy_and_sft_objectives_have_the_stated_gradients(random_lm):
    """LUFFY: d/dlogp of -A * p / (p + g) is -A * g * p / (p + g)^2; SFT: -1 (per token)."""
    seq = _one_token_batch("pg")[0]
    logp = score_sequences(random_lm, [seq.prompt_ids], [seq.response_ids], pad_id=0)[0][0]
    p, g = torch.tensor(logp).exp().item(), 0.1
    s = UpdateSettings(
        algo=AlgoConfig(micro_batch_size=1), loss=replace(UpdateSettings().loss, luffy_gamma=g)
    )
    for objective, expected_loss in (
        ("luffy", -1.0 * p / (p + g)),
        ("sft", -logp),
    ):
        random_lm.zero_grad(set_to_none=True)
        stats = minibatch_backward(random_lm, _one_token_batch(objective), s, pad_id=0)
        assert stats["loss"] == pytest.approx(expected_loss, rel=1e-5)
        assert stats["clipped"] == 0


def test_sft_tokens_stay_out_of_the_policy_gradient_denominator():
    from graft.training.update import sequence_coefficients

    seqs = [
        TrainSequence((1,), (2, 3), (-1.0, -1.0), advantage=1.0),
        TrainSequence((1,), (2, 3, 4), (-1.0,) * 3, advantage=-1.0),
        TrainSequence((1,), (5, 6, 7, 8), (-1.0,) * 4, advantage=0.0, weight=0.1, objective="sft"),
    ]
    coef = sequence_coefficients(seqs, UpdateSettings())
    assert coef.tolist() == pytest.approx([1 / 5, 1 / 5, 1 / 4])


def test_sequence_ratio_is_one_ratio_per_response():
    from graft.training.loss import sequence_ratio_surrogate

    logp = torch.tensor([[-1.0, -2.0, 0.0]], requires_grad=True)
    old = torch.tensor([[-1.5, -1.5, 0.0]])
    mask = torch.tensor([[True, True, False]])
    loss, clipped = sequence_ratio_surrogate(
        logp, old, torch.tensor([1.0]), mask, clip_low=0.2, clip_high=0.28
    )
    # mean log-ratio over the 2 real tokens: (0.5 - 0.5) / 2 = 0 -> ratio 1 on every token
    assert loss[0, :2].tolist() == pytest.approx([-1.0, -1.0])
    assert not clipped[0, :2].any()
    loss2, clipped2 = sequence_ratio_surrogate(
        logp,
        torch.tensor([[-2.0, -2.5, 0.0]]),
        torch.tensor([1.0]),
        mask,
        clip_low=0.2,
        clip_high=0.28,
    )
    # mean log-ratio 1.0 -> ratio e = 2.718 > 1.28: clipped as a whole
    assert loss2[0, :2].tolist() == pytest.approx([-1.28, -1.28])
    assert clipped2[0, :2].all()


def test_kl_penalty_holds_the_policy_near_the_reference(random_lm):
    import copy

    prompt, good = (5, 6, 7), (9, 10, 11)
    old = score_sequences(random_lm, [prompt], [good], pad_id=0)
    seqs = (TrainSequence(prompt, good, old[0], advantage=1.0),)
    moved = {}
    for kl in (0.0, 5.0):
        model = copy.deepcopy(random_lm)
        ref = copy.deepcopy(random_lm).requires_grad_(False)
        opt = torch.optim.AdamW(model.parameters(), lr=5e-3)
        loss = replace(UpdateSettings().loss, clip_high=10.0)
        s = UpdateSettings(algo=AlgoConfig(minibatches=1, epochs=4, kl_coef=kl), loss=loss)
        stats = train_on_batch(model, opt, [TrainGroup("q", seqs)], s, pad_id=0, ref_model=ref)
        after = score_sequences(model, [prompt], [good], pad_id=0)
        moved[kl] = sum(after[0]) - sum(old[0])
        if kl > 0:
            assert stats["loss/kl"] > 0
    assert abs(moved[5.0]) < moved[0.0]


def test_skipping_zero_advantage_responses_changes_no_gradient(random_lm):
    seqs = _sequences(random_lm, 10)
    zeroed = [
        TrainSequence(
            q.prompt_ids, q.response_ids, q.old_logprobs, 0.0 if i % 3 == 0 else q.advantage
        )
        for i, q in enumerate(seqs)
    ]
    grads, stats = {}, {}
    for skip in (False, True):
        random_lm.zero_grad(set_to_none=True)
        s = UpdateSettings(
            algo=AlgoConfig(micro_batch_size=3, skip_zero_advantage=skip, sort_by_length=skip)
        )
        stats[skip] = minibatch_backward(random_lm, zeroed, s, pad_id=0)
        grads[skip] = _grads(random_lm)
    for a, b in zip(grads[False], grads[True]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)
    assert stats[True]["tokens"] == stats[False]["tokens"]  # still in the denominator
    assert stats[True]["skipped_tokens"] == sum(q.num_tokens for q in zeroed[::3])
    assert stats[True]["loss"] == pytest.approx(stats[False]["loss"], rel=1e-5)


def _rows_run(model, fn):
    """Call fn; return its result and how many rows the model's forward passes received."""
    rows = []
    hook = model.register_forward_pre_hook(
        lambda _m, _a, kw: rows.append(kw["input_ids"].shape[0]), with_kwargs=True
    )
    try:
        return fn(), sum(rows)
    finally:
        hook.remove()


def test_identical_responses_run_once_and_each_copy_keeps_its_own_loss(random_lm):
    base = _sequences(random_lm, 6, seed=3)
    # Copies of rows 0 and 2 that differ in advantage, weight, behavior log-probs and peer flag.
    copies = [
        TrainSequence(
            q.prompt_ids,
            q.response_ids,
            tuple(x - 0.1 * k for x in q.old_logprobs),
            advantage=q.advantage * (k - 1.5),
            weight=0.5 + 0.25 * k,
            is_peer=bool(k % 2),
        )
        for q in (base[0], base[2])
        for k in range(3)
    ]
    seqs = base + copies
    grads, stats, rows = {}, {}, {}
    for dedup in (False, True):
        random_lm.zero_grad(set_to_none=True)
        s = UpdateSettings(
            algo=AlgoConfig(micro_batch_size=64, dedup_responses=dedup, sort_by_length=dedup)
        )
        stats[dedup], rows[dedup] = _rows_run(
            random_lm, partial(minibatch_backward, random_lm, seqs, s, pad_id=0)
        )
        grads[dedup] = _grads(random_lm)
    for a, b in zip(grads[False], grads[True]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)
    for key in ("tokens", "peer_tokens", "clipped", "peer_clipped", "ratio_sum", "loss"):
        assert stats[True][key] == pytest.approx(stats[False][key], rel=1e-5), key
    dup = 3 * (base[0].num_tokens + base[2].num_tokens)
    assert stats[True]["duplicate_tokens"] == dup
    assert "duplicate_tokens" not in stats[False]
    # The model saw the 6 distinct rows (the shared-prompt path runs prompts, then responses).
    assert rows[True] < rows[False]


def test_scoring_runs_each_distinct_response_once(random_lm):
    seqs = _sequences(random_lm, 5, seed=4)
    prompts = [q.prompt_ids for q in seqs] + [seqs[1].prompt_ids] * 3
    responses = [q.response_ids for q in seqs] + [seqs[1].response_ids] * 3
    out, rows = {}, {}
    for dedup in (False, True):
        out[dedup], rows[dedup] = _rows_run(
            random_lm,
            partial(
                score_sequences,
                random_lm,
                prompts,
                responses,
                pad_id=0,
                batch_size=4,
                share_prompts=False,  # one forward per batch, so rows counts rows scored
                dedup_responses=dedup,
            ),
        )
    assert len(out[True]) == len(prompts)
    for a, b in zip(out[False], out[True]):
        assert a == pytest.approx(b, abs=1e-5)
    assert out[True][5] == out[True][6] == out[True][1]
    assert (rows[False], rows[True]) == (8, 5)


def test_update_settings_default_to_the_configs_defaults_and_map_a_config():
    import dataclasses

    from graft.config import AblationConfig, AlgoConfig, ExchangeConfig, OptimConfig, RolloutConfig

    mapped = UpdateSettings.from_config(AlgoConfig(), RolloutConfig(), OptimConfig())
    # loss_constant 0 means rollout.max_new_tokens, which the mapping fills in
    assert mapped.loss_constant == RolloutConfig().max_new_tokens
    assert dataclasses.replace(mapped, loss_constant=0) == UpdateSettings()
    changed = UpdateSettings.from_config(
        AlgoConfig(clip_high=0.5, loss_constant=7, dedup_responses=False),
        RolloutConfig(temperature=0.7),
        OptimConfig(grad_clip=2.0),
        ExchangeConfig(ablation=AblationConfig(peer_position="first", luffy_gamma=0.3)),
    )
    got = (changed.loss.clip_high, changed.loss_constant, changed.algo.dedup_responses,
           changed.temperature)  # fmt: skip
    assert got == (0.5, 7, False, 0.7)
    assert (changed.grad_clip, changed.peer_position, changed.loss.luffy_gamma) == (
        2.0, "first", 0.3
    )  # fmt: skip
