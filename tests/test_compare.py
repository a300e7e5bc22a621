"""`graft compare`: intervals that cover at the nominal rate, pairing by seed, clear refusals."""

import json
import random
import statistics
from dataclasses import replace

import pytest
import yaml

from graft.cli import main
from graft.config import Config, load_config, to_dict
from graft.evidence.compare import Unit, compare_runs, compare_units
from graft.evidence.compare_report import markdown
from graft.evidence.stats import (
    bootstrap_ratio,
    holm,
    paired_interval,
    percentile_bootstrap_mean,
    t_cdf,
    t_quantile,
)

SKILLS = ("mul:3,1:2-5", "mul:3,1:6-9")
RESAMPLE = "models.0.zero_contrast.mode=resample"


def test_t_quantiles_match_the_printed_table():
    # Two-sided 95% critical values from any t table.
    for df, want in [(1, 12.706), (2, 4.303), (4, 2.776), (9, 2.262), (29, 2.045)]:
        assert t_quantile(0.975, df) == pytest.approx(want, abs=5e-4)
    assert t_cdf(0.0, 7) == pytest.approx(0.5)
    assert t_cdf(-2.776, 4) == pytest.approx(0.025, abs=1e-4)
    assert t_quantile(0.025, 4) == pytest.approx(-t_quantile(0.975, 4))


def test_paired_interval_by_hand():
    iv = paired_interval([0.01, 0.03, 0.02, 0.04, 0.00])
    # mean 0.02, sd = sqrt(0.001 / 4) = 0.0158114, half = 2.776445 * 0.0158114 / sqrt(5)
    half = 2.776445105 * 0.01581139 / 5**0.5
    assert iv.mean == pytest.approx(0.02)
    assert iv.low == pytest.approx(0.02 - half, abs=1e-7)
    assert iv.high == pytest.approx(0.02 + half, abs=1e-7)
    assert iv.significant  # low = 0.00037 > 0
    one = paired_interval([0.5])
    assert one.low is None and not one.significant


def _simulate(effect, *, n_seeds=5, trials=3000, sd=1.0, seed=0):
    rng = random.Random(seed)
    covered = significant = boot_covered = 0
    for _ in range(trials):
        diffs = [rng.gauss(effect, sd) for _ in range(n_seeds)]
        iv = paired_interval(diffs)
        covered += iv.low <= effect <= iv.high
        significant += iv.significant
    for t in range(300):
        diffs = [rng.gauss(effect, sd) for _ in range(n_seeds)]
        lo, hi = percentile_bootstrap_mean(diffs, draws=400, seed=t)
        boot_covered += lo <= effect <= hi
    return covered / trials, significant / trials, boot_covered / 300


def test_intervals_cover_zero_and_known_effects_at_the_nominal_rate():
    # No effect: the 95% intervals contain 0 about 95% of the time (3000 trials: SE 0.4 points).
    cover0, sig0, boot0 = _simulate(0.0)
    assert 0.935 <= cover0 <= 0.965
    assert 0.035 <= sig0 <= 0.065
    # A known effect is covered at the nominal rate too.
    cover1, _, _ = _simulate(0.7, seed=1)
    assert 0.935 <= cover1 <= 0.965
    # An effect of 3 sd (per-seed differences) is called significant with 5 seeds.
    _, sig3, _ = _simulate(3.0, seed=2)
    assert sig3 > 0.99
    # Why not the percentile bootstrap over 5 seeds: it covers far less than 95%.
    assert boot0 < 0.9


def test_ratio_is_undefined_when_the_denominator_is_not_significant():
    assert bootstrap_ratio([1.0, 2.0], [0.5, -0.4])["low"] is None
    r = bootstrap_ratio([1.0, 1.2, 0.8, 1.1, 0.9], [2.0, 2.1, 1.9, 2.2, 1.8])
    assert r["ratio"] == pytest.approx(0.5)
    assert r["low"] <= 0.5 <= r["high"]


