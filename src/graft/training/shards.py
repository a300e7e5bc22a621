"""One policy's update over K ranks with PyTorch's FSDP2 (`fully_shard`): the building blocks.

Each rank holds 1/K of the parameters, gradients and AdamW state (float32 master weights); the
forward and backward of a decoder layer gather its full parameters just in time. The update stays
the method's exactly: every rank computes the aggregation coefficients over the WHOLE minibatch
(`update.sequence_coefficients`), runs its own share of the micro-batches, and the gradients are
summed across ranks (each rank's loss is multiplied by K before FSDP averages the K gradients:
exact for a power of two; gloo has no pre-multiplied sum), so K ranks produce the update one rank
would, up to the order of float additions. A rank with fewer micro-batches than another runs
zero-weight passes, so that every rank meets every collective.

What is here is what a rank does; spawning a policy's ranks, placing them and serving a run's
calls through them belong to the backends.
"""

from __future__ import annotations

import contextlib
import datetime
import os
from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.distributed as dist

from graft.models.modeling import checkpoint_layers, decoder_layers, head_gradients_in_place

DEFAULT_TIMEOUT_S = 300.0
"""Every collective of a shard group gives up after this long: a dead rank ends the run, never
hangs it."""


MALLOC_THRESHOLD = ("MALLOC_MMAP_THRESHOLD_", "65536")
"""glibc's mmap threshold for a CPU rank's process: blocks of 64 KiB and more are given back to
the system when freed, instead of staying with the process (a K = 2 rank sampling on the CPU held
about 630 MB with it, 1050 MB without)."""


def rank_environment(device: str) -> dict[str, str]:
    """What the process of a rank on `device` adds to its environment: on the CPU, glibc's mmap
    threshold, unless the environment already sets one."""
    name, value = MALLOC_THRESHOLD
    if torch.device(device).type != "cpu" or name in os.environ:
        return {}
    return {name: value}


@dataclass(frozen=True)
class ShardRank:
    """This process's place in its policy's shard group (rank 0 of 1: not sharded)."""

    rank: int = 0
    world: int = 1

    @property
    def sharded(self) -> bool:
        return self.world > 1


UNSHARDED = ShardRank()


def init_shard_group(
    rank: int,
    world: int,
    *,
    init_method: str,
    device: str | torch.device = "cpu",
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> ShardRank:
    """Join the policy's process group: gloo for ranks on the CPU, NCCL for ranks on GPUs (each
    rank on its own `device`, which becomes the process's current CUDA device)."""
    device = torch.device(device)
    backend = "nccl" if device.type == "cuda" else "gloo"
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(
        backend,
        init_method=init_method,
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=timeout_s),
    )
    return ShardRank(rank, world)


