"""GRAFT through the real call path with tiny models of different architectures and tokenizers."""

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from graft.backends.inprocess import InProcessBackend
from graft.cli import main
from graft.config import (
    AlgoConfig,
    ArithmeticConfig,
    ExchangeConfig,
    ModelConfig,
    OptimConfig,
    RolloutConfig,
)
from graft.exchange import (
    AdmissionMonitor,
    DirectionResult,
    OnlinePeers,
    Selection,
    compatibility,
    exchange,
    graft_direction,
    own_batches,
    transfer_requests,
)
from graft.groups import make_groups
from graft.rollout import SamplingParams
from graft.rundir import read_metrics
from graft.tasks.arithmetic import ArithmeticTask
from graft.training.policy import PolicySpec
from graft.verify.math.grader import verify_final_number

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "graft_tiny.yaml"
PROBLEMS = ArithmeticTask(ArithmeticConfig(num_train=64, num_test=0)).train_problems()[:16]


def _backend(*paths, names=("a", "b"), lr=1e-4):
    specs = [
        PolicySpec(
            model=ModelConfig(name=n, path=p, optim=OptimConfig(lr=lr)),
            rollout=RolloutConfig(prompts_per_step=16, group_size=4, max_new_tokens=8),
            algo=AlgoConfig(minibatches=2, micro_batch_size=32),
            seed=0,
            index=i,
        )
        for i, (n, p) in enumerate(zip(names, paths))
    ]
    return InProcessBackend(specs)


def _groups(backend, seed=1):
    rollouts = backend.generate(
        PROBLEMS,
        n=4,
        params=SamplingParams(8),
        seeds={n: seed + i for i, n in enumerate(backend.names)},
    )
    return {
        name: make_groups(
            rs, [[verify_final_number(c.text, r.problem.gold) for c in r.completions_G] for r in rs]
        )
        for name, rs in rollouts.items()
    }


def test_self_transfer_gives_s_one_and_w_one():
    backend = _backend("tiny:llama-char-add", "tiny:llama-char-add")
    groups = _groups(backend)
    sel = Selection("a", "b", candidates=(), selected=tuple(range(len(PROBLEMS))))
    reqs = transfer_requests(sel, groups["a"])
    imported = backend.import_responses({"b": reqs}, too_long="drop")["b"]
    for req, imp in zip(reqs, imported):
        source = groups["a"][req.prompt_index].rollout.completions_G[req.member]
        assert imp.response_ids == source.token_ids  # same tokenizer: same tokens, EOS included
        s = compatibility(source, imp, mode="paper")
        assert s == pytest.approx(1.0, abs=1e-5)
    result = graft_direction(sel, groups["b"], groups["a"], reqs, imported, ExchangeConfig())
    assert result.metrics["admitted"] == len(reqs) and result.metrics["w_mean"] > 1 - 1e-5


def test_cross_tokenizer_retokenization_round_trips():
    backend = _backend("tiny:llama-char-add", "tiny:qwen2-bpe-add")
    groups = _groups(backend)
    sel = Selection("a", "b", candidates=(), selected=tuple(range(len(PROBLEMS))))
    reqs = transfer_requests(sel, groups["a"])
    imported = backend.import_responses({"b": reqs}, too_long="drop")["b"]
    qwen = backend.policies["b"]
    eos = qwen.tokenizer.eos_token_id
    for req, imp in zip(reqs, imported):
        assert imp.roundtrip_ok
        if imp.drop:
            assert imp.drop == "too_long"
            continue
        body = imp.response_ids[:-1] if req.stopped else imp.response_ids
        assert qwen.decode(body) == req.text
        assert (imp.response_ids[-1] == eos) == req.stopped
        assert imp.prompt_ids == qwen.prompt_ids(PROBLEMS[req.prompt_index].prompt)
        assert len(imp.logprobs) == len(imp.response_ids) and all(lp <= 0 for lp in imp.logprobs)
        # the receiver's old log-probs are its own forward pass on its own tokens (scored alone
        # here, in a batch of many prompts there: equal up to float rounding)
        assert list(imp.logprobs) == pytest.approx(
            list(qwen.score([imp.prompt_ids], [imp.response_ids])[0]), abs=1e-5
        )


