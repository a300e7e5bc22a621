"""`graft store export --format hf`: a store as a dataset others load with `datasets`, and that
goes back into `graft train` as a stored peer with the same token ids, log-probs, rewards and
advantages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import TINY_RUN
from graft.cli import main
from graft.rundir import read_metrics
from graft.store import TrajectoryStore

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "graft_tiny.yaml"
COMMON = [*TINY_RUN, "models.0.optim.lr=2e-5"]
KEYS = ("model", "run_id", "step", "prompt_id", "member")


def _train(out: Path, *sets: str) -> None:
    args = ["train", str(CONFIG), "--out", str(out)]
    for s in [*COMMON, *sets]:
        args += ["--set", s]
    assert main(args) == 0


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A llama GRPO run's store, and its export as a dataset folder."""
    root = tmp_path_factory.mktemp("export")
    _train(
        root / "llama",
        "models=[{name: llama, path: 'tiny:llama-char-add'}]",
        "run.steps=3",
    )
    source = root / "llama" / "trajectories"
    out = root / "dataset"
    assert main(["store", "export", str(source), "--format", "hf", "--out", str(out)]) == 0
    return source, out


def _by_key(rows: list[dict]) -> dict[tuple, dict]:
    return {tuple(r[k] for k in KEYS): r for r in rows}


def test_the_export_holds_every_row_as_it_was(exported):
    source, out = exported
    before = TrajectoryStore(str(source)).scan()
    after = TrajectoryStore(str(out)).scan()
    assert before.num_rows == after.num_rows == 3 * 8 * 4
    assert after.equals(before)  # every column, token ids and float32 log-probs included
    assert TrajectoryStore(str(out)).validate().ok  # each shard proven by its checksum
    assert TrajectoryStore(str(out)).runs() == TrajectoryStore(str(source)).runs()


def test_datasets_loads_the_folder_with_the_same_values(exported, monkeypatch, tmp_path):
    datasets = pytest.importorskip("datasets")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    source, out = exported
    loaded = datasets.load_dataset(str(out), cache_dir=str(tmp_path / "hf"))["train"]
    store = _by_key(TrajectoryStore(str(source)).scan().to_pylist())
    rows = _by_key(loaded.to_list())
    assert rows.keys() == store.keys()
    for key, row in rows.items():
        want = store[key]
        assert row["token_ids"] == want["token_ids"] and row["logprobs"] == want["logprobs"]
        assert (row["reward"], row["advantage"]) == (want["reward"], want["advantage"])
    card = (out / "README.md").read_text()
    assert "shards/**/*.parquet" in card and "final_number" in card and "`llama`" in card
    assert "| `advantage` | `double` |" in card  # the record's columns, from the writer's schema


def test_the_export_trains_a_stored_peer_exactly_as_the_store_does(exported, tmp_path):
    source, out = exported
    runs = {}
    for name, path in (("store", source), ("export", out)):
        _train(
            tmp_path / name,
            "models=[{name: qwen, path: 'tiny:qwen2-bpe-add'}]",
            "run.steps=3",
            "exchange.source=stored",
            f"exchange.stored.path={path}",
            "exchange.stored.records=same_step",
            "exchange.delta=0.0",
        )
        runs[name] = [
            {k: v for k, v in r.items() if not k.startswith(("time/", "cost/", "tokens_per"))}
            for r in read_metrics(tmp_path / name)
        ]
    assert sum(r["x/stored:llama->qwen/admitted"] for r in runs["store"]) > 0
    assert json.dumps(runs["export"]) == json.dumps(runs["store"])  # loss and grads included


@pytest.mark.parametrize(
    ("out", "said"),
    [
        (None, "--out: --format hf writes a folder; name it with --out DIR"),
        ("inside", "inside the store"),
        ("file/x", "is a file, not a directory"),
        ("full", "not empty; name a new folder"),
    ],
)
def test_a_bad_target_is_refused_in_one_line_and_nothing_is_written(
    exported, tmp_path, capsys, out, said
):
    source, _ = exported
    (tmp_path / "file").write_text("")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    target = {None: None, "inside": source / "x"}.get(out, tmp_path / str(out))
    before = sorted(p.name for p in tmp_path.rglob("*"))
    args = ["store", "export", str(source), "--format", "hf"]
    assert main([*args, *(["--out", str(target)] if target else [])]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and said in err[0], err
    assert sorted(p.name for p in tmp_path.rglob("*")) == before
    assert not (source / "x").exists()
