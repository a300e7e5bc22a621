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
from graft.evidence.stats import MIN_SEEDS

RECORDED_DIR = Path(__file__).parent / "recorded"
SHOWN = "GRAFT (paper weight)"
"""The variant the main job shows, fixed by its rule in docs/evidence.md."""
ALTERNATIVE = "SFT on the peer, then GRPO"
"""The strongest alternative the code-pair study measured beside GRAFT, shown with it."""
CODE_SECTION = "## GRAFT where its claim applies: the code-pair study"


def clean_commits(commits: str) -> str:
    """`commits` (comma-separated) when every one names a committed tree; DataError for one
    that is `-dirty` (uncommitted changes) or unknown: a recorded answer is reproducible from
    its commits alone."""
    named = [c.strip() for c in commits.split(",") if c.strip()]
    bad = [c for c in named if c.endswith("-dirty") or c == "unknown"]
    if bad or not named:
        raise DataError(
            f"a recorded answer names only clean commits, not {', '.join(bad) or 'none'}: run "
            "those runs again at a commit (the study reuses the others)"
        )
    return ", ".join(named)


def _points(text: str) -> float:
    return round(float(text.replace("+", "")) / 100, 6)


def alternative_from_benchmarks(text: str, method: str = ALTERNATIVE) -> dict[str, Any]:
    """`method`'s stuck-skill cells (step 40 and equal FLOPs) and its FLOPs over GRPO's, read
    from the code-pair study's tables in BENCHMARKS.md (per seed rounded to 0.1 points there)."""
    section = text[text.index(CODE_SECTION) :]
    end = section.find("\n## ", 1)
    section = section if end < 0 else section[:end]
    cells = []
    for line in section.splitlines():
        parts = [p.strip() for p in line.strip("|").split("|")]
        if len(parts) != 5 or parts[1] != method or "(stuck)" not in parts[0]:
            continue
        model, skill = parts[0].split()[0], parts[0].split("`")[1]
        mean, ci = parts[3].split(" [")
        low, high = ci.split("]")[0].split(", ")
        cells.append({
            "model": model, "skill": skill, "where": parts[0].split("), ")[1],
            "mean": _points(mean), "low": _points(low), "high": _points(high),
            "holm_p": float(parts[4]), "significant": parts[3].endswith("*"),
            "per_seed": [_points(v) for v in parts[2].split(" / ")],
        })  # fmt: skip
    cost = {}
    for line in section.splitlines():
        parts = [p.strip() for p in line.strip("|").split("|")]
        if len(parts) == 7 and parts[-1].endswith("x"):
            cost[parts[0]] = float(parts[-1].strip("+x"))
    ratio = cost[f"{method}: the GRPO phase"] + cost["the same: its two SFT phases (llama, qwen)"]
    source = "BENCHMARKS.md, the code-pair study's tables (per seed to 0.1 points)"
    return {"method": method, "cells": cells, "flops_vs_grpo": round(ratio, 2),
            "graft_flops_vs_grpo": cost[SHOWN], "source": source}  # fmt: skip


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
        "commit": clean_commits(", ".join(results.get("run_commits") or [results["commit"]])),
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
        clean_commits(str(data.get("commit", "")))
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
    alt = recorded.get("alternative")
    if alt:
        at40 = [c for c in alt["cells"] if c["where"] == recorded["cells"][0]["where"]]
        moves = "; ".join(f"{c['model']} `{c['skill']}` {fmt_interval(c)}" for c in at40)
        lines += ["", (
            f"The strongest alternative measured beside it, {alt['method']} (the same study, "
            f"minus GRPO at the same step): {moves}, for about {alt['flops_vs_grpo']:.1f}x "
            f"GRPO's FLOPs against GRAFT's {alt['graft_flops_vs_grpo']:.2f}x."
        )]  # fmt: skip
    return lines