def _unit(label, seed, values, *, policy="llama", steps=(0, 10, 20)):
    curve = dict(zip(steps, values))
    return Unit(
        run_dir=f"runs/{label}_{seed}",
        policy=policy,
        seed=seed,
        label=label,
        signature={"exchange.enabled": "false" if label == "grpo" else "true", "x": label},
        eval_setup={k: "1" for k in ("suites", "num_problems", "samples")}
        | {k: "1" for k in ("temperature", "top_p", "max_new_tokens")},
        curves={"eval/test/avg@4": curve},
        reward={},
    )


def test_compare_units_pairs_by_seed_and_computes_each_point():
    base = {0: [0.1, 0.2, 0.3], 1: [0.1, 0.25, 0.35], 2: [0.1, 0.2, 0.4]}
    gain = {0: [0.1, 0.3, 0.4], 1: [0.1, 0.3, 0.5], 2: [0.1, 0.2, 0.45], 7: [0.1, 0.9, 0.9]}
    units = [_unit("grpo", s, v) for s, v in base.items()]
    units += [_unit("graft", s, v) for s, v in gain.items()]
    result = compare_units(units)
    assert result["baseline"] == "grpo"
    entry = result["policies"]["llama"]["vs_baseline"]["graft"]
    assert entry["seeds"] == [0, 1, 2] and entry["unpaired_seeds"] == [7]
    m = entry["metrics"]["eval/test/avg@4"]
    final = [0.4 - 0.3, 0.5 - 0.35, 0.45 - 0.4]
    assert m["step_20"]["mean"] == pytest.approx(statistics.fmean(final))
    assert m["step_0"]["mean"] == pytest.approx(0.0)
    curve = [(0.35 - 0.25), (0.4 - 0.3), (0.325 - 0.3)]  # mean over steps 10 and 20
    assert m["curve_mean"]["mean"] == pytest.approx(statistics.fmean(curve))
    assert m["step_20"]["low"] == pytest.approx(paired_interval(final).low)


def _write_run(
    path, overrides, steps=(0, 5, 10), accs=None, policies=("llama",), seed=0, cost_per_step=None
):
    cfg = load_config(Config, "configs/grpo_tiny.yaml", [*overrides, f"run.seed={seed}"])
    if len(policies) > 1:
        entries = ", ".join(f"{{name: {p}, path: 'tiny:llama-char-add'}}" for p in policies)
        cfg = load_config(Config, None, [*overrides, f"run.seed={seed}", f"models=[{entries}]"])
    path.mkdir(parents=True)
    (path / "config.yaml").write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False))
    accs = accs or {}
    lines = []
    for i, step in enumerate(steps):
        record = {"step": step}
        for p in policies:
            prefix = f"m/{p}/" if len(policies) > 1 else ""
            acc = accs.get(p, [0.1 * (j + 1) for j in range(len(steps))])[i]
            record[f"{prefix}eval/test/avg@2"] = acc
            for skill in SKILLS:
                record[f"{prefix}eval/test/{skill}/avg@2"] = acc
            record[f"{prefix}reward/mean"] = acc
        if cost_per_step and step:  # run totals, as the trainer logs them
            record["cost/cum/gen_tokens"] = cost_per_step * step
            record["cost/cum/flops"] = 1e6 * cost_per_step * step
            record["cost/cum/responses"] = cost_per_step * step / 4
        lines.append(json.dumps(record))
    (path / "metrics.jsonl").write_text("\n".join(lines) + "\n")


