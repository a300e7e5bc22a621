"""`run.report_to`: a real run logs to TensorBoard, W&B (offline), MLflow (a local SQLite store)
and trackio (its local store); each tracker's own reader gives back what metrics.jsonl holds, the
resolved config and the curves PNG, and a resumed run continues the same tracker run.

The tracker tests need the `trackers` extra and run in `make test-trackers` (which `make test`
also runs); the one-line failures that need no tracker installed run with the rest of the suite.
"""

from __future__ import annotations

import importlib.util
import json
import struct
import sys
from pathlib import Path

import pytest

from graft.cli import main
from graft.rundir import read_metrics
from graft.rundir.trackers import mlflow_key, numbers

SETS = [
    "run.progress=false",
    "run.save_every=2",
    "run.project=graft-test",
    "task.arithmetic.num_train=16",
    "task.arithmetic.num_test=8",
    "rollout.prompts_per_step=4",
    "rollout.group_size=4",
    "rollout.max_new_tokens=6",
    "eval.every=2",
    "eval.samples=2",
    "eval.temperature=1.0",
    "verify.workers=1",
    "models.0.path=tiny:llama-char-add",
    "models.0.optim.lr=1e-3",
]
ALL = "run.report_to=[tensorboard,wandb,mlflow,trackio]"


def _sets(assignments):
    return [x for a in assignments for x in ("--set", a)]


@pytest.fixture
def tracker_env(tmp_path, monkeypatch):
    """Every tracker local and offline, and writing under tmp_path only. W&B keeps the settings
    it first saw for the life of the process (an earlier test's online check among them): they
    are dropped, so that it reads this test's."""
    if "wandb" in sys.modules:
        sys.modules["wandb"].teardown()
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))
    monkeypatch.setenv("WANDB_CACHE_DIR", str(tmp_path / "wandb-cache"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv("TRACKIO_DIR", str(tmp_path / "trackio"))
    monkeypatch.delenv("TRACKIO_SPACE_ID", raising=False)
    monkeypatch.chdir(tmp_path)  # MLflow keeps a SQLite store's artifacts under ./mlruns
    return tmp_path


def _expected(run_dir: Path) -> dict[int, dict[str, float]]:
    return {
        r["step"]: numbers({k: v for k, v in r.items() if k != "step"})
        for r in read_metrics(run_dir)
    }


def _last_per_step(rows) -> dict[int, dict[str, float]]:
    """(step, key, value) rows in logging order -> each step's last value per key."""
    out: dict[int, dict[str, float]] = {}
    for step, key, value in rows:
        out.setdefault(int(step), {})[key] = value
    return out


def _close(a: dict, b: dict, rel: float = 0.0) -> None:
    assert a.keys() == b.keys()
    for step in a:
        assert a[step].keys() == b[step].keys(), step
        for key, value in a[step].items():
            assert b[step][key] == pytest.approx(value, rel=rel, abs=rel), (step, key)


# ---------------------------------------------------------------------- the readers
def _tensorboard(run_dir: Path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0, "images": 0})
    acc.Reload()
    rows = [(e.step, tag, e.value) for tag in acc.Tags()["scalars"] for e in acc.Scalars(tag)]
    return _last_per_step(sorted(rows, key=lambda r: r[0])), acc.Tags()["images"]


def _wandb_records(path: Path):
    """The records of a W&B transaction log (.wandb): LevelDB-style framing in 32 KiB blocks
    after a 7-byte header, each record one of W&B's own protobuf `Record` messages."""
    from wandb.proto import wandb_internal_pb2

    data, block = path.read_bytes(), 32768
    assert data[:4] == b":W&B"
    pos, pieces = 7, b""
    while pos + 7 <= len(data):
        room = block - pos % block
        if room < 7:
            pos += room
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if kind == 0:
            pos += room
            continue
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        pieces = chunk if kind in (1, 2) else pieces + chunk
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pieces)
            yield record


def _wandb(run_dir: Path, run_id: str):
    rows, config, images, runs = [], {}, set(), []
    for path in sorted((run_dir / "wandb").glob(f"offline-run-*-{run_id}/run-{run_id}.wandb")):
        runs.append(path)
        for record in _wandb_records(path):
            kind = record.WhichOneof("record_type")
            if kind == "run":
                config.update({u.key: json.loads(u.value_json) for u in record.run.config.update})
            elif kind == "history":
                items = [(i.key or "/".join(i.nested_key), i) for i in record.history.item]
                row = {k: json.loads(i.value_json) for k, i in items if len(i.nested_key) < 2}
                images |= {i.nested_key[0] for _, i in items if len(i.nested_key) > 1}
                step = row.pop("step")
                rows += [(step, k, v) for k, v in row.items() if not k.startswith("_")]
    return _last_per_step(rows), config, images, runs


