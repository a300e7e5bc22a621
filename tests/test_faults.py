"""Faults never lose data: a refused re-run, a failed resume, damaged checkpoints, shards and
metrics lines, a full disk (under the checkpoints or the store), Ctrl-C, a NaN step, a resume of a
finished run, an export aimed at the store itself; and stored-peer advantages follow the run's
advantage settings."""

from __future__ import annotations

import errno
import hashlib
import json
import math
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from graft.cli import main
from graft.config import AblationConfig, ExchangeConfig, StoredPeerConfig
from graft.exchange import StoredPeer
from graft.groups import Advantage, group_advantages, make_groups
from graft.rundir import checkpoint_problems, read_metrics, write_manifest
from graft.store import Provenance, StoreWriter, group_rows
from graft.types import Completion, Problem, Rollout, Verdict
from graft.verify.pool import VerifierPool

SMALL = [
    "run.progress=false",
    "task.arithmetic.num_train=12",
    "task.arithmetic.num_test=8",
    "rollout.prompts_per_step=4",
    "rollout.group_size=4",
    "rollout.max_new_tokens=6",
    "algo.minibatches=2",
    "algo.micro_batch_size=8",
    "models.0.optim.lr=1e-3",
    "eval.every=0",
    "verify.workers=1",
]


def _sets(*assignments: str) -> list[str]:
    return [x for a in assignments for x in ("--set", a)]


def _train(out: Path, model: str, *extra: str) -> int:
    return main(["train", "--out", str(out), *_sets(*SMALL, f"models.0.path={model}", *extra)])


def _tree(root: Path) -> dict[str, str]:
    """Every file under root with the hash of its bytes."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _weights(run: Path, step: int) -> dict[str, torch.Tensor]:
    return load_file(str(run / "checkpoints" / f"step_{step:06d}" / "policy" / "model.safetensors"))


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_paths):
    """A straight 4-step run, and the same run stopped after 3 steps (checkpoints 2 and 3)."""
    root = tmp_path_factory.mktemp("faults")
    model = tiny_paths["llama"]
    assert _train(root / "straight", model, "run.steps=4", "run.save_every=1") == 0
    assert _train(root / "split", model, "run.steps=3", "run.save_every=1") == 0
    return {"root": root, "model": model, **{k: root / k for k in ("straight", "split")}}


def test_a_run_directory_is_never_reused_implicitly(runs, capsys):
    """F1: the old run survives a refused re-run byte for byte; --overwrite moves it aside."""
    old = runs["root"] / "old"
    shutil.copytree(runs["split"], old)
    before = _tree(old)
    assert _train(old, runs["model"], "run.steps=1") == 2
    err = capsys.readouterr().err.strip()
    assert str(old) in err and "--resume" in err and "--overwrite" in err and "\n" not in err
    assert _tree(old) == before
    again = _sets(*SMALL, f"models.0.path={runs['model']}", "run.steps=1")
    assert main(["train", "--overwrite", "--out", str(old), *again]) == 0
    assert _tree(old.with_name("old.old-1")) == before  # moved aside, not deleted
    assert [r["step"] for r in read_metrics(old)] == [1]


def test_a_failed_resume_leaves_the_run_as_it_was(runs, capsys):
    """F2: a resume refused for another model, or failing on a checkpoint that does not fit,
    changes nothing (config.yaml byte-identical), and a plain resume still works after it."""
    run = runs["root"] / "resume_fail"
    shutil.copytree(runs["split"], run)
    before = _tree(run)
    args = ["train", "--resume", str(run), "--set", "models.0.path=tiny:qwen2-bpe-add"]
    assert main(args) == 2
    assert "models.0.path" in capsys.readouterr().err
    state = run / "checkpoints" / "step_000003" / "policy" / "model.safetensors"
    weights = load_file(str(state))
    key = next(iter(weights))
    weights[key] = torch.zeros(3, 3)  # a checkpoint of another shape: found at load time
    from safetensors.torch import save_file

    save_file(weights, str(state), metadata={"format": "pt"})
    write_manifest(state.parents[1])  # an intact checkpoint, but of another shape
    before = _tree(run)
    assert main(["train", "--resume", str(run)]) == 2
    err = capsys.readouterr().err.strip()
    assert "step_000003" in err and "does not fit" in err and "\n" not in err
    assert _tree(run) == before


def test_a_damaged_checkpoint_and_a_torn_metrics_line_resume_exactly(runs, capsys):
    """F5, F6: the newest checkpoint's optimizer.pt is truncated and metrics.jsonl ends in a torn
    line (a crash mid-write). The resume names the file, falls back to the intact checkpoint,
    drops the torn line, and ends with the weights of the uninterrupted run."""
    run = runs["root"] / "torn"
    shutil.copytree(runs["split"], run)
    optimizer = run / "checkpoints" / "step_000003" / "policy" / "optimizer.pt"
    optimizer.write_bytes(optimizer.read_bytes()[: optimizer.stat().st_size // 2])
    with (run / "metrics.jsonl").open("a") as f:
        f.write('{"step": 4, "reward/me')
    assert main(["train", "--resume", str(run), "--set", "run.steps=4"]) == 0
    out = capsys.readouterr().out
    assert "optimizer.pt" in out and "step_000002 instead" in out and "torn last line" in out
    assert (run / "checkpoints" / "damaged-step_000003").is_dir()  # kept, out of the way
    a, b = _weights(runs["straight"], 4), _weights(run, 4)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert [r["step"] for r in read_metrics(run)] == [1, 2, 3, 4]


def test_checkpoint_files_are_checked_by_name(runs, tmp_path):
    """F6: truncated weights or optimizer state, and a missing file, are named."""
    ckpt = tmp_path / "ckpt"
    shutil.copytree(runs["straight"] / "checkpoints" / "step_000004", ckpt)
    assert checkpoint_problems(ckpt, ["policy"]) == []
    weights = ckpt / "policy" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-10])
    (ckpt / "policy" / "optimizer.pt").write_bytes(b"PK\x03\x04 torn")
    (ckpt / "policy" / "policy_state.json").unlink()
    problems = "\n".join(checkpoint_problems(ckpt, ["policy"]))
    assert "model.safetensors: truncated" in problems
    assert "optimizer.pt: truncated" in problems
    assert "policy_state.json: missing" in problems


def test_a_full_disk_while_checkpointing_says_so(runs, monkeypatch, capsys):
    """F7: torch's zip writer failing mid-file becomes one line that says 'no space left on
    device' and names the checkpoint; the earlier checkpoints stay intact."""
    run = runs["root"] / "disk_full"
    shutil.copytree(runs["split"], run)
    before = _tree(run / "checkpoints")

    def full(*_args, **_kwargs):
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 64 vs 0")

    monkeypatch.setattr(torch, "save", full)
    assert main(["train", "--resume", str(run), "--set", "run.steps=4"]) == 2
    err = capsys.readouterr().err.strip()
    assert "no space left on device" in err and "step_000004" in err and "\n" not in err
    assert _tree(run / "checkpoints") == before


