"""`graft probe`: what a GRAFT run can expect, measured before training.

The probe runs the first steps of a run without the update: each step's prompts and seeds are the
run's own (`Trainer.rollout`), each model samples its group of n responses per prompt, the
verifier scores them, and the exchange runs exactly as in training (gate, balancing, the
receiver's re-tokenization and compatibility scores, the weights) on the models as they start.
So the probe's first step is the run's first step, count for count; later steps show the starting
models on more prompts. `graft.evidence.forecast` turns the counts into the report.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from graft.config import Config, ConfigError, to_dict
from graft.config.lib import from_dict
from graft.evidence.forecast import (
    direction_summary,
    grpo_verdict,
    model_summary,
    resample_forecast,
    resample_verdict,
    verdict,
)
from graft.evidence.regime import is_count


def _model_entry(spec: str, base: dict[str, Any] | None, index: int) -> dict[str, Any]:
    """`[NAME=]PATH` over the config's model at that position (its dtype, template, ...)."""
    name, sep, path = spec.partition("=")
    if not sep or "/" in name or ":" in name:
        name, path = "", spec
    if not path:
        raise ConfigError(f"--model {spec!r}: give a model path or name (NAME=PATH or PATH)")
    entry = dict(base or {})
    if entry.get("path") != path:
        entry["tokenizer"] = ""  # the config's tokenizer belongs to its own model
    entry["path"] = path
    if not name:
        stem = re.sub(r"[^A-Za-z0-9_.-]+", "-", Path(path.rstrip("/")).name.split(":")[-1])
        name = stem or f"model{index}"
    entry["name"] = name
    return entry


def probe_config(
    cfg: Config,
    *,
    models: Sequence[str] = (),
    data: str = "",
    n: int = 0,
) -> Config:
    """The config the probe runs: `cfg` with the given models (`[NAME=]PATH`, each over the
    config's model at that position), problems from `data`, n responses per prompt; online
    exchange between the models, no store, no evaluation."""
    raw = to_dict(cfg)
    if models:
        old = raw["models"]
        raw["models"] = [
            _model_entry(spec, old[i] if i < len(old) else None, i) for i, spec in enumerate(models)
        ]
        names = [m["name"] for m in raw["models"]]
        if len(set(names)) != len(names):
            raise ConfigError(f"--model: two models named alike ({names}); use NAME=PATH")
    if data:
        raw["task"]["name"] = "math"
        raw["task"]["math"]["train"] = data
    if n:
        raw["rollout"]["group_size"] = n
    several = len(raw["models"]) > 1
    raw["exchange"]["enabled"] = several
    raw["exchange"]["source"] = "online"
    raw["store"]["enabled"] = False
    raw["eval"]["every"] = 0
    raw["run"]["progress"] = False
    return from_dict(Config, raw)  # checked as it is made