def test_compare_cli_names_methods_by_config_difference_and_writes_three_files(tmp_path, capsys):
    for seed in range(3):
        _write_run(
            tmp_path / f"grpo_{seed}",
            ["exchange.enabled=false", "eval.every=5"],
            accs={"llama": [0.1, 0.2, 0.3]},
            seed=seed,
        )
        _write_run(
            tmp_path / f"lr_{seed}",
            ["exchange.enabled=false", "eval.every=5", "models.0.optim.lr=3e-5"],
            accs={"llama": [0.1, 0.3, 0.4 + 0.01 * seed]},
            seed=seed,
        )
    # Both methods train without exchange: the baseline must be named.
    line = _one_line_error(capsys, ["compare", str(tmp_path)])
    assert "--baseline" in line
    lr0 = load_config(Config, "configs/grpo_tiny.yaml", []).models[0].optim.lr
    base, lr = f"model.optim.lr={lr0!r}", "model.optim.lr=3e-05"
    assert f"'{base}'" in line and f"'{lr}'" in line
    out = tmp_path / "out"
    argv = ["compare", str(tmp_path), "--out", str(out), "--baseline", base]
    assert main([*argv, "--primary", "test avg@2 final"]) == 0
    body = json.loads((out / "compare.json").read_text())
    assert body["methods"] == sorted([base, lr]) and body["baseline"] == base
    final = body["policies"]["llama"]["vs_baseline"][lr]["metrics"]["eval/test/avg@2"]["step_10"]
    assert final["mean"] == pytest.approx(0.11) and final["significant"]
    assert final["primary"] and final["holm_significant"]  # the only test: Holm p = p
    assert final["holm_p"] == pytest.approx(final["p"])
    assert body["primary"] == {"endpoints": ["test avg@2 final"], "tests": 1, "alpha": 0.05}
    text = (tmp_path / "out" / "compare.md").read_text()
    assert "**significant** (primary, Holm p=" in text and "[" in text
    assert "exploratory" in text  # the curve mean and the skills
    assert (tmp_path / "out" / "compare.png").read_bytes()[:4] == b"\x89PNG"
    assert "compare.md" in capsys.readouterr().out


def _one_line_error(capsys, argv):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("graft: error: "), err
    return err[0]


def test_incomparable_runs_get_one_line(tmp_path, capsys):
    _write_run(tmp_path / "a", ["exchange.enabled=false", "eval.every=5"], steps=(0, 5, 10))
    _write_run(tmp_path / "b", ["eval.every=4"], steps=(0, 4, 8))
    line = _one_line_error(capsys, ["compare", str(tmp_path / "a"), str(tmp_path / "b")])
    assert "not comparable" in line
    _write_run(tmp_path / "c", ["exchange.enabled=false", "eval.every=5", "eval.samples=8"])
    line = _one_line_error(capsys, ["compare", str(tmp_path / "a"), str(tmp_path / "c")])
    assert "eval.samples" in line
    line = _one_line_error(capsys, ["compare", str(tmp_path / "nowhere")])
    assert "nowhere" in line
    line = _one_line_error(capsys, ["compare", str(tmp_path / "a"), "--baseline", "xyz"])
    assert "xyz" in line
    _write_run(tmp_path / "d", ["exchange.enabled=false", "eval.every=5"])
    line = _one_line_error(capsys, ["compare", str(tmp_path / "a"), str(tmp_path / "d")])
    assert "two runs" in line and "seed 0" in line


def _write_pairs(tmp_path, seeds, base_sets, graft_sets, final_a):
    """Two-policy runs (a, b) per seed: GRPO, and GRAFT whose policy a ends at final_a(seed)."""
    for seed in seeds:
        _write_run(
            tmp_path / f"g{seed}",
            ["exchange.enabled=false", "eval.every=5", *base_sets],
            policies=("a", "b"),
            seed=seed,
        )
        _write_run(
            tmp_path / f"x{seed}",
            ["eval.every=5", *graft_sets],
            policies=("a", "b"),
            accs={"a": [0.1, 0.3, final_a(seed)], "b": [0.1, 0.2, 0.3]},
            seed=seed,
        )


def test_multi_policy_runs_split_into_policies_and_keep_explicit_labels(tmp_path):
    _write_pairs(tmp_path, range(2), ["run.label=GRPO"], ["run.label=GRAFT"], lambda seed: 0.5)
    result = compare_runs([tmp_path])
    assert result["baseline"] == "GRPO" and result["methods"] == ["GRAFT", "GRPO"]
    assert set(result["policies"]) == {"a", "b"}
    a = result["policies"]["a"]["vs_baseline"]["GRAFT"]["metrics"]["eval/test/avg@2"]["step_10"]
    assert a["mean"] == pytest.approx(0.2) and a["sd"] == 0.0