def _damage(store: Path) -> Path:
    shard = sorted(store.rglob("*.parquet"))[-1]
    shard.write_bytes(shard.read_bytes()[:300])
    return shard


def test_a_damaged_peer_shard_stops_training_unless_skipped_explicitly(runs, capsys):
    """F3, F8: stored-peer training names the damaged shard and stops, before writing anything;
    with exchange.stored.skip_damaged_shards it trains on, warning and counting."""
    store = runs["root"] / "peer_store"
    shutil.copytree(runs["straight"] / "trajectories", store)
    shard = _damage(store)
    peer = [
        "exchange.source=stored",
        f"exchange.stored.path={store}",
        "exchange.ablation.weight=none",
    ]
    out = runs["root"] / "receiver"
    assert _train(out, runs["model"], "run.steps=1", *peer) == 2
    err = capsys.readouterr().err.strip()
    assert shard.name in err and "skip_damaged_shards" in err and "\n" not in err
    assert not out.exists()
    assert (
        _train(out, runs["model"], "run.steps=1", *peer, "exchange.stored.skip_damaged_shards=true")
        == 0
    )
    assert shard.name in capsys.readouterr().out
    assert read_metrics(out)[-1]["stored/damaged_shards"] == 1


def test_store_info_and_export_report_damage_and_fail(runs, tmp_path, capsys):
    """F4: a truncated and a byte-flipped shard: info lists both and exits 1, export writes
    nothing and exits 2 naming a shard."""
    store = tmp_path / "store"
    shutil.copytree(runs["straight"] / "trajectories", store)
    truncated = _damage(store)
    flipped = sorted(store.rglob("*.parquet"))[0]
    data = bytearray(flipped.read_bytes())
    for i in range(len(data) // 3, len(data) // 3 + 64):
        data[i] ^= 0xFF
    flipped.write_bytes(bytes(data))
    assert main(["store", "info", str(store)]) == 1
    out = capsys.readouterr().out
    assert truncated.name in out and flipped.name in out and "NOT OK" in out
    export = tmp_path / "rows.jsonl"
    assert main(["store", "export", str(store), "--out", str(export)]) == 2
    err = capsys.readouterr().err.strip()
    assert ".parquet" in err and "\n" not in err
    assert not export.exists() and not Path(f"{export}.tmp").exists()


def _store_with_rewards(uri: str) -> list[Problem]:
    """One step of a peer: 3 prompts x 4 responses with 1, 2 and 3 correct answers."""
    problems = [Problem(f"{i}+1=", str(i + 1), skill="add:1,1") for i in range(3)]
    rollouts, verdicts = [], []
    for i, p in enumerate(problems):
        texts = [p.gold if j <= i else "99" for j in range(4)]
        comps = tuple(Completion(t, (5, 6), (-0.5, -0.5), "stop") for t in texts)
        rollouts.append(Rollout(p, "peer", (1, 2), comps))
        verdicts.append(tuple(Verdict("correct" if j <= i else "wrong") for j in range(4)))
    prov = Provenance("r", "peer", "", "", "final_number", "", 1.0, 1.0, 0, 8)
    writer = StoreWriter(uri, run_id="r", run_meta={}, background=False)
    writer.write("peer", 0, group_rows(make_groups(rollouts, verdicts), step=0, prov=prov))
    writer.close()
    return problems


@pytest.mark.parametrize("mode,eps", [("grpo", 1e-6), ("grpo", 0.5), ("drgrpo", 1e-6)])
def test_stored_peer_advantages_follow_the_advantage_settings(tmp_path, mode, eps):
    uri = str(tmp_path / "store")
    problems = _store_with_rewards(uri)
    peer = StoredPeer(
        ExchangeConfig(
            enabled=True,
            source="stored",
            stored=StoredPeerConfig(path=uri),
            ablation=AblationConfig(weight="none"),
        )
    )
    with VerifierPool(workers=1) as pool:
        groups, _ = peer.source_groups(
            problems, step=0, pool=pool, verifier="final_number", adv=Advantage(mode, eps)
        )
    rewards = torch.tensor([[float(j <= i) for j in range(4)] for i in range(3)])
    expected = group_advantages(rewards, mode=mode, eps=eps)
    got = torch.tensor([g.advantages_G for g in groups], dtype=expected.dtype)
    assert torch.allclose(got, expected)
    default = group_advantages(rewards, mode="grpo", eps=1e-6)
    assert (mode, eps) == ("grpo", 1e-6) or not torch.allclose(got, default)


def test_eval_keeps_two_checkpoints_of_one_policy_apart(runs, tmp_path, capsys):
    """Two --model folders with one name (two checkpoints of a policy) give two rows."""
    ckpts = runs["straight"] / "checkpoints"
    first, second = ckpts / "step_000003" / "policy", ckpts / "step_000004" / "policy"
    out = tmp_path / "eval"
    args = ["eval", "--model", str(first), "--model", str(second), "--suite", "test"]
    args += ["--k", "1", "--runs", "1", "--limit", "2", "--workers", "1", "--out", str(out)]
    assert main(args) == 0
    models = json.loads((out / "eval.json").read_text())["models"]
    assert sorted(models) == ["step_000003/policy", "step_000004/policy"]
    table = (out / "eval.md").read_text()
    assert "step_000003/policy" in table and "step_000004/policy" in table


def test_a_full_disk_anywhere_else_names_the_path(runs, monkeypatch, capsys):
    """Any other write that hits ENOSPC (here the summary) is one line naming the file."""
    import errno

    import graft.trainer

    run = runs["root"] / "disk_full_summary"
    shutil.copytree(runs["split"], run)

    def full(run_dir, *_args, **_kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(run_dir / "summary.json"))

    monkeypatch.setattr(graft.trainer, "write_summary", full)
    assert main(["train", "--resume", str(run), "--set", "run.steps=4"]) == 2
    err = capsys.readouterr().err.strip()
    assert "no space left on device" in err and "summary.json" in err and "\n" not in err


def test_resuming_a_finished_run_says_so_and_changes_nothing(runs, capsys):
    """A resume of a run that already reached run.steps: one line, exit 0, not a byte changed
    (summary.json keeps the run's final metrics)."""
    run = runs["root"] / "finished"
    shutil.copytree(runs["straight"], run)
    before = _tree(run)
    assert main(["train", "--resume", str(run)]) == 0
    out = capsys.readouterr().out.strip()
    assert out.startswith(f"run {run} already finished at step 4; nothing to do"), out
    assert "\n" not in out
    assert _tree(run) == before
    assert json.loads((run / "summary.json").read_text())  # the final metrics, not {}


def test_an_export_aimed_at_the_store_itself_is_refused(runs, tmp_path, monkeypatch, capsys):
    """`store export S --out S/store.json` would replace the store's manifest: refused in one line,
    the store stays byte-identical and valid. A directory as --out, or an export that stops
    half-way, leaves no temporary file behind."""
    store = tmp_path / "store"
    shutil.copytree(runs["straight"] / "trajectories", store)
    before = _tree(store)
    for target in (store / "store.json", store / "rows.jsonl", tmp_path):
        assert main(["store", "export", str(store), "--out", str(target)]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("graft: error: --out") and "\n" not in err, err
    assert _tree(store) == before
    assert main(["store", "validate", str(store)]) == 0
    import graft.cli.store

    def stops_half_way(table, out):
        out.write("{}\n")
        raise KeyboardInterrupt

    monkeypatch.setattr(graft.cli.store, "_write_rows", stops_half_way)
    rows = tmp_path / "rows.jsonl"
    assert main(["store", "export", str(store), "--out", str(rows)]) == 130
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store"]  # no rows.jsonl(.tmp)
    assert _tree(store) == before


INTERRUPTIBLE = """
import pathlib, signal, sys, time
# Ctrl-C as a terminal delivers it, whatever this process inherited (an ignored SIGINT survives
# exec, and Python then installs no handler).
signal.signal(signal.SIGINT, signal.default_int_handler)
import graft.trainer as trainer

exchange = trainer.Trainer.exchange

def waiting_exchange(self, step, groups):
    if step == 2:  # mid-step 3: rolled out and verified, not trained on yet
        pathlib.Path(sys.argv[1]).write_text("ready")
        time.sleep(600)
    return exchange(self, step, groups)

trainer.Trainer.exchange = waiting_exchange
from graft.cli import main
sys.exit(main(sys.argv[2:]))
"""


def signal_when_ready(command: list[str], ready: Path, sig: int) -> tuple[subprocess.Popen, str]:
    """Start `command`, send it `sig` once it has written the file `ready` (it waits there), and
    wait for it to end; the process and its stderr."""
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 600
        while not ready.exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the run never reached the point it waits at"
            time.sleep(0.05)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return proc, err


@pytest.mark.slow
def test_ctrl_c_mid_step_stops_in_one_line_and_resumes_exactly(runs, tmp_path, capsys):
    """SIGINT to `graft train` in the middle of step 3: exit 130, one line saying where the run
    stands, the checkpoint of step 2 intact; the resume ends with the uninterrupted run's
    weights."""
    run, ready = tmp_path / "interrupted", tmp_path / "ready"
    sets = _sets(*SMALL, f"models.0.path={runs['model']}", "run.steps=4", "run.save_every=1")
    command = [sys.executable, "-c", INTERRUPTIBLE, str(ready), "train", "--out", str(run), *sets]
    proc, err = signal_when_ready(command, ready, signal.SIGINT)
    assert proc.returncode == 130, err
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.startswith("graft:")]
    assert lines == [
        f"graft: interrupted at step 3 of 4; the last checkpoint (step 2) is intact; resume with "
        f"graft train --resume {run}"
    ], err
    assert checkpoint_problems(run / "checkpoints" / "step_000002", ["policy"]) == []
    assert [r["step"] for r in read_metrics(run)] == [1, 2]
    assert main(["train", "--resume", str(run)]) == 0
    a, b = _weights(runs["straight"], 4), _weights(run, 4)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert [r["step"] for r in read_metrics(run)] == [1, 2, 3, 4]


def _poison_step(monkeypatch, bad_step: int) -> None:
    """The update of step `bad_step` (0-based) meets a NaN loss and NaN gradients, as an
    overflowing forward pass gives them."""
    import graft.trainer
    import graft.training.update

    current = {"step": -1}
    step, backward = graft.trainer.Trainer.step, graft.training.update.minibatch_backward

    def tracking_step(self, s):
        current["step"] = s
        return step(self, s)

    def poisoned(model, *args, **kwargs):
        stats = backward(model, *args, **kwargs)
        if current["step"] == bad_step:
            stats["loss"] = float("nan")
            for p in model.parameters():
                if p.grad is not None:
                    p.grad.fill_(float("nan"))
        return stats

    monkeypatch.setattr(graft.trainer.Trainer, "step", tracking_step)
    monkeypatch.setattr(graft.training.update, "minibatch_backward", poisoned)


def _all_finite(run: Path) -> bool:
    files = list((run / "checkpoints").rglob("model.safetensors"))
    assert files
    return all(bool(torch.isfinite(t).all()) for f in files for t in load_file(str(f)).values())


def test_a_nonfinite_step_stops_before_any_nan_checkpoint(runs, tmp_path, monkeypatch, capsys):
    """lr=inf is refused before anything is created; a NaN loss/gradient at step 3 stops the run
    before its optimizer step, in one line naming policy and step, with no checkpoint holding
    non-finite weights; the resume then ends exactly as the uninterrupted run."""
    out = tmp_path / "inf"
    assert _train(out, runs["model"], "run.steps=4", "models.0.optim.lr=inf") == 2
    assert "models.0.optim.lr" in capsys.readouterr().err and not out.exists()
    run = tmp_path / "nan"
    with monkeypatch.context() as patch:
        _poison_step(patch, bad_step=2)
        assert _train(run, runs["model"], "run.steps=4", "run.save_every=1") == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("graft: error: policy 'policy'"), err
    assert "step 3" in err and "last checkpoint (step 2)" in err and "algo.nonfinite" in err
    assert _all_finite(run)
    assert sorted(p.name for p in (run / "checkpoints").glob("step_*")) == [
        "step_000001",
        "step_000002",
    ]
    assert [r["step"] for r in read_metrics(run)] == [1, 2]
    assert main(["train", "--resume", str(run)]) == 0
    a, b = _weights(runs["straight"], 4), _weights(run, 4)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_nonfinite_step_can_be_skipped_and_counted(runs, tmp_path, monkeypatch):
    run = tmp_path / "skip"
    _poison_step(monkeypatch, bad_step=2)
    assert _train(run, runs["model"], "run.steps=4", "algo.nonfinite=skip") == 0
    skipped = [r["optim/nonfinite_steps"] for r in read_metrics(run)]
    assert skipped == [0.0, 0.0, 2.0, 0.0]  # both minibatches of step 3
    assert _all_finite(run)
    assert all(math.isfinite(r["grad_norm"]) for r in read_metrics(run))


class _FullDisk:
    """The store writer's filesystem with a full disk under `shards/`: every write there fails
    with ENOSPC (the rest of the store, and reads, go through)."""

    def __init__(self, fs) -> None:
        self._fs = fs

    def __getattr__(self, name):
        return getattr(self._fs, name)

    def open_output_stream(self, path, *args, **kwargs):
        if "/shards/" in path:
            raise OSError(errno.ENOSPC, "No space left on device", path)
        return self._fs.open_output_stream(path, *args, **kwargs)


def test_a_full_disk_under_the_store_ends_in_one_line_and_loses_nothing(runs, monkeypatch, capsys):
    """The store's disk fills up during step 4: one line naming the store, no checkpoint of a
    step whose rows are missing, the earlier shards and checkpoints byte-identical; once there
    is space, the resume ends with the uninterrupted run's weights and a valid store."""
    import graft.store.writer as writer

    run = runs["root"] / "store_full"
    shutil.copytree(runs["split"], run)
    shards = lambda: {k: v for k, v in _tree(run / "trajectories").items() if "shards/" in k}  # noqa: E731
    before, checkpoints = shards(), _tree(run / "checkpoints")
    real = writer.open_filesystem
    with monkeypatch.context() as patch:
        patch.setattr(
            writer, "open_filesystem", lambda uri: (_FullDisk(real(uri)[0]), real(uri)[1])
        )
        assert main(["train", "--resume", str(run), "--set", "run.steps=4"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "no space left on device" in err and "trajectory store" in err, err
    assert "--resume" in err
    assert _tree(run / "checkpoints") == checkpoints
    assert {k: v for k, v in shards().items() if not Path(k).name.startswith(".")} == before
    assert main(["train", "--resume", str(run), "--set", "run.steps=4"]) == 0
    a, b = _weights(runs["straight"], 4), _weights(run, 4)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert main(["store", "validate", str(run / "trajectories")]) == 0
