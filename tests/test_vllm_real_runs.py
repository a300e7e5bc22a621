"""Training runs whose rollouts come from real vLLM 0.30 (`make test-vllm`): the demo's code pair
with both policies on vLLM (processes backend), its counts recomputed from the store, and a kill
-9 and resume; a sharded policy's engine (K = 2, on rank 0); a Ray run with vLLM engines.

Each test names the fault it exists to catch; each was seen to fail with that fault planted.
"""

from __future__ import annotations

import gc
import json
import signal
import sys
from collections import defaultdict
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from graft.cli import main
from graft.rundir import is_timing, read_metrics
from graft.store import TrajectoryStore
from test_faults import signal_when_ready
from vllm_helpers import ROOT, _policy, _train_step, _worst_gap, engine_tiny_paths

pytestmark = pytest.mark.vllm
pytest.importorskip("vllm")

CODE_PAIR = ROOT / "src" / "graft" / "configs" / "graft_code.yaml"
"""The demo's pair: tiny:llama-char-code-list and tiny:qwen2-bpe-code-sum (shipped presets)."""
SMALL = [
    "run.progress=false",
    "eval.every=0",
    "rollout.engine=vllm",
    "rollout.vllm_enforce_eager=true",
    "rollout.prompts_per_step=8",
    "rollout.group_size=4",
    "verify.workers=1",
    # Every response sent is admitted (none under a weight floor, none dropped as too long in the
    # receiver's tokens): the admissions count by hand.
    "exchange.delta=0.0",
    "exchange.too_long=truncate",
    "run.save_every=1",
]
GROUP = 4
KILLABLE = """
import pathlib, sys, time
import graft.trainer as trainer

settle = trainer.Trainer.settle

def waiting_settle(self, step, batches):
    if step == 2:  # mid-step 3: rolled out with vLLM and exchanged, not yet trained
        pathlib.Path(sys.argv[1]).write_text("ready")
        time.sleep(600)
    return settle(self, step, batches)

trainer.Trainer.settle = waiting_settle
from graft.cli import main
sys.exit(main(sys.argv[2:]))
"""


def _sets(*values: str) -> list[str]:
    return [a for v in values for a in ("--set", v)]


def _counts(run: Path) -> list[dict]:
    return [{k: v for k, v in r.items() if not is_timing(k)} for r in read_metrics(run)]


def _weights(run: Path, step: int, policy: str) -> dict[str, torch.Tensor]:
    folder = run / "checkpoints" / f"step_{step:06d}" / policy
    return load_file(str(folder / "model.safetensors"))


@pytest.fixture(scope="module")
def code_pair_run(tmp_path_factory):
    """Three GRAFT steps of the code pair, both policies sampling with vLLM."""
    out = tmp_path_factory.mktemp("vllm_code_pair")
    args = ["train", str(CODE_PAIR), "--out", str(out), *_sets(*SMALL, "run.steps=3")]
    assert main([*args, "--set", "run.backend=processes"]) == 0
    return out


def _by_hand(run: Path) -> dict[int, dict[str, float]]:
    """Per step (as logged: the store's step + 1), from the store alone: each policy's mean
    reward, and for each direction the gate's candidates (the receiver failed its whole group,
    the peer's group is mixed), the groups replaced (the receiver's rows marked so) and the
    responses admitted."""
    rows = TrajectoryStore(str(run / "trajectories")).scan().to_pylist()
    groups: dict[tuple[int, str], dict[str, dict]] = defaultdict(dict)
    rewards: dict[tuple[int, str], list[float]] = defaultdict(list)
    for r in rows:
        groups[(r["step"], r["model"])][r["prompt_id"]] = r
        rewards[(r["step"], r["model"])].append(r["reward"])
    out: dict[int, dict[str, float]] = defaultdict(dict)
    for (step, model), values in rewards.items():
        out[step + 1][f"m/{model}/reward/mean"] = sum(values) / len(values)
    for (step, receiver), own in groups.items():
        for source in {m for s, m in groups if s == step} - {receiver}:
            peer = groups[(step, source)]
            gate = [p for p, r in own.items() if r["group_successes"] == 0]
            gate = [p for p in gate if 0 < peer[p]["group_successes"] < GROUP]
            key = f"x/{source}->{receiver}"
            replaced = sum(r["replaced"] for r in own.values())  # groups taken from the peer
            out[step + 1][f"{key}/candidates"] = len(gate)
            out[step + 1][f"{key}/selected"] = replaced  # balancing may take fewer than offered
            out[step + 1][f"{key}/admitted"] = GROUP * replaced  # every response (delta 0)
    return out


