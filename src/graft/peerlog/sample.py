"""`graft sample`: a peer log from any model. The model samples `n` responses to every prompt of
a task's split, every response is verified with the task's verifier, and the groups are written
to a trajectory store (the schema a training run writes), with the sampling's provenance in the
store's run metadata: a store `exchange.stored.path` takes as it is.

The prompts are taken in chunks of `chunk`; chunk k is one shard, `step_k`, and its rows carry
step k. Every prompt appears once, so a stored peer's `latest` record is its only one. Each
sample is drawn from its own stream, seeded from the seed, the prompt's id and the sample's index
(`graft.seeds.row_seeds`), so a chunk gives the same rows whenever it is sampled: a sampling
killed and started again with the same settings skips the chunks already on disk and writes the
rest, no row lost or doubled. A sampling is named by a digest of its model (and the model's
weights), task, split and settings (`sampling_id`); the same store may hold others of the same
task, never one of another task or another sampling of the same model name.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import pyarrow as pa

from graft.config import Config, to_dict
from graft.errors import DataError
from graft.store import StoreError, TrajectoryStore, check_store_target
from graft.store.fs import open_filesystem
from graft.types import Problem

SPLITS = ("train", "test", "val")


@dataclass(frozen=True)
class SampleSettings:
    """What is sampled: `n` responses per prompt of `split` (its first `limit`; 0: all; with
    `steps_of`, only the prompts that run's training draws), drawn with these sampling
    parameters and `seed`, `chunk` prompts per shard."""

    split: str = "train"
    n: int = 8
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_new_tokens: int = 256
    seed: int = 0
    limit: int = 0
    chunk: int = 64
    steps_of: str = ""


def split_problems(
    cfg: Config, split: str, limit: int, steps_of: Config | None = None
) -> tuple[Problem, ...]:
    """The task's problems of `split` (its first `limit`; 0: all), or of them only those that the
    training run of `steps_of` draws over its steps (its seed, batch size and steps), in the
    order it first draws them; DataError when there are none."""
    from graft.config import make_plan
    from graft.tasks import build_task, prompt_batch

    task = build_task(cfg.task)
    problems = {"train": task.train_problems, "test": task.test_problems,
                "val": task.val_problems}[split]()  # fmt: skip
    if steps_of is not None:
        drawn = {}
        for step in range(steps_of.run.steps):
            batch = prompt_batch(
                tuple(problems), step=step, batch_size=make_plan(steps_of).prompts_per_step,
                seed=steps_of.run.seed,
            )  # fmt: skip
            drawn.update((p.id, p) for p in batch if p.id not in drawn)
        problems = tuple(drawn.values())
    problems = problems[:limit] if limit else problems
    if not problems:
        raise DataError(f"--split {split}: task {cfg.task.name} has no problems there")
    return tuple(problems)


def sampling_id(policy: str, revision: str, cfg: Config, settings: SampleSettings) -> str:
    """The sampling's run id: `sample-<policy>-<digest>` of everything that decides its rows."""
    what = {"policy": policy, "revision": revision, "task": to_dict(cfg.task),
            "settings": asdict(settings)}  # fmt: skip
    digest = hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()
    return f"sample-{policy}-{digest[:12]}"


def chunks_done(out: str, cfg: Config, run_id: str, policy: str) -> set[int]:
    """The chunks of this sampling already in `out` (a resume skips them). StoreError for a path
    under a file, a store of another task, or another sampling of `policy` there."""
    try:
        check_store_target(out)
    except StoreError as err:
        raise StoreError(str(err).replace("store.path", "--out", 1)) from None
    fs, root = open_filesystem(out)
    if fs.get_file_info(f"{root}/store.json").type != pa.fs.FileType.File:
        return set()  # nothing there yet (or an empty folder): a new store
    store = TrajectoryStore(out, key="--out")
    runs = store.runs()
    task = to_dict(cfg.task)
    for other, meta in runs.items():
        theirs = meta.get("config", {}).get("task")
        if theirs != task:
            raise StoreError(
                f"--out {out}: holds run {other} of another task ({_task_name(theirs)}, "
                f"not {cfg.task.name} as configured here); name another folder"
            )
        if other != run_id and meta.get("sample", {}).get("policy") == policy:
            raise StoreError(
                f"--out {out}: holds another sampling of {policy} ({other}: other model weights "
                "or settings); name another folder, or sample with its settings to resume it"
            )
    return {s.step for s in store.shards(model=policy, run_id=run_id)} if run_id in runs else set()


COST_KEYS = ("flops", "gen_tokens", "prompt_tokens", "generate_cpu_s", "wall_s")
"""What a sampling's run metadata counts of what it cost (summed over its resumed parts)."""


def _earlier_cost(out: str, run_id: str) -> dict[str, float]:
    """What earlier, killed parts of this sampling cost (its run metadata's `cost`)."""
    try:
        meta = TrajectoryStore(out).runs().get(run_id, {})
    except StoreError:
        return {}
    return {k: float(v) for k, v in meta.get("cost", {}).items()}


def _task_name(task: Any) -> str:
    return str(task.get("name")) if isinstance(task, dict) else "none recorded"


def provenance_meta(cfg: Config, run_id: str, sample: dict[str, Any]) -> dict[str, Any]:
    """The store's run metadata of a sampling: a run's (config, versions, commit) and what was
    sampled."""
    from graft.peerlog.recorder import run_metadata

    return {**run_metadata(cfg, run_id), "sample": sample}


def _each_chunk(
    chunks: list[tuple[Problem, ...]],
    done: set[int],
    one_chunk: Callable[[int, tuple[Problem, ...]], tuple[int, int]],
    desc: str,
    progress: bool,
) -> tuple[int, int]:
    """Run `one_chunk` on every chunk not `done`, with a progress bar over the prompts; the
    (correct, total) responses it returned, summed."""
    from tqdm.auto import tqdm

    correct = total = 0
    prompts = sum(len(c) for c in chunks)
    with tqdm(total=prompts, desc=desc, unit="prompt", disable=not progress) as bar:
        for k, chunk in enumerate(chunks):
            if k not in done:
                right, seen = one_chunk(k, chunk)
                correct, total = correct + right, total + seen
            bar.update(len(chunk))
    return correct, total


def sample_to_store(
    cfg: Config,
    spec: Any,
    settings: SampleSettings,
    out: str,
    *,
    pool: Any,
    describe: dict[str, Any],
    progress: bool = True,
) -> dict[str, Any]:
    """Sample `spec`'s model (a `PolicySpec`) over `settings.split` of `cfg`'s task into the
    store at `out`, skipping the chunks a killed sampling already wrote; `describe`: what to
    record of the model (its path and how it was named). Returns a summary: the run id, the
    prompts and rows written now and before, and the share of responses verified correct."""
    from graft.backends.inprocess import InProcessBackend
    from graft.groups import Advantage
    from graft.peerlog.writer import LogWriter, provenance, verified_groups
    from graft.rollout import SamplingParams
    from graft.tasks import build_task, run_verifier
    from graft.training.cost import step_cost

    drawn_by = None
    if settings.steps_of:
        from graft.config import load_config

        drawn_by = load_config(Config, Path(settings.steps_of) / "config.yaml")
    problems = split_problems(cfg, settings.split, settings.limit, drawn_by)
    start = time.perf_counter()
    verifier = run_verifier(cfg.verify, build_task(cfg.task))
    policy = spec.model.name
    backend = InProcessBackend([spec])
    try:
        info = backend.describe()[policy]
        before = backend.usage()[policy]
        run_id = sampling_id(policy, info["model_revision"], cfg, settings)
        done, earlier = chunks_done(out, cfg, run_id, policy), _earlier_cost(out, run_id)
        sample = {"policy": policy, **describe, "revision": info["model_revision"],
                  **asdict(settings)}  # fmt: skip
        drawn = replace(cfg.rollout, temperature=settings.temperature, top_p=settings.top_p,
                        top_k=settings.top_k, max_new_tokens=settings.max_new_tokens)  # fmt: skip
        prov = provenance(run_id, policy, info, verifier, drawn)
        writer = LogWriter(out, run_id=run_id, run_meta=provenance_meta(cfg, run_id, sample),
                           provenance={policy: prov})  # fmt: skip
        params = SamplingParams(
            settings.max_new_tokens, settings.temperature, settings.top_p, settings.top_k
        )
        chunks = [problems[i : i + settings.chunk] for i in range(0, len(problems), settings.chunk)]

        def one_chunk(k: int, chunk: tuple[Problem, ...]) -> tuple[int, int]:
            (rollouts,) = backend.generate(
                chunk, n=settings.n, params=params, seeds={policy: settings.seed}
            ).values()
            groups, verdicts = verified_groups(pool, verifier, rollouts, Advantage.of(cfg.algo))
            writer.write(policy, k, groups)
            writer.flush()  # each chunk on disk before the next: a kill loses at most one
            return sum(v.correct for vs in verdicts for v in vs), sum(len(vs) for vs in verdicts)

        correct, total = _each_chunk(chunks, done, one_chunk, f"sample {policy}", progress)
        now = step_cost(before, backend.usage()[policy])
        now["wall_s"] = time.perf_counter() - start
        cost = {k: earlier.get(k, 0.0) + now.get(k, 0.0) for k in COST_KEYS}
        writer.update_run_meta(cost=cost)
        writer.close()
    finally:
        backend.close()
    written = [len(c) for k, c in enumerate(chunks) if k not in done]
    return {
        "run_id": run_id, "store": out, "policy": policy, "prompts": len(problems), "cost": cost,
        "prompts_sampled_now": sum(written), "prompts_found_done": len(problems) - sum(written),
        "responses_now": total, "correct_share_now": correct / total if total else 0.0,
    }  # fmt: skip
