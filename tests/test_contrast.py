"""Groups without reward contrast: `keep`, `drop` and `resample` (DAPO dynamic sampling), by hand
on the pure functions and through the update's real loss."""

from __future__ import annotations

import pytest
import torch

from graft.config import AlgoConfig
from graft.models.modeling import score_sequences
from graft.tasks import extra_prompts, prompt_batch
from graft.training.contrast import Budget, has_contrast, settle, start
from graft.training.update import UpdateSettings, minibatch_backward
from graft.types import Problem, TrainGroup, TrainSequence


def _group(pid: str, advantages, *, lengths=None, peer=False, objective="pg") -> TrainGroup:
    lengths = lengths or [2] * len(advantages)
    seqs = tuple(
        TrainSequence(
            (2, 3), tuple(range(4, 4 + k)), (-1.0,) * k, a, is_peer=peer, objective=objective
        )
        for a, k in zip(advantages, lengths)
    )
    return TrainGroup(pid, seqs, is_peer=peer)


MIXED = _group("mixed", [0.7, -0.7])
ALL_PASS = _group("all_pass", [0.0, 0.0])
ALL_FAIL = _group("all_fail", [0.0, 0.0])
PEER = _group("peer", [1.2, -0.4], peer=True)
SGT = _group("sgt", [0.0, 0.0, 0.0], objective="sft")


def test_contrast_is_a_nonzero_advantage_or_a_supervised_row():
    assert [has_contrast(g) for g in (MIXED, ALL_PASS, ALL_FAIL, PEER, SGT)] == [
        True,
        False,
        False,
        True,
        True,
    ]


def test_keep_leaves_the_batch_as_it_is_and_drop_removes_exactly_the_flat_groups():
    batch = [ALL_PASS, MIXED, ALL_FAIL, PEER, SGT]
    state, kept = start(batch, Budget(mode="keep", want=5))
    assert kept == tuple(batch) and state.metrics() == {"contrast/fill_frac": 3 / 5}
    state, kept = start(batch, Budget(mode="drop", want=5))
    assert kept == (MIXED, PEER, SGT)
    assert state.metrics() == {
        "contrast/fill_frac": 3 / 5,
        "contrast/dropped_groups": 2.0,
        "contrast/refused_groups": 0.0,
    }
    # A prompt the exchange selected and refused every peer response of left the batch: dropped.
    state, kept = start(batch[1:], Budget(mode="drop", want=5), refused=1)
    assert kept == (MIXED, PEER, SGT)
    assert state.metrics()["contrast/dropped_groups"] == 2.0
    assert state.metrics()["contrast/refused_groups"] == 1.0
    with pytest.raises(ValueError, match="unknown zero_contrast mode 'dynamic'"):
        start(batch, Budget(mode="dynamic", want=5))


def _scored(model, groups):
    """The groups with their behavior log-probs equal to the model's (every ratio is 1)."""
    seqs = [q for g in groups for q in g.sequences]
    prompts, responses = [q.prompt_ids for q in seqs], [q.response_ids for q in seqs]
    old = iter(score_sequences(model, prompts, responses, pad_id=0))
    return [
        TrainGroup(
            g.problem_id,
            tuple(
                TrainSequence(q.prompt_ids, q.response_ids, next(old), q.advantage)
                for q in g.sequences
            ),
        )
        for g in groups
    ]


