"""The training loop through the real CLI: exact resume, a hung verifier, one-line errors."""

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from graft.cli import main
from graft.rundir import is_timing, read_metrics

SMALL = [
    "run.save_every=3",
    "run.progress=false",
    "task.arithmetic.num_train=12",  # 8 prompts a step: epoch boundaries fall inside batches
    "task.arithmetic.num_test=20",
    "rollout.prompts_per_step=8",
    "rollout.group_size=4",
    "rollout.max_new_tokens=6",
    "algo.minibatches=2",
    "algo.micro_batch_size=8",
    "models.0.optim.lr=1e-3",
    "verify.workers=1",
]


def _train(args):
    assert main(["train", *args]) == 0


def _weights(run_dir, step):
    path = Path(run_dir) / "checkpoints" / f"step_{step:06d}" / "policy" / "model.safetensors"
    return load_file(str(path))


def _strip_times(records):
    return [{k: v for k, v in r.items() if not is_timing(k)} for r in records]


def test_resume_gives_the_same_weights_as_a_straight_run(tmp_path):
    model = ["models.0.path=tiny:llama-char-add", "models.0.optim.lr=2e-5"]  # real gradients
    straight, split = tmp_path / "straight", tmp_path / "split"
    _train(["--out", str(straight), *_sets([*SMALL, *model, "run.steps=6"])])
    _train(["--out", str(split), *_sets([*SMALL, *model, "run.steps=3"])])
    assert (split / "checkpoints" / "step_000003").is_dir()
    _train(["--resume", str(split), "--set", "run.steps=6"])
    a, b = _weights(straight, 6), _weights(split, 6)
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key
    records = read_metrics(straight)
    assert all(r["grad_norm"] > 0 for r in records)
    opt_a = torch.load(straight / "checkpoints/step_000006/policy/optimizer.pt", weights_only=True)
    opt_b = torch.load(split / "checkpoints/step_000006/policy/optimizer.pt", weights_only=True)
    for key, state in opt_a["state"].items():
        for name, value in state.items():
            assert torch.equal(value, opt_b["state"][key][name])
    assert _strip_times(read_metrics(straight)) == _strip_times(read_metrics(split))
    assert [r["step"] for r in read_metrics(split)] == [1, 2, 3, 4, 5, 6]


def _sets(assignments):
    return [x for a in assignments for x in ("--set", a)]


def test_a_hung_verifier_is_killed_and_the_run_goes_on(tmp_path, tiny_paths):
    run_dir = tmp_path / "run"
    _train(
        [
            "--out",
            str(run_dir),
            *_sets(
                [
                    *SMALL,
                    f"models.0.path={tiny_paths['llama']}",
                    "run.steps=2",
                    "verify.verifier=hanging_verifier:hang_on_seven",
                    "verify.timeout_s=0.5",
                    "rollout.temperature=1.5",
                ]
            ),
        ]
    )
    records = read_metrics(run_dir)
    assert [r["step"] for r in records] == [1, 2]
    assert sum(r["verdict/timeout"] for r in records) > 0
    total = sum(
        r[f"verdict/{c}"]
        for r in records
        for c in ("correct", "wrong", "no_answer", "timeout", "error")
    )
    assert total == 2 * 8 * 4  # every response got a verdict


def _error_of(args, capsys):
    code = main(args)
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err.count("\n") == 0, err  # one line, no traceback
    return err


