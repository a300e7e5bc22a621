"""The three-model study (docs/evidence.md, "Three models"): its runs are the design's (the
models, pairs, pool, stored logs and own-skill arms), every unit is resumable, and the presets
are pre-trained on the three-reducer task that the runs use."""

import pytest

from graft.evidence.trio import (
    FROZEN,
    MODELS,
    OWN,
    PRESETS,
    SEEDS,
    TRADE,
    graft_configs,
    grpo_config,
    jobs,
    rr_configs,
    settings,
    stored_units,
    trade_config,
)
from graft.models.tiny_specs import TINY_PRESETS, TRIO_TASK


def test_the_runs_are_the_designs(tmp_path):
    s, out = settings(), tmp_path
    assert s.seeds == SEEDS == (20, 21, 22, 23, 24)
    assert (s.steps, s.prompts_per_step, s.group_size, s.lr) == (40, 8, 8, 2e-5)
    grpo = grpo_config(s, out, 20)
    assert [m.name for m in grpo.models] == list(MODELS) and not grpo.exchange.enabled
    assert grpo.run.save_every == 40 and grpo.run.seed == 20
    assert grpo.task.list_functions == TRIO_TASK and grpo.task.name == "list_functions"
    assert (grpo.eval.num_problems, grpo.eval.samples, grpo.eval.every) == (300, 4, 20)
    assert [m.path for m in grpo.models] == [f"tiny:{PRESETS[m]}" for m in MODELS]
    graft = graft_configs(s, out, 21)
    assert set(graft) == {"graft_llama_qwen", "graft_llama_gpt2", "graft_qwen_gpt2", "graft_pool"}
    assert [m.name for m in graft["graft_qwen_gpt2"].models] == ["qwen", "gpt2"]
    assert len(graft["graft_pool"].models) == 3
    for cfg in graft.values():
        ex = cfg.exchange
        assert ex.enabled and ex.source == "online" and ex.delta == 0.8 and ex.balancing
        assert ex.ablation.weight == "paper" and cfg.task == grpo.task
    units = stored_units(s, out, 22)
    assert len(units) == 6 + 2 * len(FROZEN)
    one = units["stored_gpt2_llama"]
    assert [m.name for m in one.models] == ["llama"] and one.exchange.source == "stored"
    assert one.exchange.stored.path == str(out / "trio/seed_22/grpo/trajectories")
    assert (one.exchange.stored.model, one.exchange.stored.records) == ("gpt2", "same_step")
    frozen = units["stored_pre_gpt2_qwen"].exchange.stored
    assert frozen.path == str(out / "trio/seed_22/logs/pre_gpt2") and frozen.records == "latest"
    rr = rr_configs(s, out, 21)
    assert set(rr) == {"graftrr_llama_qwen", "graftrr_llama_gpt2", "graftrr_qwen_gpt2"}
    for name, cfg in rr.items():
        assert cfg.exchange.ablation.weight == "receiver_relative" and cfg.exchange.delta == 0.8
        assert cfg.models == graft[name.replace("graftrr_", "graft_")].models
    trades = {arm: trade_config(s, out, 23, arm) for arm in TRADE}
    assert trades["uniform"].exchange.ablation.peer_position == "uniform"
    assert not trades["nobalance"].exchange.balancing
    assert trades["floor"].exchange.delta == 0.9
    assert [m.optim.lr for m in trades["half_lr"].models] == [1e-5, 1e-5]
    assert [m.name for m in trades["floor"].models] == ["llama", "qwen"]


def test_the_presets_are_pre_trained_on_the_runs_task_each_on_its_own_reducer():
    for model, preset in PRESETS.items():
        spec = TINY_PRESETS[preset]
        assert spec.task == TRIO_TASK
        weights = dict(zip(TRIO_TASK.skills, spec.skill_weights, strict=True))
        assert max(weights, key=weights.get) == OWN[model] and weights[OWN[model]] >= 0.99
    assert {TINY_PRESETS[p].arch for p in PRESETS.values()} == {"llama", "qwen2", "gpt2"}
    learner = TINY_PRESETS[PRESETS["gpt2"]].pretrain_steps
    assert learner < TINY_PRESETS[PRESETS["llama"]].pretrain_steps


