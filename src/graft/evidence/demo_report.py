"""The demo's analysis: complementarity (the paper's Figure 1), the finished runs compared, and
results.json (with results.md and curves.png beside it).

Every comparison goes through `graft.evidence.compare` (paired per-seed differences against GRPO
with a 95% Student t interval over seeds) and `graft.evidence.regime` (where the gate finds
candidates and how much the weight admits), the same code as `graft compare`.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from graft.config import AlgoConfig, Config, ModelConfig, RolloutConfig, load_config
from graft.evidence.compare import compare_units, load_units
from graft.evidence.compare_report import final_point
from graft.evidence.demo import (
    ALL_METHODS,
    MODELS,
    DemoSettings,
    build_presets,
    is_done,
    regime_methods,
    run_commits,
    run_configs,
    run_inprocess,
    run_parallel,
)
from graft.evidence.endpoints import holm_across
from graft.evidence.pairs import PAIRS, Pair
from graft.evidence.recorded import reduce, source_commit
from graft.evidence.stats import bootstrap_ratio, paired_interval
from graft.rollout import SamplingParams
from graft.rundir import is_timing
from graft.tasks import build_task

EQUAL_COMPUTE = {"study-baselines": "gen_tokens", "study-code": "flops"}
"""The studies whose primary endpoints are read at the last step and at equal compute too, and
the compute axis of each (docs/evidence.md)."""


def complementarity(
    s: DemoSettings, paths: dict[str, str], *, n: int = 8, workers: int = 2
) -> dict[str, Any]:
    """Per-skill accuracy and all-fail rate of each model, and on each model's all-fail prompts
    the share where the other model's group of n is mixed (paper: 47.9% / 18.7%). The programs
    are checked by `workers` verifier processes, once generation is done."""
    from graft.backends.inprocess import InProcessBackend
    from graft.training.policy import PolicySpec
    from graft.verify.pool import VerifierPool
    from graft.verify.scoring import verify_rollouts

    pair = s.the_pair
    task = build_task(load_config(Config, None, list(pair.task_sets)).task)
    split = task.val_problems() if s.eval_suite == "val" else task.test_problems()
    problems = split[: s.eval_problems]
    specs = [
        PolicySpec(
            model=ModelConfig(name=m, path=paths[m]),
            rollout=RolloutConfig(max_new_tokens=s.max_new_tokens),
            algo=AlgoConfig(micro_batch_size=128),
            seed=0,
            index=i,
        )
        for i, m in enumerate(MODELS)
    ]
    backend = InProcessBackend(specs)
    try:
        rollouts = backend.generate(
            problems, n=n, params=SamplingParams(s.max_new_tokens), seeds={m: 99 for m in MODELS}
        )
        with VerifierPool(workers=workers) as pool:
            counts = {
                m: [
                    sum(v.correct for v in vs)
                    for vs in verify_rollouts(pool, task.verifier, rollouts[m])
                ]
                for m in MODELS
            }
    finally:
        backend.close()
    out: dict[str, Any] = {"n": n, "problems": len(problems), "models": {}, "directions": {}}
    for m in MODELS:
        per = {}
        for skill in pair.skills:
            idx = [i for i, p in enumerate(problems) if p.skill == skill]
            per[skill] = {
                "accuracy": sum(counts[m][i] for i in idx) / (n * max(len(idx), 1)),
                "all_fail": sum(counts[m][i] == 0 for i in idx) / max(len(idx), 1),
            }
        out["models"][m] = per
    for src, dst in ((MODELS[0], MODELS[1]), (MODELS[1], MODELS[0])):
        fails = [i for i in range(len(problems)) if counts[dst][i] == 0]
        mixed = [i for i in fails if 0 < counts[src][i] < n]
        out["directions"][f"{src}->{dst}"] = {
            "receiver_all_fail": len(fails),
            "source_mixed_on_them": len(mixed),
            "fraction": len(mixed) / max(len(fails), 1),
        }
    return out


def _pending(s: DemoSettings, out: Path) -> list[tuple[str, int, str, list]]:
    """Every (regime, seed, method, configs) of the design, in the order they run: the main
    methods of every seed first (GRPO first: stored-peer runs read its store), then the
    ablations, so a study stopped part-way has its main comparisons over as many seeds as
    possible."""
    main, extra = [], []
    for seed in s.seeds:
        for regime in s.regimes:
            cfgs = run_configs(s, out, regime, seed)
            for key in ["grpo", *(k for k in cfgs if k != "grpo")]:
                (main if key in s.methods else extra).append((regime, seed, key, cfgs[key]))
    return main + extra


def run_all(s: DemoSettings, out: Path) -> dict[str, float]:
    """Run (or reuse) every run of the design; returns the seconds spent per job label."""
    from tqdm.auto import tqdm

    from graft.sft.loop import sft
    from graft.trainer import train

    jobs = _pending(s, out)
    spent: dict[str, float] = run_side_by_side(s, out, jobs) if s.side_by_side else {}
    bar = tqdm(total=len(jobs), desc=f"demo runs ({s.mode})", dynamic_ncols=True)
    with bar:
        for regime, seed, key, cfgs in jobs:
            name = f"{regime} seed {seed} {ALL_METHODS[key].label}"
            bar.set_postfix_str(name)
            if all(is_done(c) for c in cfgs):
                bar.update(1)
                continue
            store = out / regime / f"seed_{seed}" / "grpo" / "trajectories"
            if ALL_METHODS[key].stored and not store.is_dir():
                raise RuntimeError(f"{name}: the GRPO run's trajectory store {store} is missing")
            start = time.perf_counter()
            if ALL_METHODS[key].stored and s.parallel:
                run_parallel(cfgs, out / regime / f"seed_{seed}")
            else:
                for cfg in cfgs:  # an SFT phase first, where the method has one
                    if not is_done(cfg):
                        run_inprocess(cfg, sft if cfg.sft.store else train)
            spent[name] = time.perf_counter() - start
            bar.update(1)
    return spent


def run_side_by_side(
    s: DemoSettings, out: Path, jobs: list[tuple[str, int, str, list]]
) -> dict[str, float]:
    """Each seed's unfinished plain runs (no SFT phase, no stored peer) at once, one process and
    one core each, with a bar of their steps; the seconds spent per group."""
    from tqdm.auto import tqdm

    groups: dict[tuple[str, int], list[tuple[str, Config]]] = {}
    for regime, seed, key, cfgs in jobs:
        plain = not (ALL_METHODS[key].stored or ALL_METHODS[key].sft)
        if plain and not is_done(cfgs[0]):
            groups.setdefault((regime, seed), []).append((ALL_METHODS[key].label, cfgs[0]))
    spent = {}
    for (regime, seed), runs in groups.items():
        name = f"{regime} seed {seed}: {' and '.join(label for label, _ in runs)} side by side"
        total = sum(c.run.steps for _, c in runs)
        start = time.perf_counter()
        with tqdm(total=total, desc=name, unit="step", dynamic_ncols=True) as bar:
            run_parallel(
                [c for _, c in runs],
                out / regime / f"seed_{seed}",
                progress=lambda n, bar=bar: bar.update(n - bar.n),
            )
            bar.update(total - bar.n)
        spent[name] = time.perf_counter() - start
    return spent


def regime_result(s: DemoSettings, out: Path, regime: str) -> dict[str, Any]:
    """Paired comparison against GRPO of every method of one regime, and stored/online retention
    (the baselines study: also at equal generated tokens)."""
    units = []
    for seed in s.seeds:
        for cfgs in run_configs(s, out, regime, seed).values():
            for c in cfgs:
                if not c.sft.store:  # an SFT phase is part of its method, not a unit
                    units += load_units(Path(c.run.out_dir))
    base = ALL_METHODS["grpo"].label
    if s.mode in EQUAL_COMPUTE:
        weak = weak_final_endpoints(units, s.the_pair)
        result = compare_units(units, baseline=base, primary=weak)
        axis = EQUAL_COMPUTE[s.mode]
        result["equal_compute"] = compare_units(units, baseline=base, primary=weak, compute=axis)
        result["equal_compute"]["axis"] = axis  # Holm's family spans the regimes: study_family
    else:
        result = compare_units(units, baseline=base, primary=primary_endpoints(units, s.the_pair))
    for policy in result["policies"].values():  # the counts; CPU seconds differ run to run
        for entry in policy["methods"].values():
            entry["cost"] = {k: v for k, v in entry["cost"].items() if not is_timing(k)}
    result["retention"] = retention(result)
    result["units"] = units
    return result


def study_family(regimes: dict[str, dict[str, Any]], steps: int) -> None:
    """A study's primary endpoints as the one Holm family its design fixed (docs/evidence.md):
    every regime, at the last step and at equal compute."""
    from graft.evidence.compute_axis import AXES

    results, names = [], []
    for regime, r in regimes.items():
        equal = r["compare"]["equal_compute"]
        results += [r["compare"], equal]
        names += [f"{regime}, at step {steps}", f"{regime}, at equal {AXES[equal['axis']]}"]
    holm_across(results, names=names)


def _mix_key(units: list[Any]) -> tuple[str, str, str]:
    mix = next(key for key in units[0].curves if key.count("/") == 2)  # eval/<suite>/avg@k
    return mix, mix.split("/")[1], mix.rsplit("@", 1)[1]


def weak_final_endpoints(units: list[Any], pair: Pair = PAIRS["mul"]) -> list[str]:
    """The baselines and code studies' primary endpoints: per model, its weak skill at the last
    point."""
    _, suite, k = _mix_key(units)
    return [f"m/{m}/eval/{suite}/{pair.weak[m]}/avg@{k} final" for m in MODELS]


def primary_endpoints(units: list[Any], pair: Pair = PAIRS["mul"]) -> list[str]:
    """docs/evidence.md's primary endpoints: per model, its weak skill and the mix, at the last
    evaluation and over the curve."""
    mix, suite, k = _mix_key(units)
    return [f"m/{m}/{key}" for m in MODELS for key in (f"eval/{suite}/{pair.weak[m]}/avg@{k}", mix)]


def retention(result: dict[str, Any]) -> dict[str, Any]:
    """Stored-peer gain over online gain (both vs GRPO, final), per model and weak skill / mix:
    the ratio of mean gains with a bootstrap range, and the paired difference stored - online."""
    online, stored = ALL_METHODS["graft"].label, ALL_METHODS["stored"].label
    out: dict[str, Any] = {}
    for model, policy in result["policies"].items():
        vs = policy["vs_baseline"]
        if online not in vs or stored not in vs:
            continue
        seeds = sorted(set(vs[online]["seeds"]) & set(vs[stored]["seeds"]))
        for suite, key in _suite_keys(model, result, PAIRS["mul"]).items():
            gains = {}
            for label in (online, stored):
                diffs = vs[label]["differences"][key]
                by_seed = dict(zip(vs[label]["seeds"], diffs[final_point(list(diffs))]))
                gains[label] = [by_seed[sd] for sd in seeds]
            diff = paired_interval([a - b for a, b in zip(gains[stored], gains[online])])
            out.setdefault(model, {})[suite] = {
                "seeds": seeds,
                "ratio": bootstrap_ratio(gains[stored], gains[online]),
                "stored_minus_online": diff.to_dict(),
            }
    return out


def _suite_keys(model: str, result: dict[str, Any], pair: Pair) -> dict[str, str]:
    policy = result["policies"][model]
    any_method = next(iter(policy["methods"].values()))
    mix = next(k for k in any_method["points"] if k.count("/") == 2 and "/avg@" in k)
    suite = mix.split("/")[1]
    k = mix.rsplit("@", 1)[1]
    return {
        "weak": f"eval/{suite}/{pair.weak[model]}/avg@{k}",
        "strong": f"eval/{suite}/{pair.strong[model]}/avg@{k}",
        "mix": mix,
    }


def run_demo(out: Path, s: DemoSettings) -> dict[str, Any]:
    """The whole demo; returns the content of results.json."""
    from graft.evidence.demo_plot import plot_demo
    from graft.evidence.demo_text import markdown

    start = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    names = ", ".join(p for r in s.regimes for p in s.presets[r].values())
    print(f"building (or reusing) the tiny models: {names}", flush=True)
    paths = build_presets(s)
    comps = {}
    for regime in s.regimes:
        comps[regime] = complementarity(s, paths[regime])
        for direction, d in comps[regime]["directions"].items():
            src, dst = direction.split("->")
            print(
                f"{regime}: where {dst} fails all 8 samples ({d['receiver_all_fail']} prompts), "
                f"{src}'s group is mixed on {100 * d['fraction']:.1f}%",
                flush=True,
            )
    spent = run_all(s, out)
    regimes, units = {}, {}
    for regime in s.regimes:
        result = regime_result(s, out, regime)
        units[regime] = result.pop("units")
        regimes[regime] = {"complementarity": comps[regime], "compare": result}
    if s.mode in EQUAL_COMPUTE:
        study_family(regimes, s.steps)
    results = {
        "commit": source_commit(),
        "run_commits": run_commits(
            [
                c
                for r in s.regimes
                for seed in s.seeds
                for cs in run_configs(s, out, r, seed).values()
                for c in cs
            ]
        ),
        "settings": {
            **{k: v for k, v in s.__dict__.items() if k not in ("seeds", "presets")},
            "seeds": list(s.seeds),
            "presets": s.presets,
        },
        "regimes": regimes,
        "labels": {k: ALL_METHODS[k].label for r in s.regimes for k in regime_methods(s, r)},
        "run_seconds": spent,
        "wall_s": time.perf_counter() - start,
    }
    (out / "results.json").write_text(json.dumps(results, indent=2, sort_keys=True))
    if s.mode == "study-code":  # what the main job shows of it, once committed (recorded.py)
        (out / "recorded.json").write_text(json.dumps(reduce(results), indent=2) + "\n")
    (out / "results.md").write_text(markdown(results))
    plot_demo(results, units, out / "curves.png")
    return results
