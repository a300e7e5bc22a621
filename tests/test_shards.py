"""FSDP2 sharding of one policy's update (graft.training.shards): two ranks on CPU with gloo give
the weights one rank gives after three steps on the same training batches, to 2e-6 relative (per
tensor, in norm). That is the noise of float addition order: cutting one rank's minibatches into
other micro-batches moves the same weights by 5e-7 here, two ranks by 7e-7."""

from __future__ import annotations

import json
import random

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from conftest import random_llama
from graft.config import AlgoConfig, OptimConfig, RolloutConfig
from graft.models.modeling import score_sequences
from graft.training.shards import (
    UNSHARDED,
    ShardRank,
    full_state_dict,
    init_shard_group,
    my_chunks,
    shard_model,
    sum_across_ranks,
)
from graft.training.update import UpdateSettings, train_on_batch
from graft.types import TrainGroup, TrainSequence

STEPS = 3
REL_TOL = 2e-6


def _model():
    return random_llama(vocab=40, layers=3)


def _batches(model) -> list[list[TrainGroup]]:
    """Three steps' batches: 6 prompts x 4 responses of varied lengths, with their behavior
    log-probs under the initial model, and advantages of both signs (some exactly 0)."""
    rng = random.Random(0)
    out = []
    for step in range(STEPS):
        groups = []
        for p in range(6):
            prompt = tuple(rng.randrange(2, 40) for _ in range(rng.randint(3, 6)))
            lengths = [rng.randint(2, 9) for _ in range(4)]
            responses = [tuple(rng.randrange(2, 40) for _ in range(n)) for n in lengths]
            old = score_sequences(model, [prompt] * 4, responses, pad_id=0)
            advantages = [rng.choice((-1.0, -0.5, 0.0, 0.5, 1.0)) for _ in range(4)]
            seqs = tuple(
                TrainSequence(prompt, r, lp, a) for r, lp, a in zip(responses, old, advantages)
            )
            groups.append(TrainGroup(f"s{step}p{p}", seqs))
        out.append(groups)
    return out


def _settings() -> UpdateSettings:
    algo = AlgoConfig(micro_batch_size=5, minibatches=2)
    return UpdateSettings.from_config(algo, RolloutConfig(max_new_tokens=16), OptimConfig(lr=1e-3))


def _train(model, shard: ShardRank) -> list[dict[str, float]]:
    batches = _batches(model)  # before sharding: the same on every rank
    if shard.sharded:
        shard_model(model)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    return [
        train_on_batch(model, opt, groups, _settings(), pad_id=0, seed=i, shard=shard)
        for i, groups in enumerate(batches)
    ]


def _rank(rank: int, world: int, init: str, out: str) -> None:
    torch.set_num_threads(1)
    shard = init_shard_group(rank, world, init_method=init, timeout_s=120)
    try:
        model = _model()
        stats = _train(model, shard)
        state = full_state_dict(model)
        if rank == 0:
            norms = json.dumps([s["grad_norm"] for s in stats])
            save_file(state, out, metadata={"grad_norm": norms})
        dist.barrier()  # leave together: a rank tearing down gloo alone can abort at exit
    finally:
        dist.destroy_process_group()


def test_my_chunks_pads_the_ranks_with_fewer_micro_batches():
    chunks = [[0, 1], [2, 3], [4, 5]]
    assert my_chunks(chunks, UNSHARDED) == chunks
    assert my_chunks(chunks, ShardRank(0, 2)) == [[0, 1], [4, 5]]
    assert my_chunks(chunks, ShardRank(1, 2)) == [[2, 3], None]
    assert sum_across_ranks({"loss": 1.5}, UNSHARDED) == {"loss": 1.5}


