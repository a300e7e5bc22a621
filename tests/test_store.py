"""The trajectory store: round trip, crash safety, bad files, schema versions, lookups, CLI."""

import json
import os
import signal
import subprocess
import sys
import textwrap

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from graft.cli import main
from graft.groups import make_groups
from graft.store import (
    SCHEMA,
    SCHEMA_VERSION,
    Provenance,
    StoreError,
    StoreSchemaError,
    StoreWriter,
    TrajectoryStore,
    check_store_target,
    group_rows,
)
from graft.store.checksum import record_for, sidecar_rel
from graft.types import Completion, Problem, Rollout, Verdict

PROV = Provenance(
    "run-a", "alpha", "rev123", "tok/path", "final_number", "final_number;1", 1.0, 1.0, 0, 16
)


def _groups(step, num_prompts=3, n=4, seed=0):
    gen = torch.Generator().manual_seed(seed + step)
    rollouts, verdicts = [], []
    for p in range(num_prompts):
        problem = Problem(f"{p}+{step}=", str(p + step), skill="add:1,1")
        comps = []
        for j in range(n):
            length = int(torch.randint(1, 6, (1,), generator=gen))
            ids = tuple(torch.randint(0, 99, (length,), generator=gen).tolist())
            lps = tuple((-torch.rand(length, generator=gen)).tolist())  # float32 values
            comps.append(Completion(f"resp {p}/{j} é", ids, lps, "stop" if j % 2 else "length"))
        rollouts.append(Rollout(problem, "alpha", (1, 2), tuple(comps)))
        verdicts.append(
            tuple(Verdict("correct" if (p + j) % 3 == 0 else "wrong", f"d{j}") for j in range(n))
        )
    return make_groups(rollouts, verdicts)


def _write(uri, steps=(0, 1, 2), model="alpha", run_id="run-a", background=True):
    writer = StoreWriter(uri, run_id=run_id, run_meta={"note": "test"}, background=background)
    prov = Provenance(
        run_id,
        model,
        *[
            getattr(PROV, f)
            for f in (
                "model_revision",
                "tokenizer",
                "verifier",
                "verifier_version",
                "temperature",
                "top_p",
                "top_k",
                "max_new_tokens",
            )
        ],
    )
    for step in steps:
        writer.write(
            model,
            step,
            group_rows(_groups(step), step=step, prov=prov, replaced=[True, False, False]),
        )
    writer.close()


def test_round_trip_every_field(tmp_path):
    uri = str(tmp_path / "store")
    _write(uri)
    store = TrajectoryStore(uri)
    table = store.scan()
    assert table.num_rows == 3 * 3 * 4
    rows = {(r["step"], r["prompt_id"], r["member"]): r for r in table.to_pylist()}
    for step in (0, 1, 2):
        for gi, group in enumerate(_groups(step)):
            n = group.size
            mean = sum(group.rewards_G) / n
            for j, c in enumerate(group.rollout.completions_G):
                row = rows[step, group.problem.id, j]
                assert row["response"] == c.text and tuple(row["token_ids"]) == c.token_ids
                assert tuple(row["logprobs"]) == c.logprobs  # identical, not approximately
                assert row["finish_reason"] == c.finish_reason
                assert row["verdict"] == group.verdicts_G[j].category
                assert row["verdict_detail"] == group.verdicts_G[j].detail
                assert row["reward"] == group.verdicts_G[j].reward
                assert row["advantage"] == group.advantages_G[j]
                assert row["group_successes"] == group.num_correct and row["group_size"] == n
                assert row["group_mean"] == pytest.approx(mean)
                assert row["prompt"] == group.problem.prompt and row["gold"] == group.problem.gold
                assert row["skill"] == "add:1,1" and row["replaced"] == (gi == 0)
                assert (row["run_id"], row["model"], row["model_revision"], row["tokenizer"]) == (
                    "run-a",
                    "alpha",
                    "rev123",
                    "tok/path",
                )
                assert (row["verifier"], row["verifier_version"]) == (
                    "final_number",
                    "final_number;1",
                )
                assert (row["temperature"], row["top_p"], row["top_k"], row["max_new_tokens"]) == (
                    1.0,
                    1.0,
                    0,
                    16,
                )
                assert (row["schema_version"], row["round"]) == (SCHEMA_VERSION, 0)
    assert store.runs()["run-a"] == {"note": "test"}


