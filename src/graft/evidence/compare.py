"""`graft compare`: paired per-seed differences between methods, with 95% intervals.

A unit is one policy of one run. Units are grouped into methods by their resolved config (every
key that can change a result, the seed and paths aside; `run.label` names a method explicitly),
paired with the baseline method's unit of the same policy and seed, and every evaluated metric
(per suite and per skill, at each evaluation step and as the mean over the curve after step 0)
is reported as the mean of the per-seed differences with a Student t interval over seeds
(`graft.evidence.stats`). Runs that cannot be compared (other evaluation suites, sizes or steps) are
refused with one line.
"""

from __future__ import annotations

import json
import re
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from graft.config.lib import current_shape
from graft.errors import DataError
from graft.evidence.compute_axis import AXES, COST_KEYS, run_compute, to_compute_axis
from graft.evidence.endpoints import CURVE_MEAN, apply_holm, parse_endpoint, run_primary
from graft.evidence.regime import direction_totals, regime_reports
from graft.evidence.stats import paired_interval
from graft.rundir import policy_prefix, read_metrics

IGNORED_KEYS = (
    "run.out_dir",
    "run.seed",
    "run.label",
    "run.steps",  # compared through the evaluation steps instead
    "run.save_every",
    "run.keep_checkpoints",
    "run.log_every",
    "run.no_signal_after",
    "run.threads",
    "run.report_to",
    "run.project",
    "run.progress",
    "run.backend",
    "run.ray_strategy",
    "store.",
    "eval.",  # compared through the evaluation setup instead
    "sft.",  # `graft sft` only; a run that starts from an SFT checkpoint names it in its path
    "verify.workers",
    "exchange.stored.path",
    "exchange.stored.run",
    "exchange.warn_after",
    "algo.skip_zero_advantage",  # speed switches: tested to change no result
    "algo.sort_by_length",
    "algo.share_prompts",
    "algo.dedup_responses",
)
"""Config keys that do not define a method: seeds, paths, and settings that change no result."""

EVAL_SETUP_KEYS = ("suites", "num_problems", "samples", "temperature", "top_p", "max_new_tokens")
MAX_LABEL_KEYS = 3
"""Up to this many varying keys, a derived label names all of them; beyond, only the unusual."""


@dataclass(frozen=True)
class Unit:
    """One policy of one run: its method signature and what was measured."""

    run_dir: str
    policy: str
    seed: int
    label: str
    signature: Mapping[str, str]
    eval_setup: Mapping[str, str]
    curves: Mapping[str, Mapping[int, float]]
    """Evaluated metric (`eval/<suite>/[<skill>/]avg@k` or `pass@k`) -> step -> value."""
    reward: Mapping[int, float]
    """Training reward per step."""
    exchange: Mapping[int, Mapping[str, float]] = field(default_factory=dict)
    """Step -> exchange diagnostics of the directions INTO this policy (`<source>-><me>/<key>`)."""
    primary: tuple[str, ...] = ()
    """The run's `eval.primary` endpoints."""
    compute: Mapping[int, Mapping[str, float]] = field(default_factory=dict)
    """Step -> what the whole run had spent by then (`cost/cum/<key>`, all its policies)."""


def _flatten(value: Any, prefix: str = "") -> dict[str, str]:
    if isinstance(value, Mapping):
        out: dict[str, str] = {}
        for key, sub in value.items():
            out.update(_flatten(sub, f"{prefix}{key}."))
        return out
    return {prefix[:-1]: json.dumps(value, sort_keys=True)}


_CHECKPOINT = re.compile(r'^".*/(checkpoints/(best|step_\d+)/[^/"]+)/?"$')


def checkpoint_kind(path_json: str) -> str:
    """A model path inside another run's checkpoints (`.../RUN/checkpoints/best/NAME`, as after
    `graft sft`) as that kind of checkpoint: the run directory differs from seed to seed, the
    method does not (run.label tells such methods apart)."""
    match = _CHECKPOINT.match(path_json)
    return json.dumps(f"<run>/{match[1]}") if match else path_json


def _ignored(key: str) -> bool:
    return any(key == k or (k.endswith(".") and key.startswith(k)) for k in IGNORED_KEYS)


