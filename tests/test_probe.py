"""`graft probe`: every number by hand on small constructed groups; the probe's first step is the
training run's first step, count for count; bad arguments end in one line."""

import json
import math

import pytest

from graft.cli import main
from graft.evidence.forecast import (
    direction_summary,
    grpo_verdict,
    mean_interval,
    mixed_probability,
    model_summary,
    ratio_interval,
    verdict,
    wilson,
)
from graft.rundir import read_metrics


def test_wilson_and_mean_intervals_by_hand():
    # Wilson 95% intervals from any table: 5/10 -> [0.2366, 0.7634]; 0/10 -> [0, 0.2775]
    assert wilson(5, 10) == pytest.approx((0.2366, 0.7634), abs=1e-4)
    assert wilson(0, 10) == pytest.approx((0.0, 0.2775), abs=1e-4)
    assert wilson(10, 10)[1] == pytest.approx(1.0) and wilson(0, 0) == (0.0, 1.0)
    # mean 2, sd 1, t(0.975, 2) = 4.3027: half = 4.3027 / sqrt(3)
    m = mean_interval([1.0, 2.0, 3.0])
    assert m["mean"] == 2.0
    assert m["low"] == pytest.approx(2 - 4.302653 / math.sqrt(3), abs=1e-5)
    assert mean_interval([1.0, 2.0, 3.0], floor=0.0)["low"] == 0.0  # 2 - 2.48 < 0
    assert mean_interval([4.0])["low"] is None


def test_ratio_interval_by_hand():
    # r = 6/8 = 0.75; residuals -0.5, 0.5, 0; se = sqrt(0.5 / (3*2)) / (8/3) = 0.108253;
    # half = t(0.975, 2) * se = 4.302653 * 0.108253 = 0.465775; the top is clipped at 1
    r = ratio_interval([1, 2, 3], [2, 2, 4])
    assert r["ratio"] == 0.75
    assert r["low"] == pytest.approx(0.75 - 0.465775, abs=1e-6)
    assert r["high"] == 1.0
    assert ratio_interval([0, 0], [0, 0])["ratio"] is None
    assert ratio_interval([1], [2]) == {"ratio": 0.5, "low": None, "high": None}


def test_model_shares_and_a_larger_n_by_hand():
    m = model_summary([0, 3, 8, 8], 8)
    assert m["all_fail"]["share"] == 0.25 and m["all_pass"]["share"] == 0.5
    assert m["mixed"]["share"] == 0.25
    assert m["pass1"]["mean"] == pytest.approx((0 + 3 / 8 + 1 + 1) / 4)
    # p = 0 and p = 1 are never mixed; p = 1/2 at n = 8: 1 - 2 / 2^8
    assert mixed_probability([0, 4, 8], 8, 8) == pytest.approx((1 - 2 / 256) / 3)
    # p = 3/8 at n = 16: 1 - (3/8)^16 - (5/8)^16
    want = (1 - (3 / 8) ** 16 - (5 / 8) ** 16) / 4
    assert m["mixed_if_n"]["16"] == pytest.approx(want)
    line = grpo_verdict(m, name="a")
    assert line.startswith("a: 75% of groups carry no GRPO signal (all-fail 25%, all-pass 50%)")


def _steps(**cols):
    """Per-step count diagnostics from columns: candidates=[1, 0] -> two steps."""
    length = len(next(iter(cols.values())))
    return [{k: float(v[i]) for k, v in cols.items()} for i in range(length)]


def test_a_direction_by_hand():
    receiver, source = [0, 0, 5, 0], [3, 0, 8, 8]  # the receiver fails prompts 0, 1 and 3
    steps = _steps(
        candidates=[1, 0],
        selected=[1, 0],
        prompts_grafted=[1, 0],
        responses_sent=[8, 0],
        sent_correct=[3, 0],
        admitted=[4, 0],
        admitted_correct=[3, 0],
        admitted_wrong=[1, 0],
        **{"admit_if/paper/correct": [3, 0], "admit_if/receiver_relative/correct": [3, 0]},
    )
    scores = [(0.9, True), (0.85, True), (0.81, True), (0.5, False), (float("nan"), False)]
    d = direction_summary(receiver, source, 8, steps, scores)
    assert d["receiver_all_fail"]["share"] == 0.75
    assert d["complementarity"]["count"] == 2 and d["complementarity"]["of"] == 3
    assert d["peer_mixed_on_all_fail"]["count"] == 1  # 3 of 8; the 8/8 prompt is not mixed
    assert d["candidates"]["share"] == 0.25
    assert d["admitted"]["ratio"] == 0.5 and d["admitted_correct"]["ratio"] == 1.0
    assert d["admitted_wrong"]["ratio"] == 0.2  # 1 of the 5 wrong ones sent
    assert d["s_correct"]["p50"] == 0.85 and d["s_wrong"]["p50"] == 0.5  # NaN left out
    assert d["per_step"]["grafted_groups"]["mean"] == 0.5
    assert verdict(d, source="a", receiver="b", weight="paper").startswith(
        "expect about 0.5 grafted groups and 2.0 admitted responses per step"
    )


