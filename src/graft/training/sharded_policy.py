"""A policy over K ranks (`models.N.shards: K`): FSDP2 for every forward and for the update.

The policy's worker (a process, or a Ray actor) is rank 0. Ranks 1..K-1 are its own child processes
(`ProcessRank`), or Ray actors that the Ray backend placed and hands it (any object with the
`RankLink` methods); all K join one process group (graft.training.shards). Every rank holds the
FSDP2-sharded model and its 1/K of the AdamW state, built from the model's config on the meta
device (never the whole model) and filled from rank 0's weights one tensor at a time. Rank 0 reads
the model once, into host memory, to fill the shards, then lets it go: no rank keeps a full copy,
and no device ever holds one.

Sampling, old log-probs and the scoring of peer responses run on every rank, each on its share of
the rows, with the forwards kept in step (`Lockstep`); every row draws from its own seeded stream,
so the samples are those of the unsharded policy for any K. Rank 0 gathers the results. A call
that needs every rank (sample, score, train, save, load, close) is sent by rank 0 to each other
rank (`serve_rank` carries it out there); the work itself runs in collectives with a timeout, and
a rank that died ends the call in one line naming it.

Checkpoints keep the run directory's layout: the full model and tokenizer as transformers saves
them (gathered to rank 0 one tensor at a time, which writes them), `policy_state.json`, and the
sharded AdamW state under `optimizer/` (torch.distributed.checkpoint, one file per rank). A run
resumes at any K, or unsharded: the AdamW state is resharded on load (graft.training.optim_state).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import multiprocessing
import os
import signal
import socket
import sys
from collections.abc import Sequence
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Protocol

import torch
import torch.distributed as dist
from safetensors.torch import load_file

from graft.errors import PolicyWorkerError
from graft.models.precision import DTYPES, Precision
from graft.procutil import die_with_parent, started_with
from graft.rollout import Sample, SamplingParams
from graft.training.build import PolicySpec, resolve_device, set_warmup_lr
from graft.training.cost import Meter, parameter_count
from graft.training.optim_state import load_into_sharded, save_sharded, saved_shards
from graft.training.policy import Policy, sample_rows, score_rows
from graft.training.shards import (
    Lockstep,
    ShardRank,
    build_sharded,
    even_slices,
    full_state_on_rank0,
    gather_on_rank0,
    gathered_layers,
    init_shard_group,
    load_full_weights,
    rank_environment,
    share_from_rank0,
    with_tied_keys,
    without_tied_keys,
)
from graft.training.update import train_on_batch
from graft.types import TrainGroup


def free_port() -> int:
    """A TCP port free on this machine now (for a shard group's rendezvous)."""
    with socket.socket() as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


class ShardWorker:
    """What every rank of a sharded policy holds: its shard of the model and of AdamW, built
    from the model's config alone (never the whole model) and filled from rank 0's weights
    (`full`: rank 0's full state dict, `{}` on the other ranks)."""

    def __init__(
        self,
        spec: PolicySpec,
        shard: ShardRank,
        config: Any,
        full: dict[str, torch.Tensor],
        device: str | torch.device,
    ) -> None:
        self.spec, self.shard = spec, shard
        m = spec.model
        self.model = build_sharded(
            config,
            shard,
            device=device,
            compute_dtype=DTYPES[m.dtype],
            recompute=m.activation_checkpointing,
        )
        load_full_weights(self.model, full)
        self.ref_model: torch.nn.Module | None = None
        if spec.algo.kl_coef > 0:  # the KL term's frozen reference: the starting weights, sharded
            ref = build_sharded(config, shard, device=device, compute_dtype=DTYPES[m.dtype])
            load_full_weights(ref, full)
            self.ref_model = ref.requires_grad_(False)
        o = m.optim
        self.optimizer = torch.optim.AdamW(
            [p for p in self.model.parameters() if p.requires_grad],
            lr=o.lr,
            betas=o.betas,
            eps=o.eps,
            weight_decay=o.weight_decay,
        )
        # FSDP's mixed-precision policy casts (no autocast on top); float16 scales the loss with
        # a scaler whose overflow checks agree across ranks.
        self.precision = Precision(m.dtype, m.param_dtype, device=device, sharded=True)
        self.num_updates = 0
        self.pad_id = int(config.pad_token_id)

    def _set_lr(self) -> float:
        self.num_updates += 1
        return set_warmup_lr(self.optimizer, self.spec.model.optim, self.num_updates)

    def train(self, groups: Sequence[TrainGroup], seed: int) -> dict[str, float]:
        return train_on_batch(
            self.model,
            self.optimizer,
            groups,
            self.spec.update_settings(),
            pad_id=self.pad_id,
            ref_model=self.ref_model,
            set_lr=self._set_lr,
            seed=seed,
            precision=self.precision,
            shard=self.shard,
        )

    def sample(
        self,
        rows: Sequence[Sequence[int]],
        row_seeds: Sequence[int],
        params: SamplingParams,
        stop_ids: Sequence[int],
    ) -> list[Sample]:
        """This rank's rows sampled; on rank 0, every rank's samples in rank order."""
        model = Lockstep(self.model, self.shard, pad_id=self.pad_id)
        got = sample_rows(
            model, rows, params, row_seeds, self.spec, stop_ids=stop_ids, pad_id=self.pad_id
        )
        model.drain()
        return gather_on_rank0(got, self.shard)

    def score(
        self, prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]]
    ) -> list[tuple[float, ...]]:
        """This rank's rows scored; on rank 0, every rank's in rank order."""
        model = Lockstep(self.model, self.shard, pad_id=self.pad_id)
        got = (
            score_rows(model, prompts, responses, self.spec, pad_id=self.pad_id) if prompts else []
        )
        model.drain()
        return gather_on_rank0(got, self.shard)

    @property
    def feeds_engine(self) -> bool:
        """Rank 0 samples with vLLM, fed from the shards after every change of the weights."""
        return self.spec.rollout.engine == "vllm"

    def sync_engine(self, engine: Any) -> None:
        """Rank 0's vLLM engine loaded from the shards, gathered a layer at a time in the
        compute dtype (`engine` None on the other ranks, which take part in the gathers)."""
        parts = gathered_layers(self.model, DTYPES[self.spec.model.dtype])
        if engine is None:
            for _ in parts:
                pass
        else:
            engine.sync_weights_in_parts(parts)

    def save(self, directory: Path) -> dict[str, torch.Tensor]:
        """Each rank's part of the AdamW state written; the full weights returned on rank 0
        (`{}` on the others), gathered one tensor at a time."""
        save_sharded(directory, self.model, self.optimizer)
        return full_state_on_rank0(self.model)

    def load(self, directory: Path, full: dict[str, torch.Tensor], state: dict[str, Any]) -> None:
        """The weights from rank 0's full state dict (broadcast), this rank's part of the AdamW
        state from a checkpoint written at any K (`graft.training.optim_state`), and the
        update count and loss scaler of its `policy_state.json` (`state`)."""
        load_full_weights(self.model, full)
        load_into_sharded(directory, self.model, self.optimizer, rank=self.shard.rank)
        self.num_updates = int(state["num_updates"])
        self.precision.load_state_dict(state.get("precision", {}))


