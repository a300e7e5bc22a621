"""What a training run shows while it runs: a progress bar with each policy's training reward."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from tqdm.auto import tqdm


def progress_bar(run_dir: Path, *, start: int, steps: int, enabled: bool) -> tqdm:
    """The steps from `start` to `steps`, as a bar named after the run directory."""
    return tqdm(
        range(start, steps),
        initial=start,
        total=steps,
        desc=f"train {run_dir.name}",
        disable=not enabled,
        dynamic_ncols=True,
    )


def reward_postfix(metrics: Mapping[str, float], prefix: Mapping[str, str]) -> dict[str, str]:
    """Each policy's mean training reward of the step (just `reward` when one policy trains)."""
    out = {}
    for name, pre in prefix.items():
        key = pre + "reward/mean"
        if key in metrics:
            out[name if pre else "reward"] = f"{metrics[key]:.3f}"
    return out


def say(line: str) -> None:
    """A plain line that does not tear the progress bar."""
    tqdm.write(line)


def warn(message: str) -> None:
    """A warning line that does not tear the progress bar."""
    tqdm.write(f"warning: {message}")
