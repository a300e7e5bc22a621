"""What a run costs: the meter's arithmetic, and every count of a tiny GRAFT run with dynamic
sampling against a hand count of the calls the policies answered."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch
from transformers import AutoModelForCausalLM

from graft.config import AlgoConfig, Config, load_config
from graft.rundir import read_metrics
from graft.sandbox import isolation_problem
from graft.trainer import Trainer
from graft.training.cost import CostLog, Meter, flop_estimate, last_cumulative, step_cost
from graft.training.update import UpdateSettings, train_on_batch
from graft.types import TrainGroup, TrainSequence

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "tests" / "golden" / "models"
if str(ROOT / "tests") not in sys.path:  # the verifier workers import plug-ins from it
    sys.path.insert(0, str(ROOT / "tests"))


def test_flops_are_2n_per_forward_token_and_6n_per_trained_token():
    assert flop_estimate(1000, forward_tokens=30, train_tokens=7) == 2 * 1000 * 30 + 6 * 1000 * 7
    before = {"responses": 2.0, "gen_tokens": 5.0, "prompt_tokens": 8.0, "forward_tokens": 1.0}
    before |= {"train_tokens": 0.0, "generate_cpu_s": 1.0, "params": 10.0}
    after = {"responses": 6.0, "gen_tokens": 15.0, "prompt_tokens": 24.0, "forward_tokens": 9.0}
    after |= {"train_tokens": 20.0, "generate_cpu_s": 1.5, "params": 10.0}
    cost = step_cost(before, after)
    assert cost["responses"] == 4 and cost["generate_cpu_s"] == 0.5 and "params" not in cost
    assert cost["flops"] == 2 * 10 * (16 + 10 + 8) + 6 * 10 * 20


def test_the_meter_counts_and_times_phases_once():
    meter = Meter("cpu", params=7)
    meter.add(gen_tokens=3, responses=1)
    with meter.phase("train"), meter.phase("score"):  # inside train: part of train
        sum(i * i for i in range(200_000))
    read = meter.read()
    assert read["gen_tokens"] == 3 and read["params"] == 7 and read["score_cpu_s"] == 0
    assert read["train_cpu_s"] > 0 and "train_gpu_s" not in read
    with pytest.raises(KeyError, match="unknown count 'tokens'"):
        meter.add(tokens=1)


def test_cumulative_cost_sums_steps_and_policies_and_continues_on_resume():
    log = CostLog({"a": "m/a/", "b": "m/b/"})
    one = log.metrics({"a": {"responses": 4.0}, "b": {"responses": 6.0}})
    assert one["m/a/cost/responses"] == 4 and one["cost/responses"] == 10
    two = log.metrics({"a": {"responses": 1.0}, "b": {"responses": 2.0}})
    assert two["cost/cum/responses"] == 13 and two["m/b/cost/cum/responses"] == 8
    resumed = CostLog({"a": "m/a/", "b": "m/b/"}, previous=last_cumulative([{"step": 1, **one}]))
    assert resumed.metrics({"a": {"responses": 1.0}, "b": {"responses": 2.0}}) == two
    alone = CostLog({"p": ""}).metrics({"p": {"responses": 3.0}})
    assert alone == {"cost/responses": 3.0, "cost/cum/responses": 3.0}


def test_the_kl_reference_forward_is_counted_as_forward_tokens(random_lm):
    seqs = (
        TrainSequence((2, 3, 4), (5, 6), (-1.0, -1.0), 1.0),
        TrainSequence((2, 3, 4), (7,), (-1.0,), 0.0),
    )
    optim = torch.optim.AdamW(random_lm.parameters(), lr=1e-3)
    for kl, trained, ref in ((0.0, 5, 0), (0.1, 9, 9)):  # KL off: the zero-advantage row skips
        stats = train_on_batch(
            random_lm,
            optim,
            [TrainGroup("g", seqs)],
            UpdateSettings(algo=AlgoConfig(minibatches=1, kl_coef=kl)),
            pad_id=0,
            ref_model=random_lm if kl else None,
        )
        assert (stats["cost/train_tokens"], stats["cost/ref_tokens"]) == (trained, ref)


class Calls:
    """What the in-process policies answered, step by step."""

    def __init__(self, trainer: Trainer) -> None:
        self.steps: list[dict] = []
        step = trainer.step

        def tracking_step(s):
            self.steps.append({n: {"gen": [], "imp": [], "train": []} for n in trainer.names})
            return step(s)

        trainer.step = tracking_step
        for name, policy in trainer.backend.policies.items():
            for method, key in (("generate", "gen"), ("import_responses", "imp")):
                real = getattr(policy, method)
                setattr(policy, method, self._recorder(real, name, key))
            real_train = policy.train

            def train(groups, *, seed=0, _real=real_train, _name=name):
                self.steps[-1][_name]["train"].append(list(groups))
                return _real(groups, seed=seed)

            policy.train = train

    def _recorder(self, real, name, key):
        def call(*args, **kwargs):
            out = real(*args, **kwargs)
            self.steps[-1][name][key].append(out)
            return out

        return call


def _hand_count(calls: dict, params: int) -> dict[str, float]:
    rollouts = [r for answer in calls["gen"] for r in answer]
    completions = [(r, c) for r in rollouts for c in r.completions_G]
    imported = [i for answer in calls["imp"] for i in answer if i.response_ids]
    (batch,) = calls["train"]
    seqs = [q for g in batch for q in g.sequences]
    count = {
        "responses": len(completions),
        "gen_tokens": sum(len(c.token_ids) for _, c in completions),
        "prompt_tokens": sum(len(r.prompt_ids) for r, _ in completions),
        # peer responses scored on import, then every sequence's old log-probs recomputed
        "forward_tokens": sum(len(i.prompt_ids) + len(i.response_ids) for i in imported)
        + sum(len(q.prompt_ids) + q.num_tokens for q in seqs),
        # the zero-advantage responses skip the forward and backward
        "train_tokens": sum(len(q.prompt_ids) + q.num_tokens for q in seqs if q.advantage != 0),
    }
    forward = count["prompt_tokens"] + count["gen_tokens"] + count["forward_tokens"]
    count["flops"] = 2 * params * forward + 6 * params * count["train_tokens"]
    return count


def test_a_tiny_graft_run_with_resampling_counts_what_it_ran(tmp_path):
    """Two steps of a GRAFT pair (different tokenizers) where llama resamples its flat groups:
    every count of every step equals a hand count of the calls its policies answered, the
    cumulative counts are the sums, llama's extra rollouts are in the store, and the cost reaches
    summary.json and the store's run metadata."""
    overrides = [
        "run.progress=false",
        "run.steps=2",
        "run.save_every=0",
        "run.backend=inprocess",
        "rollout.prompts_per_step=8",
        "rollout.group_size=4",
        "algo.micro_batch_size=16",
        "algo.recompute_old_logprobs=true",
        "eval.every=0",
        f"models=[{{name: llama, path: '{MODELS / 'llama'}', zero_contrast: {{mode: resample}}}}, "
        f"{{name: qwen, path: '{MODELS / 'qwen'}'}}]",
        f"run.out_dir={tmp_path / 'run'}",
    ]
    cfg = load_config(Config, ROOT / "configs" / "graft_tiny.yaml", overrides)
    trainer = Trainer(cfg)
    calls = Calls(trainer)
    try:
        trainer.run(tmp_path / "run")
    finally:
        trainer.close()
    params = {
        name: sum(
            p.numel() for p in AutoModelForCausalLM.from_pretrained(MODELS / name).parameters()
        )
        for name in ("llama", "qwen")
    }
    records = read_metrics(tmp_path / "run")
    cum: dict[str, float] = {}
    extra_seen = 0.0
    for record, step_calls in zip(records, calls.steps, strict=True):
        run_total: dict[str, float] = {}
        for name in ("llama", "qwen"):
            want = _hand_count(step_calls[name], params[name])
            got = {k: record[f"m/{name}/cost/{k}"] for k in want}
            assert got == want, (record["step"], name)
            for k, v in want.items():
                run_total[k] = run_total.get(k, 0) + v
                cum[f"m/{name}/cost/cum/{k}"] = cum.get(f"m/{name}/cost/cum/{k}", 0) + v
        assert {k: record[f"cost/{k}"] for k in run_total} == run_total
        assert all(record[k] == v for k, v in cum.items())
        # llama's extra rounds: every generate call after the step's first
        extra = step_calls["llama"]["gen"][1:]
        responses = sum(len(r.completions_G) for answer in extra for r in answer)
        assert record["m/llama/contrast/extra_rounds"] == len(extra)
        assert record["m/llama/contrast/extra_responses"] == responses
        batch = step_calls["llama"]["train"][0]
        assert record["m/llama/contrast/fill_frac"] == len(batch) / 8
        assert all(any(q.advantage != 0 for q in g.sequences) for g in batch)
        assert len(step_calls["qwen"]["gen"]) == 1  # qwen keeps its flat groups
        assert "m/qwen/contrast/extra_rounds" not in record
        shard = next(
            (tmp_path / "run/trajectories").rglob(f"model=llama/*{record['step'] - 1:08d}*")
        )
        assert pq.read_table(shard).num_rows == (8 + responses // 4) * 4
        extra_seen += len(extra)
    assert extra_seen > 0, "the run never resampled: it tests nothing about extra rounds"
    summary = json.loads((tmp_path / "run/summary.json").read_text())
    assert summary["cost/cum/flops"] == cum["m/llama/cost/cum/flops"] + cum["m/qwen/cost/cum/flops"]
    (meta,) = (tmp_path / "run/trajectories/runs").glob("*.json")
    assert json.loads(meta.read_text())["cost"]["cost/cum/flops"] == summary["cost/cum/flops"]


@pytest.mark.skipif(bool(isolation_problem()), reason=isolation_problem() or "ok")
def test_verification_cpu_is_counted_in_the_cost_of_the_step(tmp_path):
    """A verifier that spends a known amount of CPU (in itself, a child process and a sandboxed
    program) on every response: the step's `cost/verify_cpu_s` is at least that much, and the
    cumulative count sums the steps."""
    import cpu_verifier

    overrides = [
        "run.progress=false",
        "run.steps=2",
        "run.save_every=0",
        "run.backend=inprocess",
        "rollout.prompts_per_step=2",
        "rollout.group_size=2",
        "rollout.max_new_tokens=4",
        "eval.every=0",
        "verify.workers=2",
        "verify.verifier=cpu_verifier:burn",
        f"models.0.path={MODELS / 'llama'}",
        f"run.out_dir={tmp_path / 'run'}",
    ]
    cfg = load_config(Config, ROOT / "configs" / "grpo_tiny.yaml", overrides)
    trainer = Trainer(cfg)
    try:
        trainer.run(tmp_path / "run")
    finally:
        trainer.close()
    records = read_metrics(tmp_path / "run")
    spent = [r["cost/verify_cpu_s"] for r in records]
    assert all(s >= 4 * cpu_verifier.KNOWN_S for s in spent), spent  # 4 responses a step
    assert records[-1]["cost/cum/verify_cpu_s"] == pytest.approx(sum(spent))
    assert "cost/generate_cpu_s" in records[-1]  # every earlier key still there


def test_a_steps_verification_cpu_is_attributed_to_each_policy_by_hand():
    """Verifying a's rollouts takes 2 CPU seconds of the pool, b's 1; the pool spends 3 more on
    a stored peer's responses, shared evenly: a 2 + 1.5, b 1 + 1.5. Each policy's tokens and
    FLOPs are its own meter's change over the step."""
    from graft.training.cost import StepCost, flop_estimate

    pool = [10.0]
    meters = {n: {"prompt_tokens": 0.0, "gen_tokens": 0.0, "forward_tokens": 0.0,
                  "train_tokens": 0.0, "params": 100.0} for n in ("a", "b")}  # fmt: skip
    spend = StepCost(("a", "b"), lambda: {n: dict(m) for n, m in meters.items()}, lambda: pool[0])
    spend.start()
    spend.new_rollout()
    cpu = pool[0]
    pool[0] += 2.0
    spend.verified("a", 0.0, cpu)
    cpu = pool[0]
    pool[0] += 1.0
    spend.verified("b", 0.0, cpu)
    pool[0] += 3.0
    meters["a"]["gen_tokens"] += 40.0
    meters["b"]["train_tokens"] += 10.0
    got = spend.since_start()
    assert got["a"]["verify_cpu_s"] == 3.5 and got["b"]["verify_cpu_s"] == 2.5
    assert got["a"]["gen_tokens"] == 40.0 and got["b"]["gen_tokens"] == 0.0
    assert got["b"]["flops"] == flop_estimate(100.0, forward_tokens=0.0, train_tokens=10.0)
    assert len(spend.spans) == 2
    spend.new_rollout()
    assert spend.spans == [] and spend.busy_s == 0.0
