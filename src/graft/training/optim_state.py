"""A policy's AdamW state across shard counts: a checkpoint written at K ranks resumes at any K.

An unsharded policy saves `optimizer.pt` (torch's state dict, parameters by position); a sharded
one saves `optimizer/` (torch.distributed.checkpoint, one file per rank, parameters by name, with
each tensor's global shape), and `policy_state.json` says how many ranks wrote it. Reading
`optimizer/` at another K (or unsharded) reshards it: every value lands where the new layout keeps
it, unchanged. Reading `optimizer.pt` into a sharded policy names its parameters and sends rank
0's full state to every rank, which keeps its own part.

An optimizer that has not taken a step yet has no state, and keeps none across K: torch's
distributed state-dict calls fill an empty state with a zero-gradient step (step 1, zero moments),
after which AdamW's first real update would be its second, about 0.74x the size. Saving undoes that
fill and writes the parameter groups alone; loading a checkpoint without state leaves none.
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
    """How many ranks wrote a checkpoint's AdamW state (1: unsharded); ValueError (one line,
    naming the checkpoint and the file) when the state it names is not all there."""
    state = json.loads((directory / "policy_state.json").read_text())
    shards = int(state.get("shards", 1))
    want = directory / (OPTIMIZER_DIR if shards > 1 else OPTIMIZER_FILE)
    if not want.exists():
        raise ValueError(
            f"checkpoint {directory} was written by {shards} rank(s) (models.N.shards={shards}) "
            f"but has no {want.name}{'/' if shards > 1 else ''}: it is incomplete"
        )
    if shards > 1 and (missing := missing_rank_files(want)):
        raise ValueError(
            f"checkpoint {directory} is incomplete: {OPTIMIZER_DIR}/{missing[0]} is missing "
            f"({OPTIMIZER_DIR}/.metadata names it{_more(missing)})"
        )
    return shards


def _more(missing: list[str]) -> str:
    return f"; {len(missing) - 1} more are missing" if len(missing) > 1 else ""


def _metadata(folder: Path) -> Any:
    """The torch.distributed.checkpoint metadata of `folder` (ValueError: unreadable)."""
    from torch.distributed.checkpoint import FileSystemReader

    try:
        return FileSystemReader(str(folder)).read_metadata()
    except Exception as err:  # a truncated or foreign file: whatever unpickling raised
        why = " ".join(str(err).split())[:200]
        raise ValueError(
            f"{folder / '.metadata'}: unreadable ({type(err).__name__}: {why})"
        ) from None


def missing_rank_files(folder: Path) -> list[str]:
    """The files (relative to `folder`, a sharded AdamW state) that its `.metadata` says hold
    part of the state but that are not there: a rank's file lost, or written on a node whose
    disk this one does not see. ValueError when `.metadata` is missing or unreadable."""
    if not (folder / ".metadata").is_file():
        raise ValueError(f"{folder / '.metadata'}: missing")
    storage = _metadata(folder).storage_data or {}
    names = sorted({info.relative_path for info in storage.values()})
    return [name for name in names if not (folder / name).is_file()]


def has_saved_state(folder: Path) -> bool:
    """Whether a sharded AdamW state holds moments, or only parameter groups (saved before the
    optimizer's first step)."""
    keys = _metadata(folder).state_dict_metadata
    return any(key.startswith("optimizer.state.") for key in keys)


def _read_dcp(folder: Path, state: dict[str, Any]) -> None:
    """`torch.distributed.checkpoint.load` into `state`, with its failure as one line naming the
    folder (torch raises a BaseException that carries every rank's traceback)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException

    try:
        dcp.load(state, checkpoint_id=str(folder))
    except CheckpointException as err:
        rank, (cause, _) = min(err.failures.items()) if err.failures else (0, (err, None))
        why = " ".join(str(cause).split())[:300] or type(cause).__name__
        raise ValueError(
            f"checkpoint {folder} could not be read (rank {rank}: {type(cause).__name__}: {why})"
        ) from None


def _trainable_names(model: torch.nn.Module) -> list[str]:
    """The names of the parameters the optimizer holds, in its order."""
    return [name for name, p in model.named_parameters() if p.requires_grad]


def by_name(model: torch.nn.Module, state: dict[str, Any]) -> dict[str, Any]:
    """torch's optimizer state dict (parameters by position) keyed by parameter name, the form
    `torch.distributed.checkpoint.state_dict` reads."""
    names = _trainable_names(model)
    groups = [{**g, "params": [names[i] for i in g["params"]]} for g in state["param_groups"]]
    return {"state": {names[i]: v for i, v in state["state"].items()}, "param_groups": groups}


def save_sharded(directory: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Each rank's part of the AdamW state into `directory/optimizer/` (every rank calls this, in
    step). Before the first step only the parameter groups are written, and the optimizer is left
    without state, as it was."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    empty = not optimizer.state
    state = get_optimizer_state_dict(model, optimizer)  # fills an empty state: undone below
    if empty:
        optimizer.state.clear()
        state = {"state": {}, "param_groups": state["param_groups"]}
    dcp.save({"optimizer": state}, checkpoint_id=str(directory / OPTIMIZER_DIR))


def _set_state(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    state: dict[str, Any],
    *,
    empty: bool,
    options: Any = None,
) -> None:
    """`set_optimizer_state_dict`, leaving the optimizer without state when the saved one had
    none (torch fills an empty state with a zero-gradient step)."""
    from torch.distributed.checkpoint.state_dict import set_optimizer_state_dict

    set_optimizer_state_dict(model, optimizer, state, options=options)
    if empty:
        optimizer.state.clear()


def _read_sharded(
    directory: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer
) -> tuple[dict[str, Any], bool]:
    """(the AdamW state of `directory/optimizer/` laid out as `optimizer` holds it now, whether
    the checkpoint had no state yet)."""
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    folder = directory / OPTIMIZER_DIR
    empty = not has_saved_state(folder)
    target = get_optimizer_state_dict(model, optimizer)
    if empty:  # only the parameter groups were saved
        target = {"state": {}, "param_groups": target["param_groups"]}
    state = {"optimizer": target}
    _read_dcp(folder, state)
    return state["optimizer"], empty


def load_sharded_into_unsharded(
    directory: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer
) -> None:
    """An unsharded policy takes the AdamW state a sharded run saved (its full tensors)."""
    with warnings.catch_warnings():  # "... assuming the intent is to load in a single process"
        warnings.filterwarnings("ignore", "torch.distributed is disabled", UserWarning)
        state, empty = _read_sharded(directory, model, optimizer)
    _set_state(model, optimizer, state, empty=empty)


def load_into_sharded(
    directory: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer, *, rank: int
) -> None:
    """A sharded policy's rank takes its part of the AdamW state of a checkpoint written at any
    K: resharded from `optimizer/`, or split from rank 0's `optimizer.pt` (every rank calls
    this, in step)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    from graft.training.shards import share_from_rank0

    if saved_shards(directory) > 1:
        state, empty = _read_sharded(directory, model, optimizer)
        _set_state(model, optimizer, state, empty=empty)
        return
    full: dict[str, Any] = {}
    if rank == 0:
        saved = torch.load(directory / OPTIMIZER_FILE, weights_only=True)
        full = by_name(model, saved)
    empty = bool(share_from_rank0(rank == 0 and not full["state"]))
    options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
    _set_state(model, optimizer, full, empty=empty, options=options)
