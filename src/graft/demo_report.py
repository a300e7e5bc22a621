"""`graft demo`, part 2: complementarity (the paper's Figure 1), the run, and the results files."""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Any

from graft.config import AlgoConfig, ModelConfig, RolloutConfig
from graft.demo import (
    LABELS,
    MODELS,
    DemoSettings,
    _run_parallel,
    build_presets,
    collect,
    run_configs,
)
from graft.models.tiny import MUL_SKILLS
from graft.rollout import SamplingParams
from graft.tasks.arithmetic import ArithmeticTask

SUITES = (*MUL_SKILLS, "mix")


def complementarity(s: DemoSettings, paths: dict[str, str], *, n: int = 8) -> dict[str, Any]:
    """Per-skill accuracy and all-fail rate of each model, and on each model's all-fail prompts
    the share where the other model's group of n is mixed (paper: 47.9% / 18.7%)."""
    from graft.backends.inprocess import InProcessBackend
    from graft.config import ArithmeticConfig
    from graft.policy import PolicySpec
    from graft.tasks.pool import VerifierPool
    from graft.tasks.scoring import verify_rollouts

    task = ArithmeticTask(ArithmeticConfig(skills=MUL_SKILLS, scratchpad=True))
    problems = task.test_problems()[: s.eval_problems]
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
        with VerifierPool(workers=1) as pool:
            counts = {
                m: [
                    sum(v.correct for v in vs)
                    for vs in verify_rollouts(pool, "final_number", rollouts[m])
                ]
                for m in MODELS
            }
    finally:
        backend.close()
    out: dict[str, Any] = {"n": n, "problems": len(problems), "models": {}, "directions": {}}
    for m in MODELS:
        per = {}
        for skill in MUL_SKILLS:
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


def _mean_std(values: list[float]) -> dict[str, Any]:
    return {
        "mean": statistics.fmean(values),
        "std": statistics.stdev(values) if len(values) > 1 else 0.0,
        "values": values,
    }