def test_seeds_run_whole_with_grpo_first(tmp_path):
    names = [name for name, _ in jobs(settings(seeds=(20, 21)), tmp_path)]
    per_seed = len(names) // 2
    assert names[0] == "seed 20 GRPO" and names[per_seed] == "seed 21 GRPO"
    assert all(n.startswith("seed 20 ") for n in names[:per_seed])
    first = names[:per_seed]
    assert first.index("seed 20 log final gpt2") < first.index(
        "seed 20 stored_final_gpt2_llama, stored_final_gpt2_qwen"
    )
    assert first[-len(TRADE) :] == [f"seed 20 trade {arm}" for arm in TRADE]


def _table(gains: dict[tuple[str, str, str], list[float]]) -> dict:
    """A result table: every run at 0.1 on every skill and seed, plus the given per-seed gains
    (run, model, skill)."""
    from graft.evidence.trio_report import KEYS

    seeds = [20, 21, 22, 23, 24]
    runs = ["grpo", "graft_llama_qwen", "graft_llama_gpt2", "graft_qwen_gpt2", "graft_pool",
            "stored_gpt2_llama"]  # fmt: skip
    table = {r: {m: {sd: dict.fromkeys(KEYS, 0.1) for sd in seeds} for m in MODELS} for r in runs}
    for (run, model, skill), per_seed in gains.items():
        for sd, g in zip(seeds, per_seed, strict=True):
            table[run][model][sd][skill] += g
    return table


def test_the_primary_family_is_the_designs_twelve_cells_by_hand():
    from graft.evidence.trio_report import primary, retention, staleness

    big, none = [0.20, 0.22, 0.18, 0.21, 0.19], [0.01, -0.01, 0.02, -0.02, 0.0]
    table = _table({
        ("graft_llama_gpt2", "llama", "max"): big,
        ("graft_pool", "llama", "max"): big,  # the pool equals the pair: inside the noise
        ("stored_gpt2_llama", "llama", "max"): [g / 2 for g in big],
        ("graft_qwen_gpt2", "qwen", "max"): none,
    })  # fmt: skip
    cells = primary(table)
    assert len(cells) == 12
    pairs = [(c["run"], c["model"], c["skill"]) for c in cells if c["kind"] == "pair"]
    assert pairs == [
        ("graft_llama_qwen", "llama", "sum"), ("graft_llama_qwen", "qwen", "list"),
        ("graft_llama_gpt2", "llama", "max"), ("graft_llama_gpt2", "gpt2", "list"),
        ("graft_qwen_gpt2", "qwen", "max"), ("graft_qwen_gpt2", "gpt2", "sum"),
    ]  # fmt: skip
    pool = {(c["model"], c["skill"]): c["base"] for c in cells if c["kind"] == "pool"}
    assert pool == {
        ("llama", "sum"): "graft_llama_qwen", ("llama", "max"): "graft_llama_gpt2",
        ("qwen", "list"): "graft_llama_qwen", ("qwen", "max"): "graft_qwen_gpt2",
        ("gpt2", "list"): "graft_llama_gpt2", ("gpt2", "sum"): "graft_qwen_gpt2",
    }  # fmt: skip
    llama_max = next(c for c in cells if c["run"] == "graft_llama_gpt2" and c["model"] == "llama")
    assert abs(llama_max["interval"]["mean"] - 0.20) < 1e-12
    # by hand: sd of the five gains 0.01581, t = 0.20 / (0.01581 / sqrt 5) = 28.3, p ~ 9.3e-6;
    # the smallest p of 12 (the others are constant: no spread, no verdict) -> Holm p = p x 1
    assert llama_max["significant"] and llama_max["holm_p"] < 1e-4
    qwen_max = next(c for c in cells if c["run"] == "graft_qwen_gpt2" and c["model"] == "qwen")
    assert not qwen_max["significant"] and qwen_max["holm_p"] > 0.05
    pool_llama = next(c for c in cells if c["kind"] == "pool" and c["skill"] == "max"
                      and c["model"] == "llama")  # fmt: skip
    assert pool_llama["interval"]["mean"] == 0.0 and "holm_p" not in pool_llama  # no spread
    kept = retention(table)["stored_gpt2_llama"]
    assert (kept["receiver"], kept["peer"], kept["skill"]) == ("llama", "gpt2", "max")
    assert abs(kept["ratio"] - 0.5) < 1e-9
    (point,) = staleness(table)["llama"]  # only the same-step log ran here
    assert point["age"] == 0.0 and abs(point["interval"]["mean"] - 0.10) < 1e-12


