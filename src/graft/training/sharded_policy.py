"""A policy over K ranks (`models.N.shards: K`): FSDP2 for the update, a full copy for sampling.

The policy's worker process is rank 0; it starts ranks 1..K-1 as its own child processes and
joins them in one process group (graft.training.shards). Every rank holds the FSDP2-sharded
model and its 1/K of the AdamW state. Rank 0 also keeps the full model, which samples, scores
and imports peer responses exactly as an unsharded policy does, and which is refreshed from the
sharded weights after every update. A call that needs every rank (train, save, load, close) is
sent by rank 0 over a pipe to each other rank, waiting in `follow`; the work itself runs in
collectives with a timeout, and a rank that died ends the call in one line naming it.

Checkpoints keep the run directory's layout: the full model and tokenizer as transformers saves
them (rank 0 writes them), `policy_state.json`, and the sharded AdamW state under `optimizer/`
(torch.distributed.checkpoint, one file per rank). A resume needs the same K.
"""

from __future__ import annotations

import contextlib
import copy
import json
import multiprocessing
import os
import signal
import socket
from collections.abc import Sequence
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from graft.errors import PolicyWorkerError
from graft.procutil import die_with_parent
from graft.training.build import PolicySpec, build_parts, set_warmup_lr
from graft.training.policy import Policy
from graft.training.precision import DTYPES, Precision
from graft.training.shards import (
    ShardRank,
    full_state_dict,
    init_shard_group,
    shard_model,
)
from graft.training.update import train_on_batch
from graft.types import TrainGroup

OPTIMIZER_DIR = "optimizer"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ShardWorker:
    """What every rank of a sharded policy holds: its shard of the model and of AdamW."""

    def __init__(self, spec: PolicySpec, model: torch.nn.Module, shard: ShardRank) -> None:
        self.spec, self.shard = spec, shard
        m = spec.model
        self.model = shard_model(copy.deepcopy(model), compute_dtype=DTYPES[m.dtype])
        o = m.optim
        self.optimizer = torch.optim.AdamW(
            [p for p in self.model.parameters() if p.requires_grad],
            lr=o.lr,
            betas=o.betas,
            eps=o.eps,
            weight_decay=o.weight_decay,
        )
        self.precision = Precision()  # FSDP's mixed-precision policy casts; no autocast on top
        self.num_updates = 0
        self.pad_id = int(model.config.pad_token_id)

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
            set_lr=self._set_lr,
            seed=seed,
            precision=self.precision,
            shard=self.shard,
        )

    def save_optimizer(self, directory: Path) -> None:
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

        state = get_optimizer_state_dict(self.model, self.optimizer)
        dcp.save({"optimizer": state}, checkpoint_id=str(directory / OPTIMIZER_DIR))

    def load(self, directory: Path, full: dict[str, torch.Tensor]) -> None:
        """The weights from rank 0's full state dict (broadcast), the AdamW shards from disk."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_optimizer_state_dict,
            set_model_state_dict,
            set_optimizer_state_dict,
        )

        options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
        set_model_state_dict(self.model, full, options=options)
        state = {"optimizer": get_optimizer_state_dict(self.model, self.optimizer)}
        dcp.load(state, checkpoint_id=str(directory / OPTIMIZER_DIR))
        set_optimizer_state_dict(self.model, self.optimizer, state["optimizer"])


def _serve_rank(worker: ShardWorker, call: tuple) -> bool:
    """One broadcast call on a rank other than 0; False ends its loop."""
    kind = call[0]
    if kind == "train":
        worker.train(call[1], call[2])
        full_state_dict(worker.model)  # rank 0 refreshes its full copy from it
    elif kind == "save":
        worker.save_optimizer(Path(call[1]))
    elif kind == "load":
        worker.load(Path(call[1]), {})
        worker.num_updates = int(call[2])
    return kind != "close"


def follow(rank: int, world: int, spec: PolicySpec, init_method: str, conn: Connection) -> None:
    """Ranks 1..K-1: build the same model, then serve rank 0's calls (sent over a pipe, which
    waits without a timeout; the work itself runs in collectives, which have one)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the driver's to handle
    die_with_parent()
    parts = build_parts(spec)
    shard = init_shard_group(rank, world, init_method=init_method)
    try:
        worker = ShardWorker(spec, parts.model, shard)
        del parts
        while True:
            try:
                call = conn.recv()
            except (EOFError, OSError):  # rank 0 is gone
                return
            if not _serve_rank(worker, call):
                return
    finally:
        dist.destroy_process_group()


