"""The three-model study's numbers (docs/evidence.md, "Three models"): per run, model and seed,
each reducer's held-out avg@k and the mix at the last evaluation; the primary family (each pair's
GRAFT minus GRPO on the stuck skill the peer owns, the pool minus that pair; paired t over seeds,
Holm over 12), the retention of every stored log, the staleness of gpt2's logs, the own-skill
arms beside the peer tokens' share of the update and the receiver's own programs written with a
peer's reducer, the exchange regime (in the pool, per source), equal-FLOPs cells, the cost, and
two plots (`trio_gains.png`, `trio_staleness.png`)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from graft.evidence.compare import load_units
from graft.evidence.compute_axis import interpolate
from graft.evidence.demo import DemoSettings
from graft.evidence.reuse_report import (
    cell,
    differences,
    final_value,
    generation_flops,
    holm_family,
    json_table,
    last_value,
    run_seconds,
    skill_key,
    write_recorded,
)
from graft.evidence.stats import bootstrap_ratio
from graft.evidence.trio import (
    FROZEN,
    LEARNER,
    MODELS,
    OWN,
    OWNER,
    PAIRS,
    TRADE,
    TRADE_PAIR,
    pair_name,
    rr_name,
    seed_dir,
    settings,
)
from graft.rundir import read_metrics

SKILLS = tuple(OWN.values())
KEYS = (*SKILLS, "mix")


def stuck(model: str) -> tuple[str, ...]:
    return tuple(k for k in SKILLS if k != OWN[model])


def pair_of(a: str, b: str) -> str:
    """The pair run holding models a and b (in the design's order)."""
    return next(pair_name(*p) for p in PAIRS if set(p) == {a, b})


def runs(seed: int, out: Path) -> dict[str, tuple[Path, tuple[str, ...]]]:
    """run name -> (its directory, the models it trains) for one seed."""
    base = seed_dir(out, seed)
    found = {"grpo": (base / "grpo", MODELS), "graft_pool": (base / "graft_pool", MODELS)}
    found |= {pair_name(a, b): (base / pair_name(a, b), (a, b)) for a, b in PAIRS}
    found |= {rr_name(a, b): (base / rr_name(a, b), (a, b)) for a, b in PAIRS}
    for r in MODELS:
        for p in MODELS:
            if p != r:
                found[f"stored_{p}_{r}"] = (base / f"stored_{p}_{r}", (r,))
    for kind in FROZEN:
        for r in MODELS:
            if r != LEARNER:
                name = f"stored_{kind}_{LEARNER}_{r}"
                found[name] = (base / name, (r,))
    found |= {f"trade_{arm}": (base / f"trade_{arm}", TRADE_PAIR) for arm in TRADE}
    return found


def values(s: DemoSettings, out: Path) -> dict[str, dict[str, dict[int, dict[str, float]]]]:
    """run -> model -> seed -> each reducer's avg@k and the mix at the last evaluation (runs
    not finished yet are left out)."""
    found: dict[str, dict[str, dict[int, dict[str, float]]]] = {}
    for seed in s.seeds:
        for name, (run_dir, models) in runs(seed, out).items():
            if not (run_dir / "done.json").is_file():
                continue
            units = {u.policy: u for u in load_units(run_dir)}
            for m in models:
                curves = units[m].curves
                row = {k: final_value(curves[skill_key(s, k)]) for k in SKILLS}
                row["mix"] = final_value(curves[skill_key(s, "")])
                found.setdefault(name, {}).setdefault(m, {})[seed] = row
    return found


def primary(table: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The 12 tests of the design, one Holm family: per pair and receiver, GRAFT minus GRPO on
    the skill the peer owns; per receiver and stuck skill, the pool minus the pair holding the
    skill's owner."""
    cells = []
    for a, b in PAIRS:
        for r, peer in ((a, b), (b, a)):
            c = cell(table, pair_name(a, b), "grpo", r, OWN[peer])
            cells.append({"kind": "pair", "run": pair_name(a, b), "base": "grpo", "model": r,
                          "skill": OWN[peer], **c})  # fmt: skip
    for r in MODELS:
        for k in stuck(r):
            base = pair_of(r, OWNER[k])
            c = cell(table, "graft_pool", base, r, k)
            cells.append({"kind": "pool", "run": "graft_pool", "base": base, "model": r,
                          "skill": k, **c})  # fmt: skip
    return holm_family(cells)


def secondary(table: Mapping[str, Any]) -> dict[str, Any]:
    """Every other difference (exploratory): each run minus GRPO on each reducer and the mix;
    the pool minus each pair; each pair's receiver-relative GRAFT minus its paper-weight GRAFT;
    each own-skill arm minus the llama-qwen pair."""
    comparisons = [(name, "grpo") for name in table if name != "grpo"]
    comparisons += [("graft_pool", pair_name(*p)) for p in PAIRS]
    comparisons += [(rr_name(*p), pair_name(*p)) for p in PAIRS]
    comparisons += [(f"trade_{arm}", pair_name(*TRADE_PAIR)) for arm in TRADE]
    out: dict[str, Any] = {}
    for run, base in comparisons:
        for model in MODELS:
            for key in KEYS:
                c = cell(table, run, base, model, key)
                if c["per_seed"]:
                    out[f"{run} - {base}/{model}/{key}"] = c
    return out


def retention(table: Mapping[str, Any]) -> dict[str, Any]:
    """Each stored log's gain over the pair's online gain (both minus GRPO) on the skill the
    log's peer owns, per receiver: percentile bootstrap over seeds."""
    out = {}
    for name in table:
        parts = name.split("_")
        if parts[0] != "stored":
            continue
        receiver, peer = parts[-1], parts[-2]
        skill = OWN[peer]
        seeds_s, stored_d = differences(table, name, "grpo", receiver, skill)
        seeds_o, online_d = differences(table, pair_of(receiver, peer), "grpo", receiver, skill)
        common = sorted(set(seeds_s) & set(seeds_o))
        if not common:
            continue
        num = [stored_d[seeds_s.index(sd)] for sd in common]
        den = [online_d[seeds_o.index(sd)] for sd in common]
        out[name] = {"receiver": receiver, "peer": peer, "skill": skill, "seeds": common,
                     **bootstrap_ratio(num, den, draws=10_000)}  # fmt: skip
    return out


def staleness(table: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Per receiver of gpt2's logs: the gain over GRPO on `max` against the log's mean age."""
    out: dict[str, list[dict[str, Any]]] = {}
    for r in MODELS:
        if r == LEARNER:
            continue
        logs = {f"stored_{LEARNER}_{r}": 0.0}
        logs |= {f"stored_{kind}_{LEARNER}_{r}": age for kind, age in FROZEN.items()}
        for name, age in sorted(logs.items(), key=lambda kv: kv[1]):
            c = cell(table, name, "grpo", r, OWN[LEARNER])
            if c["per_seed"]:
                out.setdefault(r, []).append({"run": name, "age": age, **c})
    return out


def _mean_metric(run_dir: Path, key: str) -> float | None:
    vals = [float(r[key]) for r in read_metrics(run_dir) if key in r]
    return sum(vals) / len(vals) if vals else None


def peer_share(s: DemoSettings, out: Path) -> dict[str, dict[str, float]]:
    """Per run on the trade pair (its GRAFT and the own-skill arms) and model: the peer tokens'
    share of the update, the mean over steps and seeds."""
    names = [pair_name(*TRADE_PAIR), *(f"trade_{arm}" for arm in TRADE)]
    found: dict[str, dict[str, list[float]]] = {}
    for seed in s.seeds:
        for name in names:
            run_dir = seed_dir(out, seed) / name
            if not (run_dir / "done.json").is_file():
                continue
            for m in TRADE_PAIR:
                v = _mean_metric(run_dir, f"m/{m}/loss/peer_token_frac")
                if v is not None:
                    found.setdefault(name, {}).setdefault(m, []).append(v)
    return {n: {m: sum(v) / len(v) for m, v in ms.items()} for n, ms in found.items()}


REDUCER = re.compile(r"return\s*(\[|sum\(|max\()")
WRITES = {"[": "list", "sum(": "sum", "max(": "max"}


def reducer_of(response: str) -> str:
    """The reducer a response's program returns with (`list`, `sum`, `max`; "" for none)."""
    m = REDUCER.search(response)
    return WRITES[m.group(1)] if m else ""


def confusion(s: DemoSettings, out: Path) -> dict[str, dict[str, float]]:
    """Per run (GRPO, each GRAFT run) and model: the share of the model's own programs on its own
    skill's training prompts that return with another reducer (from the run's store)."""
    from graft.store.reader import TrajectoryStore

    names = ["grpo", *(pair_name(*p) for p in PAIRS), "graft_pool"]
    counts: dict[str, dict[str, list[int]]] = {}
    for seed in s.seeds:
        for name, (run_dir, models) in runs(seed, out).items():
            if name not in names or not (run_dir / "done.json").is_file():
                continue
            store = TrajectoryStore(str(run_dir / "trajectories"))
            table = store.scan(models=models, columns=["model", "skill", "response"])
            cols = (table[c].to_pylist() for c in ("model", "skill", "response"))
            for m, skill, text in zip(*cols, strict=True):
                if skill != OWN[m]:
                    continue
                acc = counts.setdefault(name, {}).setdefault(m, [0, 0])
                acc[0] += reducer_of(text) not in ("", OWN[m])
                acc[1] += 1
    return {n: {m: a / b for m, (a, b) in ms.items() if b} for n, ms in counts.items()}


REGIME_KEYS = ("candidates", "prompts_grafted", "admitted", "responses_sent")


def regime(s: DemoSettings, out: Path) -> dict[str, dict[str, dict[str, float]]]:
    """Per GRAFT run, per direction `source->receiver`: counts summed over steps and seeds."""
    found: dict[str, dict[str, dict[str, float]]] = {}
    for seed in s.seeds:
        for name, (run_dir, _) in runs(seed, out).items():
            if not name.startswith(("graft", "trade_")) or not (run_dir / "done.json").is_file():
                continue
            for r in read_metrics(run_dir):
                for key, value in r.items():
                    parts = key.split("/")
                    if len(parts) == 3 and parts[0] == "x" and parts[2] in REGIME_KEYS:
                        acc = found.setdefault(name, {}).setdefault(parts[1], {})
                        acc[parts[2]] = acc.get(parts[2], 0.0) + float(value)
    return found


def _curve_at_flops(
    run_dir: Path, model: str, models: tuple[str, ...], key: str, at: float
) -> float | None:
    """A model's held-out curve (`key`, in a run of several models) read at `at` FLOPs of the
    models given, together (linear between evaluations); None beyond its last evaluation."""
    records = read_metrics(run_dir)
    flops = {int(r["step"]): sum(float(r[f"m/{m}/cost/cum/flops"]) for m in models)
             for r in records if all(f"m/{m}/cost/cum/flops" in r for m in models)}  # fmt: skip
    flops[0] = 0.0
    name = f"m/{model}/{key}"
    curve = [(flops.get(int(r["step"])), float(r[name])) for r in records if name in r]
    points = [(x, y) for x, y in curve if x is not None]
    if not points or at > points[-1][0]:
        return None
    return interpolate(points, at)


def equal_flops(s: DemoSettings, out: Path) -> dict[str, Any]:
    """Each GRAFT run (pairs, pool) minus GRPO on each receiver's stuck skills, the GRAFT curve
    read at the FLOPs GRPO's run spent on the same models (all of them together)."""
    table: dict[str, dict[str, dict[int, dict[str, float]]]] = {}
    for seed in s.seeds:
        found = runs(seed, out)
        grpo_dir = found["grpo"][0]
        if not (grpo_dir / "done.json").is_file():
            continue
        for name in [*(pair_name(*p) for p in PAIRS), "graft_pool"]:
            run_dir, models = found[name]
            if not (run_dir / "done.json").is_file():
                continue
            budget = sum(last_value(grpo_dir, f"m/{m}/cost/cum/flops") for m in models)
            for m in models:
                for k in stuck(m):
                    key = skill_key(s, k)
                    got = _curve_at_flops(run_dir, m, models, key, budget)
                    base = last_value(grpo_dir, f"m/{m}/{key}")
                    if got is not None:
                        row = table.setdefault(name, {}).setdefault(m, {}).setdefault(seed, {})
                        row[k] = got - base
    cells = {}
    for name, models in table.items():
        for m, by_seed in models.items():
            for k in stuck(m):
                diffs = {sd: row[k] for sd, row in by_seed.items() if k in row}
                if diffs:
                    zero = {"grpo": {m: {sd: {k: 0.0} for sd in diffs}},
                            name: {m: {sd: {k: d} for sd, d in diffs.items()}}}  # fmt: skip
                    cells[f"{name} - grpo/{m}/{k}"] = cell(zero, name, "grpo", m, k)
    return cells


def cost(s: DemoSettings, out: Path) -> dict[str, dict[str, dict[str, float]]]:
    """run -> model -> the mean over seeds of the model's FLOPs in its run and the run's wall
    seconds; a stored receiver also counts its log's generation, split among the log's
    receivers (a GRPO log: the two receivers of its seed; a frozen log: its two)."""
    found: dict[str, dict[str, list[dict[str, float]]]] = {}
    for seed in s.seeds:
        found_runs = runs(seed, out)
        for name, (run_dir, models) in found_runs.items():
            if not (run_dir / "done.json").is_file():
                continue
            for m in models:
                key = f"m/{m}/cost/cum/flops" if len(models) > 1 else "cost/cum/flops"
                row = {"run_flops": last_value(run_dir, key), "run_seconds": run_seconds(run_dir)}
                if name.startswith("stored_"):
                    row |= _log_cost(out, seed, name, found_runs["grpo"][0])
                row["total_flops"] = row["run_flops"] + row.get("log_flops", 0.0)
                found.setdefault(name, {}).setdefault(m, []).append(row)
    return {
        name: {m: {k: sum(r[k] for r in rows) / len(rows) for k in rows[0]}
               for m, rows in models.items()}
        for name, models in found.items()
    }  # fmt: skip


LOG_USERS = 2
"""Receivers of each log in this design: a peer's GRPO log serves the seed's two other models;
each frozen log of gpt2 serves llama and qwen."""


def _log_cost(out: Path, seed: int, name: str, grpo_dir: Path) -> dict[str, float]:
    parts = name.split("_")
    peer = parts[-2]
    if len(parts) == 3:  # stored_<peer>_<receiver>: the seed's GRPO log
        flops = generation_flops(grpo_dir, peer)
        seconds = last_value(grpo_dir, f"m/{peer}/cost/cum/generate_cpu_s")
    else:
        try:
            log = seed_dir(out, seed) / "logs" / f"{parts[1]}_{peer}"
            meta = next((log / "runs").glob("*.json"))
            c = json.loads(meta.read_text()).get("cost", {})
        except (StopIteration, OSError, ValueError):
            c = {}
        flops, seconds = float(c.get("flops", 0.0)), float(c.get("wall_s", 0.0))
    return {"log_flops": flops / LOG_USERS, "log_seconds": seconds / LOG_USERS}


def runtime(s: DemoSettings, out: Path) -> dict[str, float]:
    """Wall seconds of the finished units, from their done files: runs and logs, and how many."""
    seconds, units = 0.0, 0
    for seed in s.seeds:
        base = seed_dir(out, seed)
        for done in [*base.glob("*/done.json"), *base.glob("logs/*/done.json")]:
            try:
                seconds += float(json.loads(done.read_text())["seconds"])
                units += 1
            except (OSError, ValueError, KeyError):
                continue
    return {"seconds": seconds, "units": units}


def report(out: Path, s: DemoSettings | None = None) -> dict[str, Any]:
    """Everything results.json holds."""
    s = s or settings()
    table = values(s, out)
    return {
        "seeds": list(s.seeds),
        "own": dict(OWN),
        "trade": {arm: t.label for arm, t in TRADE.items()},
        "values": json_table(table),
        "primary": primary(table),
        "secondary": secondary(table),
        "retention": retention(table),
        "staleness": staleness(table),
        "peer_share": peer_share(s, out),
        "confusion": confusion(s, out),
        "regime": regime(s, out),
        "equal_flops": equal_flops(s, out),
        "cost": cost(s, out),
        "runtime": runtime(s, out),
    }


def _recorded_cell(c: Mapping[str, Any]) -> dict[str, Any]:
    iv = c["interval"] or {}
    return {
        "kind": c.get("kind", ""), "run": c.get("run", ""), "base": c.get("base", "grpo"),
        "model": c["model"], "skill": c["skill"], "where": "last step", "mean": iv.get("mean"),
        "low": iv.get("low"), "high": iv.get("high"), "n": iv.get("n"),
        "holm_p": c.get("holm_p"), "significant": bool(c.get("significant")),
        "per_seed": c["per_seed"], "seeds": c["seeds"],
    }  # fmt: skip


def reduce(result: Mapping[str, Any]) -> dict[str, Any]:
    """The recorded answer `make demo` prints, one line per question: the 12 primary cells,
    each same-seed GRPO log's retention, and each own-skill arm's own skill minus the pair's
    GRAFT, with the clean commits the runs ran at (copy recorded.json to
    graft/evidence/recorded/trio_study.json and commit it)."""
    from graft.evidence.recorded import clean_commits

    base = pair_name(*TRADE_PAIR)
    trade = []
    for arm in TRADE:
        for m in TRADE_PAIR:
            c = result["secondary"].get(f"trade_{arm} - {base}/{m}/{OWN[m]}")
            if c and c["interval"]:
                trade.append(_recorded_cell({**c, "run": f"trade_{arm}", "base": base,
                                             "model": m, "skill": OWN[m]}))  # fmt: skip
    retention = {
        name: {k: r[k] for k in ("receiver", "peer", "skill", "ratio", "low", "high")}
        for name, r in result["retention"].items()
        if name.count("_") == 2  # the same-seed GRPO logs (the frozen ones are the staleness)
    }
    return {
        "study": "study-trio", "seeds": result["seeds"], "tests": len(result["primary"]),
        "commit": clean_commits(", ".join(result["commits"])),
        "command": "graft demo --study trio",
        "cells": [_recorded_cell(c) for c in result["primary"]],
        "retention": retention, "trade": trade, "trade_labels": dict(result["trade"]),
    }  # fmt: skip


def run_and_write(out: Path, s: DemoSettings | None = None) -> list[Path]:
    """Run (or reuse) the whole study, then write results.json, results.md, trio_gains.png and
    trio_staleness.png; the files written."""
    from graft.evidence.demo import run_commits
    from graft.evidence.trio import all_configs, run_trio
    from graft.evidence.trio_text import gains_plot, markdown, staleness_plot

    s = s or settings()
    run_trio(out, s)
    result = report(out, s)
    done = [d for sd in s.seeds for d in (seed_dir(out, sd) / "logs").glob("*/done.json")]
    logs = [json.loads(d.read_text()).get("commit") or "unknown" for d in done]
    result["commits"] = sorted(set(run_commits(all_configs(s, out)) + logs))
    files = [out / n for n in ("results.json", "results.md", "trio_gains.png",
                               "trio_staleness.png")]  # fmt: skip
    files[0].write_text(json.dumps(result, indent=2, sort_keys=True))
    files[1].write_text(markdown(result, result["commits"]))
    gains_plot(result, files[2])
    staleness_plot(result, files[3])
    return write_recorded(out, reduce, result, files)