def test_lookup_and_filters(tmp_path):
    uri = str(tmp_path / "store")
    _write(uri)
    _write(uri, steps=(0,), model="beta", run_id="run-b")
    store = TrajectoryStore(uri)
    pid = _groups(1)[0].problem.id
    found = store.lookup([pid, "no-such-prompt"], model="alpha")
    assert list(found) == [pid] and [r["member"] for r in found[pid]] == [0, 1, 2, 3]
    assert {r["step"] for r in found[pid]} == {1}
    assert store.lookup([pid], model="alpha", step=0) == {}
    assert store.scan(models=["beta"]).num_rows == 12
    assert set(store.scan(steps=(1, 2))["step"].to_pylist()) == {1, 2}
    assert set(store.scan(min_reward=1.0)["reward"].to_pylist()) == {1.0}
    with pytest.raises(StoreError, match="no rollouts of model 'gamma'"):
        store.lookup([pid], model="gamma")
    info = store.info()
    assert info["models"]["alpha"]["rows"] == 36 and info["models"]["alpha"]["steps"] == [0, 2]
    assert info["schema_versions"] == [SCHEMA_VERSION]


def test_fsspec_uri(tmp_path):
    uri = "memory://graft-test-store"
    _write(uri, background=False)
    store = TrajectoryStore(uri)
    assert store.scan().num_rows == 36 and store.validate().ok


WRITER = textwrap.dedent("""
    import sys
    sys.path.insert(0, {tests!r})
    from test_store import _groups
    from graft.store import Provenance, StoreWriter, group_rows
    prov = Provenance("run-k", "alpha", "r", "t", "v", "v;1", 1.0, 1.0, 0, 8)
    writer = StoreWriter({uri!r}, run_id="run-k", run_meta={{}}, background=False)
    step = 0
    while True:
        rows = group_rows(_groups(step, num_prompts=400, n=8), step=step, prov=prov)
        writer.write("alpha", step, rows)
        print(step, flush=True)
        step += 1
""")


def test_sigkill_mid_write_leaves_a_valid_store(tmp_path):
    uri = str(tmp_path / "store")
    script = WRITER.format(tests=os.path.dirname(__file__), uri=uri)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    done = [int(proc.stdout.readline()) for _ in range(3)]  # three shards completed
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    store = TrajectoryStore(uri)
    report = store.validate()
    assert report.ok, report.problems
    steps = set(store.scan(columns=["step"])["step"].to_pylist())
    assert set(done) <= steps
    for step in steps:  # no partial shard is read: every shard holds its whole step
        assert store.scan(steps=(step, step), columns=["step"]).num_rows == 400 * 8


def test_bad_files_are_reported_by_name_and_the_rest_stays_readable(tmp_path, capsys):
    uri = tmp_path / "store"
    _write(str(uri))
    shard_dir = uri / "shards" / "run=run-a" / "model=alpha"
    (shard_dir / "step_00000099.parquet").write_bytes(b"not parquet at all")
    (uri / "shards" / "notes.txt").write_text("hello")
    pq.write_table(pa.table({"x": [1]}), shard_dir / "step_00000098.parquet")
    store = TrajectoryStore(str(uri))
    report = store.validate()
    names = " ".join(p for p, _ in report.problems)
    assert "step_00000099.parquet" in names and "notes.txt" in names
    assert "step_00000098.parquet" in names
    assert report.rows == 36
    with pytest.raises(StoreError, match=r"step_00000098\.parquet"):
        store.scan()  # a strict store never skips a damaged shard
    skipped = []
    lenient = TrajectoryStore(str(uri), strict=False, on_damage=lambda p, _: skipped.append(p))
    assert lenient.scan().num_rows == 36
    assert len(lenient.problems) == 2 and len(skipped) == 2
    assert main(["store", "validate", str(uri)]) == 1
    out = capsys.readouterr().out
    assert "step_00000099.parquet" in out and "notes.txt" in out


def _commit(uri, rel, table):
    """Write a shard and its checksum as a (possibly newer) graft would."""
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    data = sink.getvalue()
    (uri / rel).write_bytes(data.to_pybytes())
    record = record_for(data, shard_rel=rel, rows=table.num_rows)
    (uri / sidecar_rel(rel)).parent.mkdir(parents=True, exist_ok=True)
    (uri / sidecar_rel(rel)).write_text(json.dumps(record))


def test_newer_schema_is_refused(tmp_path):
    uri = tmp_path / "store"
    _write(str(uri))
    table = pa.table({name: [] for name in SCHEMA.names}, schema=SCHEMA)
    later = SCHEMA_VERSION + 1
    newer = table.replace_schema_metadata(
        {b"graft.format": b"graft-trajectory-store", b"graft.schema_version": str(later).encode()}
    )
    _commit(uri, "shards/run=run-a/model=alpha/step_00000050.parquet", newer)
    store = TrajectoryStore(str(uri))
    with pytest.raises(StoreSchemaError, match=rf"schema version {later}.*up to {SCHEMA_VERSION}"):
        store.scan()
    assert any(f"schema version {later}" in why for _, why in store.validate().problems)


