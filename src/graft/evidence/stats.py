"""Intervals for paired comparisons over seeds (pure, no I/O, no scipy).

The unit of replication of an RL result is the training seed: two runs of one method differ by far
more from seed to seed than one evaluation differs from its re-run, so an interval over evaluation
problems alone would understate the uncertainty of "method A beats B". `graft compare` therefore
pairs runs by seed (same seed: same initial weights, prompt order and evaluation samples), takes
the per-seed difference d_s, and reports the Student t interval

    mean(d) +- t_{0.975, n-1} * sd(d) / sqrt(n)

which is exact when the d_s are normal and close to nominal for the bounded, roughly symmetric
accuracy differences seen here. With one seed there is no interval (one seed is an anecdote).
With two seeds, or when every seed gives the same difference, the interval is printed but no
verdict is drawn from it: two equal differences give a zero-width interval, and on accuracy
differences of a few hundred problems (which tie often) the two-seed rule "the interval excludes
0" fires for about 1 in 10 comparisons of identical methods, not 1 in 20. A verdict needs
`MIN_SEEDS` seeds and a spread. Across the primary endpoints a report names, Holm's step-down
correction (`holm`) keeps the chance of any false verdict at 5%; every other cell is exploratory.
A percentile bootstrap over so few seeds covers far less than 95% (see docs/evidence.md and
tests/test_compare.py), so it is used only where no t interval exists: the ratio of two gains.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularized incomplete beta function (modified Lentz)."""
    tiny, eps = 1e-300, 1e-15
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < eps:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    front = math.exp(log_front)
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with df degrees of freedom."""
    if df <= 0:
        raise ValueError(f"degrees of freedom must be > 0, got {df}")
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The p-quantile of Student's t (bisection on the CDF, to 1e-12)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12:
            break
    return 0.5 * (lo + hi)


MIN_SEEDS = 3
"""The fewest seeds from which a verdict (significant or not) is drawn."""


@dataclass(frozen=True)
class Interval:
    """A paired difference over seeds: its mean and a two-sided interval (None with one seed)."""

    n: int
    mean: float
    sd: float
    low: float | None
    high: float | None
    level: float = 0.95

    @property
    def no_verdict(self) -> str | None:
        """Why no verdict is drawn ("one seed", "2 seeds", "no spread"), or None."""
        if self.n < 2:
            return "one seed"
        if self.n < MIN_SEEDS:
            return f"{self.n} seeds"
        if self.sd == 0:
            return "no spread"
        return None

    @property
    def significant(self) -> bool:
        """A verdict is drawn and the interval excludes 0."""
        if self.no_verdict is not None or self.low is None or self.high is None:
            return False
        return self.low > 0 or self.high < 0

    @property
    def p_value(self) -> float | None:
        """Two-sided p of the paired t test of mean 0 (None where no verdict is drawn)."""
        if self.no_verdict is not None:
            return None
        t = abs(self.mean) / (self.sd / math.sqrt(self.n))
        return min(1.0, 2.0 * (1.0 - t_cdf(t, self.n - 1)))

    def to_dict(self) -> dict[str, object]:
        return {
            "n": self.n,
            "mean": self.mean,
            "sd": self.sd,
            "low": self.low,
            "high": self.high,
            "level": self.level,
            "significant": self.significant,
            "p": self.p_value,
            "no_verdict": self.no_verdict,
        }


def paired_interval(diffs_S: Sequence[float], *, level: float = 0.95) -> Interval:
    """Mean of per-seed differences with its Student t interval (no interval for one seed)."""
    if not diffs_S:
        raise ValueError("no paired differences")
    n = len(diffs_S)
    mean = statistics.fmean(diffs_S)
    if n < 2:
        return Interval(n=n, mean=mean, sd=0.0, low=None, high=None, level=level)
    sd = statistics.stdev(diffs_S)
    half = t_quantile(0.5 + level / 2.0, n - 1) * sd / math.sqrt(n)
    return Interval(n=n, mean=mean, sd=sd, low=mean - half, high=mean + half, level=level)


def holm(p_values: Sequence[float], *, alpha: float = 0.05) -> list[tuple[float, bool]]:
    """Holm's step-down correction: per p-value (in the given order), its adjusted p and whether
    it is rejected at family-wise level `alpha`. Sorted ascending, the i-th smallest (from 0) of m
    is compared with alpha / (m - i); rejection stops at the first that fails. The adjusted p is
    the running maximum of (m - i) * p, capped at 1."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    out: list[tuple[float, bool]] = [(1.0, False)] * m
    running, rejecting = 0.0, True
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        rejecting = rejecting and p_values[i] <= alpha / (m - rank)
        out[i] = (running, rejecting)
    return out


def bootstrap_ratio(
    num_S: Sequence[float],
    den_S: Sequence[float],
    *,
    level: float = 0.95,
    draws: int = 4000,
    seed: int = 0,
) -> dict[str, float | None]:
    """mean(num) / mean(den) with a percentile bootstrap over seeds (resampled in pairs).

    Used for "stored keeps X of the online gain": a ratio has no t interval, and it is undefined
    (None) when the denominator's own interval contains 0. With few seeds the bootstrap interval
    is too narrow; read it as a rough range."""
    if len(num_S) != len(den_S) or not num_S:
        raise ValueError("ratio needs equally many (>= 1) numerator and denominator values")
    den = statistics.fmean(den_S)
    point = statistics.fmean(num_S) / den if den != 0 else None
    out: dict[str, float | None] = {"ratio": point, "low": None, "high": None}
    den_iv = paired_interval(den_S, level=level)
    if point is None or not den_iv.significant:
        return out
    rng = random.Random(seed)
    n, ratios = len(num_S), []
    for _ in range(draws):
        idx = [rng.randrange(n) for _ in range(n)]
        d = sum(den_S[i] for i in idx)
        if d != 0:
            ratios.append(sum(num_S[i] for i in idx) / d)
    ratios.sort()
    lo_i = int((1 - level) / 2 * (len(ratios) - 1))
    hi_i = int((1 + level) / 2 * (len(ratios) - 1))
    out["low"], out["high"] = ratios[lo_i], ratios[hi_i]
    return out


def percentile_bootstrap_mean(
    values_S: Sequence[float], *, level: float = 0.95, draws: int = 2000, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap interval of a mean; kept to show why it is not the default."""
    rng = random.Random(seed)
    n = len(values_S)
    means = sorted(
        statistics.fmean(values_S[rng.randrange(n)] for _ in range(n)) for _ in range(draws)
    )
    return means[int((1 - level) / 2 * (draws - 1))], means[int((1 + level) / 2 * (draws - 1))]
