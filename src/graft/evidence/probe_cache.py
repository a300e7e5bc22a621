"""The rollouts of each probed model, kept per step so that probing a third model samples only
that one (and an interrupted probe resumes where it stopped).

A model's folder is named by a digest of everything that decides its samples: its name (the
rollout seeds derive from it), its weights' fingerprint, its config entry (tokenizer, templates,
dtype), the rollout settings, the run seed, the task and the problem limit. Files are JSON
(floats written exactly) and replaced atomically; one that cannot be read is sampled again.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from graft.config import Config, to_dict
from graft.types import Completion, Problem, Rollout

IRRELEVANT = ("optim", "num_gpus", "num_cpus", "shards")
"""Model settings that change no sample."""


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]


def to_json(r: Rollout) -> dict[str, Any]:
    p = r.problem
    return {
        "problem": {"prompt": p.prompt, "gold": p.gold, "skill": p.skill, "id": p.id},
        "policy": r.policy,
        "prompt_ids": list(r.prompt_ids),
        "completions": [
            [c.text, list(c.token_ids), list(c.logprobs), c.finish_reason] for c in r.completions_G
        ],
    }


def from_json(d: Mapping[str, Any]) -> Rollout:
    return Rollout(
        problem=Problem(**d["problem"]),
        policy=d["policy"],
        prompt_ids=tuple(d["prompt_ids"]),
        completions_G=tuple(
            Completion(text, tuple(ids), tuple(float(x) for x in lps), reason)
            for text, ids, lps, reason in d["completions"]
        ),
    )


class RolloutCache:
    def __init__(
        self,
        root: Path,
        cfg: Config,
        revisions: Mapping[str, str],
        *,
        limit: int = 0,
        split: str = "train",
    ) -> None:
        common = {
            "rollout": to_dict(cfg.rollout),
            "seed": cfg.run.seed,
            "task": to_dict(cfg.task),
            "limit": limit,
            **({"split": split} if split != "train" else {}),  # train: the keys of before
        }
        self.dirs: dict[str, Path] = {}
        for m in cfg.models:
            entry = {k: v for k, v in to_dict(m).items() if k not in IRRELEVANT}
            key = _digest({**common, "model": entry, "revision": revisions[m.name]})
            self.dirs[m.name] = root / f"{m.name}-{key}"

    def _path(self, name: str, step: int) -> Path:
        return self.dirs[name] / f"step_{step:06d}.json"

    def get(self, names: Sequence[str], step: int) -> dict[str, list[Rollout]]:
        """The step's rollouts of every named model the cache holds."""
        out = {}
        for name in names:
            path = self._path(name, step)
            try:
                out[name] = [from_json(r) for r in json.loads(path.read_text())]
            except (OSError, ValueError, KeyError, TypeError):
                continue  # not there, or unreadable: sampled again
        return out

    def put(self, name: str, step: int, rollouts: Sequence[Rollout]) -> None:
        path = self._path(name, step)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps([to_json(r) for r in rollouts]))
        os.replace(tmp, path)
