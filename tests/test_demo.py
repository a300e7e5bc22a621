"""`graft demo --quick` through the real CLI: both regimes, every method, intervals over two
seeds, curves with several evaluations, the regime report, and reuse of finished runs."""

import json
import struct
from pathlib import Path

import pytest

from graft.cli import main
from graft.evidence.demo import ALL_METHODS, MAIN_METHODS, MODELS
from graft.rundir import read_metrics

LABELS = [ALL_METHODS[k].label for k in MAIN_METHODS]


def _miniature(s, **changes):
    """A design cut to seconds: 2 steps of 2 prompts x 4 responses, avg@1, the quick presets."""
    import dataclasses

    presets = {r: {m: f"{p}-quick" for m, p in ps.items()} for r, ps in s.presets.items()}
    small = dict(steps=2, prompts_per_step=2, group_size=4, eval_samples=1, presets=presets)
    return dataclasses.replace(s, **{**small, **changes})


def _png_size(path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", data[16:24])


@pytest.mark.slow
@pytest.mark.timeout(1800)  # 2-3 minutes on an idle 2-core machine; a loaded one needs more
def test_demo_quick_writes_intervals_curves_and_regimes_and_reuses_finished_runs(tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["demo", "--quick", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    results = json.loads((out / "results.json").read_text())
    settings = results["settings"]
    assert settings["seeds"] == [0, 1] and settings["mode"] == "quick"
    assert set(results["regimes"]) == {"latent", "cold"}

    for regime, body in results["regimes"].items():
        compare = body["compare"]
        assert compare["baseline"] == "GRPO" and set(compare["methods"]) == set(LABELS)
        for model in MODELS:
            policy = compare["policies"][model]
            grpo = policy["methods"]["GRPO"]["points"]
            for label in LABELS:
                points = policy["methods"][label]["points"]
                assert policy["methods"][label]["seeds"] == [0, 1]
                for key, pts in points.items():
                    steps = [p for p in pts if p.startswith("step_")]
                    assert len(steps) >= 3, (regime, label, key)
                    # Same seed, same pre-trained model, same evaluation draws at step 0.
                    assert pts["step_0"]["mean"] == grpo[key]["step_0"]["mean"]
                if label == "GRPO":
                    continue
                # Two seeds: every point has an interval; it equals the hand computation.
                vs = policy["vs_baseline"][label]
                mix = next(k for k in vs["metrics"] if k.count("/") == 2 and "avg@" in k)
                iv = vs["metrics"][mix]["curve_mean"]
                diffs = vs["differences"][mix]["curve_mean"]
                assert iv["low"] is not None and iv["n"] == 2
                assert abs(iv["mean"] - sum(diffs) / 2) < 1e-12
            # The regime report of every method that exchanged into this model.
            other = MODELS[1 - MODELS.index(model)]
            regime_report = policy["methods"]["GRAFT (paper weight)"]["regime"]
            assert f"{other}->{model}" in regime_report
            report = regime_report[f"{other}->{model}"]
            assert set(report["skills"]) == {"mul:3,1:2-5", "mul:3,1:6-9"}
            assert report["message"]
            assert "stored:" in next(iter(policy["methods"]["GRAFT (stored peer)"]["regime"]))
        # The runs themselves: every method of both seeds, exchange metrics logged.
        seed_dir = out / regime / "seed_1"
        for run in ("grpo", "graft", "graft_rr", "stored_llama", "stored_qwen"):
            assert (seed_dir / run / "done.json").is_file(), run
        keys = set().union(*read_metrics(seed_dir / "graft"))
        assert {"x/llama->qwen/candidates", "x/qwen->llama/admit_if/paper/correct"} <= keys
        assert "x/llama->qwen/by_skill/mul:3,1:2-5/all_fail" in keys

    text = (out / "results.md").read_text()
    for needle in ("## Regime: latent", "## Regime: cold", "Difference to GRPO", "Exchange regime"):
        assert needle in text
    assert "| GRAFT (receiver_relative) |" in text and "[" in text
    assert "## Regime: cold" in printed
    width, height = _png_size(out / "curves.png")
    assert width > 1000 and height > 300

    # Resumable: a second call reuses every finished run; a run without its marker restarts.
    (out / "cold" / "seed_0" / "graft_rr" / "done.json").unlink()
    assert main(["demo", "--quick", "--out", str(out)]) == 0
    again = json.loads((out / "results.json").read_text())
    assert list(again["run_seconds"]) == ["cold seed 0 GRAFT (receiver_relative)"]
    assert again["regimes"] == results["regimes"]


@pytest.mark.slow
def test_sft_then_grpo_in_the_baselines_design_fine_tunes_each_model_on_its_peer(tmp_path):
    """The baselines study's "SFT on the peer, then GRPO": after the seed's GRPO run, each model's
    `graft sft` reads the OTHER model's rollouts in that run's store (here replaced by correct
    answers, since the quick models have none), and the pair trains from the two best
    checkpoints."""
    import dataclasses
    import shutil

    from graft.evidence.demo import DemoSettings, run_configs
    from graft.evidence.demo_report import run_all
    from graft.groups import make_groups
    from graft.store import Provenance, StoreWriter, group_rows
    from graft.types import Completion, Problem, Rollout, Verdict

    s = DemoSettings.make(quick=True)
    s = dataclasses.replace(s, methods=("grpo",), regimes=("latent",), seeds=(0,))
    run_all(s, tmp_path)
    store = tmp_path / "latent/seed_0/grpo/trajectories"
    shutil.rmtree(store)
    writer = StoreWriter(str(store), run_id="grpo", run_meta={}, background=False)
    for name, skill in (("llama", "mul:3,1:2-5"), ("qwen", "mul:3,1:6-9")):
        problems = [
            Problem(f"{100 + i}*{2 + i % 4}=", str((100 + i) * (2 + i % 4)), skill)
            for i in range(12)
        ]
        rollouts = [
            Rollout(p, name, (1,), (Completion(p.gold, (5,), (-0.5,), "stop"),) * 2)
            for p in problems
        ]
        verdicts = [(Verdict("correct"),) * 2 for _ in problems]
        prov = Provenance("grpo", name, "", "", "final_number", "", 1.0, 1.0, 0, 48)
        writer.write(name, 0, group_rows(make_groups(rollouts, verdicts), step=0, prov=prov))
    writer.close()
    s = dataclasses.replace(s, methods=("grpo", "sft_grpo"))
    *sfts, pair = run_configs(s, tmp_path, "latent", 0)["sft_grpo"]
    assert [(c.models[0].name, c.sft.peer_model) for c in sfts] == [
        ("llama", "qwen"),
        ("qwen", "llama"),
    ]
    run_all(s, tmp_path)
    for cfg in sfts:
        data = json.loads((tmp_path / cfg.run.out_dir / "sft_data.json").read_text())
        assert data["correct"] == 12 and data["store"] == str(store)
    assert [m.path for m in pair.models] == [
        f"{c.run.out_dir}/checkpoints/best/{c.models[0].name}" for c in sfts
    ]
    assert (tmp_path / pair.run.out_dir / "done.json").is_file()
    assert read_metrics(pair.run.out_dir)[-1]["step"] == s.steps


def test_the_baselines_study_tests_its_primary_endpoints_as_one_family_across_regimes():
    """The design fixes one Holm family of 40 over both regimes and both axes: four results
    with one primary cell each are one family of 4, whose adjusted p-values are Holm's."""
    from graft.evidence.demo_report import study_family
    from graft.evidence.stats import holm

    def result(p):
        cell = {"primary": True, "p": p}
        metrics = {"m/llama/eval/test/weak/avg@2": {"final": cell}}
        return {
            "policies": {"llama": {"vs_baseline": {"GRAFT": {"metrics": metrics}}}},
            "primary": {"endpoints": ["llama weak final"], "tests": 1, "alpha": 0.05},
        }

    p_values = {("cold", "steps"): 0.02, ("cold", "tokens"): 0.03}
    p_values |= {("latent", "steps"): 0.013, ("latent", "tokens"): 0.04}
    regimes = {}
    for regime in ("latent", "cold"):
        compare = result(p_values[regime, "steps"])
        compare["equal_compute"] = result(p_values[regime, "tokens"]) | {"axis": "gen_tokens"}
        regimes[regime] = {"compare": compare}
    study_family(regimes, 60)
    order = [(r, a) for r in ("latent", "cold") for a in ("steps", "tokens")]
    expected = holm([p_values[k] for k in order])
    for (regime, axis), (p_adj, reject) in zip(order, expected, strict=True):
        r = regimes[regime]["compare"]
        r = r if axis == "steps" else r["equal_compute"]
        cell = r["policies"]["llama"]["vs_baseline"]["GRAFT"]["metrics"]
        cell = cell["m/llama/eval/test/weak/avg@2"]["final"]
        assert (cell["holm_p"], cell["holm_significant"]) == (p_adj, reject)
        assert r["primary"]["tests"] == 4
        assert len(r["primary"]["endpoints"]) == 4
    # each regime alone (a family of 2) would reject both of its cells; the family of 4 none
    assert all(
        holm([p_values[r, "steps"], p_values[r, "tokens"]])[0][1] for r in ("cold", "latent")
    )
    assert [reject for _, reject in expected] == [False, False, False, False]


def test_the_code_study_runs_its_design_on_the_code_pair():
    """docs/evidence.md's code-pair study: the shipped list/sum pair and budget, five methods,
    seeds 10-14, dynamic sampling at its pilot's budget, SFT on the peer's programs first, and
    the primary endpoints on each model's stuck reducer."""
    from graft.evidence.demo import CODE_DS_MAX_RESPONSES, DemoSettings, run_configs
    from graft.evidence.demo_report import weak_final_endpoints

    s = DemoSettings.make(study="code")
    assert (s.pair, s.mode, s.seeds, s.regimes) == (
        "code",
        "study-code",
        (10, 11, 12, 13, 14),
        ("code",),
    )
    cfgs = run_configs(s, Path("runs/x"), "code", 10)
    assert list(cfgs) == ["grpo", "grpo_ds", "sft_grpo", "graft", "graft_rr"]
    grpo = cfgs["grpo"][0]
    assert grpo.task.name == "list_functions" and not grpo.exchange.enabled
    assert [m.path for m in grpo.models] == ["tiny:llama-char-code-list", "tiny:qwen2-bpe-code-sum"]
    assert (grpo.run.steps, grpo.rollout.prompts_per_step, grpo.rollout.group_size) == (40, 8, 8)
    assert (grpo.eval.every, grpo.eval.num_problems, grpo.eval.samples) == (20, 200, 4)
    assert (grpo.rollout.max_new_tokens, grpo.models[0].optim.lr) == (80, 2e-5)
    ds = cfgs["grpo_ds"][0]
    assert {m.zero_contrast.max_responses for m in ds.models} == {CODE_DS_MAX_RESPONSES} == {24}
    assert {m.zero_contrast.mode for m in ds.models} == {"resample"}
    *sfts, pair = cfgs["sft_grpo"]
    assert [c.sft.peer_model for c in sfts] == ["qwen", "llama"]
    assert pair.models[0].path.endswith("sft_grpo_sft_llama/checkpoints/best/llama")
    assert all(c.task.name == "list_functions" for c in sfts)
    assert cfgs["graft_rr"][0].exchange.ablation.weight == "receiver_relative"

    from types import SimpleNamespace

    unit = SimpleNamespace(curves={"eval/test/avg@4": {}})
    assert weak_final_endpoints([unit], s.the_pair) == [
        "m/llama/eval/test/sum/avg@4 final",
        "m/qwen/eval/test/list/avg@4 final",
    ]


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_the_code_study_records_its_answer_and_the_main_job_opens_with_it(tmp_path):
    """A miniature code study (quick models, three seeds, GRPO and GRAFT) through run_demo: its
    recorded.json holds exactly the study's primary cells for GRAFT minus GRPO on each stuck
    skill, and the main job's results.md opens with them, naming the commit, before the run's
    own anecdote; without a recorded answer it says there is none."""

    from graft.evidence import recorded
    from graft.evidence.demo import DemoSettings
    from graft.evidence.demo_report import run_demo
    from graft.evidence.demo_text import markdown
    from graft.evidence.endpoints import final_point

    s = _miniature(
        DemoSettings.make(study="code"),
        eval_every=1,
        eval_problems=6,
        seeds=(0, 1, 2),
        methods=("grpo", "graft"),
        parallel=False,
    )
    results = run_demo(tmp_path / "study", s)
    answer = json.loads((tmp_path / "study" / "recorded.json").read_text())
    compare = results["regimes"]["code"]["compare"]
    assert answer["seeds"] == [0, 1, 2] and answer["method"] == "GRAFT (paper weight)"
    assert [(c["model"], c["skill"], c["where"]) for c in answer["cells"]] == [
        ("llama", "sum", "step 2"),
        ("llama", "sum", "equal flops"),
        ("qwen", "list", "step 2"),
        ("qwen", "list", "equal flops"),
    ]
    for cell in answer["cells"]:
        source = compare if cell["where"] == "step 2" else compare["equal_compute"]
        vs = source["policies"][cell["model"]]["vs_baseline"]["GRAFT (paper weight)"]
        key = f"eval/test/{cell['skill']}/avg@1"
        point = final_point(list(vs["metrics"][key]))
        assert point == ("step_2" if cell["where"] == "step 2" else "at_2")
        assert cell["mean"] == vs["metrics"][key][point]["mean"]
        assert cell["per_seed"] == vs["differences"][key][point]
    assert answer["commit"] and answer["tests"] == 4  # 1 method x 2 models x 2 axes
    # curves.png is the grid: a row per model, four columns (own skill, peer's skill, exchange,
    # reward) at 17 x 3.6 inches a row, 80 dpi
    assert _png_size(tmp_path / "study" / "curves.png") == (1360, 576)

    shelf = tmp_path / "shelf"
    shelf.mkdir()
    (shelf / "code_study.json").write_text(json.dumps(answer))
    main_job = dict(results, settings={**results["settings"], "mode": "default"})
    lines = recorded.answer_lines(recorded.load("code_study", shelf))
    text = markdown(main_job)
    assert text.startswith("# graft demo: GRAFT on two models that write code")
    packaged = recorded.load("code_study")  # the study, recorded at this version
    assert packaged is not None and packaged["seeds"] == [10, 11, 12, 13, 14]
    assert "\n".join(recorded.answer_lines(packaged)) in text.split("**This run**")[0]
    assert recorded.answer_lines(None)[0].startswith("**The answer is not recorded yet.**")
    opening = "\n".join(lines)
    assert f"run at commit {answer['commit']}" in opening
    assert "llama `sum`, step 2:" in opening and "inside the noise" in opening
    assert recorded.load("code_study", tmp_path) is None
    (tmp_path / "code_study.json").write_text("{}")
    with pytest.raises(Exception, match="not a recorded study answer"):
        recorded.load("code_study", tmp_path)


@pytest.mark.timeout(900)
def test_side_by_side_runs_give_the_numbers_of_runs_one_after_the_other(tmp_path, capsys):
    """The default demo runs GRPO and GRAFT at once, a `graft train` process each: every metric
    but the timings equals the same design run one after the other in this process, and the
    side-by-side bar counted the steps of both runs."""
    import dataclasses

    from graft.evidence.demo import DemoSettings, run_configs
    from graft.evidence.demo_report import run_all
    from graft.rundir import is_timing

    s = DemoSettings.make()
    assert s.side_by_side and s.methods == ("grpo", "graft")
    s = _miniature(s, eval_every=2, eval_problems=4)
    spent = run_all(s, tmp_path / "both")
    assert list(spent) == ["code seed 0: GRPO and GRAFT (paper weight) side by side"]
    assert "4/4" in capsys.readouterr().err  # the bar: 2 steps of each run
    run_all(dataclasses.replace(s, side_by_side=False, parallel=False), tmp_path / "one")
    for key in s.methods:
        (both,) = run_configs(s, tmp_path / "both", "code", 0)[key]
        (one,) = run_configs(s, tmp_path / "one", "code", 0)[key]
        assert both.run.backend == one.run.backend == "inprocess"
        got, want = read_metrics(Path(both.run.out_dir)), read_metrics(Path(one.run.out_dir))
        assert len(got) == len(want) == 3  # step 0's evaluation, then 2 steps
        for g, w in zip(got, want, strict=True):
            drop = {k for k in {*g, *w} if is_timing(k)}
            assert {k: v for k, v in g.items() if k not in drop} == {
                k: v for k, v in w.items() if k not in drop
            }