def shard_model(model: torch.nn.Module, *, compute_dtype: torch.dtype | None = None):
    """FSDP2 over the current process group: each decoder layer, then the root (embeddings, the
    final norm and the head). Master weights stay in their stored dtype; `compute_dtype` other
    than that is the mixed-precision policy of the forward and backward."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    stored = next(model.parameters()).dtype
    kwargs = {}
    if compute_dtype is not None and compute_dtype != stored:
        kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=compute_dtype, reduce_dtype=stored)
    layers = decoder_layers(model)
    if not layers:
        raise ValueError(
            f"{type(model).__name__}: no decoder layers to shard (its _no_split_modules is empty)"
        )
    for layer in layers:
        fully_shard(layer, **kwargs)
    fully_shard(model, **kwargs)
    return model


@contextlib.contextmanager
def _parameters_on_meta() -> Iterator[None]:
    """Modules made inside put each parameter on the meta device as it is registered (so no more
    than one parameter is ever allocated); buffers stay real (rotary frequencies, ...)."""
    register = torch.nn.Module.register_parameter

    def on_meta(module: torch.nn.Module, name: str, param: torch.nn.Parameter | None) -> None:
        register(module, name, param)
        if param is not None and not param.is_meta:  # a tied parameter keeps its one object
            made = module._parameters[name]
            module._parameters[name] = torch.nn.Parameter(
                made.to("meta"), requires_grad=made.requires_grad
            )

    torch.nn.Module.register_parameter = on_meta  # type: ignore[method-assign]
    try:
        yield
    finally:
        torch.nn.Module.register_parameter = register  # type: ignore[method-assign]


def build_sharded(
    config,
    shard: ShardRank,
    *,
    device: str | torch.device,
    compute_dtype: torch.dtype | None,
    recompute: bool = False,
) -> torch.nn.Module:
    """The architecture of `config`, sharded, holding only this rank's shards of the float32
    master weights: built on the meta device, sharded, then given storage for its shards alone
    (their values still unset: `load_full_weights`). Peak memory is one parameter, never the
    model. `recompute`: activation checkpointing of every decoder layer (`checkpoint_layers`)."""
    from transformers import AutoModelForCausalLM

    with _parameters_on_meta():
        model = AutoModelForCausalLM.from_config(config).to(torch.float32)
    buffers = {name: b.detach().clone() for name, b in model.named_buffers()}
    if recompute:
        checkpoint_layers(model)
    head_gradients_in_place(model)
    shard_model(model, compute_dtype=compute_dtype)
    model.to_empty(device=device)  # this rank's shards of the parameters; buffers too
    with torch.no_grad():
        for name, b in model.named_buffers():  # to_empty left them unset: put them back
            b.copy_(buffers[name].to(device))
    return model.eval()


def load_full_weights(model: torch.nn.Module, full: dict[str, torch.Tensor]) -> None:
    """Rank 0's full state dict (`{}` on the other ranks) into every rank's shards, one tensor
    at a time."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
    set_model_state_dict(model, dict(full), options=options)  # it rewrites the dict it is given


