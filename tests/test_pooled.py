"""The pooled two-way analysis: its numbers against closed forms computed here, the paired t as its two-arm
case, Bartlett's check accepting alike arms and refusing a planted wide one, and collapsed arms left out."""

from __future__ import annotations

import math

import pytest
from scipy.stats import chi2, t

from lightning_rlvr.experiments.pooled import balanced_block, bartlett, collapsed, fit_pool
from lightning_rlvr.experiments.stats import (
    min_detectable_difference,
    paired_comparison,
    seeds_needed,
    t_power,
)

SEEDS = ["1", "2", "3", "4", "5", "6"]
SEED_EFFECT = [0.0, 0.02, -0.01, 0.03, 0.01, -0.02]  # shared by every arm on that seed
NOISE = [0.01, -0.01, 0.01, -0.01, 0.0, 0.0]  # sums to 0; each arm gets it shifted, so arms scatter alike


def arms(means: dict[str, float], scale: dict[str, float] | None = None) -> dict[str, dict[str, float]]:
    """{arm: {seed: mean + seed effect + noise}}: arm i's noise is NOISE rotated by i, times its scale."""
    out = {}
    for i, (arm, mean) in enumerate(means.items()):
        noise = NOISE[i:] + NOISE[:i]
        k = (scale or {}).get(arm, 1.0)
        out[arm] = {s: mean + b + k * e for s, b, e in zip(SEEDS, SEED_EFFECT, noise)}
    return out


def closed_form(values: dict[str, dict[str, float]]) -> tuple[list[float], int, float]:
    """(each arm's residual sum of squares, residual df, residual SD) of the additive two-way fit, written
    out: r = y - arm mean - seed mean + grand mean."""
    names = list(values)
    k, n = len(names), len(SEEDS)
    arm_mean = {a: sum(values[a].values()) / n for a in names}
    seed_mean = {s: sum(values[a][s] for a in names) / k for s in SEEDS}
    grand = sum(arm_mean.values()) / k
    ss = [sum((values[a][s] - arm_mean[a] - seed_mean[s] + grand) ** 2 for s in SEEDS) for a in names]
    df = (k - 1) * (n - 1)
    return ss, df, math.sqrt(sum(ss) / df)


def by_hand(ss: list[float], df: int) -> float:
    """Bartlett's T for k arms sharing ``df`` residual degrees of freedom equally (df / k each)."""
    k = len(ss)
    nu, pooled = df / k, sum(ss) / df
    return (df * math.log(pooled) - sum(nu * math.log(s / nu) for s in ss)) / (1 + (k + 1) / (3 * df))


def test_two_arms_pool_to_the_paired_t_exactly():
    values = arms({"grpo": 0.50, "x": 0.53})
    values["x"]["3"] += 0.02  # so the differences are not all alike
    pool = fit_pool(values, "grpo")
    paired = paired_comparison(values["x"], values["grpo"])
    c = pool.comparisons["x"]
    assert pool.df == paired.n - 1 == 5 and not pool.justified  # two arms: nothing beyond the paired t
    assert pool.sigma**2 == pytest.approx(paired.sd**2 / 2)  # the residual MS is half the differences' var
    for got, want in ((c.diff, paired.diff), (c.low, paired.low), (c.high, paired.high)):
        assert got == pytest.approx(want)
    assert c.p_value == pytest.approx(paired.p_value) and c.mdd == pytest.approx(paired.mdd)