def test_verdicts_for_little_to_do_and_a_starved_gate():
    base = dict(candidates=[2, 2], prompts_grafted=[2, 2], responses_sent=[16, 16])
    starved = _steps(
        **base,
        sent_correct=[10, 10],
        admitted=[1, 1],
        admitted_correct=[1, 1],
        admitted_wrong=[0, 0],
        **{"admit_if/paper/correct": [1, 1], "admit_if/receiver_relative/correct": [6, 8]},
    )
    d = direction_summary([0] * 10, [4] * 10, 8, starved, [])
    line = verdict(d, source="a", receiver="b", weight="paper")
    assert line == (
        "the paper weight would starve a -> b (it admits 10% of a's correct responses); "
        "receiver_relative admits 70%"
    )
    easy = direction_summary([5] * 40, [4] * 40, 8, _steps(candidates=[0, 0]), [])
    assert verdict(easy, source="a", receiver="b", weight="paper").startswith(
        "GRAFT has little to do here: b fails every rollout on only 0.0% of prompts"
    )
    hopeless = direction_summary([0] * 10, [0] * 10, 8, _steps(candidates=[0, 0]), [])
    assert "a rescues none of b's 10 all-fail prompts" in verdict(
        hopeless, source="a", receiver="b", weight="paper"
    )


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_probes_first_step_is_the_runs_first_step(tmp_path):
    """graft probe on graft_tiny.yaml and the GRAFT run of the same config: step 1's rewards and
    every exchange count of both directions are equal; the report names both directions."""
    sets = ["rollout.prompts_per_step=8", "rollout.group_size=4", "run.threads=1"]
    args = [a for s in sets for a in ("--set", s)]
    out = tmp_path / "probe"
    config = "configs/graft_tiny.yaml"
    assert main(["probe", "--config", config, "--steps", "3", "--out", str(out), *args]) == 0
    run = tmp_path / "run"
    train = ["train", config, "--out", str(run), *args]
    assert main([*train, "--set", "run.steps=1", "--set", "eval.every=0"]) == 0
    body = json.loads((out / "probe.json").read_text())
    first = body["raw"]["steps"][0]
    (record,) = read_metrics(run)
    for name in ("llama", "qwen"):
        correct = first["correct"][name]
        assert sum(correct) / (4 * len(correct)) == record[f"m/{name}/reward/mean"]
    compared = 0
    for direction, d in first["directions"].items():
        for key, value in d["counts"].items():
            assert record[f"x/{direction}/{key}"] == value, (direction, key)
            compared += 1
    assert compared > 20 and set(first["directions"]) == {"llama->qwen", "qwen->llama"}
    summary = body["summary"]
    assert summary["prompts"] == 24 and summary["n"] == 4
    # the run's summary.json: llama's shares, by hand from its one step's metrics
    shares = json.loads((run / "summary.json").read_text())
    fail = round(record["m/llama/groups/all_fail_frac"] * 8)
    assert shares["signal/llama/all_fail_frac"] == fail / 8
    grafted = record["x/qwen->llama/prompts_grafted"]
    assert shares["signal/llama/rescued_frac"] == (grafted / fail if fail else 0.0)
    sent = record["x/qwen->llama/responses_sent"]
    admitted = record["x/qwen->llama/admitted"]
    assert shares["signal/llama/admitted_frac"] == (admitted / sent if sent else 0.0)
    text = (out / "probe.md").read_text()
    assert "| llama->qwen |" in text and "qwen->llama" in text
    assert (out / "probe.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.timeout(600)
def test_a_third_model_samples_only_itself(tmp_path):
    """A probe of llama and qwen keeps their rollouts; probing them with a third model reuses
    them (the same groups, step for step) and samples only the newcomer."""
    out = tmp_path / "probe"
    base = ["probe", "--config", "configs/graft_tiny.yaml", "--steps", "2", "--out", str(out)]
    base += ["--set", "rollout.prompts_per_step=4", "--set", "run.backend=inprocess"]
    assert main(base) == 0
    first = json.loads((out / "probe.json").read_text())["raw"]
    assert first["sampled_steps"] == {"llama": 2, "qwen": 2}
    models = ["llama=tiny:llama-char-add", "qwen=tiny:qwen2-bpe-add", "third=tiny:llama-char-add"]
    assert main([*base, *[a for m in models for a in ("--model", m)]]) == 0
    second = json.loads((out / "probe.json").read_text())["raw"]
    assert second["sampled_steps"] == {"llama": 0, "qwen": 0, "third": 2}
    for a, b in zip(first["steps"], second["steps"]):
        assert all(a["correct"][name] == b["correct"][name] for name in ("llama", "qwen"))
    assert "Rollouts reused from the cache: llama, qwen." in (out / "probe.md").read_text()
    summary = json.loads((out / "probe.json").read_text())["summary"]
    assert set(summary["models"]) == {"llama", "qwen", "third"}
    assert {"third->llama", "llama->third", "qwen->third"} <= set(summary["directions"])


@pytest.mark.timeout(600)
def test_a_held_out_split_probes_only_its_prompts_and_keeps_its_own_cache(tmp_path):
    """--split val draws every prompt from the task's validation split (none from training), and
    its rollouts are cached apart from the training prompts' of the same models."""
    from graft.config import ArithmeticConfig
    from graft.tasks.arithmetic import ArithmeticTask

    out = tmp_path / "probe"
    base = ["probe", "--config", "configs/graft_tiny.yaml", "--steps", "2", "--out", str(out)]
    base += ["--set", "rollout.prompts_per_step=4", "--set", "run.backend=inprocess"]
    assert main([*base, "--split", "val"]) == 0
    seen = set()
    for step in sorted((out / "cache").glob("llama-*/step_*.json")):
        seen |= {r["problem"]["prompt"] for r in json.loads(step.read_text())}
    task = ArithmeticTask(ArithmeticConfig(skills=("add:2,2",)))
    val = {p.prompt for p in task.val_problems()}
    train = {p.prompt for p in task.train_problems()}
    assert len(seen) == 8 and seen <= val and not seen & train
    assert main(base) == 0  # the training prompts: sampled again, not read from the val cache
    assert json.loads((out / "probe.json").read_text())["raw"]["sampled_steps"]["llama"] == 2


def test_per_skill_shares_by_hand():
    """Two steps of three prompts, n = 4: a's whole group fails on both `sum` prompts, on one of
    them while b's group is mixed; b fails every `list` prompt, on two while a's is mixed."""
    from graft.evidence.probe import skill_summary
    from graft.evidence.probe_report import skill_lines

    raw = {"names": ["a", "b"], "n": 4, "steps": [
        {"correct": {"a": [2, 0, 4], "b": [0, 2, 0]}, "skills": ["list", "sum", "list"]},
        {"correct": {"a": [0, 1, 0], "b": [4, 0, 0]}, "skills": ["sum", "list", "list"]},
    ]}  # fmt: skip
    got = skill_summary(raw)
    assert got["a"]["sum"] == {"prompts": 2, "all_fail": 1.0, "fail_peer_mixed": 0.5}
    assert got["a"]["list"] == {"prompts": 4, "all_fail": 0.25, "fail_peer_mixed": 0.0}
    assert got["b"]["list"] == {"prompts": 4, "all_fail": 1.0, "fail_peer_mixed": 0.5}
    assert got["b"]["sum"] == {"prompts": 2, "all_fail": 0.0, "fail_peer_mixed": 0.0}
    lines = skill_lines(got)
    assert lines[2] == "| a | 25% / 0% | 100% / 50% |"
    assert lines[-1] == "Prompts per skill: list 4, sum 2."
    one_skill = {**raw, "steps": [{**st, "skills": ["x"] * 3} for st in raw["steps"]]}
    assert skill_summary(one_skill) == {}


def _one_line_error(capsys, argv):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("graft: error: "), err
    return err[0]


def test_bad_arguments_end_in_one_line(tmp_path, capsys):
    line = _one_line_error(capsys, ["probe", "--out", str(tmp_path)])
    assert "name the models with --model" in line
    no_golds = tmp_path / "no_golds.jsonl"
    no_golds.write_text('{"problem": "1+1?"}\n{"problem": "2+2?"}\n')
    base = ["probe", "--config", "configs/grpo_tiny.yaml", "--out", str(tmp_path)]
    line = _one_line_error(capsys, [*base, "--data", str(no_golds)])
    assert "answer" in line and "no_golds.jsonl" in line
    line = _one_line_error(capsys, [*base, "--model", "tiny:no-such-preset"])
    assert "no-such-preset" in line
    line = _one_line_error(capsys, [*base, "--n", "-1"])
    assert "--n" in line
    from graft.config import ArithmeticConfig, ConfigError
    from graft.tasks import split_problems
    from graft.tasks.arithmetic import ArithmeticTask

    empty = ArithmeticTask(ArithmeticConfig(num_val=0))
    with pytest.raises(ConfigError, match="--split val: the task has no val problems"):
        split_problems(empty, "val")


# ------------------------------------------------- during training: is each policy learning?


def test_signal_counts_and_warning_by_hand():
    from graft.rundir.signal import SignalLog, step_counts

    metrics = {
        "m/a/groups/all_fail_frac": 0.5,
        "m/a/groups/all_pass_frac": 0.25,
        "m/a/groups/mixed_frac": 0.25,
        "m/b/groups/all_fail_frac": 1.0,
        "m/b/groups/all_pass_frac": 0.0,
        "m/b/groups/mixed_frac": 0.0,
        "x/b->a/prompts_grafted": 1.0,
        "x/b->a/responses_sent": 8.0,
        "x/b->a/admitted": 6.0,
        "x/a->b/prompts_grafted": 0.0,
        "x/a->b/responses_sent": 0.0,
        "x/a->b/admitted": 0.0,
    }
    a = step_counts(metrics, "a", "m/a/", 4)
    assert (a.all_fail, a.all_pass, a.grafted, a.sent, a.admitted) == (2, 1, 1, 8, 6)
    assert a.silent_steps == 0
    assert step_counts(metrics, "b", "m/b/", 4).silent_steps == 1  # no mixed group, nothing in
    log = SignalLog({"a": "m/a/", "b": "m/b/"}, groups=4, every=2, warn_after=2)
    assert log.update(1, metrics) == ([], [])
    lines, warnings = log.update(2, metrics)
    assert lines[0] == (
        "step 2, a: all-fail 50%, all-pass 25% of 8 groups; a peer rescued 50% of the all-fail "
        "prompts, admitted 75% of 16 responses sent (last 2 steps)"
    )
    assert lines[1].startswith("step 2, b: all-fail 100%, all-pass 0% of 8 groups")
    assert "2 of 2 steps without any learning signal" in lines[1]
    assert len(warnings) == 1 and warnings[0].startswith(
        "policy 'b' has had no learning signal for 2 steps (steps 1-2:"
    )
    assert log.update(3, metrics)[1] == []  # once per streak
    summary = log.summary()
    assert summary["signal/a/rescued_frac"] == 0.5 and summary["signal/a/admitted_frac"] == 0.75
    assert summary["signal/b/no_signal_steps"] == 3.0


def test_a_run_without_signal_warns_and_summarizes(tmp_path, capsys):
    """One-token responses cannot hold an answer: every group fails, and after 2 steps the run
    says so; summary.json holds the run's shares."""
    out = tmp_path / "run"
    sets = [
        "run.steps=3",
        "run.log_every=3",
        "run.no_signal_after=2",
        "rollout.max_new_tokens=1",
        "rollout.prompts_per_step=4",
        "rollout.group_size=2",
        "eval.every=0",
        "run.progress=false",
    ]
    args = ["train", "configs/grpo_tiny.yaml", "--out", str(out)]
    assert main([*args, *[a for s in sets for a in ("--set", s)]]) == 0
    printed = capsys.readouterr().out
    assert "warning: policy 'llama' has had no learning signal for 2 steps (steps 1-2" in printed
    assert "step 3, llama: all-fail 100%, all-pass 0% of 12 groups" in printed
    summary = json.loads((out / "summary.json").read_text())
    assert summary["signal/llama/all_fail_frac"] == 1.0
    assert summary["signal/llama/no_signal_steps"] == 3.0


@pytest.mark.slow
@pytest.mark.timeout(3000)
def test_the_forecast_holds_against_training_on_the_demo_pair(tmp_path):
    """benchmarks/probe_demo.py, both regimes: the probe's step 1 equals the GRAFT run's step 1
    in every exchange count, and the admitted share the run realizes over its first 10 steps
    lies inside the probe's 95% interval, in both directions."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "probe_demo.py"
    spec = importlib.util.spec_from_file_location("probe_demo", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    for regime in ("latent", "cold"):
        result = bench.check_regime(regime, tmp_path)
        assert result["step1_counts_compared"] > 30 and result["step1_mismatched"] == []
        for direction, d in result["directions"].items():
            assert d["inside"], (regime, direction, d["probe"], d["realized"])
