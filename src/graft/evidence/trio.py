"""The three-model study (docs/evidence.md, "Three models"): llama, qwen and gpt2, each strong
on one reducer of the list-functions task (`list`, `sum`, `max`), trained with GRPO, with GRAFT
in each pair and in the pool of three, alone against a stored log of each peer, and in the
own-skill arms. `graft demo --study trio` runs it; `trio_report.py` reads it.

Per seed s, in `OUT/trio/seed_<s>/`:
- `grpo`: the three models, exchange off (each model's GRPO run: the draws of a model depend on
  its name and the run seed, not on the others), with its step-40 checkpoint (gpt2's final log);
- `graft_<a>_<b>`: GRAFT in each pair; `graft_pool`: GRAFT among the three; `graftrr_<a>_<b>`:
  GRAFT in each pair with the receiver-relative weight (the second design: the paper's weight
  admits almost nothing in some directions across tokenizer families);
- `logs/final_gpt2` and `logs/pre_gpt2`: frozen logs of the peer that learns, sampled by
  `graft sample` from its step-40 GRPO checkpoint and from its pre-trained model, over the
  prompts every receiver draws (the prompt order depends on the run seed only);
- `stored_<peer>_<receiver>`: each model alone against the seed's GRPO log of each peer, and
  `stored_<kind>_gpt2_<receiver>` against gpt2's frozen logs: one log, several receivers;
- `trade_<arm>`: the llama-qwen pair under GRAFT with one change each (`TRADE`).
Seeds run whole, one after another; each unit is resumable (its `done.json`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from graft.config import Config, load_config
from graft.evidence.demo import (
    DemoSettings,
    _overrides,
    code_settings,
    is_done,
    run_inprocess,
    run_parallel,
)
from graft.evidence.reuse import run_jobs, run_log, sample_args
from graft.models.tiny_specs import TRIO_TASK

MODELS = ("llama", "qwen", "gpt2")
PRESETS = {
    "llama": "llama-char-trio-list",
    "qwen": "qwen2-bpe-trio-sum",
    "gpt2": "gpt2-bpe-trio-max",
}
OWN = {"llama": "list", "qwen": "sum", "gpt2": "max"}
"""Each model's own skill (the reducer it was pre-trained on); the other two are its stuck ones."""
OWNER = {skill: m for m, skill in OWN.items()}
PAIRS = (("llama", "qwen"), ("llama", "gpt2"), ("qwen", "gpt2"))
LEARNER = "gpt2"
"""The peer that learns under GRPO (pre-trained less far): its frozen logs give the staleness."""
SEEDS = (20, 21, 22, 23, 24)
"""The reported seeds: none ran these models before the design was fixed (the pilot: 200)."""
PILOT_SEED = 200
TASK_SETS = (
    "task.name=list_functions",
    f"task.list_functions.skills={json.dumps(list(TRIO_TASK.skills))}",
    f"task.list_functions.num_train={TRIO_TASK.num_train}",
    f"task.list_functions.num_test={TRIO_TASK.num_test}",
    f"task.list_functions.num_val={TRIO_TASK.num_val}",
)
TRADE_PAIR = ("llama", "qwen")


@dataclass(frozen=True)
class Trade:
    label: str
    overrides: tuple[str, ...]


TRADE = {
    "uniform": Trade("GRAFT, peer groups spread over the minibatches",
                     ("exchange.ablation.peer_position=uniform",)),
    "nobalance": Trade("GRAFT, balancing off", ("exchange.balancing=false",)),
    "floor": Trade("GRAFT, admission floor 0.9", ("exchange.delta=0.9",)),
    "half_lr": Trade("GRAFT, half the learning rate", ("models.0.optim.lr=1e-05",
                                                        "models.1.optim.lr=1e-05")),
}  # fmt: skip
"""The own-skill arms (docs/evidence.md): on the llama-qwen pair, GRAFT with one change each."""
FROZEN = {"final": 20.5, "pre": -19.5}
"""gpt2's frozen logs, each with its mean age over the receiver's 40 steps (the peer's step when
it sampled minus the receiver's; the same-step GRPO log: 0)."""


