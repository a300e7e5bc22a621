"""The demo's results.md: the text a reader sees, written from results.json's content."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from graft.evidence.compare import CURVE_MEAN
from graft.evidence.compare_report import (
    INTERVAL_RULE,
    cost_table,
    final_point,
    fmt_interval,
    regime_lines,
)
from graft.evidence.compute_axis import AXES
from graft.evidence.pairs import MODELS, PAIRS, Pair
from graft.evidence.stats import MIN_SEEDS


def _columns(compare: Mapping[str, Any], pair: Pair) -> list[tuple[str, str, str]]:
    """(model, header, metric key) for weak skill, strong skill and mix of each model."""
    any_policy = next(iter(compare["policies"].values()))
    mix = next(k for k in next(iter(any_policy["methods"].values()))["points"] if k.count("/") == 2)
    suite, k = mix.split("/")[1], mix.rsplit("@", 1)[1]
    cols = []
    for m in MODELS:
        for kind, skill in (("weak", pair.weak[m]), ("strong", pair.strong[m])):
            cols.append((m, f"{m} {pair.short(skill)} ({kind})", f"eval/{suite}/{skill}/avg@{k}"))
        cols.append((m, f"{m} mix", mix))
    return cols


def accuracy_table(compare: Mapping[str, Any], labels: Mapping[str, str], pair: Pair) -> list[str]:
    cols = _columns(compare, pair)
    lines = [
        "| Method | " + " | ".join(h for _, h, _ in cols) + " |",
        "|---" * (len(cols) + 1) + "|",
    ]
    grpo = compare["baseline"]
    start = []
    for m, _, key in cols:
        pts = compare["policies"][m]["methods"][grpo]["points"][key]
        start.append(f"{100 * pts['step_0']['mean']:.1f}")
    lines.append("| start (pre-trained) | " + " | ".join(start) + " |")
    for label in labels.values():
        if label not in compare["policies"][MODELS[0]]["methods"]:
            continue
        cells = []
        for m, _, key in cols:
            pts = compare["policies"][m]["methods"][label]["points"][key]
            cells.append(f"{100 * pts[final_point(list(pts))]['mean']:.1f}")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines


def delta_rows(compare: Mapping[str, Any], point: str, pair: Pair) -> tuple[list[str], list[str]]:
    """Δ vs GRPO at the final evaluation (point="final") or over the curve, and the primary
    cells that are significant after Holm's correction (starred; the others are exploratory)."""
    cols = _columns(compare, pair)
    lines = [
        "| Δ vs GRPO | " + " | ".join(h for _, h, _ in cols) + " |",
        "|---" * (len(cols) + 1) + "|",
    ]
    significant = []
    labels = list(compare["policies"][MODELS[0]]["vs_baseline"])
    for label in labels:
        cells = []
        for m, header, key in cols:
            pts = compare["policies"][m]["vs_baseline"][label]["metrics"][key]
            iv = pts[final_point(list(pts)) if point == "final" else CURVE_MEAN]
            won = bool(iv.get("holm_significant"))
            cells.append(fmt_interval(iv) + (" *" if won else ""))
            if won:
                where = "final" if point == "final" else "mean over the curve"
                significant.append(f"{label} on {header}, {where}: {fmt_interval(iv)}")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines, significant


def retention_lines(compare: Mapping[str, Any]) -> list[str]:
    out = []
    for model, suites in compare.get("retention", {}).items():
        for suite, r in suites.items():
            ratio = r["ratio"]
            if len(r["seeds"]) < 2:
                rtext = "needs two seeds or more"
            elif ratio["ratio"] is None or ratio["low"] is None:
                rtext = "undefined (the online gain's interval contains 0)"
            else:
                rtext = (
                    f"{100 * ratio['ratio']:.0f}% (bootstrap over seeds {100 * ratio['low']:.0f}% "
                    f"to {100 * ratio['high']:.0f}%)"
                )
            diff = fmt_interval(r["stored_minus_online"])
            out.append(f"- {model} {suite}: stored − online {diff}; retention {rtext}")
    return out


