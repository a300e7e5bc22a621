"""The reuse study (docs/evidence.md, "Trajectory reuse where GRAFT works"): on the code pair,
each model trained ALONE against a stored log of its peer, beside GRPO and online GRAFT of the
same seeds, and the paper's safety controls online. `graft demo --study reuse` runs it.

Per seed s, in `OUT/code/seed_<s>/`:
- `grpo` (the baseline, with its step-40 checkpoint: the source of logs a, b, e and c), `graft`
  (online, the paper's weight) and the three online controls (`CONTROLS`), each a pair run;
- two frozen logs per peer, sampled by `graft sample` over exactly the prompts the receiver's run
  draws (`--steps-of` the seed's GRPO run), n = 8, the runs' sampling settings, sampling seed s:
  `logs/final_<peer>` from the peer's step-40 GRPO checkpoint (arm c), `logs/pre_<peer>` from its
  pre-trained model (arm d);
- the stored arms (`ARMS`), `stored_<arm>_<receiver>`: each model alone against its peer's log.
Every GRPO run goes first (arm b of a seed reads the next seed's GRPO log); then each seed whole.
Each unit is resumable: a finished run or log (its `done.json`, holding its config's digest and
the commit) is reused; an interrupted one starts again (a log resumes where it stopped).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from graft.config import Config, load_config
from graft.evidence.demo import (
    CODE_STUDY_SEEDS,
    METHODS,
    DemoSettings,
    _models,
    _overrides,
    code_settings,
    is_done,
    run_inprocess,
    run_parallel,
)
from graft.evidence.pairs import MODELS

REGIME = "code"
PEER = {"llama": "qwen", "qwen": "llama"}


@dataclass(frozen=True)
class Arm:
    label: str
    log: str
    """Whose log: `grpo` (the same seed's GRPO run), `grpo_next` (the next seed's), `final` or
    `pre` (a frozen log sampled from the peer's step-40 checkpoint or its pre-trained model)."""
    overrides: tuple[str, ...]
    age: float | None
    """The log's mean age over the receiver's 40 steps: the peer's training step when it
    sampled, minus the receiver's step (None: another seed's log)."""


ARMS = {
    "a": Arm("stored a: the peer's GRPO log, same seed, same step", "grpo",
             ("exchange.stored.records=same_step",), 0.0),
    "b": Arm("stored b: the peer's GRPO log of another seed", "grpo_next",
             ("exchange.stored.records=latest",), None),
    "c": Arm("stored c: frozen log of the peer's step-40 GRPO checkpoint", "final",
             ("exchange.stored.records=latest",), 20.5),
    "d": Arm("stored d: frozen log of the peer's pre-trained model", "pre",
             ("exchange.stored.records=latest",), -19.5),
    "e": Arm("stored e: log a with its rewards shuffled (negative control)", "grpo",
             ("exchange.stored.records=same_step", "exchange.stored.rewards=shuffled"), 0.0),
}  # fmt: skip
PRIMARY_ARMS = ("a", "b", "c", "d")
CONTROLS = {
    "ctl_success_only": (
        "control: correct-only exchange",
        ("exchange.ablation.replacement=success_only",),
    ),
    "ctl_no_weight": ("control: no compatibility weight", ("exchange.ablation.weight=none",)),
    "ctl_unclipped": ("control: no token ratio clip", ("exchange.ablation.peer_update=unclipped",)),
}
LOG_N = 8


def settings() -> DemoSettings:
    """The code-pair study's settings (configs/graft_code.yaml's budget), seeds 10-14."""
    return code_settings(seeds=CODE_STUDY_SEEDS, mode="study-reuse")


def seed_dir(out: Path, seed: int) -> Path:
    return out / REGIME / f"seed_{seed}"


def next_seed(s: DemoSettings, seed: int) -> int:
    seeds = list(s.seeds)
    return seeds[(seeds.index(seed) + 1) % len(seeds)]


def pair_config(s: DemoSettings, out: Path, seed: int, name: str) -> Config:
    """A pair run of seed `seed`: `grpo`, `graft` or a control."""
    if name in CONTROLS:
        label, extra = CONTROLS[name]
    else:
        label, extra = METHODS[name].label, METHODS[name].overrides
    sets = [*_overrides(s, seed_dir(out, seed) / name, seed), _models(s, REGIME, MODELS),
            f"run.label={json.dumps(label)}", *extra]  # fmt: skip
    if name == "grpo":
        sets.append(f"run.save_every={s.steps}")  # the final checkpoint that log c samples
    return load_config(Config, None, sets)


def log_dir(out: Path, seed: int, kind: str, peer: str) -> Path:
    return seed_dir(out, seed) / "logs" / f"{kind}_{peer}"


def store_of(s: DemoSettings, out: Path, seed: int, arm: str, receiver: str) -> Path:
    """The log a receiver trains against in `arm`."""
    kind = ARMS[arm].log
    if kind == "grpo":
        return seed_dir(out, seed) / "grpo" / "trajectories"
    if kind == "grpo_next":
        return seed_dir(out, next_seed(s, seed)) / "grpo" / "trajectories"
    return log_dir(out, seed, kind, PEER[receiver])


def stored_config(s: DemoSettings, out: Path, seed: int, arm: str, receiver: str) -> Config:
    sets = [
        *_overrides(s, seed_dir(out, seed) / f"stored_{arm}_{receiver}", seed),
        _models(s, REGIME, (receiver,)),
        f"run.label={json.dumps(ARMS[arm].label)}",
        "exchange.source=stored",
        f"exchange.stored.path={store_of(s, out, seed, arm, receiver)}",
        f"exchange.stored.model={PEER[receiver]}",
        *ARMS[arm].overrides,
        "run.threads=1",
        "run.backend=inprocess",
    ]
    return load_config(Config, None, sets)


def sample_args(grpo: Path, log: Path, seed: int, kind: str, peer: str) -> list[str]:
    """`graft sample`'s arguments for one frozen log of `peer` into `log`: from the step-40
    checkpoint of the GRPO run `grpo` (`final`) or from its pre-trained model (`pre`), over the
    prompts that run drew, n = 8, sampling seed `seed`."""
    where = ["--run", str(grpo)] if kind == "final" else ["--config", str(grpo / "config.yaml")]
    return [
        *where, "--policy", peer, "--steps-of", str(grpo), "--n", str(LOG_N),
        "--seed", str(seed), "--workers", "2", "--out", str(log),
    ]  # fmt: skip


def _sample_done(path: Path, args: list[str]) -> bool:
    try:
        return json.loads((path / "done.json").read_text())["args"] == args
    except (OSError, ValueError, KeyError):
        return False


def run_log(args: list[str], path: Path) -> None:
    """One frozen log, unless it is done (a killed sampling resumes where it stopped): the
    `graft sample` command with `args`, in a process of its own, writing into `path`."""
    from graft.evidence.recorded import source_commit

    if _sample_done(path, args):
        return
    start = time.perf_counter()
    if subprocess.run([sys.executable, "-m", "graft.cli", "sample", *args]).returncode != 0:
        raise RuntimeError(f"graft sample {' '.join(args)} failed")
    done = {"args": args, "seconds": round(time.perf_counter() - start, 1),
            "commit": source_commit()}  # fmt: skip
    (path / "done.json").write_text(json.dumps(done))


def make_log(out: Path, seed: int, kind: str, peer: str) -> None:
    grpo, log = seed_dir(out, seed) / "grpo", log_dir(out, seed, kind, peer)
    run_log(sample_args(grpo, log, seed, kind, peer), log)


def jobs(s: DemoSettings, out: Path) -> list[tuple[str, Callable[[], None]]]:
    """Every unit of the design in the order it runs, each a (name, run it) pair."""
    from graft.trainer import train

    def pair(seed: int, name: str) -> Callable[[], None]:
        def run() -> None:
            cfg = pair_config(s, out, seed, name)
            if not is_done(cfg):
                run_inprocess(cfg, train)

        return run

    def stored(seed: int, arm: str) -> Callable[[], None]:
        def run() -> None:  # the two receivers side by side, one core each
            todo = [c for m in MODELS if not is_done(c := stored_config(s, out, seed, arm, m))]
            if todo:
                run_parallel(todo, seed_dir(out, seed))

        return run

    def log(seed: int, kind: str, peer: str) -> Callable[[], None]:
        return lambda: make_log(out, seed, kind, peer)

    out_jobs = [(f"seed {seed} GRPO", pair(seed, "grpo")) for seed in s.seeds]
    for seed in s.seeds:
        out_jobs += [(f"seed {seed} {n}", pair(seed, n)) for n in ("graft", *CONTROLS)]
        for kind in ("final", "pre"):
            out_jobs += [(f"seed {seed} log {kind} {p}", log(seed, kind, p)) for p in MODELS]
        out_jobs += [(f"seed {seed} stored {arm}", stored(seed, arm)) for arm in ARMS]
    return out_jobs


def run_jobs(todo: list[tuple[str, Callable[[], None]]], desc: str) -> dict[str, float]:
    """Run (or reuse) every unit of a study in order, with a progress bar; the seconds spent on
    each unit this time."""
    from tqdm.auto import tqdm

    spent = {}
    with tqdm(total=len(todo), desc=desc, dynamic_ncols=True) as bar:
        for name, run in todo:
            bar.set_postfix_str(name)
            start = time.perf_counter()
            run()
            spent[name] = round(time.perf_counter() - start, 1)
            bar.update(1)
    return spent


def run_reuse(out: Path, s: DemoSettings | None = None) -> dict[str, float]:
    """Run (or reuse) every unit; the seconds spent on each unit this time."""
    return run_jobs(jobs(s or settings(), out), "reuse study")


def all_configs(s: DemoSettings, out: Path) -> list[Config]:
    """Every training run's config (for the commits they ran at)."""
    cfgs = [pair_config(s, out, seed, n) for seed in s.seeds for n in ("grpo", "graft", *CONTROLS)]
    cfgs += [stored_config(s, out, seed, a, m) for seed in s.seeds for a in ARMS for m in MODELS]
    return cfgs