def test_drop_takes_the_flat_groups_out_of_the_loss_and_the_denominator(random_lm):
    """At ratio 1 the token-mean loss is -sum_j a_j |o_j| / sum_j |o_j|. Mixed responses of 2 and
    3 tokens (a = +1, -1) with two flat groups of 4 + 4 tokens each: keep divides by 21 tokens,
    drop by 5, so drop's loss and gradient are keep's times 21 / 5."""
    mixed = _group("m", [1.0, -1.0], lengths=[2, 3])
    flat = [_group("p", [0.0, 0.0], lengths=[4, 4]), _group("f", [0.0, 0.0], lengths=[4, 4])]
    batch = _scored(random_lm, [flat[0], mixed, flat[1]])
    out = {}
    for mode in ("keep", "drop"):
        _, kept = start(batch, Budget(mode=mode, want=3))
        random_lm.zero_grad(set_to_none=True)
        seqs = [q for g in kept for q in g.sequences]
        stats = minibatch_backward(
            random_lm, seqs, UpdateSettings(algo=AlgoConfig(micro_batch_size=3)), pad_id=0
        )
        grads = [p.grad.clone() for p in random_lm.parameters() if p.grad is not None]
        out[mode] = (stats, grads)
    keep, drop = out["keep"][0], out["drop"][0]
    assert keep["tokens"] == 21 and drop["tokens"] == 5
    assert keep["loss"] == pytest.approx(-(1.0 * 2 - 1.0 * 3) / 21, abs=1e-6)
    assert drop["loss"] == pytest.approx(-(1.0 * 2 - 1.0 * 3) / 5, abs=1e-6)
    for g_keep, g_drop in zip(out["keep"][1], out["drop"][1], strict=True):
        torch.testing.assert_close(g_keep * 21 / 5, g_drop, rtol=1e-4, atol=1e-7)


class Scripted:
    """A sampler that answers each round with the next scripted list of groups (cut to the
    prompts asked) and records what was asked."""

    def __init__(self, rounds):
        self.rounds, self.asked = {name: list(rs) for name, rs in rounds.items()}, []

    def __call__(self, rnd, wanted):
        self.asked.append((rnd, dict(wanted)))
        return {name: self.rounds[name].pop(0)[:k] for name, k in wanted.items()}


def _resample(**budget) -> Budget:
    return Budget(mode="resample", want=4, group_size=2, **budget)


def test_resample_fills_the_batch_in_the_expected_rounds():
    """Want 4, one mixed group of 4: round 1 asks for the 3 missing prompts and gets 1 with
    contrast, round 2 asks for 2 and gets 2. Two rounds, (3 + 2) x 2 extra responses, 3 + 2 flat
    groups dropped, the batch full: the step's own group first, then the rounds' in order."""
    g = [_group(f"x{i}", [0.5, -0.5]) for i in range(3)]
    sampler = Scripted({"a": [[ALL_FAIL, g[0], ALL_PASS], [g[1], g[2]], []]})
    batches, counts = settle(
        {"a": [ALL_PASS, MIXED, ALL_FAIL, ALL_FAIL]}, {"a": _resample(max_rounds=5)}, sampler
    )
    assert sampler.asked == [(1, {"a": 3}), (2, {"a": 2})]
    assert batches["a"] == [MIXED, g[0], g[1], g[2]]
    assert counts["a"] == {
        "contrast/fill_frac": 1.0,
        "contrast/dropped_groups": 5.0,
        "contrast/refused_groups": 0.0,
        "contrast/extra_rounds": 2.0,
        "contrast/extra_responses": 10.0,
    }


@pytest.mark.parametrize(
    ("budget", "asked", "fill", "responses"),
    [
        ({"max_rounds": 1}, [3], 2 / 4, 6),  # one round: 3 prompts, 1 with contrast
        ({"max_rounds": 5, "max_responses": 6}, [3], 2 / 4, 6),  # 6 responses: 3 prompts
        ({"max_rounds": 5, "max_responses": 4}, [2], 2 / 4, 4),  # cut to 2 prompts
        ({"max_rounds": 5, "max_responses": 9}, [3, 1], 3 / 4, 8),  # 1 more prompt fits
    ],
)
def test_resample_stops_at_the_budget_and_trains_on_what_it_has(budget, asked, fill, responses):
    g = [_group(f"x{i}", [0.5, -0.5]) for i in range(3)]
    script = {"a": [[ALL_FAIL, g[0], ALL_PASS], [g[1], g[2]]]}
    if asked[:1] == [2]:
        script = {"a": [[g[0], ALL_PASS]]}
    sampler = Scripted(script)
    batches, counts = settle(
        {"a": [MIXED, ALL_FAIL, ALL_FAIL, ALL_FAIL]}, {"a": _resample(**budget)}, sampler
    )
    assert [k["a"] for _, k in sampler.asked] == asked
    assert counts["a"]["contrast/fill_frac"] == fill
    assert counts["a"]["contrast/extra_responses"] == responses
    assert len(batches["a"]) == round(fill * 4)