def regime_section(
    name: str, regime: Mapping[str, Any], labels: Mapping[str, str], pair: Pair
) -> list[str]:
    compare = regime["compare"]
    text = [f"## Regime: {name}", "", pair.regime_text.get(name, ""), ""]
    for direction, d in regime["complementarity"]["directions"].items():
        src, dst = direction.split("->")
        text.append(
            f"- before training, on {d['receiver_all_fail']} held-out prompts where {dst} fails "
            f"all 8 samples, {src}'s group is mixed on {100 * d['fraction']:.1f}%"
        )
    text += ["", "Held-out accuracy (percent, mean over seeds) at the last evaluation:", ""]
    text += [*accuracy_table(compare, labels, pair), ""]
    final, sig_final = delta_rows(compare, "final", pair)
    curve, sig_curve = delta_rows(compare, "curve", pair)
    text += [
        "Difference to GRPO at the last evaluation (points, 95% CI over seeds; * a primary "
        "endpoint significant after Holm's correction; strong-skill cells are exploratory):"
    ]
    text += ["", *final, "", "Difference to GRPO, mean over the evaluations after step 0:", ""]
    text += [*curve, ""]
    if "equal_compute" in compare:  # the studies with a second axis, and what runs cost
        axis = AXES[compare["equal_compute"]["axis"]]
        tokens, sig_tokens = delta_rows(compare["equal_compute"], "final", pair)
        sig_curve += [f"{line} (at equal {axis})" for line in sig_tokens]
        text += [
            f"Difference to GRPO at equal {axis} (each run's curve read at the last point every "
            f"run of the model reached, its total {axis}, both policies; linear between "
            "evaluations, never past a run's end):",
            "",
            *tokens,
            "",
        ]
        for model, policy in compare["policies"].items():
            costs = cost_table(policy, compare["baseline"])
            if costs:
                text += [f"What a run cost (the runs of {model}'s table):", "", *costs, ""]
                break  # the run totals are the same for both models of a run
    seeds = len(next(iter(compare["policies"].values()))["methods"][compare["baseline"]]["seeds"])
    tests = compare.get("primary", {}).get("tests", 0)
    study = "`graft demo --study" + (" code`" if pair.name == "code" else "`")
    if seeds < 2:
        text.append(f"**One seed: no intervals, and no claim.** Run {study}.")
    elif seeds < MIN_SEEDS:
        text.append(
            f"**{seeds} seeds: the intervals are shown, but no verdict is drawn below "
            f"{MIN_SEEDS} seeds.** Run {study}."
        )
    elif sig_final or sig_curve:
        text.append(
            f"**Significant after Holm's correction over {tests} primary tests ({seeds} seeds):** "
            + "; ".join(sig_final + sig_curve)
            + "."
        )
        text.append("No other primary endpoint is significant; every other cell is exploratory.")
    else:
        text.append(
            f"**No primary endpoint differs from GRPO after Holm's correction over {tests} tests "
            f"({seeds} seeds).** Every other cell is exploratory."
        )
    ret = retention_lines(compare)
    if ret:
        text += ["", "Stored-peer vs online GRAFT (final, gains over GRPO):", "", *ret]
    text += ["", "### Exchange regime", ""]
    for model, policy in compare["policies"].items():
        text += [f"Into {model}:", "", *regime_lines(policy)]
    return text


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def _move(policy: Mapping[str, Any], skill: str) -> str:
    """`GRAFT 0.0% -> 7.5%; GRPO 0.0% -> 0.0%`: one skill's held-out accuracy per method."""
    key = next(k for k in next(iter(policy["methods"].values()))["points"] if f"/{skill}/" in k)
    parts = []
    for label, entry in policy["methods"].items():
        pts = entry["points"][key]
        end = pts[final_point(list(pts))]["mean"]
        parts.append(f"{label} {100 * pts['step_0']['mean']:.1f}% -> {100 * end:.1f}%")
    return "; ".join(parts)