def test_the_code_pair_trains_on_vllm_and_its_counts_are_the_stores(code_pair_run):
    """Gate counts, admissions and rewards recomputed from the store equal the metrics, step by
    step; every stored row follows the store's endings. Planted: the gate taking a peer's
    all-correct group for a mixed one fails it."""
    records = read_metrics(code_pair_run)
    assert [r["step"] for r in records] == [1, 2, 3]
    hand = _by_hand(code_pair_run)
    grafted = 0
    for record in records:
        want = hand[record["step"]]
        for name, value in want.items():
            assert record[name] == pytest.approx(value, abs=1e-9), (record["step"], name)
        grafted += sum(v for k, v in want.items() if k.endswith("/selected"))
    assert grafted > 0  # the exchange happened
    stops = defaultdict(set)  # each model's stop token: the last of every `stop` row, alone
    for row in TrajectoryStore(str(code_pair_run / "trajectories")).scan().to_pylist():
        ids = row["token_ids"]
        assert len(ids) == len(row["logprobs"]) <= row["max_new_tokens"]
        if row["finish_reason"] == "length":
            assert len(ids) == row["max_new_tokens"]
        else:
            assert row["finish_reason"] == "stop" and ids[-1] not in ids[:-1]
            stops[row["model"]].add(ids[-1])
    assert [len(v) for v in stops.values()] == [1, 1]


def test_a_vllm_run_killed_mid_step_resumes_to_bit_identical_weights(code_pair_run, tmp_path):
    """kill -9 while step 3 is between rollouts and update, then `--resume`: the weights, every
    count and the store's rollouts equal the run never killed (vLLM's samples are a pure function
    of the weights, the prompt and the row's seed). Planted: requests without their row's seed
    (vLLM's own generator then runs on from the engine's start) fails it."""
    run, ready = tmp_path / "killed", tmp_path / "ready"
    sets = _sets(*SMALL, "run.steps=3", "run.backend=processes")
    command = [sys.executable, "-c", KILLABLE, str(ready), "train", str(CODE_PAIR)]
    proc, err = signal_when_ready([*command, "--out", str(run), *sets], ready, signal.SIGKILL)
    assert proc.returncode == -signal.SIGKILL, err
    assert main(["train", "--resume", str(run)]) == 0
    for policy in ("llama", "qwen"):
        a, b = _weights(code_pair_run, 3, policy), _weights(run, 3, policy)
        assert all(torch.equal(a[k], b[k]) for k in a), policy
    assert _counts(run) == _counts(code_pair_run)

    def rollouts(root: Path) -> list:
        table = TrajectoryStore(str(root / "trajectories")).scan()
        columns = ("step", "model", "prompt_id", "member", "token_ids", "logprobs")
        return sorted(zip(*(table[c].to_pylist() for c in columns)))

    assert rollouts(run) == rollouts(code_pair_run)


@pytest.mark.timeout(300)
def test_a_sharded_policys_engine_on_rank_0_samples_the_shards_weights():
    """`shards: 2`: rank 0's engine runs in processes of its own (rank 0's torch.distributed
    group is its shards'), fed from the shards a layer at a time. Its rollouts equal the unsharded
    policy's, and its log-probs equal the sharded policy's own scoring before and after an
    update. Planted: the engine built in rank 0's process (vLLM then takes the shards' group)
    fails it at start-up."""
    path = engine_tiny_paths()["llama"]
    one = _policy(path, vllm_enforce_eager=True)
    try:
        _, want = _worst_gap(one, seed=3)
    finally:
        one.close()
        gc.collect()
    policy = _policy(path, shards=2, vllm_enforce_eager=True)
    try:
        assert policy.engine.own_process
        gap, rollouts = _worst_gap(policy, seed=3)
        assert gap <= 1e-5, gap
        tokens = [[c.token_ids for c in r.completions_G] for r in rollouts]
        assert tokens == [[c.token_ids for c in r.completions_G] for r in want]
        stats = _train_step(policy, rollouts)
        assert abs(stats["loss/ratio_mean"] - 1.0) < 1e-4
        gap, _ = _worst_gap(policy, seed=4)
        assert gap <= 1e-5, gap
    finally:
        policy.close()


@pytest.mark.timeout(400)
def test_a_sharded_run_and_a_ray_run_with_vllm_engines_complete(tmp_path):
    """graft train with llama on 2 ranks (its engine on rank 0) and qwen beside it; then the pair
    as Ray actors, each with its engine. Both finish their steps with on-policy first ratios."""
    ray = pytest.importorskip("ray")
    sharded = tmp_path / "sharded"
    base = ["train", str(CODE_PAIR), *_sets(*SMALL, "run.steps=2", "run.save_every=0")]
    shard = _sets("models.0.shards=2", "algo.micro_batch_size=8")
    assert main([*base, "--out", str(sharded), *shard]) == 0
    on_ray = tmp_path / "ray"
    ray.init(num_cpus=3, include_dashboard=False, log_to_driver=False)
    try:
        assert main([*base, "--out", str(on_ray), "--set", "run.backend=ray"]) == 0
        workers = json.loads((on_ray / "workers.json").read_text())
        assert set(workers) == {"llama", "qwen"}
    finally:
        ray.shutdown()
    for run in (sharded, on_ray):
        records = read_metrics(run)
        assert [r["step"] for r in records] == [1, 2]
        for name in ("llama", "qwen"):
            assert 0.5 < records[0][f"m/{name}/loss/ratio_mean"] < 1.5
