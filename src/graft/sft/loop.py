"""The `graft sft` run: a store's verified-correct responses, in the policy's own tokens, learned
by token-mean negative log-likelihood.

Each step takes `sft.batch_size` training responses (epochs over a seeded permutation, a pure
function of the run seed and the step, so a resume continues exactly) and takes one AdamW step
on the mean NLL over all their response tokens. The forward and backward run in
`algo.micro_batch_size` pieces whose per-token coefficients are computed over the whole batch
first (`graft.training.loss.loss_coefficients`), so the gradient does not depend on the split.
At step 0, every `eval.every` steps and at the end: the NLL of the held-out responses
(`sft/val_loss`), the held-out prompts' accuracy (`eval/sft_val/avg@k`, sampled as `eval`
says), which picks `checkpoints/best` (of tied checkpoints the latest; with no held-out prompt:
the last step), and the `eval.suites` when `eval.every` > 0. summary.json says whether the best
beat the model the run started from (`best/<policy>/beat_start`), and so does the command.

The run directory is a training run's: config.yaml, metrics.jsonl (with the cost counts of
`graft.training.cost`), checkpoints (model, tokenizer, AdamW state: a checkpoint is a model path
`graft train` takes), summary.json, trackers; and `sft_data.json`, what the store gave.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from graft.backends import Backend, check_ray_start, make_backend, policy_specs
from graft.config import Config, ConfigError
from graft.errors import DataError
from graft.eval.evaluate import evaluate_once
from graft.eval.suites import Suite, check_suite_golds, load_suites
from graft.rollout import SamplingParams
from graft.rundir import MetricsLog, read_metrics, run_then_close, write_json, write_summary
from graft.rundir.book import RunBook
from graft.rundir.loop import Loop, RunResult, begin, check_finite, open_log, run_steps
from graft.rundir.progress import warn
from graft.rundir.trackers import check_trackers
from graft.seeds import derive_seed
from graft.session import RunSession
from graft.sft.data import Example, Examples, read_examples
from graft.tasks import build_task, eval_verifier, prompt_batch, run_verifier
from graft.training.cost import CostLog, step_cost
from graft.types import PeerResponse, TrainGroup, TrainSequence
from graft.verify.pool_ray import open_pool

VAL_SUITE = "sft_val"
"""The held-out prompts of the store, as an evaluation suite."""


def sft_backend(cfg: Config) -> Backend:
    """The one policy, its update one AdamW step per call over all the sequences it is given."""
    specs = []
    for s in policy_specs(cfg):
        algo = dataclasses.replace(s.update.algo, minibatches=1, epochs=1)
        specs.append(dataclasses.replace(s, update=dataclasses.replace(s.update, algo=algo)))
    return make_backend(specs, cfg.run.backend, ray_strategy=cfg.run.ray_strategy)


class SftRun:
    """Every check before anything is written: the config, the store and what it holds, the
    model; then `run` writes the run directory."""

    def __init__(self, cfg: Config) -> None:
        if len(cfg.models) != 1:
            raise ConfigError(
                f"models: graft sft trains one policy; the config lists {len(cfg.models)}"
            )
        if not cfg.sft.store:
            raise ConfigError("sft.store: name the trajectory store to learn from (--store)")
        check_trackers(cfg.run.report_to)
        self.cfg = cfg
        task = build_task(cfg.task)
        self.verifier = run_verifier(cfg.verify, task)
        self.eval_verifier = eval_verifier(cfg.verify, self.verifier)
        check_ray_start(cfg)  # before the verifier pool starts a local Ray cluster
        v = cfg.verify  # on Ray, verification runs on the cluster's CPUs too
        self.session = RunSession()
        with self.session.opening():
            self.pool = self.session.open(
                open_pool(v.workers, v.timeout_s, ray=cfg.run.backend == "ray")
            )
            self.examples = read_examples(
                cfg.sft, pool=self.pool, verifier=self.verifier, seed=cfg.run.seed
            )
            self.suites = self._suites()
            self.backend = self.session.open(sft_backend(cfg))
            self.name = self.backend.names[0]
            self.prefix = {self.name: ""}
            self.train_set, self.val_set, self.counts = self._encode(self.examples)
        self.costs = CostLog(self.prefix)

    def _suites(self) -> list[Suite]:
        e = self.cfg.eval
        suites = load_suites(e.suites, task=self.cfg.task, limit=e.num_problems) if e.every else []
        suites = check_suite_golds(
            suites,
            self.pool,
            max_fraction=self.cfg.verify.max_unparseable_golds,
            verifier=self.eval_verifier,
        )
        if self.examples.val:
            suites.append(Suite(VAL_SUITE, self.examples.val_problems, self.verifier))
        return suites

    def _encode(
        self, examples: Examples
    ) -> tuple[tuple[TrainSequence, ...], tuple[TrainSequence, ...], dict[str, int]]:
        """Training and held-out responses in the policy's tokens (its template and EOS; longer
        than rollout.max_new_tokens: left out and counted)."""
        sets, counts = [], dict(examples.counts)
        for split, chosen in (("train", examples.train), ("val", examples.val)):
            seqs, dropped = self._sequences(chosen)
            sets.append(seqs)
            counts[f"{split}_too_long"] = dropped
        if not sets[0]:
            raise DataError(
                f"sft.store {self.cfg.sft.store}: every training response is longer than "
                f"rollout.max_new_tokens={self.cfg.rollout.max_new_tokens} in {self.name}'s tokens"
            )
        return sets[0], sets[1], counts

    def _sequences(self, chosen: tuple[Example, ...]) -> tuple[tuple[TrainSequence, ...], int]:
        if not chosen:
            return (), 0
        requests = [
            PeerResponse(i, 0, e.problem.prompt, e.text, e.stopped) for i, e in enumerate(chosen)
        ]
        encoded = self.backend.encode_responses({self.name: requests}, too_long="drop")
        seqs = tuple(
            TrainSequence(
                imp.prompt_ids,
                imp.response_ids,
                (0.0,) * len(imp.response_ids),
                0.0,
                objective="sft",
            )
            for imp in encoded[self.name]
            if not imp.drop
        )
        return seqs, len(chosen) - len(seqs)

    # ------------------------------------------------------------------ steps
    def step(self, step: int) -> dict[str, float]:
        """One AdamW step on the token-mean NLL of the step's responses."""
        cfg = self.cfg
        batch = prompt_batch(
            self.train_set, step=step, batch_size=cfg.sft.batch_size, seed=cfg.run.seed
        )
        before = self.backend.usage()
        stats = self.backend.train(
            {self.name: [TrainGroup("sft", batch)]},
            seeds={self.name: derive_seed(cfg.run.seed, step, self.name, "update")},
        )[self.name]
        after = self.backend.usage()
        check_finite(cfg, step, {self.name: stats})
        metrics = {
            "sft/loss": stats["loss/policy"],
            "sft/tokens": stats["train/tokens"],
            "grad_norm": stats["grad_norm"],
            "optim/lr": stats["optim/lr"],
            "time/train_s": stats["time/fwd_bwd_s"] + stats["time/optim_s"],
        }
        metrics.update(
            self.costs.metrics({self.name: step_cost(before[self.name], after[self.name])})
        )
        return metrics

    def evaluate(self, step: int) -> dict[str, float]:
        """The held-out responses' NLL per token, and every suite's accuracy."""
        out: dict[str, float] = {}
        if self.val_set:
            seqs = {
                self.name: (
                    [q.prompt_ids for q in self.val_set],
                    [q.response_ids for q in self.val_set],
                )
            }
            logp = self.backend.score(seqs)[self.name]
            out["sft/val_loss"] = -sum(map(sum, logp)) / sum(map(len, logp))
        e = self.cfg.eval
        params = SamplingParams(
            e.max_new_tokens or self.cfg.rollout.max_new_tokens, e.temperature, e.top_p, 0
        )
        results = evaluate_once(
            self.backend,
            self.suites,
            pool=self.pool,
            k=e.samples,
            params=params,
            seed=derive_seed(self.cfg.run.seed, step, "eval"),
            verifier=self.eval_verifier,
        )
        out.update(results[self.name])
        return out

    # ------------------------------------------------------------------ the run
    def run(self, run_dir: Path, *, resume: bool = False) -> RunResult:
        cfg = self.cfg
        self.book = RunBook(cfg, run_dir, self.backend, prefix=self.prefix, warn=warn)
        start = begin(self.book, resume=resume, workers=self.backend.describe())
        if start is None:
            return RunResult(run_dir, cfg.run.steps, {}, finished_before=True)
        write_json(run_dir / "sft_data.json", {"store": cfg.sft.store, **self.counts})
        log, self.costs = open_log(cfg, run_dir, self.prefix, start=start)
        self.best_by = VAL_SUITE if self.val_set else ""
        loop = Loop("sft", best_by=self.best_by, ties="latest", at_ends=True)
        last = run_steps(self, self.book, log, cfg, start=start, loop=loop)
        data = {f"sft/data/{k}": float(v) for k, v in self.counts.items()}
        write_summary(
            run_dir,
            {**last, **data},
            best=against_start(self.book.best, run_dir, samples=cfg.eval.samples),
        )
        return RunResult(run_dir=run_dir, steps=cfg.run.steps, final_metrics=last)

    def logged(self, step: int, metrics: Mapping[str, float]) -> dict[str, str]:
        return {"loss": f"{metrics['sft/loss']:.3f}"}

    def flush(self) -> None:
        return None

    def finish(self, log: MetricsLog) -> None:
        """With no held-out prompt, the last weights are the ones to hand on."""
        if not self.best_by:
            self.book.keep_as_best(
                self.cfg.run.steps, why="none: no held-out prompt, the last step"
            )

    def close(self) -> None:
        self.session.close()