def default_steps(cfg: Config, limit: int) -> int:
    """Steps that cover `limit` prompts at the config's batch size (10 without a limit)."""
    per_step = cfg.rollout.prompts_per_step
    return -(-limit // per_step) if limit else 10


def run_probe(
    cfg: Config,
    *,
    steps: int,
    limit: int = 0,
    progress: bool = True,
    cache_dir: Path | None = None,
    split: str = "train",
) -> dict[str, Any]:
    """Sample, verify and exchange for `steps` steps without training; the counts per step.
    With `cache_dir`, each model's rollouts are kept there per step and reused (probe_cache).
    `split`: the task's split the prompts are drawn from (`val` or `test`: prompts no model
    was trained on, where the task has them)."""
    from tqdm import tqdm

    from graft.evidence.probe_cache import RolloutCache
    from graft.trainer import Trainer

    trainer = Trainer(cfg, split=split, limit=limit)
    try:
        workers = trainer.backend.describe()
        cache = None
        if cache_dir is not None:
            revisions = {name: w.get("model_revision", "") for name, w in workers.items()}
            cache = RolloutCache(cache_dir, cfg, revisions, limit=limit, split=split)
        records, sampled = [], {name: 0 for name in trainer.names}
        start = time.perf_counter()
        for step in tqdm(range(steps), desc="probe", unit="step", disable=not progress):
            cached = cache.get(trainer.names, step) if cache else {}
            groups = trainer.rollout(step, cached=cached)
            for name, gs in groups.items():
                if name not in cached:
                    sampled[name] += 1
                    if cache:
                        cache.put(name, step, [g.rollout for g in gs])
            outcome = trainer.exchange(step, groups)
            directions = {
                f"{a}->{b}": {
                    "counts": {k: v for k, v in d.metrics.items() if is_count(k)},
                    "scores": [[s, ok] for s, ok in d.scores],
                }
                for (a, b), d in outcome.directions.items()
            }
            correct = {name: [g.num_correct for g in gs] for name, gs in groups.items()}
            skills = [g.problem.skill for g in groups[trainer.names[0]]]
            records.append(
                {"step": step, "correct": correct, "skills": skills, "directions": directions}
            )
        seconds = time.perf_counter() - start
    finally:
        trainer.close()
    return {
        "names": list(trainer.names),
        "n": cfg.rollout.group_size,
        "prompts_per_step": cfg.rollout.prompts_per_step,
        "steps": records,
        "seconds_steps": seconds,
        "sampled_steps": sampled,
        "models": {name: workers[name].get("model_revision", "") for name in trainer.names},
    }


def summarize(raw: dict[str, Any], cfg: Config) -> dict[str, Any]:
    """Per model and per direction, the forecast (graft.evidence.forecast) and its verdicts."""
    names, n = raw["names"], raw["n"]
    correct = {name: [c for st in raw["steps"] for c in st["correct"][name]] for name in names}
    models = {name: model_summary(correct[name], n) for name in names}
    budgets = {m.name: m.zero_contrast.max_rounds for m in cfg.models}
    for name, m in models.items():
        m["resample"] = resample_forecast(
            m["mixed"], prompts=raw["prompts_per_step"], n=n, max_rounds=budgets[name]
        )
    directions: dict[str, Any] = {}
    for a in names:
        for b in names:
            if a == b:
                continue
            key = f"{a}->{b}"
            per_step = [st["directions"].get(key, {}) for st in raw["steps"]]
            counts = [d.get("counts", {}) for d in per_step]
            scores = [(float(s), bool(ok)) for d in per_step for s, ok in d.get("scores", [])]
            d = direction_summary(correct[b], correct[a], n, counts, scores)
            d["verdict"] = verdict(d, source=a, receiver=b, weight=cfg.exchange.ablation.weight)
            directions[key] = d
    verdicts = [grpo_verdict(m, name=name) for name, m in models.items()]
    verdicts += [resample_verdict(m, name=name) for name, m in models.items()]
    verdicts += [d["verdict"] for d in directions.values()]
    return {
        "steps": len(raw["steps"]),
        "seconds_steps": raw["seconds_steps"],
        "sampled_steps": raw["sampled_steps"],
        "prompts": len(raw["steps"]) * raw["prompts_per_step"],
        "n": n,
        "weight": cfg.exchange.ablation.weight,
        "delta": cfg.exchange.delta,
        "models": models,
        "directions": directions,
        "verdicts": verdicts,
        "skills": skill_summary(raw),
    }


def skill_summary(raw: Mapping[str, Any]) -> dict[str, dict[str, dict[str, float]]]:
    """Per model and skill (where the prompts have more than one): the share of prompts whose
    whole group fails, and of those where the model fails and some other model's group is mixed
    (what the gate can graft from)."""
    names, n = raw["names"], raw["n"]
    rows: dict[str, list[dict[str, int]]] = {}
    for st in raw["steps"]:
        for i, skill in enumerate(st.get("skills", [])):
            rows.setdefault(skill, []).append({m: st["correct"][m][i] for m in names})
    if len(rows) < 2:
        return {}
    out: dict[str, dict[str, dict[str, float]]] = {}
    for m in names:
        out[m] = {}
        for skill, groups in sorted(rows.items()):
            fail = [g for g in groups if g[m] == 0]
            rescue = [g for g in fail if any(0 < g[p] < n for p in names if p != m)]
            out[m][skill] = {
                "prompts": len(groups),
                "all_fail": len(fail) / len(groups),
                "fail_peer_mixed": len(rescue) / len(groups),
            }
    return out
