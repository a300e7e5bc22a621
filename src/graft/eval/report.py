"""Results people look at: the paper-style Markdown table and the training-curve plots."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from graft.rundir import policy_prefix, read_metrics


def _pct(entry: Mapping[str, Any]) -> str:
    return f"{100 * entry['mean']:.1f} ± {100 * entry['std']:.1f}"


def markdown_table(
    result: Mapping[str, Any], *, baseline: str | None = None, careful: bool = False
) -> str:
    """Methods x benchmarks, avg@k in percent as mean ± std over runs, like the paper's Table 1;
    with a baseline row, the last column is each row's average minus the baseline's. With
    `careful`, the same under the careful reading of what follows the final box."""
    models = result["models"]
    suites = result["settings"]["suites"]
    k = result["settings"]["k"]
    key = f"careful_avg@{k}" if careful else f"avg@{k}"
    if baseline is not None and baseline not in models:
        raise ValueError(f"baseline {baseline!r} is not among the evaluated models {list(models)}")
    head = ["Method", *suites, "Avg."] + ([f"Δ vs {baseline}"] if baseline else [])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, m in models.items():
        cells = [name, *(_pct(m["suites"][s][key]) for s in suites), _pct(m["average"][key])]
        if baseline:
            delta = m["average"][key]["mean"] - models[baseline]["average"][key]["mean"]
            cells.append("—" if name == baseline else f"{100 * delta:+.1f}")
        lines.append("| " + " | ".join(cells) + " |")
    s = result["settings"]
    limits = {name: m.get("settings", s)["max_new_tokens"] for name, m in models.items()}
    tokens = (
        f"{s['max_new_tokens']} new tokens"
        if len(set(limits.values())) <= 1
        else "new tokens " + ", ".join(f"{name} {n}" for name, n in limits.items())
    )
    note = (
        f"\n{key} in percent (pass@1 as the mean over k = {k} samples), mean ± std over "
        f"{s['runs']} runs; temperature {s['temperature']}, top-p {s['top_p']}, {tokens}."
    )
    if careful:
        note += (
            " Careful reading: a right box followed by another value (a remark, another"
            " quantity) counts here; the training verdict above withholds it."
        )
    return "\n".join(lines) + "\n" + note + "\n"


def has_careful(result: Mapping[str, Any]) -> bool:
    """Does every model's average carry the careful reading (a verifier that reads tails
    strictly: `graft.eval.evaluate.reads_tails_strictly`)?"""
    k = result["settings"]["k"]
    return bool(result["models"]) and all(
        f"careful_avg@{k}" in m["average"] for m in result["models"].values()
    )


def verdict_table(result: Mapping[str, Any]) -> str:
    """Per model and suite: the golds the verifier refused, and why the responses were not
    correct (every reason that occurred, summed over runs and samples)."""
    suites = result["settings"]["suites"]
    sources = result["settings"].get("datasets", {})
    lines = [
        "| model | suite | refused golds | not correct, by reason |",
        "|---|---|---|---|",
    ]
    for name, m in result["models"].items():
        for suite in suites:
            entry = m["suites"][suite]
            refused = int(sources.get(suite, {}).get("unparseable_golds", 0))
            total = entry["problems"]
            reasons = ", ".join(
                f"{reason} {count}"
                for reason, count in sorted(entry.get("verdict_reasons", {}).items())
                if count
            )
            cells = [name, suite, f"{refused} of {total}", reasons or "-"]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_eval(out_dir: Path, result: Mapping[str, Any], *, baseline: str | None = None) -> str:
    """eval.json and eval.md in `out_dir`; returns the Markdown table."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "eval.json").write_text(json.dumps(result, indent=2, sort_keys=True))
    table = markdown_table(result, baseline=baseline)
    if has_careful(result):
        table += "\n" + markdown_table(result, baseline=baseline, careful=True)
    verdicts = verdict_table(result)
    (out_dir / "eval.md").write_text(f"{table}\n## Verdicts\n\n{verdicts}")
    return f"{table}\n{verdicts}"


def _policies(records: Sequence[Mapping[str, Any]]) -> list[str]:
    names = sorted({k.split("/")[1] for r in records for k in r if k.startswith("m/")})
    return names or [""]


def _series(records, policy: str, key: str) -> tuple[list[int], list[float]]:
    full = policy_prefix(policy, several=bool(policy)) + key
    pts = [(r["step"], r[full]) for r in records if isinstance(r.get(full), int | float)]
    return [p[0] for p in pts], [p[1] for p in pts]


def _eval_keys(records, policy: str) -> list[str]:
    prefix = policy_prefix(policy, several=bool(policy))
    keys = set()
    for r in records:
        for k in r:
            if (
                k.startswith(prefix + "eval/")
                and "/avg@" in k
                and k.count("/") == prefix.count("/") + 2
            ):
                keys.add(k[len(prefix) :])
    return sorted(keys)


def plot_runs(run_dirs: Sequence[str | Path], out: str | Path) -> dict[str, int]:
    """Reward (training) and held-out accuracy curves per policy, several runs overlaid.

    Returns how many curves each panel holds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_r, ax_e) = plt.subplots(1, 2, figsize=(12, 4.5))
    counts = {"reward": 0, "eval": 0}
    for run_dir in run_dirs:
        records = read_metrics(run_dir)
        label_run = Path(run_dir).name
        for policy in _policies(records):
            label = f"{label_run}/{policy}" if policy else label_run
            steps, values = _series(records, policy, "reward/mean")
            if steps:
                ax_r.plot(steps, values, label=label)
                counts["reward"] += 1
            for key in _eval_keys(records, policy):
                steps, values = _series(records, policy, key)
                ax_e.plot(steps, values, marker="o", label=f"{label} {key[len('eval/') :]}")
                counts["eval"] += 1
    ax_r.set(title="training reward (mean over the rollout batch)", xlabel="step", ylabel="reward")
    ax_e.set(title="held-out accuracy", xlabel="step", ylabel="avg@k")
    for ax in (ax_r, ax_e):
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return counts