def test_bad_config_gives_one_line_errors(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("rollout:\n  gruop_size: 4\n")
    assert "rollout.gruop_size: unknown key" in _error_of(["train", str(bad)], capsys)
    err = _error_of(["train", "--set", "rollout.group_size=abc"], capsys)
    assert "rollout.group_size" in err and "integer" in err
    assert "rollout.group_size" in _error_of(["train", "--set", "rollout.group_size=1"], capsys)
    err = _error_of(
        ["train", "--set", "rollout.prompts_per_step=10", "--set", "algo.minibatches=4"], capsys
    )
    assert "algo.minibatches" in err and "not divisible" in err
    assert "does not exist" in _error_of(["train", str(tmp_path / "missing.yaml")], capsys)
    err = _error_of(["train", "--set", "verify.verifier=nosuchmodule:check"], capsys)
    assert err.startswith("graft: error: verify.verifier")


def test_missing_dataset_column_names_the_column_and_file(tmp_path, capsys):
    data = tmp_path / "train.jsonl"
    data.write_text(json.dumps({"question": "1+1?", "answer": "2"}) + "\n")
    err = _error_of(["train", *_sets(["task.name=math", f"task.math.train={data}"])], capsys)
    assert "'problem'" in err and str(data) in err and "question" in err


def test_unreadable_model_path_names_the_key(tmp_path, capsys):
    err = _error_of(["train", "--set", f"models.0.path={tmp_path / 'nope'}"], capsys)
    assert "models.0.path" in err and "nope" in err


@pytest.mark.parametrize("backend", ["inprocess", "processes"])
def test_a_run_writes_config_metrics_checkpoint_and_summary(tmp_path, tiny_paths, backend):
    run_dir = tmp_path / "run"
    _train(
        [
            "--out",
            str(run_dir),
            *_sets(
                [
                    *SMALL,
                    f"models.0.path={tiny_paths['gpt2']}",
                    "run.steps=2",
                    f"run.backend={backend}",
                    "eval.every=2",
                    "eval.num_problems=10",
                ]
            ),
        ]
    )
    assert (run_dir / "config.yaml").is_file() and (run_dir / "summary.json").is_file()
    records = read_metrics(run_dir)
    assert [r["step"] for r in records] == [0, 1, 2]
    for key in (
        "reward/mean",
        "groups/all_fail_frac",
        "groups/all_pass_frac",
        "loss/clip_frac",
        "grad_norm",
        "time/generate_s",
        "time/verify_s",
        "time/verify_busy_s",
        "time/train_s",
        "tokens_per_s",
        "verdict/correct",
        "verdict/timeout",
    ):
        assert key in records[1], key
    # one policy: nothing samples while its rollouts are verified, so all of it is left over
    assert records[1]["time/verify_busy_s"] == pytest.approx(records[1]["time/verify_s"], abs=2e-3)
    assert "eval/test/avg@1" in records[0] and "eval/test/avg@1" in records[2]
    assert (run_dir / "checkpoints" / "step_000002" / "policy" / "model.safetensors").is_file()


def test_a_steps_phases_add_up_to_the_step_and_training_excludes_settling(tmp_path, tiny_paths):
    """time/generate_s, verify_s, exchange_s, settle_s, train_s and store_s are consecutive
    phases: they add up to time/step_s. With dynamic sampling the settle phase samples again,
    and none of that time is counted as training (it once was: train_s ran from before it)."""
    run_dir = tmp_path / "run"
    sets = [*SMALL, f"models.0.path={tiny_paths['gpt2']}", "run.steps=2", "eval.every=0"]
    sets += ["models.0.zero_contrast.mode=resample", "models.0.zero_contrast.max_rounds=3"]
    _train(["--out", str(run_dir), *_sets(sets)])
    phases = ("generate", "verify", "exchange", "settle", "train", "store")
    for record in read_metrics(run_dir):
        parts = [record[f"time/{p}_s"] for p in phases]
        assert all(x >= 0 for x in parts)
        assert sum(parts) == pytest.approx(record["time/step_s"], abs=1e-6), record
    # Settling's work is in the settle phase: every step that sampled again has time there (by
    # counting the rounds, not by a duration, which depends on the machine).
    resampled = [r for r in read_metrics(run_dir) if r["contrast/extra_rounds"] > 0]
    assert resampled and all(r["contrast/extra_responses"] > 0 for r in resampled)
    assert all(r["time/settle_s"] > 0 for r in resampled)
