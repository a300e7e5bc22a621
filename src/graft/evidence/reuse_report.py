"""The reuse study's numbers (docs/evidence.md, "Trajectory reuse where GRAFT works"): per seed
and model, the stuck skill, the own skill and the mix at the last evaluation of every run; the
primary family (each of arms a-d minus GRPO on the stuck skill, paired t over seeds, Holm), the
retention of arm a (stored gain / online gain, percentile bootstrap), the secondary differences,
the exchange regime and coverage of each log, the cost with each log's generation counted, and
the staleness curve (`staleness.png`)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from graft.errors import DataError
from graft.evidence.compare import load_units
from graft.evidence.demo import DemoSettings
from graft.evidence.pairs import MODELS, PAIRS
from graft.evidence.reuse import (
    ARMS,
    CONTROLS,
    PEER,
    PRIMARY_ARMS,
    next_seed,
    seed_dir,
    settings,
)
from graft.evidence.stats import bootstrap_ratio, holm, paired_interval
from graft.rundir import read_metrics
from graft.training.cost import flop_estimate

PAIR = PAIRS["code"]
PAIR_RUNS = ("grpo", "graft", *CONTROLS)
LOG_USERS = 3
"""Receivers that train on one GRPO log of a peer in this study: arms a and e of its seed, arm b
of the seed before (its log cost is split among them)."""


def run_dirs(s: DemoSettings, out: Path, seed: int) -> dict[str, dict[str, Path]]:
    """method -> model -> run directory of one seed."""
    base = seed_dir(out, seed)
    found = {name: {m: base / name for m in MODELS} for name in PAIR_RUNS}
    found.update({arm: {m: base / f"stored_{arm}_{m}" for m in MODELS} for arm in ARMS})
    return found


def final_value(curve: Mapping[int, float]) -> float:
    return curve[max(curve)]


def skill_key(s: DemoSettings, skill: str) -> str:
    """A skill's (or, for "", the mix's) held-out curve, as `load_units` names it."""
    where = f"eval/{s.eval_suite}/{skill}/" if skill else f"eval/{s.eval_suite}/"
    return f"{where}avg@{s.eval_samples}"


def values(s: DemoSettings, out: Path) -> dict[str, dict[str, dict[int, dict[str, float]]]]:
    """method -> model -> seed -> {stuck, own, mix}: each skill's held-out avg@k at the last
    evaluation (runs not finished yet are left out)."""
    found: dict[str, dict[str, dict[int, dict[str, float]]]] = {}
    for seed in s.seeds:
        for method, dirs in run_dirs(s, out, seed).items():
            for model, run_dir in dirs.items():
                if not (run_dir / "done.json").is_file():
                    continue
                (unit,) = [u for u in load_units(run_dir) if u.policy == model]
                found.setdefault(method, {}).setdefault(model, {})[seed] = {
                    "stuck": final_value(unit.curves[skill_key(s, PAIR.weak[model])]),
                    "own": final_value(unit.curves[skill_key(s, PAIR.strong[model])]),
                    "mix": final_value(unit.curves[skill_key(s, "")]),
                }
    return found


def json_table(table: Mapping[str, Any]) -> dict[str, Any]:
    """run -> model -> seed -> values, with the seeds as JSON keys (strings)."""
    return {
        run: {m: {str(sd): v for sd, v in by.items()} for m, by in models.items()}
        for run, models in table.items()
    }


def differences(
    table: Mapping[str, Any], method: str, base: str, model: str, key: str
) -> tuple[list[int], list[float]]:
    """(seeds, per-seed method - base) where both ran."""
    a, b = table.get(method, {}).get(model, {}), table.get(base, {}).get(model, {})
    seeds = sorted(set(a) & set(b))
    return seeds, [a[sd][key] - b[sd][key] for sd in seeds]


def cell(table: Mapping[str, Any], method: str, base: str, model: str, key: str) -> dict:
    seeds, diffs = differences(table, method, base, model, key)
    if not diffs:
        return {"seeds": [], "per_seed": [], "interval": None}
    return {"seeds": seeds, "per_seed": diffs, "interval": paired_interval(diffs).to_dict()}


def primary(table: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Arms a-d minus GRPO on each model's stuck skill at the last evaluation: one Holm
    family."""
    cells = []
    for arm in PRIMARY_ARMS:
        for model in MODELS:
            c = cell(table, arm, "grpo", model, "stuck")
            cells.append({"arm": arm, "model": model, "skill": PAIR.weak[model], **c})
    return holm_family(cells)


