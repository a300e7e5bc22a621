"""Low-rank adapters (LoRA, Hu et al. 2021) on a policy's model, through `peft`.

With `models.N.lora.r > 0` the policy's model gets adapters on the chosen layers and only they
train: the base weights keep `requires_grad=False`, the optimizer holds state for the adapters
alone, and a checkpoint stores the adapter as a standard PEFT adapter (`adapter_model.safetensors`,
`adapter_config.json` with `task_type: CAUSAL_LM` and a base transformers resolves, so
`AutoPeftModelForCausalLM` loads it) plus `graft_adapter.json` naming the base by its graft path,
next to the tokenizer and optimizer state. Loading such a
checkpoint directory as a model (`graft eval`, `graft export-merged`) reads the base model it
names and merges the adapter into it, giving a plain transformers model.

The policy keeps working on the transformers model itself (peft injects the adapter layers into
it in place), so sampling, scoring and the update run the same code with or without LoRA. `peft`
is imported only when an adapter is used.
"""

from __future__ import annotations

import contextlib
import json
import re
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from graft.config import LoRAConfig, ModelConfig
from graft.extras import install_hint

ADAPTER_WEIGHTS = "adapter_model.safetensors"
ADAPTER_CONFIG = "adapter_config.json"
GRAFT_ADAPTER = "graft_adapter.json"


class LoRAError(ValueError):
    """LoRA settings that do not fit the model; the message is one line naming the key."""


def lora_enabled(lora: LoRAConfig) -> bool:
    return lora.r > 0


def _peft(key: str) -> Any:
    try:
        import peft
    except ImportError:
        raise LoRAError(f"{key}.r: LoRA needs the peft package: {install_hint('peft')}") from None
    return peft


def _adaptable(model: torch.nn.Module) -> dict[str, torch.nn.Module]:
    """Full name -> module of every layer an adapter can go on (linear and GPT-2's Conv1D),
    the output head excluded: what peft's `all-linear` means."""
    from transformers.pytorch_utils import Conv1D

    head = model.get_output_embeddings()
    return {
        name: module
        for name, module in model.named_modules()
        if isinstance(module, torch.nn.Linear | Conv1D) and module is not head
    }


def adapter_layer_names(model: torch.nn.Module) -> list[str]:
    """Leaf names of the layers an adapter can go on, in order of first appearance."""
    return list(dict.fromkeys(name.rsplit(".", 1)[-1] for name in _adaptable(model)))


def target_names(model: torch.nn.Module, lora: LoRAConfig, key: str) -> list[str]:
    """The full names of the modules `lora.target_modules` selects, with peft's meaning: a list
    entry matches a module named by it or ending in `.` + it; `all-linear` (or nothing) is every
    adaptable layer; any other string is a regular expression for the whole name."""
    layers = list(_adaptable(model))
    wanted = lora.target_modules
    if not wanted or wanted == "all-linear":
        return layers
    where = f"{key}.target_modules"
    if isinstance(wanted, str):
        chosen = [n for n in layers if re.fullmatch(wanted, n)]
        if not chosen:
            raise LoRAError(
                f"{where}: {wanted!r} matches no adaptable layer of {type(model).__name__} "
                f"(full names such as {layers[0]!r})"
            )
        return chosen
    missing = [t for t in wanted if not any(n == t or n.endswith("." + t) for n in layers)]
    if missing:
        raise LoRAError(
            f"{where}: {', '.join(map(repr, missing))} is not a layer of this model "
            f"({type(model).__name__}); its layers: {', '.join(adapter_layer_names(model))}"
        )
    return [n for n in layers if any(n == t or n.endswith("." + t) for t in wanted)]


@contextlib.contextmanager
def _quiet_peft() -> Iterator[None]:
    # peft asks transformers a question transformers has renamed (a FutureWarning only)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=FutureWarning)
        yield