class ShardedPolicy(Policy):
    """Rank 0 of a policy sharded over `spec.model.shards` ranks; called like any `Policy`."""

    def __init__(self, spec: PolicySpec) -> None:
        world = spec.model.shards
        if spec.threads > 0:
            spec = _with_threads(spec, max(1, spec.threads // world))
        super().__init__(spec)
        init = f"tcp://127.0.0.1:{_free_port()}"
        ctx = multiprocessing.get_context("spawn")
        self._ranks: list[tuple[Any, Connection]] = []
        for rank in range(1, world):
            parent, child = ctx.Pipe()
            proc = ctx.Process(
                target=follow,
                args=(rank, world, spec, init, child),
                name=f"graft-policy-{self.name}-rank{rank}",
                daemon=True,
            )
            proc.start()
            child.close()
            self._ranks.append((proc, parent))
        self.worker = ShardWorker(spec, self.model, init_shard_group(0, world, init_method=init))

    def _send(self, *call: Any) -> None:
        """A call every rank takes part in: sent to ranks 1..K-1, then run here."""
        for rank, (proc, conn) in enumerate(self._ranks, start=1):
            try:
                conn.send(call)
            except OSError:
                raise self._rank_died(rank, proc) from None

    def _rank_died(self, rank: int, proc: Any) -> PolicyWorkerError:
        return PolicyWorkerError(
            f"policy {self.name!r}: rank {rank} of {self.worker.shard.world} died "
            f"(exit code {proc.exitcode})"
        )

    def _collective(self, fn, *args):
        """Run rank 0's side of a collective; a dead rank ends it with a line naming it."""
        try:
            return fn(*args)
        except RuntimeError:
            for rank, (proc, _) in enumerate(self._ranks, start=1):
                proc.join(timeout=1)
                if not proc.is_alive():
                    raise self._rank_died(rank, proc) from None
            raise

    def describe(self) -> dict[str, str]:
        """Provenance, with the ranks: their count and process ids (rank 0 first)."""
        pids = [str(os.getpid()), *(str(proc.pid) for proc, _ in self._ranks)]
        return {**super().describe(), "shards": str(len(pids)), "rank_pids": ",".join(pids)}

    def train(self, groups: Sequence[TrainGroup], *, seed: int = 0) -> dict[str, float]:
        if self.spec.algo.recompute_old_logprobs:
            groups = self._recompute_old(groups)
        self._send("train", list(groups), seed)
        stats = self._collective(self.worker.train, groups, seed)
        self.model.load_state_dict(self._collective(full_state_dict, self.worker.model))
        self.num_updates = self.worker.num_updates
        return stats

    def save(self, directory: str | Path) -> None:
        directory = Path(directory)
        self._send("save", str(directory))
        self.model.save_pretrained(directory)
        self.tokenizer.save_pretrained(directory)
        self._collective(self.worker.save_optimizer, directory)
        state = {"num_updates": self.num_updates, "shards": self.worker.shard.world}
        (directory / "policy_state.json").write_text(json.dumps(state))

    def load(self, directory: str | Path) -> None:
        directory = Path(directory)
        state = json.loads((directory / "policy_state.json").read_text())
        saved = state.get("shards", 1)
        if saved != self.worker.shard.world:
            raise ValueError(
                f"checkpoint {directory} holds {saved} AdamW shard(s); this policy has "
                f"{self.worker.shard.world} ranks (resume with the same models.N.shards)"
            )
        self._send("load", str(directory), state["num_updates"])
        self._load_weights(directory)
        full = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
        self._collective(self.worker.load, directory, full)
        self.num_updates = self.worker.num_updates = int(state["num_updates"])

    def close(self) -> None:
        if getattr(self, "worker", None) is not None:
            with contextlib.suppress(RuntimeError):
                self._send("close")
            dist.destroy_process_group()
            self.worker = None
        for proc, conn in getattr(self, "_ranks", []):
            conn.close()
            proc.join(timeout=30)
            if proc.is_alive():
                proc.kill()
        super().close()


def _with_threads(spec: PolicySpec, threads: int) -> PolicySpec:
    import dataclasses

    return dataclasses.replace(spec, threads=threads)
