"""Stored data you can prove intact: every single-bit flip in a trajectory shard or a checkpoint
file of a real (tiny) training run is caught - by `graft store validate`, by every store reader,
and by the checkpoint check that resume rests on - and none passes silently."""

from __future__ import annotations

import dataclasses
import io
import json
import random
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from safetensors.torch import load as load_safetensors
from safetensors.torch import load_file

from graft.cli import main
from graft.config import AblationConfig, ExchangeConfig, StoredPeerConfig
from graft.errors import DataError
from graft.exchange import StoredPeer
from graft.rundir import MANIFEST, checkpoint_problems, save_best, verify_checkpoint
from graft.store import DamagedShardError, TrajectoryStore
from graft.verify.pool import VerifierPool
from test_faults import SMALL

SHA = "sha256 "
SEED = 20261201
FLIPS = 600  # store: seeded bit positions in one shard (every bit when it has fewer)
FLIPS_PER_FILE = 200  # checkpoint: in each of model.safetensors, optimizer.pt, policy_state.json
RUN = [*SMALL, "run.steps=2", "run.save_every=1"]  # the fault tests' small run


@pytest.fixture(scope="module")
def run(tmp_path_factory, tiny_paths) -> Path:
    """Two steps of GRPO on the tiny Llama: checkpoints step_000001 and step_000002, and a store
    with one shard per step."""
    out = tmp_path_factory.mktemp("integrity") / "run"
    sets = [x for s in [*RUN, f"models.0.path={tiny_paths['llama']}"] for x in ("--set", s)]
    assert main(["train", "--out", str(out), *sets]) == 0
    return out