def apply_lora(model: torch.nn.Module, lora: LoRAConfig, *, key: str, seed: int) -> Any:
    """`model` with adapters injected (a `peft.PeftModel` around it); the adapters' random
    initialisation is drawn from `seed`, leaving torch's global generator as it was."""
    peft = _peft(key)
    from transformers.pytorch_utils import Conv1D

    targets = target_names(model, lora, key)
    modules = dict(model.named_modules())
    conv1d = any(isinstance(modules[name], Conv1D) for name in targets)
    config = peft.LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha or 2 * lora.r,
        lora_dropout=lora.dropout,
        target_modules=targets,  # full names: peft adapts exactly these
        fan_in_fan_out=conv1d,  # GPT-2's Conv1D stores its weight transposed
        bias="none",
        task_type="CAUSAL_LM",
    )
    with torch.random.fork_rng(), _quiet_peft():
        torch.manual_seed(seed)
        wrapped = peft.get_peft_model(model, config)
    wrapped.base_model.model.eval()
    return wrapped


def adapter_state(wrapped: Any) -> dict[str, torch.Tensor]:
    """The adapter's tensors, by peft's portable names."""
    from peft.utils import get_peft_model_state_dict

    return {
        k: v.detach().contiguous()
        for k, v in get_peft_model_state_dict(wrapped, save_embedding_layers=False).items()
    }


def save_adapter(
    wrapped: Any, directory: Path, *, base: ModelConfig, base_path: str, base_fingerprint: str = ""
) -> None:
    """A standard PEFT adapter: adapter_model.safetensors + adapter_config.json, whose base is
    `base_path` (a name or path transformers resolves, so that
    `AutoPeftModelForCausalLM.from_pretrained(directory)` loads it), and graft_adapter.json with
    the base as graft names it (`models.N.path`: a `tiny:` preset, a .gguf file, ...) and the
    hash of its weights."""
    directory.mkdir(parents=True, exist_ok=True)
    config = wrapped.peft_config["default"]
    config.base_model_name_or_path = base_path
    config.revision = (base.revision or None) if base_path == base.path else None
    save_file({k: v.cpu() for k, v in adapter_state(wrapped).items()}, directory / ADAPTER_WEIGHTS)
    config.save_pretrained(str(directory))
    provenance = {"base": base.path, "revision": base.revision, "fingerprint": base_fingerprint}
    (directory / GRAFT_ADAPTER).write_text(json.dumps(provenance))


def load_adapter(wrapped: Any, directory: Path, *, error: type[Exception] = RuntimeError) -> None:
    """Load saved adapter weights into `wrapped` (same base model, same LoRA settings); a
    mismatch raises `error`, naming the folder."""
    from peft.utils import set_peft_model_state_dict

    state = load_file(str(directory / ADAPTER_WEIGHTS))
    expected = adapter_state(wrapped)
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    shapes = [k for k in expected if k in state and state[k].shape != expected[k].shape]
    if missing or unexpected or shapes:
        raise error(
            f"adapter in {directory} does not fit this base model: missing "
            f"{missing[:3]}, unexpected {unexpected[:3]}, other shapes {shapes[:3]}"
        )
    set_peft_model_state_dict(wrapped, {k: v.to(expected[k].dtype) for k, v in state.items()})


UNSUPPORTED = {"use_dora": "DoRA", "use_rslora": "rsLoRA", "modules_to_save": "modules_to_save"}
"""adapter_config.json settings graft's LoRA does not train."""


def adapter_settings(path: Path, *, key: str) -> LoRAConfig:
    """The LoRA settings of the PEFT adapter saved in `path` (`models.N.adapter`); an adapter
    graft cannot continue training exactly as saved is refused in one line naming it."""
    where = f"{key} {path}"
    if not (path / ADAPTER_CONFIG).is_file() or not (path / ADAPTER_WEIGHTS).is_file():
        raise LoRAError(
            f"{where}: not a PEFT adapter folder (it holds {ADAPTER_CONFIG} and {ADAPTER_WEIGHTS})"
        )
    try:
        body = json.loads((path / ADAPTER_CONFIG).read_text(encoding="utf-8"))
        r, alpha = int(body["r"]), float(body.get("lora_alpha") or 0.0)
        dropout = float(body.get("lora_dropout") or 0.0)
    except (ValueError, KeyError, TypeError) as err:
        raise LoRAError(f"{where}: unreadable {ADAPTER_CONFIG} ({err!r})") from None
    if body.get("peft_type", "LORA") != "LORA":
        raise LoRAError(f"{where}: a {body.get('peft_type')} adapter; graft trains LoRA adapters")
    used = [what for name, what in UNSUPPORTED.items() if body.get(name)]
    used += [f"bias={body['bias']}"] if body.get("bias", "none") != "none" else []
    if used:
        raise LoRAError(f"{where}: uses {', '.join(used)}, which graft's LoRA does not train")
    targets = body.get("target_modules") or ()
    targets = targets if isinstance(targets, str) else tuple(sorted(targets))
    return LoRAConfig(r=r, alpha=alpha, dropout=dropout, target_modules=targets)