def settings(**changes: object) -> DemoSettings:
    """The code-pair study's budget on the three-reducer task: 40 steps x 8 prompts x 8
    programs, lr 2e-5, evaluations at steps 0, 20 and 40 on the whole test split (300
    problems, 100 per reducer), avg@4 at temperature 1."""
    base = code_settings(
        seeds=SEEDS,
        eval_problems=TRIO_TASK.num_test,
        mode="study-trio",
        regimes=("trio",),
        presets={"trio": dict(PRESETS)},
        methods=("grpo", "graft"),
        extra=TASK_SETS,
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def seed_dir(out: Path, seed: int) -> Path:
    return out / "trio" / f"seed_{seed}"


def models_set(s: DemoSettings, names: tuple[str, ...]) -> str:
    """The `models=[...]` override: each model by its preset (`tiny:NAME`) or a path."""
    paths = s.presets["trio"]

    def where(m: str) -> str:
        return paths[m] if "/" in paths[m] else f"tiny:{paths[m]}"

    entries = ", ".join(f'{{name: {m}, path: "{where(m)}", optim: {{lr: {s.lr}}}}}' for m in names)
    return f"models=[{entries}]"


def run_config(
    s: DemoSettings, out: Path, seed: int, name: str, names: tuple[str, ...], *extra: str
) -> Config:
    return load_config(
        Config,
        None,
        [*_overrides(s, seed_dir(out, seed) / name, seed), models_set(s, names), *extra],
    )


def grpo_config(s: DemoSettings, out: Path, seed: int) -> Config:
    """The three models with the exchange off, checkpointed at the end (gpt2's final log)."""
    return run_config(s, out, seed, "grpo", MODELS, 'run.label="GRPO"', "exchange.enabled=false",
                      f"run.save_every={s.steps}")  # fmt: skip


def pair_name(a: str, b: str) -> str:
    return f"graft_{a}_{b}"


def graft_configs(s: DemoSettings, out: Path, seed: int) -> dict[str, Config]:
    """GRAFT (the paper's weight) in each pair and in the pool of three."""
    cfgs = _pair_runs(s, out, seed, pair_name, "")
    cfgs["graft_pool"] = run_config(s, out, seed, "graft_pool", MODELS, 'run.label="GRAFT pool"')
    return cfgs


def rr_name(a: str, b: str) -> str:
    return f"graftrr_{a}_{b}"


def rr_configs(s: DemoSettings, out: Path, seed: int) -> dict[str, Config]:
    """GRAFT in each pair with `exchange.ablation.weight=receiver_relative` (delta 0.8)."""
    weight = "exchange.ablation.weight=receiver_relative"
    return _pair_runs(s, out, seed, rr_name, ", receiver_relative", weight)


def _pair_runs(
    s: DemoSettings, out: Path, seed: int, name: Callable[[str, str], str], label: str,
    *extra: str,
) -> dict[str, Config]:  # fmt: skip
    cfgs = {}
    for a, b in PAIRS:
        tag = f'run.label="GRAFT {a}+{b}{label}"'
        cfgs[name(a, b)] = run_config(s, out, seed, name(a, b), (a, b), tag, *extra)
    return cfgs


def trade_config(s: DemoSettings, out: Path, seed: int, arm: str) -> Config:
    label = json.dumps(TRADE[arm].label)
    return run_config(s, out, seed, f"trade_{arm}", TRADE_PAIR, f"run.label={label}",
                      *TRADE[arm].overrides)  # fmt: skip


def log_dir(out: Path, seed: int, kind: str) -> Path:
    return seed_dir(out, seed) / "logs" / f"{kind}_{LEARNER}"


def stored_units(s: DemoSettings, out: Path, seed: int) -> dict[str, Config]:
    """Every stored receiver of a seed: each model against the GRPO log of each peer, and llama
    and qwen against gpt2's frozen logs."""
    grpo_log = seed_dir(out, seed) / "grpo" / "trajectories"
    units: dict[str, Config] = {}
    for receiver in MODELS:
        for peer in MODELS:
            if peer != receiver:
                units[f"stored_{peer}_{receiver}"] = _stored(
                    s, out, seed, f"stored_{peer}_{receiver}", receiver, peer, grpo_log,
                    "same_step",
                )  # fmt: skip
    for kind in FROZEN:
        for receiver in MODELS:
            if receiver != LEARNER:
                name = f"stored_{kind}_{LEARNER}_{receiver}"
                units[name] = _stored(s, out, seed, name, receiver, LEARNER,
                                      log_dir(out, seed, kind), "latest")  # fmt: skip
    return units


def _stored(
    s: DemoSettings, out: Path, seed: int, name: str, receiver: str, peer: str, log: Path,
    records: str,
) -> Config:  # fmt: skip
    label = json.dumps(f"{receiver} alone, {name.removeprefix('stored_')}")
    return run_config(
        s, out, seed, name, (receiver,), f"run.label={label}", "exchange.source=stored",
        f"exchange.stored.path={log}", f"exchange.stored.model={peer}",
        f"exchange.stored.records={records}", "run.threads=1", "run.backend=inprocess",
    )  # fmt: skip


def make_frozen_log(out: Path, seed: int, kind: str) -> None:
    grpo, log = seed_dir(out, seed) / "grpo", log_dir(out, seed, kind)
    run_log(sample_args(grpo, log, seed, kind, LEARNER), log)


def jobs(s: DemoSettings, out: Path) -> list[tuple[str, Callable[[], None]]]:
    """Every unit of the design in the order it runs, each a (name, run it) pair: each seed
    whole, GRPO first (the stored receivers read its log)."""
    from graft.trainer import train

    def one(cfg_of: Callable[[], Config]) -> Callable[[], None]:
        def run() -> None:
            cfg = cfg_of()
            if not is_done(cfg):
                run_inprocess(cfg, train)

        return run

    def side_by_side(seed: int, names: list[str]) -> Callable[[], None]:
        def run() -> None:  # two receivers at a time, one core each
            units = stored_units(s, out, seed)
            todo = [units[n] for n in names if not is_done(units[n])]
            if todo:
                run_parallel(todo, seed_dir(out, seed))

        return run

    out_jobs: list[tuple[str, Callable[[], None]]] = []
    for seed in s.seeds:
        out_jobs.append((f"seed {seed} GRPO", one(lambda seed=seed: grpo_config(s, out, seed))))
        for name in graft_configs(s, out, seed):
            cfg_of = lambda seed=seed, name=name: graft_configs(s, out, seed)[name]  # noqa: E731
            out_jobs.append((f"seed {seed} {name}", one(cfg_of)))
        for name in rr_configs(s, out, seed):
            cfg_of = lambda seed=seed, name=name: rr_configs(s, out, seed)[name]  # noqa: E731
            out_jobs.append((f"seed {seed} {name}", one(cfg_of)))
        for kind in FROZEN:
            log = lambda seed=seed, kind=kind: make_frozen_log(out, seed, kind)  # noqa: E731
            out_jobs.append((f"seed {seed} log {kind} {LEARNER}", log))
        names = list(stored_units(s, out, seed))
        for i in range(0, len(names), 2):
            out_jobs.append((f"seed {seed} {', '.join(names[i : i + 2])}",
                             side_by_side(seed, names[i : i + 2])))  # fmt: skip
        for arm in TRADE:
            cfg_of = lambda seed=seed, arm=arm: trade_config(s, out, seed, arm)  # noqa: E731
            out_jobs.append((f"seed {seed} trade {arm}", one(cfg_of)))
    return out_jobs


def run_trio(out: Path, s: DemoSettings | None = None) -> dict[str, float]:
    """Run (or reuse) every unit; the seconds spent on each unit this time."""
    return run_jobs(jobs(s or settings(), out), "three-model study")


def all_configs(s: DemoSettings, out: Path) -> list[Config]:
    """Every training run's config (for the commits they ran at)."""
    cfgs = []
    for seed in s.seeds:
        cfgs += [grpo_config(s, out, seed), *graft_configs(s, out, seed).values()]
        cfgs += [*rr_configs(s, out, seed).values()]
        cfgs += [*stored_units(s, out, seed).values()]
        cfgs += [trade_config(s, out, seed, arm) for arm in TRADE]
    return cfgs
