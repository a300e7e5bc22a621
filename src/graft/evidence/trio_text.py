"""The three-model study's results.md and its two plots, from `trio_report.report`'s result:
each receiver's gain per peer and in the pool (`trio_gains.png`), and the gain from gpt2's logs
against their age (`trio_staleness.png`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from graft.evidence.reuse_report import interval_text, pct
from graft.evidence.trio import MODELS, OWN, OWNER, PAIRS, TRADE, TRADE_PAIR, pair_name, rr_name


def _primary_lines(result: Mapping[str, Any]) -> list[str]:
    lines = [
        "| cell | model (skill) | difference [95% CI] | Holm p | verdict | per seed |",
        "|---|---|---|---|---|---|",
    ]
    for c in result["primary"]:
        why = (c["interval"] or {}).get("no_verdict")
        verdict = "significant" if c.get("significant") else "inside the noise"
        if why:
            verdict = f"no verdict ({why})"
        holm_p = f"{c['holm_p']:.4f}" if "holm_p" in c else "-"
        seeds = ", ".join(pct(d) for d in c["per_seed"]) or "-"
        lines.append(
            f"| {c['run']} - {c['base']} | {c['model']} (`{c['skill']}`) | "
            f"{interval_text(c['interval'])} | {holm_p} | {verdict} | {seeds} |"
        )
    return lines


def _values_lines(result: Mapping[str, Any]) -> list[str]:
    """Held-out accuracy at the last step per run and model, the mean over seeds."""
    skills = list(OWN.values())
    lines = [
        "| run | model | " + " | ".join(f"`{k}`" for k in skills) + " | mix | seeds |",
        "|---" * (len(skills) + 4) + "|",
    ]
    for run, models in result["values"].items():
        for m, by_seed in models.items():
            rows = list(by_seed.values())
            means = [sum(r[k] for r in rows) / len(rows) for k in (*skills, "mix")]
            cells = " | ".join(f"{100 * v:.1f}" + (" (own)" if k == OWN[m] else "")
                               for k, v in zip((*skills, "mix"), means))  # fmt: skip
            lines.append(f"| {run} | {m} | {cells} | {len(rows)} |")
    return lines


def _trade_lines(result: Mapping[str, Any]) -> list[str]:
    base = pair_name(*TRADE_PAIR)
    sec, share = result["secondary"], result["peer_share"]
    lines = [
        "| arm | model | own skill - pair GRAFT | own skill - GRPO | stuck skill - pair GRAFT "
        "| peer token share |",
        "|---|---|---|---|---|---|",
    ]
    for name in [base, *(f"trade_{arm}" for arm in TRADE)]:
        label = "pair GRAFT" if name == base else result["trade"][name.removeprefix("trade_")]
        for m in TRADE_PAIR:
            peer = next(p for p in TRADE_PAIR if p != m)
            vs_pair = sec.get(f"{name} - {base}/{m}/{OWN[m]}", {}).get("interval")
            vs_grpo = sec.get(f"{name} - grpo/{m}/{OWN[m]}", {}).get("interval")
            stuck = sec.get(f"{name} - {base}/{m}/{OWN[peer]}", {}).get("interval")
            s = share.get(name, {}).get(m)
            lines.append(
                f"| {label} | {m} | {'-' if name == base else interval_text(vs_pair)} | "
                f"{interval_text(vs_grpo)} | {'-' if name == base else interval_text(stuck)} | "
                f"{'-' if s is None else f'{s:.1%}'} |"
            )
    return lines


def markdown(result: Mapping[str, Any], commits: Sequence[str]) -> str:
    """results.md: the primary family, the values, retention, staleness, the own-skill trade,
    the secondaries, the regime, equal FLOPs and the cost."""
    rt = result["runtime"]
    lines = [
        "# The three-model study: other pairs, a pool, one log for many receivers, the "
        "own-skill trade",
        "",
        f"Seeds {', '.join(map(str, result['seeds']))}; runs at {', '.join(commits) or '-'}. "
        "Points of held-out pass@1 (avg@4) at the last evaluation; differences paired by "
        "seed, 95% Student t intervals; the primary family (12 tests) under Holm at 5%. "
        f"Runtime of the finished units (done files): {rt['seconds'] / 3600:.2f} h over "
        f"{rt['units']} units.",
        "",
        "## Primary",
        "",
        *_primary_lines(result),
        "",
        "## Held-out accuracy at the last step (mean over seeds)",
        "",
        *_values_lines(result),
        "",
        "## Retention of each stored log (stored gain / the pair's online gain)",
        "",
    ]
    for name, r in result["retention"].items():
        rng = ("undefined: the online gain's interval contains 0" if r["low"] is None
               else f"{r['ratio']:.2f} [{r['low']:.2f}, {r['high']:.2f}]")  # fmt: skip
        lines.append(f"- {name} ({r['receiver']} on `{r['skill']}`): {rng}")
    lines += ["", "## Staleness of gpt2's logs (gain over GRPO on `max`)", ""]
    for r, points in result["staleness"].items():
        text = "; ".join(f"age {p['age']:+.1f}: {interval_text(p['interval'])}" for p in points)
        lines.append(f"- {r}: {text}")
    lines += ["", "## The own-skill trade (exploratory)", "", *_trade_lines(result), ""]
    lines += ["Own programs on the own skill's training prompts that return with another "
              "reducer (the run's store):", ""]  # fmt: skip
    for run, models in result["confusion"].items():
        lines.append(f"- {run}: " + ", ".join(f"{m} {v:.1%}" for m, v in models.items()))
    lines += ["", "## Secondary (exploratory)", "", "| difference | model | skill | [95% CI] |",
              "|---|---|---|---|"]  # fmt: skip
    for key, c in {**result["secondary"], **result["equal_flops"]}.items():
        what, model, skill = key.split("/")
        where = " (equal FLOPs)" if key in result["equal_flops"] else ""
        lines.append(f"| {what}{where} | {model} | {skill} | {interval_text(c['interval'])} |")
    lines += ["", "## Exchange regime (summed over steps and seeds)", "",
              "| run | direction | gate candidates | prompts grafted | sent | admitted |",
              "|---|---|---|---|---|---|"]  # fmt: skip
    for run, directions in result["regime"].items():
        for d, c in sorted(directions.items()):
            lines.append(
                f"| {run} | {d} | {c.get('candidates', 0):.0f} | "
                f"{c.get('prompts_grafted', 0):.0f} | {c.get('responses_sent', 0):.0f} | "
                f"{c.get('admitted', 0):.0f} |"
            )
    lines += ["", "## Cost per run and model (mean over seeds; stored receivers count their log)",
              "", "| run | model | run TFLOPs | run s | log TFLOPs (its share) | total TFLOPs |",
              "|---|---|---|---|---|---|"]  # fmt: skip
    for run, models in result["cost"].items():
        for m, c in models.items():
            lines.append(
                f"| {run} | {m} | {c['run_flops'] / 1e12:.3f} | {c['run_seconds']:.0f} | "
                f"{c.get('log_flops', 0) / 1e12:.3f} | {c['total_flops'] / 1e12:.3f} |"
            )
    return "\n".join(lines) + "\n"


def _bar(ax: Any, x: float, iv: Mapping[str, Any] | None, color: str, label: str) -> None:
    if not iv:
        return
    low, high = iv.get("low"), iv.get("high")
    err = None if low is None else [[100 * (iv["mean"] - low)], [100 * (high - iv["mean"])]]
    ax.bar([x], [100 * iv["mean"]], width=0.2, color=color, label=label, yerr=err, capsize=3)


def gains_plot(result: Mapping[str, Any], path: Path) -> None:
    """Per receiver and stuck skill: the pair's GRAFT (the paper's weight and receiver_relative),
    the pool and the stored log of the skill's owner, each minus GRPO (mean and 95% interval)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sec = result["secondary"]
    fig, axes = plt.subplots(1, len(MODELS), figsize=(12, 4), sharey=True)
    for ax, r in zip(axes, MODELS):
        skills = [k for k in OWN.values() if k != OWN[r]]
        for i, k in enumerate(skills):
            peer = OWNER[k]
            pair = next(p for p in PAIRS if set(p) == {r, peer})
            for j, (run, color, label) in enumerate((
                (pair_name(*pair), "tab:blue", "GRAFT, the pair"),
                (rr_name(*pair), "tab:purple", "GRAFT, the pair, receiver_relative"),
                ("graft_pool", "tab:green", "GRAFT, the pool"),
                (f"stored_{peer}_{r}", "tab:orange", "alone, the peer's stored log"),
            )):  # fmt: skip
                iv = sec.get(f"{run} - grpo/{r}/{k}", {}).get("interval")
                _bar(ax, i + (j - 1.5) * 0.21, iv, color, label if i == 0 else "")
        ax.set_xticks(range(len(skills)), [f"`{k}` (from {OWNER[k]})" for k in skills])
        ax.axhline(0, color="grey", lw=0.8)
        ax.set_title(f"{r} (own: `{OWN[r]}`)")
    axes[0].set_ylabel("gain over GRPO at step 40 (points)")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def staleness_plot(result: Mapping[str, Any], path: Path) -> None:
    """Per receiver of gpt2's logs: the gain on `max` over GRPO against the log's mean age."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for r, points in result["staleness"].items():
        xs, ys, errs = [], [], [[], []]
        for p in points:
            iv = p["interval"]
            xs.append(p["age"])
            ys.append(100 * iv["mean"])
            low = iv["mean"] if iv["low"] is None else iv["low"]
            high = iv["mean"] if iv["high"] is None else iv["high"]
            errs[0].append(100 * (iv["mean"] - low))
            errs[1].append(100 * (high - iv["mean"]))
        ax.errorbar(xs, ys, yerr=errs, fmt="o-", capsize=4, label=f"{r} from gpt2's log")
    ax.axhline(0, color="grey", lw=0.8)
    ax.set_xlabel("log's mean age (gpt2's step - receiver's step)")
    ax.set_ylabel("gain on `max` over GRPO at step 40 (points)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