def share_from_rank0(value: object) -> object:
    """Rank 0's `value` (a picklable object: a model config) on every rank of the group."""
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def my_chunks(chunks: list, shard: ShardRank) -> list:
    """This rank's micro-batches, padded with None to the count of the rank that has the most
    (None: a zero-weight pass that keeps the collectives in step)."""
    if not shard.sharded:
        return chunks
    mine = chunks[shard.rank :: shard.world]
    most = -(-len(chunks) // shard.world)
    return mine + [None] * (most - len(mine))


def sum_across_ranks(stats: dict[str, float], shard: ShardRank) -> dict[str, float]:
    """The micro-batch statistics of every rank together (`ratio_max`: the largest)."""
    if not shard.sharded:
        return stats
    keys = sorted(stats)
    gathered: list[dict[str, float] | None] = [None] * shard.world
    dist.all_gather_object(gathered, {k: stats[k] for k in keys})
    out: dict[str, float] = {}
    for part in gathered:
        for key, value in (part or {}).items():
            if key == "ratio_max":
                out[key] = max(out.get(key, value), value)
            else:
                out[key] = out.get(key, 0.0) + value
    return out


def rank_loss(loss: torch.Tensor, shard: ShardRank) -> torch.Tensor:
    """The loss this rank back-propagates: FSDP averages the ranks' gradients, the update needs
    their sum."""
    return loss * shard.world if shard.sharded else loss


def total_norm(norm: torch.Tensor) -> float:
    """A gradient norm as a float: the full value when FSDP returned it as a DTensor."""
    full = getattr(norm, "full_tensor", None)
    return float(full() if full is not None else norm)


def full_state_on_rank0(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter and buffer in full, on the CPU of rank 0 (`{}` on the other ranks), gathered
    one tensor at a time (a collective: all ranks call it)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    return get_model_state_dict(model, options=options)


def gathered_layers(
    model: torch.nn.Module, dtype: torch.dtype
) -> Iterator[list[tuple[str, torch.Tensor]]]:
    """The model's parameters in full and in `dtype`, a part at a time: each decoder layer's, then
    the rest (embeddings, final norm, head). Cast before the gather, so no float32 copy of a layer
    is made. A collective: every rank iterates to the end, and every rank gets each part."""
    names = {id(p): n for n, p in model.named_parameters()}
    in_layers: set[int] = set()
    for layer in decoder_layers(model):
        params = list(layer.parameters())
        in_layers.update(id(p) for p in params)
        yield [(names[id(p)], _full(p, dtype)) for p in params]
    yield [(n, _full(p, dtype)) for n, p in model.named_parameters() if id(p) not in in_layers]


def _full(param: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    local = param.detach().to(dtype)
    full = getattr(local, "full_tensor", None)
    return full() if full is not None else local


def _tied_names(model: torch.nn.Module) -> list[list[str]]:
    """The names of each parameter the model holds under more than one (a tied output head),
    in the model's order."""
    names: dict[int, list[str]] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(param), []).append(name)
    return [group for group in names.values() if len(group) > 1]


def with_tied_keys(
    model: torch.nn.Module, state: dict[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    """`state` (as transformers saves it: a tied output head left out) with every name of a tied
    parameter present, as the model's state dict has them."""
    out = dict(state)
    for group in _tied_names(model):
        present = [n for n in group if n in out]
        for name in group:
            if name not in out and present:
                out[name] = out[present[0]]
    return out


def without_tied_keys(
    model: torch.nn.Module, state: dict[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    """`state` with a tied parameter under its first name only, as transformers saves it."""
    drop = {name for group in _tied_names(model) for name in group[1:]}
    return {k: v for k, v in state.items() if k not in drop}


class Lockstep:
    """A sharded model called so that every rank of its group runs each forward together.

    An FSDP forward gathers every layer from all ranks, so a rank may start one only when every
    other rank does. Before each forward a rank says so (an all-reduce of 1); a rank that has run
    out of work waits in `drain`, answering each round with a forward on one pad token, until a
    round in which no rank asked (each rank then leaves `drain`). Ranks with different amounts of
    work (prompts, response lengths, early stops) stay in step without knowing each other's plans.
    Anything else is read from the model itself.
    """

    def __init__(self, model: torch.nn.Module, shard: ShardRank, *, pad_id: int) -> None:
        self.model, self.shard, self.pad_id = model, shard, pad_id
        self._device = next(model.parameters()).device

    def __getattr__(self, name: str):
        return getattr(self.model, name)

    def _round(self, wants: int) -> bool:
        flag = torch.tensor([wants], dtype=torch.int64, device=self._device)
        dist.all_reduce(flag)
        return int(flag.item()) > 0

    def __call__(self, *args, **kwargs):
        self._round(1)
        return self.model(*args, **kwargs)

    def drain(self) -> None:
        """Serve the other ranks' forwards until none is left (no grad: the results are unused)."""
        ids_11 = torch.full((1, 1), self.pad_id, dtype=torch.long, device=self._device)
        with torch.no_grad():
            while self._round(0):
                self.model(input_ids=ids_11, use_cache=False, logits_to_keep=1)
        reshard(self.model)


def reshard(model: torch.nn.Module) -> None:
    """Every FSDP module back to its shards. A forward without gradients leaves the root's
    parameters gathered (FSDP keeps them for a backward that never comes), and while they are,
    `model.parameters()` names the full tensors, which receive no gradient: a gradient norm taken
    over them misses the root's share (embeddings, final norm, head)."""
    from torch.distributed.fsdp import FSDPModule

    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.reshard()


def even_slices(count: int, world: int) -> list[slice]:
    """`count` items in `world` contiguous parts whose sizes differ by at most one (earlier parts
    take the remainder)."""
    base, extra = divmod(count, world)
    out, start = [], 0
    for r in range(world):
        stop = start + base + (1 if r < extra else 0)
        out.append(slice(start, stop))
        start = stop
    return out


def gather_on_rank0(items: list, shard: ShardRank) -> list:
    """Every rank's `items`, concatenated in rank order, on rank 0 (`[]` on the others)."""
    if not shard.sharded:
        return items
    parts: list[list | None] | None = [None] * shard.world if shard.rank == 0 else None
    dist.gather_object(items, parts, dst=0)
    return [x for part in parts or [] for x in (part or [])]