def anecdote_lines(results: Mapping[str, Any]) -> list[str]:
    """What this run shows, model by model: the skill it cannot learn alone (its all-fail share
    before training) and that skill under each method, then its own skill (training that
    learns) and the training reward."""
    s = results["settings"]
    pair = PAIRS[s.get("pair", "mul")]
    (regime,) = results["regimes"].values()
    compare, comp = regime["compare"], regime["complementarity"]
    seeds = s["seeds"]
    lines = [
        f"**This run** (seed{'s' if len(seeds) > 1 else ''} {seeds}"
        + (": one seed is an anecdote, not evidence" if len(seeds) < MIN_SEEDS else "")
        + f"; {s['steps']} steps; held-out avg@{s['eval_samples']} on {s['eval_problems']} "
        "problems):",
        "",
    ]
    for m in MODELS:
        weak, strong = pair.weak[m], pair.strong[m]
        fail = comp["models"][m][weak]["all_fail"]
        policy = compare["policies"][m]
        rewards = []
        for label, entry in policy["methods"].items():
            values = [entry["reward"][k] for k in sorted(entry["reward"], key=int)]
            n = max(len(values) // 4, 1)
            rewards.append(f"{label} {_mean(values[:n]):.2f} -> {_mean(values[-n:]):.2f}")
        lines.append(
            f"- {m}, `{pair.short(weak)}`, its peer's skill (before training it failed all 8 "
            f"samples on {100 * fail:.0f}% of those prompts: GRPO alone gets no signal there): "
            f"{_move(policy, weak)}. Its own `{pair.short(strong)}`: {_move(policy, strong)}. "
            f"Training reward, first to last quarter of the steps: {'; '.join(rewards)}."
        )
    return lines


def markdown(results: Mapping[str, Any]) -> str:
    s = results["settings"]
    pair = PAIRS[s.get("pair", "mul")]
    if s["mode"] == "default" and pair.name == "code":
        from graft.evidence.recorded import answer_lines, load, reuse_lines, trio_lines

        answer = [*answer_lines(load("code_study")), "", *reuse_lines(load("reuse_study"))]
        answer += ["", *trio_lines(load("trio_study"))]
        return opening(results, answer) + details(results)
    return details(results)


def opening(results: Mapping[str, Any], answer: list[str]) -> str:
    """The main job's first screen: the answer with its uncertainty, then what this run shows."""
    text = [
        "# graft demo: GRAFT on two models that write code, each stuck on the other's skill",
        "",
        *answer,
        "",
        *anecdote_lines(results),
        "",
        "Details follow: the accuracy tables, the differences to GRPO and what the exchange "
        "admitted; curves.png shows them as a grid (a row per model).",
        "",
    ]
    return "\n".join(text) + "\n"


def details(results: Mapping[str, Any]) -> str:
    s = results["settings"]
    labels = results["labels"]
    pair = PAIRS[s.get("pair", "mul")]
    title = (
        "GRAFT against what a user would do instead"
        if s["mode"] in ("study-baselines", "study-code")
        else "where GRAFT helps and where its gate starves"
        if len(results["regimes"]) > 1
        else f"GRPO and GRAFT on the {pair.name} pair (a reduced study: docs/evidence.md)"
    )
    text = [
        f"# graft demo ({s['mode']}): {title}",
        "",
        f"{pair.describe} Per model {s['steps']} steps of {s['prompts_per_step']} prompts x "
        f"{s['group_size']} responses, lr {s['lr']:g}; held-out avg@{s['eval_samples']} at "
        f"temperature 1 on {s['eval_problems']} problems of the {s['eval_suite']} split, every "
        f"{s['eval_every']} steps; seeds {s['seeds']}.",
        "",
        INTERVAL_RULE,
        "",
    ]
    for name, regime in results["regimes"].items():
        text += [*regime_section(name, regime, labels, pair), ""]
    text.append(f"Wall time: {results['wall_s']:.0f} s.")
    return "\n".join(text) + "\n"
