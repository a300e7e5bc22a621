"""scripts/gpu_check.py, run end to end on the CPU exactly as it runs on the GPU machine: every
check reports its device and its numbers, and a summary is written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "gpu_check.py"
CHECKS = [
    "environment",
    "tiny_models",
    "same_rollouts_fp32",
    "same_rollouts_bf16",
    "bf16_weights_move",
    "grpo_run",
    "graft_run",
    "update_speed",
    "sharded_update",
    "sandbox",
    "vllm",
]


def _run(*args: str, out: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the script finds src/
    cmd = [sys.executable, str(SCRIPT), "--device", "cpu", "--out", str(out), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env, cwd=ROOT)


@pytest.mark.slow
def test_gpu_check_runs_every_check_on_the_cpu_and_writes_its_summary(tmp_path):
    done = _run("--quick", out=tmp_path)
    lines = [x for x in done.stdout.splitlines() if x.startswith("gpu_check: ")]
    assert done.returncode == 0, done.stdout + done.stderr
    by_name = {x.split(":")[1].strip(): x for x in lines[:-1]}
    assert list(by_name) == CHECKS
    for name, line in by_name.items():
        assert "[cpu]" in line, line
        if name == "vllm":
            try:
                import vllm  # noqa: F401
            except ImportError:
                assert "SKIP [cpu] skipped: vLLM not installed" in line
                continue
        assert ": PASS [cpu]" in line, line
    rows = {r["name"]: r for r in json.loads((tmp_path / "gpu_check.json").read_text())}
    assert rows["same_rollouts_fp32"]["numbers"]["logprob_max_gap"] <= 1e-4
    assert rows["bf16_weights_move"]["numbers"]["moved_master_fp32"] > 0.99
    assert rows["bf16_weights_move"]["numbers"]["moved_pure_bf16"] < 0.5
    assert rows["update_speed"]["numbers"]["tokens_per_s"] > 0
    assert rows["graft_run"]["numbers"]["selected"] >= 0
    assert rows["sharded_update"]["numbers"]["weights_rel_gap"] <= 1e-5
    assert rows["sandbox"]["numbers"]["tier"] == "cgroup_v1"  # this machine's
    assert rows["sandbox"]["numbers"]["memory_limit"] == "enforced"
    assert rows["sandbox"]["numbers"]["memory"] == "memory"
    summary = (tmp_path / "gpu_check.md").read_text()
    assert summary.startswith("# GPU check") and "| update_speed | PASS | cpu |" in summary
    assert lines[-1].startswith("gpu_check: 0 failed")


def test_gpu_check_skips_what_its_time_budget_cannot_hold(tmp_path):
    done = _run("--budget-s", "0", "--only", "grpo_run", "--only", "vllm", out=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("gpu_check: grpo_run: SKIP [cpu] skipped: the time budget is spent")
    assert lines[1].startswith("gpu_check: vllm: SKIP [cpu]")


def test_a_failed_check_is_one_line_and_counts_in_the_exit_status(tmp_path):
    # Without CUDA, the environment check on --device cuda fails and says why.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["CUDA_VISIBLE_DEVICES"] = ""
    cmd = [sys.executable, str(SCRIPT), "--device", "cuda", "--out", str(tmp_path)]
    done = subprocess.run(
        [*cmd, "--only", "environment"], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 1
    assert "gpu_check: environment: FAIL [cuda] CheckFailed: no CUDA device visible" in done.stdout
    assert (tmp_path / "environment.traceback.txt").is_file()
    done = subprocess.run(
        [*cmd, "--only", "sharded_update"], capture_output=True, text=True, env=env, timeout=300
    )
    assert "gpu_check: sharded_update: SKIP [cuda] skipped: 0 devices" in done.stdout