@pytest.mark.timeout(300)
def test_two_ranks_give_the_weights_of_one(tmp_path):
    torch.manual_seed(0)
    reference = _model()
    ref_stats = _train(reference, UNSHARDED)
    want = {k: v.detach().clone() for k, v in reference.state_dict().items()}

    out = tmp_path / "sharded.safetensors"
    init = f"file://{tmp_path / 'rendezvous'}"
    mp.spawn(_rank, args=(2, init, str(out)), nprocs=2, join=True)
    got = load_file(str(out))

    assert got.keys() == want.keys()
    moved = 0.0
    start = _model().state_dict()
    worst = {}
    for key in want:
        worst[key] = ((got[key] - want[key]).norm() / want[key].norm()).item()
        moved = max(moved, (want[key] - start[key]).abs().max().item())
    assert max(worst.values()) <= REL_TOL, worst
    with safe_open(str(out), "pt") as f:
        norms = json.loads(f.metadata()["grad_norm"])
    want_norms = [s["grad_norm"] for s in ref_stats]
    assert norms == pytest.approx(want_norms, rel=1e-5)  # clipping saw the same global norm
    assert moved > 1e-3  # the three steps moved the weights, or equality proves nothing


# ------------------------------------------------------- a sharded policy in a training run

RUN = [
    "run.steps=3",
    "run.save_every=1",
    "run.backend=processes",
    "run.progress=false",
    "eval.every=0",
    "rollout.prompts_per_step=8",
    "rollout.group_size=4",
    "algo.micro_batch_size=4",  # several micro-batches per minibatch: every rank trains
]


def _weights(run_dir, step=3):
    return load_file(str(run_dir / f"checkpoints/step_{step:06d}/llama/model.safetensors"))


def _relative(a, b) -> float:
    return max(((a[k] - b[k]).norm() / b[k].norm()).item() for k in b)


@pytest.fixture(scope="module")
def one_and_two(tmp_path_factory):
    """grpo_tiny for 3 steps unsharded ("one") and over 2 ranks ("two"), a checkpoint a step."""
    from graft.cli import main

    root = tmp_path_factory.mktemp("shards")
    for name, shards in (("one", 1), ("two", 2)):
        assert main(_train_args(root / name, f"models.0.shards={shards}")) == 0
    return root


@pytest.mark.timeout(600)
def test_a_sharded_policy_trains_and_checkpoints_as_one_rank(one_and_two):
    """`models.0.shards: 2` through `graft train` (worker-process backend, gloo): the same
    rewards and, after 3 GRPO steps, the weights of `shards: 1` to 1e-6; a checkpoint with the
    consolidated model, which transformers loads as it is (at any K, or none), and one AdamW
    file per rank. (Resume, bit for bit, is in the slow kill tests below.)"""
    from transformers import AutoModelForCausalLM

    from graft.rundir import read_metrics, verify_checkpoint

    tmp_path = one_and_two
    one, two = _weights(tmp_path / "one"), _weights(tmp_path / "two")
    assert _relative(two, one) <= 1e-6
    rewards = [[r.get("reward/mean") for r in read_metrics(tmp_path / d)] for d in ("one", "two")]
    assert rewards[0] == rewards[1]
    assert [r["shard/idle_rank_frac"] for r in read_metrics(tmp_path / "two")] == [0.0] * 3
    checkpoint = tmp_path / "two" / "checkpoints" / "step_000003"
    verify_checkpoint(checkpoint)
    files = sorted(p.name for p in (checkpoint / "llama" / "optimizer").iterdir())
    assert files == [".metadata", "__0_0.distcp", "__1_0.distcp"]
    state = json.loads((checkpoint / "llama" / "policy_state.json").read_text())
    assert state == {"num_updates": 6, "shards": 2}
    loaded = AutoModelForCausalLM.from_pretrained(checkpoint / "llama").state_dict()
    assert all(torch.equal(loaded[k], two[k]) for k in two)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_run_resumes_at_another_shard_count(one_and_two, tmp_path):
    """A checkpoint written at K = 2 resumes unsharded and one written unsharded resumes at
    K = 2: step 3 then lands on the uninterrupted runs' weights to 1e-6 (float addition order:
    the K = 1 and K = 2 runs differ by as much). The AdamW state itself moves exactly: read
    unsharded from the K = 2 files, it equals what those files hold, bit for bit."""
    import shutil

    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
    from transformers import AutoModelForCausalLM

    from graft.cli import main
    from graft.training.optim_state import by_name, load_sharded_into_unsharded

    runs = one_and_two
    want = {"one": _weights(runs / "one"), "two": _weights(runs / "two")}
    for source, target in (("two", 1), ("one", 2)):
        out = tmp_path / f"{source}_to_{target}"
        shutil.copytree(runs / source, out)
        shutil.rmtree(out / "checkpoints" / "step_000003")  # resume from step 2
        resume = ["train", "--resume", str(out), "--set", f"models.0.shards={target}"]
        assert main(resume) == 0
        got = _weights(out)
        assert _relative(got, want[source]) <= 1e-6, source
        assert _relative(got, want["one" if source == "two" else "two"]) <= 1e-6, source

    step2 = runs / "two" / "checkpoints" / "step_000002" / "llama"
    model = AutoModelForCausalLM.from_pretrained(step2)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    load_sharded_into_unsharded(step2, model, optimizer)
    got = by_name(model, optimizer.state_dict())["state"]
    dcp_to_torch_save(step2 / "optimizer", tmp_path / "full.pt")
    saved = torch.load(tmp_path / "full.pt", weights_only=True)["optimizer"]["state"]
    assert got.keys() == saved.keys() and len(got) > 10
    for key, moments in saved.items():
        for name in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(got[key][name], moments[name]), (key, name)