def test_one_label_on_two_configs_is_refused_naming_the_difference(tmp_path, capsys):
    _write_run(tmp_path / "a", ["eval.every=5", "run.label=X"])
    _write_run(tmp_path / "b", ["eval.every=5", "run.label=X", "models.0.optim.lr=3e-5"])
    line = _one_line_error(capsys, ["compare", str(tmp_path), "--baseline", "X"])
    assert "'X'" in line and "model.optim.lr" in line


def test_holm_by_hand():
    # sorted: 0.005 * 4 = 0.02 <= 0.05/4 rejected; 0.01 * 3 = 0.03 <= 0.05/3 rejected;
    # 0.03 * 2 = 0.06 > 0.05/2 stops; 0.04 * 1 = 0.04, adjusted up to the running max 0.06.
    got = holm([0.01, 0.04, 0.03, 0.005])
    assert [round(p, 12) for p, _ in got] == [0.03, 0.06, 0.06, 0.02]
    assert [r for _, r in got] == [True, False, False, True]
    assert holm([]) == []
    # 0.3 * 2 = 0.6; 0.9 * 1 = 0.9 (the running max); 0.8 * 2 = 1.6 is capped at 1
    assert holm([0.9, 0.3]) == [(0.9, False), (0.6, False)]
    assert holm([0.8, 0.9]) == [(1.0, False), (1.0, False)]


def test_p_value_and_when_no_verdict_is_drawn():
    iv = paired_interval([0.01, 0.03, 0.02, 0.04, 0.00])
    # t = 0.02 / (0.0158114 / sqrt 5) = 2.8284 on 4 df: two-sided p = 0.0474 (t tables)
    assert iv.p_value == pytest.approx(0.0474, abs=5e-4)
    two = paired_interval([0.023, 0.023])  # a zero-width interval: no verdict
    assert two.low == two.high == pytest.approx(0.023)
    assert two.no_verdict == "2 seeds" and not two.significant and two.p_value is None
    flat = paired_interval([0.02, 0.02, 0.02])
    assert flat.no_verdict == "no spread" and not flat.significant
    assert paired_interval([0.5]).no_verdict == "one seed"


def _null_verdict_rates(n_seeds: int, *, problems=20, trials=4000, seed=0) -> tuple[float, float]:
    """Identical methods on an evaluation like the demo's (accuracy over `problems` problems,
    base rates 5-30% varying by seed): the share of comparisons where the printed verdict says
    significant, and the share where the interval merely excludes 0 (the rule before)."""
    rng = random.Random(seed)

    def acc(p: float) -> float:
        return sum(rng.random() < p for _ in range(problems)) / problems

    verdicts = excludes = 0
    for _ in range(trials):
        rates = [rng.uniform(0.05, 0.3) for _ in range(n_seeds)]
        iv = paired_interval([acc(p) - acc(p) for p in rates])
        verdicts += iv.significant
        excludes += iv.low is not None and (iv.low > 0 or iv.high < 0)
    return verdicts / trials, excludes / trials


def test_printed_verdicts_are_false_at_most_one_time_in_twenty():
    margin = 3 * (0.05 * 0.95 / 4000) ** 0.5  # three standard errors of the simulation
    for n in (2, 3, 5):
        verdicts, excludes = _null_verdict_rates(n, seed=n)
        assert verdicts <= 0.05 + margin, (n, verdicts)
        if n == 2:
            assert verdicts == 0.0
            # what the old rule printed: ties between two seeds give zero-width intervals
            assert excludes > 0.07, excludes


