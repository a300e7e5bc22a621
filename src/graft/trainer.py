"""The training loop. One step reads as the method:

    rollout -> verify -> group (advantages) -> exchange -> settle the groups without contrast
    (keep, drop, or sample further prompts) -> update -> store -> log
    (then, when due: evaluate, checkpoint)

Every policy gets the same prompt batch each step. Randomness is derived from (run seed, step,
policy), never carried in hidden state, so `graft train --resume` continues exactly.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from graft.backends import Backend, check_ray_start, make_backend, policy_specs
from graft.config import Config, ConfigError, Plan, make_plan
from graft.errors import DataError
from graft.eval.evaluate import evaluate_once
from graft.eval.suites import Suite, check_suite_golds, load_suites
from graft.exchange import AdmissionMonitor, ExchangeOutcome, exchange, make_source
from graft.groups import Advantage, group_metrics, self_train_group
from graft.peerlog.recorder import Recorder
from graft.peerlog.writer import verified_groups
from graft.preflight import check_store
from graft.rollout import SamplingParams
from graft.rundir import MetricsLog, policy_prefix, read_metrics, run_then_close, write_summary
from graft.rundir.book import RunBook
from graft.rundir.checkpoints import refuse_unresumable
from graft.rundir.loop import Loop, RunResult, begin, check_finite, open_log, run_steps
from graft.rundir.phases import PhaseClock
from graft.rundir.progress import reward_postfix, say, warn
from graft.rundir.signal import SignalLog, run_summary
from graft.rundir.trackers import check_trackers
from graft.seeds import derive_seed
from graft.session import RunSession
from graft.tasks import (
    Task,
    build_task,
    eval_verifier,
    extra_prompts,
    prompt_batch,
    run_verifier,
    split_problems,
)
from graft.training.contrast import Budget, settle
from graft.training.cost import CostLog, StepCost
from graft.types import Group, Rollout, TrainGroup
from graft.verify.golds import check_golds, require_golds, usable_problems
from graft.verify.pool_ray import open_pool
from graft.verify.registry import VerifierKind, resolve_verifier


@dataclass(frozen=True)
class Settled:
    """A step's batches once groups without reward contrast are settled: each policy's batch,
    the extra rounds' groups with their round (for the store), and each policy's counts."""

    batches: dict[str, list[TrainGroup]]
    extra: dict[str, list[tuple[int, Group]]]
    counts: dict[str, dict[str, float]]


class Trainer:
    def __init__(
        self,
        cfg: Config,
        *,
        backend: Backend | None = None,
        split: str = "train",
        limit: int = 0,
    ) -> None:
        """`split`, `limit`: the prompts the steps draw, the task's training split by default
        (`graft probe` draws from a held-out one, or the first `limit` problems only)."""
        self.cfg = cfg
        self.run_dir = Path(cfg.run.out_dir)
        if cfg.store.enabled:  # before any model loads or any file is written
            check_store(cfg.store.path or str(self.run_dir / "trajectories"))
        check_trackers(cfg.run.report_to)
        if cfg.rollout.engine == "vllm" and cfg.run.backend != "ray":  # before any model builds
            from graft.rollout.vllm_engine import check_vllm_here

            check_vllm_here()  # vLLM and its device (on Ray, each engine checks where it starts)
        self.plan: Plan = make_plan(cfg)
        self.task: Task = build_task(cfg.task)
        self.train_problems = split_problems(self.task, split)
        self.eval_suites: list[Suite] = []
        self.val_suite: str = ""
        if cfg.eval.every > 0:
            load = lambda names: load_suites(names, task=cfg.task, limit=cfg.eval.num_problems)  # noqa: E731
            self.eval_suites = load(cfg.eval.suites)
            if cfg.eval.validation:
                (val,) = load([cfg.eval.validation])
                self.val_suite = val.name
                if val.name not in {s.name for s in self.eval_suites}:
                    self.eval_suites.append(val)
        self.verifier = run_verifier(cfg.verify, self.task)
        if resolve_verifier(self.verifier).kind is VerifierKind.SANDBOXED:  # say what it enforces
            from graft.sandbox.doctor import tier_line

            print(tier_line(), file=sys.stderr)
        self.eval_verifier = eval_verifier(cfg.verify, self.verifier)
        check_ray_start(cfg)  # before the verifier pool starts a local Ray cluster
        self.session = RunSession()
        with self.session.opening():
            self._open(backend, limit)

        several = len(self.names) > 1
        self.prefix = {name: policy_prefix(name, several=several) for name in self.names}
        self.book = RunBook(cfg, self.run_dir, self.backend, prefix=self.prefix, warn=warn)
        r = cfg.rollout
        self.sampling = SamplingParams(r.max_new_tokens, r.temperature, r.top_p, r.top_k)
        self.spend = StepCost(self.names, self.backend.usage, lambda: self.pool.cpu_s)
        self.costs = CostLog(self.prefix)

    def _open(self, backend: Backend | None, limit: int) -> None:
        """The verifier pool, the gold checks, the policies' backend and the exchange's source,
        each opened through the session."""
        cfg, v = self.cfg, self.cfg.verify  # on Ray, verification runs on the cluster's CPUs too
        self.pool = self.session.open(
            open_pool(v.workers, v.timeout_s, ray=cfg.run.backend == "ray")
        )
        self._check_golds()  # before any model loads
        if limit:
            self.train_problems = self.train_problems[:limit]
        self.backend = self.session.open(
            backend
            or make_backend(policy_specs(cfg), cfg.run.backend, ray_strategy=cfg.run.ray_strategy)
        )
        self.monitor = AdmissionMonitor(cfg.exchange.warn_after)
        self.recorder: Recorder | None = None
        self.names = self.backend.names
        try:
            self.source = make_source(
                cfg.exchange, num_policies=len(self.names), pool=self.pool, verifier=self.verifier
            )
        except (ValueError, ImportError, OSError) as err:  # e.g. a filesystem nobody knows
            if isinstance(err, ConfigError | DataError | FileNotFoundError):
                raise
            raise ConfigError(
                f"exchange.stored.path {cfg.exchange.stored.path}: cannot open it: {err}"
            ) from None

    def _check_golds(self) -> None:
        """Refuse data whose golds the verifier mostly cannot parse; report and leave out (train)
        or keep as `error` (eval) the few it cannot (graft.verify.golds)."""
        limit = self.cfg.verify.max_unparseable_golds
        t = self.cfg.task
        where = f"task.math.train ({t.math.train})" if t.name == "math" else f"task {t.name}"
        check = check_golds(self.pool, self.verifier, self.train_problems, where=where)
        require_golds(check, max_fraction=limit)
        if check is not None and check.bad:
            warn(f"{check.summary()}; training leaves those problems out")
            self.train_problems = usable_problems(check, self.train_problems)
        self.eval_suites = check_suite_golds(
            self.eval_suites, self.pool, max_fraction=limit, verifier=self.eval_verifier
        )

    # ------------------------------------------------------------------ one step
    def step(self, step: int) -> dict[str, float]:
        """rollout -> verify -> group -> exchange -> settle -> update -> store -> log, for every
        policy at once; the phases' `time/<phase>_s` add up to `time/step_s`."""
        clock = PhaseClock()
        self.spend.start()
        groups = self.rollout(step)
        clock.lap("generate", at=max(a for a, _ in self.spend.spans))
        clock.lap("verify")
        outcome = clock.timed("exchange", self.exchange, step, groups)
        settled = clock.timed("settle", self.settle, step, outcome.batches)
        stats = clock.timed("train", self.update, step, settled.batches)
        cost = self.spend.since_start()
        clock.timed("store", self.store, step, groups, outcome.replaced, settled)
        return self._step_metrics(groups, outcome, settled, stats, cost, clock.metrics())

    def update(
        self, step: int, batches: Mapping[str, Sequence[TrainGroup]]
    ) -> dict[str, dict[str, float]]:
        """Each policy's update on its settled batch; a non-finite one stops the run here
        (`algo.nonfinite`)."""
        stats = self.backend.train(batches, seeds=self._seeds(step, "update"))
        check_finite(self.cfg, step, stats)
        return stats

    def store(
        self,
        step: int,
        groups: Mapping[str, Sequence[Group]],
        replaced: Mapping[str, Sequence[bool]],
        settled: Settled,
    ) -> None:
        """The step's rollouts into the run's store (`store.enabled`), the extra rounds' after
        the step's own."""
        if self.recorder is None:
            return
        with self.book.writing_store(self.recorder.uri):
            self.recorder.record(step, groups, replaced, settled.extra)

    def settle(self, step: int, batches: Mapping[str, Sequence[TrainGroup]]) -> Settled:
        """Each policy's groups without reward contrast kept, dropped, or replaced by groups on
        further prompts (`models.N.zero_contrast`, graft.training.contrast)."""
        plan, extra = self.plan, {name: [] for name in self.names}
        budgets = {
            m.name: Budget(
                mode=m.zero_contrast.mode,
                want=plan.prompts_per_step,
                group_size=plan.group_size,
                max_rounds=m.zero_contrast.max_rounds,
                max_responses=m.zero_contrast.max_responses,
            )
            for m in self.cfg.models
        }

        def sample(rnd: int, wanted: Mapping[str, int]) -> dict[str, list[TrainGroup]]:
            got: dict[str, list[TrainGroup]] = {}
            for count in sorted(set(wanted.values())):  # policies asking as many: one call
                names = [name for name, k in wanted.items() if k == count]
                problems = extra_prompts(
                    self.train_problems,
                    step=step,
                    round=rnd,
                    count=count,
                    batch_size=plan.prompts_per_step,
                    seed=self.cfg.run.seed,
                )
                seeds = {n: derive_seed(self.cfg.run.seed, step, n, "resample", rnd) for n in names}
                rounds = self.backend.generate(
                    problems,
                    n=plan.group_size,
                    params=self.sampling,
                    seeds=seeds,
                    then=self._verify_and_group,
                    names=names,
                )
                for name, gs in rounds.items():
                    extra[name].extend((rnd, g) for g in gs)
                    got[name] = [self_train_group(g) for g in gs]
            return got

        settled, counts = settle(batches, budgets, sample)
        return Settled(settled, extra, counts)

    def rollout(
        self, step: int, *, cached: Mapping[str, Sequence[Rollout]] | None = None
    ) -> dict[str, tuple[Group, ...]]:
        """rollout -> verify -> group: each policy's groups on the step's prompts, with the step's
        seeds (what `graft probe` also runs, without the update; it passes the rollouts it
        already has as `cached`, and only the other policies sample)."""
        problems = prompt_batch(
            self.train_problems,
            step=step,
            batch_size=self.plan.prompts_per_step,
            seed=self.cfg.run.seed,
        )
        self.spend.new_rollout()
        cached = cached or {}
        fresh = [name for name in self.names if name not in cached]
        groups = self.backend.generate(  # each policy's groups, verified as they arrive
            problems,
            n=self.plan.group_size,
            params=self.sampling,
            seeds=self._seeds(step, "rollout"),
            then=self._verify_and_group,
            names=fresh,
        )
        groups.update({name: self._verify_and_group(name, list(r)) for name, r in cached.items()})
        return {name: groups[name] for name in self.names}

    def _verify_and_group(self, name: str, rollouts: list[Rollout]) -> tuple[Group, ...]:
        """One policy's rollouts, verified and grouped with their advantages; runs in the driver
        as soon as they arrive, while the other policies still sample."""
        start, algo, cpu = time.perf_counter(), self.cfg.algo, self.pool.cpu_s
        groups, _ = verified_groups(self.pool, self.verifier, rollouts, Advantage.of(algo))
        self.spend.verified(name, start, cpu)
        return groups

    def exchange(self, step: int, groups: Mapping[str, Sequence[Group]]) -> ExchangeOutcome:
        """GRAFT: online between co-training policies, or from a stored peer; else plain GRPO."""
        algo = self.cfg.algo
        outcome = exchange(
            groups,
            self.source,
            self.backend,
            self.cfg.exchange,
            seed=derive_seed(self.cfg.run.seed, step, "exchange"),
            step=step,
            adv=Advantage.of(algo),
        )
        for message in self.monitor.update(outcome.directions):
            warn(message)
        return outcome

    def _seeds(self, step: int, purpose: str) -> dict[str, int]:
        return {name: derive_seed(self.cfg.run.seed, step, name, purpose) for name in self.names}

    def _step_metrics(
        self,
        groups: Mapping[str, Sequence[Group]],
        outcome: ExchangeOutcome,
        settled: Settled,
        stats: Mapping[str, Mapping[str, float]],
        cost: Mapping[str, Mapping[str, float]],
        times: dict[str, float],
    ) -> dict[str, float]:
        """The step's line of metrics: times, each policy's groups, update, contrast counts and
        cost, and the exchange's."""
        out: dict[str, float] = dict(times)
        gen_tokens = 0
        for name in self.names:
            gen_tokens += sum(c.num_tokens for g in groups[name] for c in g.rollout.completions_G)
            metrics = {**group_metrics(groups[name], self.verifier), **stats.get(name, {})}
            out.update({self.prefix[name] + k: v for k, v in metrics.items()})
        out["tokens_per_s"] = gen_tokens / max(times["time/step_s"], 1e-9)
        out.update(outcome.metrics)
        for name, counts in settled.counts.items():
            out.update({self.prefix[name] + k: v for k, v in counts.items()})
        out.update(self.costs.metrics(cost))
        out["time/verify_busy_s"] = self.spend.busy_s
        return out

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, step: int) -> dict[str, float]:
        e = self.cfg.eval
        if not self.eval_suites:
            return {}
        results = evaluate_once(
            self.backend,
            self.eval_suites,
            pool=self.pool,
            k=e.samples,
            params=SamplingParams(self.plan.eval_max_new_tokens, e.temperature, e.top_p, 0),
            seed=derive_seed(self.cfg.run.seed, step, "eval"),
            verifier=self.eval_verifier,
        )
        out: dict[str, float] = {}
        for name, metrics in results.items():
            out.update({self.prefix[name] + k: v for k, v in metrics.items()})
        return out

    # ------------------------------------------------------------------ the run
    def run(self, run_dir: Path, *, resume: bool = False) -> RunResult:
        cfg, self.run_dir = self.cfg, run_dir
        self.book = RunBook(cfg, run_dir, self.backend, prefix=self.prefix, warn=warn)
        workers = self.backend.describe()
        start = begin(self.book, resume=resume, workers=workers)
        if start is None:
            return RunResult(run_dir, cfg.run.steps, {}, finished_before=True)  # nothing written
        if cfg.store.enabled:
            self.recorder = self.session.open(
                Recorder(cfg, run_dir, verifier=self.verifier, policies=workers)
            )
            self.recorder.rollback(start)
        log, self.costs = open_log(cfg, run_dir, self.prefix, start=start)
        self.signal = SignalLog(
            self.prefix,
            groups=self.plan.prompts_per_step,
            every=cfg.run.log_every,
            warn_after=cfg.run.no_signal_after,
        )
        loop = Loop("train", best_by=self.val_suite)
        last = run_steps(self, self.book, log, cfg, start=start, loop=loop)
        shares = run_summary(read_metrics(run_dir), self.prefix, groups=self.plan.prompts_per_step)
        write_summary(run_dir, {**last, **shares}, best=self.book.best)
        return RunResult(run_dir=run_dir, steps=cfg.run.steps, final_metrics=last)

    def logged(self, step: int, metrics: Mapping[str, float]) -> dict[str, str]:
        """Each policy's learning-signal line when due (`run.log_every`), and the no-signal
        warning; the progress bar's rewards."""
        lines, warnings = self.signal.update(step, metrics)
        for line in lines:
            say(line)
        for message in warnings:
            warn(message)
        return reward_postfix(metrics, self.prefix)

    def finish(self, log: MetricsLog) -> None:
        """The run's curves, as `graft plot` draws them, for the trackers (`run.report_to`)."""
        if self.cfg.run.report_to:
            from graft.eval.report import plot_runs

            plot_runs([self.run_dir], self.run_dir / "curves.png")
            log.artifact(self.run_dir / "curves.png", self.cfg.run.steps)

    def flush(self) -> None:
        if self.recorder is not None:
            with self.book.writing_store(self.recorder.uri):
                self.recorder.flush()
                self.recorder.note_cost(self.costs.cum)

    def close(self) -> None:
        self.session.close()


def train(cfg: Config, *, resume: bool = False, overwrite: bool = False) -> RunResult:
    """Train according to `cfg`, writing into cfg.run.out_dir. `overwrite`: a run already there
    is moved aside (RUN_DIR.old-N), once every check passed and the models are loaded."""
    if resume:  # a run with no checkpoint to resume from ends before any model loads or rank starts
        refuse_unresumable(Path(cfg.run.out_dir), [m.name for m in cfg.models])
    return run_then_close(Trainer(cfg), cfg.run.out_dir, resume=resume, overwrite=overwrite)