def reuse_lines(recorded: Mapping[str, Any] | None) -> list[str]:
    """The reuse study's answer (docs/evidence.md, "Trajectory reuse where GRAFT works"): each
    stored log minus GRPO on the stuck skills, and how much of the online gain log a keeps; or
    that it is not recorded yet."""
    if recorded is None:
        return [
            "**Reuse is not recorded yet.** The pre-registered reuse study (each model alone "
            "against a stored log of its peer; docs/evidence.md) has no recorded result at this "
            "version: `graft demo --study reuse` runs it (hours on 2 cores).",
        ]
    lines = [
        f"**Reuse** (the pre-registered reuse study, {len(recorded['seeds'])} seeds, run at "
        f"commit {recorded['commit']}; Holm over its {recorded['tests']} primary tests): each "
        "model trained alone against a stored log of its peer, minus GRPO on its stuck skill "
        "at the last step, in points:",
        "",
    ]
    for c in recorded["cells"]:
        verdict = "significant" if c["significant"] else "inside the noise"
        lines.append(f"- {c['label']}, {c['model']} `{c['skill']}`: {fmt_interval(c)} ({verdict})")
    for model, r in recorded.get("retention", {}).items():
        lines.append(f"- {model}: the same seed's log keeps {_ratio(r)} of the online gain")
    return lines


def _cells(cells: list[Mapping[str, Any]]) -> str:
    def verdict(c: Mapping[str, Any]) -> str:
        if c["significant"]:
            return "significant"
        n = c.get("n") or 0
        return "inside the noise" if n >= MIN_SEEDS else f"no verdict: {n} seed(s)"

    return "; ".join(f"{c['model']} `{c['skill']}` {fmt_interval(c)} ({verdict(c)})" for c in cells)


def trio_lines(recorded: Mapping[str, Any] | None) -> list[str]:
    """The three-model study's answer (docs/evidence.md, "Three models"), one line per question:
    each pair's GRAFT minus GRPO on the stuck skill the peer owns; the pool minus that pair; how
    much of the pair's gain a stored GRPO log of the peer keeps; and which own-skill arm moves
    the own-skill cost. Or that it is not recorded yet."""
    if recorded is None:
        return [
            "**Three models are not recorded yet.** The pre-registered three-model study (llama, "
            "qwen and gpt2: each pair, the pool, one log for many receivers, the own-skill trade; "
            "docs/evidence.md) has no recorded result at this version: `graft demo --study trio` "
            "runs it (hours on 2 cores).",
        ]
    cells = recorded["cells"]
    head = (f"**Three models** (the pre-registered three-model study, {len(recorded['seeds'])} "
            f"seeds, run at commit {recorded['commit']}; Holm over its {recorded['tests']} "
            "primary tests; points at the last step):")  # fmt: skip
    kept = "; ".join(
        f"{r['receiver']} from {r['peer']} (`{r['skill']}`) {_ratio(r)}"
        for r in recorded["retention"].values()
    )
    labels = recorded["trade_labels"]
    trade = "; ".join(
        f"{labels.get(c['run'].removeprefix('trade_'), c['run'])}, {c['model']} {fmt_interval(c)}"
        for c in recorded["trade"]
    )
    pairs = _cells([c for c in cells if c["kind"] == "pair"])
    pool = _cells([c for c in cells if c["kind"] == "pool"])
    return [
        head,
        "",
        f"- Other pairs (GRAFT in the pair minus GRPO): {pairs}",
        f"- The pool of three minus the pair holding the skill's owner: {pool}",
        "- One log, many receivers (a stored GRPO log's gain over the pair's online gain): "
        f"{kept or 'not run'}",
        "- The own-skill trade (each arm's own skill minus the pair's GRAFT, exploratory): "
        f"{trade or 'not run'}",
    ]


def _ratio(r: Mapping[str, Any]) -> str:
    if r.get("low") is None:
        return "undefined (the online gain's interval contains 0)"
    return f"{r['ratio']:.2f} [{r['low']:.2f}, {r['high']:.2f}]"
