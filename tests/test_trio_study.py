"""The three-model study (docs/evidence.md, "Three models"): its runs are the design's (the
models, pairs, pool, stored logs and own-skill arms), every unit is resumable, and the presets
are pre-trained on the three-reducer task that the runs use."""

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
        assert max(weights, key=weights.get) == OWN[model] and weights[OWN[model]] == 0.99
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