def holm_family(cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Holm's correction over the cells that have a p value (one family): each gets its
    adjusted `holm_p` and whether it is `significant`; cells without a verdict get neither."""
    ps = [(c["interval"] or {}).get("p") for c in cells]
    tested = [i for i, p in enumerate(ps) if p is not None]
    for i, (p_adj, reject) in zip(tested, holm([ps[i] for i in tested])):
        cells[i]["holm_p"], cells[i]["significant"] = p_adj, reject
    return cells


def retention(table: Mapping[str, Any]) -> dict[str, Any]:
    """Arm a's gain over online GRAFT's (both minus GRPO, stuck skill), per model."""
    out = {}
    for model in MODELS:
        seeds_a, stored = differences(table, "a", "grpo", model, "stuck")
        seeds_o, online = differences(table, "graft", "grpo", model, "stuck")
        common = sorted(set(seeds_a) & set(seeds_o))
        if not common:
            continue
        num = [stored[seeds_a.index(sd)] for sd in common]
        den = [online[seeds_o.index(sd)] for sd in common]
        out[model] = {
            "seeds": common,
            "stored": num,
            "online": den,
            **bootstrap_ratio(num, den, draws=10_000),
        }
    return out


def secondary(table: Mapping[str, Any]) -> dict[str, Any]:
    """Every other difference (exploratory): each run minus GRPO on the stuck and own skill and
    the mix; the negative control minus arm a; each online control minus online GRAFT."""
    out: dict[str, Any] = {}
    pairs = [(m, "grpo") for m in ("graft", *CONTROLS, *ARMS)]
    pairs += [("e", "a"), *((c, "graft") for c in CONTROLS)]
    for method, base in pairs:
        for model in MODELS:
            for key in ("stuck", "own", "mix"):
                c = cell(table, method, base, model, key)
                if c["per_seed"]:
                    out[f"{method} - {base}/{model}/{key}"] = c
    return out


COUNTED = ("candidates", "admitted", "responses_sent", "sent_correct", "admitted_correct")


def _counts(run_dir: Path, receiver: str) -> dict[str, float]:
    """Summed over steps: the log's prompts found and missing, and what the gate found and the
    weight admitted in the direction into `receiver`."""
    total: dict[str, float] = {}
    for r in read_metrics(run_dir):
        for key, value in r.items():
            parts = key.split("/")
            if key in ("stored/prompts_found", "stored/prompts_missing"):
                name = parts[1]
            elif len(parts) == 3 and parts[0] == "x" and parts[1].endswith("->" + receiver):
                name = parts[2]
                if name not in COUNTED:
                    continue
            else:
                continue
            total[name] = total.get(name, 0.0) + float(value)
    return total


def regime(s: DemoSettings, out: Path) -> dict[str, dict[str, dict[str, float]]]:
    """arm -> model -> counts summed over seeds and steps; coverage = prompts found / prompts."""
    found: dict[str, dict[str, dict[str, float]]] = {}
    for seed in s.seeds:
        for arm in ARMS:
            for model in MODELS:
                run_dir = seed_dir(out, seed) / f"stored_{arm}_{model}"
                if not (run_dir / "done.json").is_file():
                    continue
                acc = found.setdefault(arm, {}).setdefault(model, {})
                for key, value in _counts(run_dir, model).items():
                    acc[key] = acc.get(key, 0.0) + value
    for arms in found.values():
        for acc in arms.values():
            seen = acc.get("prompts_found", 0.0) + acc.get("prompts_missing", 0.0)
            acc["coverage"] = acc.get("prompts_found", 0.0) / seen if seen else 0.0
    return found


def last_value(run_dir: Path, key: str) -> float:
    records = [r for r in read_metrics(run_dir) if key in r]
    return float(records[-1][key]) if records else 0.0


def run_seconds(run_dir: Path) -> float:
    try:
        return float(json.loads((run_dir / "done.json").read_text())["seconds"])
    except (OSError, ValueError, KeyError):
        return 0.0


def generation_flops(run_dir: Path, policy: str) -> float:
    """FLOPs a pair run spent sampling `policy`'s responses (the log it leaves): its share of the
    policy's FLOP estimate (2 N per forward token, 6 N per trained token)."""
    c = {k: last_value(run_dir, f"m/{policy}/cost/cum/{k}") for k in
         ("flops", "prompt_tokens", "gen_tokens", "forward_tokens", "train_tokens")}  # fmt: skip
    sampled = c["prompt_tokens"] + c["gen_tokens"]
    unit = flop_estimate(1.0, forward_tokens=sampled + c["forward_tokens"],
                         train_tokens=c["train_tokens"])  # fmt: skip
    return (
        c["flops"] * flop_estimate(1.0, forward_tokens=sampled, train_tokens=0.0) / unit
        if unit
        else 0.0
    )


def _log_cost(s: DemoSettings, out: Path, seed: int, arm: str, receiver: str) -> dict[str, float]:
    """A log's generation (FLOPs, wall seconds), amortized over the receivers using it."""
    kind, peer = ARMS[arm].log, PEER[receiver]
    if kind in ("grpo", "grpo_next"):
        source = seed_dir(out, seed if kind == "grpo" else next_seed(s, seed)) / "grpo"
        flops = generation_flops(source, peer)
        cpu = last_value(source, f"m/{peer}/cost/cum/generate_cpu_s")
        return {"flops": flops / LOG_USERS, "seconds": cpu / LOG_USERS, "users": LOG_USERS}
    try:
        meta = next((seed_dir(out, seed) / "logs" / f"{kind}_{peer}" / "runs").glob("*.json"))
        cost = json.loads(meta.read_text()).get("cost", {})
    except (StopIteration, OSError, ValueError):
        cost = {}
    return {
        "flops": float(cost.get("flops", 0.0)),
        "seconds": float(cost.get("wall_s", 0.0)),
        "users": 1,
    }


def cost(s: DemoSettings, out: Path) -> dict[str, dict[str, dict[str, float]]]:
    """method -> model -> mean over seeds of its run's FLOPs and wall seconds; for the stored
    arms also its log's generation (amortized), and the total."""
    found: dict[str, dict[str, list[dict[str, float]]]] = {}
    for seed in s.seeds:
        for method, dirs in run_dirs(s, out, seed).items():
            for model, run_dir in dirs.items():
                if not (run_dir / "done.json").is_file():
                    continue
                pair = method in PAIR_RUNS
                row = {
                    "run_flops": last_value(
                        run_dir, f"m/{model}/cost/cum/flops" if pair else "cost/cum/flops"
                    ),
                    "run_seconds": run_seconds(run_dir),
                }
                if not pair:
                    log = _log_cost(s, out, seed, method, model)
                    row |= {
                        "log_flops": log["flops"],
                        "log_seconds": log["seconds"],
                        "log_users": log["users"],
                    }
                row["total_flops"] = row["run_flops"] + row.get("log_flops", 0.0)
                found.setdefault(method, {}).setdefault(model, []).append(row)
    return {
        method: {
            model: {k: sum(r[k] for r in rows) / len(rows) for k in rows[0]}
            for model, rows in models.items()
        }
        for method, models in found.items()
    }


RECORDED = Path(__file__).with_name("recorded") / "code_study.json"


def reproduction(table: Mapping[str, Any]) -> dict[str, Any]:
    """GRAFT - GRPO on each stuck skill at the last step, per seed: this study's runs beside the
    code-pair study's recorded values, and the largest gap between them."""
    recorded = json.loads(RECORDED.read_text())
    out = {}
    for c in recorded["cells"]:
        if c["where"] != "step 40":
            continue
        seeds, now = differences(table, "graft", "grpo", c["model"], "stuck")
        was = dict(zip(c["seeds"], c["per_seed"]))
        gaps = [abs(v - was[sd]) for sd, v in zip(seeds, now) if sd in was]
        out[c["model"]] = {"seeds": seeds, "now": now,
                           "recorded": [was.get(sd) for sd in seeds],
                           "max_gap": max(gaps) if gaps else None}  # fmt: skip
    return out


def report(out: Path, s: DemoSettings | None = None) -> dict[str, Any]:
    """Everything results.json holds."""
    s = s or settings()
    table = values(s, out)
    return {
        "seeds": list(s.seeds),
        "arms": {k: {"label": a.label, "age": a.age} for k, a in ARMS.items()},
        "controls": {k: label for k, (label, _) in CONTROLS.items()},
        "values": json_table(table),
        "primary": primary(table),
        "retention": retention(table),
        "secondary": secondary(table),
        "regime": regime(s, out),
        "cost": cost(s, out),
        "reproduction": reproduction(table),
    }


def staleness_plot(result: Mapping[str, Any], path: Path) -> None:
    """Per model, each arm's stuck-skill gain over GRPO (mean and 95% interval) against the
    log's mean age; arm b (another seed's log) drawn apart at age 0."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(MODELS), figsize=(10, 4), sharey=True)
    by = {(c["arm"], c["model"]): c for c in result["primary"]}
    for ax, model in zip(axes, MODELS):
        for arm in PRIMARY_ARMS:
            iv = (by.get((arm, model)) or {}).get("interval")
            if not iv:
                continue
            age = result["arms"][arm]["age"]
            x = 1.5 if age is None else age
            err = [
                [100 * (iv["mean"] - (iv["low"] or iv["mean"]))],
                [100 * ((iv["high"] or iv["mean"]) - iv["mean"])],
            ]
            ax.errorbar(
                [x],
                [100 * iv["mean"]],
                yerr=err,
                fmt="s" if age is None else "o",
                capsize=4,
                label=f"arm {arm}",
            )
        ax.axhline(0, color="grey", lw=0.8)
        ax.set_title(f"{model}: stuck skill `{PAIR.weak[model]}`")
        ax.set_xlabel("log's mean age (peer's step - receiver's step)")
        ax.legend(fontsize=8)
    axes[0].set_ylabel("gain over GRPO at the last step (points)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:+.1f}"


def interval_text(iv: Mapping[str, Any] | None) -> str:
    if not iv:
        return "not run"
    if iv.get("no_verdict"):
        return f"{pct(iv['mean'])} (no verdict: {iv['no_verdict']})"
    return f"{pct(iv['mean'])} [{pct(iv['low'])}, {pct(iv['high'])}]"


def markdown(result: Mapping[str, Any], commits: Sequence[str]) -> str:
    """results.md: the primary family first, then retention, the secondaries, regime, cost."""
    lines = [
        "# The reuse study: a stored peer's gain, how stale a log may be, what it costs",
        "",
        f"Seeds {', '.join(map(str, result['seeds']))}; runs at {', '.join(commits)}. "
        "Points of held-out pass@1 at the last evaluation; differences paired by "
        "seed, 95% Student t intervals; the primary family under Holm at 5%.",
        "",
        "## Primary: each log minus GRPO on the stuck skill",
        "",
        "| arm | model (skill) | difference [95% CI] | Holm p | verdict | per seed |",
        "|---|---|---|---|---|---|",
    ]
    for c in result["primary"]:
        verdict = "significant" if c.get("significant") else "inside the noise"
        holm_p = f"{c['holm_p']:.4f}" if "holm_p" in c else "-"
        seeds = ", ".join(pct(d) for d in c["per_seed"])
        lines.append(
            f"| {result['arms'][c['arm']]['label']} | {c['model']} (`{c['skill']}`) | "
            f"{interval_text(c['interval'])} | {holm_p} | {verdict} | {seeds} |"
        )
    lines += ["", "## Retention of arm a (stored gain / online gain, stuck skill)", ""]
    for model, r in result["retention"].items():
        rng = (
            "undefined: the online gain's interval contains 0"
            if r["low"] is None
            else (f"{r['ratio']:.2f} [{r['low']:.2f}, {r['high']:.2f}] (percentile bootstrap)")
        )
        lines.append(f"- {model}: {rng}")
    lines += ["", "## GRAFT - GRPO again, beside the code-pair study's recorded values", ""]
    for model, r in result["reproduction"].items():
        pairs = ", ".join(f"{pct(a)} ({pct(b)})" for a, b in zip(r["now"], r["recorded"]))
        gap = "-" if r["max_gap"] is None else f"{100 * r['max_gap']:.2f} points"
        lines.append(f"- {model}: {pairs or 'not run'} (recorded in brackets); largest gap {gap}")
    lines += [
        "",
        "## Secondary (exploratory)",
        "",
        "| difference | model | skill | [95% CI] |",
        "|---|---|---|---|",
    ]
    for key, c in result["secondary"].items():
        what, model, skill = key.split("/")
        lines.append(f"| {what} | {model} | {skill} | {interval_text(c['interval'])} |")
    lines += [
        "",
        "## What each log offered (summed over steps and seeds)",
        "",
        "| arm | model | coverage | gate candidates | admitted | admitted correct |",
        "|---|---|---|---|---|---|",
    ]
    for arm, models in result["regime"].items():
        for model, r in models.items():
            lines.append(
                f"| {arm} | {model} | {r['coverage']:.0%} | {r.get('candidates', 0):.0f} "
                f"| {r.get('admitted', 0):.0f} | {r.get('admitted_correct', 0):.0f} |"
            )
    lines += [
        "",
        "## Cost per run (mean over seeds; stored arms count their log)",
        "",
        "| method | model | run TFLOPs | run s | log TFLOPs (amortized) | log s | total TFLOPs |",
        "|---|---|---|---|---|---|---|",
    ]
    for method, models in result["cost"].items():
        for model, c in models.items():
            lines.append(
                f"| {method} | {model} | {c['run_flops'] / 1e12:.3f} | "
                f"{c['run_seconds']:.0f} | {c.get('log_flops', 0) / 1e12:.3f} | "
                f"{c.get('log_seconds', 0):.0f} | {c['total_flops'] / 1e12:.3f} |"
            )
    return "\n".join(lines) + "\n"


def reduce(result: Mapping[str, Any]) -> dict[str, Any]:
    """The recorded answer `make demo` prints: the primary cells and arm a's retention, with the
    clean commits the runs ran at (copy recorded.json to graft/evidence/recorded/
    reuse_study.json and commit it)."""
    from graft.evidence.recorded import clean_commits

    cells = []
    for c in result["primary"]:
        iv = c["interval"] or {}
        cells.append({
            "arm": c["arm"], "label": result["arms"][c["arm"]]["label"], "model": c["model"],
            "skill": c["skill"], "where": "last step", "mean": iv.get("mean"),
            "low": iv.get("low"), "high": iv.get("high"), "n": iv.get("n"),
            "holm_p": c.get("holm_p"), "significant": bool(c.get("significant")),
            "per_seed": c["per_seed"], "seeds": c["seeds"],
        })  # fmt: skip
    return {
        "study": "study-reuse", "seeds": result["seeds"], "tests": len(cells),
        "commit": clean_commits(", ".join(result["commits"])),
        "command": "graft demo --study reuse", "cells": cells,
        "retention": {m: {k: r[k] for k in ("ratio", "low", "high")}
                      for m, r in result["retention"].items()},
    }  # fmt: skip


def run_and_write(out: Path, s: DemoSettings | None = None) -> list[Path]:
    """Run (or reuse) the whole study, then write results.json, results.md and staleness.png;
    the files written."""
    from graft.evidence.demo import run_commits
    from graft.evidence.reuse import all_configs, run_reuse

    s = s or settings()
    run_reuse(out, s)
    result = report(out, s)
    commits = run_commits(all_configs(s, out)) + _log_commits(out, s)
    result["commits"] = sorted(set(commits))
    files = [out / "results.json", out / "results.md", out / "staleness.png"]
    files[0].write_text(json.dumps(result, indent=2, sort_keys=True))
    files[1].write_text(markdown(result, result["commits"]))
    staleness_plot(result, files[2])
    return write_recorded(out, reduce, result, files)


def write_recorded(
    out: Path, reduce: Callable[[Mapping[str, Any]], dict[str, Any]],
    result: Mapping[str, Any], files: list[Path],
) -> list[Path]:  # fmt: skip
    """A study's recorded answer (`reduce(result)`) as OUT/recorded.json, added to `files`;
    nothing recorded, said in one line, where the runs ran at a dirty tree."""
    try:
        (out / "recorded.json").write_text(json.dumps(reduce(result), indent=1) + "\n")
        files.append(out / "recorded.json")
    except DataError as err:
        print(f"not recorded: {err}")
    return files


def _log_commits(out: Path, s: DemoSettings) -> list[str]:
    commits = []
    for seed in s.seeds:
        for done in (seed_dir(out, seed) / "logs").glob("*/done.json"):
            commits.append(json.loads(done.read_text()).get("commit") or "unknown")
    return commits
