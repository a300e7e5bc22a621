"""Is each policy learning anything? From the step metrics, per policy: the shares of its groups
that are all-fail and all-pass (no GRPO signal), the share of its all-fail prompts a peer rescued
(grafted groups), and the admitted share of what peers sent. A plain line every `run.log_every`
steps, a warning after `run.no_signal_after` steps in a row without any learning signal (every
group all-fail or all-pass, nothing admitted), and the whole run's shares for summary.json.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass


@dataclass
class Counts:
    """One policy's counts over some steps."""

    steps: int = 0
    groups: float = 0.0
    all_fail: float = 0.0
    all_pass: float = 0.0
    grafted: float = 0.0
    sent: float = 0.0
    admitted: float = 0.0
    silent_steps: int = 0
    full_steps: int = 0
    """Steps whose training batch held rollout.prompts_per_step groups with reward contrast."""
    extra_responses: float = 0.0
    """Responses sampled in extra rounds (`zero_contrast.mode=resample`)."""

    def add(self, other: Counts) -> None:
        for key in vars(self):
            setattr(self, key, getattr(self, key) + getattr(other, key))

    def shares(self) -> dict[str, float]:
        return {
            "all_fail_frac": self.all_fail / self.groups if self.groups else 0.0,
            "all_pass_frac": self.all_pass / self.groups if self.groups else 0.0,
            "rescued_frac": self.grafted / self.all_fail if self.all_fail else 0.0,
            "admitted_frac": self.admitted / self.sent if self.sent else 0.0,
            "no_signal_steps": float(self.silent_steps),
            "full_batch_frac": self.full_steps / self.steps if self.steps else 0.0,
            "extra_responses": self.extra_responses,
        }


def step_counts(metrics: Mapping[str, float], name: str, prefix: str, groups: int) -> Counts:
    """One policy's counts in one step's metrics (its own under `prefix`, what it received under
    `x/<source>-><name>/`)."""

    def share(key: str) -> float:
        return float(metrics.get(f"{prefix}groups/{key}", 0.0))

    incoming = {"prompts_grafted": 0.0, "responses_sent": 0.0, "admitted": 0.0}
    for key, value in metrics.items():
        direction, _, metric = key[2:].partition("/") if key.startswith("x/") else ("", "", "")
        if direction.endswith(f"->{name}") and metric in incoming:
            incoming[metric] += float(value)
    fill = float(metrics.get(f"{prefix}contrast/fill_frac", 0.0))
    silent = share("mixed_frac") == 0.0 and incoming["admitted"] == 0.0 and fill == 0.0
    return Counts(
        steps=1,
        groups=float(groups),
        all_fail=round(share("all_fail_frac") * groups),
        all_pass=round(share("all_pass_frac") * groups),
        grafted=incoming["prompts_grafted"],
        sent=incoming["responses_sent"],
        admitted=incoming["admitted"],
        silent_steps=int(silent),
        full_steps=int(fill >= 1.0),
        extra_responses=float(metrics.get(f"{prefix}contrast/extra_responses", 0.0)),
    )


class SignalLog:
    def __init__(
        self,
        prefix: Mapping[str, str],
        *,
        groups: int,
        every: int = 0,
        warn_after: int = 0,
    ) -> None:
        self.prefix, self.groups = dict(prefix), groups
        self.every, self.warn_after = every, warn_after
        self.window = {name: Counts() for name in prefix}
        self.total = {name: Counts() for name in prefix}
        self.streak = {name: 0 for name in prefix}

    def update(self, step: int, metrics: Mapping[str, float]) -> tuple[list[str], list[str]]:
        """Feed step `step`'s metrics (1-based); (report lines, warnings) to print now."""
        lines, warnings = [], []
        for name, prefix in self.prefix.items():
            counts = step_counts(metrics, name, prefix, self.groups)
            self.window[name].add(counts)
            self.total[name].add(counts)
            self.streak[name] = self.streak[name] + 1 if counts.silent_steps else 0
            if self.warn_after and self.streak[name] == self.warn_after:
                warnings.append(
                    f"policy {name!r} has had no learning signal for {self.warn_after} steps "
                    f"(steps {step - self.warn_after + 1}-{step}: every group all-fail or "
                    f"all-pass, no peer response admitted); its updates change nothing. Check "
                    f"the verifier and the prompts' difficulty, or raise rollout.group_size "
                    f"(`graft probe` measures it before training)"
                )
        if self.every and step % self.every == 0:
            for name in self.prefix:
                lines.append(f"step {step}, {name}: {describe(self.window[name])}")
                self.window[name] = Counts()
        return lines, warnings

    def summary(self) -> dict[str, float]:
        """The shares over every step fed, as `signal/<policy>/<share>`."""
        return {
            f"signal/{name}/{key}": value
            for name, counts in self.total.items()
            for key, value in counts.shares().items()
        }


def describe(c: Counts) -> str:
    s = c.shares()
    text = (
        f"all-fail {100 * s['all_fail_frac']:.0f}%, all-pass {100 * s['all_pass_frac']:.0f}% "
        f"of {c.groups:.0f} groups"
    )
    if c.sent or c.grafted:
        text += (
            f"; a peer rescued {100 * s['rescued_frac']:.0f}% of the all-fail prompts, "
            f"admitted {100 * s['admitted_frac']:.0f}% of {c.sent:.0f} responses sent"
        )
    if c.extra_responses:
        text += (
            f"; {c.extra_responses:.0f} responses sampled on extra prompts, a full batch of "
            f"groups with contrast in {c.full_steps} of {c.steps} steps"
        )
    if c.silent_steps:
        text += f"; {c.silent_steps} of {c.steps} steps without any learning signal"
    return f"{text} (last {c.steps} steps)"


def run_summary(
    records: Iterable[Mapping[str, float]], prefix: Mapping[str, str], *, groups: int
) -> dict[str, float]:
    """The whole run's shares from its metrics log (every step, across resumes)."""
    log = SignalLog(prefix, groups=groups)
    for r in records:
        if any(k.endswith("groups/all_fail_frac") for k in r):
            log.update(int(r["step"]), r)
    return log.summary()
