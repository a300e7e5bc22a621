"""A policy's AdamW state across shard counts: a checkpoint written at K ranks resumes at any K.

An unsharded policy saves `optimizer.pt` (torch's state dict, parameters by position); a sharded
one saves `optimizer/` (torch.distributed.checkpoint, one file per rank, parameters by name, with
each tensor's global shape), and `policy_state.json` says how many ranks wrote it. Reading
`optimizer/` at another K (or unsharded) reshards it: every value lands where the new layout keeps
it, unchanged. Reading `optimizer.pt` into a sharded policy names its parameters and sends rank
0's full state to every rank, which keeps its own part.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import torch

OPTIMIZER_FILE = "optimizer.pt"
OPTIMIZER_DIR = "optimizer"


def saved_shards(directory: Path) -> int:
    """How many ranks wrote a checkpoint's AdamW state (1: unsharded); ValueError when the
    state it names is not there."""
    state = json.loads((directory / "policy_state.json").read_text())
    shards = int(state.get("shards", 1))
    want = directory / (OPTIMIZER_DIR if shards > 1 else OPTIMIZER_FILE)
    if not want.exists():
        raise ValueError(
            f"checkpoint {directory} was written by {shards} rank(s) (models.N.shards={shards}) "
            f"but has no {want.name}: it is incomplete"
        )
    return shards


def _trainable_names(model: torch.nn.Module) -> list[str]:
    """The names of the parameters the optimizer holds, in its order."""
    return [name for name, p in model.named_parameters() if p.requires_grad]


def by_name(model: torch.nn.Module, state: dict[str, Any]) -> dict[str, Any]:
    """torch's optimizer state dict (parameters by position) keyed by parameter name, the form
    `torch.distributed.checkpoint.state_dict` reads."""
    names = _trainable_names(model)
    groups = [{**g, "params": [names[i] for i in g["params"]]} for g in state["param_groups"]]
    return {"state": {names[i]: v for i, v in state["state"].items()}, "param_groups": groups}


def load_sharded_into_unsharded(
    directory: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer
) -> None:
    """An unsharded policy takes the AdamW state a sharded run saved (its full tensors)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        get_optimizer_state_dict,
        set_optimizer_state_dict,
    )

    state = {"optimizer": get_optimizer_state_dict(model, optimizer)}
    with warnings.catch_warnings():  # "... assuming the intent is to load in a single process"
        warnings.filterwarnings("ignore", "torch.distributed is disabled", UserWarning)
        dcp.load(state, checkpoint_id=str(directory / OPTIMIZER_DIR))
    set_optimizer_state_dict(model, optimizer, state["optimizer"])


def load_into_sharded(
    directory: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer, *, rank: int
) -> None:
    """A sharded policy's rank takes its part of the AdamW state of a checkpoint written at any
    K: resharded from `optimizer/`, or split from rank 0's `optimizer.pt` (every rank calls
    this, in step)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_optimizer_state_dict,
        set_optimizer_state_dict,
    )

    if saved_shards(directory) > 1:
        state = {"optimizer": get_optimizer_state_dict(model, optimizer)}
        dcp.load(state, checkpoint_id=str(directory / OPTIMIZER_DIR))
        set_optimizer_state_dict(model, optimizer, state["optimizer"])
        return
    full: dict[str, Any] = {}
    if rank == 0:
        saved = torch.load(directory / OPTIMIZER_FILE, weights_only=True)
        full = by_name(model, saved)
    options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
    set_optimizer_state_dict(model, optimizer, full, options=options)
