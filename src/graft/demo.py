"""`graft demo`: the paper's three claims in miniature, on a CPU, with nothing downloaded.

Two tiny policies that differ in architecture AND tokenizer (a Llama with a character tokenizer, a
Qwen2 with a small BPE) are pre-trained on complementary mixes of two skills (3-digit x 1-digit
multiplication with a place-value scratchpad, multipliers 2-5 vs 6-9). With the same seeds, prompt
order and per-model rollout budget the demo then runs
  1. GRPO for each model (the two trained side by side with the exchange off: identical to alone),
  2. online GRAFT co-training,
  3. stored-peer GRAFT: each model against the trajectories of the OTHER model's GRPO run,
  4. optionally GRPO with 4x the group size (a bigger rollout budget, for reference),
evaluates every policy at start and end on the held-out problems of each skill and of the mix
(avg@k), and writes results.json, results.md and curves.png.
"""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from graft.config import Config, load_config, to_dict
from graft.models.tiny import MUL_SKILLS, build_tiny
from graft.rundir import read_metrics

MODELS = ("llama", "qwen")
PRESETS = {"llama": "llama-char-mul", "qwen": "qwen2-bpe-mul"}
METHODS = ("grpo", "graft", "stored")
LABELS = {
    "grpo": "GRPO",
    "graft": "GRAFT (online)",
    "stored": "GRAFT (stored peer)",
    "grpo4x": "GRPO, 4x group size",
}


@dataclass(frozen=True)
class DemoSettings:
    steps: int = 60
    prompts_per_step: int = 16
    group_size: int = 8
    max_new_tokens: int = 48
    lr: float = 2e-5
    eval_problems: int = 400
    eval_samples: int = 4
    seeds: tuple[int, ...] = (0,)
    reference: bool = False
    quick: bool = False
    presets: dict[str, str] = field(default_factory=lambda: dict(PRESETS))

    @classmethod
    def make(cls, *, seeds: int, quick: bool, reference: bool) -> DemoSettings:
        if quick:
            presets = {m: f"{p}-quick" for m, p in PRESETS.items()}
            return cls(
                steps=4,
                prompts_per_step=8,
                eval_problems=40,
                eval_samples=2,
                seeds=tuple(range(seeds)),
                reference=reference,
                quick=True,
                presets=presets,
            )
        return cls(seeds=tuple(range(seeds)), reference=reference)


def _overrides(s: DemoSettings, out: Path, seed: int) -> list[str]:
    skills = "[" + ", ".join(f'"{k}"' for k in MUL_SKILLS) + "]"
    return [
        f"run.out_dir={out}",
        f"run.seed={seed}",
        f"run.steps={s.steps}",
        "run.save_every=0",
        "run.progress=false",
        "run.tensorboard=false",
        "task.name=arithmetic",
        f"task.arithmetic.skills={skills}",
        "task.arithmetic.scratchpad=true",
        f"rollout.prompts_per_step={s.prompts_per_step}",
        f"rollout.group_size={s.group_size}",
        f"rollout.max_new_tokens={s.max_new_tokens}",
        "algo.minibatches=2",
        "algo.micro_batch_size=64",
        f"eval.every={s.steps}",
        f"eval.num_problems={s.eval_problems}",
        f"eval.samples={s.eval_samples}",
        "eval.temperature=1.0",
        "verify.workers=1",
    ]


def _models(s: DemoSettings, names: tuple[str, ...]) -> str:
    entries = ", ".join(
        f'{{name: {m}, path: "tiny:{s.presets[m]}", optim: {{lr: {s.lr}}}}}' for m in names
    )
    return f"models=[{entries}]"


def run_configs(s: DemoSettings, root: Path, seed: int) -> dict[str, list[Config]]:
    """The configs of every method for one seed (stored: one config per receiver)."""
    base = root / f"seed_{seed}"

    def cfg(name: str, *extra: str) -> Config:
        return load_config(Config, None, [*_overrides(s, base / name, seed), *extra])

    both = _models(s, MODELS)
    out = {
        "grpo": [cfg("grpo", both, "exchange.enabled=false")],
        "graft": [cfg("graft", both)],
        "stored": [
            cfg(
                f"stored_{m}",
                _models(s, (m,)),
                "exchange.source=stored",
                f"exchange.store={base / 'grpo' / 'trajectories'}",
                f"exchange.peer_model={other}",
                "exchange.peer_records=same_step",
                "run.threads=1",
            )
            for m, other in (("llama", "qwen"), ("qwen", "llama"))
        ],
    }
    if s.reference:
        out["grpo4x"] = [
            cfg("grpo4x", both, "exchange.enabled=false", f"rollout.group_size={4 * s.group_size}")
        ]
    return out