def test_policies_that_resample_sample_each_round_together():
    """Two resampling policies share a call per round, each asking for what it misses; a `keep`
    policy is left alone; a round that gets fewer prompts than it asked (the step ran out of
    problems) ends that policy's rounds."""
    g = [_group(f"x{i}", [0.5, -0.5]) for i in range(4)]
    sampler = Scripted({"a": [[g[0], ALL_PASS], [g[1]]], "b": [[g[2], g[3], ALL_FAIL][:1]]})
    batches, counts = settle(
        {"a": [MIXED, MIXED, ALL_FAIL, ALL_PASS], "b": [MIXED] + [ALL_FAIL] * 3, "c": [ALL_FAIL]},
        {"a": _resample(max_rounds=3), "b": _resample(max_rounds=3), "c": Budget(want=1)},
        sampler,
    )
    assert sampler.asked == [(1, {"a": 2, "b": 3}), (2, {"a": 1})]
    assert counts["a"]["contrast/fill_frac"] == 1.0 and batches["a"][-2:] == [g[0], g[1]]
    assert counts["b"]["contrast/extra_rounds"] == 1.0  # got 1 of 3 prompts: no further rounds
    assert counts["b"]["contrast/fill_frac"] == 2 / 4
    assert batches["c"] == [ALL_FAIL] and counts["c"] == {"contrast/fill_frac": 0.0}


def test_extra_prompts_are_stateless_new_to_the_step_and_shared_by_policies():
    problems = tuple(Problem(f"{i}+1=", str(i + 1)) for i in range(40))
    main = {p.id for p in prompt_batch(problems, step=3, batch_size=8, seed=5)}
    rounds = [
        extra_prompts(problems, step=3, round=r, count=8, batch_size=8, seed=5) for r in (1, 2, 3)
    ]
    ids = [p.id for r in rounds for p in r]
    assert len(ids) == len(set(ids)) == 24 and not main & set(ids)
    again = extra_prompts(problems, step=3, round=2, count=8, batch_size=8, seed=5)
    assert again == rounds[1]  # a pure function of (seed, step, round): resume draws the same
    assert extra_prompts(problems, step=3, round=2, count=3, batch_size=8, seed=5) == rounds[1][:3]
    assert extra_prompts(problems, step=4, round=1, count=8, batch_size=8, seed=5) != rounds[0]
    # 40 problems, 8 in the step's batch: 32 for the extra rounds, then none
    assert len(extra_prompts(problems, step=3, round=4, count=8, batch_size=8, seed=5)) == 8
    assert extra_prompts(problems, step=3, round=5, count=8, batch_size=8, seed=5) == ()


def test_the_resample_forecast_by_hand():
    from graft.evidence.forecast import resample_need

    need = resample_need(0.5, prompts=2, n=4, max_rounds=1)
    assert need["responses_to_fill"] == 4 * 2 * 0.5 / 0.5
    assert need["responses"] == 4 * 2 * 0.5  # the places still empty after the step's batch
    assert need["fill"] == 1 - 0.5**2 and need["full"] == (1 - 0.5**2) ** 2
    # extra rounds until both places are filled: sum_r 1 - (1 - 0.5^(r+1))^2
    want = sum(1 - (1 - 0.5 ** (r + 1)) ** 2 for r in range(60))
    assert need["rounds_to_fill"] == pytest.approx(want)
    never = resample_need(0.0, prompts=2, n=4, max_rounds=3)
    assert (
        never["fill"] == 0 and never["responses"] == 24 and never["rounds_to_fill"] == float("inf")
    )


