"""A study's recorded answer: its primary cells, kept in the package with the commit that ran it.

`graft demo` runs one seed (an anecdote) in minutes; what it can say about the method comes from
the pre-registered study it belongs to (docs/evidence.md). When the study finishes, its results
are reduced here to the cells the main job shows: GRAFT (the paper's weight) minus GRPO on each
model's stuck skill, at the last step and at equal compute, with the 95% interval, the Holm
verdict and the per-seed differences. `graft demo --study code` writes that reduction next to its
results (`recorded.json`); a maintainer copies it to `graft/evidence/recorded/<study>.json` and
commits it, and the demo reads it from there, naming the commit the study ran at. Nothing here is
typed in by hand.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from graft.errors import DataError
from graft.evidence.compare_report import final_point, fmt_interval
from graft.evidence.pairs import MODELS, PAIRS

RECORDED_DIR = Path(__file__).parent / "recorded"
SHOWN = "GRAFT (paper weight)"
"""The variant the main job shows, fixed by its rule in docs/evidence.md."""


def source_commit() -> str:
    """The short commit of the working tree, `-dirty` when it has uncommitted changes; "" where
    there is no git."""
    try:
        head = subprocess.run(
            ["git", "describe", "--always", "--dirty", "--abbrev=7"],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
            cwd=Path(__file__).parent,
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return head.stdout.strip() if head.returncode == 0 else ""


def _cell(compare: Mapping[str, Any], model: str, key: str, where: str) -> dict[str, Any]:
    vs = compare["policies"][model]["vs_baseline"][SHOWN]
    points = vs["metrics"][key]
    point = final_point(list(points))
    iv = points[point]
    base = compare["policies"][model]["methods"][compare["baseline"]]["points"][key]
    return {
        "model": model,
        "where": where,
        "mean": iv["mean"],
        "low": iv["low"],
        "high": iv["high"],
        "n": iv["n"],
        "holm_p": iv.get("holm_p"),
        "significant": bool(iv.get("holm_significant")),
        "per_seed": vs["differences"][key][point],
        "seeds": vs["seeds"],
        "grpo_start": base["step_0"]["mean"] if "step_0" in base else None,
    }


def reduce(results: Mapping[str, Any]) -> dict[str, Any]:
    """The recorded answer of a finished study's results.json content."""
    s = results["settings"]
    pair = PAIRS[s.get("pair", "mul")]
    (regime,) = results["regimes"]  # the code study has one regime
    compare = results["regimes"][regime]["compare"]
    equal = compare["equal_compute"]
    cells = []
    for m in MODELS:
        key = next(
            k
            for k in compare["policies"][m]["vs_baseline"][SHOWN]["metrics"]
            if f"/{pair.weak[m]}/avg@" in k
        )
        cells.append({**_cell(compare, m, key, f"step {s['steps']}"), "skill": pair.weak[m]})
        cells.append({**_cell(equal, m, key, f"equal {equal['axis']}"), "skill": pair.weak[m]})
    return {
        "study": s["mode"],
        "pair": pair.name,
        "method": SHOWN,
        "baseline": compare["baseline"],
        "seeds": s["seeds"],
        "tests": compare.get("primary", {}).get("tests"),
        "commit": ", ".join(results.get("run_commits") or [results.get("commit", "")]),
        "command": f"graft demo --study {s['mode'].removeprefix('study-')}",
        "cells": cells,
    }


def load(name: str, root: Path | None = None) -> dict[str, Any] | None:
    """A committed recorded answer (in `root`, default the package's), or None where the study
    has not been recorded."""
    path = (root or RECORDED_DIR) / f"{name}.json"
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
        if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
            raise ValueError("no list of cells")
    except (OSError, ValueError) as err:
        raise DataError(f"{path}: not a recorded study answer ({err})") from None
    return data


def answer_lines(recorded: Mapping[str, Any] | None, study: str = "code") -> list[str]:
    """The opening of results.md: the study's answer with its uncertainty, or that there is none
    yet."""
    if recorded is None:
        return [
            f"**The answer is not recorded yet.** The pre-registered {study} study "
            f"(docs/evidence.md) has no recorded result at this version: run "
            f"`graft demo --study {study}` (hours on 2 cores) for it. What follows is one seed.",
        ]
    seeds = recorded["seeds"]
    head = (
        f"**The answer** (the pre-registered {study} study, {len(seeds)} seeds {seeds}, run at "
        f"commit {recorded['commit'] or 'unknown'}; Holm over its {recorded['tests']} primary "
        f"tests): {recorded['method']} minus {recorded['baseline']} on each model's stuck skill,"
        " in points:"
    )
    lines = [head, ""]
    for c in recorded["cells"]:
        verdict = "significant" if c["significant"] else "inside the noise"
        lines.append(f"- {c['model']} `{c['skill']}`, {c['where']}: {fmt_interval(c)} ({verdict})")
    return lines
