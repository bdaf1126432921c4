"""Pooled analysis of a sweep's arms: a two-way (seed + method) model, and when pooling is justified.

Layer: experiments (imports ``experiments.stats`` only). Every arm of a method sweep is run on the same
seeds; while it runs, the pool is the balanced block (k arms, n seeds, every arm on every seed) that holds
the most runs (``balanced_block``). With y[a, s] the metric of arm a on seed s the additive model

    y[a, s] = mu + method[a] + seed[s] + e[a, s],    e ~ N(0, sigma^2) for every arm

has residuals r[a, s] = y[a, s] - mean_a - mean_s + grand mean, residual degrees of freedom
(k - 1)(n - 1) and sigma^2 = sum r^2 / ((k - 1)(n - 1)). Arm a against the baseline b is then

    mean_a - mean_b  +-  t_{1-alpha/2, (k-1)(n-1)} * sigma * sqrt(2 / n)

where the paired t has n - 1 degrees of freedom and the spread of one pair of arms only: with 3 seeds
a tiny paired SD is as likely as a huge one, and a verdict that rests on it is luck. With k = 2 the
model *is* the paired t (sigma^2 = s_d^2 / 2), which the tests check.

Pooling assumes every arm scatters alike around the additive model. The check is Bartlett's test on
each arm's residuals: arm a's residual sum of squares has (k - 1)(n - 1) / k degrees of freedom under the
model, so with s_a^2 its mean square and s^2 the pooled one,

    T = [(k-1)(n-1) ln s^2 - sum_a ((k-1)(n-1)/k) ln s_a^2] / (1 + (k + 1) / (3 (k-1)(n-1)))

is chi-square with k - 1 degrees of freedom, and pooling is refused when its p is below
``heterogeneity_alpha``. Bartlett rather than Levene or Brown-Forsythe: it is the likelihood-ratio test
of equal variances under normality, so the most powerful with the 3-10 seeds a sweep has, where
Brown-Forsythe's median-centred deviations are degenerate (with 3 seeds one of each arm's three is 0)
and Levene's have almost no power. Its known fault, rejecting too often when tails are heavy, errs on the
safe side here: a refused pool falls back on the paired t, never on a narrower interval. Its weakness is
few arms: the fit spreads 1/k of one arm's noise onto every other arm, so with 4 arms even a 20x wider arm
can pass (p ~0.06 on 6 seeds), while with 6 arms a 5x wider one is refused (p < 0.01; tests/test_pooled.py).

Collapsed arms (every run at 0, or a mean below the report's ``collapse_floor``) are left out of the
pool: their zero spread would shrink sigma and make every other comparison look sharper than it is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .stats import PairedComparison, min_detectable_difference, t_quantile


@dataclass
class Pool:
    """The two-way fit of one metric over a sweep's arms (see the module docstring)."""

    metric: str
    baseline: str
    arms: list[str]  # in the pool, the baseline first
    seeds: list[str]
    excluded: dict[str, str] = field(default_factory=dict)  # arm -> why it is not in the pool
    seeds_left_out: list[str] = field(default_factory=list)  # the baseline's seeds outside the pool
    df: int = 0
    sigma: float = math.nan  # the residual SD
    statistic: float = math.nan  # Bartlett's T
    p_value: float = math.nan  # of Bartlett's test
    justified: bool = False
    why: str = ""  # why pooling is refused ("" when justified)
    comparisons: dict[str, PairedComparison] = field(default_factory=dict)  # arm -> pooled contrast


def collapsed(values: list[float], floor: float | None = None) -> str:
    """Why an arm is collapsed ("" when it is not): every run at 0, or its mean below ``floor``."""
    if values and all(v == 0 for v in values):
        return "collapsed (every run at 0)"
    if floor is not None and values and sum(values) / len(values) < floor:
        return f"collapsed (mean {sum(values) / len(values):.3f} below the floor {floor:g})"
    return ""


def bartlett(ss: list[float], df: int) -> tuple[float, float]:
    """(T, p) of Bartlett's test on k arms' residual sums of squares ``ss`` of a two-way fit with ``df``
    residual degrees of freedom (each arm's share: df / k); p = 0 when one arm has no residual spread."""
    from scipy.stats import chi2

    k = len(ss)
    total = sum(ss)
    if total <= 0:
        return math.nan, math.nan
    if min(ss) <= 0:
        return math.inf, 0.0
    nu = df / k
    pooled = total / df
    t = (df * math.log(pooled) - sum(nu * math.log(s / nu) for s in ss)) / (1 + (k + 1) / (3 * df))
    return t, float(chi2.sf(t, k - 1))


def _seed_order(seed: str) -> tuple[int, str]:
    return len(seed), seed


