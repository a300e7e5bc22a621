"""Backends: local worker processes and Ray actors give the same numbers; a dead worker ends the
run with a clear error naming the policy, and --resume continues from the last checkpoint."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from graft.cli import main
from graft.rundir import is_timing, read_metrics

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "graft_tiny.yaml"
SMALL = [
    "run.progress=false",
    "run.threads=1",
    "eval.every=0",
    "rollout.prompts_per_step=8",
    "rollout.group_size=4",
    "algo.minibatches=2",
    "verify.workers=1",
    "exchange.delta=0.5",
]


def _args(out, *sets):
    args = ["train", str(CONFIG), "--out", str(out)]
    for s in [*SMALL, *sets]:
        args += ["--set", s]
    return args


def _without_times(records):
    return [{k: v for k, v in r.items() if not is_timing(k)} for r in records]


def _same_run(a, b):
    ra, rb = _without_times(read_metrics(a)), _without_times(read_metrics(b))
    assert len(ra) == len(rb)
    for x, y in zip(ra, rb):
        assert x.keys() == y.keys()
        for key in x:
            assert x[key] == pytest.approx(y[key], abs=1e-6), key
    for name in ("llama", "qwen"):
        wa = load_file(str(Path(a) / "checkpoints/step_000003" / name / "model.safetensors"))
        wb = load_file(str(Path(b) / "checkpoints/step_000003" / name / "model.safetensors"))
        assert all(torch.allclose(wa[k], wb[k], atol=1e-6, rtol=0) for k in wa)


@pytest.mark.slow
def test_ray_and_local_backends_give_the_same_numbers(tmp_path):
    ray = pytest.importorskip("ray")
    local, remote = tmp_path / "local", tmp_path / "ray"
    assert main(_args(local, "run.steps=3", "run.backend=processes")) == 0
    # one CPU per policy actor, one for the verifier actor (verify.workers=1)
    ray.init(num_cpus=3, include_dashboard=False, log_to_driver=False)
    try:
        assert main(_args(remote, "run.steps=3", "run.backend=ray")) == 0
        workers = json.loads((remote / "workers.json").read_text())
        assert set(workers) == {"llama", "qwen"}
        assert all(int(w["pid"]) != os.getpid() for w in workers.values())
    finally:
        ray.shutdown()
    assert (
        sum(
            r.get("x/llama->qwen/admitted", 0) + r.get("x/qwen->llama/admitted", 0)
            for r in read_metrics(local)
        )
        > 0
    )
    _same_run(local, remote)


def test_inprocess_and_processes_backends_give_the_same_numbers(tmp_path):
    a, b = tmp_path / "inprocess", tmp_path / "processes"
    assert main(_args(a, "run.steps=3", "run.backend=inprocess")) == 0
    assert main(_args(b, "run.steps=3", "run.backend=processes")) == 0
    _same_run(a, b)


def _kill_a_worker_then_resume(tmp_path, backend, extra_env=None):
    out = tmp_path / backend
    cmd = [
        sys.executable,
        "-m",
        "graft.cli",
        *_args(out, "run.steps=40", "run.save_every=2", f"run.backend={backend}")[0:],
    ]
    env = {**os.environ, **(extra_env or {})}
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.time() + 240
    while time.time() < deadline:  # wait for a checkpoint, then kill the qwen worker
        if (out / "checkpoints" / "step_000002").is_dir() and (out / "workers.json").is_file():
            break
        time.sleep(0.2)
    victim = int(json.loads((out / "workers.json").read_text())["qwen"]["pid"])
    os.kill(victim, signal.SIGKILL)
    _, err = proc.communicate(timeout=240)
    assert proc.returncode == 2, err
    last = err.strip().splitlines()[-1]
    assert "policy 'qwen'" in last and ("died" in last or "gone" in last), last
    done = [r["step"] for r in read_metrics(out)]
    try:
        assert main(["train", "--resume", str(out), "--set", "run.steps=6"]) == 0
    finally:
        if backend == "ray":
            import ray

            ray.shutdown()
    steps = [r["step"] for r in read_metrics(out)]
    assert steps == list(range(1, 7)) and len(done) >= 2


@pytest.mark.slow
def test_a_dead_worker_process_names_the_policy_and_resume_continues(tmp_path):
    _kill_a_worker_then_resume(tmp_path, "processes")


@pytest.mark.slow
def test_a_dead_ray_actor_names_the_policy_and_resume_continues(tmp_path):
    pytest.importorskip("ray")
    _kill_a_worker_then_resume(tmp_path, "ray")


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["processes", "ray"])
def test_the_driver_takes_each_policys_rollouts_as_they_arrive(backend):
    """`then` runs on the policy that finished first while the other still samples; the answers
    come back in config order; an error in `then` is raised only once every worker answered, and
    leaves no stale answer behind for the next call."""
    from graft.config import Config, load_config
    from graft.rollout import SamplingParams
    from graft.trainer import Trainer

    if backend == "ray":
        ray = pytest.importorskip("ray")
        ray.init(num_cpus=3, include_dashboard=False, log_to_driver=False)  # and a verifier
    trainer = Trainer(load_config(Config, CONFIG, [*SMALL, f"run.backend={backend}"]))
    policies, problems = trainer.backend, trainer.train_problems
    params = SamplingParams(max_new_tokens=8, temperature=1.0, top_p=1.0, top_k=0)
    try:
        calls = {  # llama, first in the config, gets 1000x the work
            "llama": ("generate", (problems[:64],), {"n": 16, "params": params, "seed": 1}),
            "qwen": ("generate", (problems[:1],), {"n": 1, "params": params, "seed": 2}),
        }
        seen = []

        def then(name, rollouts):
            seen.append(name)
            if backend == "processes":  # llama's answer is not there yet when qwen's is handled
                assert name == "llama" or not policies._conns["llama"].poll()
            return len(rollouts)

        out = policies._call(calls, then)
        assert list(out) == ["llama", "qwen"] and out == {"llama": 64, "qwen": 1}
        assert seen == ["qwen", "llama"]  # qwen's rollouts were handled while llama sampled

        def fail(name, rollouts):
            raise ValueError(f"verifier broke on {name}")

        with pytest.raises(ValueError, match="verifier broke on qwen"):
            policies._call(calls, fail)
        seeds = {"llama": 5, "qwen": 6}
        again = policies.generate(problems[:2], n=2, params=params, seeds=seeds)
        assert {name: [r.problem.id for r in rs] for name, rs in again.items()} == {
            name: [p.id for p in problems[:2]] for name in ("llama", "qwen")
        }
    finally:
        trainer.close()
        if backend == "ray":
            ray.shutdown()
