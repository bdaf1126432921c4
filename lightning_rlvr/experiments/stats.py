"""Statistics for comparing methods across seeds: what a small sweep can and cannot say.

Runs of two methods that share a seed share their warm start, their prompt
stream and their evaluation prompts, so the comparison is *paired by seed*:
with d_s = x_s - y_s over the n seeds both finished,

    mean d +- t_{1-a/2, n-1} * s_d / sqrt(n)          (the paired t-interval)
    p = 2 * P(T_{n-1} > |mean d| / (s_d / sqrt(n)))    (two-sided paired t-test)

and the minimum detectable difference (MDD) is the true mean difference that
this test, with these n seeds and this spread s_d, would detect with
probability ``power`` (80% by default) at level ``alpha``. It solves the
noncentral t power equation exactly:

    P(|T'_{n-1}(delta)| > t_{1-a/2, n-1}) = power,   delta = MDD * sqrt(n) / s_d,

so a null result reads "no difference larger than MDD". For large n it
tends to the familiar (z_{1-a/2} + z_{power}) * s_d / sqrt(n).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


def t_quantile(df: int, q: float = 0.975) -> float:
    """The ``q`` quantile of Student's t with ``df`` degrees of freedom."""
    from scipy.stats import t

    return float(t.ppf(q, df))


def t_interval(values: Sequence[float], level: float = 0.95) -> tuple[float, float, float]:
    """(mean, low, high): the mean and its two-sided ``level`` t-interval; low = high = nan for n < 2."""
    n = len(values)
    if n == 0:
        return math.nan, math.nan, math.nan
    mean = sum(values) / n
    if n < 2:
        return mean, math.nan, math.nan
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = t_quantile(n - 1, 0.5 + level / 2) * sd / math.sqrt(n)
    return mean, mean - half, mean + half


def t_power(effect: float, sd: float, n: int, alpha: float = 0.05, arms: int = 2) -> float:
    """Power of the two-sided paired t-test for a true mean difference ``effect``, the differences' SD
    ``sd`` and ``n`` seeds; ``arms`` > 2 is the same contrast in a two-way (seed + method) model over that
    many arms, whose residual degrees of freedom are (arms - 1)(n - 1) (``experiments.pooled``): two
    arms give the paired t exactly."""
    from scipy.stats import nct

    if n < 2 or not sd > 0:
        return math.nan
    df = (arms - 1) * (n - 1)
    crit = t_quantile(df, 1 - alpha / 2)
    nc = abs(effect) * math.sqrt(n) / sd
    upper = float(nct.sf(crit, df, nc))
    lower = float(nct.cdf(-crit, df, nc))  # the wrong-sign rejections
    if not math.isfinite(upper):  # scipy's series fails far in the tail, where the normal limit holds
        from scipy.stats import norm

        upper = float(norm.sf(crit - nc))
    return upper + (lower if math.isfinite(lower) else 0.0)


def min_detectable_difference(
    sd: float, n: int, power: float = 0.8, alpha: float = 0.05, arms: int = 2
) -> float:
    """The smallest true mean difference the paired t-test (``arms`` > 2: the pooled contrast, see
    ``t_power``) detects with probability ``power``.

    nan when it is undefined (fewer than 2 pairs); 0 when the differences have no spread.
    """
    from scipy.optimize import brentq

    if n < 2 or not math.isfinite(sd):
        return math.nan
    if sd == 0:
        return 0.0
    hi = sd
    while t_power(hi, sd, n, alpha, arms) < power:  # bracket the root; power rises with the effect
        hi *= 2
    return float(brentq(lambda e: t_power(e, sd, n, alpha, arms) - power, 0.0, hi, xtol=1e-12 * sd))


@dataclass
class PairedComparison:
    """x - y paired by seed: mean difference, its interval, p-value and minimum detectable difference."""

    n: int  # seeds present in both
    diff: float
    low: float
    high: float
    p_value: float
    mdd: float  # at ``power`` and ``alpha``
    sd: float = math.nan  # standard deviation of the n differences (nan for n < 2)
    arms: int = 2  # 2: paired; more: the pooled contrast of a two-way model over that many arms

    @property
    def df(self) -> int:
        """The test's degrees of freedom: n - 1 paired, (arms - 1)(n - 1) pooled."""
        return (self.arms - 1) * (self.n - 1)

    @property
    def pooled(self) -> bool:
        """Whether the interval, MDD and seeds needed rest on a pool of more than two arms."""
        return self.arms > 2

    @property
    def separated(self) -> bool:
        """True when the interval excludes 0 (the two differ at this level)."""
        return self.n >= 2 and (self.low > 0 or self.high < 0)


def paired_comparison(
    x: dict[int, float], y: dict[int, float], level: float = 0.95, power: float = 0.8
) -> PairedComparison:
    """Compare ``x`` against ``y`` (seed -> value) on the seeds both have."""
    from scipy.stats import t

    seeds = sorted(set(x) & set(y))
    d = [x[s] - y[s] for s in seeds]
    n = len(d)
    mean, low, high = t_interval(d, level)
    if n < 2:
        return PairedComparison(n, mean, math.nan, math.nan, math.nan, math.nan)
    sd = math.sqrt(sum((v - mean) ** 2 for v in d) / (n - 1))
    if sd == 0:  # identical differences: the test statistic is 0/0 unless the mean is 0 too
        p = 1.0 if mean == 0 else 0.0
    else:
        p = float(2 * t.sf(abs(mean) / (sd / math.sqrt(n)), n - 1))
    return PairedComparison(n, mean, low, high, p, min_detectable_difference(sd, n, power, 1 - level), sd)


def seeds_needed(
    effect: float, sd: float, power: float = 0.8, alpha: float = 0.05, most: int = 10_000, arms: int = 2
) -> int | None:
    """The fewest pairs (at least 2) with which the paired t-test (``arms`` > 2: the pooled contrast with
    that many arms, see ``t_power``) detects a true mean difference ``effect`` with probability ``power``,
    at the differences' standard deviation ``sd``; None past ``most``, or when it is undefined (no
    effect, or an sd that is 0 or not finite)."""
    if not (effect != 0 and math.isfinite(effect) and math.isfinite(sd) and sd > 0):
        return None
    if t_power(effect, sd, most, alpha, arms) < power:
        return None
    low, high = 1, 2  # power(low) < power <= power(high); power rises with n
    while t_power(effect, sd, high, alpha, arms) < power:
        low, high = high, min(2 * high, most)
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if t_power(effect, sd, mid, alpha, arms) < power else (low, mid)
    return high


def wilson_interval(successes: float, n: float, level: float = 0.95) -> tuple[float, float, float]:
    """(p, low, high): the success rate of ``n`` Bernoulli trials and its Wilson score interval,
    which stays inside [0, 1] and is not empty at 0 or n successes (unlike p +- z sqrt(p(1-p)/n))."""
    from scipy.stats import norm

    if n <= 0:
        return math.nan, math.nan, math.nan
    z = float(norm.ppf(0.5 + level / 2))
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    low = 0.0 if successes <= 0 else max(0.0, centre - half)  # exact at the edges, not 1 - 1e-16
    high = 1.0 if successes >= n else min(1.0, centre + half)
    return p, low, high


def time_to_reach(curve: Sequence[tuple[float, float]], target: float) -> float:
    """The first x (e.g. wall seconds) at which the curve's value reaches ``target``; nan if never."""
    for x, value in curve:
        if value >= target:
            return float(x)
    return math.nan