def discover(paths: Sequence[str | Path]) -> list[Path]:
    """Run directories named, or found below the folders named (config.yaml + metrics.jsonl)."""
    found: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if not path.exists():
            raise DataError(f"{path}: no such run directory")
        if (path / "metrics.jsonl").is_file() and (path / "config.yaml").is_file():
            found.append(path)
            continue
        below = sorted(
            p.parent for p in path.rglob("metrics.jsonl") if (p.parent / "config.yaml").is_file()
        )
        if not below:
            raise DataError(
                f"{path}: no run found (a run directory holds config.yaml and metrics.jsonl)"
            )
        found.extend(below)
    return sorted(dict.fromkeys(found))


def load_units(run_dir: Path) -> list[Unit]:
    """The units (one per policy) of one run directory."""
    try:
        cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    except yaml.YAMLError as err:
        raise DataError(f"{run_dir / 'config.yaml'}: not valid YAML ({err})") from None
    if not isinstance(cfg, dict) or not cfg.get("models"):
        raise DataError(f"{run_dir / 'config.yaml'}: not a graft run config (no models)")
    cfg = current_shape(cfg)  # a run of an earlier version compares under today's keys
    records = read_metrics(run_dir)
    models = cfg["models"]
    flat = _flatten({k: v for k, v in cfg.items() if k != "models"})
    base = {k: v for k, v in flat.items() if not _ignored(k)}
    setup = {k: json.dumps(cfg.get("eval", {}).get(k), sort_keys=True) for k in EVAL_SETUP_KEYS}
    units = []
    for model in models:
        name = model["name"]
        prefix = policy_prefix(name, several=len(models) > 1)
        signature = dict(base)
        signature.update(
            {f"model.{k}": v for k, v in _flatten(model).items() if k not in ("name",)}
        )
        signature["model.path"] = checkpoint_kind(signature.get("model.path", '""'))
        others = sorted(
            f"{m['name']}={json.loads(checkpoint_kind(json.dumps(m['path'])))}"
            for m in models
            if m["name"] != name
        )
        signature["co_trained_with"] = json.dumps(others)
        units.append(
            Unit(
                run_dir=str(run_dir),
                policy=name,
                seed=int(cfg.get("run", {}).get("seed", 0)),
                label=str(cfg.get("run", {}).get("label", "") or ""),
                signature=signature,
                eval_setup=setup,
                curves=_curves(records, prefix),
                reward=_series(records, f"{prefix}reward/mean"),
                exchange=direction_totals(records, receiver=name),
                primary=tuple(cfg.get("eval", {}).get("primary") or ()),
                compute=run_compute(records),
            )
        )
    return units


def _is_eval_metric(key: str) -> bool:
    return key.startswith("eval/") and ("/avg@" in key or "/pass@" in key)


def _curves(records: Sequence[Mapping[str, Any]], prefix: str) -> dict[str, dict[int, float]]:
    curves: dict[str, dict[int, float]] = {}
    for r in records:
        for key, value in r.items():
            if key.startswith(prefix) and _is_eval_metric(key[len(prefix) :]):
                curves.setdefault(key[len(prefix) :], {})[int(r["step"])] = float(value)
    return curves


def _series(records: Sequence[Mapping[str, Any]], key: str) -> dict[int, float]:
    return {int(r["step"]): float(r[key]) for r in records if isinstance(r.get(key), int | float)}


def method_labels(units: Sequence[Unit]) -> dict[str, str]:
    """Label per signature (JSON): the explicit `run.label`, else the keys in which a method
    differs from the most common value among the methods ("k=v, ...")."""
    sigs: dict[str, Mapping[str, str]] = {}
    explicit: dict[str, str] = {}
    for u in units:
        key = json.dumps(u.signature, sort_keys=True)
        sigs[key] = u.signature
        if u.label:
            if explicit.get(key, u.label) != u.label:
                raise DataError(f"{u.run_dir}: same settings as another run but label {u.label!r}")
            explicit[key] = u.label
    by_label: dict[str, str] = {}
    for key, label in explicit.items():
        if label in by_label:
            a, b = sigs[by_label[label]], sigs[key]
            diff = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
            raise DataError(
                f"runs labelled {label!r} differ in {', '.join(diff[:3])}: give them different "
                "run.label values"
            )
        by_label[label] = key
    keys = sorted({k for s in sigs.values() for k in s})
    varying = [k for k in keys if len({s.get(k) for s in sigs.values()}) > 1]
    common = {k: Counter(s.get(k) for s in sigs.values()).most_common(1)[0][0] for k in varying}
    labels = {}
    for key, sig in sigs.items():
        if key in explicit:
            labels[key] = explicit[key]
            continue
        few = len(varying) <= MAX_LABEL_KEYS  # name every varying key; else only the unusual
        parts = [f"{k}={_show(sig.get(k))}" for k in varying if few or sig.get(k) != common[k]]
        labels[key] = ", ".join(parts) or "same settings"
    return labels