def test_alike_arms_are_pooled_with_the_closed_form_numbers():
    values = arms({"grpo": 0.50, "a": 0.52, "b": 0.47, "c": 0.50})
    ss, df, sigma = closed_form(values)
    pool = fit_pool(values, "grpo")
    assert (pool.df, pool.arms) == (df, ["grpo", "a", "b", "c"]) and df == 15
    assert pool.sigma == pytest.approx(sigma)
    # Bartlett by hand: each arm's share of the df is 15 / 4
    stat = by_hand(ss, df)
    assert pool.statistic == pytest.approx(stat) and pool.p_value == pytest.approx(chi2.sf(stat, 3))
    assert pool.p_value > 0.5 and pool.justified and pool.why == ""
    # a: +2 points over grpo, interval +- t(0.975, 15) * sigma * sqrt(2 / 6)
    half = t.ppf(0.975, 15) * sigma * math.sqrt(2 / 6)
    c = pool.comparisons["a"]
    assert c.diff == pytest.approx(0.02) and (c.low, c.high) == pytest.approx((0.02 - half, 0.02 + half))
    assert c.p_value == pytest.approx(2 * t.sf(0.02 / (sigma * math.sqrt(2 / 6)), 15))
    assert (c.arms, c.df, c.pooled) == (4, 15, True) and c.sd == pytest.approx(sigma * math.sqrt(2))
    # the MDD solves the noncentral t power at df 15, and is smaller than the paired one at the same SD
    assert t_power(c.mdd, c.sd, 6, arms=4) == pytest.approx(0.8, abs=1e-6)
    assert c.mdd < min_detectable_difference(c.sd, 6)


SIX = {"grpo": 0.50, "a": 0.52, "b": 0.47, "c": 0.50, "d": 0.49, "wide": 0.50}


def test_one_arm_with_a_much_wider_spread_refuses_the_pool():
    # six arms, one with 10x the others' noise (the additive fit spreads 1/6 of it onto every other arm)
    values = arms(SIX, scale={"wide": 10.0})
    ss, df, _ = closed_form(values)
    pool = fit_pool(values, "grpo")
    stat = by_hand(ss, df)
    assert pool.statistic == pytest.approx(stat) and stat > chi2.ppf(0.99, 5)  # p < 0.01
    assert pool.p_value == pytest.approx(chi2.sf(stat, 5)) and bartlett(ss, df)[1] == pool.p_value
    assert not pool.justified and "scatter unequally" in pool.why and "widest: wide" in pool.why
    assert pool.comparisons  # still shown, but a verdict does not rest on them


def test_the_heterogeneity_level_is_an_argument():
    values = arms(SIX, scale={"wide": 10.0})
    assert fit_pool(values, "grpo", heterogeneity_alpha=1e-12).justified
    assert fit_pool(arms(SIX), "grpo").justified  # the same arms scattering alike pool
    # the check's reach (pooled.py's docstring): 5x wider among six arms is refused, 20x among four is not
    assert fit_pool(arms(SIX, scale={"wide": 5.0}), "grpo").p_value < 0.01
    four = {"grpo": 0.50, "a": 0.52, "b": 0.47, "wide": 0.50}
    assert 0.05 < fit_pool(arms(four, scale={"wide": 20.0}), "grpo").p_value < 0.07


@pytest.mark.parametrize(
    "runs, floor, why",
    [
        ([0.0, 0.0, 0.0, 0.0, 0.0, 0.0], None, "collapsed (every run at 0)"),
        ([0.01, 0.0, 0.02, 0.0, 0.0, 0.0], 0.05, "collapsed (mean 0.005 below the floor 0.05)"),
    ],
)
def test_collapsed_arms_are_left_out_of_the_pool(runs, floor, why):
    values = arms({"grpo": 0.50, "a": 0.52, "b": 0.47})
    values["dead"] = dict(zip(SEEDS, runs))
    pool = fit_pool(values, "grpo", floor=floor)
    assert pool.excluded == {"dead": why} and pool.arms == ["grpo", "a", "b"]
    assert pool.sigma == pytest.approx(closed_form({a: values[a] for a in pool.arms})[2])
    assert collapsed([0.3, 0.0], floor=0.1) == ""  # a mean of 0.15 is above the floor


