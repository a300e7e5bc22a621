"""The speed optimizations change no result: a GRAFT run with them on and off, same seed."""

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from graft.cli import main
from graft.rundir import read_metrics

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "graft_tiny.yaml"


def _run(out: Path, *extra: str) -> None:
    args = ["train", str(CONFIG), "--out", str(out)]
    for a in (
        "run.steps=5",
        "run.progress=false",
        "eval.every=0",
        "exchange.delta=0.5",
        "algo.micro_batch_size=8",
        *extra,
    ):
        args += ["--set", a]
    assert main(args) == 0


@pytest.mark.slow
def test_zero_advantage_skip_length_sort_prompt_sharing_and_dedup_change_no_result(tmp_path):
    _run(tmp_path / "fast")
    _run(
        tmp_path / "plain",
        "algo.skip_zero_advantage=false",
        "algo.sort_by_length=false",
        "algo.share_prompts=false",
        "algo.dedup_responses=false",
    )
    fast, plain = read_metrics(tmp_path / "fast"), read_metrics(tmp_path / "plain")
    assert len(fast) == len(plain) == 5
    skipped = duplicated = 0.0
    for f, p in zip(fast, plain):
        for name in ("llama", "qwen"):
            key = f"m/{name}/reward/mean"
            assert abs(f[key] - p[key]) <= 1e-5, (f["step"], key)
            skipped += f.get(f"m/{name}/train/skipped_frac", 0.0)
            duplicated += f.get(f"m/{name}/train/duplicate_frac", 0.0)
            assert p[f"m/{name}/train/duplicate_frac"] == 0.0
        for key in ("x/llama->qwen/admitted", "x/qwen->llama/admitted"):
            assert f[key] == p[key]
    assert skipped > 0, "no zero-advantage work was skipped: the test exercises nothing"
    assert duplicated > 0, "no identical responses were merged: the test exercises nothing"
    assert sum(r["x/llama->qwen/admitted"] + r["x/qwen->llama/admitted"] for r in fast) > 0
    for name in ("llama", "qwen"):
        ckpt = f"checkpoints/step_000005/{name}/model.safetensors"
        a, b = load_file(str(tmp_path / "fast" / ckpt)), load_file(str(tmp_path / "plain" / ckpt))
        for k in a:
            torch.testing.assert_close(a[k], b[k], rtol=0, atol=1e-5)
