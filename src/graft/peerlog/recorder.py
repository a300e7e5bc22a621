"""Recording every rollout of a training run (used, replaced and failed alike) in its store."""

from __future__ import annotations

import importlib.metadata
import json
import platform
import subprocess
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from graft.config import Config, to_dict
from graft.peerlog.writer import LogWriter, provenance
from graft.types import Group
from graft.verify.registry import resolve_verifier

PACKAGES = ("graft-rl", "torch", "transformers", "tokenizers", "pyarrow", "math-verify", "numpy")


def run_id_for(run_dir: Path) -> str:
    """The run's id, created on first start and kept in RUN_DIR/run.json (a resume reuses it)."""
    path = run_dir / "run.json"
    if path.is_file():
        return json.loads(path.read_text())["run_id"]
    run_id = f"{run_dir.name}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
    run_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"run_id": run_id}))
    return run_id


def _git_commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, check=False
        )
        return out.stdout.strip() if out.returncode == 0 else ""
    except (OSError, subprocess.SubprocessError):
        return ""


def run_metadata(cfg: Config, run_id: str) -> dict[str, Any]:
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = ""
    return {
        "run_id": run_id,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "config": to_dict(cfg),
        "versions": {"python": platform.python_version(), **versions},
        "git_commit": _git_commit(),
    }


class Recorder:
    def __init__(
        self,
        cfg: Config,
        run_dir: Path,
        *,
        verifier: str,
        policies: Mapping[str, Mapping[str, str]],
    ) -> None:
        run_id = run_id_for(run_dir)
        self.uri = cfg.store.path or str(run_dir / "trajectories")
        meta = run_metadata(cfg, run_id)
        judge = resolve_verifier(verifier)
        if judge.kind.runs_code:  # what the sandbox enforced for this run's rewards
            from graft.sandbox.doctor import summary

            meta["sandbox"] = summary()
        self.provenance = {
            name: provenance(run_id, name, info, verifier, cfg.rollout, version=judge.version)
            for name, info in policies.items()
        }
        background = cfg.store.background
        self.writer = LogWriter(self.uri, run_id=run_id, run_meta=meta,
                                provenance=self.provenance, background=background)  # fmt: skip

    def record(
        self,
        step: int,
        groups: Mapping[str, Sequence[Group]],
        replaced: Mapping[str, frozenset[int]],
        extra: Mapping[str, Sequence[tuple[int, Group]]] | None = None,
    ) -> None:
        """One step's groups of every policy (round 0), then the groups its further sampling
        rounds drew (`extra`: per policy, each group with its round; dynamic sampling)."""
        extra = extra or {}
        for name, own in groups.items():
            if name not in self.provenance:  # a stored peer's groups are not this run's
                continue
            more = extra.get(name, ())
            gs = (*own, *(g for _, g in more))
            flags = [i in replaced.get(name, frozenset()) for i in range(len(gs))]
            rounds = [0] * len(own) + [r for r, _ in more]
            self.writer.write(name, step, gs, replaced=flags, rounds=rounds)

    def note_cost(self, cumulative: Mapping[str, float]) -> None:
        """The run's cost so far (`cost/cum/...` metrics) into the store's run metadata."""
        self.writer.update_run_meta(cost={k: float(v) for k, v in sorted(cumulative.items())})

    def rollback(self, next_step: int) -> None:
        """On resume: drop shards of steps at or after `next_step` (they are run again)."""
        self.writer.store.rollback(after_step=next_step - 1)

    @property
    def seconds_writing(self) -> float:
        return self.writer.store.seconds_writing

    def flush(self) -> None:
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()