def test_unpaired_seeds_are_named_and_primary_cells_corrected_together(tmp_path):
    base = {0: [0.1, 0.2, 0.3], 1: [0.1, 0.25, 0.35], 2: [0.1, 0.2, 0.4], 3: [0.1, 0.2, 0.3]}
    gain = {0: [0.1, 0.3, 0.4], 1: [0.1, 0.3, 0.5], 2: [0.1, 0.2, 0.45], 7: [0.1, 0.9, 0.9]}
    units = [_unit("grpo", s, v) for s, v in base.items()]
    units += [_unit("graft", s, v) for s, v in gain.items()]
    units += [_unit("other", 9, [0.1, 0.2, 0.3])]
    result = compare_units(units, primary=["eval/test/avg@4"])
    entry = result["policies"]["llama"]["vs_baseline"]["graft"]
    assert entry["unpaired_seeds"] == [7] and entry["baseline_unpaired_seeds"] == [3]
    assert result["policies"]["llama"]["unpaired"] == {
        "other": {"seeds": [9], "baseline": [0, 1, 2, 3]}
    }
    cells = entry["metrics"]["eval/test/avg@4"]
    final, curve = cells["step_20"], cells["curve_mean"]
    assert result["primary"]["tests"] == 2  # final and curve of graft; other has no pair
    (p_final, r_final), (p_curve, r_curve) = holm([final["p"], curve["p"]])
    assert final["holm_p"] == pytest.approx(p_final) and curve["holm_p"] == pytest.approx(p_curve)
    assert final["holm_significant"] is r_final and curve["holm_significant"] is r_curve
    assert "primary" not in cells["step_10"]  # exploratory
    text = markdown(result)
    assert "seeds 7 of 'graft' and seeds 3 of 'grpo' have no partner" in text
    assert (
        "'other': no seed in common with the baseline ('other': seeds 9; 'grpo': seeds 0, 1, 2, 3)"
        in text
    )
    assert "No runs of the baseline" not in text
    assert "| Δ graft (paired: 0, 1, 2) |" in text


def test_primary_endpoints_from_the_runs_and_bad_ones_refused(tmp_path, capsys):
    primary = ["eval.primary=['m/a/eval/test/avg@2 curve']"]
    _write_pairs(tmp_path, range(3), primary, primary, lambda seed: 0.5 + 0.01 * seed)
    result = compare_runs([tmp_path])
    assert result["primary"]["endpoints"] == ["a test avg@2 curve"]
    assert result["primary"]["tests"] == 1  # policy a only, the curve only
    a = result["policies"]["a"]["vs_baseline"]
    (label,) = a
    assert a[label]["metrics"]["eval/test/avg@2"]["curve_mean"]["primary"]
    assert (
        "primary"
        not in result["policies"]["b"]["vs_baseline"][label]["metrics"]["eval/test/avg@2"][
            "curve_mean"
        ]
    )
    line = _one_line_error(capsys, ["compare", str(tmp_path), "--primary", "test avg@9"])
    assert "'eval/test/avg@9' names no compared metric" in line


