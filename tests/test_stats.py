"""Paired-by-seed comparison statistics against closed forms and simulation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import t as student_t

from lightning_rlvr.experiments.stats import (
    min_detectable_difference,
    paired_comparison,
    t_interval,
    t_power,
    time_to_reach,
    wilson_interval,
)


def test_paired_interval_and_p_value_match_the_closed_form_t_with_two_degrees_of_freedom():
    # d = [1, 2, 3]: mean 2, s_d 1, t = 2 / (1 / sqrt 3) = 2 sqrt 3 on 2 df, whose CDF is
    # 1/2 + t / (2 sqrt(t^2 + 2)) in closed form.
    x = {0: 0.5, 1: 0.7, 2: 0.9, 7: 0.1}  # seed 7 has no partner: ignored
    y = {0: -0.5, 1: -1.3, 2: -2.1}
    c = paired_comparison(x, y)
    assert c.n == 3 and c.diff == pytest.approx(2.0)
    half = 4.302652729911275 / math.sqrt(3)  # t_{0.975, 2}
    assert (c.low, c.high) == (pytest.approx(2 - half), pytest.approx(2 + half))
    tval = 2 * math.sqrt(3)
    p = 2 * (0.5 - tval / (2 * math.sqrt(tval**2 + 2)))
    assert c.p_value == pytest.approx(p, rel=1e-9)
    assert not c.separated  # the interval [-0.48, 4.48] holds 0


def test_a_consistent_difference_is_separated_and_a_sign_flip_is_not():
    base = {s: 0.30 + 0.01 * s for s in range(5)}
    better = {s: v + 0.05 + 0.001 * (s % 2) for s, v in base.items()}
    assert paired_comparison(better, base).separated
    assert paired_comparison(base, better).separated and paired_comparison(base, better).diff < 0
    mixed = {s: v + (0.05 if s % 2 else -0.05) for s, v in base.items()}
    assert not paired_comparison(mixed, base).separated


def test_degenerate_inputs_give_defined_answers():
    one = paired_comparison({0: 1.0}, {0: 0.5})
    assert one.n == 1 and one.diff == 0.5 and math.isnan(one.p_value) and not one.separated
    none = paired_comparison({0: 1.0}, {1: 0.5})
    assert none.n == 0 and math.isnan(none.diff)
    same = paired_comparison({0: 0.4, 1: 0.6}, {0: 0.4, 1: 0.6})
    assert same.diff == 0 and same.p_value == 1.0 and same.mdd == 0.0
    shifted = paired_comparison({0: 0.5, 1: 0.7}, {0: 0.4, 1: 0.6})  # identical non-zero differences
    assert shifted.p_value == 0.0 and shifted.mdd == 0.0
    assert math.isnan(min_detectable_difference(1.0, 1))
    assert all(map(math.isnan, t_interval([])))  # nan-valued, never an exception


def test_power_is_alpha_at_no_effect_and_mdd_tends_to_the_normal_formula():
    assert t_power(0.0, 1.0, 10, alpha=0.05) == pytest.approx(0.05, rel=1e-9)
    n, sd = 3000, 0.07
    z = 1.959963984540054 + 0.8416212335729143  # z_{0.975} + z_{0.80}
    assert min_detectable_difference(sd, n) == pytest.approx(z * sd / math.sqrt(n), rel=2e-3)
    # more seeds or less spread detect smaller differences
    assert min_detectable_difference(0.05, 3) > min_detectable_difference(0.05, 10)
    assert min_detectable_difference(0.05, 5) == pytest.approx(2 * min_detectable_difference(0.025, 5))


@pytest.mark.parametrize("n", [3, 5])
def test_a_difference_of_one_mdd_is_detected_80_percent_of_the_time_in_simulation(n):
    sd = 0.04
    mdd = min_detectable_difference(sd, n)
    rng = np.random.default_rng(0)
    d = rng.normal(mdd, sd, size=(20000, n))  # simulated paired differences
    tstat = d.mean(1) / (d.std(1, ddof=1) / math.sqrt(n))
    rejected = np.abs(tstat) > student_t.ppf(0.975, n - 1)
    assert rejected.mean() == pytest.approx(0.8, abs=0.015)


def test_time_to_reach_is_the_first_crossing():
    curve = [(10.0, 0.1), (20.0, 0.31), (30.0, 0.2), (40.0, 0.5)]
    assert time_to_reach(curve, 0.3) == 20.0
    assert time_to_reach(curve, 0.5) == 40.0
    assert math.isnan(time_to_reach(curve, 0.9))


def test_wilson_interval_by_hand_and_at_the_edges():
    # 3 of 128 (the agent quickstart's warm start), z = 1.96: p = 0.0234, centre (p + z^2/256) / (1 + z^2/128)
    p, low, high = wilson_interval(3, 128)
    z = 1.959964
    centre = (3 / 128 + z * z / 256) / (1 + z * z / 128)
    half = z * math.sqrt(3 / 128 * 125 / 128 / 128 + z * z / (4 * 128 * 128)) / (1 + z * z / 128)
    assert p == pytest.approx(3 / 128)
    assert (low, high) == (pytest.approx(centre - half), pytest.approx(centre + half))
    assert (round(low, 3), round(high, 3)) == (0.008, 0.067)
    # 0 or n successes: a non-empty interval that touches the edge and stays in [0, 1]
    p, low, high = wilson_interval(0, 10)
    assert (p, low) == (0.0, 0.0) and high == pytest.approx(z * z / 10 / (1 + z * z / 10))
    p, low, high = wilson_interval(10, 10)
    assert (p, high) == (1.0, 1.0) and low == pytest.approx(1 - z * z / 10 / (1 + z * z / 10))
    assert all(math.isnan(v) for v in wilson_interval(0, 0))  # no trials: no rate, no interval
    # a wider level gives a wider interval around the same rate
    _, low99, high99 = wilson_interval(3, 128, level=0.99)
    assert low99 < wilson_interval(3, 128)[1] and high99 > wilson_interval(3, 128)[2]