def _mlflow(run_id: str):
    from mlflow.tracking import MlflowClient

    client = MlflowClient()
    run = client.get_run(run_id)
    rows = [
        (m.step, key, m.value)
        for key in run.data.metrics
        for m in sorted(client.get_metric_history(run_id, key), key=lambda m: m.timestamp)
    ]
    artifacts = {a.path for a in client.list_artifacts(run_id)}
    experiment = client.get_experiment(run.info.experiment_id)
    runs = client.search_runs([experiment.experiment_id])
    return _last_per_step(rows), run.data.params, artifacts, experiment.name, len(runs)


def _trackio(project: str, name: str):
    from trackio.sqlite_storage import SQLiteStorage

    rows, images = [], set()
    for log in SQLiteStorage.get_logs(project, name):
        for key, value in log.items():
            if isinstance(value, dict):
                images.add(key)
            elif key not in ("step", "timestamp"):
                rows.append((log["step"], key, value))
    return _last_per_step(rows), SQLiteStorage.get_run_config(project, name), images


# ---------------------------------------------------------------------- the tests
@pytest.mark.trackers
def test_every_tracker_gets_the_metrics_config_and_curves_and_a_resume_continues_its_run(
    tracker_env,
):
    run_dir = tracker_env / "run"
    assert main(["train", "--out", str(run_dir), *_sets([*SETS, ALL, "run.steps=2"])]) == 0
    first = json.loads((run_dir / "trackers.json").read_text())
    assert main(["train", "--resume", str(run_dir), "--set", "run.steps=4"]) == 0
    ids = json.loads((run_dir / "trackers.json").read_text())
    assert ids == first  # the resume reopened the same tracker runs

    want = _expected(run_dir)
    assert sorted(want) == [0, 1, 2, 3, 4]
    assert any("@" in k for k in want[4]), "the evaluation's avg@k keys are among the metrics"
    assert {"cost/flops", "cost/cum/flops", "contrast/fill_frac"} <= set(want[4])  # cost too

    board, board_images = _tensorboard(run_dir)
    _close({s: {k: v for k, v in m.items()} for s, m in want.items()}, board, rel=1e-6)  # float32
    assert "plots/curves" in board_images

    history, config, images, files = _wandb(run_dir, ids["wandb"]["id"])
    assert len(files) == 2  # one offline log per process, the same run id: `wandb sync` joins them
    _close(want, history)
    assert config["run"]["seed"] == 0 and config["models"][0]["path"] == "tiny:llama-char-add"
    assert "plots/curves" in images

    history, params, artifacts, experiment, count = _mlflow(ids["mlflow"]["run_id"])
    _close({s: {mlflow_key(k): v for k, v in m.items()} for s, m in want.items()}, history)
    assert params["run.seed"] == "0" and params["rollout.group_size"] == "4"
    assert "curves.png" in artifacts and (experiment, count) == ("graft-test", 1)

    history, config, images = _trackio("graft-test", ids["trackio"]["name"])
    _close(want, history)
    assert config["rollout"]["group_size"] == 4 and "plots/curves" in images


