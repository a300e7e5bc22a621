"""What loading a model and building a tiny one share: quiet transformers, content hashes of
weights (provenance in the trajectory store and in the tiny models' cache)."""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Mapping

import torch
import transformers

__all__ = ["model_fingerprint", "quiet_transformers", "state_fingerprint"]


def quiet_transformers() -> None:
    """Silence transformers' and the hub's loading progress bars and warnings."""
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    with contextlib.suppress(Exception):
        import huggingface_hub.utils

        huggingface_hub.utils.disable_progress_bars()


def model_fingerprint(model: torch.nn.Module) -> str:
    """Short content hash of the state dict (names, dtypes, shapes, values), for provenance."""
    return state_fingerprint(model.state_dict())


def state_fingerprint(state: Mapping[str, torch.Tensor]) -> str:
    """Short content hash of named tensors (names, dtypes, shapes, values)."""
    digest = hashlib.sha256()
    for name, tensor in sorted(state.items()):
        t = tensor.detach().to("cpu").contiguous()
        digest.update(f"{name}|{t.dtype}|{tuple(t.shape)}\n".encode())
        digest.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()[:16]
