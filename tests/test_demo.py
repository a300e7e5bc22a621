"""`graft demo --quick` through the real CLI: the three files, their structure, every method ran."""

import json
import struct

from graft.cli import main
from graft.demo import METHODS, MODELS
from graft.demo_report import SUITES
from graft.rundir import read_metrics


def _png_size(path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", data[16:24])


def test_demo_quick_writes_results_for_every_method(tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["demo", "--quick", "--out", str(out)]) == 0
    printed = capsys.readouterr().out

    results = json.loads((out / "results.json").read_text())
    settings = results["settings"]
    assert settings["seeds"] == [0] and settings["mode"] == "quick"
    steps = settings["steps"]

    # Every method ran for every model, with start and end accuracies per suite, in [0, 1].
    per_seed = results["per_seed"]["0"]
    assert set(METHODS) <= set(per_seed)
    for method in METHODS:
        for model in MODELS:
            for when in ("start", "end"):
                accs = per_seed[method][model][when]
                assert set(accs) == set(SUITES), (method, model, when)
                assert all(0.0 <= v <= 1.0 for v in accs.values())
    # Same starting point for every method: same seed, same pre-trained model, same eval problems.
    for model in MODELS:
        starts = {json.dumps(per_seed[m][model]["start"], sort_keys=True) for m in METHODS}
        assert len(starts) == 1, f"{model}: methods started from different evaluations"

    # Each run trained the requested number of steps and logged the exchange metrics.
    seed_dir = out / "seed_0"
    for run in ("grpo", "graft", "stored_llama", "stored_qwen"):
        records = read_metrics(seed_dir / run)
        assert max(r["step"] for r in records) == steps, run
    graft_keys = set().union(*read_metrics(seed_dir / "graft"))
    assert {"x/llama->qwen/selected", "x/qwen->llama/selected"} <= graft_keys
    assert per_seed["stored"]["llama"]["exchange"].keys() == {"stored:qwen->llama"}
    # The stored runs read the GRPO run's store, which holds every rollout of both models.
    assert (seed_dir / "grpo" / "trajectories").is_dir()

    # Deltas against GRPO for both models, online and stored, equal end(method) - end(GRPO).
    deltas = results["summary"]["deltas_vs_grpo"]
    for method in ("graft", "stored"):
        for model in MODELS:
            for suite in SUITES:
                want = per_seed[method][model]["end"][suite] - per_seed["grpo"][model]["end"][suite]
                assert abs(deltas[method][model][suite]["mean"] - want) < 1e-12

    # Complementarity in both directions, as fractions of the receiver's all-fail prompts.
    directions = results["complementarity"]["directions"]
    assert set(directions) == {"llama->qwen", "qwen->llama"}
    for d in directions.values():
        assert 0 <= d["source_mixed_on_them"] <= d["receiver_all_fail"]

    table = (out / "results.md").read_text()
    for label in ("GRPO", "GRAFT (online)", "GRAFT (stored peer)", "Δ GRAFT (online) − GRPO"):
        assert f"| {label} |" in table
    assert "| GRAFT (stored peer) |" in printed
    width, height = _png_size(out / "curves.png")
    assert width > 100 and height > 100
