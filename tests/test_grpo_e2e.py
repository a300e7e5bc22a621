"""End to end through the real CLI: GRPO raises a partly trained tiny model's held-out accuracy."""

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from graft.cli import main
from graft.models.tiny import build_tiny
from graft.rundir import read_metrics

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "grpo_tiny.yaml"


@pytest.mark.slow
def test_grpo_raises_held_out_accuracy_and_changes_every_tensor(tmp_path):
    run_dir = tmp_path / "grpo"
    code = main(
        [
            "train",
            str(CONFIG),
            "--out",
            str(run_dir),
            "--set",
            "run.steps=40",
            "--set",
            "eval.every=40",
            "--set",
            "run.progress=false",
        ]
    )
    assert code == 0
    records = read_metrics(run_dir)
    before = records[0]["eval/test/avg@4"]
    after = records[-1]["eval/test/avg@4"]
    assert records[0]["step"] == 0 and records[-1]["step"] == 40
    # 200 held-out problems x 4 samples; measured here: 0.255 -> 0.328
    assert after >= before + 0.03, (before, after)
    rewards = [r["reward/mean"] for r in records if "reward/mean" in r]
    assert sum(rewards[-10:]) / 10 > sum(rewards[:10]) / 10

    initial = load_file(str(build_tiny("llama-char-add") / "model.safetensors"))
    final = load_file(str(run_dir / "checkpoints" / "step_000040" / "llama" / "model.safetensors"))
    assert initial.keys() == final.keys()
    unchanged = [k for k in initial if torch.equal(initial[k], final[k])]
    assert unchanged == []