def test_a_program_is_read_for_the_reducer_it_returns_with():
    from graft.evidence.trio_report import reducer_of

    assert reducer_of("```python\ndef f(xs):\n    return [v*2 for v in xs]\n```") == "list"
    assert reducer_of("def f(xs):\n    return sum(v for v in xs if v>3)") == "sum"
    assert reducer_of("def f(xs):\n    return max(v*v for v in xs)") == "max"
    assert reducer_of("def f(xs): pass") == ""


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_a_two_step_miniature_runs_end_to_end_and_resumes_with_nothing_to_do(tmp_path):
    """The whole design at two steps on barely trained stand-ins: every unit runs, the report
    holds the 12 primary cells, each log's receivers, the regime of the pool per source, the
    peer share and the confusion counts; a second call reruns nothing."""
    import json

    from graft.evidence.trio_report import run_and_write

    quick = {m: f"{p}-quick" for m, p in PRESETS.items()}
    s = settings(steps=2, eval_every=1, prompts_per_step=4, group_size=4, eval_problems=9,
                 eval_samples=1, seeds=(0, 1), presets={"trio": quick})  # fmt: skip
    out = tmp_path / "study"
    files = run_and_write(out, s)
    assert all(f.is_file() and f.stat().st_size > 0 for f in files)
    result = json.loads((out / "results.json").read_text())
    assert len(result["primary"]) == 12 and all(len(c["per_seed"]) == 2 for c in result["primary"])
    assert set(result["retention"]) >= {"stored_gpt2_llama", "stored_final_gpt2_qwen"}
    assert [p["age"] for p in result["staleness"]["llama"]] == [-19.5, 0.0, 20.5]
    pool = result["regime"]["graft_pool"]
    assert {"llama->qwen", "gpt2->qwen", "qwen->gpt2"} <= set(pool)
    assert set(result["peer_share"]) >= {"graft_llama_qwen", "trade_floor"}
    assert set(result["confusion"]["grpo"]) == set(MODELS)
    assert result["cost"]["stored_final_gpt2_llama"]["llama"]["log_flops"] > 0
    assert result["runtime"]["units"] == 2 * (1 + 4 + 3 + 2 + 10 + len(TRADE))
    assert "graftrr_qwen_gpt2 - graft_qwen_gpt2/gpt2/sum" in result["secondary"]
    marks = sorted(out.rglob("done.json"))
    stamps = [m.stat().st_mtime_ns for m in marks]
    run_and_write(out, s)  # everything reused
    assert [m.stat().st_mtime_ns for m in marks] == stamps


def test_the_shipped_configs_are_the_studys_runs(tmp_path):
    """configs/graft_trio.yaml (the pool) and graft_trio_<a>_<b>.yaml (each pair) train what the
    study trains: the same task, models, sampling, update, exchange and evaluation."""
    from graft.config import Config, load_config

    s, study = settings(), graft_configs(settings(), tmp_path, 0)
    for name, cfg in study.items():
        file = "graft_trio" if name == "graft_pool" else name.replace("graft_", "graft_trio_")
        shipped = load_config(Config, f"configs/{file}.yaml", [])
        for part in ("task", "models", "rollout", "exchange"):
            assert getattr(shipped, part) == getattr(cfg, part), (file, part)
        assert (shipped.algo.minibatches, shipped.algo.micro_batch_size) == (2, 64)
        assert shipped.algo == cfg.algo and shipped.run.steps == s.steps
        for key in ("every", "num_problems", "samples", "temperature", "suites"):
            assert getattr(shipped.eval, key) == getattr(cfg.eval, key), (file, key)