def test_what_a_sharded_policy_does_not_support_yet_is_refused_in_one_line():
    from graft.config import Config, ConfigError, load_config

    base = ["models.0.shards=2"]
    for extra, what in (
        (["run.backend=inprocess"], "run.backend=inprocess"),
        (["algo.kl_coef=0.1"], "a KL term"),
        (["models.0.lora.r=4"], "LoRA adapters"),
        (["models.0.dtype=float16"], "dtype float16/float32"),
    ):
        with pytest.raises(ConfigError, match=rf"models\.0\.shards: .*does not support {what}"):
            load_config(Config, "configs/grpo_tiny.yaml", [*base, *extra])
    with pytest.raises(ConfigError, match=r"models\.0\.shards"):
        load_config(Config, "configs/grpo_tiny.yaml", ["models.0.shards=0"])
    assert load_config(Config, "configs/grpo_tiny.yaml", base).models[0].shards == 2


def _train_args(out, *overrides: str, config: str = "configs/grpo_tiny.yaml") -> list[str]:
    return ["train", config, "--out", str(out)] + [
        a for o in [*RUN, *overrides] for a in ("--set", o)
    ]


def _kill_mid_run(out, sets, victim: str) -> tuple[int, str, float]:
    """Start a 40-step sharded run in a subprocess; once step 2 is checkpointed, SIGKILL rank 1
    (`victim` "rank") or the driver. Its exit code, stderr, and seconds from the kill to its end."""
    import os
    import signal
    import subprocess
    import sys
    import time

    cmd = [sys.executable, "-m", "graft.cli", *_train_args(out, "run.steps=40", *sets)]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while time.time() < deadline and not (
        (out / "checkpoints" / "step_000002").is_dir() and (out / "workers.json").is_file()
    ):
        time.sleep(0.2)
    pids = json.loads((out / "workers.json").read_text())["llama"]["rank_pids"].split(",")
    start = time.time()
    os.kill(int(pids[1]) if victim == "rank" else proc.pid, signal.SIGKILL)
    _, err = proc.communicate(timeout=300)
    return proc.returncode, err, time.time() - start


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_killed_rank_or_driver_ends_the_run_and_resume_matches_an_uninterrupted_run(tmp_path):
    """Rank 1 of a sharded policy killed mid-run: the run ends in one line naming the policy and
    the rank, well within the collective timeout, with its last checkpoint intact. The driver
    killed with SIGKILL: its ranks go with it. Either way `--resume` ends with the weights of the
    uninterrupted sharded run, bit for bit; resumed unsharded instead, within 1e-6."""
    import shutil

    from graft.cli import main
    from graft.rundir import latest_checkpoint, verify_checkpoint

    sharded = ("models.0.shards=2", "run.save_every=2")
    assert main(_train_args(tmp_path / "whole", "run.steps=4", *sharded)) == 0
    want = _weights(tmp_path / "whole", 4)
    for victim in ("rank", "driver"):
        out = tmp_path / victim
        code, err, took = _kill_mid_run(out, sharded, victim)
        if victim == "rank":
            assert code == 2, err
            assert took < 120
            last = err.strip().splitlines()[-1]
            assert "policy 'llama': rank 1 of 2 died" in last, last
        verify_checkpoint(latest_checkpoint(out))
        other = tmp_path / f"{victim}_at_one_rank"
        shutil.copytree(out, other)
        assert main(["train", "--resume", str(out), "--set", "run.steps=4"]) == 0
        got = _weights(out, 4)
        assert all(torch.equal(got[k], want[k]) for k in want), victim
        # the same interrupted run resumed unsharded: the float addition-order noise of K
        resume = ["train", "--resume", str(other), "--set", "run.steps=4"]
        assert main([*resume, "--set", "models.0.shards=1"]) == 0
        assert _relative(_weights(other, 4), want) <= 1e-6, victim


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("backend", ["processes", "ray"])
def test_a_graft_pair_with_one_sharded_policy_trains_as_the_unsharded_pair(tmp_path, backend):
    """GRAFT with llama over 2 ranks and qwen on one: after 3 steps both policies hold the
    weights of the unsharded pair (worker processes) to 1e-6, with the same exchange, on the
    worker-process backend and on Ray (one actor per rank, llama's two packed by a placement
    group)."""
    from graft.cli import main
    from graft.rundir import read_metrics

    graft = "configs/graft_tiny.yaml"
    assert main(_train_args(tmp_path / "one", config=graft)) == 0
    sharded = ["models.0.shards=2", f"run.backend={backend}"]
    if backend == "ray":
        ray = pytest.importorskip("ray")
        # 2 cores: llama's two ranks reserve half a CPU each, qwen one
        sharded += ["models.0.num_cpus=0.5", "models.1.num_cpus=1"]
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        assert main(_train_args(tmp_path / "two", *sharded, config=graft)) == 0
        workers = json.loads((tmp_path / "two" / "workers.json").read_text())
    finally:
        if backend == "ray":
            ray.shutdown()
    pids = workers["llama"]["rank_pids"].split(",")
    assert len(set(pids)) == 2 and workers["llama"]["shards"] == "2"
    for name in ("llama", "qwen"):
        a = load_file(str(tmp_path / f"one/checkpoints/step_000003/{name}/model.safetensors"))
        b = load_file(str(tmp_path / f"two/checkpoints/step_000003/{name}/model.safetensors"))
        assert _relative(b, a) <= 1e-6, name
    admitted = [
        [
            r.get("x/llama->qwen/admitted", 0) + r.get("x/qwen->llama/admitted", 0)
            for r in read_metrics(tmp_path / d)
        ]
        for d in ("one", "two")
    ]
    assert admitted[0] == admitted[1] and sum(admitted[0]) > 0
    idle = [r["m/llama/shard/idle_rank_frac"] for r in read_metrics(tmp_path / "two")]
    assert idle == [0.0] * 3  # both of llama's ranks trained at every step


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_killed_ray_rank_ends_the_run_in_one_line_and_resume_continues(tmp_path):
    """Ray backend, `shards: 2`: rank 1's actor killed mid-run ends the run in one line naming the
    policy and the rank, well within the collective timeout, with the last checkpoint intact;
    `--resume` on a fresh local Ray instance finishes the run."""
    pytest.importorskip("ray")
    from graft.cli import main
    from graft.rundir import latest_checkpoint, read_metrics, verify_checkpoint

    out = tmp_path / "ray"
    code, err, took = _kill_mid_run(
        out, ("models.0.shards=2", "run.save_every=2", "run.backend=ray"), "rank"
    )
    assert code == 2, err
    assert took < 120
    last = err.strip().splitlines()[-1]
    assert "policy 'llama': rank 1 of 2 died (its Ray actor died)" in last, last
    verify_checkpoint(latest_checkpoint(out))
    import ray

    try:
        assert main(["train", "--resume", str(out), "--set", "run.steps=4"]) == 0
    finally:
        ray.shutdown()
    assert [r["step"] for r in read_metrics(out)][-1] == 4