def _one_line_error(capsys, args) -> str:
    assert main(["train", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


@pytest.mark.trackers
def test_wandb_online_without_a_key_and_an_unreachable_mlflow_server_stop_before_any_work(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    monkeypatch.setenv("HOME", str(tmp_path))
    run_dir = tmp_path / "run"
    line = _one_line_error(capsys, ["--out", str(run_dir), *_sets([*SETS, "run.report_to=wandb"])])
    assert line.startswith("graft: error: run.report_to: wandb has no API key (run `wandb login`")
    assert "WANDB_MODE=offline" in line and not run_dir.exists()

    demo = tmp_path / "demo"  # the demo checks its trackers before hours of training
    assert main(["demo", "--quick", "--out", str(demo), "--report-to", "wandb"]) == 2
    assert "wandb has no API key" in capsys.readouterr().err and not demo.exists()

    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:9")  # the discard port: closed
    line = _one_line_error(
        capsys, ["--out", str(run_dir), *_sets([*SETS, "run.report_to=[mlflow]"])]
    )
    assert line.startswith("graft: error: run.report_to: mlflow cannot reach http://127.0.0.1:9 (")
    assert not run_dir.exists()


def test_a_tracker_that_is_not_installed_and_the_old_tensorboard_key_are_one_line(
    tmp_path, monkeypatch, capsys
):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "trackio" else real(name, *a)
    )
    run_dir = tmp_path / "run"
    out = ["--out", str(run_dir)]
    line = _one_line_error(capsys, [*out, *_sets([*SETS, "run.report_to=[trackio]"])])
    assert (
        line
        == "graft: error: run.report_to: trackio is not installed: pip install 'trackio<1,>=0.43' "
        "(or pip install -e '.[trackio]' in a clone of graft)"
    )
    assert not run_dir.exists()
    line = _one_line_error(capsys, [*out, *_sets([*SETS, "run.tensorboard=true"])])
    assert line.startswith("graft: error: run.tensorboard: replaced by run.report_to")
    line = _one_line_error(capsys, [*out, *_sets([*SETS, "run.report_to=[wandb,wandb]"])])
    assert line == "graft: error: run.report_to: names wandb more than once"


@pytest.mark.trackers
def test_compare_logs_its_png_and_tables_and_a_second_compare_reuses_the_run(
    tracker_env, capsys, monkeypatch
):
    from test_compare import _write_run

    monkeypatch.chdir(Path(__file__).parents[1])  # _write_run reads configs/grpo_tiny.yaml
    for seed in range(3):
        for method, lr in (("base", "1e-5"), ("fast", "3e-5")):
            sets = ["exchange.enabled=false", "eval.every=5", f"models.0.optim.lr={lr}"]
            _write_run(tracker_env / "runs" / f"{method}_{seed}", sets, seed=seed)
    monkeypatch.chdir(tracker_env)
    out = tracker_env / "out"
    argv = ["compare", str(tracker_env / "runs"), "--out", str(out), "--baseline"]
    argv += ["model.optim.lr=1e-05", "--report-to", "tensorboard,wandb,mlflow,trackio"]
    assert main(argv) == 0
    first = json.loads((out / "compare.trackers.json").read_text())
    assert main(argv) == 0
    ids = json.loads((out / "compare.trackers.json").read_text())
    assert ids == first

    _, params, artifacts, _, count = _mlflow(ids["mlflow"]["run_id"])
    assert {"compare.png", "compare.md", "compare.json"} <= artifacts and count == 1
    assert params["baseline"] == "model.optim.lr=1e-05"
    _, _, images, _ = _wandb(out, ids["wandb"]["id"])
    assert "plots/compare" in images
    _, _, images = _trackio("graft", ids["trackio"]["name"])
    assert ids["trackio"]["name"].startswith("compare-out-") and "plots/compare" in images
    _, board_images = _tensorboard(out)
    assert "plots/compare" in board_images
    line = _one_line_error_of(["compare", str(out), "--report-to", "neptune"], capsys)
    assert "neptune: expected any of tensorboard, wandb, mlflow, trackio" in line


def _one_line_error_of(argv, capsys) -> str:
    with pytest.raises(SystemExit):
        main(argv)
    return capsys.readouterr().err.strip().splitlines()[-1]


def test_an_unreadable_trackers_json_is_named_and_left_as_it_is(tmp_path):
    from graft.errors import DataError
    from graft.rundir.trackers import open_trackers

    for text in ("{bad", '["wandb"]'):
        (tmp_path / "trackers.json").write_text(text)
        with pytest.raises(DataError, match=r"trackers\.json: .*remove it to start"):
            open_trackers(("tensorboard",), tmp_path, project="p", config={})
        assert (tmp_path / "trackers.json").read_text() == text


@pytest.mark.trackers
def test_graft_sft_reports_to_a_tracker_and_a_resume_continues_its_run(tracker_env):
    """`graft sft` logs what `graft train` logs to the trackers it is given: every metric of
    metrics.jsonl (its cost counts included), continued across a resume."""
    from test_sft import SMALL as SFT_SETS
    from test_sft import _store

    store, run_dir = tracker_env / "store", tracker_env / "sft"
    _store(store)
    sets = [*SFT_SETS, "models.0.path=tiny:llama-char-add", "run.steps=2", "run.save_every=1"]
    sets += ["eval.every=1", "run.report_to=[tensorboard]"]
    assert main(["sft", "--store", str(store), "--out", str(run_dir), *_sets(sets)]) == 0
    assert main(["sft", "--resume", str(run_dir), "--set", "run.steps=3"]) == 0
    want = _expected(run_dir)
    assert sorted(want) == [0, 1, 2, 3]
    assert {"sft/loss", "sft/val_loss", "cost/cum/train_tokens"} <= set(want[3])
    board, _ = _tensorboard(run_dir)
    _close(want, board, rel=1e-6)