def _show(value: str | None) -> str:
    if value is None:
        return "-"
    loaded = json.loads(value)
    return loaded if isinstance(loaded, str) else json.dumps(loaded)


def _check_comparable(units: Sequence[Unit]) -> None:
    first = units[0]
    steps0 = sorted(next(iter(first.curves.values()), {}))
    for u in units[1:]:
        for k in EVAL_SETUP_KEYS:
            if u.eval_setup[k] != first.eval_setup[k]:
                raise DataError(
                    f"{first.run_dir} and {u.run_dir} are not comparable: eval.{k} is "
                    f"{first.eval_setup[k]} vs {u.eval_setup[k]}"
                )
        if set(u.curves) != set(first.curves):
            diff = sorted(set(u.curves) ^ set(first.curves))
            raise DataError(
                f"{first.run_dir} and {u.run_dir} are not comparable: they evaluated different "
                f"metrics ({', '.join(diff[:3])})"
            )
        steps = sorted(next(iter(u.curves.values()), {}))
        if steps != steps0:
            raise DataError(
                f"{first.run_dir} and {u.run_dir} are not comparable: evaluated at steps "
                f"{steps0} vs {steps}"
            )
    if not first.curves:
        raise DataError(f"{first.run_dir}: no evaluation in metrics.jsonl (set eval.every > 0)")


def _points(curve: Mapping[int, float], prefix: str = "step_") -> dict[str, float]:
    """A curve's points by name (`step_<step>`, or `at_<j>` on a compute axis), and the mean over
    the points after the first."""
    out = {f"{prefix}{s}": v for s, v in sorted(curve.items())}
    after = [v for s, v in curve.items() if s > 0]
    if after:
        out[CURVE_MEAN] = statistics.fmean(after)
    return out


def compare_units(
    units: Sequence[Unit],
    *,
    baseline: str | None = None,
    primary: Sequence[str] | None = None,
    compute: str = "steps",
) -> dict[str, Any]:
    """Per policy: methods, their mean curves with bands, their cost, and paired differences vs
    baseline; the `primary` endpoints (default: the runs' `eval.primary`) under Holm's
    correction, every other cell exploratory (graft.evidence.endpoints). `compute`: the axis the
    curves are read on, `steps` or a compute count (graft.evidence.compute_axis)."""
    if not units:
        raise DataError("no runs to compare")
    grids: dict[str, list[float]] = {}
    if compute != "steps":
        units, grids = to_compute_axis(units, compute)
    for policy in sorted({u.policy for u in units}):
        _check_comparable([u for u in units if u.policy == policy])
    labels = {
        (policy, sig): label
        for policy in {u.policy for u in units}
        for sig, label in method_labels([u for u in units if u.policy == policy]).items()
    }
    by_policy: dict[str, dict[str, dict[int, Unit]]] = {}
    for u in units:
        label = labels[u.policy, json.dumps(u.signature, sort_keys=True)]
        seeds = by_policy.setdefault(u.policy, {}).setdefault(label, {})
        if u.seed in seeds:
            raise DataError(
                f"{seeds[u.seed].run_dir} and {u.run_dir}: two runs of method {label!r} with "
                f"seed {u.seed} for policy {u.policy}"
            )
        seeds[u.seed] = u
    all_labels = sorted({lab for methods in by_policy.values() for lab in methods})
    base = baseline or _default_baseline(units, labels)
    if base not in all_labels:
        raise DataError(
            f"--baseline {base!r} names no method; methods: "
            + ", ".join(repr(x) for x in all_labels)
        )
    out: dict[str, Any] = {"baseline": base, "methods": all_labels, "policies": {}}
    out["axis"] = {"name": compute, "label": AXES.get(compute, "step")}
    for policy, methods in sorted(by_policy.items()):
        out["policies"][policy] = _policy_report(methods, base, at="at_" if grids else "step_")
        if grids:
            out["policies"][policy]["axis"] = {**out["axis"], "points": grids[policy]}
    specs = run_primary(units) if primary is None else tuple(primary)
    apply_holm(out, [e for spec in specs for e in parse_endpoint(spec)])
    return out


