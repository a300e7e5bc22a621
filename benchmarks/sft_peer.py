"""`graft sft` on the demo pair: does fine-tuning a model on its peer's verified answers raise its
held-out accuracy on the peer's strong skill?

The design, fixed before its runs:
- the peer's store: the default demo's GRPO run of the latent pair (60 steps x 8 prompts x 8
  responses, both models, exchange off), one run per seed;
- per seed and direction, `graft sft` of the receiver on the OTHER model's responses in that
  store (re-verified with the receiver's verifier, its own template and tokenizer), 100 steps of
  32 responses, 10% of the store's prompts held out; the receiver's held-out accuracy on the test
  split (200 problems, avg@2 at temperature 1) before (step 0) and after (step 100) SFT;
- the learning rate is chosen first, on seed 100 only, among 3e-5, 1e-4 and 3e-4, by the held-out
  accuracy on the store's own held-out prompts (`eval/sft_val`), never on the test split;
- reported: per direction, the per-seed change of accuracy on the peer's strong skill (the
  receiver's weak skill) over seeds 0, 1, 2, with a 95% t interval; the other skill beside it.
Runs are resumable. Prints markdown.

    .venv/bin/python benchmarks/sft_peer.py --out runs/bench_sft_peer
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time
from pathlib import Path

from graft.config import Config, SftConfig
from graft.evidence.demo import (
    MODELS,
    STRONG,
    WEAK,
    DemoSettings,
    build_presets,
    is_done,
    mark_done,
    run_configs,
    run_inprocess,
)
from graft.evidence.stats import paired_interval
from graft.rundir import read_metrics

PILOT_SEED, SEEDS = 100, (0, 1, 2)
LRS = (3e-5, 1e-4, 3e-4)
STEPS, BATCH = 100, 32


def settings() -> DemoSettings:
    s = DemoSettings.make()
    return dataclasses.replace(s, regimes=("latent",), methods=("grpo",), eval_problems=200)


def peer_store(root: Path, seed: int) -> Config:
    """The seed's GRPO run of the pair (its store holds both models' rollouts)."""
    from graft.trainer import train

    (cfg,) = run_configs(settings(), root, "latent", seed)["grpo"]
    if not is_done(cfg):
        start = time.perf_counter()
        run_inprocess(cfg, train)
        print(f"  GRPO seed {seed}: {time.perf_counter() - start:.0f} s", flush=True)
    return cfg


def sft_config(grpo: Config, receiver: str, lr: float, out: Path) -> Config:
    peer = next(m for m in MODELS if m != receiver)
    (model,) = [m for m in grpo.models if m.name == receiver]
    model = dataclasses.replace(model, optim=dataclasses.replace(model.optim, lr=lr))
    store = str(Path(grpo.run.out_dir) / "trajectories")
    return dataclasses.replace(
        grpo,
        models=(model,),
        run=dataclasses.replace(grpo.run, out_dir=str(out), steps=STEPS, save_every=0),
        sft=SftConfig(store=store, peer_model=peer, val_fraction=0.1, batch_size=BATCH),
        eval=dataclasses.replace(grpo.eval, every=STEPS),
    )


def run_sft(cfg: Config) -> list[dict]:
    from graft.sft.loop import sft

    if not is_done(cfg):
        start = time.perf_counter()
        sft(cfg, overwrite=True)
        mark_done(cfg, time.perf_counter() - start)
    return [r for r in read_metrics(Path(cfg.run.out_dir)) if "eval/sft_val/avg@2" in r]


def pilot(root: Path) -> float:
    grpo = peer_store(root, PILOT_SEED)
    scores = {}
    for lr in LRS:
        finals = [
            run_sft(sft_config(grpo, m, lr, root / f"pilot/lr{lr:g}/{m}"))[-1]["eval/sft_val/avg@2"]
            for m in MODELS
        ]
        scores[lr] = statistics.fmean(finals)
        print(f"  pilot lr {lr:g}: held-out store accuracy {100 * scores[lr]:.1f}%", flush=True)
    return max(scores, key=lambda lr: scores[lr])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/bench_sft_peer")
    root = Path(parser.parse_args().out)
    build_presets(settings())
    lr = pilot(root)
    rows: dict[str, dict[str, list[float]]] = {m: {"weak": [], "strong": []} for m in MODELS}
    data = {}
    for seed in SEEDS:
        grpo = peer_store(root, seed)
        for m in MODELS:
            cfg = sft_config(grpo, m, lr, root / f"seed_{seed}/sft_{m}")
            records = run_sft(cfg)
            before, after = records[0], records[-1]
            for which, skill in (("weak", WEAK[m]), ("strong", STRONG[m])):
                key = f"eval/test/{skill}/avg@2"
                rows[m][which].append(after[key] - before[key])
            data[seed, m] = json.loads((Path(cfg.run.out_dir) / "sft_data.json").read_text())
    print(f"\nlearning rate (pilot, seed {PILOT_SEED}): {lr:g}\n")
    print(
        "| receiver (learns from) | skill | change in held-out avg@2, seeds 0/1/2 | mean [95% CI] |"
    )
    print("|---|---|---|---|")
    for m in MODELS:
        peer = next(x for x in MODELS if x != m)
        for which, skill in (("weak", WEAK[m]), ("strong", STRONG[m])):
            d = rows[m][which]
            iv = paired_interval(d)
            role = "the peer's strong, its own weak" if which == "weak" else "its own strong"
            label = f"{skill} ({role})"
            seeds = " / ".join(f"{100 * x:+.1f}" for x in d)
            print(
                f"| {m} ({peer}) | {label} | {seeds} | {100 * iv.mean:+.1f} "
                f"[{100 * iv.low:+.1f}, {100 * iv.high:+.1f}] |"
            )
    print("\nstore responses per seed (train / held-out, correct of distinct):")
    for (seed, m), d in sorted(data.items()):
        print(
            f"- seed {seed}, {m} from its peer: {d['train_responses']} / {d['val_responses']} "
            f"({d['correct']} of {d['distinct']} distinct re-verified correct)"
        )


if __name__ == "__main__":
    main()
