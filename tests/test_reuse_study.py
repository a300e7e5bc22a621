"""The reuse study (docs/evidence.md, "Trajectory reuse where GRAFT works"): its runs are the
design's (each arm's log, records and controls), its report's arithmetic is the rule's (paired
differences, Holm over the 8 primary cells, retention), and a two-step miniature runs end to end,
resumes with nothing to do, and reports what each log offered and cost."""

import json
from dataclasses import replace
from pathlib import Path

import pytest

from graft.evidence.reuse import ARMS, CONTROLS, pair_config, sample_args, settings, stored_config
from graft.evidence.reuse_report import primary, retention, secondary


def test_each_arm_trains_against_the_log_and_records_the_design_names(tmp_path):
    s = settings()
    assert s.seeds == (10, 11, 12, 13, 14) and s.steps == 40 and s.prompts_per_step == 8
    out = tmp_path
    a = stored_config(s, out, 10, "a", "llama").exchange
    assert (a.source, a.stored.model, a.stored.records, a.ablation.weight, a.delta) == (
        "stored", "qwen", "same_step", "paper", 0.8
    )  # fmt: skip
    assert a.stored.path == str(out / "code/seed_10/grpo/trajectories")
    b = stored_config(s, out, 14, "b", "qwen").exchange.stored
    assert b.path == str(out / "code/seed_10/grpo/trajectories") and b.records == "latest"
    c = stored_config(s, out, 12, "c", "qwen").exchange.stored
    assert c.path == str(out / "code/seed_12/logs/final_llama") and c.model == "llama"
    e = stored_config(s, out, 10, "e", "llama").exchange.stored
    assert e.rewards == "shuffled" and e.path == a.stored.path
    assert stored_config(s, out, 10, "a", "llama").run.label == ARMS["a"].label
    grpo = pair_config(s, out, 11, "grpo")
    assert not grpo.exchange.enabled and grpo.run.save_every == 40 and grpo.run.seed == 11
    controls = {n: pair_config(s, out, 11, n).exchange.ablation for n in CONTROLS}
    assert controls["ctl_success_only"].replacement == "success_only"
    assert controls["ctl_no_weight"].weight == "none"
    assert controls["ctl_unclipped"].peer_update == "unclipped"
    grpo, log = out / "code/seed_13/grpo", out / "code/seed_13/logs/final_qwen"
    args = sample_args(grpo, log, 13, "final", "qwen")
    assert args[:2] == ["--run", str(out / "code/seed_13/grpo")] and "--steps-of" in args
    assert args[args.index("--seed") + 1] == "13" and args[args.index("--n") + 1] == "8"
    assert sample_args(grpo, log, 13, "pre", "qwen")[:2] == [
        "--config", str(out / "code/seed_13/grpo/config.yaml")
    ]  # fmt: skip


def _table(gains: dict[str, list[float]]) -> dict:
    """A result table: GRPO at 0.1 on every seed, each method at 0.1 + its per-seed gains."""
    seeds = [10, 11, 12, 13, 14]
    table = {"grpo": {m: {sd: {"stuck": 0.1, "own": 0.5, "mix": 0.3} for sd in seeds}
                      for m in ("llama", "qwen")}}  # fmt: skip
    for method, per_seed in gains.items():
        table[method] = {
            m: {sd: {"stuck": 0.1 + g, "own": 0.5, "mix": 0.3} for sd, g in zip(seeds, per_seed)}
            for m in ("llama", "qwen")
        }
    return table


def test_the_primary_family_is_arms_a_to_d_on_the_stuck_skill_under_holm():
    big = [0.20, 0.22, 0.18, 0.21, 0.19]
    noise = [0.03, -0.02, 0.01, -0.04, 0.02]
    table = _table({"a": big, "b": noise, "c": big, "d": noise, "e": big, "graft": big})
    cells = primary(table)
    assert [(c["arm"], c["model"]) for c in cells] == [
        (arm, m) for arm in "abcd" for m in ("llama", "qwen")
    ]
    assert [c["significant"] for c in cells] == [True, True, False, False] * 2
    for c in cells:  # Holm: the adjusted p is at least the raw p, capped at 1
        assert c["interval"]["p"] <= c["holm_p"] <= 1.0
    assert cells[0]["per_seed"] == pytest.approx(big)
    rows = secondary(table)
    assert "e - grpo/llama/stuck" in rows and "e - a/qwen/own" in rows


def test_retention_is_the_stored_gain_over_the_online_gain_or_undefined():
    table = _table({"a": [0.10] * 4 + [0.12], "graft": [0.20] * 4 + [0.22]})
    kept = retention(table)["llama"]
    assert kept["ratio"] == pytest.approx(0.104 / 0.204) and kept["low"] <= kept["high"]
    flat = _table({"a": [0.1, 0.1, 0.1, 0.1, 0.1], "graft": [0.05, -0.05, 0.04, -0.04, 0.0]})
    assert retention(flat)["qwen"]["low"] is None  # the online gain is inside the noise


@pytest.mark.slow
def test_a_two_step_miniature_runs_end_to_end_and_resumes_with_nothing_to_do(tmp_path):
    from graft.evidence.reuse_report import run_and_write

    s = replace(settings(), steps=2, eval_every=1, prompts_per_step=4, group_size=4,
                eval_problems=8, eval_samples=1, seeds=(0, 1))  # fmt: skip
    out = tmp_path / "study"
    files = run_and_write(out, s)
    assert all(f.is_file() for f in files)
    result = json.loads((out / "results.json").read_text())
    assert len(result["primary"]) == 8 and all(len(c["per_seed"]) == 2 for c in result["primary"])
    regime = result["regime"]
    for model in ("llama", "qwen"):
        assert regime["a"][model]["coverage"] == regime["c"][model]["coverage"] == 1.0
        assert regime["d"][model]["coverage"] == 1.0
        for key in ("candidates", "admitted"):  # shuffled rewards keep the gate and the weight
            assert regime["e"][model][key] == regime["a"][model][key]
        assert result["cost"]["c"][model]["log_flops"] > 0
        assert result["cost"]["c"][model]["log_users"] == 1
        assert result["cost"]["a"][model]["log_users"] == 3
    marks = sorted(out.rglob("done.json"))
    stamps = [m.stat().st_mtime_ns for m in marks]
    run_and_write(out, s)  # everything reused
    assert [m.stat().st_mtime_ns for m in marks] == stamps and len(marks) == 2 * (5 + 4 + 10)
    assert Path(files[2]).stat().st_size > 0