def _flip(data: bytes, bit: int) -> bytes:
    out = bytearray(data)
    out[bit // 8] ^= 1 << (bit % 8)
    return bytes(out)


def _positions(num_bytes: int, count: int, seed: int) -> list[int]:
    bits = num_bytes * 8
    return sorted(random.Random(seed).sample(range(bits), min(count, bits)))


def _store_catches(uri: str, rel: str) -> bool:
    """validate names exactly this shard, and a strict scan refuses it in one line naming it."""
    report = TrajectoryStore(uri).validate()
    if report.ok or [path for path, _ in report.problems] != [rel]:
        return False
    try:
        TrajectoryStore(uri).scan()
    except DamagedShardError as err:
        return rel in str(err) and "\n" not in str(err)
    return False


def _read_back(data: bytes, original: pa.Table) -> str:
    """What a reader WITHOUT checksums would have made of these bytes."""
    try:
        return (
            "same rows" if pq.read_table(pa.BufferReader(data)).equals(original) else "changed rows"
        )
    except Exception:
        return "error"


@pytest.mark.slow
def test_every_bit_flip_in_a_shard_is_caught(run, tmp_path, capsys):
    uri = tmp_path / "store"
    shutil.copytree(run / "trajectories", uri)
    shard = sorted(uri.rglob("step_*.parquet"))[-1]
    rel = shard.relative_to(uri).as_posix()
    original = shard.read_bytes()
    table = pq.read_table(shard, partitioning=None)
    assert TrajectoryStore(str(uri)).validate().ok
    positions = _positions(len(original), FLIPS, SEED)
    missed, without_checksums = [], {"error": 0, "same rows": 0, "changed rows": 0}
    try:
        for bit in positions:
            flipped = _flip(original, bit)
            shard.write_bytes(flipped)
            if not _store_catches(str(uri), rel):
                missed.append(bit)
            without_checksums[_read_back(flipped, table)] += 1
    finally:
        shard.write_bytes(original)
    with capsys.disabled():  # the numbers, shown with -s
        print(f"\nshard: {len(original)} bytes, {len(positions)} flips, {len(missed)} missed; ")
        print(f"what a reader without checksums made of them: {without_checksums}")
    assert len(positions) >= 500 and missed == []
    assert without_checksums["changed rows"] > 0  # flips that used to pass silently
    # the CLI, for a few of them: validate names the shard and exits 1, info (plain and JSON)
    # exits 1, export exits 2 and writes nothing
    capsys.readouterr()
    for bit in positions[:: len(positions) // 3][:3]:
        shard.write_bytes(_flip(original, bit))
        try:
            assert main(["store", "validate", str(uri)]) == 1
            out = capsys.readouterr().out
            assert f"problem: {rel}: {rel}: damaged shard ({SHA}" in out
            assert out.splitlines()[-1].startswith("NOT OK: 1 readable shards")
            assert main(["store", "info", "--json", str(uri)]) == 1
            assert [p for p, _ in json.loads(capsys.readouterr().out)["problems"]] == [rel]
            assert main(["store", "info", str(uri)]) == 1
            export = tmp_path / "rows.jsonl"
            assert main(["store", "export", str(uri), "--out", str(export)]) == 2
            err = capsys.readouterr().err.strip()
            assert rel in err and "\n" not in err and not export.exists()
        finally:
            shard.write_bytes(original)
    assert main(["store", "validate", str(uri)]) == 0


def test_the_stored_peer_reader_refuses_or_skips_a_flipped_shard(run, tmp_path, capsys):
    """Lookups by prompt id prove each shard too: one flipped bit stops a stored-peer source,
    naming the shard, unless exchange.stored.skip_damaged_shards (then it is skipped and
    counted)."""
    uri = tmp_path / "store"
    shutil.copytree(run / "trajectories", uri)
    shard = sorted(uri.rglob("step_*.parquet"))[-1]
    rel = shard.relative_to(uri).as_posix()
    problems = TrajectoryStore(str(uri)).lookup(
        pq.read_table(shard, partitioning=None)["prompt_id"].to_pylist(), model="policy", step=1
    )
    assert problems  # the prompts of the flipped step are found while it is intact
    data = shard.read_bytes()
    shard.write_bytes(_flip(data, len(data) * 4))  # a bit in the middle of the file
    cfg = ExchangeConfig(
        enabled=True,
        source="stored",
        stored=StoredPeerConfig(path=str(uri)),
        ablation=AblationConfig(weight="none"),
    )
    with pytest.raises(DamagedShardError) as err:
        StoredPeer(cfg)
    assert rel in str(err.value) and "skip_damaged_shards" in str(err.value)
    lenient = StoredPeer(
        dataclasses.replace(cfg, stored=dataclasses.replace(cfg.stored, skip_damaged_shards=True))
    )
    assert lenient.damaged == [rel] and rel in capsys.readouterr().out
    assert lenient.store.lookup(list(problems), model="policy", step=1) == {}
    with VerifierPool(workers=1) as pool:
        _, metrics = lenient.source_groups([], step=1, pool=pool, verifier="final_number")
    assert metrics["stored/damaged_shards"] == 1


def _would_load(name: str, data: bytes) -> bool:
    """Whether the file's own loader (no manifest) would have taken these bytes without error."""
    try:
        if name == "model.safetensors":
            load_safetensors(data)
        elif name == "optimizer.pt":
            torch.load(io.BytesIO(data), weights_only=True)
        else:
            json.loads(data)
    except Exception:
        return False
    return True


def test_every_bit_flip_in_a_checkpoint_is_caught(run, tmp_path, capsys):
    ckpt = tmp_path / "step_000002"
    shutil.copytree(run / "checkpoints" / "step_000002", ckpt)
    assert checkpoint_problems(ckpt, ["policy"]) == []
    verify_checkpoint(ckpt / "policy")
    tried, missed, loaded = 0, [], 0
    for i, name in enumerate(("model.safetensors", "optimizer.pt", "policy_state.json")):
        path = ckpt / "policy" / name
        original = path.read_bytes()
        try:
            for bit in _positions(len(original), FLIPS_PER_FILE, SEED + i):
                tried += 1
                flipped = _flip(original, bit)
                path.write_bytes(flipped)
                problems = checkpoint_problems(ckpt, ["policy"])
                caught = len(problems) == 1 and problems[0].startswith(f"{path}: changed")
                try:
                    verify_checkpoint(ckpt / "policy")
                    caught = False
                except DataError as err:
                    caught = caught and str(path) in str(err) and "\n" not in str(err)
                if not caught:
                    missed.append((name, bit))
                loaded += _would_load(name, flipped)
        finally:
            path.write_bytes(original)
    with capsys.disabled():
        print(
            f"\ncheckpoint: {tried} flips, {len(missed)} missed; {loaded} load without a manifest"
        )
    assert tried >= 500 and missed == []
    assert loaded > 0  # flips the files' own loaders take without complaint
    assert checkpoint_problems(ckpt, ["policy"]) == []


def test_a_checkpoint_is_proven_by_its_manifest_alone(run, tmp_path):
    """The manifest lists every file and nothing else; without it, or with a file added, renamed
    or missing, the checkpoint is damaged, by name."""
    ckpt = tmp_path / "step_000001"
    shutil.copytree(run / "checkpoints" / "step_000001", ckpt)
    listed = json.loads((ckpt / MANIFEST).read_text())["files"]
    on_disk = {p.relative_to(ckpt).as_posix() for p in ckpt.rglob("*") if p.is_file()}
    assert set(listed) == on_disk - {MANIFEST}
    assert {"trainer_state.json", "policy/model.safetensors", "policy/optimizer.pt"} <= set(listed)
    assert all(e["bytes"] == (ckpt / rel).stat().st_size for rel, e in listed.items())
    (ckpt / "policy" / "added_tokens.json").write_text("{}")  # would change the tokenizer
    (ckpt / "trainer_state.json").rename(ckpt / "trainer_state.old")
    problems = "\n".join(checkpoint_problems(ckpt, ["policy"]))
    assert "added_tokens.json: not in MANIFEST.json" in problems
    assert "trainer_state.json: missing" in problems and "trainer_state.old: not in" in problems
    (ckpt / MANIFEST).unlink()
    (problem,) = checkpoint_problems(ckpt, ["policy"])[:1]
    assert problem.startswith(f"{ckpt / MANIFEST}: missing")
    with pytest.raises(DataError, match=r"MANIFEST\.json: missing"):
        verify_checkpoint(ckpt / "policy")


def test_the_best_checkpoint_gets_a_manifest(tmp_path):
    class Saver:
        def save(self, directory: Path, names: list[str]) -> None:
            for name in names:
                (directory / name).mkdir()
                (directory / name / "model.safetensors").write_bytes(b"weights" * 100)

    save_best(tmp_path, Saver(), ["policy"], {"policy": {"step": 3, "value": 0.5}})
    best = tmp_path / "checkpoints" / "best" / "policy"
    verify_checkpoint(best)
    (best / "model.safetensors").write_bytes(b"weighTs" * 100)
    with pytest.raises(DataError, match=r"best/policy/model.safetensors: changed"):
        verify_checkpoint(best)


def test_resume_falls_back_from_a_flipped_checkpoint_bit_exactly(run, tmp_path, capsys):
    """One flipped bit in the newest checkpoint's weights (the file still parses): the resume
    names the file, falls back to step_000001, and ends with the uninterrupted run's weights."""
    resumed = tmp_path / "run"
    shutil.copytree(run, resumed)
    weights = resumed / "checkpoints" / "step_000002" / "policy" / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(_flip(data, (len(data) - 64) * 8 + 3))  # a weight, not the header
    load_file(str(weights))  # still a valid safetensors file
    assert main(["train", "--resume", str(resumed)]) == 0
    out = capsys.readouterr().out
    assert "model.safetensors: changed since it was written" in out
    assert "step_000001 instead" in out
    assert (resumed / "checkpoints" / "damaged-step_000002").is_dir()
    a = load_file(str(run / "checkpoints" / "step_000002" / "policy" / "model.safetensors"))
    b = load_file(str(weights))
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert checkpoint_problems(weights.parents[1], ["policy"]) == []


def test_any_byte_of_a_runs_metadata_changed_fails_validate_naming_the_file(tmp_path, capsys):
    """The run's metadata (config, versions, commit, cost) has its checksum: every single-byte
    change of runs/<id>.json (a rewrite, as a run's cost update does, included) makes `graft
    store validate` fail naming the file, and `TrajectoryStore.runs()` refuses it; the version a
    crash between the two writes of an update would leave still proves."""
    from graft.cli import main
    from graft.store import StoreWriter, TrajectoryStore
    from graft.store.reader import StoreError

    uri = tmp_path / "store"
    writer = StoreWriter(str(uri), run_id="r1", run_meta={"config": {"lr": 2e-5}}, background=False)
    before = (uri / "runs/r1.json").read_bytes()
    writer.update_run_meta(cost={"cost/cum/flops": 1.5e12})
    writer.close()
    meta = uri / "runs/r1.json"
    good = meta.read_bytes()
    assert main(["store", "validate", str(uri)]) == 0
    assert TrajectoryStore(str(uri)).runs()["r1"]["cost"] == {"cost/cum/flops": 1.5e12}
    meta.write_bytes(before)  # the update's sidecar landed, its file did not: still proven
    assert main(["store", "validate", str(uri)]) == 0
    capsys.readouterr()
    for i in range(len(good)):
        flipped = bytearray(good)
        flipped[i] ^= 0xFF
        meta.write_bytes(bytes(flipped))
        assert main(["store", "validate", str(uri)]) == 1, i
        assert "problem: runs/r1.json" in capsys.readouterr().out, i
        with pytest.raises(StoreError, match=r"runs/r1\.json"):
            TrajectoryStore(str(uri)).runs()
    meta.write_bytes(good)
    assert main(["store", "validate", str(uri)]) == 0