def check_adapter_base(path: Path, *, model_path: str, fingerprint: str, key: str) -> None:
    """The adapter in `path` was trained on this base: graft's own adapters record the hash of
    their base's weights (a mismatch is refused); for another adapter, a base named differently
    from `models.N.path` is a warning."""
    name, _ = adapter_base(path)
    ours = path / GRAFT_ADAPTER
    recorded = json.loads(ours.read_text()).get("fingerprint") if ours.is_file() else None
    if recorded and recorded != fingerprint:
        raise LoRAError(
            f"{key} {path}: trained on the base {name}, whose weights differ from those of "
            f"{model_path}; set the model path to the adapter's base"
        )
    if not recorded and name != model_path:
        warnings.warn(
            f"{key} {path}: its adapter_config.json names the base {name}; it is trained on "
            f"{model_path} as given",
            stacklevel=2,
        )


def is_adapter_dir(path: Path) -> bool:
    """A checkpoint directory holding an adapter (and no full model)."""
    return (path / ADAPTER_CONFIG).is_file() and not (path / "config.json").is_file()


def adapter_base(path: Path) -> tuple[str, str]:
    """(base model path, revision) an adapter directory names: graft's own spelling from
    graft_adapter.json, else (an adapter from elsewhere) peft's `base_model_name_or_path`."""
    ours = path / GRAFT_ADAPTER
    source = ours if ours.is_file() else path / ADAPTER_CONFIG
    try:
        body = json.loads(source.read_text())
        if source == ours:
            return str(body["base"]), str(body.get("revision") or "")
        return str(body["base_model_name_or_path"]), str(body.get("revision") or "")
    except (ValueError, KeyError, TypeError) as err:
        raise LoRAError(f"{source}: unreadable adapter config ({err})") from None


def merge_adapter(base: torch.nn.Module, path: Path) -> torch.nn.Module:
    """`base` with the adapter saved in `path` merged into its weights (a plain model)."""
    peft = _peft("adapter")
    with _quiet_peft():
        wrapped = peft.PeftModel.from_pretrained(base, str(path))
    # peft froze the base weights; a loaded model trains like any other
    return wrapped.merge_and_unload().requires_grad_(True)


class AdapterOff(torch.nn.Module):
    """The base model of a LoRA policy (its adapters switched off), as the KL reference: no copy
    of the weights is made."""

    def __init__(self, wrapped: Any) -> None:
        super().__init__()
        object.__setattr__(self, "_wrapped", wrapped)  # not a submodule: nothing to train here

    def parameters(self, recurse: bool = True) -> Iterator[torch.nn.Parameter]:
        """The base model's (frozen) weights: the reference's own parameters."""
        return (p for p in self._wrapped.get_base_model().parameters() if not p.requires_grad)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        with self._wrapped.disable_adapter():
            return self._wrapped.get_base_model()(*args, **kwargs)


@contextlib.contextmanager
def adapter_dropout(model: torch.nn.Module, seed: int) -> Iterator[None]:
    """The adapters' dropout layers on (drawn from `seed`) for the update's forward passes; the
    rest of the model stays in eval mode, and torch's global generator is left as it was."""
    layers = [m for name, m in model.named_modules() if name.endswith("lora_dropout")]
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        for layer in layers:
            layer.train()
        try:
            yield
        finally:
            for layer in layers:
                layer.eval()