def test_each_rank_builds_from_its_own_share_and_device():
    """rank_spec: threads split K ways; on GPUs rank r of a worker process takes the device
    index + r, while a Ray actor (which sees only its own GPU) keeps the one it is given."""
    import dataclasses

    from graft.config import Config, load_config
    from graft.training.policy import PolicySpec
    from graft.training.sharded_policy import rank_spec

    cfg = load_config(Config, "configs/grpo_tiny.yaml", ["models.0.shards=2"])
    spec = PolicySpec(model=cfg.models[0], rollout=cfg.rollout, algo=cfg.algo, seed=0, threads=4)

    def on(device: str) -> PolicySpec:
        return dataclasses.replace(spec, model=dataclasses.replace(spec.model, device=device))

    assert rank_spec(on("cpu"), 1).threads == 2
    assert rank_spec(on("cpu"), 1).model.device == "cpu"
    assert rank_spec(on("cuda"), 0).model.device == "cuda:0"
    assert rank_spec(on("cuda"), 1).model.device == "cuda:1"
    assert rank_spec(on("cuda:2"), 1).model.device == "cuda:3"
    assert rank_spec(on("cuda"), 1, own_device=True).model.device == "cuda"
    assert rank_spec(dataclasses.replace(spec, threads=0), 1).threads == 0


