"""Slow: on the demo's complementary pair, GRAFT lifts each weak skill above its GRPO run.

Each model is pre-trained almost only on one skill (llama: multipliers 2-5, qwen: 6-9) and fails
whole groups on most prompts of the other's. Same seed, prompt order and per-model rollout budget
for both methods. The numbers this produced are recorded in BENCHMARKS.md; the margin is small
(one seed), so read a failure here as a measurement, not as a bug to tune away.
"""

import pytest

from graft.demo import DemoSettings
from graft.demo_report import run_demo

WEAK_SKILL = {"llama": "mul:3,1:6-9", "qwen": "mul:3,1:2-5"}


@pytest.mark.slow
def test_graft_beats_grpo_on_each_receivers_weak_skill(tmp_path):
    results = run_demo(tmp_path, DemoSettings.make(seeds=1, quick=False, reference=False))
    runs = results["per_seed"][0]
    for model, skill in WEAK_SKILL.items():
        grpo, graft = runs["grpo"][model]["end"][skill], runs["graft"][model]["end"][skill]
        assert graft > grpo, f"{model} on {skill}: GRAFT {graft:.3f} <= GRPO {grpo:.3f}"
    exchange = runs["graft"]["exchange"]
    assert all(d["admitted"] > 0 for d in exchange.values()), exchange