def test_an_arm_missing_seeds_the_rest_ran_is_left_out_and_a_collapsed_baseline_pools_nothing():
    values = arms({"grpo": 0.50, "a": 0.52, "b": 0.47, "short": 0.5})
    for seed in ("4", "5", "6"):  # 3 arms x 6 seeds (18 runs) beat 4 arms x 3 seeds (12)
        del values["short"][seed]
    pool = fit_pool(values, "grpo")
    assert pool.excluded == {"short": "not run on seeds 4, 5, 6"} and len(pool.arms) == 3
    assert pool.seeds == SEEDS and pool.seeds_left_out == []
    values["grpo"] = dict.fromkeys(SEEDS, 0.0)
    dead = fit_pool(values, "grpo")
    assert not dead.justified and dead.why.startswith("the baseline is collapsed") and not dead.comparisons


def test_a_seed_only_some_arms_ran_is_left_out_when_that_keeps_more_runs():
    # a study in progress: the baseline a seed ahead, one arm a seed behind the rest
    values = arms({"grpo": 0.50, "a": 0.52, "b": 0.47, "short": 0.5})
    del values["short"]["6"]
    for arm in ("a", "b"):
        del values[arm]["5"], values[arm]["6"]
    pool = fit_pool(values, "grpo")  # 4 arms x seeds 1-4 (16 runs) beat 3 arms x 1-5 (15) and grpo alone
    assert pool.arms == ["grpo", "a", "b", "short"] and pool.seeds == ["1", "2", "3", "4"]
    assert pool.seeds_left_out == ["5", "6"] and pool.excluded == {}
    kept = {a: {s: values[a][s] for s in pool.seeds} for a in pool.arms}
    assert pool.sigma == pytest.approx(fit_pool(kept, "grpo").sigma)  # the same fit as on the block alone


def brute_force_block(seeds: dict[str, set[str]], baseline: str) -> tuple[int, int]:
    """(runs, seeds) of the best block, over every set of arms with the baseline (2^(arms-1) of them)."""
    others = [a for a in seeds if a != baseline]
    best = (0, 0)
    for mask in range(2 ** len(others)):
        chosen = [baseline] + [a for i, a in enumerate(others) if mask >> i & 1]
        block = set.intersection(*(seeds[a] for a in chosen))
        arms_on_it = sum(block <= s for s in seeds.values())
        best = max(best, (arms_on_it * len(block), len(block)))
    return best


@pytest.mark.parametrize("trial", range(40))
def test_the_balanced_block_is_the_best_over_every_set_of_arms(trial):
    import random

    rng = random.Random(trial)
    pool_seeds = [str(i) for i in range(1, rng.randint(2, 9))]
    seeds = {
        arm: {s for s in pool_seeds if rng.random() < rng.choice([0.5, 0.8, 1.0])} or {pool_seeds[0]}
        for arm in ["grpo", *(f"arm{i}" for i in range(rng.randint(1, 6)))]
    }
    block = balanced_block(seeds, "grpo")
    assert block <= seeds["grpo"]
    arms_on_it = sum(block <= s for s in seeds.values())
    assert (arms_on_it * len(block), len(block)) == brute_force_block(seeds, "grpo")


def test_of_two_equal_blocks_the_one_on_the_earlier_seeds_is_kept():
    seeds = {"grpo": {"1", "2", "3", "10"}, "a": {"1", "2", "3"}, "b": {"1", "2", "10"}}
    assert balanced_block(seeds, "grpo") == {"1", "2", "3"}  # 2 arms x 3 seeds either way
    seeds["c"] = {"1", "2", "10"}
    assert balanced_block(seeds, "grpo") == {"1", "2", "10"}  # now 3 arms x 3 seeds


def test_pooled_seeds_needed_use_the_pools_degrees_of_freedom():
    # d = effect / sd = 1: the paired t needs 10 pairs (Cohen); pooled over 8 arms, df 7(n - 1) needs fewer
    paired, pooled = seeds_needed(1.0, 1.0), seeds_needed(1.0, 1.0, arms=8)
    assert paired == 10 and pooled < paired
    assert t_power(1.0, 1.0, pooled, arms=8) >= 0.8 > t_power(1.0, 1.0, pooled - 1, arms=8)