def idle_ranks_warning(
    name: str, spec: PolicySpec, groups: Sequence[TrainGroup], frac: float
) -> str:
    """The one line that says an update left some of a policy's ranks without a micro-batch, and
    what keeps them all busy."""
    world, size = spec.model.shards, spec.algo.micro_batch_size
    rows = -(-sum(len(g.sequences) for g in groups) // max(spec.algo.minibatches, 1))
    busy = max(rows // world, 1)
    if size > busy:
        why = (
            f"a minibatch of up to {rows} sequences in micro-batches of "
            f"algo.micro_batch_size={size} makes fewer micro-batches than ranks; "
            f"algo.micro_batch_size <= {busy} gives every rank one"
        )
    else:  # only the sequences with a nonzero advantage are run
        why = (
            f"the sequences with a nonzero advantage made fewer micro-batches of "
            f"algo.micro_batch_size={size} than ranks"
        )
    return (
        f"policy {name!r}: an update left some of its {world} ranks without a micro-batch "
        f"(shard/idle_rank_frac {frac:.2f}): {why} (warned once; shard/idle_rank_frac counts "
        f"every update)"
    )


def serve_rank(worker: ShardWorker, call: tuple) -> bool:
    """Carry out one of rank 0's calls on a rank other than 0; False: it was the last."""
    kind = call[0]
    if kind == "sample":
        worker.sample(*call[1:])
    elif kind == "score":
        worker.score(*call[1:])
    elif kind == "train":
        worker.train(call[1], call[2])
        if worker.feeds_engine:
            worker.sync_engine(None)
    elif kind == "save":
        worker.save(Path(call[1]))
    elif kind == "load":
        worker.load(Path(call[1]), {}, call[2])
        if worker.feeds_engine:
            worker.sync_engine(None)
    return kind != "close"


def rank_spec(spec: PolicySpec, rank: int, *, own_device: bool = False) -> PolicySpec:
    """The spec rank `rank` builds from: its share of the policy's threads and, on GPUs, its own
    device (`cuda:i` is rank 0's, rank r takes `cuda:i+r`; with `own_device`, as in a Ray actor
    that sees only its GPU, every rank keeps the one it is given)."""
    m = spec.model
    device = resolve_device(m.device)
    if device.startswith("cuda") and not own_device:
        device = f"cuda:{(torch.device(device).index or 0) + rank}"
    threads = max(1, spec.threads // m.shards) if spec.threads > 0 else 0
    return dataclasses.replace(spec, threads=threads, model=dataclasses.replace(m, device=device))


def reading_spec(spec: PolicySpec) -> PolicySpec:
    """The spec rank 0 reads the whole model with, once, to fill every rank's shards: into host
    memory, never onto its device (which holds its shard alone), and without the copies only a
    training model needs (the KL term's reference: every rank builds its shard of one; activation
    checkpointing)."""
    m = spec.model
    return dataclasses.replace(
        spec,
        model=dataclasses.replace(m, device="cpu", activation_checkpointing=False),
        algo=dataclasses.replace(spec.algo, kl_coef=0.0),
    )


def join_rank(
    rank: int, world: int, spec: PolicySpec, init_method: str, *, own_device: bool = False
) -> ShardWorker:
    """Rank `rank` of 1..K-1: join the policy's process group, build its shards of the model
    from the config rank 0 sends, and take their weights from rank 0."""
    spec = rank_spec(spec, rank, own_device=own_device)
    if spec.threads > 0:
        torch.set_num_threads(spec.threads)
    device = resolve_device(spec.model.device)
    shard = init_shard_group(rank, world, init_method=init_method, device=device)
    try:
        return ShardWorker(spec, shard, share_from_rank0(None), {}, device)
    except BaseException:
        dist.destroy_process_group()
        raise


def follow(rank: int, world: int, spec: PolicySpec, init_method: str, conn: Connection) -> None:
    """A rank in its own process: serve rank 0's calls, sent over a pipe (which waits without a
    timeout; the work itself runs in collectives, which have one)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the driver's to handle
    die_with_parent()
    worker = join_rank(rank, world, spec, init_method)
    try:
        while True:
            try:
                call = conn.recv()
            except (EOFError, OSError):  # rank 0 is gone
                return
            if not serve_rank(worker, call):
                return
    finally:
        dist.destroy_process_group()


class RankLink(Protocol):
    """How rank 0 reaches one other rank of its policy."""

    @property
    def pid(self) -> int: ...

    def send(self, call: tuple) -> None:
        """Hand the rank a call for `serve_rank` (OSError: it is gone)."""

    def gone(self) -> str | None:
        """Why the rank is gone ("exit code -9"), or None while it lives."""

    def close(self) -> None:
        """Let the rank go (after its "close" call)."""


class ProcessRank:
    """A rank in a child process of rank 0's, fed over a pipe."""

    def __init__(self, rank: int, world: int, spec: PolicySpec, init_method: str) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(
            target=follow,
            args=(rank, world, spec, init_method, child),
            name=f"graft-policy-{spec.model.name}-rank{rank}",
            daemon=True,
        )
        with started_with(rank_environment(resolve_device(rank_spec(spec, rank).model.device))):
            self.proc.start()
        child.close()

    @property
    def pid(self) -> int:
        return int(self.proc.pid or 0)

    def send(self, call: tuple) -> None:
        self.conn.send(call)

    def gone(self) -> str | None:
        self.proc.join(timeout=1)
        return None if self.proc.is_alive() else f"exit code {self.proc.exitcode}"

    def close(self) -> None:
        self.conn.close()
        self.proc.join(timeout=30)
        if self.proc.is_alive():
            self.proc.kill()


class ShardedPolicy(Policy):
    """Rank 0 of a policy sharded over `spec.model.shards` ranks; called like any `Policy`.

    Without `links`, it starts ranks 1..K-1 as its child processes on this machine; with them (one
    per rank, in rank order), they are already placed and join `init_method`."""

    def __init__(
        self,
        spec: PolicySpec,
        *,
        links: Sequence[RankLink] | None = None,
        init_method: str = "",
    ) -> None:
        world = spec.model.shards
        mine = rank_spec(spec, 0, own_device=links is not None)
        super().__init__(reading_spec(mine))
        self.spec, self.device = mine, resolve_device(mine.model.device)
        self.meter = Meter(self.device, parameter_count(self.model))
        if links is None:
            init_method = f"tcp://127.0.0.1:{free_port()}"
            links = [ProcessRank(rank, world, spec, init_method) for rank in range(1, world)]
        self._ranks = list(links)
        shard = init_shard_group(0, world, init_method=init_method, device=self.device)
        config = share_from_rank0(self.model.config)
        self.worker = ShardWorker(self.spec, shard, config, self.model.state_dict(), self.device)
        # The full model has filled the shards: let it go. Every forward runs on the shards, whose
        # mixed-precision policy casts (no autocast on top).
        self.model = self.optimizer = self.ref_model = None  # type: ignore[assignment]
        self.precision = Precision()
        self._said_idle = False  # ranks left without a micro-batch: warned about once

    def _send(self, *call: Any) -> None:
        """A call every rank takes part in: sent to ranks 1..K-1, then run here."""
        for rank, link in enumerate(self._ranks, start=1):
            try:
                link.send(call)
            except OSError:
                raise self._rank_died(rank, link.gone() or "its pipe is closed") from None

    def _send_parts(self, kind: str, parts: Sequence[tuple], *rest: Any) -> None:
        """A call every rank takes part in, rank r with `parts[r]` (sent to ranks 1..K-1)."""
        for rank, link in enumerate(self._ranks, start=1):
            try:
                link.send((kind, *parts[rank], *rest))
            except OSError:
                raise self._rank_died(rank, link.gone() or "its pipe is closed") from None

    def _rank_died(self, rank: int, why: str) -> PolicyWorkerError:
        return PolicyWorkerError(
            f"policy {self.name!r}: rank {rank} of {self.spec.model.shards} died ({why})"
        )

    def _collective(self, fn, *args):
        """Run rank 0's side of a collective; a dead rank ends it with a line naming it."""
        try:
            return fn(*args)
        except RuntimeError:
            for rank, link in enumerate(self._ranks, start=1):
                why = link.gone()
                if why is not None:
                    raise self._rank_died(rank, why) from None
            raise

    def describe(self) -> dict[str, str]:
        """Provenance, with the ranks: their count and process ids (rank 0 first)."""
        pids = [str(os.getpid()), *(str(link.pid) for link in self._ranks)]
        return {**super().describe(), "shards": str(len(pids)), "rank_pids": ",".join(pids)}

    def _sample_rows(
        self, rows: list[tuple[int, ...]], params: SamplingParams, row_seeds: list[int]
    ) -> list[Sample]:
        """Every rank samples its share of the rows (with vLLM, rank 0's engine samples all)."""
        world = len(self._ranks) + 1
        parts = [(rows[part], row_seeds[part]) for part in even_slices(len(rows), world)]
        self._send_parts("sample", parts, params, self.stop_ids)
        return self._collective(self.worker.sample, *parts[0], params, self.stop_ids)

    def _score(
        self, prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]]
    ) -> list[tuple[float, ...]]:
        world = len(self._ranks) + 1
        parts = [(prompts[part], responses[part]) for part in even_slices(len(prompts), world)]
        self._send_parts("score", parts)
        return self._collective(self.worker.score, *parts[0])

    def _update(self, groups: Sequence[TrainGroup], *, seed: int) -> dict[str, float]:
        self._send("train", list(groups), seed)
        stats = self._collective(self.worker.train, groups, seed)
        if self.engine is not None:
            self._collective(self.worker.sync_engine, self.engine)
        self.num_updates = self.worker.num_updates
        if stats.get("shard/idle_rank_frac", 0.0) > 0 and not self._said_idle:
            self._said_idle = True
            line = idle_ranks_warning(self.name, self.spec, groups, stats["shard/idle_rank_frac"])
            print(f"warning: {line}", file=sys.stderr, flush=True)  # from the worker, at once
        return stats

    def save(self, directory: str | Path) -> None:
        directory = Path(directory)
        self._send("save", str(directory))
        full = self._collective(self.worker.save, directory)
        full = without_tied_keys(self.worker.model, full)
        self.worker.model.save_pretrained(directory, state_dict=full)
        self.tokenizer.save_pretrained(directory)
        state = {
            "num_updates": self.num_updates,
            "shards": self.worker.shard.world,
            "precision": self.worker.precision.state_dict(),
        }
        (directory / "policy_state.json").write_text(json.dumps(state))

    def load(self, directory: str | Path) -> None:
        directory = Path(directory)
        state = json.loads((directory / "policy_state.json").read_text())
        saved_shards(directory)  # a missing optimizer state ends here, before any rank loads
        full = with_tied_keys(self.worker.model, load_file(str(directory / "model.safetensors")))
        self._send("load", str(directory), state)
        self._collective(self.worker.load, directory, full, state)
        if self.engine is not None:
            self._collective(self.worker.sync_engine, self.engine)
        self.num_updates = self.worker.num_updates

    def close(self) -> None:
        if getattr(self, "worker", None) is not None:
            with contextlib.suppress(RuntimeError):
                self._send("close")
            dist.destroy_process_group()
            self.worker = None
        for link in getattr(self, "_ranks", []):
            link.close()
        super().close()