def test_a_version_1_shard_reads_its_rollouts_as_the_steps_own(tmp_path):
    """Version 1 had no `round` column: its rows read as round 0 (it stored no other), beside
    version-2 shards of the same store, whatever columns are asked for."""
    uri = tmp_path / "store"
    _write(str(uri))
    current = TrajectoryStore(str(uri)).scan()
    old = current.drop_columns(["round", "log_reward"]).replace_schema_metadata(
        {b"graft.format": b"graft-trajectory-store", b"graft.schema_version": b"1"}
    )
    old = old.set_column(0, "schema_version", pa.array([1] * old.num_rows, pa.int16()))
    _commit(uri, "shards/run=run-a/model=alpha/step_00000050.parquet", old)
    store = TrajectoryStore(str(uri))
    both = store.scan()
    assert both.num_rows == 2 * current.num_rows and both.schema.names == SCHEMA.names
    assert set(both["round"].to_pylist()) == {0}
    assert set(both["log_reward"].to_pylist()) == {None}  # version 3's column: not imported
    assert sorted(set(both["schema_version"].to_pylist())) == [1, SCHEMA_VERSION]
    assert store.scan(columns=["step", "round"]).column_names == ["step", "round"]
    assert store.scan(steps=(50, 50), columns=["round"])["round"].to_pylist() == [0] * old.num_rows
    assert not store.validate().problems


def test_an_export_writes_a_version_1_shard_at_the_current_version(tmp_path):
    """`graft store export --format hf` of a store that mixes versions: every shard of the
    dataset is of the current version (one schema, as `datasets` needs), with the same rows."""
    from graft.store.dataset import export_dataset

    uri = tmp_path / "store"
    _write(str(uri))
    old = TrajectoryStore(str(uri)).scan().drop_columns(["round", "log_reward"])
    old = old.replace_schema_metadata(
        {b"graft.format": b"graft-trajectory-store", b"graft.schema_version": b"1"}
    )
    _commit(uri, "shards/run=run-a/model=alpha/step_00000050.parquet", old)
    done = export_dataset(TrajectoryStore(str(uri)), tmp_path / "dataset")
    assert done.rows == 2 * old.num_rows
    for shard in (tmp_path / "dataset" / "shards").rglob("*.parquet"):
        meta = pq.read_schema(shard).metadata
        assert meta[b"graft.schema_version"] == str(SCHEMA_VERSION).encode(), shard
    order = [(k, "ascending") for k in ("step", "prompt_id", "member")]  # the writer's order
    exported = TrajectoryStore(str(tmp_path / "dataset")).scan().sort_by(order)
    assert exported.equals(TrajectoryStore(str(uri)).scan().sort_by(order))


def test_what_keeps_a_path_from_being_a_store_is_said_the_same_way_everywhere(tmp_path):
    """Missing, a file, under a file, a directory without store.json, an empty store, a filesystem
    nobody knows: one wording, keyed by the option that named the store (none for a command's
    argument); an empty store is the store's fault whether or not a model was named."""
    (tmp_path / "afile").write_text("x")
    (tmp_path / "plain").mkdir()
    StoreWriter(str(tmp_path / "empty"), run_id="r", run_meta={}, background=False).close()
    why = {
        "nope": "not a graft trajectory store (no such directory)",
        "afile": "not a graft trajectory store (a file, not a directory)",
        "afile/s": f"not a graft trajectory store ({tmp_path}/afile is a file, not a directory)",
        "plain": "not a graft trajectory store (a directory without store.json)",
    }
    for key in ("", "sft.store", "exchange.stored.path"):
        named = lambda path, key=key: f"{key} {path}" if key else str(path)  # noqa: E731
        for rel, text in why.items():
            with pytest.raises(StoreError) as err:
                TrajectoryStore(str(tmp_path / rel), key=key)
            assert str(err.value) == f"{named(tmp_path / rel)}: {text}"
        store = TrajectoryStore(str(tmp_path / "empty"), key=key)
        for wanted in ("", "alpha"):
            with pytest.raises(StoreError) as err:
                store.pick_model(wanted, key="sft.peer_model")
            empty = "an empty store (no rollouts written yet)"
            assert str(err.value) == f"{named(tmp_path / 'empty')}: {empty}"
        with pytest.raises(StoreError) as err:
            TrajectoryStore("nosuchfs://b/s", key=key)
        assert str(err.value).startswith(f"{named('nosuchfs://b/s')}: cannot open it: ")


