"""The run directory: resolved config, metrics log, checkpoints.

    RUN_DIR/config.yaml          the resolved config (every field, defaults included)
    RUN_DIR/metrics.jsonl        one JSON object per step: {"step": s, "<metric>": value, ...}
    RUN_DIR/checkpoints/step_NNNNNN/<policy>/   model + tokenizer (save_pretrained), optimizer.pt
        (a LoRA policy: adapter_model.safetensors + adapter_config.json instead of the model)
    RUN_DIR/checkpoints/step_NNNNNN/trainer_state.json   next step, RNG states, versions
    RUN_DIR/summary.json         final metrics of the run
    RUN_DIR/trackers.json        the experiment-tracker runs this run logs to (run.report_to)
    RUN_DIR/tensorboard/, wandb/  those trackers' files, when run.report_to names them
    RUN_DIR/curves.png           the run's curves, for the trackers (when run.report_to names any)

    RUN_DIR/checkpoints/step_NNNNNN/MANIFEST.json   sha256 and size of every other file in it
    RUN_DIR/checkpoints/best/<policy>/MANIFEST.json  the same, per best-by-validation policy

A checkpoint is written into a temporary folder; once every file in it is complete and fsynced,
its MANIFEST.json is written (temporary file, fsync, rename), and the folder is renamed into
place. A resume proves every file of the newest checkpoint against its manifest and falls back to
the newest intact one, naming what is damaged: a checkpoint without a manifest (from a graft
before manifests, or tampered with), with a file missing, changed or not listed, is damaged.

`trackers` hands each step's metrics to the experiment trackers `run.report_to` names.

A directory that holds a run is never reused implicitly: a new run there needs `--overwrite`,
which moves the old run aside (`RUN_DIR.old-N`) rather than deleting it.
"""

from graft.rundir.checkpoints import (
    CHECKPOINT_PREFIX,
    CHUNK_BYTES,
    MANIFEST,
    MANIFEST_FORMAT,
    begin_checkpoint,
    checkpoint_dirs,
    checkpoint_problems,
    commit_checkpoint,
    intact_checkpoint,
    latest_checkpoint,
    manifest_problems,
    read_best,
    read_trainer_state,
    rng_state,
    save_best,
    set_aside,
    set_rng_state,
    verify_checkpoint,
    write_manifest,
)
from graft.rundir.files import (
    RUN_FILES,
    MetricsLog,
    check_metrics,
    holds_run,
    is_disk_full,
    is_timing,
    move_aside,
    policy_prefix,
    read_metrics,
    refuse_reuse,
    run_then_close,
    same_models,
    write_config,
    write_json,
    write_summary,
)

__all__ = [
    "CHECKPOINT_PREFIX",
    "CHUNK_BYTES",
    "MANIFEST",
    "MANIFEST_FORMAT",
    "RUN_FILES",
    "MetricsLog",
    "begin_checkpoint",
    "check_metrics",
    "checkpoint_dirs",
    "checkpoint_problems",
    "commit_checkpoint",
    "holds_run",
    "intact_checkpoint",
    "is_disk_full",
    "is_timing",
    "latest_checkpoint",
    "manifest_problems",
    "move_aside",
    "policy_prefix",
    "read_best",
    "read_metrics",
    "read_trainer_state",
    "refuse_reuse",
    "rng_state",
    "run_then_close",
    "same_models",
    "save_best",
    "set_aside",
    "set_rng_state",
    "verify_checkpoint",
    "write_config",
    "write_json",
    "write_manifest",
    "write_summary",
]