@pytest.mark.slow
def test_ranks_the_ray_cluster_cannot_place_end_the_start_in_one_line(
    tmp_path, monkeypatch, capsys
):
    """Two ranks that each reserve a GPU on a cluster without one: the placement group is never
    ready, and the start ends with a line naming the policy and what it asked for, instead of
    waiting forever."""
    ray = pytest.importorskip("ray")
    from graft.backends import ray_backend
    from graft.cli import main

    monkeypatch.setattr(ray_backend, "PLACEMENT_TIMEOUT_S", 3.0)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        sets = ("models.0.shards=2", "run.backend=ray", "models.0.num_gpus=1")
        assert main(_train_args(tmp_path / "run", *sets)) == 2
    finally:
        ray.shutdown()
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "run.ray_strategy: the Ray cluster could not place llama (2 actors, STRICT_PACK" in err
    assert "'GPU': 1" in err


def _build_rank(rank: int, world: int, init: str, out: str) -> None:
    """Rank `rank`: build the model sharded from its config, fill it from rank 0's weights."""
    from graft.training.shards import build_sharded, load_full_weights, share_from_rank0

    torch.set_num_threads(1)
    shard = init_shard_group(rank, world, init_method=init, timeout_s=120)
    try:
        full = _model() if rank == 0 else None
        config = share_from_rank0(full.config if full is not None else None)
        model = build_sharded(config, shard, device="cpu", compute_dtype=None)
        tied = model.lm_head.weight is model.model.embed_tokens.weight
        local = sum(p.to_local().numel() for p in model.parameters())
        load_full_weights(model, full.state_dict() if full is not None else {})
        state = full_state_dict(model)
        buffers = {n: b.clone() for n, b in model.named_buffers()}
        if rank == 0:
            want_buffers = dict(full.named_buffers())
            same = all(torch.equal(state[k], v) for k, v in full.state_dict().items())
            same_buffers = all(torch.equal(buffers[k], want_buffers[k]) for k in want_buffers)
            total = sum(p.numel() for p in full.parameters())
            out_info = {"tied": tied, "same": same, "buffers": same_buffers,
                        "local": local, "total": total}  # fmt: skip
            with open(out, "w") as f:
                json.dump(out_info, f)
        dist.barrier()
    finally:
        dist.destroy_process_group()


@pytest.mark.timeout(300)
def test_a_rank_builds_only_its_shards_from_the_config(tmp_path):
    """build_sharded on 2 ranks: each holds half the parameters (never the whole model: they
    are made on the meta device), the tied head stays tied, the rotary buffers are the real
    ones, and rank 0's weights arrive whole."""
    out = tmp_path / "info.json"
    init = f"file://{tmp_path / 'rendezvous'}"
    mp.spawn(_build_rank, args=(2, init, str(out)), nprocs=2, join=True)
    info = json.loads(out.read_text())
    assert info["tied"] and info["same"] and info["buffers"]
    assert info["local"] * 2 == pytest.approx(info["total"], rel=0.01)