def balanced_block(seeds: dict[str, set[str]], baseline: str) -> set[str]:
    """The seeds of the balanced block (arms x seeds, every arm on every seed, the baseline among the arms)
    that holds the most runs, among ``seeds`` ({arm: the seeds it ran}); ties go to more seeds.

    A sweep in progress is ragged (the baseline a seed ahead, a new arm three behind): pooling on the
    baseline's seeds would leave out every arm still catching up, and pooling on the seeds every arm ran
    would throw away the finished arms' runs. The best block's seeds are the seeds some set of arms shares,
    so the candidates are the baseline's seeds intersected with every subset of the arms' seed sets
    (closed under intersection as each arm is added; a handful in practice), each taken with every arm
    that ran all of its seeds.
    """
    candidates = {frozenset(seeds[baseline])}
    for arm_seeds in seeds.values():
        candidates |= {c & arm_seeds for c in candidates}

    def runs(block: frozenset) -> tuple[int, int]:
        return sum(block <= s for s in seeds.values()) * len(block), len(block)

    # max keeps the first of equals: of two blocks alike in size, the one on the earlier seeds
    return set(max(sorted(candidates, key=lambda c: sorted(map(_seed_order, c))), key=runs))


def fit_pool(
    values: dict[str, dict[str, float]],
    baseline: str,
    metric: str = "",
    level: float = 0.95,
    power: float = 0.8,
    floor: float | None = None,
    heterogeneity_alpha: float = 0.05,
) -> Pool:
    """The pool over ``values`` ({arm: {seed: value}}, the baseline among them) on ``balanced_block``'s
    seeds.

    Arms that collapsed or lack one of those seeds are left out (``Pool.excluded``), and so are the
    baseline's other seeds (``Pool.seeds_left_out``); pooling is refused with fewer than 3 arms left (two
    arms: the paired t is the pool), fewer than 2 seeds, no spread, or a Bartlett p below
    ``heterogeneity_alpha``. The contrasts are filled either way, so a refused pool can still be shown; a
    verdict uses them only when ``justified``.
    """
    from scipy.stats import t as student

    dead = {arm: collapsed(list(by_seed.values()), floor) for arm, by_seed in values.items()}
    alive = {arm: set(by_seed) for arm, by_seed in values.items() if not dead[arm]}
    block = balanced_block(alive, baseline) if baseline in alive else set(values.get(baseline, {}))
    seeds = sorted(block, key=_seed_order)
    pool = Pool(metric, baseline, [], seeds)
    pool.seeds_left_out = sorted(set(values.get(baseline, {})) - block, key=_seed_order)
    for arm, by_seed in values.items():
        why = dead[arm]
        missing = [s for s in seeds if s not in by_seed]
        if why:
            pool.excluded[arm] = why
        elif missing:
            pool.excluded[arm] = f"not run on seed{'s' if len(missing) > 1 else ''} {', '.join(missing)}"
        else:
            pool.arms.append(arm)
    if baseline in pool.excluded or baseline not in values:
        pool.why = f"the baseline is {pool.excluded.get(baseline, 'not run')}"
        pool.arms = []
        return pool
    pool.arms.sort(key=lambda a: a != baseline)
    k, n = len(pool.arms), len(seeds)
    if k < 2 or n < 2:
        pool.why = f"{k} arm(s) on {n} seed(s): nothing to pool"
        return pool
    y = {a: [values[a][s] for s in seeds] for a in pool.arms}
    arm_mean = {a: sum(v) / n for a, v in y.items()}
    seed_mean = [sum(y[a][j] for a in pool.arms) / k for j in range(n)]
    grand = sum(arm_mean.values()) / k
    ss = [sum((y[a][j] - arm_mean[a] - seed_mean[j] + grand) ** 2 for j in range(n)) for a in pool.arms]
    pool.df = (k - 1) * (n - 1)
    pool.sigma = math.sqrt(sum(ss) / pool.df)
    se = pool.sigma * math.sqrt(2 / n)
    half = t_quantile(pool.df, 0.5 + level / 2) * se
    sd_pair = pool.sigma * math.sqrt(2)  # the SD of a paired difference the pool implies
    mdd = min_detectable_difference(sd_pair, n, power, 1 - level, arms=k) if se > 0 else math.nan
    for a in pool.arms[1:]:
        diff = arm_mean[a] - arm_mean[baseline]
        p = float(2 * student.sf(abs(diff) / se, pool.df)) if se > 0 else math.nan
        pool.comparisons[a] = PairedComparison(n, diff, diff - half, diff + half, p, mdd, sd_pair, arms=k)
    if k < 3:
        pool.why = "two arms: the pool is the paired t"
        return pool
    pool.statistic, pool.p_value = bartlett(ss, pool.df)
    if not pool.sigma > 0:
        pool.why = "no residual spread"
    elif pool.p_value < heterogeneity_alpha:
        pool.why = (
            f"arms scatter unequally (Bartlett p {pool.p_value:.3f} < {heterogeneity_alpha:g}; widest: "
            f"{pool.arms[max(range(k), key=lambda i: ss[i])]})"
        )
    pool.justified = not pool.why
    return pool