def summarize(per_seed: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """Mean ± std over seeds per method, model and suite; deltas against GRPO per seed."""
    seeds = sorted(per_seed)
    table: dict[str, Any] = {"start": {}}
    for m in MODELS:
        table["start"][m] = {
            suite: _mean_std([per_seed[sd]["grpo"][m]["start"][suite] for sd in seeds])
            for suite in SUITES
        }
    methods = [k for k in per_seed[seeds[0]] if k in LABELS]
    deltas: dict[str, Any] = {}
    for method in methods:
        table[method] = {
            m: {
                suite: _mean_std([per_seed[sd][method][m]["end"][suite] for sd in seeds])
                for suite in SUITES
            }
            for m in MODELS
        }
        if method != "grpo":
            deltas[method] = {
                m: {
                    suite: _mean_std(
                        [
                            per_seed[sd][method][m]["end"][suite]
                            - per_seed[sd]["grpo"][m]["end"][suite]
                            for sd in seeds
                        ]
                    )
                    for suite in SUITES
                }
                for m in MODELS
            }
    return {"table": table, "deltas_vs_grpo": deltas}


def _cell(entry: dict[str, Any]) -> str:
    if len(entry["values"]) == 1:
        return f"{100 * entry['mean']:.1f}"
    return f"{100 * entry['mean']:.1f} ± {100 * entry['std']:.1f}"


def markdown(results: dict[str, Any]) -> str:
    s, summary = results["settings"], results["summary"]
    head = ["Method", *(f"{m} {suite.split(':')[-1]}" for m in MODELS for suite in SUITES)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for method, rows in summary["table"].items():
        label = "start (pre-trained)" if method == "start" else LABELS[method]
        cells = [_cell(rows[m][suite]) for m in MODELS for suite in SUITES]
        lines.append("| " + " | ".join([label, *cells]) + " |")
    for method, rows in summary["deltas_vs_grpo"].items():
        cells = [f"{100 * rows[m][suite]['mean']:+.1f}" for m in MODELS for suite in SUITES]
        lines.append("| " + " | ".join([f"Δ {LABELS[method]} − GRPO", *cells]) + " |")
    comp = results["complementarity"]
    text = [
        f"# graft demo: GRAFT vs GRPO on two tiny heterogeneous models ({s['mode']})",
        "",
        f"Held-out accuracy (avg@{s['eval_samples']} at temperature 1, percent, "
        f"{s['eval_problems']} problems: half multipliers 2-5, half 6-9) after {s['steps']} steps "
        f"of {s['prompts_per_step']} prompts x {s['group_size']} responses per model; mean ± std "
        f"over seeds {s['seeds']}. llama: Llama + character tokenizer, pre-trained mostly on 2-5; "
        f"qwen: Qwen2 + BPE, mostly on 6-9.",
        "",
        *lines,
        "",
        "Complementarity before training (n = 8 samples per held-out prompt; the paper's "
        "Figure 1 reports 47.9% / 18.7%):",
    ]
    for direction, d in comp["directions"].items():
        src, dst = direction.split("->")
        text.append(
            f"- on {d['receiver_all_fail']} prompts where {dst} fails all 8, {src}'s "
            f"group is mixed on {100 * d['fraction']:.1f}%"
        )
    text += ["", "Exchange (online GRAFT, all seeds and steps): "]
    for direction, d in results["exchange"]["online"].items():
        text.append(
            f"- {direction}: {d['selected']:.0f} prompts selected, "
            f"{d['admitted']:.0f}/{d['responses_sent']:.0f} responses admitted "
            f"({100 * d['admission_rate']:.0f}%)"
        )
    text += ["", f"Wall time: {results['wall_s']:.0f} s."]
    return "\n".join(text) + "\n"


def run_demo(out: Path, s: DemoSettings) -> dict[str, Any]:
    """The whole demo; returns the content of results.json."""
    from graft.report import plot_runs
    from graft.trainer import train

    start = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    print(f"building (or reusing) the two tiny models: {', '.join(s.presets.values())}", flush=True)
    paths = build_presets(s)
    comp = complementarity(s, paths)
    for direction, d in comp["directions"].items():
        src, dst = direction.split("->")
        print(
            f"complementarity: where {dst} fails all 8 samples ({d['receiver_all_fail']} "
            f"prompts), {src}'s group is mixed on {100 * d['fraction']:.1f}%",
            flush=True,
        )
    per_seed, online = {}, {}
    for seed in s.seeds:
        cfgs = run_configs(s, out, seed)
        for method in ("grpo", "graft", "grpo4x"):
            for c in cfgs.get(method, []):
                print(f"seed {seed}: {LABELS[method]}", flush=True)
                train(_with_progress(c))
        print(
            f"seed {seed}: {LABELS['stored']} (each model against the other's GRPO store)",
            flush=True,
        )
        _run_parallel(cfgs["stored"], out)
        per_seed[seed] = collect(s, cfgs)
        for direction, d in per_seed[seed]["graft"].get("exchange", {}).items():
            agg = online.setdefault(direction, {})
            for key, value in d.items():
                agg[key] = agg.get(key, 0.0) + value if key != "admission_rate" else 0.0
    for d in online.values():
        d["admission_rate"] = d.get("admitted", 0.0) / max(d.get("responses_sent", 0.0), 1.0)
    results = {
        "settings": {
            **{k: v for k, v in s.__dict__.items() if k != "seeds"},
            "seeds": list(s.seeds),
            "mode": "quick" if s.quick else "default",
        },
        "complementarity": comp,
        "per_seed": per_seed,
        "summary": summarize(per_seed),
        "exchange": {"online": online},
        "wall_s": time.perf_counter() - start,
    }
    (out / "results.json").write_text(json.dumps(results, indent=2, sort_keys=True))
    (out / "results.md").write_text(markdown(results))
    first = out / f"seed_{s.seeds[0]}"
    runs = [first / "grpo", first / "graft", first / "stored_llama", first / "stored_qwen"]
    plot_runs([r for r in runs if (r / "metrics.jsonl").is_file()], out / "curves.png")
    return results


def _with_progress(cfg: Any) -> Any:
    import dataclasses

    return dataclasses.replace(cfg, run=dataclasses.replace(cfg.run, progress=True))
