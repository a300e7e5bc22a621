"""Record the tiny presets that ship pre-trained (graft.models.tiny_shipped.SHIPPED_PRESETS).

Run after a change to one of their specs or to the pinned torch / transformers / tokenizers
(a fast test fails until then): each preset is pre-trained from its spec into a fresh cache, never
copied from an earlier shipped entry, and its files are recorded with their checksums in
src/graft/models/shipped/, replacing the entry of the old key. Beside them, `machine.json` notes
the recording machine's floats (`float_probe`): a fresh build gives the very bytes only where
they are the same (tests/test_tiny_shipped.py).

    .venv/bin/python scripts/ship_tiny.py [PRESET ...] [--out DIR]

The recorded entries' floats are those of AVX2 kernels: on a machine with wider vectors,
`ATEN_CPU_CAPABILITY=avx2` in the environment computes them.
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config

from graft.models.common import state_fingerprint
from graft.models.tiny import build_tiny
from graft.models.tiny_shipped import MACHINE, SHIPPED_PRESETS, record


def float_probe() -> dict[str, object]:
    """This machine's floats on the kernels a build runs, apart from graft's build code (which the
    recorded files check): the CPU's vector capability, and per architecture the logits and the
    weights of a small randomly initialised model after two clipped AdamW steps on random tokens.
    Two machines with equal probes build a preset to the same bytes."""
    probe = {}
    shape = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1)
    shape |= dict(num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=True)
    for arch, config in (("llama", LlamaConfig(**shape)), ("qwen2", Qwen2Config(**shape))):
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config)
        ids = torch.randint(0, 64, (4, 24))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.98), weight_decay=0.01)
        for _ in range(2):
            out = model(input_ids=ids, labels=ids)
            opt.zero_grad(set_to_none=True)
            out.loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
        state = {"logits": out.logits.detach(), **model.state_dict()}
        probe[arch] = state_fingerprint(state)
    return {
        "cpu": torch.backends.cpu.get_cpu_capability(),
        "arch": platform.machine(),
        "torch": torch.__version__,
        "probe": probe,
    }


def ship(presets: tuple[str, ...], root: Path | None = None) -> list[Path]:
    """Pre-train each preset afresh and record it, with this machine's `float_probe`; the
    recorded entries."""
    out = []
    machine = json.dumps(float_probe(), indent=2, sort_keys=True) + "\n"
    with tempfile.TemporaryDirectory(prefix="graft-ship-") as cache:
        for name in presets:
            built = build_tiny(name, cache_dir=Path(cache), progress=True, use_shipped=False)
            entry = record(built, root)
            (entry / MACHINE).write_text(machine)
            out.append(entry)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("presets", nargs="*", default=list(SHIPPED_PRESETS))
    parser.add_argument(
        "--out", type=Path, default=None, help="record there (default: the package's entries)"
    )
    args = parser.parse_args()
    for path in ship(tuple(args.presets), args.out):
        print(path)


if __name__ == "__main__":
    main()