def test_no_candidates_means_the_update_is_bit_identical_to_grpo():
    exchanged = _backend("tiny:llama-char-add", "tiny:qwen2-bpe-add")
    plain = _backend("tiny:llama-char-add", "tiny:qwen2-bpe-add")
    groups = _groups(exchanged)
    # keep only prompts where nobody failed everything: the gate cannot fire
    keep = [i for i in range(len(PROBLEMS)) if not any(g[i].all_fail for g in groups.values())]
    assert keep, "need some prompts without all-fail groups"
    groups = {n: [g[i] for i in keep] for n, g in groups.items()}
    outcome = exchange(groups, OnlinePeers(), exchanged, ExchangeConfig(), seed=0)
    assert outcome.batches == own_batches(groups)
    assert all(v == 0 for k, v in outcome.metrics.items() if k.endswith("/selected"))
    seeds = {"a": 3, "b": 4}
    exchanged.train(outcome.batches, seeds=seeds)
    plain.train(own_batches(groups), seeds=seeds)
    for name in ("a", "b"):
        for p, q in zip(
            exchanged.policies[name].model.parameters(), plain.policies[name].model.parameters()
        ):
            assert torch.equal(p, q)


def test_exchange_off_equals_each_policy_trained_alone(tmp_path):
    common = [
        "run.steps=3",
        "run.progress=false",
        "run.threads=1",
        "rollout.prompts_per_step=8",
        "rollout.group_size=4",
        "algo.minibatches=2",
        "eval.every=0",
        "verify.workers=1",
    ]
    pair = tmp_path / "pair"
    args = ["train", str(CONFIG), "--out", str(pair)]
    for a in [*common, "exchange.enabled=false"]:
        args += ["--set", a]
    assert main(args) == 0
    for i, name in enumerate(("llama", "qwen")):
        solo = tmp_path / name
        sets = [
            f"models.0.name={name}",
            f"models.0.path=tiny:{'llama-char-add' if i == 0 else 'qwen2-bpe-add'}",
            "models.0.optim.lr=2e-5",
            "rollout.max_new_tokens=8",
            "algo.micro_batch_size=64",
            *common,
        ]
        args = ["train", "--out", str(solo)]
        for a in sets:
            args += ["--set", a]
        assert main(args) == 0
        ckpt = "checkpoints/step_000003"
        a = load_file(str(pair / ckpt / name / "model.safetensors"))
        b = load_file(str(solo / ckpt / name / "model.safetensors"))
        assert all(torch.equal(a[k], b[k]) for k in a)
        solo_rewards = [r["reward/mean"] for r in read_metrics(solo)]
        pair_rewards = [r[f"m/{name}/reward/mean"] for r in read_metrics(pair)]
        assert solo_rewards == pair_rewards


def test_graft_run_through_the_cli_writes_exchange_metrics(tmp_path):
    run_dir = tmp_path / "graft"
    args = ["train", str(CONFIG), "--out", str(run_dir)]
    for a in [
        "run.steps=4",
        "run.progress=false",
        "eval.every=4",
        "eval.num_problems=20",
        "exchange.delta=0.5",
    ]:
        args += ["--set", a]
    assert main(args) == 0
    records = read_metrics(run_dir)
    last = records[-1]
    for direction in ("llama->qwen", "qwen->llama"):
        for key in (
            "candidates",
            "selected",
            "prompts_grafted",
            "responses_sent",
            "admitted",
            "dropped_weight",
            "dropped_too_long",
            "dropped_empty",
            "receiver_all_fail_frac",
            "peer_solved_frac",
            "confidence_gap",
            "roundtrip_mismatch",
        ):
            assert f"x/{direction}/{key}" in last, (direction, key)
    for name in ("llama", "qwen"):
        assert f"m/{name}/reward/mean" in last and f"m/{name}/eval/test/avg@4" in last
        assert f"m/{name}/loss/peer_token_frac" in last
    admitted = sum(
        r.get(f"x/{d}/admitted", 0) for r in records for d in ("llama->qwen", "qwen->llama")
    )
    assert admitted > 0
    peer_steps = [
        r
        for r in records
        if r.get("m/qwen/loss/peer_token_frac", 0) > 0
        or r.get("m/llama/loss/peer_token_frac", 0) > 0
    ]
    assert peer_steps and all(
        "m/llama/loss/peer_clip_frac" in r or "m/qwen/loss/peer_clip_frac" in r for r in peer_steps
    )
    assert (run_dir / "checkpoints" / "step_000004" / "llama" / "model.safetensors").is_file()
    assert (run_dir / "checkpoints" / "step_000004" / "qwen" / "model.safetensors").is_file()


def test_admission_monitor_warns_after_a_streak():
    monitor = AdmissionMonitor(warn_after=3)
    empty = {("a", "b"): DirectionResult({}, {}, sent=8, admitted=0)}
    assert monitor.update(empty) == [] and monitor.update(empty) == []
    messages = monitor.update(empty)
    assert len(messages) == 1 and "a->b" in messages[0]
    assert monitor.update({("a", "b"): DirectionResult({}, {}, sent=8, admitted=1)}) == []
    assert monitor.streak["x/a->b"] == 0