def test_the_resample_forecast_matches_what_settle_does():
    """`graft probe`'s forecast for dynamic sampling, against `settle` itself on batches where
    each fresh group has contrast with probability 0.3: mean extra responses, mean fill and the
    share of full batches within 3 rounds agree to within sampling error (4000 simulated steps)."""
    import random
    import statistics

    from graft.evidence.forecast import resample_need

    rng, p, prompts, n, rounds = random.Random(0), 0.3, 8, 4, 3

    def draw(k):
        return [MIXED if rng.random() < p else ALL_FAIL for _ in range(k)]

    def sampler(rnd, wanted):
        return {name: draw(k) for name, k in wanted.items()}

    budget = Budget("resample", want=prompts, group_size=n, max_rounds=rounds)
    seen = [settle({"a": draw(prompts)}, {"a": budget}, sampler)[1]["a"] for _ in range(4000)]
    responses = [c["contrast/extra_responses"] for c in seen]
    fills = [c["contrast/fill_frac"] for c in seen]
    need = resample_need(p, prompts=prompts, n=n, max_rounds=rounds)
    se = statistics.stdev(responses) / len(seen) ** 0.5
    assert abs(statistics.fmean(responses) - need["responses"]) < 4 * se
    assert statistics.fmean(fills) == pytest.approx(need["fill"], abs=0.01)
    assert statistics.fmean(f == 1.0 for f in fills) == pytest.approx(need["full"], abs=0.03)


@pytest.mark.parametrize("mode", ["drop", pytest.param("resample", marks=pytest.mark.slow)])
def test_every_prompt_sampled_is_kept_or_dropped_in_a_graft_run(tmp_path, mode):
    """A GRAFT run whose floor refuses most peer responses (delta 0.97), so the gate selects
    prompts whose peer group admits nothing and which leave the batch: per policy and step,
    kept + dropped = the prompts sampled (the step's own and the extra rounds'), the refused
    prompts among the dropped, as many as the exchange's selected minus grafted."""
    from pathlib import Path

    from graft.config import Config, load_config
    from graft.rundir import read_metrics
    from graft.trainer import train

    golden = Path(__file__).parent / "golden" / "models"
    prompts = 8
    sets = [
        f"run.out_dir={tmp_path}",
        "run.steps=3",
        "run.save_every=0",
        "run.progress=false",
        "run.backend=inprocess",
        "eval.every=0",
        f"rollout.prompts_per_step={prompts}",
        "rollout.group_size=4",
        "exchange.delta=0.97",
        f"models=[{{name: llama, path: '{golden / 'llama'}', zero_contrast: {{mode: {mode}}}}}, "
        f"{{name: qwen, path: '{golden / 'qwen'}', zero_contrast: {{mode: {mode}}}}}]",
    ]
    cfg = load_config(Config, Path(__file__).parents[1] / "configs" / "graft_tiny.yaml", sets)
    train(cfg)
    refused_seen = 0
    for r in read_metrics(tmp_path):
        if "m/llama/contrast/fill_frac" not in r:
            continue
        for me, peer in (("llama", "qwen"), ("qwen", "llama")):
            m = f"m/{me}/contrast/"
            kept = round(r[f"{m}fill_frac"] * prompts)
            extra = r.get(f"{m}extra_responses", 0.0) / 4
            assert kept + r[f"{m}dropped_groups"] == prompts + extra, (r["step"], me)
            x = f"x/{peer}->{me}/"
            assert r[f"{m}refused_groups"] == r[f"{x}selected"] - r[f"{x}prompts_grafted"]
            refused_seen += r[f"{m}refused_groups"]
    assert refused_seen > 0  # the run exercised what the identity is about
    # The store tells the extra rounds' rollouts from the step's own, and their round.
    from graft.store import TrajectoryStore

    rows = TrajectoryStore(str(tmp_path / "trajectories")).scan(columns=["model", "step", "round"])
    records = [r for r in read_metrics(tmp_path) if "m/llama/contrast/fill_frac" in r]
    resampled = 0
    for me in ("llama", "qwen"):
        mine = [
            (st, rd)
            for m, st, rd in zip(*(rows[c].to_pylist() for c in rows.column_names))
            if m == me
        ]
        for r in records:
            step = r["step"] - 1
            own = sum(1 for st, rd in mine if st == step and rd == 0)
            extra = sum(1 for st, rd in mine if st == step and rd > 0)
            assert own == prompts * 4
            assert extra == r.get(f"m/{me}/contrast/extra_responses", 0.0)
            rounds = {rd for st, rd in mine if st == step and rd > 0}
            assert rounds == set(range(1, int(r.get(f"m/{me}/contrast/extra_rounds", 0)) + 1))
            resampled += extra
    assert resampled > 0 or mode == "drop"