def test_compare_at_equal_compute_reads_known_curves_at_common_points(tmp_path, capsys):
    """GRPO spends 100 generated tokens a step, resampling 200; both are evaluated at steps 0,
    10 and 20. GRPO's accuracy is 0.1 + 1e-4 per token (0.1, 0.2, 0.3); the other method's is
    0.1 + 1.5e-4 per token plus 0.01 x seed after step 0 (0.1, 0.4, 0.7 at seed 0). On steps it
    leads by 0.4 + 0.01 s at the end. At equal tokens the common points are 0, 1000 and 2000
    (GRPO's last evaluation bounds them: never extrapolated): at 2000 it is its own step-10
    value, 0.4 + 0.01 s against 0.3; at 1000, halfway between its step 0 and step 10 values,
    0.25 + 0.005 s against 0.2."""
    for seed in range(3):
        _write_run(
            tmp_path / f"grpo_{seed}",
            ["exchange.enabled=false", "eval.every=10", "run.label=GRPO"],
            steps=(0, 10, 20),
            accs={"llama": [0.1, 0.2, 0.3]},
            seed=seed,
            cost_per_step=100,
        )
        _write_run(
            tmp_path / f"ds_{seed}",
            ["exchange.enabled=false", "eval.every=10", "run.label=DS", RESAMPLE],
            steps=(0, 10, 20),
            accs={"llama": [0.1, 0.4 + 0.01 * seed, 0.7 + 0.01 * seed]},
            seed=seed,
            cost_per_step=200,
        )
    on_steps = compare_runs([tmp_path], baseline="GRPO")
    final = on_steps["policies"]["llama"]["vs_baseline"]["DS"]["metrics"]["eval/test/avg@2"]
    assert final["step_20"]["mean"] == pytest.approx(0.41)
    out = tmp_path / "out"
    argv = ["compare", str(tmp_path), "--baseline", "GRPO", "--compute", "gen_tokens"]
    assert main([*argv, "--out", str(out)]) == 0
    body = json.loads((out / "compare.json").read_text())
    policy = body["policies"]["llama"]
    assert policy["axis"]["points"] == [0.0, 1000.0, 2000.0]
    m = policy["vs_baseline"]["DS"]["metrics"]["eval/test/avg@2"]
    assert m["at_2"]["mean"] == pytest.approx(0.11) and m["at_0"]["mean"] == pytest.approx(0.0)
    assert m["at_1"]["mean"] == pytest.approx(0.055)
    assert m["curve_mean"]["mean"] == pytest.approx((0.055 + 0.11) / 2)
    assert m["at_2"]["low"] == pytest.approx(paired_interval([0.1, 0.11, 0.12]).low)
    ds = policy["methods"]["DS"]
    assert ds["points"]["eval/test/avg@2"]["at_1"]["mean"] == pytest.approx(0.255)
    assert ds["cost"]["gen_tokens"]["mean"] == 4000 and ds["cost"]["steps"]["mean"] == 20
    text = (out / "compare.md").read_text()
    assert "### test avg@2 at equal generated tokens" in text and "| 1k | 2k |" in text
    assert "| DS | 20 | 1k | 4k | - | - | 4G | 2.00x | - / - / - / - |" in text
    assert "| GRPO | 20 | 500 | 2k | - | - | 2G | 1.00x |" in text
    # A run from before compute was counted: one line, naming it
    _write_run(tmp_path / "old", ["eval.every=10", "run.label=old"], steps=(0, 10, 20))
    line = _one_line_error(capsys, [*argv, "--out", str(out)])
    assert "old" in line and "cost/cum/gen_tokens" in line and "leave out --compute" in line


def test_a_compute_grid_ends_where_the_shortest_run_ends():
    from graft.evidence.compute_axis import compute_grid, interpolate, on_grid

    a = replace(
        _unit("grpo", 0, [0.1, 0.2, 0.3]), compute={10: {"flops": 10.0}, 20: {"flops": 20.0}}
    )
    b = replace(_unit("ds", 0, [0.1, 0.5, 0.6]), compute={10: {"flops": 15.0}, 20: {"flops": 15.5}})
    grid = compute_grid([a, b], "flops")
    assert grid == [0.0, 7.75, 15.5]
    assert on_grid(a, grid, "flops").curves["eval/test/avg@4"] == pytest.approx(
        {0: 0.1, 1: 0.1775, 2: 0.255}
    )
    with pytest.raises(ValueError, match="outside"):
        interpolate([(0.0, 0.1), (10.0, 0.2)], 10.5)


def test_the_cost_table_shows_a_short_runs_cpu_seconds_to_three_figures():
    from graft.evidence.compare_report import cost_table, cpu_seconds

    assert [cpu_seconds(x) for x in (0, 0.0421, 0.5, 1.234, 12.345, 123.45, 1234.5)] == [
        "0",
        "0.0421",
        "0.500",
        "1.23",
        "12.3",
        "123",
        "1234",
    ]
    counts = {"steps": 2, "responses": 16, "gen_tokens": 90, "forward_tokens": 90}
    counts |= {"train_tokens": 90, "flops": 1e9}
    cpu = {"generate_cpu_s": 0.0312, "score_cpu_s": 0.0047, "train_cpu_s": 0.21, "verify_cpu_s": 0}
    cost = {k: {"mean": float(v)} for k, v in (counts | cpu).items()}
    lines = cost_table({"methods": {"GRPO": {"cost": cost}}}, "GRPO")
    assert lines[-1].endswith("| 0.0312 / 0.00470 / 0.210 / 0 |"), lines[-1]