def _run_parallel(cfgs: list[Config], log_dir: Path) -> None:
    """Run single-policy configs side by side as `graft train` processes (one core each)."""
    procs = []
    for c in cfgs:
        path = Path(c.run.out_dir).with_suffix(".yaml")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(to_dict(c), sort_keys=False))
        log = open(log_dir / f"{Path(c.run.out_dir).name}.log", "w")  # noqa: SIM115
        procs.append(
            (
                subprocess.Popen(
                    [sys.executable, "-m", "graft.cli", "train", str(path)],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                ),
                log,
                path,
            )
        )
    from tqdm.auto import tqdm

    total = sum(c.run.steps for c in cfgs)
    with tqdm(total=total, desc="stored-peer runs (in parallel)", dynamic_ncols=True) as bar:
        while any(p.poll() is None for p, _, _ in procs):
            done = sum(_steps_done(Path(c.run.out_dir)) for c in cfgs)
            bar.update(max(done - bar.n, 0))
            time.sleep(0.5)
        bar.update(max(sum(_steps_done(Path(c.run.out_dir)) for c in cfgs) - bar.n, 0))
    failed = []
    for proc, log, path in procs:
        proc.wait()
        log.close()
        if proc.returncode != 0:
            failed.append(f"{path} (see {log.name})")
    if failed:
        raise RuntimeError("stored-peer runs failed: " + ", ".join(failed))


def _steps_done(run_dir: Path) -> int:
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        return 0
    return sum(1 for line in path.read_text().splitlines() if '"reward/mean"' in line)


def _build_one(preset: str) -> str:
    import torch

    torch.set_num_threads(1)
    return str(build_tiny(preset, progress=False))


def build_presets(s: DemoSettings) -> dict[str, str]:
    """Both tiny models, built in parallel on first use (cached afterwards)."""
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(2) as pool:
        paths = pool.map(_build_one, [s.presets[m] for m in MODELS])
    return dict(zip(MODELS, paths))


def _policy_metrics(record: dict[str, Any], model: str, k: int) -> dict[str, float]:
    out = {"mix": record[f"m/{model}/eval/test/avg@{k}"]}
    for skill in MUL_SKILLS:
        key = f"m/{model}/eval/test/{skill}/avg@{k}"
        if key in record:
            out[skill] = record[key]
    return out


def _single_metrics(record: dict[str, Any], k: int) -> dict[str, float]:
    out = {"mix": record[f"eval/test/avg@{k}"]}
    for skill in MUL_SKILLS:
        if f"eval/test/{skill}/avg@{k}" in record:
            out[skill] = record[f"eval/test/{skill}/avg@{k}"]
    return out


def collect(s: DemoSettings, cfgs: dict[str, list[Config]]) -> dict[str, Any]:
    """Start and end accuracies of every (method, model) of one seed, and exchange totals."""
    k = s.eval_samples
    out: dict[str, Any] = {}
    for method, configs in cfgs.items():
        for c in configs:
            records = read_metrics(c.run.out_dir)
            first, last = records[0], records[-1]
            if len(c.models) == 1:
                name = c.models[0].name
                out.setdefault(method, {})[name] = {
                    "start": _single_metrics(first, k),
                    "end": _single_metrics(last, k),
                    "exchange": _exchange_totals(records, prefix="x/stored:"),
                }
            else:
                for m in MODELS:
                    out.setdefault(method, {})[m] = {
                        "start": _policy_metrics(first, m, k),
                        "end": _policy_metrics(last, m, k),
                    }
                if method == "graft":
                    out[method]["exchange"] = _exchange_totals(records, prefix="x/")
    return out


def _exchange_totals(records: list[dict[str, Any]], *, prefix: str) -> dict[str, Any]:
    totals: dict[str, dict[str, float]] = {}
    for r in records:
        for key, value in r.items():
            if key.startswith(prefix) and key.count("/") == 2:
                _, direction, metric = key.split("/")
                if metric in (
                    "candidates",
                    "selected",
                    "responses_sent",
                    "admitted",
                    "prompts_grafted",
                    "dropped_weight",
                ):
                    d = totals.setdefault(direction, {})
                    d[metric] = d.get(metric, 0.0) + float(value)
    for d in totals.values():
        d["admission_rate"] = d.get("admitted", 0.0) / max(d.get("responses_sent", 0.0), 1.0)
    return totals
