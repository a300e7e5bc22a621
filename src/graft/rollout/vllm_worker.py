"""What graft adds to vLLM's worker: loading the trainer's weights into the running model.

vLLM builds its worker with this class mixed in (`worker_extension_cls`), in whichever process
the worker runs; the engine calls its methods by name (`LLM.collective_rpc`), so nothing is
pickled. A sync is three calls, vLLM's layerwise reload in the order `reload_weights` runs it:

1. `graft_begin_reload`: every layer back to its checkpoint layout (on the meta device), with
   loaders that hold a layer's weights until the layer has all of them;
2. `graft_load`, once per part (the whole model, or one decoder layer of a sharded policy): the
   model's own `load_weights`; a layer that is complete is then processed (repacked for the CPU
   backend's kernels, quantized, ...) and copied into the tensors the engine computes with;
3. `graft_end_reload`: layers not yet processed are, and the names of the engine's parameters no
   part loaded are returned.

Plain `load_weights` into a running model fails where a backend repacked its weights after
loading (vLLM's CPU backend empties every linear layer's parameter and keeps a packed copy), and
the layerwise reload is vLLM's own answer to it. One thing it misses: a module that shares its
weight with another (an output head tied to the input embeddings) receives no weights of its own,
so whatever it derived from that weight at start-up stays (on the CPU backend, the head's packed
copy of the random start-up weights). Such modules are processed again at the end.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch


class WeightLoader:
    """Mixed into vLLM's worker (which provides `model_runner`, `vllm_config`, `model_config`)."""

    model_runner: Any
    vllm_config: Any
    model_config: Any

    def graft_begin_reload(self) -> None:
        from vllm.config import set_current_vllm_config
        from vllm.model_executor.model_loader.reload import initialize_layerwise_reload

        with set_current_vllm_config(self.vllm_config):
            initialize_layerwise_reload(self.model_runner.get_model())
        self._graft_loaded: set[str] | None = set()

    def graft_load(self, part: str | Iterable[tuple[str, torch.Tensor]]) -> None:
        """Load one part: (name, tensor) pairs, or the path of a safetensors file holding them
        (an engine in a process of its own)."""
        from vllm.config import set_current_vllm_config

        if isinstance(part, str):
            from safetensors.torch import load_file

            part = load_file(part).items()
        with set_current_vllm_config(self.vllm_config):
            names = self.model_runner.get_model().load_weights(part)
        if names is None or self._graft_loaded is None:  # a loader that reports nothing
            self._graft_loaded = None
        else:
            self._graft_loaded.update(names)

    def graft_end_reload(self) -> list[str] | None:
        """Finish the reload; the engine's parameters no part loaded (None: the model's loader
        does not report what it loaded)."""
        from vllm.config import set_current_vllm_config
        from vllm.model_executor.model_loader.reload import finalize_layerwise_reload

        model = self.model_runner.get_model()
        with set_current_vllm_config(self.vllm_config):
            finalize_layerwise_reload(model, self.model_config)
            for module in tied_modules(model):
                module.quant_method.process_weights_after_loading(module)
        loaded = self._graft_loaded
        if loaded is None:
            return None
        return sorted(name for name, _ in model.named_parameters() if name not in loaded)


def tied_modules(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The modules whose weight is another module's (met first in `named_modules` order), with a
    processing step of their own."""
    owners: set[int] = set()
    tied = []
    for module in model.modules():
        weight = getattr(module, "weight", None)
        if not isinstance(weight, torch.nn.Parameter):
            continue
        if id(weight) in owners and hasattr(module, "quant_method"):
            tied.append(module)
        owners.add(id(weight))
    return tied
