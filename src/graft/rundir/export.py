"""`graft export-merged`: one policy of a run as a plain transformers model.

A LoRA policy's checkpoint holds only its adapter; the export loads the base model the adapter
names, merges the adapter into its weights and writes a model (and tokenizer) that
`AutoModelForCausalLM.from_pretrained` loads without peft or graft. A fully fine-tuned policy's
checkpoint is written the same way, so one command serves both.

    graft export-merged runs/lora --policy llama --out merged/llama
    graft export-merged runs/lora --policy llama --checkpoint best --out merged/llama-best
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path

from graft.config.lib import ConfigError


def _checkpoint(run_dir: Path, which: str) -> Path:
    from graft.rundir import latest_checkpoint

    if which == "final":
        found = latest_checkpoint(run_dir)
        if found is None:
            raise ConfigError(f"RUN_DIR {run_dir}: no checkpoint in {run_dir / 'checkpoints'}")
        return found
    folder = run_dir / "checkpoints" / which
    if not folder.is_dir() or "/" in which or which.startswith("."):
        raise ConfigError(
            f"--checkpoint {which!r}: no such checkpoint in {run_dir / 'checkpoints'}"
        )
    return folder


def export_merged(run_dir: Path, out: Path, *, policy: str | None, checkpoint: str) -> Path:
    """Write the policy's checkpoint as a plain model into `out`; returns the checkpoint read."""
    from graft.config import Config, LoRAConfig, load_config
    from graft.models import load_model_and_tokenizer
    from graft.preflight import check_writable_dir
    from graft.rundir import verify_checkpoint

    if not (run_dir / "config.yaml").is_file():
        raise ConfigError(f"RUN_DIR {run_dir}: not a run directory (no config.yaml)")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ConfigError(f"--out {out}: exists and is not an empty directory")
    for kept in (run_dir / "checkpoints", run_dir / "trajectories"):
        if kept.resolve() in (out.resolve(), *out.resolve().parents):
            raise ConfigError(
                f"--out {out}: inside {kept}, which graft train manages; choose another"
            )
    check_writable_dir(out, "--out")
    cfg = load_config(Config, run_dir / "config.yaml")
    names = [m.name for m in cfg.models]
    if policy is None and len(names) > 1:
        raise ConfigError(f"--policy: the run trains {len(names)} policies, name one of {names}")
    name = policy or names[0]
    if name not in names:
        raise ConfigError(f"--policy {name!r}: the run's policies are {names}")
    index = names.index(name)
    folder = _checkpoint(run_dir, checkpoint) / name
    if not folder.is_dir():
        raise ConfigError(f"--checkpoint {checkpoint!r}: no folder {folder}")
    verify_checkpoint(folder)  # every file as it was written (MANIFEST.json)
    model_cfg = dataclasses.replace(
        cfg.models[index], path=str(folder), tokenizer="", revision="", lora=LoRAConfig()
    )
    model, tokenizer = load_model_and_tokenizer(model_cfg, key=f"models.{index}", device="cpu")
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    try:  # nothing half-written is left behind, whatever stops the export
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        if out.exists():
            out.rmdir()
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return folder
