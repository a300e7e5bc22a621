"""Mixed precision the way verl, TRL and the FSDP recipes do it: what is stored vs what is computed.

A policy stores its weights and AdamW state in `models.N.param_dtype` (float32 by default: the
master weights) and runs its forward and backward passes in `models.N.dtype` (the compute dtype)
under `torch.autocast`. Log-probs and the loss are always computed in float32 from the logits
(`graft.models.modeling.selected_logprobs`). Sampling, scoring and the update run under the
same autocast, so the behavior log-probs recorded at sampling time match the training forward at
step 0.

Why not store bfloat16 weights: at the learning rates RLVR uses (1e-6 to 3e-6), AdamW's step is
far below bfloat16's spacing for typical weights (about 8e-5 at |w| = 0.02), so most updates round
to nothing. Pure low-precision weights (`param_dtype` equal to a 16-bit `dtype`) stay possible as
an explicit opt-in that warns (`low_precision_warning`).

float16 compute with float32 master weights uses a dynamic loss scaler (`torch.amp.GradScaler`):
the loss is scaled before backward, the gradients unscaled before clipping, and a step whose
gradients overflowed is skipped (and counted) while the scale backs off. Its state is part of a
checkpoint, so resume is exact. A sharded policy casts through FSDP's mixed-precision policy
instead of autocast (`sharded=True`), and its scaler agrees across ranks on whether a step
overflowed (FSDP's `ShardedGradScaler`: every rank skips the same steps).
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}


def low_precision_warning(compute: str, params: str, *, key: str) -> str | None:
    """The warning for pure low-precision weights (None when the weights are float32)."""
    if params == "float32":
        return None
    return (
        f"{key}.param_dtype={params}: weights and AdamW state are stored in {params}; at RLVR "
        f"learning rates (1e-6..3e-6) most AdamW steps round to nothing in {params}. Leave "
        f"param_dtype at float32 (master weights) and set dtype={compute} for {compute} compute"
    )


class Precision:
    """One policy's compute dtype (autocast), stored dtype, and loss scaler (float16 compute over
    float32 weights only)."""

    def __init__(
        self,
        compute: str = "float32",
        params: str = "float32",
        *,
        device: Any = "cpu",
        sharded: bool = False,
    ):
        if compute not in DTYPES or params not in DTYPES:
            raise ValueError(f"unknown dtype: compute {compute!r}, params {params!r}")
        self.compute, self.params, self.sharded = compute, params, sharded
        self.device_type = torch.device(device).type
        self.scaler: Any = None
        if compute == "float16" and params == "float32":
            if sharded:
                from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

                self.scaler = ShardedGradScaler(self.device_type)
            else:
                self.scaler = torch.amp.GradScaler(self.device_type)
        self.skipped_steps = 0

    @property
    def autocasts(self) -> bool:
        """Whether forward passes run under autocast in another dtype than the weights are
        stored in (never sharded: FSDP casts)."""
        return self.compute != self.params and not self.sharded

    def forward(self) -> contextlib.AbstractContextManager:
        """The context forward passes run in (autocast to the compute dtype, or nothing)."""
        if not self.autocasts:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=DTYPES[self.compute])

    def backward(self, loss: torch.Tensor) -> None:
        """loss.backward(), through the loss scaler when there is one."""
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()

    def unscale(self, optimizer: torch.optim.Optimizer) -> None:
        """Divide the gradients by the loss scale (before clipping them)."""
        if self.scaler is not None and _has_grads(optimizer):
            self.scaler.unscale_(optimizer)

    def step(self, optimizer: torch.optim.Optimizer) -> bool:
        """The optimizer step; False when the loss scaler skipped it (non-finite gradients)."""
        if self.scaler is None:
            optimizer.step()
            return True
        if not _has_grads(optimizer):
            return True  # nothing to step (every response of the minibatch had zero gradient)
        scale = self.scaler.get_scale()
        self.scaler.step(optimizer)
        self.scaler.update()
        took = self.scaler.get_scale() >= scale  # the scale backs off only after a skipped step
        self.skipped_steps += not took
        return took

    def state_dict(self) -> dict[str, Any]:
        """Plain (JSON-able) state for a checkpoint: the loss scaler's."""
        state: dict[str, Any] = {"skipped_steps": self.skipped_steps}
        if self.scaler is not None:
            state["scaler"] = dict(self.scaler.state_dict())
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.skipped_steps = int(state.get("skipped_steps", 0))
        if self.scaler is not None and state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])


def _has_grads(optimizer: torch.optim.Optimizer) -> bool:
    return any(p.grad is not None for g in optimizer.param_groups for p in g["params"])
