"""The policy-gradient objective, checked against numbers computed by hand."""

from __future__ import annotations

import math

import pytest
import torch

from lightning_rlvr.core.objectives import (
    group_advantages,
    kl_k3,
    loss_weights,
    standardize,
    zero_std_groups,
)


def aggregate(tok_loss, mask, mode, max_len):
    """The aggregated loss: token losses times the module's per-token weights, summed."""
    return (tok_loss * loss_weights(mask, mode, max_len)).sum()


def test_grpo_advantages_match_hand_computation():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.0, 0.0])
    group = torch.tensor([0, 0, 0, 0, 1, 1])
    adv = group_advantages(rewards, group, eps=0.0)
    # group 0: mean 0.5, unbiased std sqrt(1/3); (1 - 0.5) / 0.57735 = 0.866
    s = math.sqrt(1 / 3)
    expected = torch.tensor([0.5 / s, -0.5 / s, -0.5 / s, 0.5 / s, 0.0, 0.0])
    torch.testing.assert_close(adv, expected)


def test_all_equal_group_gives_zero_advantage_and_no_nan():
    for value in (0.0, 1.0, 0.37):
        rewards = torch.full((4,), value)
        adv = group_advantages(rewards, torch.zeros(4, dtype=torch.long), eps=0.0)
        assert torch.equal(adv, torch.zeros(4))
    assert zero_std_groups(torch.tensor([1.0, 1.0, 0.0, 1.0]), torch.tensor([0, 0, 1, 1])).tolist() == [
        True,
        False,
    ]


def test_dr_grpo_advantages_are_centred_not_scaled():
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0])
    adv = group_advantages(rewards, torch.zeros(4, dtype=torch.long), scale=False)
    torch.testing.assert_close(adv, torch.tensor([0.75, -0.25, -0.25, -0.25]))


def test_single_rollout_groups_are_zero_not_nan():
    adv = group_advantages(torch.tensor([1.0, 0.0]), torch.tensor([0, 1]))
    assert torch.equal(adv, torch.zeros(2))


# token losses [2, 4]: row 0 has 2 tokens, row 1 has 4
TOK = torch.tensor([[1.0, 3.0, 100.0, 100.0], [2.0, 2.0, 2.0, 6.0]])
MASK = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]])


def test_seq_mean_aggregation():
    # mean of per-sequence means: ((1+3)/2 + (2+2+2+6)/4) / 2 = (2 + 3) / 2
    assert aggregate(TOK, MASK, "seq_mean", max_len=4).item() == 2.5


def test_token_mean_aggregation():
    # all 6 real tokens: (1+3+2+2+2+6) / 6
    assert aggregate(TOK, MASK, "token_mean", max_len=4).item() == pytest.approx(16 / 6)


def test_constant_aggregation():
    # Dr. GRPO: token sum over (sequences * L_max) = 16 / (2 * 8)
    assert aggregate(TOK, MASK, "constant", max_len=8).item() == 1.0


def test_weights_split_across_micro_batches_sum_to_the_whole():
    for mode in ("seq_mean", "token_mean", "constant"):
        w = loss_weights(MASK, mode, 4)
        parts = (TOK[:1] * w[:1]).sum() + (TOK[1:] * w[1:]).sum()
        torch.testing.assert_close(parts, aggregate(TOK, MASK, mode, 4))


def test_k3_is_zero_at_equality_and_positive_elsewhere():
    logp = torch.tensor([-1.0, -2.0, -0.5])
    assert torch.equal(kl_k3(logp, logp), torch.zeros(3))
    ref = torch.tensor([-1.5, -1.0, -0.5])
    d = ref - logp
    torch.testing.assert_close(kl_k3(logp, ref), torch.exp(d) - d - 1)
    assert (kl_k3(logp, ref)[:2] > 0).all()


@pytest.mark.parametrize("value", [0.0, 1.0, 0.7, 0.1, 0.37, 1 / 3, -0.25, 0.9, 123.456, 1e-7])
@pytest.mark.parametrize("n", [2, 3, 7, 8, 16, 64])
def test_equal_non_binary_rewards_give_exactly_zero(value, n):
    """The float32 mean of n equal rewards can be off by an ulp (std ~1e-8 > 0): still exactly 0."""
    rewards = torch.full((n,), value)
    for scale in (True, False):
        adv = group_advantages(rewards, torch.zeros(n, dtype=torch.long), scale=scale)
        assert torch.equal(adv, torch.zeros(n)), (value, n, scale, adv)


def test_equal_groups_are_zero_next_to_mixed_groups():
    # group 0: seven 0.7s (the reported case), group 1: mixed, group 2: sixteen 0.3s (overlong-shaped)
    rewards = torch.tensor([0.7] * 7 + [1.0, 0.0] + [0.3] * 16)
    group = torch.tensor([0] * 7 + [1, 1] + [2] * 16)
    adv = group_advantages(rewards, group, eps=0.0)
    assert torch.equal(adv[:7], torch.zeros(7)) and torch.equal(adv[9:], torch.zeros(16))
    s = math.sqrt(0.5)  # unbiased std of [1, 0]
    torch.testing.assert_close(adv[7:9], torch.tensor([0.5 / s, -0.5 / s]))
    assert zero_std_groups(rewards, group).tolist() == [True, False, True]


@pytest.mark.parametrize("value", [0.7, 0.1, 1 / 3, 0.0, 5.0])
@pytest.mark.parametrize("n", [2, 3, 7, 16])
def test_standardize_is_exactly_zero_on_equal_values_and_hand_computed_otherwise(value, n):
    assert torch.equal(standardize(torch.full((n,), value)), torch.zeros(n))
    v = torch.tensor([0.2, 0.4, 0.9])  # mean 0.5, unbiased std sqrt((0.09 + 0.01 + 0.16) / 2)
    sd = math.sqrt(0.13)
    torch.testing.assert_close(standardize(v, eps=0.0), (v - 0.5) / sd)
    assert torch.equal(standardize(torch.tensor([0.3])), torch.zeros(1))  # one value: nothing to spread