def test_store_path_under_a_file_is_refused_before_anything_is_written(tmp_path):
    (tmp_path / "afile").write_text("x")
    for rel in ("afile/store", "afile/a/b/store"):
        with pytest.raises(StoreError) as err:
            check_store_target(str(tmp_path / rel))
        assert str(err.value) == (
            f"store.path {tmp_path / rel}: {tmp_path}/afile is a file, not a directory"
        )
    check_store_target(str(tmp_path / "new" / "store"))  # free: nothing in the way
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


def test_store_cli_info_and_export(tmp_path, capsys):
    uri = tmp_path / "store"
    _write(str(uri))
    assert main(["store", "info", str(uri)]) == 0
    out = capsys.readouterr().out
    assert "alpha" in out and "36" in out and "schema" in out
    out_file = tmp_path / "export.jsonl"
    assert main(["store", "export", str(uri), "--format", "jsonl", "--out", str(out_file)]) == 0
    lines = out_file.read_text().splitlines()
    assert len(lines) == 36 and json.loads(lines[0])["model"] == "alpha"
    assert main(["store", "validate", str(uri)]) == 0


def _legacy(uri):
    """The store as a graft from before checksums wrote it: no sidecars, store.json without them."""
    meta = json.loads((uri / "store.json").read_text())
    assert meta.pop("checksums") == "sha256"
    (uri / "store.json").write_text(json.dumps(meta))
    for sidecar in (uri / "checksums").rglob("*.json"):
        sidecar.unlink()


def test_every_shard_has_its_checksum_and_a_missing_one_is_damage(tmp_path, capsys):
    uri = tmp_path / "store"
    _write(str(uri))
    sidecars = sorted((uri / "checksums").rglob("*.parquet.json"))
    assert len(sidecars) == 3
    record = json.loads(sidecars[0].read_text())
    shard = uri / record["shard"]
    assert record["bytes"] == shard.stat().st_size and record["rows"] == 12
    sidecars[0].unlink()
    store = TrajectoryStore(str(uri))
    with pytest.raises(StoreError, match=r"step_00000000\.parquet: damaged shard .* is missing"):
        store.scan()
    sidecars[1].write_text("{not json")
    report = TrajectoryStore(str(uri)).validate()
    assert [p for p, _ in report.problems] == [
        "shards/run=run-a/model=alpha/step_00000000.parquet",
        "shards/run=run-a/model=alpha/step_00000001.parquet",
    ]
    assert "damaged checksum" in report.problems[1][1] and report.rows == 12
    assert main(["store", "info", "--json", str(uri)]) == 1  # exactly like the plain table
    assert json.loads(capsys.readouterr().out)["problems"]
    assert main(["store", "info", str(uri)]) == 1


def test_an_interrupted_write_leaves_a_sidecar_that_is_ignored(tmp_path):
    uri = tmp_path / "store"
    _write(str(uri))
    shard = uri / "shards" / "run=run-a" / "model=alpha" / "step_00000002.parquet"
    shard.rename(shard.with_name(".step_00000002.parquet.tmp"))  # killed before the rename
    report = TrajectoryStore(str(uri)).validate()
    assert report.ok and report.shards == 2
    assert sorted(report.incomplete) == [
        "checksums/run=run-a/model=alpha/step_00000002.parquet.json",
        "shards/run=run-a/model=alpha/.step_00000002.parquet.tmp",
    ]
    writer = StoreWriter(str(uri), run_id="run-a", run_meta={})
    assert writer.rollback(after_step=0) == 1  # step 1's shard; leftovers go too
    writer.close()
    assert sorted(p.name for p in uri.rglob("step_*")) == [
        "step_00000000.parquet",
        "step_00000000.parquet.json",
    ]
    assert not list(uri.rglob(".*.tmp"))


def test_a_store_from_before_checksums_reads_as_unverified(tmp_path, capsys):
    """Old stores stay readable; nothing claims their rows were proven. New shards appended to
    one are verified."""
    uri = tmp_path / "store"
    _write(str(uri))
    _legacy(uri)
    store = TrajectoryStore(str(uri))
    assert store.checksums is None and store.scan().num_rows == 36
    assert len(store.unverified) == 3
    report = TrajectoryStore(str(uri)).validate()
    assert report.ok and len(report.unverified) == 4  # 3 shards and the run's metadata
    assert main(["store", "validate", str(uri)]) == 0
    out = capsys.readouterr().out
    assert out.count("unverified: shards/") == 3 and out.splitlines()[-1].startswith("unverified")
    _write(str(uri), steps=(3,))
    info = TrajectoryStore(str(uri)).info()
    assert info["rows"] == 48 and len(info["unverified"]) == 3 and info["checksums"] is None
    assert main(["store", "info", "--json", str(uri)]) == 0
    assert len(json.loads(capsys.readouterr().out)["unverified"]) == 3