def _default_baseline(units: Sequence[Unit], labels: Mapping[tuple[str, str], str]) -> str:
    off = sorted(
        {
            labels[u.policy, json.dumps(u.signature, sort_keys=True)]
            for u in units
            if u.signature.get("exchange.enabled") == "false"
        }
    )
    if len(off) != 1:
        names = sorted(set(labels.values()))
        raise DataError(
            "pick the baseline with --baseline (no single method has exchange.enabled=false); "
            f"methods: {', '.join(repr(x) for x in names)}"
        )
    return off[0]


def _policy_report(
    methods: Mapping[str, Mapping[int, Unit]], base: str, *, at: str = "step_"
) -> dict[str, Any]:
    report: dict[str, Any] = {"methods": {}, "vs_baseline": {}, "unpaired": {}}
    for label, seeds in sorted(methods.items()):
        us = [seeds[s] for s in sorted(seeds)]
        metrics = sorted(us[0].curves)
        report["methods"][label] = {
            "runs": [u.run_dir for u in us],
            "seeds": sorted(seeds),
            "points": {
                m: {
                    p: _band([_points(u.curves[m], at)[p] for u in us])
                    for p in _points(us[0].curves[m], at)
                }
                for m in metrics
            },
            "cost": _cost(us),
            "reward": {
                str(step): statistics.fmean(u.reward[step] for u in us)
                for step in sorted(set.intersection(*(set(u.reward) for u in us)))
            },
        }
        sig = us[0].signature
        regime = regime_reports(
            [u.exchange for u in us],
            weight=json.loads(sig.get("exchange.ablation.weight", '"paper"')),
            delta=float(json.loads(sig.get("exchange.delta", "0.8"))),
        )
        if regime:
            report["methods"][label]["regime"] = regime
    if base not in methods:
        return report
    for label, seeds in sorted(methods.items()):
        if label == base:
            continue
        paired = sorted(set(seeds) & set(methods[base]))
        if not paired:
            report["unpaired"][label] = {"seeds": sorted(seeds), "baseline": sorted(methods[base])}
            continue
        entry: dict[str, Any] = {
            "seeds": paired,
            "unpaired_seeds": sorted(set(seeds) - set(methods[base])),
            "baseline_unpaired_seeds": sorted(set(methods[base]) - set(seeds)),
            "metrics": {},
            "differences": {},  # per metric and point, per seed in the order of "seeds"
        }
        for m in sorted(seeds[paired[0]].curves):
            mine = [_points(seeds[s].curves[m], at) for s in paired]
            theirs = [_points(methods[base][s].curves[m], at) for s in paired]
            diffs = {p: [a[p] - b[p] for a, b in zip(mine, theirs)] for p in mine[0]}
            entry["metrics"][m] = {p: paired_interval(d).to_dict() for p, d in diffs.items()}
            entry["differences"][m] = diffs
        report["vs_baseline"][label] = entry
    return report


def _cost(units: Sequence[Unit]) -> dict[str, Any]:
    """What one method's runs cost in all, over its seeds (run totals at each run's last step,
    and the steps); empty when a run did not count it."""
    if not all(u.compute for u in units):
        return {}
    last = [u.compute[max(u.compute)] for u in units]
    out = {k: _band([c[k] for c in last]) for k in COST_KEYS if all(k in c for c in last)}
    out["steps"] = _band([float(max(u.compute)) for u in units])
    return out


def _band(values: Sequence[float]) -> dict[str, Any]:
    iv = paired_interval(values)
    return {"mean": iv.mean, "low": iv.low, "high": iv.high, "n": iv.n}


def compare_runs(
    paths: Sequence[str | Path],
    *,
    baseline: str | None = None,
    primary: Sequence[str] | None = None,
    compute: str = "steps",
) -> dict[str, Any]:
    """Everything `graft compare` reports, from run directories (or folders holding them)."""
    units = [u for run in discover(paths) for u in load_units(run)]
    result = compare_units(units, baseline=baseline, primary=primary, compute=compute)
    result["units"] = units
    return result
