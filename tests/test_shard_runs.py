"""A sharded policy (`models.N.shards: K`) in training runs, through `graft train`: the rewards
and weights of the unsharded policy at K = 2 and 4 with every rank training, a KL term, the
checkpoint layout, resume at another K, a killed rank or driver, a GRAFT pair with one sharded
policy (worker processes and Ray), and damaged sharded checkpoints refused in one line."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

# Whole sharded runs, a few per test: `make test-slow` (tests/test_shards.py keeps the fast checks).
pytestmark = pytest.mark.slow

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
    # Both ranks trained at every step (a minibatch can leave one idle: which groups have a
    # nonzero advantage depends on the sampled tokens, and so on this CPU's float kernels).
    idle = [r["shard/idle_rank_frac"] for r in read_metrics(tmp_path / "two")]
    assert max(idle) < 1 and min(idle) == 0, idle
    checkpoint = tmp_path / "two" / "checkpoints" / "step_000003"
    verify_checkpoint(checkpoint)
    files = sorted(p.name for p in (checkpoint / "llama" / "optimizer").iterdir())
    assert files == [".metadata", "__0_0.distcp", "__1_0.distcp"]
    state = json.loads((checkpoint / "llama" / "policy_state.json").read_text())
    assert state == {"num_updates": 6, "shards": 2, "precision": {"skipped_steps": 0}}
    loaded = AutoModelForCausalLM.from_pretrained(checkpoint / "llama").state_dict()
    assert all(torch.equal(loaded[k], two[k]) for k in two)
    assert two.keys() == one.keys()  # a tied head saved once, as transformers saves it


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_four_ranks_train_as_one(one_and_two, tmp_path):
    """`shards: 4`, every rank with a micro-batch of its own in every minibatch: the rewards of
    `shards: 1` at every step and its weights after 3 steps to 1e-6."""
    from graft.cli import main
    from graft.rundir import read_metrics

    four = ["models.0.shards=4", "algo.micro_batch_size=2"]  # some groups train nothing (all
    assert main(_train_args(tmp_path / "four", *four)) == 0  # equal rewards): 2 keeps 4 ranks busy
    assert _relative(_weights(tmp_path / "four"), _weights(one_and_two / "one")) <= 1e-6
    rewards = [
        [r.get("reward/mean") for r in read_metrics(d)]
        for d in (one_and_two / "one", tmp_path / "four")
    ]
    assert rewards[0] == rewards[1]
    # All four ranks trained at some step, and at most one sat out at any (which groups have a
    # nonzero advantage depends on the sampled tokens, and so on this CPU's float kernels).
    idle = [r["shard/idle_rank_frac"] for r in read_metrics(tmp_path / "four")]
    assert min(idle) == 0 and max(idle) <= 0.25, idle


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_kl_term_with_a_sharded_policy_trains_as_one_rank(tmp_path):
    """`algo.kl_coef: 0.1`: every rank holds its shard of the frozen reference (the starting
    weights). At a learning rate large enough for the term to matter (1e-3, 50x the config's),
    3 steps at K = 2 land as close to K = 1 as without the term (float addition order, which
    AdamW amplifies at this rate: 6e-6 measured), with the same KL statistics, and the term moved
    the weights."""
    from graft.cli import main
    from graft.rundir import read_metrics

    runs = {}
    for name, sets in {
        "one": ["algo.kl_coef=0.1"],
        "two": ["algo.kl_coef=0.1", "models.0.shards=2"],
        "plain_one": [],
        "plain_two": ["models.0.shards=2"],
    }.items():
        assert main(_train_args(tmp_path / name, "models.0.optim.lr=1e-3", *sets)) == 0
        runs[name] = _weights(tmp_path / name)
    noise = _relative(runs["plain_two"], runs["plain_one"])
    assert _relative(runs["two"], runs["one"]) <= max(1e-6, 2 * noise)
    assert _relative(runs["plain_one"], runs["one"]) > 1e-4  # the term did something
    kl = [[r["loss/kl"] for r in read_metrics(tmp_path / d)] for d in ("one", "two")]
    assert kl[1] == pytest.approx(kl[0], rel=1e-3, abs=1e-9) and max(kl[0]) > 0


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
        code, err, _ = _kill_mid_run(out, sharded, victim)
        if victim == "rank":  # ended by the death it saw, not by a collective's timeout:
            assert code == 2, err
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
        # 2 cores: llama's two ranks reserve half a CPU each, qwen one; the two verifier
        # actors (verify.workers) one each
        sharded += ["models.0.num_cpus=0.5", "models.1.num_cpus=1"]
        ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
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
    code, err, _ = _kill_mid_run(
        out, ("models.0.shards=2", "run.save_every=2", "run.backend=ray"), "rank"
    )
    assert code == 2, err  # ended by the death it saw, not by a collective's timeout:
    last = err.strip().splitlines()[-1]
    assert "policy 'llama': rank 1 of 2 died (its Ray actor died)" in last, last
    verify_checkpoint(latest_checkpoint(out))
    import ray

    try:
        assert main(["train", "--resume", str(out), "--set", "run.steps=4"]) == 0
    finally:
        ray.shutdown()
    assert [r["step"] for r in read_metrics(out)][-1] == 4


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


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_float16_compute_with_shards_trains_and_resumes_bit_for_bit(tmp_path):
    """`dtype: float16` over float32 shards: 3 GRPO steps with the loss scaler, whose state is in
    the checkpoint; resumed from step 2, step 3 lands on the same weights bit for bit."""
    import shutil

    from graft.cli import main

    sets = ["models.0.shards=2", "models.0.dtype=float16"]
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    assert main(_train_args(straight, *sets)) == 0
    state = json.loads((straight / "checkpoints/step_000002/llama/policy_state.json").read_text())
    assert state["precision"]["scaler"]["scale"] > 0
    shutil.copytree(straight, resumed)
    shutil.rmtree(resumed / "checkpoints" / "step_000003")
    assert main(["train", "--resume", str(resumed)]) == 0
    want, got = _weights(straight), _weights(resumed)
    assert all(torch.equal(got[k], want[k]) for k in want)
    assert _relative(want, _weights(straight, step=2)) > 0  # step 3 moved the weights


def _last_checkpoint_only(runs, out):
    """A copy of the K = 2 run holding only its last checkpoint: (the run, its policy folder)."""
    import shutil

    shutil.copytree(runs / "two", out)
    for old in sorted((out / "checkpoints").glob("step_*"))[:-1]:
        shutil.rmtree(old)
    return out, out / "checkpoints" / "step_000003" / "llama"


def _refused(out, capsys, *sets: str) -> str:
    """`graft train --resume` of `out` ends with exit code 2 and one line: that line."""
    from graft.cli import main

    capsys.readouterr()
    args = ["train", "--resume", str(out), "--set", "run.steps=4"]
    assert main([*args, *(a for s in sets for a in ("--set", s))]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err  # no traceback, from no rank
    return err[0]


def test_a_rank_file_missing_ends_the_resume_in_one_line_naming_it(one_and_two, tmp_path, capsys):
    """A checkpoint whose manifest agrees with its files but whose optimizer/ lacks rank 1's file
    (a run directory not every node sees, or a hand repair): resume at any K ends in one line
    naming the checkpoint and the file, not in a traceback from every rank. Read directly, the
    state says the same in one line (torch's CheckpointException, a BaseException, is turned into
    a ValueError)."""
    from transformers import AutoModelForCausalLM

    from graft.rundir import write_manifest
    from graft.training.optim_state import load_sharded_into_unsharded, saved_shards

    out, policy = _last_checkpoint_only(one_and_two, tmp_path / "run")
    (policy / "optimizer" / "__1_0.distcp").unlink()
    write_manifest(policy.parent)
    for shards in (2, 1):
        line = _refused(out, capsys, f"models.0.shards={shards}")
        assert "no intact checkpoint" in line and str(policy.parent) in line, line
        assert "optimizer/__1_0.distcp: missing (optimizer/.metadata names it)" in line, line
    with pytest.raises(ValueError) as err:
        saved_shards(policy)
    assert str(policy) in str(err.value) and "optimizer/__1_0.distcp is missing" in str(err.value)
    model = AutoModelForCausalLM.from_pretrained(policy)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with pytest.raises(ValueError) as err:
        load_sharded_into_unsharded(policy, model, optimizer)
    message = str(err.value)
    assert "\n" not in message and str(policy / "optimizer") in message, message
    assert "__1_0.distcp" in message, message


def test_a_sharded_checkpoint_without_its_optimizer_folder_says_so(one_and_two, tmp_path, capsys):
    """A sharded checkpoint that lost its optimizer/ (and whose manifest was rewritten to match):
    the folder is named as missing, not optimizer.pt, which sharded checkpoints never have."""
    import shutil

    from graft.rundir import checkpoint_problems, write_manifest

    out, policy = _last_checkpoint_only(one_and_two, tmp_path / "run")
    shutil.rmtree(policy / "optimizer")
    write_manifest(policy.parent)
    want = (
        f"{policy / 'optimizer'}: missing (the AdamW state of the 2 ranks that wrote this "
        f"checkpoint, one file per rank)"
    )
    assert checkpoint_problems(policy.parent, ["llama"]) == [want]
    line = _refused(out, capsys)
    assert line.endswith(want) and "optimizer.pt" not in line, line


def test_a_damaged_sharded_checkpoint_is_refused_before_any_rank_starts(
    one_and_two, tmp_path, capsys, monkeypatch
):
    """The only checkpoint of a K = 2 run has a truncated file: resume is refused in one line
    naming the checkpoint and the file before any policy process or rank starts (it took 17-52 s
    to refuse once every rank had started)."""

    import graft.trainer

    def no_policy(*args, **kwargs):
        raise AssertionError("a policy started before the damaged checkpoint was refused")

    monkeypatch.setattr(graft.trainer, "make_backend", no_policy)
    out, policy = _last_checkpoint_only(one_and_two, tmp_path / "run")
    with (policy / "model.safetensors").open("r+b") as f:
        f.truncate(1000)
    line = _refused(out, capsys)  # before any policy started (make_backend above raises)
    assert "no intact checkpoint" in line and str(policy / "model.safetensors") in line, line
    assert "truncated (1000 bytes" in line, line
