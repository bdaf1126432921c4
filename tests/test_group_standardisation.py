"""Every place that standardises by a group statistic, on all-equal groups: exact zeros (or raw values).

The float32 mean of n equal non-binary values is off by an ulp, which leaves a std of ~1e-8 that a
caller dividing by it turns into credit of ~1e5 (MC credit with ``scale_by_std``). All of them go
through ``objectives.group_mean_std``; this test holds each call site to it.
"""

from __future__ import annotations

import pytest
import torch

from lightning_rlvr.core.objectives import group_advantages, group_mean_std, group_standardize, standardize
from lightning_rlvr.credit.dr_grpo import DrGRPOCredit
from lightning_rlvr.credit.grpo import GRPOCredit
from lightning_rlvr.credit.ktae import KTAECredit
from lightning_rlvr.credit.mc import MonteCarloCredit
from lightning_rlvr.scoring.scorer import Scorer
from tests.test_mc_credit import BAD, EOS, GOOD, ToySampler, toy_rollout

VALUES = [0.7, 0.9, 0.3, 0.1, 1 / 3, 0.37, -0.25, 123.456, 1e-7, 0.0, 1.0]
SIZES = [2, 3, 6, 7, 8, 16, 64]
DTYPES = [torch.float32, torch.float64, torch.bfloat16]


def _equal_and_mixed(value: float, n: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """An all-equal group of n values beside a mixed group (so the equal one is not the whole batch)."""
    values = torch.tensor([value] * n + [1.0, 0.0, 0.5], dtype=dtype)
    group = torch.tensor([0] * n + [1, 1, 1])
    return values, group


def site_group_advantages_scaled(v, g):
    return group_advantages(v, g, scale=True)


def site_group_advantages_centred(v, g):
    return group_advantages(v, g, scale=False)


def site_group_standardize(v, g):
    return torch.cat([group_standardize(v, g), group_standardize(v, g, eps=0.0)]).view(2, -1)[:, :-3]


def site_group_std(v, g):  # the statistic itself (MC divides by it where it is > 0)
    return group_mean_std(v, g)[1]


def site_group_mean_deviation(v, g):
    mean, _ = group_mean_std(v, g)
    return v.to(mean.dtype) - mean


def site_standardize(v, g):  # SC-GRPO's diversity advantage over one group
    return standardize(v[g == 0])


def site_assigners(v, g):  # the sequence advantage every credit assigner builds on
    from lightning_rlvr.core.rollout import Rollout

    r = Rollout.__new__(Rollout)
    r.rewards, r.group = v, g
    outs = [c.group_advantages(r) for c in (GRPOCredit(), DrGRPOCredit(), KTAECredit())]
    return torch.cat(outs)


SITES = [
    site_group_advantages_scaled,
    site_group_advantages_centred,
    site_group_standardize,
    site_group_std,
    site_group_mean_deviation,
    site_standardize,
    site_assigners,
]


@pytest.mark.parametrize("site", SITES, ids=lambda f: f.__name__)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_an_all_equal_group_gives_exact_zeros_at_every_call_site(site, dtype):
    for value in VALUES:
        for n in SIZES:
            v, g = _equal_and_mixed(value, n, dtype)
            out = site(v, g)
            out = out.view(3, -1)[:, :n] if site is site_assigners else out[..., :n]  # three assigners
            assert torch.equal(out, torch.zeros_like(out)), (site.__name__, value, n, dtype, out)


@pytest.mark.parametrize("value,n", [(0.7, 7), (0.9, 8), (0.3, 6), (1 / 3, 16), (123.456, 3)])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_mc_credit_scaled_by_std_keeps_raw_value_differences_in_an_all_equal_group(value, n, dtype):
    """The reported case: [0.7] x 7 with scale_by_std gave credit ~1e5 (std 6.4e-8 + 1e-6)."""
    completions = [[GOOD, BAD, GOOD, EOS], [BAD, GOOD, EOS]] * (n // 2) + [[GOOD, EOS]] * (n % 2)
    rollout = toy_rollout(completions, [value] * n, group_size=n)
    rollout.rewards = rollout.rewards.to(dtype)
    raw, scaled = (
        MonteCarloCredit(num_samples=4, segment="tokens", every=1, scale_by_std=s)
        .assign(rollout, Scorer(None, rollout, sampler=ToySampler(seed=1)))
        .advantages
        for s in (False, True)
    )
    assert torch.equal(scaled, raw)
    assert float(raw.abs().max()) <= 1.0 + abs(value)  # value differences of rewards in [0, 1] and r_i


def test_a_mixed_group_is_still_standardised_by_its_std():
    v, g = _equal_and_mixed(0.7, 7, torch.float32)
    adv = group_advantages(v, g, eps=0.0)
    torch.testing.assert_close(adv[7:], torch.tensor([1.0, -1.0, 0.0]))  # mean 0.5, std 0.5
    mean, std = group_mean_std(torch.tensor([2.0, 4.0, 9.0], dtype=torch.float64), torch.zeros(3).long())
    torch.testing.assert_close(mean, torch.full((3,), 5.0, dtype=torch.float64))
    torch.testing.assert_close(std, torch.full((3,), 13.0**0.5, dtype=torch.float64))