def against_start(best: Mapping[str, Any], run_dir: Path, *, samples: int) -> dict[str, Any]:
    """Each best-by-validation entry with the starting model's avg@`samples` on the same suite
    (`start_value`, from step 0 in metrics.jsonl) and whether the best beat it (`beat_start`:
    a checkpoint that only tied the start is no better than the model the run started from)."""
    at_start = next((r for r in read_metrics(run_dir) if r.get("step") == 0), {})
    out = {}
    for name, info in best.items():
        start = None
        if info["value"] is not None:
            start = at_start.get(f"eval/{info['suite']}/avg@{samples}")
        out[name] = dict(info)
        if start is not None:
            out[name].update(start_value=start, beat_start=info["value"] > start)
    return out


def best_entries(summary: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """summary.json's `best/<policy>/<field>` keys, per policy."""
    out: dict[str, dict[str, Any]] = {}
    for key, value in summary.items():
        parts = key.split("/")
        if len(parts) == 3 and parts[0] == "best":
            out.setdefault(parts[1], {})[parts[2]] = value
    return out


def best_line(info: Mapping[str, Any], path: Path) -> str:
    """What checkpoints/best/<policy> holds, in one line: how it compares with the start, and
    plainly when no step beat it (the step-0 model would be handed on as "best")."""
    step, value = info["step"], info["value"]
    if value is None:
        return (
            f"best checkpoint: the last step ({step}), with no held-out prompt to choose by: {path}"
        )
    start = info.get("start_value")
    if start is None:
        return f"best checkpoint (held-out accuracy {value:.3f} at step {step}): {path}"
    if info.get("beat_start"):
        return (
            f"best checkpoint (held-out accuracy {value:.3f} at step {step}, up from {start:.3f} "
            f"at step 0): {path}"
        )
    if step == 0:
        return (
            f"no step beat the starting model: held-out accuracy {start:.3f} at step 0 and lower "
            f"at every later evaluation; {path} holds the starting weights (step 0), not a "
            f"fine-tuned model"
        )
    return (
        f"no step beat the starting model: held-out accuracy {value:.3f} at best, the same as at "
        f"step 0; {path} holds step {step}, the latest checkpoint that tied the start"
    )


def sft(cfg: Config, *, resume: bool = False, overwrite: bool = False) -> RunResult:
    """Supervised fine-tuning on `cfg.sft.store`, writing into cfg.run.out_dir. `overwrite`: a
    run already there is moved aside once every check passed and the model is loaded."""
    return run_then_close(SftRun(cfg), cfg.run.out_dir, resume=resume, overwrite=overwrite)
