"""Dynamic sampling (`zero_contrast.mode=resample`) survives a kill: a run killed with SIGKILL
while it samples a step's extra prompts resumes to the weights, counts and store of the run never
killed (the extra prompts and seeds are pure functions of the run seed, step and round)."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest
import torch

from graft.cli import main
from graft.rundir import is_timing, read_metrics
from graft.store import TrajectoryStore
from test_faults import SMALL, _sets, _train, _weights, signal_when_ready

KILLABLE = """
import pathlib, sys, time
import graft.trainer as trainer

settle = trainer.Trainer.settle

def waiting_settle(self, step, batches):
    if step == 2:  # mid-step 3: rolled out, exchanged, about to sample further prompts
        pathlib.Path(sys.argv[1]).write_text("ready")
        time.sleep(600)
    return settle(self, step, batches)

trainer.Trainer.settle = waiting_settle
from graft.cli import main
sys.exit(main(sys.argv[2:]))
"""


def _counts(run: Path) -> list[dict]:
    """Every metric that does not measure time."""
    return [{k: v for k, v in r.items() if not is_timing(k)} for r in read_metrics(run)]


@pytest.mark.slow
def test_a_resampling_run_killed_mid_step_resumes_bit_exactly(tiny_paths, tmp_path):
    """kill -9 while a run with `zero_contrast.mode=resample` samples step 3's extra prompts, then
    `--resume`: the weights, every count (extra rounds and responses, dropped groups, tokens,
    FLOPs, cumulative too) and the store's rollouts equal those of the run never killed."""
    resample = ["models.0.zero_contrast.mode=resample", "run.steps=4", "run.save_every=1"]
    straight = tmp_path / "straight"
    assert _train(straight, tiny_paths["llama"], *resample) == 0
    assert sum(r["contrast/extra_rounds"] for r in read_metrics(straight)) > 0
    run, ready = tmp_path / "killed", tmp_path / "ready"
    sets = _sets(*SMALL, f"models.0.path={tiny_paths['llama']}", *resample)
    command = [sys.executable, "-c", KILLABLE, str(ready), "train", "--out", str(run), *sets]
    proc, _ = signal_when_ready(command, ready, signal.SIGKILL)
    assert proc.returncode == -signal.SIGKILL
    assert main(["train", "--resume", str(run)]) == 0
    a, b = _weights(straight, 4), _weights(run, 4)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert _counts(run) == _counts(straight)

    def rollouts(root: Path) -> list:
        columns = ["step", "prompt_id", "token_ids"]
        rows = TrajectoryStore(str(root / "trajectories")).scan(columns=columns)
        return sorted(zip(*(rows[c].to_pylist() for c in ("step", "prompt_id", "token_ids"))))

    assert rollouts(run) == rollouts(straight)