def test_the_recorded_answer_is_one_line_per_question_from_the_results():
    """reduce() keeps the 12 primary cells, the same-seed logs' retention and the own-skill arms;
    the demo's lines say each question's answer from them, or that nothing is recorded yet."""
    from graft.evidence.recorded import trio_lines
    from graft.evidence.trio_report import primary, reduce, retention, secondary

    big = [0.20, 0.22, 0.18, 0.21, 0.19]
    table = _table({("graft_llama_gpt2", "llama", "max"): big,
                    ("stored_gpt2_llama", "llama", "max"): [g / 2 for g in big]})  # fmt: skip
    result = {"seeds": [20, 21, 22, 23, 24], "primary": primary(table),
              "secondary": secondary(table), "retention": retention(table),
              "trade": {arm: t.label for arm, t in TRADE.items()},
              "commits": ["abc1234"]}  # fmt: skip
    recorded = reduce(result)
    assert len(recorded["cells"]) == 12 and recorded["commit"] == "abc1234"
    assert set(recorded["retention"]) == {"stored_gpt2_llama"}
    lines = trio_lines(recorded)
    assert lines[0].startswith("**Three models** (the pre-registered three-model study, 5 seeds")
    assert "llama `max` +20.0 [" in lines[2] and "(significant)" in lines[2]
    assert "llama from gpt2 (`max`) 0.50 [" in lines[4]
    assert len(lines) == 6 and lines[5].endswith("not run")
    assert "not recorded yet" in trio_lines(None)[0]


def test_the_code_runs_what_the_second_design_fixed():
    """docs/evidence.md's second three-model design names the seeds, the presets' mixes, gpt2's
    pre-training and the exploratory receiver-relative runs: the code holds the same."""
    from pathlib import Path

    from graft.models.tiny_specs import TRIO_GPT2_STEPS

    text = (Path(__file__).resolve().parents[1] / "docs" / "evidence.md").read_text()
    design = text.split("## Three models, second design")[1].split("\n## ")[0]
    first = text.split("## Three models: other pairs")[1].split("\n## ")[0]
    assert "Seeds reported: 20, 21, 22, 23, 24" in first and SEEDS == (20, 21, 22, 23, 24)
    assert "**300 steps**" in design and TRIO_GPT2_STEPS == 300
    assert "pre-trained 99.8/0.1/0.1" in design
    for model in ("llama", "qwen"):
        assert sorted(TINY_PRESETS[PRESETS[model]].skill_weights) == [0.001, 0.001, 0.998]
    assert sorted(TINY_PRESETS[PRESETS["gpt2"]].skill_weights) == [0.005, 0.005, 0.99]
    assert "`graftrr_<a>_<b>`" in design and "weight=receiver_relative" in design
    assert all(f"`{arm}`" in first for arm in TRADE)


def test_a_cell_without_a_verdict_says_so_not_inside_the_noise():
    """One seed gives no verdict: the results table and the demo's line say "no verdict", never
    "inside the noise"."""
    from graft.evidence.recorded import trio_lines
    from graft.evidence.trio_report import primary, reduce
    from graft.evidence.trio_text import _primary_lines

    table = _table({})
    one = {r: {m: {20: by[20]} for m, by in models.items()} for r, models in table.items()}
    cells = primary(one)
    rows = _primary_lines({"primary": cells})
    assert all("no verdict (one seed)" in r for r in rows[2:]), rows[2]
    result = {"seeds": [20], "primary": cells, "secondary": {}, "retention": {},
              "trade": {}, "commits": ["abc1234"]}  # fmt: skip
    line = trio_lines(reduce(result))[2]
    assert "no verdict: 1 seed(s)" in line and "inside the noise" not in line
